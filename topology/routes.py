"""Route computation: a pure function from a link-state database to one router's routes.

Owns: `LinkState` (one router's advertised neighbours and link costs), `Routes` (what one router
needs to forward: next hop, cost and hop count per reachable router, the radius, valid origins)
and `compute_routes`; `build_graph` gives the same graph as a networkx graph (the CLI, analysis,
tests). Must not touch: protocol state, timers, messages or the clock (node.py, linkstate.py,
messages.py); inputs are never mutated, and the same input gives the same routes on every
router, whatever the order the mapping was built in (architecture rule 9).

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
  also says through which neighbour such traffic reaches me. (Canonical paths from one origin
  never re-merge once they part, so a router on them receives one copy of a multicast message.)
- Hops and radius: hop counts along my own tree (the paths by which traffic from every origin
  reaches me); radius = the largest of them, so a trace longer than radius + 1 is a loop
  (reference §2.8, item 3).

Cost (bench/README.md, "Topology"): `compute_routes` runs one Dijkstra. Valid origins of a
destination need that destination's tree, one more Dijkstra, stopped as soon as no router left
can be below me in it; they are computed on first use and cached in the Routes value (the
anchors compute all N trees on every change, which is why they cap a network at 128 routers).
The Dijkstra is written here over integer ids in sorted order rather than taken from networkx:
ties must be broken by id across all equal-cost predecessors (networkx breaks them by insertion
order and returns predecessor lists to sort afterwards), and at 5,000 routers this made route
computation about 3x and a destination's tree about 8x faster than with networkx's Dijkstra.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

import networkx as nx

COST_MAX: Final = 2**31 - 1


class LinkState:
    """One router's link state: `peers` maps each HELLO-confirmed neighbour to the cost this
    router configures for that link (reference §3.2, LSU `ls.peers`). Immutable."""

    __slots__ = ("seq", "peers", "_peers")
    seq: int
    peers: Mapping[str, int]
    _peers: dict[str, int]  # the dict behind `peers`, sorted by id: read directly by _Graph

    def __init__(self, *, seq: int, peers: Mapping[str, int]) -> None:
        for peer, cost in peers.items():
            if not isinstance(peer, str) or not peer:
                raise ValueError(f"peer ids are non-empty strings: {peer!r}")
            if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= COST_MAX:
                raise ValueError(f"link cost to {peer!r} must be an int in [1, {COST_MAX}]: {cost!r}")
        ordered = dict(sorted(peers.items()))
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "_peers", ordered)
        object.__setattr__(self, "peers", MappingProxyType(ordered))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("LinkState is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LinkState) and self.seq == other.seq and self.peers == other.peers

    def __hash__(self) -> int:
        return hash((self.seq, tuple(self.peers.items())))

    def __repr__(self) -> str:
        return f"LinkState(seq={self.seq}, peers={dict(self.peers)!r})"


def build_graph(link_states: Mapping[str, LinkState]) -> nx.Graph[str]:
    """The router graph as networkx sees it: nodes and two-way edges added in sorted order,
    `cost` = max of both ends. The same graph compute_routes works on."""
    graph: nx.Graph[str] = nx.Graph()
    graph.add_nodes_from(sorted(link_states))
    graph.add_weighted_edges_from(_edges(link_states), weight="cost")
    return graph


def _edges(link_states: Mapping[str, LinkState]) -> list[tuple[str, str, int]]:
    """(a, b, cost) for every two-way link, a < b, in sorted order."""
    edges = []
    for a in sorted(link_states):
        for b, cost_a in link_states[a].peers.items():  # peers are kept sorted
            if a < b:
                other = link_states.get(b)
                cost_b = None if other is None else other.peers.get(a)
                if cost_b is not None:
                    edges.append((a, b, max(cost_a, cost_b)))
    return edges


class _Graph:
    """The graph over integer ids: `ids[i]` in sorted order (so comparing ints compares router
    ids) and `adj[i]` = [(neighbour, cost)] over two-way links at max(both ends' costs)."""

    __slots__ = ("ids", "index", "adj")

    def __init__(self, link_states: Mapping[str, LinkState], me: str) -> None:
        self.ids = ids = sorted(set(link_states) | {me})
        self.index = index = {rid: i for i, rid in enumerate(ids)}
        self.adj: list[list[tuple[int, int]]] = [[] for _ in ids]
        # Each router's row is built from its own peers, which are sorted by id like `ids`: the
        # rows come out sorted, so two graphs compare equal as lists (Routes.same_as).
        peers_of = {rid: state._peers for rid, state in link_states.items()}
        for a, mine in peers_of.items():
            row = self.adj[index[a]]
            for b, cost_a in mine.items():
                theirs = peers_of.get(b)
                if theirs is not None and b != a:  # a router listing itself is no link
                    cost_b = theirs.get(a)
                    if cost_b is not None:
                        row.append((index[b], cost_a if cost_a > cost_b else cost_b))

    def tree(self, root: int, me: int | None = None) -> tuple[list[int], list[int], list[int]]:
        """Dijkstra from `root`: (dist, parent, order). `dist[i]` = -1 when unreachable;
        `parent[i]` = the smallest-id equal-cost predecessor (every predecessor has a smaller
        distance and is settled first, so the last word is the smallest); `order` = settled
        routers by (distance, id). With `me`, stop once no router left can be below me in the
        tree: a descendant's parent is settled before it, so an unsettled descendant has an
        ancestor waiting in the heap at a distance offered by me or a settled descendant; past
        the largest such offer (`bound`) there is none."""
        adj = self.adj
        n = len(adj)
        dist = [-1] * n
        parent = [-1] * n
        below = [False] * n  # me or a descendant of me (only with `me`)
        bound = -1  # -1 until me is settled
        order: list[int] = []
        dist[root] = 0
        heap = [root]  # entries are distance * n + router: one int compares faster than a tuple
        pop, push = heapq.heappop, heapq.heappush
        while heap:
            d, u = divmod(pop(heap), n)
            if d != dist[u]:
                continue  # an entry overtaken by a shorter distance (each is pushed once)
            order.append(u)
            if me is None:
                is_below = False
            elif u == me or (parent[u] >= 0 and below[parent[u]]):
                below[u] = is_below = True
                if d > bound:
                    bound = d
            elif 0 <= bound < d:
                break
            else:
                is_below = False
            for v, cost in adj[u]:
                nd = d + cost
                dv = dist[v]
                if dv < 0 or nd < dv:
                    dist[v] = nd
                    parent[v] = u
                    push(heap, nd * n + v)
                elif nd != dv or u > parent[v]:
                    continue
                else:
                    parent[v] = u
                if is_below and nd > bound:
                    bound = nd
        return dist, parent, order

    def first_hops(self, root: int, dist: list[int], order: list[int]) -> list[int]:
        """For each router settled in `order` from `root`: the smallest neighbour of `root`
        that starts a least-cost path to it, over *all* such paths (not just the tree's): its
        own id next to root, else the smallest first hop of its equal-cost predecessors."""
        adj = self.adj
        first = [-1] * len(adj)
        for v in order[1:]:
            dv, best = dist[v], len(adj)
            for u, cost in adj[v]:
                if dist[u] >= 0 and dist[u] + cost == dv:
                    hop = v if u == root else first[u]
                    if hop < best:
                        best = hop
            first[v] = best
        return first


class Routes:
    """One router's routes, computed by `compute_routes`. Immutable; valid origins are filled in
    lazily per destination (a cache inside the value, invisible to callers).

    - `next_hops[D]`: the neighbour to send to for router D (every reachable D except me);
    - `costs[D]`: total link cost of the least-cost path to D;
    - `hops[D]`: hop count of the path by which D's traffic reaches me (my tree);
    - `radius`: max of `hops` (0 when alone); the hop limit for a trace is radius + 1.
    """

    __slots__ = ("me", "next_hops", "costs", "hops", "radius", "_graph", "_cache", "_shape")

    def __init__(self, me: str, graph: _Graph) -> None:
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
    return Routes(me, _Graph(link_states, me))
