"""Connection and session life cycles as the routing core sees them: every event of a batch that
is not a transfer, disposition or flow (those RouterCore.handle gives the forwarder itself).

    lifecycle = Lifecycle(connections, logins, admission, links, autolinks, link_routes, ending)
    lifecycle.event(state, event, now)            # from RouterCore.handle
    lifecycle.close_connection(state, error, now) # we close it: what is in flight reported first
    lifecycle.connection_gone(state, now)         # every link of it gone (idempotent)

Owns: which unit each of those events goes to (the open, a client's session and attach to
Admission; attaches and detaches to Links, to the link routes when routed, to the auto-links on a
route container's connection), a successful SASL login (the throttle forgets the peer host's
failures), links the engine detached for a protocol violation (gone at once, not when the
client answers), a client's session ended when it holds, unanswered, as many links we detached
(stolen or refused) as the link limit (Links.detaches_ignored), links and sessions between
routers whose loss breaks the connection (it is closed: the connector reconnects; not a
streaming link or its session, given back when idle: router.core.streamreclaim), answering a
peer's end and close, and the steps of a close: the connection's links gone (its in-flight
deliveries reported released/modified) before our close goes out; its end
(router.core.release) when the transport closes.
Collaborators (given by RouterCore): the core's connections, the login throttle, Admission,
Links, AutoLinks, LinkRoutes, ConnectionEnd, Touched.
Must not touch: transfers, dispositions and flows (the forwarder), what each unit does with an
event (attach.py, linkroute.py, autolinks.py, admission.py), what a close releases (release.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp import errors as E
from ..amqp import events as ev
from ..amqp.connection import Connection
from ..amqp.endpoints import ACTIVE, CLOSED, UNINIT
from ..amqp.performatives import Error
from ..amqp.link import Link
from ..amqp.login_throttle import LoginThrottle
from ..amqp.session import Session
from .connections import ConnState, peer_host
from .interrouter import detach_breaks
from .linkrelay import RoutedLink
from .streamreclaim import end_breaks, end_stream_session

if TYPE_CHECKING:
    from .admission import Admission
    from .attach import Links
    from .autolinks import AutoLinks
    from .linkroute import LinkRoutes
    from .release import ConnectionEnd
    from .touched import Touched


class Lifecycle:
    """See the module docstring."""

    def __init__(
        self, connections: dict[Connection, ConnState], logins: LoginThrottle, admission: Admission, links: Links,
        autolinks: AutoLinks, link_routes: LinkRoutes, ending: ConnectionEnd, touched: Touched,
    ) -> None:  # fmt: skip
        self.connections = connections
        self.logins = logins
        self.admission = admission
        self.links = links
        self.autolinks = autolinks
        self.link_routes = link_routes
        self.ending = ending
        self.touched = touched

    def event(self, state: ConnState, event: ev.Event, now: float) -> None:
        engine = state.engine
        match event:
            case ev.RemoteOpen():
                state.opened_at = now
                self.admission.opened(state, now)
            case ev.Authenticated():
                state.sasl_mechanism = event.mechanism
                if not state.outgoing and event.mechanism != "ANONYMOUS":  # (no reset for free)
                    self.logins.succeeded(peer_host(state.host))
            case ev.RemoteBegin():
                session = event.session
                # UNINIT, not "not ACTIVE": the engine may have ended the session already (a
                # session error read in the same batch), and it cannot begin again.
                if session.state.local is UNINIT and engine.state.local is ACTIVE:
                    if state.policy is not None:
                        self.admission.begun(state, session)  # its group's window and limit
                    else:
                        session.begin()
            case ev.ProtocolViolation() if event.scope == "link" and state.policy is not None:
                if event.condition == E.MESSAGE_SIZE_EXCEEDED:  # over the group's max_message_size
                    state.policy.stats.message_size_denied += 1
                # The engine detached the link: it is gone now (what it had in flight is
                # reported), not when the client answers, so it no longer counts as a sender.
                for inl in [inl for inl in state.in_links if inl.link.state.local is CLOSED]:
                    self.links.link_gone(inl.link, now)
            case ev.RemoteAttach() if type(event.link.context) is RoutedLink:
                self.link_routes.answered(event.link)  # the far side answered a routed attach
            case ev.RemoteDetach() if type(event.link.context) is RoutedLink:
                self.link_routes.detached(event.link, event.closed, event.error)
                _let_go_if_done(event.link)
            case ev.RemoteAttach() if self._detaches_ignored(state, event.link):
                error = self.links.detaches_ignored(state, event.link.session)
                assert error is not None
                self._session_gone(state, event.link.session, now)
                event.link.session.end(error)
            case ev.RemoteAttach() if self.admission.quiescing and state.role in ("normal", "route-container"):
                self.admission.refuse_while_quiescing(state, event.link)
            case ev.RemoteAttach() if state.role == "normal":
                self.admission.client_attach(state, event.link, now)
            case ev.RemoteAttach():
                self.links.attach_link(state, event.link, now)
                if state.role == "route-container":  # perhaps the answer to an auto-link's attach
                    self.autolinks.link_attached(event.link, now)
            case ev.RemoteDetach() if (state.peer is not None and engine.state.local is ACTIVE
                                       and detach_breaks(state.peer, event.link)):  # fmt: skip
                self._broken(state, "a link between routers was detached", now)
            case ev.RemoteEnd() if (state.peer is not None and engine.state.local is ACTIVE
                                    and end_breaks(event.session)):  # fmt: skip
                self._broken(state, "a session between routers was ended", now)
            case ev.RemoteDetach():
                self.links.detach_link(event.link, event.closed, event.error, now)
                if state.peer is not None:  # our streaming link, detached both ways: its session ends
                    end_stream_session(event.link)
                if state.role == "route-container":
                    self.autolinks.link_detached(event.link, event.error, now)
                _let_go_if_done(event.link)
            case ev.RemoteEnd():
                self._session_gone(state, event.session, now)
                if event.session.state.local is ACTIVE and engine.state.local is ACTIVE:
                    event.session.end()
                if event.session.state.local is CLOSED:
                    # Ended both ways (a new begin is a new Session) and its links gone from the
                    # core's records: it, its links and what the core hung on them (their
                    # InLink/OutLink, its SessionMaps, whose disposition batches refer back to
                    # it) were cycles only the collector freed, ~40 objects per session a client
                    # begins and ends on a connection that stays (a JMS session is one).
                    event.session.dismantle()
            case ev.RemoteClose():
                self.connection_gone(state, now)
                engine.close()
            case ev.TransportClosed():
                self.connections.pop(engine, None)
                self.ending.release(state, now, reattach=not self.admission.stopping)
            case ev.ProtocolViolation() if event.scope == "connection":
                self.connection_gone(state, now)
            case _:
                pass

    def _detaches_ignored(self, state: ConnState, link: Link) -> bool:
        """Whether the client's session of `link` (an attach) is to be ended: it holds, unanswered,
        as many links we detached as the link limit (Links.detaches_ignored)."""
        session = link.session
        if state.role not in ("normal", "route-container") or state.closed:
            return False  # (links between routers: bounded by the mesh's own)
        if state.engine.state.local is not ACTIVE or session.state.local is not ACTIVE:
            return False
        return self.links.detaches_ignored(state, session) is not None

    def _session_gone(self, state: ConnState, session: Session, now: float) -> None:
        """Every link of `session` is gone (its end, either way)."""
        self.links.session_ended(session, now)
        if state.role == "route-container":
            self.autolinks.session_ended(session, now)

    def close_connection(self, state: ConnState, error: Error, now: float) -> None:
        """Close a connection ourselves: what is in flight on it is reported first."""
        self.connection_gone(state, now)
        engine = state.engine
        if engine.state.local is not CLOSED and not engine.finished:
            engine.close(error)
        self.touched.touch(engine)

    def _broken(self, state: ConnState, what: str, now: float) -> None:
        """Routers keep their links and sessions for the life of the connection: one going
        away leaves the connection half working, so it is closed (the connector reconnects)."""
        self.close_connection(state, Error(condition=E.CONNECTION_FORCED, description=f"{what}: closing the connection"), now)

    def connection_gone(self, state: ConnState, now: float) -> None:
        """Every link of the connection is gone: report in-flight deliveries (released/modified)."""
        if state.closed:
            return
        state.closed = True
        # Every step runs even when one fails (router.core.release); the first failure is this
        # connection's (it ends, and its release sweeps for what was left).
        error = self.ending.links_gone(state, now, reattach=not self.admission.stopping)
        if error is not None:
            raise error


def _let_go_if_done(link: Link) -> None:
    """A link detached both ways takes no frame again (a new attach of its name is a new Link):
    it lets go of the core's record of it (InLink, OutLink, a routed pair's side), which refers
    back to it, as deliveries and management's recent links do: a cycle only the collector
    freed, ~25 objects per link detached on a connection that stays."""
    if link.state.local is CLOSED:
        link.context = None
