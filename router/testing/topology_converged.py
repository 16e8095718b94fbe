"""Whether a simulated network (topology_sim.py) has converged and, while it has not, why.

Owns: `ConvergenceCheck`, which holds each router of the network against the truth (every
router's own link state): its link state against its links up, its local addresses against those
it was given, the link states of its partition, its routes and its address table. The routes the
truth gives each router are computed once per truth. Must not touch: the network (it reads only
what the Network passes in), the protocol (topology/).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from topology.graph import LinkState
from topology.node import TopologyNode
from topology.routes import compute_routes

from .topology_links import Link


class ConvergenceCheck:
    """The convergence check of one Network, with the routes its current truth gives."""

    def __init__(self) -> None:
        self._truth_key: frozenset[tuple[str, LinkState]] = frozenset()
        self._expected: dict[str, Any] = {}  # router id -> the routes the truth gives it

    def problems(
        self, truth: dict[str, LinkState], nodes: Mapping[str, TopologyNode],
        adjacent: Mapping[str, Mapping[str, Link]], addresses: Mapping[str, set[str]],
        names: Iterable[str] | None, limit: int,
    ) -> list[str]:  # fmt: skip
        """Why the network has not converged (empty when it has), up to the router whose
        reasons reach `limit`. `truth` is every router's own link state by router id; `nodes`,
        `adjacent` (name -> peer name -> link) and `addresses` (name -> the local addresses it
        should have) are the Network's."""
        key = frozenset(truth.items())
        if key != self._truth_key:  # route computation is the slow part of a check
            self._truth_key, self._expected = key, {}
        by_id = {node.router_id: node for node in nodes.values()}
        found: list[str] = []
        for name in sorted(nodes) if names is None else names:
            node = nodes[name]
            me = node.router_id
            links = {nodes[p].router_id: link.cost(name) for p, link in adjacent[name].items() if link.up}
            if dict(node.link_state.peers) != links:
                found.append(f"{name}: own link state {dict(node.link_state.peers)} != links {links}")
            if node.local_addresses != addresses[name]:
                found.append(f"{name}: local addresses {sorted(node.local_addresses)} not yet applied")
            expected = self._expected.get(me)
            if expected is None:
                expected = self._expected[me] = compute_routes(truth, me)
            part = expected.reachable | {me}
            held = node.link_states()
            for rid in sorted(part):
                if held.get(rid) != truth[rid]:
                    found.append(f"{name}: link state of {rid} is {held.get(rid)}, not {truth[rid]}")
            if node.routes_pending or not node.routes.same_as(expected):
                found.append(f"{name}: routes {node.routes} != {expected}")
            table: dict[str, set[str]] = {}
            for rid in expected.reachable:
                for address in by_id[rid].local_addresses:
                    table.setdefault(address, set()).add(rid)
            want = {a: frozenset(r) for a, r in sorted(table.items())}
            if node.address_table() != want:
                found.append(f"{name}: address table {node.address_table()} != {want}")
            if len(found) >= limit:
                break
        return found
