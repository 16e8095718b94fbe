"""Link routes: attaches passed on to a route container (a broker or service), hop by hop.

An attach whose address matches a link route (the target of a sending client: direction `in`;
the source of a receiving one: `out`; a transaction coordinator's target is `$coordinator`;
a dynamic terminus names its address in the dynamic-node-property `x-opt-qd.address`, as the
anchors do) is not attached at the router. The router attaches a link of its own, the other
way round, towards the container: on the container's connection when it is connected here, else
on the inter-router connection to the next hop towards a router that has it (that router does
the same). The container's answer travels back and answers the client's attach; from then on
the pair relays everything (router.core.linkrelay).

The mesh learns which routers have a container for which route from the mobile address
exchange: a router advertises the reserved address `advert_key(direction, prefix, pattern)`
while at least one container of such a route is connected (docs/mesh-protocol.md). A routed
attach between routers carries the attach property `mesh.link-route`. Edge routers take part
through their edge connections (docs/mesh.md, "Link routes"): an edge learns the mesh's routes
from its uplink in use (router.core.uplinks) and tells it the routes it has containers for,
which the interior serves for the mesh (`edge_served`, router.core.edgehost).

Owns: the configured routes and their matching (router.core.addressing; what a route is, the
reserved forms and address rewriting are linkmatch.py), which route-container
connections serve which route and advertising it to the mesh, the routes other routers
advertise and (on an interior) those its edge routers serve, choosing where an attach goes or
refusing it. The pair's life from there (the attach
passed on and answered, its teardown, a graceful stop's part) is linkpairs.py's, what it relays
linkrelay.py's; LinkRoutes is their surface for the other units.
Collaborators (given by RouterCore): the mesh (its node, routes and peers), Touched (for the pairs
and the relay), the router id.
Must not touch: message bytes, other links, the topology protocol.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

from ..amqp import errors as E
from ..amqp.link import Link
from ..amqp.performatives import Error
from ..config.models import LinkRouteConfig
from .addressing import AddressMatcher
from .connections import ConnState
from .linkmatch import MARK, ROUTED_PROPERTY, Adverts, NoPath, RemoteRoute, Route, parse_key, routing_address
from .linkpairs import LinkPairs, refuse
from .linkrelay import Relay, RoutedLink

__all__ = ["MARK", "LinkRoutes", "Route"]

log = logging.getLogger("router.core")

# The link routes one edge router may have served for it: configured routes are a handful; a
# peer reporting thousands is broken or hostile (every attach here is matched against them).
EDGE_ROUTES_MAX: Final = 1000

if TYPE_CHECKING:
    from .mesh import Mesh
    from .touched import Touched


class LinkRoutes:
    def __init__(self, routes: tuple[LinkRouteConfig, ...], mesh: Mesh, touched: Touched, *, router_id: str) -> None:
        self.mesh = mesh
        self.router_id = router_id
        self.routes: dict[str, Route] = {}
        self._local: dict[str, AddressMatcher[Route]] = {"in": AddressMatcher(), "out": AddressMatcher()}
        # Routes other routers serve (the mesh's address exchange; on an edge router, what its
        # uplink in use says the mesh serves) and, on an interior, routes its edge routers serve
        # (their EDGE-ADDRESSES), by the edge ids.
        self.remote = Adverts()
        self.remote_routes: dict[str, RemoteRoute] = self.remote.routes
        self.at_edges = Adverts()
        self.edge_keys: dict[str, set[str]] = {}  # interior: edge id -> the keys it serves
        # key -> routes with a container here, and (interior) edge routers serving it
        self._advertised: dict[str, int] = {}
        self.containers: list[ConnState] = []  # open route-container connections
        self.relay = Relay(touched)
        self.link_pairs = LinkPairs(self.routes, self.relay, touched)
        self.relay.fail_pair = self.link_pairs.fail_pair
        self.pairs: set[RoutedLink] = self.link_pairs.pairs  # the clients' sides of routed pairs (management)
        for config in routes:
            self.add(config)

    # --- configuration ------------------------------------------------------------------------------

    def add(self, config: LinkRouteConfig) -> Route:
        """Add a route (ValueError if its name is taken); containers connected now serve it at once."""
        route = Route(config)
        if route.name in self.routes:
            raise ValueError(f"a link route named {route.name!r} exists")
        self.routes[route.name] = route
        matcher = self._local[config.direction]
        if config.prefix is not None:
            matcher.add_prefix(config.prefix, route)
        else:
            assert config.pattern is not None
            matcher.add_pattern(config.pattern, route)
        for conn in self.containers:
            if route.serves(conn):
                self._serve(route, conn)
        return route

    def remove(self, name: str) -> bool:
        """Remove a route: new attaches no longer match it; pairs attached through it stay."""
        route = self.routes.pop(name, None)
        if route is None:
            return False
        self._local[route.config.direction].remove(route)
        for conn in list(route.containers):
            self._unserve(route, conn)
        return True

    # --- route containers ----------------------------------------------------------------------------

    def container_opened(self, conn: ConnState) -> None:
        self.containers.append(conn)
        for route in self.routes.values():
            if route.serves(conn):
                self._serve(route, conn)

    def connection_gone(self, conn: ConnState) -> None:
        self.link_pairs.connection_gone(conn)
        if conn in self.containers:
            self.containers.remove(conn)
            for route in self.routes.values():
                if conn in route.containers:
                    self._unserve(route, conn)

    def _serve(self, route: Route, conn: ConnState) -> None:
        route.containers.append(conn)
        if len(route.containers) == 1:
            self._advertise(route.key, +1)

    def _unserve(self, route: Route, conn: ConnState) -> None:
        route.containers.remove(conn)
        if not route.containers:
            self._advertise(route.key, -1)

    def _advertise(self, key: str, change: int) -> None:
        """A container of route `key` came (+1) or went (-1): here, or on an edge router
        connected here. The mesh learns of the first and the last; edge routers of every change
        (which of them has one besides itself)."""
        count = self._advertised.get(key, 0) + change
        if count > 0:
            self._advertised[key] = count
        else:
            self._advertised.pop(key, None)
        mesh = self.mesh
        if mesh.edge:  # the uplink in use learns it from our address set (router.core.uplinks)
            if count == 0 or (count == 1 and change > 0):
                mesh.edges.local_changed()
            return
        mesh.edges.address_changed(key)
        node = mesh.node
        if node is None:
            return
        if count == 1 and change > 0:
            node.set_local_addresses(added=(key,))
        elif count == 0:
            node.set_local_addresses(removed=(key,))
        mesh.dirty = True

    def remote_changed(self, key: str, routers: frozenset[str]) -> None:
        """The mesh's address exchange (on an edge router: the uplink in use) says which routers
        have a container for route `key`."""
        if self.remote.set(key, routers - {self.router_id}) and not self.mesh.edge:
            self.mesh.edges.address_changed(key)

    # --- routes served on edge routers -------------------------------------------------------------

    def advertised_keys(self) -> list[str]:
        """The routes with a container here (an edge router tells its uplink)."""
        return sorted(self._advertised)

    def edge_served(self, edge_id: str, keys: set[str]) -> None:
        """Interior: edge router `edge_id` has containers for exactly the routes `keys` from now
        on (its EDGE-ADDRESSES; none when it goes). This router serves them for the mesh."""
        old = self.edge_keys.pop(edge_id, set())
        keys = {key for key in keys if parse_key(key) is not None}
        if len(keys) > EDGE_ROUTES_MAX:  # (each is a rule every attach here is matched against)
            log.warning("edge router %s reports %d link routes; serving the first %d of them",
                        edge_id, len(keys), EDGE_ROUTES_MAX)  # fmt: skip
            keys = set(sorted(keys)[:EDGE_ROUTES_MAX])
        if keys:
            self.edge_keys[edge_id] = keys
        for key in sorted(keys ^ old):
            edges = frozenset(e for e, served in self.edge_keys.items() if key in served)
            self.at_edges.set(key, edges)
            self._advertise(key, +1 if key in keys else -1)

    def route_keys(self) -> set[str]:
        """Interior: every route with a container anywhere this router knows of."""
        return set(self._advertised) | set(self.remote.routes)

    def served_elsewhere(self, key: str, edge_id: str) -> bool:
        """Interior: route `key` has a container other than on edge router `edge_id` (what that
        edge is told: its clients' attaches may come up its uplink)."""
        own = 1 if key in self.edge_keys.get(edge_id, ()) else 0
        return self._advertised.get(key, 0) > own or key in self.remote.routes

    # --- attaches -----------------------------------------------------------------------------------

    def attach(self, conn: ConnState, link: Link, now: float) -> bool:
        """A client's attach (or a routed attach from another router): pass it on if a link route
        matches (or refuse it); False when it is not link-routed at all."""
        from_router = conn.peer is not None
        if from_router:
            props = link.remote_attach.properties if link.remote_attach is not None else None
            if not any(str(k) == ROUTED_PROPERTY for k in (props or {})):
                return False
        address, terminus = routing_address(link)
        if address is None:
            if from_router:
                refuse(link, E.INVALID_FIELD, "a routed attach between routers names no address")
                return True
            return False
        if address.startswith(MARK):
            refuse(link, E.INVALID_FIELD, "this address is reserved for the router's link routes")
            return True
        direction = "out" if link.is_sender else "in"
        found = self._find(address, direction, conn)
        if found is None:
            if from_router:
                refuse(link, E.NOT_FOUND, f"no link route for {address} at router {self.router_id}")
                return True
            return False
        if isinstance(found, NoPath):
            refuse(link, E.NOT_FOUND, found.description)
            return True
        far, route = found
        limit = far.listener.max_links_per_connection
        if far.peer is None and far.link_count >= limit:  # the container's connection has its bound too
            refuse(link, E.RESOURCE_LIMIT_EXCEEDED,
                   f"link limit ({limit}) reached on the route container's connection for {address}")  # fmt: skip
            return True
        self.link_pairs.pass_on(conn, link, far, route, address, now)
        return True

    def _find(self, address: str, direction: str, came_from: ConnState) -> tuple[ConnState, Route | None] | NoPath | None:
        route = self._local[direction].lookup(address)
        if route is not None:
            for conn in route.containers:
                if not conn.closed and conn is not came_from:
                    return conn, route
        mesh = self.mesh
        at_edge = self.at_edges.lookup(address, direction)  # an edge router connected here
        if at_edge is not None:
            for edge_id in sorted(at_edge.routers):
                peer = mesh.edges.edges.get(edge_id)
                if peer is not None and not peer.conn.closed and peer.conn is not came_from:
                    return peer.conn, None
        remote = self.remote.lookup(address, direction)
        if remote is not None:
            hops = mesh.routes.next_hops
            costs = mesh.routes.costs
            for router in sorted(remote.routers, key=lambda r: (costs.get(r, 1 << 62), r)):
                peer = mesh.neighbour(hops.get(router, ""))
                if peer is not None and not peer.conn.closed and peer.conn is not came_from:
                    return peer.conn, None
        if route is not None or remote is not None or at_edge is not None:
            name = route.name if route is not None else "advertised by another router"
            return NoPath(f"no route container is connected for {address} (link route {name}, direction {direction})")
        return None

    # --- what the pairs do (linkpairs.py) ------------------------------------------------------------

    def answered(self, link: Link) -> None:
        """The far side answered the attach we passed on."""
        self.link_pairs.answered(link)

    def detached(self, link: Link, closed: bool, error: Error | None) -> None:
        """One side of a pair detached."""
        self.link_pairs.detached(link, closed, error)

    def link_gone(self, link: Link) -> None:
        """A routed link's session ended or its connection is over, without a detach."""
        self.link_pairs.link_gone(link)

    def quiesce(self, connections: Iterable[ConnState]) -> None:
        """A graceful stop begins: routed links we receive on get no more credit."""
        self.link_pairs.quiesce(connections)

    def in_flight(self, connections: Iterable[ConnState]) -> int:
        """Routed deliveries taken from a sender and not yet settled (both ways)."""
        return self.link_pairs.in_flight(connections)
