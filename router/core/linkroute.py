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
attach between routers carries the attach property `mesh.link-route`.

Owns: the configured routes and their matching (router.core.addressing; what a route is, the
reserved forms and address rewriting are linkmatch.py), which route-container
connections serve which route, the routes other routers advertise, choosing where an attach
goes, rewriting the termini for the container (del_external_prefix, then add_external_prefix;
undone in the answer), answering or refusing the client's attach, and tearing pairs down (a detach is
relayed with its error; a lost connection detaches the other side with amqp:not-found naming
what was lost, after the outcomes of what was in flight: linkrelay.fail_unsettled).
Collaborators (given by RouterCore): the mesh (its node, routes and peers), Touched, the router id.
Must not touch: message bytes, other links, the topology protocol.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.endpoints import ACTIVE, CLOSED, UNINIT
from ..amqp.errors import LocalUsageError
from ..amqp.link import Link
from ..amqp.performatives import Error
from ..amqp.session import Session
from ..config.models import LinkRouteConfig
from .addressing import AddressMatcher
from .connections import ConnState
from .linkmatch import (
    MARK, ROUTED_PROPERTY, NoPath, RemoteRoute, Route, passed_properties, rewrite, routing_address,
)  # fmt: skip
from .linkrelay import Relay, RoutedLink

__all__ = ["MARK", "LinkRoutes", "Route"]

if TYPE_CHECKING:
    from .mesh import Mesh
    from .touched import Touched


