"""Admission: what the routing core lets in (connections, sessions, links) and what our open offers.

    admission = Admission(config, connections, logins, links, autolinks, link_routes, mesh,
                          policy, touched, closer)
    admission.accept(engine, listener, host, tls)      # RouterCore.accept: a connection accepted
    admission.connect(engine, connector, now, host, tls)  # RouterCore.connect: one we open
    admission.opened(state, now)         # the peer's open: refused, or the connection starts
    admission.begun(state, session)      # a client's session under policy (its window, the limit)
    admission.client_attach(state, link, now) / refuse_while_quiescing(state, link)

Owns: registering a connection's engine (and, for one we open, sending our open at once); the
answer to a peer's open: refused while the router stops, at the connection limit, for a peer on
an inter-router or edge listener that is not a router it trusts (router.core.identity), or by
policy (router.core.policy: the grant, and the frame size its group caps); the counters of
refused connections and routers per listener (management); what an open connection starts (the
mesh's peer router, a route container's link routes and auto-links); a client's session under
policy (begun with the incoming window its group caps, ended past its group's limit); a client's
attach (never one of the mesh's own links, within policy's limits, a producer whose messages
policy reads); attaches refused while the router quiesces; what our open offers (management
adds its capability and address); and whether the router is stopping (`quiescing`,
`shutting_down`, set by the graceful stop: stop.py).
Collaborators (given by RouterCore): the configuration, the core's connections, the login
throttle, Links, AutoLinks, LinkRoutes, the mesh, the policy, Touched, and the core as a
ports.ConnectionCloser (a router that answers our open with the wrong identity).
Must not touch: what an attach then does (attach.py), events after the open (lifecycle.py), a
connection's end (lifecycle.py, release.py).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Final

from ..amqp import errors as E
from ..amqp.connection import Connection
from ..amqp.endpoints import ACTIVE, UNINIT
from ..amqp.filters import CAPABILITIES as FILTER_CAPABILITIES
from ..amqp.performatives import Error
from ..amqp.session import DEFAULT_WINDOW
from ..amqp.login_throttle import LoginThrottle
from ..config.models import Connector, Listener, RouterConfig
from .connections import ConnState, peer_host, throttle_logins
from .grant import session_window
from .identity import check_router_identity, mesh_link_refusal, warn_open_router_listeners
from .interrouter import check_open, open_properties
from .links import InLink

if TYPE_CHECKING:
    from .attach import Links
    from .autolinks import AutoLinks
    from .linkroute import LinkRoutes
    from .mesh import Mesh
    from .policy import PolicyUnit
    from .ports import ConnectionCloser
    from .touched import Touched

# The source filters it applies are advertised as apache-filters.xml names them.
OFFERED_CAPABILITIES: Final = ("ANONYMOUS-RELAY", *FILTER_CAPABILITIES)


class Admission:
    """See the module docstring."""

    def __init__(
        self, config: RouterConfig, connections: dict[Connection, ConnState], logins: LoginThrottle, links: Links,
        autolinks: AutoLinks, link_routes: LinkRoutes, mesh: Mesh, policy: PolicyUnit, touched: Touched,
        closer: ConnectionCloser,
    ) -> None:  # fmt: skip
        self.config = config
        self.router_id = config.router.id
        self.connections = connections
        self.logins = logins
        self.links = links
        self.autolinks = autolinks
        self.link_routes = link_routes
        self.mesh = mesh
        self.meshed: bool = mesh.enabled  # fixed by the configuration (as RouterCore.meshed)
        self.policy = policy
        self.touched = touched
        self.closer = closer
        self.shutting_down = False
        self.quiescing = False  # RouterCore.quiesce: a graceful stop drains what is in flight
        # What our open offers; the management node adds its capability and address.
        self.offered_capabilities: tuple[str, ...] = OFFERED_CAPABILITIES
        self.open_properties: dict[str, Any] = {"product": "amqp-mesh-router", "router-id": self.router_id}
        # Connections refused at the connection limit, by the name of the listener they came
        # in on (management's listener connectionsRefused).
        self.refused_connections: dict[str, int] = {}
        # Peers refused on inter-router and edge listeners for who they are (router.core.identity),
        # by listener name (management's listener routersRefused).
        self.refused_routers: dict[str, int] = {}
        warn_open_router_listeners(config)

    @property
    def stopping(self) -> bool:
        """A graceful stop began: nothing new comes in, auto-links do not attach again."""
        return self.quiescing or self.shutting_down

    def accept(self, engine: Connection, listener: Listener, host: str, tls: Any) -> ConnState:
        state = ConnState(engine, listener)
        state.host, state.tls = host, tls
        engine.context = state
        self.connections[engine] = state
        throttle_logins(state, self.logins)
        return state

    def connect(self, engine: Connection, connector: Connector, now: float, host: str, tls: Any) -> ConnState:
        state = ConnState(engine, connector)
        state.host, state.tls = host, tls
        engine.context = state
        self.connections[engine] = state
        if self.meshed:
            self.mesh.start(now)
        properties = open_properties(self.open_properties, state)
        engine.open(offered_capabilities=self.offered_capabilities, properties=properties)
        self.touched.touch(engine)
        return state

    def opened(self, state: ConnState, now: float) -> None:
        """The peer's open arrived: answer it (an incoming connection) or check who answered ours."""
        engine = state.engine
        if state.outgoing:  # we opened it (connect): check who answered
            if engine.state.local is not ACTIVE:
                return  # the engine closed it already (a violation read together with the open)
            error, cost = check_open(state, self.router_id, self.config.router.mode)
            if error is not None:
                self.closer.close_connection(state, error, now)
                return
            state.opened = True
            if state.role == "route-container":  # a broker or service: its auto-links and link routes
                self.autolinks.connection_opened(state, now)
                self.link_routes.container_opened(state)
                return
            self.mesh.peer_opened(state, cost, now)
            return
        if engine.state.local is not UNINIT:
            return  # the engine closed it already (a violation read together with the open)
        if self.stopping:
            engine.close(Error(condition=E.CONNECTION_FORCED, description="router shutting down"))
            return
        opened = sum(1 for s in self.connections.values() if s.opened and not s.closed)
        if opened >= self.config.limits.max_connections:
            name = state.listener.name
            self.refused_connections[name] = self.refused_connections.get(name, 0) + 1
            engine.open(offered_capabilities=OFFERED_CAPABILITIES)
            engine.close(
                Error(
                    condition=E.RESOURCE_LIMIT_EXCEEDED,
                    description=f"connection limit ({self.config.limits.max_connections}) reached",
                )
            )
            return
        error, cost = check_open(state, self.router_id, self.config.router.mode)
        if error is None and state.role != "normal":
            assert isinstance(state.listener, Listener) and engine.remote_open is not None
            error = check_router_identity(state.listener, engine.user, state.sasl_mechanism,
                                          engine.remote_open.container_id, state.host,
                                          self.config.management.groups)  # fmt: skip
            if error is not None:
                name = state.listener.name
                self.refused_routers[name] = self.refused_routers.get(name, 0) + 1
        if error is None and state.role == "normal" and self.policy.enabled:
            error = self._policy_open(state)
        if error is not None:
            engine.open(offered_capabilities=self.offered_capabilities, properties=self.open_properties)
            engine.close(error)
            return
        state.opened = True
        if state.role in ("normal", "route-container"):
            engine.open(offered_capabilities=self.offered_capabilities, properties=self.open_properties)
            if state.role == "route-container":  # a broker or service connected to us
                self.link_routes.container_opened(state)
                self.autolinks.connection_opened(state, now)
            return
        properties = open_properties(self.open_properties, state)
        engine.open(offered_capabilities=self.offered_capabilities, properties=properties)
        self.mesh.peer_opened(state, cost, now)

    def _policy_open(self, state: ConnState) -> Error | None:
        """Policy's word on a client's open (router.core.policy): a refusal, or None with the
        grant on `state` and the frame size capped as its group says."""
        engine = state.engine
        assert engine.remote_open is not None
        user = engine.user if state.sasl_mechanism not in (None, "ANONYMOUS") else None
        grant, error = self.policy.open(user, peer_host(state.host), engine.remote_open.hostname)
        if grant is None:
            return error
        state.policy = grant
        cap = grant.group.max_frame_size
        if cap is not None and cap < engine.config.max_frame_size:
            engine.config = dataclasses.replace(engine.config, max_frame_size=cap)
        return None

    def begun(self, state: ConnState, session: Any) -> None:
        """Answer a client's begin under policy: with the incoming window its group caps
        (max_session_window), then a session past its group's limit is ended at once; the
        connection stays."""
        grant = state.policy
        assert grant is not None
        session.begin(incoming_window=session_window(grant, state.engine.config.max_frame_size, DEFAULT_WINDOW))
        others = sum(1 for s in state.engine.sessions if s is not session and s.state.local is ACTIVE)
        refusal = self.policy.begin(grant, others)
        if refusal is not None:
            session.end(refusal)

    def client_attach(self, state: ConnState, link: Any, now: float) -> None:
        """A client's attach: never one of the mesh's own links (router.core.identity)."""
        if state.closed or link.state.local is not UNINIT or state.engine.state.local is not ACTIVE:
            return
        refusal = mesh_link_refusal(link.remote_source, link.remote_target)
        grant = state.policy
        if refusal is None and grant is not None:
            client_sends = not link.is_sender
            terminus = link.remote_target if client_sends else link.remote_source
            refusal = self.policy.attach(grant, client_sends, terminus, len(state.in_links), len(state.out_links))
        if refusal is not None:
            link.reject(refusal)
            return
        self.links.attach_link(state, link, now)
        producer = link.context
        if grant is not None and type(producer) is InLink:
            anonymous = producer.entry is None
            if not grant.group.allow_user_id_proxy or (anonymous and grant.targets_checked):
                producer.policy = grant  # its messages are looked at (forwarding: _first_frame)

    def refuse_while_quiescing(self, state: ConnState, link: Any) -> None:
        """A client attaches while the router drains. amqp:link:detach-forced ("an operator
        intervened to detach", transport §2.8.18) says what happens and invites the client to
        attach again elsewhere or later; closing the connection (amqp:connection:forced) would
        cut off the deliveries it has in flight, which the drain exists to let finish; and
        not-allowed or resource-limit-exceeded would be untrue."""
        if state.closed or link.state.local is not UNINIT or state.engine.state.local is not ACTIVE:
            return
        link.reject(Error(condition=E.DETACH_FORCED, description="router shutting down"))
