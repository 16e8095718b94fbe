"""The `router.linkRouteReach` entity type: the link routes this router knows, configured here or
learnt, and where an attach matching each goes from here (read-only).

`router.config.linkRoute` lists the routes configured on the router asked; a router in a mesh
also passes attaches on for routes served elsewhere: by another interior router (learnt from the
mesh's address exchange), by an edge router connected to it, or, on an edge router, by the mesh
through its uplink. One entity per route and place it is served from (router.core.linkreach), so
that an operator sees why an attach is passed on, or refused with `amqp:not-found`.

Owns: the attribute names and how each maps from the core's LinkReach snapshots; identities.
Must not touch: the core's link routes (read only); configured routes (link_routes.py).
Rows are read lazily in a stable order (by prefix or pattern, then direction, then the order an
attach tries them), so that QUERY's offset and count (HTTP `$skip`, `$top`) page a long listing
at the cost of the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core.linkreach import LinkReach, reach
from .model import Attribute, EntityType

if TYPE_CHECKING:
    from .agent import ManagementAgent


class LinkRouteReachType(EntityType):
    short_name = "router.linkRouteReach"
    description = ("A link route this router can pass an attach on for, and where: a route container connected "
                   "here, an edge router connected here, another interior router, or (on an edge router) the mesh "
                   "through the uplink. One entity per route and place it is served from")  # fmt: skip
    attributes = (
        Attribute("direction", "string", "in: clients send to the container; out: clients receive from it"),
        Attribute("prefix", "string", "The route's prefix (or null: a pattern)"),
        Attribute("pattern", "string", "The route's pattern (or null: a prefix)"),
        Attribute("kind", "string", "local (configured here, a route container connects here), edge (an edge router "
                  "connected here has a container for it), interior (another interior router advertises it), "
                  "uplink (on an edge router: the mesh serves it, through the uplink)"),
        Attribute("servedBy", "string", "local, the edge router's or the interior router's id, or uplink"),
        Attribute("route", "string", "local: the configured link route's name"),
        Attribute("containerCount", "long", "local: route containers for it connected here now"),
        Attribute("nextHop", "string", "Where a matching attach goes: the edge router, the next hop towards the "
                  "interior router, the uplink; null while there is no path"),
        Attribute("cost", "long", "interior and uplink: the path cost"),
        Attribute("reachable", "boolean", "A matching attach can go this way now (a container is connected, the "
                  "edge router's connection is up, the router has a next hop)"),
    )  # fmt: skip

    def entities(self, agent: ManagementAgent, now: float) -> Iterator[dict[str, Any]]:
        for row in reach(agent.core.link_routes):
            yield self._entity(row)

    def _entity(self, r: LinkReach) -> dict[str, Any]:
        match = f"prefix:{r.prefix}" if r.prefix is not None else f"pattern:{r.pattern}"
        name = f"{r.direction}:{match}@{r.served_by}"
        return self.entity(
            f"linkRouteReach/{name}", name, direction=r.direction, prefix=r.prefix, pattern=r.pattern, kind=r.kind,
            servedBy=r.served_by, route=r.route, containerCount=r.containers, nextHop=r.next_hop, cost=r.cost,
            reachable=r.reachable,
        )  # fmt: skip
