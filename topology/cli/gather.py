"""Asking routers for the network: management queries over AMQP, answers as a `Network`.

Owns: which entities are read (`router`, `router.node`, `router.address`, in the attribute
names Qpid Dispatch tools use, plus our `linkCosts` and `router.linkRouteReach`), reaching other routers through the mesh
(`_topo/0/<id>/$management`) and tolerating the ones that do not answer (their view is marked
with the error; the bus router's view of them still shows).
Must not touch: rendering, command-line parsing.
"""

from __future__ import annotations

from typing import Any

import trio

from router.net.management_client import ManagementSession, ManagementStatusError, node_address

from .network import AddressAt, AddressInfo, Network, RouterInfo, matching_routes

ROUTER = "org.apache.qpid.dispatch.router"
NODE = "org.apache.qpid.dispatch.router.node"
ADDRESS = "org.apache.qpid.dispatch.router.address"
LINK_ROUTES = "org.apache.qpid.dispatch.router.linkRouteReach"


def _int(value: Any) -> int | None:
    # int(): AMQP longs arrive as an int subclass that prints as Long(1).
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _link_costs(row: dict[str, Any]) -> dict[str, int | None]:
    costs = row.get("linkCosts")
    if isinstance(costs, dict):
        return {str(k): _int(v) for k, v in costs.items()}
    return {str(peer): None for peer in row.get("linkState") or ()}


def _routes(rows: list[dict[str, Any]], me: str) -> dict[str, tuple[str, int]]:
    routes = {}
    for row in rows:
        hop, cost = row.get("nextHop"), _int(row.get("cost"))
        if row.get("id") != me and isinstance(hop, str) and hop and hop != "(self)" and cost is not None:
            routes[str(row["id"])] = (hop, cost)
    return routes


async def bus_router_id(mgmt: ManagementSession) -> str:
    (row,) = await mgmt.query_dicts(ROUTER, ["id"])
    return str(row["id"])


async def gather(mgmt: ManagementSession, *, each_router: bool = True) -> Network:
    """The network seen from the bus router; with `each_router`, every reachable router's own
    routes too (asked through the mesh, concurrently)."""
    me = await bus_router_id(mgmt)
    rows = await mgmt.query_dicts(NODE)
    routers: dict[str, RouterInfo] = {me: RouterInfo(me, next_hop=None, cost=0, routes=_routes(rows, me))}
    for row in rows:
        rid = str(row.get("id"))
        hop = row.get("nextHop")
        info = routers.setdefault(rid, RouterInfo(rid))
        info.instance = _int(row.get("instance"))
        info.link_costs = _link_costs(row)
        if rid != me:
            info.next_hop = hop if isinstance(hop, str) and hop not in ("", "(self)") else None
            info.cost = _int(row.get("cost"))
            info.reachable = info.next_hop is not None
        origins = row.get("validOrigins")
        if isinstance(origins, list):
            info.valid_origins[me] = [str(o) for o in origins]
    network = Network(bus=me, routers=routers)
    if each_router:
        async with trio.open_nursery() as nursery:
            for rid, info in routers.items():
                if rid != me and info.reachable:
                    nursery.start_soon(_own_view, mgmt, info)
    return network


async def _own_view(mgmt: ManagementSession, info: RouterInfo) -> None:
    try:
        rows = await mgmt.query_dicts(NODE, address=node_address(info.id))
    except Exception as exc:  # one silent router must not hide the rest of the network
        info.error = str(exc) or type(exc).__name__
        return
    info.routes = _routes(rows, info.id)
    for row in rows:
        if row.get("id") == info.id and (row.get("linkCosts") or row.get("linkState")):
            info.link_costs = _link_costs(row)


async def address_at(mgmt: ManagementSession, router: str, address: str, *, bus: str) -> AddressInfo | None:
    """How router `router` sees `address` (None when it has no entry for it)."""
    where = node_address(None if router == bus else router)
    rows = await mgmt.query_dicts(ADDRESS, address=where)
    for row in rows:
        if row.get("address") == address:
            remote = row.get("remoteHostRouters") or []
            return AddressInfo(
                address=address,
                distribution=str(row.get("distribution") or "balanced"),
                local_consumers=_int(row.get("subscriberCount")) or 0,
                remote_routers=[str(r) for r in remote],
            )
    return None


async def link_routes_at(mgmt: ManagementSession, router: str, *, bus: str) -> list[dict[str, Any]]:
    """The link routes router `router` knows (none from a router whose management lacks the type)."""
    try:
        return await mgmt.query_dicts(LINK_ROUTES, address=node_address(None if router == bus else router))
    except ManagementStatusError:
        return []


async def address_everywhere(mgmt: ManagementSession, network: Network, address: str) -> list[AddressAt]:
    """How every router of `network` sees `address`, by router id: its address table's entry and
    the link routes matching it (a router that does not answer is shown with the error, not
    fatal). Every router is asked at once, on the one session."""
    seen = [AddressAt(rid) for rid in sorted(network.routers)]

    async def ask(at: AddressAt) -> None:
        try:
            at.info = await address_at(mgmt, at.router, address, bus=network.bus)
            at.routes = matching_routes(await link_routes_at(mgmt, at.router, bus=network.bus), address)
        except Exception as exc:  # an unreachable router is shown, not fatal
            at.info, at.routes, at.error = None, [], str(exc) or type(exc).__name__

    async with trio.open_nursery() as nursery:
        for at in seen:
            nursery.start_soon(ask, at)
    return seen