class LinkRoutes:
    def __init__(self, routes: tuple[LinkRouteConfig, ...], mesh: Mesh, touched: Touched, *, router_id: str) -> None:
        self.mesh = mesh
        self.touched = touched
        self.router_id = router_id
        self.relay = Relay(touched)
        self.relay.fail_pair = self.fail_pair
        self.routes: dict[str, Route] = {}
        self._local: dict[str, AddressMatcher[Route]] = {"in": AddressMatcher(), "out": AddressMatcher()}
        self._remote: dict[str, AddressMatcher[RemoteRoute]] = {"in": AddressMatcher(), "out": AddressMatcher()}
        self.remote_routes: dict[str, RemoteRoute] = {}
        self._advertised: dict[str, int] = {}  # key -> routes with a container here
        self.containers: list[ConnState] = []  # open route-container connections
        self._sessions: dict[ConnState, Session] = {}  # our session for routed links on a connection
        self.pairs: set[RoutedLink] = set()  # the clients' sides of routed pairs (management)
        for config in routes:
            self.add(config)

    # --- a graceful stop -------------------------------------------------------------------------------

    def quiesce(self, connections: Iterable[ConnState]) -> None:
        """A graceful stop begins: the links on which clients (and routers on the way) send
        through a route get their credit set to 0 and no more (as RouterCore.quiesce does for
        other links); what is in flight finishes."""
        self.relay.quiescing = True
        for conn in connections:
            for ctx in conn.routed:
                link = ctx.link
                if not ctx.towards_container and not link.is_sender and link.locally_attached and not ctx.gone:
                    session = link.session
                    if session.state.local is ACTIVE and session.conn.state.local is ACTIVE and not session.conn.finished:
                        link.flow(0)
                        self.touched.touch(conn.engine)

    def in_flight(self, connections: Iterable[ConnState]) -> int:
        """Routed deliveries taken from a sender and not yet settled (both ways)."""
        seen: dict[int, int] = {}
        for conn in connections:
            for ctx in conn.routed:
                maps = ctx.link.session.context
                routed = getattr(maps, "routed", None)
                if routed is not None:
                    seen[id(routed)] = len(routed.received)
        return sum(seen.values())

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
        self._sessions.pop(conn, None)
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
        count = self._advertised.get(key, 0) + change
        self._advertised[key] = count
        node = self.mesh.node
        if node is None or self.mesh.edge:
            return
        if count == 1 and change > 0:
            node.set_local_addresses(added=(key,))
        elif count == 0:
            del self._advertised[key]
            node.set_local_addresses(removed=(key,))
        self.mesh.dirty = True

    def remote_changed(self, key: str, routers: frozenset[str]) -> None:
        """The mesh's address exchange says which routers have a container for route `key`."""
        parts = key[len(MARK):].split("/", 2)
        if len(parts) != 3 or parts[0] not in ("in", "out") or parts[1] not in ("p", "t") or not parts[2]:
            return  # not one of ours: ignored
        direction, kind, value = parts
        routers = routers - {self.router_id}
        old = self.remote_routes.pop(key, None)
        matcher = self._remote[direction]
        if old is not None:
            matcher.remove(old)
        if routers:
            remote = self.remote_routes[key] = RemoteRoute(key, routers)
            (matcher.add_prefix if kind == "p" else matcher.add_pattern)(value, remote)

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
                _refuse(link, E.INVALID_FIELD, "a routed attach between routers names no address")
                return True
            return False
        if address.startswith(MARK):
            _refuse(link, E.INVALID_FIELD, "this address is reserved for the router's link routes")
            return True
        direction = "out" if link.is_sender else "in"
        found = self._find(address, direction, conn)
        if found is None:
            if from_router:
                _refuse(link, E.NOT_FOUND, f"no link route for {address} at router {self.router_id}")
                return True
            return False
        if isinstance(found, NoPath):
            _refuse(link, E.NOT_FOUND, found.description)
            return True
        far, route = found
        limit = far.listener.max_links_per_connection
        if far.peer is None and far.link_count >= limit:  # the container's connection has its bound too
            _refuse(link, E.RESOURCE_LIMIT_EXCEEDED,
                    f"link limit ({limit}) reached on the route container's connection for {address}")  # fmt: skip
            return True
        self._pass_on(conn, link, far, route, address)
        return True

    def _find(self, address: str, direction: str, came_from: ConnState) -> tuple[ConnState, Route | None] | NoPath | None:
        route = self._local[direction].lookup(address)
        if route is not None:
            for conn in route.containers:
                if not conn.closed and conn is not came_from:
                    return conn, route
        remote = self._remote[direction].lookup(address)
        if remote is not None:
            mesh = self.mesh
            hops = mesh.routes.next_hops
            costs = mesh.routes.costs
            for router in sorted(remote.routers, key=lambda r: (costs.get(r, 1 << 62), r)):
                peer = mesh.peers.get(hops.get(router, ""))
                if peer is not None and not peer.conn.closed and peer.conn is not came_from:
                    return peer.conn, None
        if route is not None or remote is not None:
            name = route.name if route is not None else "advertised by another router"
            return NoPath(f"no route container is connected for {address} (link route {name}, direction {direction})")
        return None

    def _session(self, conn: ConnState) -> Session:
        session = self._sessions.get(conn)
        if session is None or session.state.local is not ACTIVE or session.state.remote is CLOSED:
            session = self._sessions[conn] = conn.engine.begin_session()
        return session

    def _pass_on(self, conn: ConnState, link: Link, far: ConnState, route: Route | None, address: str) -> None:
        remote = link.remote_attach
        assert remote is not None
        source, target = remote.source, remote.target
        if route is not None:  # to the container itself: its own names
            source, target = rewrite(source, route.outward), rewrite(target, route.outward)
        mine = RoutedLink(link, conn, route.name if route is not None else "", address, False)
        link.context = mine
        conn.routed.add(mine)
        self.pairs.add(mine)
        try:
            session = self._session(far)
            name, n = link.name, 1
            while (name, not link.role) in session.links_by_name:
                n += 1
                name = f"{link.name}#{n}"
            attach = session.attach_receiver if link.is_sender else session.attach_sender
            other = attach(name, source=source, target=target, snd_settle_mode=remote.snd_settle_mode,
                           rcv_settle_mode=remote.rcv_settle_mode, max_message_size=remote.max_message_size,
                           offered_capabilities=remote.offered_capabilities,
                           desired_capabilities=remote.desired_capabilities,
                           properties=passed_properties(remote.properties, routed=far.peer is not None))  # fmt: skip
        except LocalUsageError as exc:
            self._forget(mine)
            link.context = None
            _refuse(link, E.RESOURCE_LIMIT_EXCEEDED, f"cannot pass the attach on to the route container: {exc}")
            return
        theirs = RoutedLink(other, far, mine.route, address, True)
        other.context = theirs
        far.routed.add(theirs)
        mine.peer, theirs.peer = theirs, mine
        self.touched.touch(far.engine)

    def answered(self, link: Link) -> None:
        """The far side answered the attach we passed on: answer the client's (or the previous
        router's) with what it says, and let credit given meanwhile through."""
        theirs: RoutedLink = link.context
        mine = theirs.peer
        remote = link.remote_attach
        if mine is None or mine.gone or remote is None or mine.link.state.local is not UNINIT:
            return
        route = self.routes.get(mine.route)  # (None on a router on the way: "" names no route)
        source, target = remote.source, remote.target
        if route is not None:  # the container's names: undo the rewriting
            source, target = rewrite(source, route.inward), rewrite(target, route.inward)
        answer: dict[str, Any] = dict(source=source, target=target, snd_settle_mode=remote.snd_settle_mode,
                                      rcv_settle_mode=remote.rcv_settle_mode, max_message_size=remote.max_message_size,
                                      offered_capabilities=remote.offered_capabilities,
                                      desired_capabilities=remote.desired_capabilities,
                                      properties=passed_properties(remote.properties, routed=mine.conn.peer is not None))  # fmt: skip
        if mine.link.is_sender:
            answer["initial_delivery_count"] = 0
        ok = mine.link.answer(**answer)
        self.touched.touch(mine.conn.engine)
        if not ok:  # our answer could not be sent (frame size): the client's link is refused
            self._break(theirs, mine, Error(condition=E.FRAME_SIZE_TOO_SMALL, description="routed attach too large"))
            return
        if mine.link.is_sender and (mine.link.credit > 0 or mine.link.drain):
            self.relay.pass_credit(mine)  # a receiving client gave credit before the answer came

    def detached(self, link: Link, closed: bool, error: Error | None) -> None:
        """One side detached: the other side is detached with its error (outcomes first)."""
        ctx: RoutedLink = link.context
        other = ctx.peer
        if not ctx.gone:
            self.relay.fail_unsettled(ctx)
            self._forget(ctx)
        if other is not None and not other.gone:
            self._forget(other)
            _detach(other.link, closed, error)
            self.touched.touch(other.conn.engine)
        _detach(link, closed, None)
        self.touched.touch(link.session.conn)

    def link_gone(self, link: Link) -> None:
        """A routed link's session ended or its connection is over, without a detach."""
        ctx: RoutedLink = link.context
        if ctx.gone:
            return
        other = ctx.peer
        if ctx.towards_container:
            where = "route container" if ctx.conn.peer is None else f"next router ({ctx.conn.peer.id})"
            error = Error(condition=E.NOT_FOUND,
                          description=f"routed link lost: the connection to the {where} for {ctx.address} closed")  # fmt: skip
        else:
            error = None  # the client is gone: the container sees the link closed
        if other is not None:
            self._break(ctx, other, error)
        else:
            self._forget(ctx)

    def fail_pair(self, ctx: RoutedLink, error: Error) -> None:
        """Detach both sides of `ctx`'s pair with `error` (outcomes first)."""
        other = ctx.peer
        if ctx.gone:
            return
        self.relay.fail_unsettled(ctx)
        self._forget(ctx)
        _detach(ctx.link, True, error)
        self.touched.touch(ctx.conn.engine)
        if other is not None and not other.gone:
            self._forget(other)
            _detach(other.link, True, error)
            self.touched.touch(other.conn.engine)

    def _break(self, lost: RoutedLink, other: RoutedLink, error: Error | None) -> None:
        self.relay.fail_unsettled(lost)
        self._forget(lost)
        if not other.gone:
            self._forget(other)
            _detach(other.link, True, error)
            self.touched.touch(other.conn.engine)

    def _forget(self, ctx: RoutedLink) -> None:
        ctx.gone = True
        ctx.conn.routed.discard(ctx)
        self.pairs.discard(ctx)


def _detach(link: Link, closed: bool, error: Error | None) -> None:
    session = link.session
    if link.state.local is CLOSED or session.state.local is not ACTIVE or session.conn.state.local is not ACTIVE:
        return
    if session.conn.finished:
        return
    link.detach(closed=closed, error=error)


def _refuse(link: Link, condition: str, description: str) -> None:
    link.reject(Error(condition=condition, description=description))
