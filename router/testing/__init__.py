"""The router's test kit, shipped with the package so that tests, benches and other projects
drive the router the same way, with no sockets unless they ask for them.

- `enginepair`: two sans-IO connection engines wired back to back (EnginePair, RawPeer).
- `routerharness`: a RouterCore with client engines wired to it, no tasks (RouterHarness, Client).
- `meshharness`: several RouterCores wired to each other in one process (MeshHarness, Wire).
- `topology_sim` / `topology_art`: a deterministic network of TopologyNodes on a virtual clock,
  and ASCII-art topologies for it.
- `memrouter`: whole RouterServers on a virtual network of memory streams (MemNetwork,
  MemRouter), for tests of behaviour over time on trio's autojump clock.
- `peer`: an in-memory queue endpoint on our engine (the far end of demos and interop tests).

Layering: this package sits on top of the router (it may import any router package and
topology); nothing in router/ or topology/ imports it.
"""
