"""The life of a link-routed pair: from the attach passed on towards the route container to the
detach of both sides (docs/mesh.md, "Link routes").

    pairs = LinkPairs(routes, relay, touched)   # `routes`: LinkRoutes' configured routes, by name
    pairs.pass_on(conn, link, far, route, address, now)   # a matched attach: our link towards the container
    pairs.answered(link)                  # the far side's answer answers the client's attach
    pairs.detached(link, closed, error) / pairs.link_gone(link) / pairs.fail_pair(ctx, error)
    pairs.end_idle_sessions(now)          # the timer's: routed sessions idle for a minute end

Owns: the pairs (`pairs`: the clients' sides, for management), our sessions for routed links on
each connection (towards another router, ended once idle: routedreclaim.py), the attach passed on (its termini rewritten for the container: del_external_prefix,
then add_external_prefix; a name taken on that session gets a `#n` suffix), answering the client's
attach with what the far side answered (the rewriting undone), refusing it when it cannot be
passed on, and tearing a pair down: a detach is relayed with its error; a lost connection detaches
the other side with amqp:not-found naming what was lost, after the outcomes of what was in flight
(linkrelay.fail_unsettled); a graceful stop's credit of routed links and their count of
deliveries in flight.
Collaborators (given by LinkRoutes): its configured routes (read only: the rewriting of an
answer), the Relay, Touched.
Must not touch: matching an attach and choosing where it goes (linkroute.py), what a pair relays
once attached (linkrelay.py), message bytes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from ..amqp import errors as E
from ..amqp.endpoints import ACTIVE, CLOSED, UNINIT
from ..amqp.connection import Connection
from ..amqp.errors import LocalUsageError
from ..amqp.link import Link
from ..amqp.performatives import Error
from ..amqp.session import Session
from ..config.addresses import PRIORITY_LEVELS
from ..config.models import STREAMING_LINKS_MAX
from .connections import ConnState
from .linkmatch import Route, passed_properties, rewrite
from .interrouter import GIVE_BACK_VERSION
from .linkrelay import Relay, RoutedLink, between_routers
from .routedreclaim import IdleRoutedSessions

if TYPE_CHECKING:
    from .touched import Touched


# Sessions for routed links per connection to another router: a stalled routed stream stops
# the links of its session only, so each pair has one of its own while the connection's
# channels allow (routed_sessions), then shares. The mesh's own sessions come first: the control
# link's, one per priority band and one per streaming link (at most 1 + 10 + 32).
MESH_SESSIONS: Final = 1 + PRIORITY_LEVELS + STREAMING_LINKS_MAX
ROUTED_SESSIONS_MAX: Final = 4096  # (a bound of its own: channel-max may be up to 65535)


def routed_sessions(engine: Connection) -> int:
    """How many sessions routed pairs may have on a connection to another router: the channels
    both ends allow (max_sessions_per_connection; transport 2.7.1, channel-max) less those kept
    for the mesh's own, at least 1."""
    channels = min(engine.config.channel_max, engine.remote_channel_max) + 1
    return max(1, min(ROUTED_SESSIONS_MAX, channels - MESH_SESSIONS))


