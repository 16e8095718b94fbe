"""The network graph that the link states describe, and the Dijkstra that routes are computed by.

Owns: `LinkState` (one router's advertised neighbours and link costs) and `COST_MAX`;
`build_graph`, the graph as a networkx graph (the CLI, analysis, tests); `IndexedGraph`, the same
graph over integer ids with its Dijkstra and first hops, which routes.py reads. Must not touch:
what is made of the trees (next hops, valid origins, radius: routes.py), protocol state, timers,
messages or the clock (node.py, linkstate.py, messages.py); inputs are never mutated, and the
same input gives the same graph whatever the order the mapping was built in (architecture rule 9).

Graph (docs/mesh-protocol.md, "Routes"): one node per router with a link state; an edge A-B only
when A lists B *and* B lists A (a one-way claim is ignored); the edge cost is max(A's cost, B's
cost), as the anchors do with `qd.inter-router-cost` (reference §3.1), so costs are symmetric.

The Dijkstra is written here over integer ids in sorted order rather than taken from networkx:
ties must be broken by id across all equal-cost predecessors (networkx breaks them by insertion
order and returns predecessor lists to sort afterwards), and at 5,000 routers this made route
computation about 3x and a destination's tree about 8x faster than with networkx's Dijkstra.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
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
    _peers: dict[str, int]  # the dict behind `peers`, sorted by id: read directly by IndexedGraph

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


class IndexedGraph:
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
