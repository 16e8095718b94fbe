"""Random router graphs for property tests, and a brute-force reference for routes.

`topologies()` draws link states with small costs (so equal-cost ties are common), asymmetric
configurations and one-way claims. `Reference` computes, by Floyd-Warshall and the rules in
docs/mesh-protocol.md ("Routes") applied literally, what `compute_routes` must return: it shares
no code with topology/routes.py or topology/graph.py beyond their input type, LinkState.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import strategies as st

from topology.graph import LinkState

ID_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789"


@st.composite
def topologies(draw: st.DrawFn, min_size: int = 1, max_size: int = 9, max_cost: int = 3) -> dict[str, LinkState]:
    """Link states of a random graph; ids are random so that sort order != creation order."""
    ids = draw(st.lists(st.text(ID_ALPHABET, min_size=1, max_size=3), min_size=min_size, max_size=max_size, unique=True))
    costs = st.integers(1, max_cost)
    peers: dict[str, dict[str, int]] = {rid: {} for rid in ids}
    for a, b in itertools.combinations(ids, 2):
        kind = draw(st.sampled_from(("none", "none", "both", "both", "both", "asymmetric", "one-way")))
        if kind == "both":
            peers[a][b] = peers[b][a] = draw(costs)
        elif kind == "asymmetric":
            peers[a][b], peers[b][a] = draw(costs), draw(costs)
        elif kind == "one-way":
            src, dst = (a, b) if draw(st.booleans()) else (b, a)
            peers[src][dst] = draw(costs)
    return {rid: LinkState(seq=draw(st.integers(0, 5)), peers=p) for rid, p in peers.items()}


class Reference:
    """Least-cost distances and the canonical next hops, by brute force."""

    def __init__(self, states: dict[str, LinkState]) -> None:
        self.ids = sorted(states)
        self.edges: dict[str, dict[str, int]] = {rid: {} for rid in self.ids}
        for a in self.ids:
            for b, cost in states[a].peers.items():
                back = states[b].peers.get(a) if b in states else None
                if back is not None and a != b:
                    self.edges[a][b] = max(cost, back)
        dist = {a: {b: (0.0 if a == b else math.inf) for b in self.ids} for a in self.ids}
        for a, row in self.edges.items():
            for b, cost in row.items():
                dist[a][b] = cost
        for k in self.ids:
            for i in self.ids:
                for j in self.ids:
                    if dist[i][k] + dist[k][j] < dist[i][j]:
                        dist[i][j] = dist[i][k] + dist[k][j]
        self.dist = dist

    def reachable(self, a: str, b: str) -> bool:
        return a != b and self.dist[a][b] < math.inf

    def next_hop(self, x: str, d: str) -> str:
        """The smallest-id neighbour that starts a least-cost path from x to d."""
        return min(y for y, c in self.edges[x].items() if c + self.dist[y][d] == self.dist[x][d])

    def path(self, x: str, d: str) -> list[str]:
        """x, ..., d following the canonical next hops."""
        path = [x]
        while path[-1] != d:
            path.append(self.next_hop(path[-1], d))
            assert len(path) <= len(self.ids)
        return path

    def valid_origins(self, me: str, d: str) -> frozenset[str]:
        """Origins (not me, not d) whose canonical path to d passes through me."""
        return frozenset(
            o for o in self.ids
            if o not in (me, d) and self.reachable(o, d) and me in self.path(o, d)
        )  # fmt: skip
