"""Route computation: a pure function from a link-state database to one router's routes.

Owns: `Routes` (what one router needs to forward: next hop, cost and hop count per reachable
router, the radius, valid origins) and `compute_routes`. Must not touch: the graph and its
Dijkstra (graph.py, with `LinkState`), protocol state, timers, messages or the clock (node.py,
linkstate.py, messages.py); inputs are never mutated, and the same input gives the same routes on
every router, whatever the order the mapping was built in (architecture rule 9).

Definitions (docs/mesh-protocol.md, "Routes"; the graph and its edge costs: graph.py):
- Next hop to D: among the neighbours that start some least-cost path to D, the smallest router
  id. Every router applies the same rule, so forwarding hop by hop from any origin O follows one
  canonical path O -> D.
- Tree of a root R: the least-cost tree from R where each router's parent is its smallest-id
  equal-cost predecessor. With symmetric costs, the parent of X in D's tree is exactly X's next
  hop to D, so D's tree, read upwards, *is* the set of canonical paths towards D.
- Valid origins of D (reference §2.8, §3.3: computed per destination from every root's tree): the
  routers O whose canonical path to D transits me, i.e. my descendants in D's tree. `upstream`
  also says through which neighbour such traffic reaches me. (Canonical paths from one origin
  never re-merge once they part, so a router on them receives one copy of a multicast message.)
- Hops and radius: hop counts along my own tree (the paths by which traffic from every origin
  reaches me); radius = the largest of them, so a trace longer than radius + 1 is a loop
  (reference §2.8, item 3).

Cost (bench/README.md, "Topology"): `compute_routes` runs one Dijkstra. Valid origins of a
destination need that destination's tree, one more Dijkstra, stopped as soon as no router left
can be below me in it; they are computed on first use and cached in the Routes value (the
anchors compute all N trees on every change, which is why they cap a network at 128 routers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from .graph import IndexedGraph, LinkState


class Routes:
    """One router's routes, computed by `compute_routes`. Immutable; valid origins are filled in
    lazily per destination (a cache inside the value, invisible to callers).

    - `next_hops[D]`: the neighbour to send to for router D (every reachable D except me);
    - `costs[D]`: total link cost of the least-cost path to D;
    - `hops[D]`: hop count of the path by which D's traffic reaches me (my tree);
    - `radius`: max of `hops` (0 when alone); the hop limit for a trace is radius + 1.
    """

    __slots__ = ("me", "next_hops", "costs", "hops", "radius", "_graph", "_cache", "_shape")

    def __init__(self, me: str, graph: IndexedGraph) -> None:
        i_me = graph.index[me]
        dist, parent, order = graph.tree(i_me)
        ids = graph.ids
        first = graph.first_hops(i_me, dist, order)
        hops = [0] * len(ids)
        for v in order[1:]:
            hops[v] = hops[parent[v]] + 1
        reached = sorted(order[1:])  # ids order
        self.me = me
        self.next_hops: Mapping[str, str] = MappingProxyType({ids[v]: ids[first[v]] for v in reached})
        self.costs: Mapping[str, int] = MappingProxyType({ids[v]: dist[v] for v in reached})
        self.hops: Mapping[str, int] = MappingProxyType({ids[v]: hops[v] for v in reached})
        self.radius: int = max((hops[v] for v in reached), default=0)
        self._graph = graph
        self._cache: dict[str, Mapping[str, str]] = {me: self._below(parent, order, i_me)}
        self._shape: tuple[tuple[str, tuple[tuple[str, int], ...]], ...] | None = None

    @property
    def reachable(self) -> frozenset[str]:
        """Every router I can reach, not counting me."""
        return frozenset(self.next_hops)

    def same_as(self, other: Routes) -> bool:
        """Same next hops, costs and hops over the same graph. The graph matters on its own: a
        link between two other routers can change their paths, hence my valid origins, while
        every path from me stays as it was."""
        return (
            self.me == other.me
            and self.next_hops == other.next_hops
            and self.costs == other.costs
            and self.hops == other.hops
            and (self._graph.ids == other._graph.ids and self._graph.adj == other._graph.adj
                 or self._component() == other._component())
        )  # fmt: skip

    def _component(self) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
        """The links of my part of the network, by id (link states of routers I cannot reach
        are left out: they cannot change a path or a tree that I use)."""
        if self._shape is None:
            ids, adj = self._graph.ids, self._graph.adj
            mine = sorted(self._graph.index[rid] for rid in (self.me, *self.next_hops))
            self._shape = tuple((ids[i], tuple((ids[j], c) for j, c in adj[i])) for i in mine)
        return self._shape

    def _below(self, parent: list[int], order: list[int], i_me: int) -> Mapping[str, str]:
        """origin -> my child through which it hangs below me, in a tree settled in `order`."""
        ids = self._graph.ids
        branch: dict[int, int] = {i_me: -1}
        found: dict[str, str] = {}
        for v in order:
            b = branch.get(parent[v]) if v != i_me else None
            if b is not None:
                branch[v] = v if b < 0 else b
                found[ids[v]] = ids[branch[v]]
        return MappingProxyType(found)

    def _origins(self, dest: str) -> Mapping[str, str]:
        below = self._cache.get(dest)
        if below is None:
            graph = self._graph
            if dest not in self.next_hops:
                below = MappingProxyType({})
            else:
                i_me = graph.index[self.me]
                _, parent, order = graph.tree(graph.index[dest], i_me)
                below = self._below(parent, order, i_me)
            self._cache[dest] = below
        return below

    def upstream(self, dest: str, origin: str) -> str | None:
        """The neighbour through which traffic from `origin` to `dest` reaches me, or None when
        its canonical path does not transit me. `dest` may be me (local delivery); `origin` is
        never me (traffic I originate needs no check)."""
        if origin == dest:
            return None
        return self._origins(dest).get(origin)

    def is_valid_origin(self, dest: str, origin: str) -> bool:
        """The anchors' check (reference §2.8): may traffic from `origin` be forwarded to `dest`?"""
        return self.upstream(dest, origin) is not None

    def valid_origins(self, dest: str) -> frozenset[str]:
        """All origins whose canonical path to `dest` transits me (empty if unreachable)."""
        return frozenset(o for o in self._origins(dest) if o != dest)

    def all_valid_origins(self, dests: Iterable[str] | None = None) -> dict[str, frozenset[str]]:
        """Valid origins of every reachable router (or of `dests`). In bulk, first one Dijkstra
        per neighbour of mine: a destination that no neighbour reaches through me has no router
        below me in its tree, and needs no Dijkstra of its own (a leaf needs none at all)."""
        wanted = list(self.next_hops if dests is None else dests)
        graph = self._graph
        i_me = graph.index[self.me]
        pending = [d for d in wanted if d not in self._cache and d in self.next_hops]
        if len(pending) > 2 * len(graph.adj[i_me]):
            transit: set[int] = set()
            for neighbour, _ in graph.adj[i_me]:
                dist, _, order = graph.tree(neighbour)
                first = graph.first_hops(neighbour, dist, order)
                transit.update(d for d in order[1:] if first[d] == i_me)
            empty: Mapping[str, str] = MappingProxyType({})
            for dest in pending:
                if graph.index[dest] not in transit:
                    self._cache[dest] = empty
        return {d: self.valid_origins(d) for d in wanted}

    def __repr__(self) -> str:
        return f"Routes(me={self.me!r}, next_hops={dict(self.next_hops)!r}, radius={self.radius})"


def compute_routes(link_states: Mapping[str, LinkState], me: str) -> Routes:
    """Routes of router `me` over `link_states` (router id -> its link state). Pure: no input is
    changed, the result depends only on the mapping's contents. A router missing from the mapping
    (or with no two-way link) reaches nobody."""
    return Routes(me, IndexedGraph(link_states, me))
