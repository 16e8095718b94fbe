"""`topology costs`: the pipeline's suggested link costs beside the mesh's current ones, and
applying them through management.

Owns: the diff (a link's current cost is the larger of both ends', read live from the routers
as `topology links` does) and how a cost is applied. A link's cost at one end comes from the
connector that dialled it or from the listener that accepted it; the suggestion is applied by
an UPDATE of the connector's `cost` (on whichever end dialled, found through the `connection`
entity: role inter-router, dir out, container = the other router). A connector UPDATE restarts
its connection (docs/management.md, `connector`), so the link drops and comes back at once with
the new cost. A listener's cost is not changed (it is shared by every link it accepted): when
the accepting end's cost is higher than the suggestion, the link keeps that cost and the
command says so. Routers refuse management writes relayed by another router, so the UPDATE
goes to the dialling router itself: the bus router, or one named with --connect ID=HOST:PORT.
Must not touch: the aggregates' meaning (pipeline/), rendering of the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table

from router.net.management_client import ManagementSession, node_address

from .analytics import Row
from .network import Network

CONNECTION = "org.apache.qpid.dispatch.connection"
CONNECTOR = "org.apache.qpid.dispatch.connector"


@dataclass
class CostChange:
    a: str
    b: str
    current: int | None  # the link's cost now (None: the mesh has no such link now)
    suggested: int
    rtt_us: float | None

    @property
    def action(self) -> str:
        if self.current is None:
            return "skip: not a link of the mesh now"
        return "keep" if self.current == self.suggested else f"{self.current} -> {self.suggested}"

    @property
    def applies(self) -> bool:
        return self.current is not None and self.current != self.suggested


def diff(network: Network, suggested: list[Row]) -> list[CostChange]:
    links = {(link.a, link.b): link for link in network.links()}
    changes = []
    for row in sorted(suggested, key=lambda r: (str(r["router_a"]), str(r["router_b"]))):
        a, b = sorted((str(row["router_a"]), str(row["router_b"])))
        link = links.get((a, b))
        current = link.cost if link is not None and link.two_way else None
        rtt = row.get("rtt_us")
        changes.append(CostChange(a, b, current, int(row["suggested_cost"]), float(rtt) if rtt is not None else None))
    return changes


def diff_table(changes: list[CostChange], bus: str) -> Table:
    table = Table(title=f"Link costs: now (read from the routers through {bus}) and suggested")
    for column in ("link", "median RTT", "now", "suggested", "change"):
        table.add_column(column)
    for c in changes:
        rtt = "-" if c.rtt_us is None else f"{c.rtt_us / 1000:,.2f} ms"
        table.add_row(f"{c.a} - {c.b}", rtt, "-" if c.current is None else str(c.current), str(c.suggested), c.action)
    return table


def _where(router: str, bus: str) -> str:
    return node_address(None if router == bus else router)


async def _connector_towards(mgmt: ManagementSession, router: str, peer: str, bus: str) -> str | None:
    rows = await mgmt.query_dicts(CONNECTION, ["container", "role", "dir", "connector"], address=_where(router, bus))
    for row in rows:
        if row.get("role") == "inter-router" and row.get("dir") == "out" and row.get("container") == peer and row.get("connector"):
            return str(row["connector"])
    return None


async def locate(mgmt: ManagementSession, network: Network, change: CostChange) -> tuple[str, str] | None:
    """(router, connector): the end of the link that dialled it, and its connector (read through
    the mesh); None when neither end has one."""
    for router, peer in ((change.a, change.b), (change.b, change.a)):
        connector = await _connector_towards(mgmt, router, peer, network.bus)
        if connector is not None:
            return router, connector
    return None


async def set_cost(mgmt: ManagementSession, connector: str, cost: int) -> None:
    """UPDATE the connector's cost on the router `mgmt` is connected to. Routers refuse
    management writes that come through another router (docs/security.md), so this session
    must be the router's own."""
    await mgmt.update(CONNECTOR, {"cost": cost}, name=connector)


def applied_line(network: Network, change: CostChange, router: str, connector: str) -> str:
    peer = change.b if router == change.a else change.a
    line = f"{change.a} - {change.b}: connector {connector!r} on {router} now has cost {change.suggested}"
    accepting_end = network.routers[peer].link_costs.get(router) if peer in network.routers else None
    if accepting_end is not None and accepting_end > change.suggested:
        line += f" (but {peer}'s listener says {accepting_end}, and the link costs the larger end's)"
    return line
