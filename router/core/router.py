"""The routing core: a synchronous function of engine events (no I/O, no clock of its own).

    core = RouterCore(config)
    state = core.accept(engine, listener)       # a new connection's engine (router.core.connections)
    state = core.connect(engine, connector, now) # an engine from new_outgoing_engine: we open it
                                                 # (both take the peer's `host` and `tls` session too)
    core.handle(engine, engine.events(), now)    # now = monotonic seconds (the server's clock)
    for engine in core.take_touched(): wake its writer
    core.tick(now) at core.next_deadline()
    core.forget(engine, now)                     # the connection is over, however it ended
    core.quiesce(now)                            # a graceful stop begins: no new credit, no new links
    core.in_flight()                             # deliveries still unsettled for their senders
    core.shutdown(now)                           # close everything with amqp:connection:forced
    core.wall_time(now)                          # wall-clock seconds at monotonic `now`

Time: `now` is monotonic (a wall-clock step must neither kill neighbours nor stall timers).
What must be wall time (a message's absolute-expiry-time and creation-time, the mesh instance,
management timestamps) is converted through `wall_offset` (wall clock minus monotonic clock,
captured once at start by the network layer; 0 when `now` is wall time, as in harnesses).

Owns: connection and session life cycles as the router sees them, the connection limit, and
building the units and dispatching each event to the unit that owns it: the address table
(table.py), the Links unit (attach.py: attach, detach, links gone), forwarding and settlement
(forwarding.py, settlement.py), the bounds (bounds.py), the link routes (linkroute.py: attaches
passed on to route containers, and the answers, detaches and route-container connections that
belong to them; linkrelay.py relays their traffic) and, on an interior or edge router, the
mesh (mesh.py: the topology engine, inter-router connections). Each unit is built with only what
it uses (ports.py names what units know of each other); none holds the core.
The core calls engine commands directly; the network layer only flushes the engines it touched
(touched.py).
Must not touch: sockets, tasks, clocks (time comes in as `now`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from ..amqp import errors as E
from ..amqp import events as ev
from ..amqp.connection import Connection
from ..amqp.endpoints import ACTIVE, CLOSED, UNINIT
from ..amqp.filters import CAPABILITIES as FILTER_CAPABILITIES
from ..amqp.performatives import Error
from ..config.models import Connector, Listener, RouterConfig
from .attach import Links
from .autolinks import AutoLinks
from .bounds import Bounds
from .connections import ConnState, login_throttle, peer_host, throttle_logins
from .coreread import CoreReadApi
from .forwarding import Forwarder
from .identity import check_router_identity, mesh_link_refusal, warn_open_router_listeners
from .interrouter import check_open, detach_breaks, open_properties
from .links import InLink
from .linkrelay import RoutedLink
from .linkroute import LinkRoutes
from .mesh import Mesh
from .policy import PolicyUnit
from .release import ConnectionEnd
from .table import AddressTable, LocalEndpoint
from .touched import Touched

# The source filters it applies are advertised as apache-filters.xml names them.
OFFERED_CAPABILITIES: Final = ("ANONYMOUS-RELAY", *FILTER_CAPABILITIES)
# The event classes tested on every event (Final: C statics when compiled, where `ev.X` is an
# attribute lookup on the module per event: three per delivery).
_TRANSFER: Final = ev.TransferReceived
_DISPOSITION: Final = ev.DispositionReceived
_FLOW: Final = ev.FlowReceived


class RouterCore:
    def __init__(self, config: RouterConfig, *, instance: int | None = None, wall_offset: float = 0.0) -> None:
        """`instance`: the router's boot instance in the inter-router protocol (it must grow
        when the router restarts); by default the wall time of the first `now`, in milliseconds.
        `wall_offset`: wall-clock seconds minus `now` (see the module docstring)."""
        self.config = config
        self.wall_offset = wall_offset
        self.router_id = config.router.id
        self.connections: dict[Connection, ConnState] = {}
        self.table = AddressTable(config)
        self.logins = login_throttle(config.failed_logins)  # failed SASL logins, per peer host
        self.touched = Touched()
        limits = config.limits
        # Unsettled and byte bounds, credit by bytes (router.core.bounds).
        self.bounds = Bounds(limits.buffered_budget_bytes, self.connections)
        self.mesh = Mesh(config, self.table, self.touched, self, wall_offset=wall_offset, instance=instance)
        # Fixed by the configuration; read once (the mesh is interpreted: each attribute read
        # from here is a dictionary search, and next_deadline asks after every batch).
        self.meshed: bool = self.mesh.enabled
        self.forwarder = Forwarder(self.table, self.bounds, self.mesh, self.touched, router_id=self.router_id,
                                   wall_offset=wall_offset, max_message_size=limits.max_message_size)  # fmt: skip
        # The forwarder and the bounds, the forwarder and the mesh call each other: the second
        # of each pair learns of the forwarder once it is built.
        self.bounds.credit = self.forwarder
        self.mesh.routing = self.forwarder
        # Engines whose band links hold frames until their output drains (router.core.holding):
        # the network layer empties it after each call (router.net.corepump).
        self.held_output = self.forwarder.held_output
        self.links = Links(self.table, self.forwarder, self.bounds, self.mesh, router_id=self.router_id,
                           max_message_size=limits.max_message_size)  # fmt: skip
        # Links the router attaches itself to brokers' queues (router.core.autolinks).
        self.autolinks = AutoLinks(self.connections, self.links, self.touched, router_id=self.router_id)
        for auto_link in config.auto_links:
            self.autolinks.add(auto_link, 0.0)
        # Link routes (router.core.linkroute): attaches passed on to route containers.
        self.link_routes = LinkRoutes(config.link_routes, self.mesh, self.touched, router_id=self.router_id)
        self.links.link_routes = self.link_routes
        self.forwarder.relay = self.link_routes.relay
        self.mesh.link_routes = self.link_routes
        self.shutting_down = False
        self.quiescing = False  # quiesce(): a graceful stop drains what is in flight
        # What our open offers; the management node adds its capability and address.
        self.offered_capabilities: tuple[str, ...] = OFFERED_CAPABILITIES
        self.open_properties: dict[str, Any] = {"product": "amqp-mesh-router", "router-id": self.router_id}
        # Counters of links that are gone (management's router-wide totals): producers' links
        # and inter-router links we receive on, consumers' links, inter-router links we send on.
        self.gone_in = self.links.gone_in
        self.gone_out = self.links.gone_out
        self.gone_transit = self.links.gone_transit
        # Connections refused at the connection limit, by the name of the listener they came
        # in on (management's listener connectionsRefused).
        self.refused_connections: dict[str, int] = {}
        # Peers refused on inter-router and edge listeners for who they are (router.core.identity),
        # by listener name (management's listener routersRefused).
        self.refused_routers: dict[str, int] = {}
        warn_open_router_listeners(config)
        # Vhosts for client connections (router.core.policy); management and a reload replace its rules.
        self.policy = PolicyUnit(config.policy)
        # Frozen snapshots for management (router.core.coreread; the mesh's half is core.mesh).
        self.read = CoreReadApi(self.connections, self.table, self.links, self.forwarder, self.bounds, self.logins)
        # A connection's end, however it came (router.core.release): after a failure in the
        # middle of its input too.
        self.ending = ConnectionEnd(self.connections, self.links, self.forwarder, self.table, self.bounds, self.mesh,
                                    self.autolinks, self.link_routes, self.policy, self.touched)  # fmt: skip

    # --- the surface the network layer uses -----------------------------------------------------

    def accept(self, engine: Connection, listener: Listener, *, host: str = "", tls: Any = None) -> ConnState:
        """Register a freshly accepted connection's engine. `host`: the peer's address, `tls`:
        its TLS session (router.net.tls.TlsInfo; None if plain), both for management."""
        state = ConnState(engine, listener)
        state.host, state.tls = host, tls
        engine.context = state
        self.connections[engine] = state
        throttle_logins(state, self.logins)
        return state

    def connect(self, engine: Connection, connector: Connector, now: float, *, host: str = "", tls: Any = None) -> ConnState:
        """Register the engine of a connection we open to another router (from
        connections.new_outgoing_engine) and send our open; the network layer flushes it.
        `host` and `tls` as for accept()."""
        state = ConnState(engine, connector)
        state.host, state.tls = host, tls
        engine.context = state
        self.connections[engine] = state
        if self.meshed:
            self.mesh.start(now)
        properties = open_properties(self.open_properties, state)
        engine.open(offered_capabilities=self.offered_capabilities, properties=properties)
        self.touch(engine)
        return state

    def handle(self, engine: Connection, events: list[ev.Event], now: float) -> None:
        """Process one batch of events from `engine` (all of one read)."""
        state = self.connections.get(engine)
        if state is None:
            return
        self.touch(engine)
        if engine.finished:
            # The engine closed this connection while reading the batch (a violation after some
            # valid frames): nothing more may be written to it, so no delivery may pick it.
            state.output_blocked = True
        forwarder = self.forwarder
        forwarder.now = now
        mesh = self.mesh
        meshed = self.meshed
        if meshed and mesh.node is None:
            mesh.start(now)
        try:
            for event in events:
                t = type(event)
                if t is _TRANSFER:
                    state.last_delivery = now
                    forwarder.on_transfer(event, now)  # type: ignore[arg-type]
                elif t is _DISPOSITION:
                    forwarder.on_disposition(event)  # type: ignore[arg-type]
                elif t is _FLOW:
                    forwarder.on_flow(event, now)  # type: ignore[arg-type]
                else:
                    self._lifecycle(state, event, now)
            if meshed and (mesh.dirty or now >= mesh.deadline):
                mesh.service(now)
            forwarder.flush()
        except Exception:
            # A bug (one a hostile peer can reach): the failure is this connection's, and the
            # network layer ends it. Its release will look for what the batch left half done
            # (router.core.release); what others were told before the failure goes out now.
            # (`event`: the one being handled, or the last one if the failure came after them)
            self._failed(state, event if events else None)
            raise

    def _failed(self, state: ConnState, event: ev.Event | None = None) -> None:
        self.ending.failed(state)
        if type(event) is ev.TransferReceived:
            try:
                self.ending.cut_short(event)
            except Exception:  # (the release sweeps what it can)
                pass
        try:
            self.forwarder.flush()
        except Exception:  # the release flushes again
            pass

    def wall_time(self, now: float) -> float:
        """The wall-clock time (seconds since the epoch) at monotonic `now`."""
        return now + self.wall_offset

    def forget(self, engine: Connection, now: float) -> None:
        """`engine`'s connection is over (closed, failed, timed out, reset, cancelled): release
        everything it held (links, deliveries reported upstream as released/modified, address
        table entries, the peer router) and drop it. Idempotent; unknown engines are ignored."""
        state = self.connections.pop(engine, None)
        if state is None:
            return
        self.forwarder.now = now
        self.ending.release(state, now, reattach=not (self.quiescing or self.shutting_down))  # never raises

    def take_touched(self) -> set[Connection]:
        """The engines that may have output since the last call (the caller wakes their writers)."""
        return self.touched.take()

    def touch(self, engine: Connection) -> None:
        self.touched.touch(engine)

    def tick(self, now: float) -> None:
        self.forwarder.now = now
        self.forwarder.expire(now)
        if self.autolinks.runs and not (self.quiescing or self.shutting_down):
            self.autolinks.tick(now)
        if self.meshed:
            self.mesh.start(now)
            self.mesh.service(now)
        self.forwarder.flush()

    def next_deadline(self) -> float | None:
        deadline = self.forwarder.next_deadline()
        # Asked after every call into the core; the mesh (interpreted) has none when it is off.
        mesh = self.mesh.next_deadline() if self.meshed else None
        if mesh is not None and (deadline is None or mesh < deadline):
            deadline = mesh
        if self.autolinks.runs:  # (attaching again, or an attach the broker must answer)
            other = self.autolinks.next_deadline()
            if other is not None and (deadline is None or other < deadline):
                deadline = other
        return deadline

    def close_connection(self, state: ConnState, error: Error, now: float) -> None:
        """Close a connection ourselves: what is in flight on it is reported first."""
        self._connection_gone(state, now)
        engine = state.engine
        if engine.state.local is not CLOSED and not engine.finished:
            engine.close(error)
        self.touch(engine)

    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None:
        """The network layer says whether `engine`'s socket can take more bytes right now."""
        state = self.connections.get(engine)
        if state is None or state.output_blocked == blocked:
            return
        state.output_blocked = blocked
        if not blocked:
            # Highest band first, what its band links held included (router.core.holding).
            self.forwarder.release(state, now)
            self.forwarder.flush()

    def read_paused(self, engine: Connection) -> bool:
        """Whether the network layer should stop reading `engine`'s socket for now: it holds
        more than its bound, or the router is near its budget and it holds the most
        (router.core.bounds)."""
        state = self.connections.get(engine)
        return state is not None and self.bounds.read_paused(state)

    def register_local_endpoint(self, address: str, endpoint: LocalEndpoint, subtree: bool = False) -> None:
        """Serve `address` in-process: every delivery to it goes to `endpoint` (see table.py);
        with `subtree`, deliveries to `<address>/...` too. Producers waiting for a destination
        get credit at once."""
        entry = self.table.get_or_create(address)
        if entry is None:
            raise ValueError(f"{address} is not an address of this router")
        entry.local = endpoint
        if subtree:
            self.table.serve_subtree(entry)
        for producer in entry.producers:
            self.forwarder.credit_dirty(producer)
        self.forwarder.flush()

    def send(self, to: str, payload: bytes, now: float, on_outcome: Callable[[Any], None] | None = None) -> bool:
        """Send a message from the router itself: presettled, or unsettled when `on_outcome` is
        given (called once with its final outcome, from within the core: Waiting.send_from_router);
        False if `to` has no destination."""
        self.forwarder.now = now
        sent = self.forwarder.send_from_router(to, payload, on_outcome)
        self.forwarder.flush()
        return sent

    def quiesce(self, now: float) -> None:
        """The first step of a graceful stop: deliveries already in flight keep flowing to
        consumers and their outcomes back to senders, but nothing new comes in. Every link we
        receive on (producers', and other routers' links to us) has its credit set to 0 and never
        gets more (ProducerCredit.quiesce); new connections are refused with
        amqp:connection:forced and new links on existing ones with amqp:link:detach-forced (see
        _refuse_while_quiescing). The network layer waits until in_flight() is 0 or its drain
        deadline, then calls shutdown(). Control links between routers keep their credit: the
        mesh keeps working until this router's connections close."""
        if self.quiescing or self.shutting_down:
            return
        self.quiescing = True
        self.forwarder.now = now
        in_links = [inl for state in self.connections.values() if not state.closed for inl in state.in_links]
        self.forwarder.quiesce(in_links)
        self.link_routes.quiesce(s for s in self.connections.values() if not s.closed)
        self.forwarder.flush()

    def in_flight(self) -> int:
        """Deliveries taken from a sender (a client or another router) that went on to a
        consumer or another router and have no final outcome yet: what a graceful stop waits
        for before closing. Deliveries still waiting for a consumer's credit are not waited for:
        the close releases them at once, so their producers can send them elsewhere instead of
        waiting out the grace period for a consumer that may never ask. Link-routed deliveries
        not yet settled count too (router.core.linkroute)."""
        taken = sum(
            inl.inflight
            for state in self.connections.values()
            if not state.closed
            for inl in state.in_links
            if not inl.gone
        )
        waiting = sum(
            1
            for entry in self.table.entries.values()
            for fwd in entry.pending
            if fwd.in_link is not None and not fwd.in_link.gone and not fwd.in_link.conn.closed
        )
        routed = self.link_routes.in_flight(s for s in self.connections.values() if not s.closed)
        return taken - waiting + routed

    def shutdown(self, now: float) -> None:
        """Graceful stop: release what is in flight and close every connection (forced)."""
        self.shutting_down = True
        error = Error(condition=E.CONNECTION_FORCED, description="router shutting down")
        states = list(self.connections.values())
        # First every link goes (outcomes for what is in flight are batched), then those
        # outcomes are written while every connection is still open, and only then does each
        # connection get its close: nothing may follow a close (transport §2.4.3).
        for state in states:
            state.output_blocked = True  # no new deliveries go anywhere
        # Consumers first: what they hold becomes released/modified for producers that are
        # still linked to hear it; then everything else.
        for state in states:
            for out in list(state.out_links):
                self.links.link_gone(out.link, now)
        for state in states:
            self._connection_gone(state, now)
        self.forwarder.flush()
        for state in states:
            engine = state.engine
            if engine.state.local is not CLOSED:
                engine.close(error)
            self.touch(engine)

    # --- life cycles ----------------------------------------------------------------------------

    def _lifecycle(self, state: ConnState, event: ev.Event, now: float) -> None:
        engine = state.engine
        match event:
            case ev.RemoteOpen():
                state.opened_at = now
                self._on_open(state, now)
            case ev.Authenticated():
                state.sasl_mechanism = event.mechanism
                if not state.outgoing and event.mechanism != "ANONYMOUS":  # (no reset for free)
                    self.logins.succeeded(peer_host(state.host))
            case ev.RemoteBegin():
                session = event.session
                # UNINIT, not "not ACTIVE": the engine may have ended the session already (a
                # session error read in the same batch), and it cannot begin again.
                if session.state.local is UNINIT and engine.state.local is ACTIVE:
                    session.begin()
                    if state.policy is not None:
                        self._policy_begin(state, session)
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
            case ev.RemoteAttach() if self.quiescing and state.role in ("normal", "route-container"):
                self._refuse_while_quiescing(state, event.link)
            case ev.RemoteAttach() if state.role == "normal":
                self._client_attach(state, event.link, now)
            case ev.RemoteAttach():
                self.links.attach_link(state, event.link, now)
                if state.role == "route-container":  # perhaps the answer to an auto-link's attach
                    self.autolinks.link_attached(event.link, now)
            case ev.RemoteDetach() if (state.peer is not None and engine.state.local is ACTIVE
                                       and detach_breaks(state.peer, event.link)):  # fmt: skip
                self._broken(state, "a link between routers was detached", now)
            case ev.RemoteEnd() if state.peer is not None and engine.state.local is ACTIVE:
                self._broken(state, "a session between routers was ended", now)
            case ev.RemoteDetach():
                self.links.detach_link(event.link, event.closed, event.error, now)
                if state.role == "route-container":
                    self.autolinks.link_detached(event.link, event.error, now)
            case ev.RemoteEnd():
                self.links.session_ended(event.session, now)
                if state.role == "route-container":
                    self.autolinks.session_ended(event.session, now)
                if event.session.state.local is ACTIVE and engine.state.local is ACTIVE:
                    event.session.end()
            case ev.RemoteClose():
                self._connection_gone(state, now)
                engine.close()
            case ev.TransportClosed():
                self.connections.pop(engine, None)
                self.ending.release(state, now, reattach=not (self.quiescing or self.shutting_down))
            case ev.ProtocolViolation() if event.scope == "connection":
                self._connection_gone(state, now)
            case _:
                pass

    def _client_attach(self, state: ConnState, link: Any, now: float) -> None:
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
            if not grant.group.allow_user_id_proxy or (anonymous and grant.group.targets != ("*",)):
                producer.policy = grant  # its messages are looked at (forwarding: _first_frame)

    def _policy_begin(self, state: ConnState, session: Any) -> None:
        """A client's session past its group's limit is ended at once; the connection stays."""
        assert state.policy is not None
        others = sum(1 for s in state.engine.sessions if s is not session and s.state.local is ACTIVE)
        refusal = self.policy.begin(state.policy, others)
        if refusal is not None:
            session.end(refusal)

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

    def _refuse_while_quiescing(self, state: ConnState, link: Any) -> None:
        """A client attaches while the router drains. amqp:link:detach-forced ("an operator
        intervened to detach", transport §2.8.18) says what happens and invites the client to
        attach again elsewhere or later; closing the connection (amqp:connection:forced) would
        cut off the deliveries it has in flight, which the drain exists to let finish; and
        not-allowed or resource-limit-exceeded would be untrue."""
        if state.closed or link.state.local is not UNINIT or state.engine.state.local is not ACTIVE:
            return
        link.reject(Error(condition=E.DETACH_FORCED, description="router shutting down"))

    def _broken(self, state: ConnState, what: str, now: float) -> None:
        """Routers keep their links and sessions for the life of the connection: one going
        away leaves the connection half working, so it is closed (the connector reconnects)."""
        self.close_connection(state, Error(condition=E.CONNECTION_FORCED, description=f"{what}: closing the connection"), now)

    def _on_open(self, state: ConnState, now: float) -> None:
        engine = state.engine
        if state.outgoing:  # we opened it (connect): check who answered
            error, cost = check_open(state, self.router_id, self.config.router.mode)
            if error is not None:
                self.close_connection(state, error, now)
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
        if self.shutting_down or self.quiescing:
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

    def _connection_gone(self, state: ConnState, now: float) -> None:
        """Every link of the connection is gone: report in-flight deliveries (released/modified)."""
        if state.closed:
            return
        state.closed = True
        # Every step runs even when one fails (router.core.release); the first failure is this
        # connection's (it ends, and its release sweeps for what was left).
        error = self.ending.links_gone(state, now, reattach=not (self.quiescing or self.shutting_down))
        if error is not None:
            raise error
