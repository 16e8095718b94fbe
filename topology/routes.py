"""Route computation: a pure function from a link-state database to one router's routes.

Owns: `LinkState` (one router's advertised neighbours and link costs), `Routes` (what one router
needs to forward: next hop, cost and hop count per reachable router, the radius, valid origins)
and `compute_routes`. Must not touch: protocol state, timers, messages or the clock (node.py,
linkstate.py, messages.py); inputs are never mutated, and the same input gives the same routes
on every router, whatever the order the mapping was built in (architecture rule 9).

Definitions (docs/mesh-protocol.md, "Routes"):
- Graph: one node per router with a link state; an edge A-B only when A lists B *and* B lists A
  (a one-way claim is ignored); the edge cost is max(A's cost, B's cost), as the anchors do with
  `qd.inter-router-cost` (reference §3.1), so costs are symmetric.
- Next hop to D: among the neighbours that start some least-cost path to D, the smallest router
  id. Every router applies the same rule, so forwarding hop by hop from any origin O follows one
  canonical path O -> D.
- Tree of a root R: the least-cost tree from R where each router's parent is its smallest-id
  equal-cost predecessor. With symmetric costs, the parent of X in D's tree is exactly X's next
  hop to D, so D's tree, read upwards, *is* the set of canonical paths towards D.
- Valid origins of D (reference §2.8, §3.3: computed per destination from every root's tree): the
  routers O whose canonical path to D transits me, i.e. my descendants in D's tree. `upstream`
  also says through which neighbour such traffic reaches me; checking that neighbour as well
  makes multicast exactly-once even where equal-cost paths from one origin re-merge.
- Hops and radius: hop counts along my own tree (the paths by which traffic from every origin
  reaches me); radius = the largest of them, so a trace longer than radius + 1 is a loop
  (reference §2.8, item 3).

Cost: `compute_routes` runs one Dijkstra (networkx, full equal-cost predecessor lists, ties broken
here by id, not by networkx's insertion order). Valid origins of a destination need that
destination's tree, one more Dijkstra; they are computed on first use and cached in the Routes
value, because computing all of them is N Dijkstras (bench/README.md, "Topology").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

import networkx as nx

COST_MAX: Final = 2**31 - 1


class LinkState:
    """One router's link state: `peers` maps each HELLO-confirmed neighbour to the cost this
    router configures for that link (reference §3.2, LSU `ls.peers`). Immutable."""

    __slots__ = ("seq", "peers")
    seq: int
    peers: Mapping[str, int]

    def __init__(self, *, seq: int, peers: Mapping[str, int]) -> None:
        for peer, cost in peers.items():
            if not isinstance(peer, str) or not peer:
                raise ValueError(f"peer ids are non-empty strings: {peer!r}")
            if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= COST_MAX:
                raise ValueError(f"link cost to {peer!r} must be an int in [1, {COST_MAX}]: {cost!r}")
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "peers", MappingProxyType(dict(sorted(peers.items()))))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("LinkState is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LinkState) and self.seq == other.seq and self.peers == other.peers

    def __hash__(self) -> int:
        return hash((self.seq, tuple(self.peers.items())))

    def __repr__(self) -> str:
        return f"LinkState(seq={self.seq}, peers={dict(self.peers)!r})"


def build_graph(link_states: Mapping[str, LinkState]) -> nx.Graph[str]:
    """The router graph: nodes and two-way edges added in sorted order, `cost` = max of both ends."""
    graph: nx.Graph[str] = nx.Graph()
    ids = sorted(link_states)
    graph.add_nodes_from(ids)
    edges = []
    for a in ids:
        peers = link_states[a].peers
        for b, cost_a in peers.items():  # peers are kept sorted
            if a < b and b in link_states:
                cost_b = link_states[b].peers.get(a)
                if cost_b is not None:
                    edges.append((a, b, max(cost_a, cost_b)))
    graph.add_weighted_edges_from(edges, weight="cost")
    return graph


class _Tree:
    """A least-cost tree from `root`: parent = smallest-id equal-cost predecessor."""

    __slots__ = ("root", "order", "parent", "dist", "preds")

    def __init__(self, graph: nx.Graph[str], root: str) -> None:
        preds, dist = nx.dijkstra_predecessor_and_distance(graph, root, weight="cost")
        self.root = root
        self.dist: dict[str, int] = {node: int(d) for node, d in dist.items()}  # costs are ints
        self.preds: dict[str, list[str]] = preds
        # Predecessors always have a strictly smaller distance (costs >= 1), so (dist, id) is a
        # topological order of the equal-cost DAG that does not depend on networkx internals.
        self.order = sorted(self.dist, key=lambda node: (self.dist[node], node))
        self.parent = {node: min(preds[node]) for node in self.order[1:]}

    def subtree_masks(self, me: str, index: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
        """For each child C of `me`: (C, bitmask over `index` of C's subtree)."""
        children: dict[str, list[str]] = {}
        for node, parent in self.parent.items():
            children.setdefault(parent, []).append(node)
        result = []
        for child in sorted(children.get(me, ())):
            bits = bytearray(len(index) // 8 + 1)
            stack = [child]
            while stack:
                node = stack.pop()
                i = index[node]
                bits[i >> 3] |= 1 << (i & 7)
                stack.extend(children.get(node, ()))
            result.append((child, int.from_bytes(bits, "little")))
        return tuple(result)


class Routes:
    """One router's routes, computed by `compute_routes`. Immutable; valid origins are filled in
    lazily per destination (a cache inside the value, invisible to callers).

    - `next_hops[D]`: the neighbour to send to for router D (every reachable D except me);
    - `costs[D]`: total link cost of the least-cost path to D;
    - `hops[D]`: hop count of the path by which D's traffic reaches me (my tree);
    - `radius`: max of `hops` (0 when alone); the hop limit for a trace is radius + 1.
    """

    __slots__ = ("me", "next_hops", "costs", "hops", "radius", "_graph", "_index", "_mine", "_cache")

    def __init__(self, me: str, graph: nx.Graph[str]) -> None:
        tree = _Tree(graph, me)
        first: dict[str, str] = {}
        hops: dict[str, int] = {me: 0}
        for node in tree.order[1:]:
            hops[node] = hops[tree.parent[node]] + 1
            # The smallest first hop over *all* least-cost paths, not just the tree's one.
            first[node] = min(node if p == me else first[p] for p in tree.preds[node])
        del hops[me]
        self.me = me
        self.next_hops: Mapping[str, str] = MappingProxyType(dict(sorted(first.items())))
        self.costs: Mapping[str, int] = MappingProxyType({d: tree.dist[d] for d in sorted(first)})
        self.hops: Mapping[str, int] = MappingProxyType(dict(sorted(hops.items())))
        self.radius: int = max(hops.values(), default=0)
        self._graph = graph
        self._index = {node: i for i, node in enumerate(sorted(tree.dist))}
        self._mine = tree
        self._cache: dict[str, tuple[tuple[str, int], ...]] = {}

    @property
    def reachable(self) -> frozenset[str]:
        """Every router I can reach, not counting me."""
        return frozenset(self.next_hops)

    def same_as(self, other: Routes) -> bool:
        """Same next hops, costs and hops (so the same valid origins: same input graph)."""
        return (
            self.me == other.me
            and self.next_hops == other.next_hops
            and self.costs == other.costs
            and self.hops == other.hops
        )

    def _masks(self, dest: str) -> tuple[tuple[str, int], ...]:
        masks = self._cache.get(dest)
        if masks is None:
            tree = self._mine if dest == self.me else _Tree(self._graph, dest)
            masks = self._cache[dest] = tree.subtree_masks(self.me, self._index)
        return masks

    def upstream(self, dest: str, origin: str) -> str | None:
        """The neighbour through which traffic from `origin` to `dest` reaches me, or None when
        its canonical path does not transit me. `dest` may be me (local delivery); `origin` is
        never me (traffic I originate needs no check)."""
        if origin == dest or origin == self.me or dest not in self._index:
            return None
        i = self._index.get(origin)
        if i is None:
            return None
        for neighbour, mask in self._masks(dest):
            if (mask >> i) & 1:
                return neighbour
        return None

    def is_valid_origin(self, dest: str, origin: str) -> bool:
        """The anchors' check (reference §2.8): may traffic from `origin` be forwarded to `dest`?"""
        return self.upstream(dest, origin) is not None

    def valid_origins(self, dest: str) -> frozenset[str]:
        """All origins whose canonical path to `dest` transits me (empty if unreachable)."""
        if dest != self.me and dest not in self.next_hops:
            return frozenset()
        ids = sorted(self._index)
        found: set[str] = set()
        for _, mask in self._masks(dest):
            found.update(ids[i] for i in _bits(mask))
        found.discard(dest)
        return frozenset(found)

    def all_valid_origins(self, dests: Iterable[str] | None = None) -> dict[str, frozenset[str]]:
        """Valid origins of every reachable router (or of `dests`): one Dijkstra each."""
        return {d: self.valid_origins(d) for d in (self.next_hops if dests is None else dests)}

    def __repr__(self) -> str:
        return f"Routes(me={self.me!r}, next_hops={dict(self.next_hops)!r}, radius={self.radius})"


def _bits(mask: int) -> Iterable[int]:
    """Indices of the set bits of `mask`, lowest first (one pass over its binary text)."""
    return (i for i, bit in enumerate(reversed(bin(mask)[2:])) if bit == "1")


def compute_routes(link_states: Mapping[str, LinkState], me: str) -> Routes:
    """Routes of router `me` over `link_states` (router id -> its link state). Pure: no input is
    changed, the result depends only on the mapping's contents. A router missing from the mapping
    (or with no two-way link) reaches nobody."""
    graph = build_graph(link_states)
    if me not in graph:
        graph.add_node(me)
    return Routes(me, graph)
