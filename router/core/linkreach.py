"""What a router knows of link routes, for management: each route it can pass an attach on for,
and where the attach goes from here.

    for row in reach(core.link_routes):   # LinkReach snapshots, by route, each route's in the
        ...                                 # order an attach tries them

A route is known here when it is configured here (`local`: a route container connected here
serves it), when an edge router connected to this interior has a container for it (`edge`), when
another interior router advertises it in the mesh's address exchange (`interior`), or, on an edge
router, when the uplink in use says the mesh serves it (`uplink`: kept, unreachable, while there
is no uplink). An attach tries them in that order (router.core.linkroute, `_find`): a container
here, then edge routers by id, then interior routers by path cost; a row is `reachable` when an
attach can go that way now.

Owns: the LinkReach snapshot and reading it from LinkRoutes and the mesh (its routing table,
neighbours and edge connections), lazily: rows are made as they are read, so reading a page
of thousands of routes costs that page (and sorting the routes' keys).
Must not touch: anything it reads (no method changes state).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .linkmatch import AdvertKey, Route, parse_key

if TYPE_CHECKING:
    from .linkroute import LinkRoutes

LOCAL = "local"  # served_by of a route a container connected here serves
UPLINK = "uplink"  # served_by of a route the mesh serves, seen from an edge router


@dataclass(frozen=True, slots=True)
class LinkReach:
    """One place a route is served from, as this router sees it."""

    direction: str  # in | out
    prefix: str | None
    pattern: str | None
    kind: str  # local | edge | interior | uplink
    served_by: str  # "local", an edge router's id, an interior router's id, or "uplink"
    route: str | None  # local: the configured route's name
    containers: int | None  # local: route containers connected here serving it
    next_hop: str | None  # where the attach goes: the edge router, the next hop, the uplink
    cost: int | None  # interior and uplink: the path cost
    reachable: bool  # an attach can go this way now


def _order(key: str) -> tuple[str, str, str]:
    parsed = parse_key(key)
    assert parsed is not None  # (every key held is one of ours: Adverts and Route make them)
    return parsed.value, parsed.kind, parsed.direction


def reach(routes: LinkRoutes) -> Iterator[LinkReach]:
    """Every place every known route is served from: by prefix or pattern, then direction, and
    per route in the order an attach tries them."""
    local: dict[str, list[Route]] = {}
    for route in routes.routes.values():
        local.setdefault(route.key, []).append(route)
    keys = {*local, *routes.at_edges.routes, *routes.remote.routes}
    for key in sorted(keys, key=_order):
        parsed = parse_key(key)
        assert parsed is not None
        yield from _rows(routes, key, parsed, local.get(key, []))


def _rows(routes: LinkRoutes, key: str, parsed: AdvertKey, local: list[Route]) -> Iterator[LinkReach]:
    mesh = routes.mesh
    prefix, pattern = (parsed.value, None) if parsed.kind == "p" else (None, parsed.value)

    def row(kind: str, served_by: str, next_hop: str | None, reachable: bool, *, route: str | None = None,
            containers: int | None = None, cost: int | None = None) -> LinkReach:  # fmt: skip
        return LinkReach(parsed.direction, prefix, pattern, kind, served_by, route, containers, next_hop, cost, reachable)

    for route in local:
        open_ = sum(1 for conn in route.containers if not conn.closed)
        yield row("local", LOCAL, None, open_ > 0, route=route.name, containers=open_)
    at_edges = routes.at_edges.routes.get(key)
    for edge_id in sorted(at_edges.routers) if at_edges is not None else ():
        peer = mesh.edges.edges.get(edge_id)
        yield row("edge", edge_id, edge_id, peer is not None and not peer.conn.closed)
    remote = routes.remote.routes.get(key)
    if remote is None:
        return
    hops, costs = mesh.routes.next_hops, mesh.routes.costs
    for router in sorted(remote.routers, key=lambda r: (costs.get(r, 1 << 62), r)):
        hop = hops.get(router)
        peer = mesh.neighbour(hop) if hop is not None else None
        up = peer is not None and not peer.conn.closed
        if mesh.edge:  # (the router is the uplink the route was learnt through)
            yield row("uplink", UPLINK, hop, up, cost=costs.get(router))
        else:
            yield row("interior", router, hop, up, cost=costs.get(router))
