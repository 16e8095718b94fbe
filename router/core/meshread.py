"""The mesh's read API: what management and the `topology` CLI show (docs/mesh.md, "Read API").

Owns: read-only views over the topology node and the mesh's state (link states with costs,
neighbours, every other router with next hop, cost and valid origins, the routers with
consumers per address, and how a delivery to an address would be routed from this router).
Must not touch: anything it reads (the node, routes, the address table): no method changes state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topology.node import TopologyNode
from topology.routes import Routes

from .interrouter import Peer
from .links import OutLink

if TYPE_CHECKING:
    from .edge import Edges
    from .liveness import Liveness
    from .peering import Peering
    from .table import AddressTable


class MeshReadApi:
    """Mixed into router.core.mesh.Mesh, whose state it reads."""

    table: AddressTable
    me: str
    node: TopologyNode | None
    routes: Routes
    peers: dict[str, Peer]
    links: dict[str, OutLink]
    dropped_loop: int
    dropped_invalid_origin: int
    malformed_control: int
    peering: Peering
    edges: Edges
    liveness: Liveness

    def remote_for(self, key: str) -> frozenset[str]:
        raise NotImplementedError

    @property
    def replaced_connections(self) -> int:
        """Connections to a router closed because another to the same router was kept."""
        return self.peering.replaced + self.edges.replaced

    @property
    def refused_duplicates(self) -> int:
        """Connections refused for claiming the id of a connected, live router."""
        return self.peering.refused_duplicates

    def counters(self) -> dict[str, int]:
        """Forwarding and connection counters of the mesh."""
        return {
            "droppedLoop": self.dropped_loop, "droppedInvalidOrigin": self.dropped_invalid_origin,
            "malformedControl": self.malformed_control, "replacedConnections": self.replaced_connections,
            "droppedControl": sum(p.dropped for p in self.peers.values()),
            "refusedDuplicates": self.refused_duplicates, "silentClosed": self.liveness.closed,
        }  # fmt: skip

    def edge_connections(self) -> dict[str, Any]:
        """Interior: {"edges": {edge id: [addresses it consumes]}}; edge: {"uplinks": [interior
        ids, oldest first], "active": the one in use, "failovers": count}."""
        return self.edges.read()

    def link_states(self) -> dict[str, dict[str, int]]:
        """Every router's link state as this router holds it: router -> {neighbour: its cost}
        (each end's own configured cost; a link's cost is the max of both)."""
        if self.node is None:
            return {self.me: {}}
        return {rid: dict(ls.peers) for rid, ls in sorted(self.node.link_states().items())}

    def neighbours(self) -> dict[str, dict[str, Any]]:
        """Routers with an inter-router connection up: link cost and connection identity."""
        return {rid: {"cost": p.cost, "connection": p.conn.id, "two_way": self.node is not None and rid in self.node.neighbours}
                for rid, p in sorted(self.peers.items())}  # fmt: skip

    def routers(self) -> list[dict[str, Any]]:
        """Every other router known: id, instance, reachable, next hop, cost, hops, its
        neighbours (link state), valid origins, the link towards it."""
        if self.node is None:
            return []
        routes, states = self.routes, self.node.link_states()
        out = []
        for rid, info in self.node.routers().items():
            hop = routes.next_hops.get(rid)
            link = self.links.get(hop) if hop is not None else None
            out.append({
                "id": rid, "instance": info.instance, "reachable": info.reachable, "next_hop": hop,
                "cost": routes.costs.get(rid), "hops": routes.hops.get(rid),
                "neighbours": sorted(states[rid].peers) if rid in states else [],
                "valid_origins": sorted(routes.valid_origins(rid)) if hop is not None else [],
                "link": link.id if link is not None else None, "last_heard": info.last_heard,
            })  # fmt: skip
        return out

    def address_routers(self) -> dict[str, list[str]]:
        """Mobile address -> the routers with consumers for it (this one included)."""
        table: dict[str, set[str]] = {}
        if self.node is not None:
            for address, routers in self.node.address_table().items():
                table[address] = set(routers)
            for address in self.node.local_addresses:
                table.setdefault(address, set()).add(self.me)
        return {address: sorted(routers) for address, routers in sorted(table.items())}

    def explain(self, address: str) -> dict[str, Any]:
        """Where a delivery to `address` sent to this router would go, and why: its table key
        and distribution, local consumers, and each router with consumers (cost, next hop);
        for closest, the routers a delivery would go to now."""
        table = self.table
        key = table.key_of(address)
        if key is None:
            return {"address": address, "key": None, "routable": False}
        entry = table.entries.get(key[0])
        kind = key[0][0]
        distribution = entry.distribution if entry is not None else (
            {"R": "closest", "T": "multicast"}.get(kind) or table.distribution_for(key[1]))  # fmt: skip
        remote = entry.remote if entry is not None else self.remote_for(key[0])
        routes = self.routes
        paths = [(r, routes.costs[r], routes.next_hops[r]) for r in sorted(remote) if r in routes.next_hops]
        local = len(entry.consumers) if entry is not None else 0
        in_process = entry is not None and entry.local is not None
        if distribution == "closest" and (local or in_process):
            chosen = [self.me]
        elif distribution == "closest" and paths:
            low = min(cost for _, cost, _ in paths)
            chosen = [r for r, cost, _ in paths if cost == low]
        else:
            chosen = ([self.me] if local or in_process else []) + [r for r, _, _ in paths]
        destinations = [{"router": r, "cost": cost, "next_hop": hop} for r, cost, hop in paths]
        return {
            "address": address, "key": key[0], "routable": bool(local or in_process or destinations),
            "distribution": distribution, "local_consumers": local, "in_process": in_process,
            "destinations": destinations, "chosen": chosen,
            "next_hops": sorted({hop for r, _, hop in paths if r in chosen}),
        }  # fmt: skip