class LinkPairs:
    """See the module docstring; one per LinkRoutes."""

    def __init__(self, routes: dict[str, Route], relay: Relay, touched: Touched) -> None:
        self.routes = routes
        self.relay = relay
        self.touched = touched
        # Our sessions for routed links on a connection: one towards a container; towards
        # another router up to routed_sessions() (see _session).
        self._sessions: dict[ConnState, list[Session]] = {}
        self.idle_sessions = IdleRoutedSessions()  # those towards other routers, ended once idle
        self.pairs: set[RoutedLink] = set()  # the clients' sides of routed pairs (management)

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

    # --- attaches -----------------------------------------------------------------------------------

    def connection_gone(self, conn: ConnState) -> None:
        for session in self._sessions.pop(conn, ()):
            self.idle_sessions.forget(session)

    def _session(self, conn: ConnState, now: float) -> Session:
        """The session a new routed link on `conn` goes in. Towards another router, a session's
        window stops every routed link in it while one of them stalls (linkrelay.between_routers):
        a pair gets a session of its own (one whose pairs all went is reused) while there are
        fewer than routed_sessions(), then shares the one with the fewest links (a session no
        pair has used for a minute ends: `end_idle_sessions`)."""
        sessions = [s for s in self._sessions.get(conn, ()) if s.state.local is ACTIVE and s.state.remote is not CLOSED]
        limit = routed_sessions(conn.engine) if conn.peer is not None else 1
        if sessions and (len(sessions) >= limit or any(not s.links_by_name for s in sessions)):
            self._sessions[conn] = sessions
            session = min(sessions, key=lambda s: len(s.links_by_name))
            self.idle_sessions.used(session)
            return session
        session = conn.engine.begin_session()
        if conn.peer is not None:  # to another router: its window may stop its links only
            between_routers(session, conn)
            if conn.peer.version >= GIVE_BACK_VERSION:  # (an older router would take the end for a broken connection)
                self.idle_sessions.watch(session, now)
        self._sessions[conn] = [*sessions, session]
        return session

    def end_idle_sessions(self, now: float) -> list[Connection]:
        """End the routed sessions towards other routers that no pair used for a minute
        (routedreclaim.py); the engines with output."""
        ended: list[Connection] = []
        for session in self.idle_sessions.due(now):
            for conn, sessions in self._sessions.items():
                if session in sessions:
                    sessions.remove(session)
                    break
            session.end()
            ended.append(session.conn)
        return ended

    def pass_on(self, conn: ConnState, link: Link, far: ConnState, route: Route | None, address: str, now: float) -> None:
        """Attach our link for the client's `link` on `far` (the container's connection, or the
        next router's when `route` is None)."""
        remote = link.remote_attach
        assert remote is not None
        source, target = remote.source, remote.target
        if route is not None:  # to the container itself: its own names
            source, target = rewrite(source, route.outward), rewrite(target, route.outward)
        if conn.peer is not None:  # a routed attach from another router (its routed links' session)
            between_routers(link.session, conn)
        mine = RoutedLink(link, conn, route.name if route is not None else "", address, False)
        link.context = mine
        conn.routed.add(mine)
        self.pairs.add(mine)
        try:
            session = self._session(far, now)
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
            refuse(link, E.RESOURCE_LIMIT_EXCEEDED, f"cannot pass the attach on to the route container: {exc}")
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

    # --- the end of a pair ----------------------------------------------------------------------------

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
        if link.state.local is CLOSED:  # detached both ways (the core then drops link.context)
            ctx.peer = None

    def link_gone(self, link: Link) -> None:
        """A routed link's session ended or its connection is over, without a detach."""
        ctx: RoutedLink = link.context
        if ctx.gone:
            ctx.peer = None
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
        # Its link takes no frame again (the session or the connection is over, and dismantling
        # them drops link.context): the pair's sides stop referring to each other through it,
        # a cycle only the collector freed. The other side, if still attached, keeps its `peer`
        # (gone: the relay reads that as the pair breaking).
        ctx.peer = None

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

    def detach_stalled(self, ctx: RoutedLink, error: Error) -> None:
        """`ctx` took nothing of what it held for its stall time-out (linkrelay.Relay.stalled):
        it is detached with `error`, its pair's other side as when a client detaches, with no
        error (that side did nothing wrong, and a container built on Proton's default handlers
        closes its whole connection on a link error)."""
        if ctx.gone:
            return
        other = ctx.peer
        if other is not None:
            self._break(ctx, other, None)
        else:
            self.relay.fail_unsettled(ctx)
            self._forget(ctx)
        _detach(ctx.link, True, error)
        self.touched.touch(ctx.conn.engine)

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


def refuse(link: Link, condition: str, description: str) -> None:
    """Refuse a client's attach (or a routed attach from another router)."""
    link.reject(Error(condition=condition, description=description))
