"""The router's network side: it joins trio sockets to the sans-IO routing core.

    server = RouterServer(config)
    addresses = await nursery.start(server.run)   # [(listener name, host, port), ...]
    ...
    server.shutdown()                             # or cancel run(): both stop gracefully
    server.http_addresses                         # [(http listener name, host, port), ...]

Owns: the listeners (AMQP ones also created and deleted at run time through the management
agent's ConfigControl, which this class implements; see listeners.py), the HTTP listeners
(management as JSON, /metrics, /healthz: http_server.py serves router.management.http), the
management agent's installation, TLS on listeners and connectors with an ssl_profile (the
profiles' material: tls.py; the handshake runs in the connection's task within its handshake
time-out), AMQP over WebSocket on listeners with `websocket` (the HTTP upgrade likewise, after
TLS: wsstream.py), one ConnectionDriver per connection (engine from `new_engine`)
inside a guard that confines whatever the connection does to it (and makes the core forget it
however it ends), the handshake time-out, the one monotonic clock the core is called with
(`clock`, trio's by default; the wall-clock offset is captured once at start), waking the
writers of the engines the core touched, the core's timer, socket backpressure (reads paused
while the core says so, output blocked/unblocked as writers cross their high-water marks) and
graceful shutdown (stop accepting; quiesce the core, no new credit nor links, and wait until no
delivery is in flight or the drain deadline; close every connection with amqp:connection:forced,
let writers flush until `drain_s` is up, then drop the sockets; a cancelled run() skips the
wait for deliveries in flight), and applying a changed configuration
file (`reload`: what changed goes through the management agent, see reload.py).
Must not touch: routing decisions (router.core), protocol rules (router.amqp).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

import trio

from ..amqp.connection import Connection
from ..amqp.events import Event
from ..amqp.performatives import Error
from ..config.models import Connector, ConnectionSettings, Listener, RouterConfig, SslProfile
from ..core.connections import new_engine, new_outgoing_engine
from .connectors import Connectors, Dial
from .driver import ConnectionDriver
from .flowtask import FlowTask
from .http_server import serve_http
from .listeners import AmqpListeners, Bind, ListenerCounters
from .reload import ReloadRefused, ReloadReport, apply_reload, plan_reload
from .tls import TlsInfo, TlsProfiles, TlsRefused, session_of, transport_of
from .tls import accept as tls_accept
from .tls import connect as tls_connect
from .wsstream import WebSocketRefused, WebSocketStream, linger_after_refusal
from .wsstream import accept as websocket_accept

log = logging.getLogger(__name__)

SHUTDOWN_FLUSH_S = 2.0  # how long writers may flush the closes before sockets are dropped
# Of `drain_s`, what is kept for the closes after waiting for deliveries in flight (at most half).
CLOSE_MARGIN_S = 1.0
TIMER_FAILURE_PAUSE_S = 0.1  # after the core's timer failed, before it is tried again
CLOSE_REASON_MAX = 200  # characters of a peer's close error that the log shows

BoundAddress = tuple[str, str, int]  # (listener name, host, port)


def _set_host(state: Any, stream: trio.abc.Stream, tls: TlsInfo | None = None) -> None:
    """Tell the core's connection state the peer's address (management shows it as `host`) and
    its TLS session."""
    if hasattr(state, "host"):
        state.host = _peer_name(stream)
    if tls is not None and hasattr(state, "tls"):
        state.tls = tls


async def _refuse(
    stream: trio.abc.Stream, label: str, refusal: str, counters: ListenerCounters, *, timed_out: bool, answered: bool = False
) -> None:
    """A connection refused before AMQP (TLS or the WebSocket upgrade failed or timed out):
    counted, logged, closed (after the refusal's answer has had a moment to reach the peer)."""
    if timed_out:
        counters.handshake_timeouts += 1
    log.info("connection %s refused: %s", label, refusal)
    with trio.CancelScope(shield=True):
        if answered:
            await linger_after_refusal(stream)
        await trio.aclose_forcefully(stream)


class Core(Protocol):
    """What the server needs from the routing core (router.core.router.RouterCore)."""

    @property
    def router_id(self) -> str: ...
    def accept(self, engine: Connection, listener: Listener) -> Any: ...
    def connect(self, engine: Connection, connector: Connector, now: float) -> Any: ...
    def handle(self, engine: Connection, events: list[Event], now: float) -> None: ...
    def take_touched(self) -> set[Connection]: ...
    def tick(self, now: float) -> None: ...
    def next_deadline(self) -> float | None: ...
    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None: ...
    def read_paused(self, engine: Connection) -> bool: ...
    def forget(self, engine: Connection, now: float) -> None: ...
    def shutdown(self, now: float) -> None: ...


def _peer_name(stream: trio.abc.Stream) -> str:
    if isinstance(stream, WebSocketStream):
        stream = stream.transport_stream
    stream = transport_of(stream)
    if isinstance(stream, trio.SocketStream):
        try:
            host, port = stream.socket.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            pass
    return type(stream).__name__


class RouterServer:
    """Serves every listener of `config` with one RouterCore and its management agent (or the
    `core` given, for tests, with the `agent` given or none)."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        core: Core | None = None,
        agent: Any = None,
        clock: Callable[[], float] = trio.current_time,
        wall_clock: Callable[[], float] = time.time,
        drain_s: float = SHUTDOWN_FLUSH_S,
        bind: Bind | None = None,
        dial: Dial | None = None,
    ) -> None:
        """`clock`: the one monotonic clock every `now` given to the core comes from (trio's, so
        that tests may run on trio's mock clock). `wall_clock` is read once, here: the core gets
        the offset between the two for what must be wall time (see router.core.router).
        Construct it inside trio.run (the default clock is trio's). `drain_s`: how long a
        graceful stop lets connections finish closing (their outcomes written) before dropping
        them. `bind` and `dial`: how listeners get their sockets and connectors their streams
        (TCP by default; router.testing.memrouter gives memory streams on trio's mock clock)."""
        self.config = config
        self.file_config = config  # what reload() diffs a changed file against
        self.drain_s = drain_s
        self.clock = clock
        self.wall_offset = wall_clock() - clock()
        self._installs_agent = False
        if core is None:
            # Imported here rather than at the top so that this module (and the server tests,
            # which may run it on a stand-in core) does not depend on the core's internals.
            from ..core.router import RouterCore

            core = RouterCore(config, wall_offset=self.wall_offset)
            if agent is None:
                from .management_face import new_agent  # it loads the agent, which reads the core

                agent = new_agent(core, config, self, clock)
                self._installs_agent = True
        self.core: Core = core
        self.agent: Any = agent
        # Flow records (router.net.flowtask), when configured: on the router's own core only.
        self.flow: FlowTask | None = None
        if config.flow.enabled and hasattr(core, "forwarder"):
            from .. import __version__

            self.flow = FlowTask(core, config.flow, clock, __version__)
        self.addresses: list[BoundAddress] = []
        self.http_addresses: list[BoundAddress] = []
        # TlsError (naming the profile and the file) if a profile's files do not load.
        self.tls = TlsProfiles(config.ssl_profiles)
        self._listeners = AmqpListeners(self.serve_stream, bind=bind)
        self._connectors = Connectors(self.serve_outgoing, secure=self._secure_outgoing, dial=dial)
        for connector in config.connectors:
            self._connectors.add(connector)
        self._drivers: dict[Connection, ConnectionDriver] = {}
        self._paused: set[ConnectionDriver] = set()
        self._ids = itertools.count(1)
        # The timer sleeps until _timer_at (the server's clock) or until _timer_wake is set.
        self._timer_at = math.inf
        self._timer_wake = trio.Event()
        self._stop = trio.Event()
        # While a graceful stop waits for the deliveries in flight: the core's count of them
        # (in_flight), and the event that ends the wait (none left, or run() was cancelled).
        self._in_flight: Callable[[], int] | None = None
        self._drained = trio.Event()
        self._stopped = trio.Event()
        self._http_stop = trio.Event()  # set once the AMQP side has stopped
        self._app: Any = None

    def stats(self) -> dict[str, int]:
        """Connections, and how many of them are held back by backpressure right now."""
        drivers = self._drivers.values()
        return {
            "connections": len(self._drivers),
            "reading_paused": sum(1 for driver in drivers if driver.reading_paused),
            "output_blocked": sum(1 for driver in drivers if driver.output_blocked),
        }

    # --- life cycle ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[list[BoundAddress]] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind every listener, serve until shutdown() or cancellation, then stop gracefully."""
        self._open_configured()  # before anything runs: a port in use fails run() at once
        if self._installs_agent:
            from .management_face import install_management

            install_management(self.core, self.agent)
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(self._serve)
                for http in self.config.http:
                    port = await nursery.start(serve_http, self._http_app(), http, self._http_stop)
                    self.http_addresses.append((http.name, http.host, port))
                task_status.started(list(self.addresses))
                await self._stopped.wait()
            finally:
                # Cancellation lands here: _serve is shielded and turns this into the same
                # graceful stop (bounded by SHUTDOWN_FLUSH_S) before run() lets it propagate.
                # It does not wait for deliveries in flight: the caller wants the stop now (in
                # `router run`, a second signal or the grace period's end).
                self._drained.set()
                self.shutdown()
                # HTTP stops last: /healthz says 503 while the connections close.
                self._http_stop.set()

    @property
    def stopping(self) -> bool:
        """shutdown() was called (or run() cancelled)."""
        return self._stop.is_set()

    def shutdown(self) -> None:
        """Stop accepting, close every connection (amqp:connection:forced), flush, stop."""
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def _open_configured(self) -> None:
        ports = self._listeners.open_all(self.config.listeners)
        self.addresses = [(listener.name, listener.host, port) for listener, port in zip(self.config.listeners, ports)]

    async def _serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Shielded so that cancelling run() cannot cut the connections off mid-flush: run()
        # asks for a stop instead and this scope finishes it within SHUTDOWN_FLUSH_S.
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as connections:
                    # Accept loops live beside the connections: each has its own cancel scope.
                    self._listeners.serve(connections, connections)
                    self._connectors.serve(connections)
                    connections.start_soon(self._timer)
                    if self.flow is not None:
                        connections.start_soon(self.flow.run, self._after_core)
                    task_status.started()
                    await self._stop.wait()
                    await self._stop_gracefully()
                    connections.cancel_scope.cancel()
        finally:
            self._listeners.close_all()
            self._stopped.set()

    async def _stop_gracefully(self) -> None:
        self._listeners.close_all()
        self._connectors.stop_dialling()  # their open connections close with the others
        deadline = trio.current_time() + self.drain_s
        await self._drain_in_flight(deadline - min(CLOSE_MARGIN_S, self.drain_s / 2))
        if self.flow is not None:  # the last records go out while their subscribers are still here
            try:
                self.flow.final(self.clock())
                self._after_core()
            except Exception:
                log.exception("flow records: the last flush failed")
        log.info("shutting down: closing %d connection(s)", len(self._drivers))
        try:
            self.core.shutdown(self.clock())
            self._after_core()
        except Exception:  # the connections are dropped below all the same
            log.exception("the core failed to close the connections")
        with trio.move_on_at(deadline):
            for driver in list(self._drivers.values()):
                await driver.wait_closed()
        unfinished = sum(1 for driver in self._drivers.values() if not driver.closed)
        if unfinished:
            log.info("dropping %d connection(s) that did not finish closing", unfinished)

    async def _drain_in_flight(self, until: float) -> None:
        """Quiesce the core (no new credit, no new links: RouterCore.quiesce) and wait until no
        delivery is in flight, so that consumers settle what they hold and its outcome reaches
        the sender, or until `until` (trio's clock): what is left is then released/modified by
        the closes as before. _after_core sets _drained."""
        # A stand-in core (tests) may not drain: it is closed at once.
        quiesce = getattr(self.core, "quiesce", None)
        in_flight = getattr(self.core, "in_flight", None)
        if quiesce is None or in_flight is None:
            return
        try:
            quiesce(self.clock())
            self._in_flight = in_flight
            self._after_core()
            left = in_flight()
        except Exception:  # the closes follow all the same
            log.exception("the core failed to quiesce")
            return
        if not left:
            return
        log.info("shutting down: waiting for %d deliveries in flight", left)
        with trio.move_on_at(until):
            await self._drained.wait()
        if not self._drained.is_set():
            log.info("shutting down: %d deliveries still in flight at the drain deadline", in_flight())

    # --- run-time configuration (the management agent's ConfigControl) ---------------------------

    def reload(self, new: RouterConfig) -> ReloadReport:
        """Apply a changed configuration file (router.net.reload has the rules): the changes
        since the last file applied go through the management agent. ReloadRefused (nothing
        applied) if `new` changes the router's identity or the router is shutting down."""
        if self.stopping:
            raise ReloadRefused("the router is shutting down")
        if self.agent is None:
            raise ReloadRefused("this router runs without a management agent")
        plan = plan_reload(self.file_config, new, self._listeners.ports())
        self.file_config = new
        report = apply_reload(self.agent, plan)
        # New logins use the new users (the credential store is chosen per connection).
        self.config = self.config.model_copy(update={"users": new.users, "users_file": new.users_file})
        self._after_core()  # a dropped connector or a changed rule may have queued output
        return report

    def create_listener(self, listener: Listener) -> int:
        """Open `listener` now and return its bound port (OSError if it cannot bind)."""
        if self.stopping:
            raise RuntimeError("the router is shutting down")
        return self._listeners.open(listener)

    def delete_listener(self, name: str) -> bool:
        """Stop accepting on listener `name` (False if there is none). Its connections go on:
        see router/net/listeners.py."""
        return self._listeners.close(name)

    def listener_ports(self) -> dict[str, int]:
        """The bound port of every open AMQP listener, by name."""
        return self._listeners.ports()

    def listener_counters(self, name: str) -> dict[str, int]:
        """Refusals on listener `name` for management: accepts that failed (out of descriptors,
        say), connections dropped for not finishing the handshake in time, WebSocket upgrades refused."""
        counters = self._listeners.counters(name)
        return {"accept_failures": counters.accept_failures, "handshake_timeouts": counters.handshake_timeouts,
                "upgrades_refused": counters.upgrades_refused}  # fmt: skip

    def update_ssl_profile(self, profile: SslProfile) -> None:
        """Load `profile`'s files now (a new profile, or rotation): new handshakes use them.
        TlsError (a ValueError naming the file) if they do not load; the old material stays."""
        self.tls.update(profile)

    def remove_ssl_profile(self, name: str) -> None:
        self.tls.remove(name)

    def ssl_profile_loads(self, name: str) -> int:
        """How many times profile `name`'s files were loaded (management's `ordinal`)."""
        return self.tls.loads(name)

    def create_connector(self, connector: Connector) -> None:
        """Start keeping `connector` up now (ValueError if the name is taken)."""
        if self.stopping:
            raise RuntimeError("the router is shutting down")
        self._connectors.add(connector)

    def delete_connector(self, name: str) -> bool:
        """Stop dialling connector `name` and drop its connection (False if there is none)."""
        return self._connectors.remove(name)

    def connector_status(self, name: str) -> tuple[str, str] | None:
        """(CONNECTING | SUCCESS | FAILED, the last error) of connector `name` for management."""
        status = self._connectors.status(name)
        return None if status is None else (status.state, status.last_error)

    def _http_app(self) -> Any:
        """The ASGI application of every HTTP listener (one: its metrics registry reads the router
        once per scrape, whichever listener the scrape came in on)."""
        if self._app is None:
            if self.agent is None:
                raise RuntimeError("HTTP listeners need the management agent (a stand-in core has none)")
            from .management_face import http_app

            # After an HTTP request the agent may have changed the core (an address rule): flush
            # what that queued, as after any call into the core.
            self._app = http_app(self.agent, healthy=lambda: not self.stopping, after_call=self._after_core)
        return self._app

    # --- connections -----------------------------------------------------------------------------

    async def serve_stream(self, stream: trio.abc.Stream, listener: Listener) -> None:
        """Run one connection (accepted on `listener`) over `stream` until it is over. Never
        raises (but for cancellation): whatever the connection does costs it alone.

        On a listener with an ssl_profile the TLS handshake comes first, in this connection's
        task and within its handshake time-out (which goes on to cover the protocol header,
        SASL and open)."""
        counters = self._listeners.counters(listener.name)
        timeout_s = listener.handshake_timeout_s
        deadline = trio.current_time() + timeout_s if timeout_s else math.inf
        label = f"from {_peer_name(stream)} on listener {listener.name}"
        initial, tls = b"", None
        profile = self.tls.get(listener.ssl_profile)
        if listener.ssl_profile is not None and profile is None:  # never plain on a TLS listener
            log.error("connection %s refused: ssl profile %r is not loaded", label, listener.ssl_profile)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
            return
        if profile is not None:
            refusal = "no TLS within the handshake time-out"
            with trio.move_on_at(deadline) as scope:
                try:
                    stream, initial, tls = await tls_accept(stream, profile, listener)
                    refusal = ""
                except TlsRefused as exc:
                    refusal = str(exc)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    refusal = f"the connection failed before TLS was up ({exc or type(exc).__name__})"
            if refusal:
                await _refuse(stream, label, refusal, counters, timed_out=scope.cancelled_caught)
                return
        if listener.websocket:
            # The HTTP upgrade, over TLS when the listener has a profile (wss), within the same
            # handshake time-out: a peer stalled mid-request is dropped like one stalled mid-TLS.
            refusal, answered = "no WebSocket upgrade within the handshake time-out", False
            with trio.move_on_at(deadline) as scope:
                try:
                    stream, initial = await websocket_accept(stream, listener, initial)
                    refusal = ""
                except WebSocketRefused as exc:
                    refusal, answered = str(exc), exc.answered
                    counters.upgrades_refused += answered
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                    refusal = f"the connection failed during the WebSocket upgrade ({exc or type(exc).__name__})"
            if refusal:
                await _refuse(stream, label, refusal, counters, timed_out=scope.cancelled_caught, answered=answered)
                return

        if tls is not None and tls.user is None and listener.authenticate_peer and "EXTERNAL" in listener.sasl_mechanisms:
            # Otherwise the peer only sees a mechanism list without EXTERNAL (or an empty one).
            uid_format = profile.config.uid_format if profile is not None else "?"
            log.warning("connection %s: its certificate has none of the fields uid_format %r names: "
                        "SASL EXTERNAL is not offered to it", label, uid_format)  # fmt: skip

        def register() -> Connection:
            engine = new_engine(self.config, listener, tls.user if tls is not None else None, tls=tls is not None)
            _set_host(self.core.accept(engine, listener), stream, tls)
            return engine

        await self._guarded(stream, register, listener, label, counters, initial=initial, deadline=deadline)

    async def _secure_outgoing(self, stream: trio.abc.Stream, connector: Connector) -> trio.abc.Stream:
        """TLS on a connector's dialled stream (the Connectors call it when the connector has a profile)."""
        profile = self.tls.get(connector.ssl_profile)
        if profile is None:
            raise TlsRefused(f"no ssl profile named {connector.ssl_profile!r}")
        secured, _ = await tls_connect(stream, profile, connector)
        return secured

    async def serve_outgoing(self, stream: trio.abc.Stream, connector: Connector) -> None:
        """Run the connection a connector dialled over `stream` until it is over (never raises
        but for cancellation, as serve_stream)."""

        def register() -> Connection:
            engine = new_outgoing_engine(self.config, connector)
            _set_host(self.core.connect(engine, connector, self.clock()), stream, session_of(stream))
            return engine

        await self._guarded(stream, register, connector, f"to {_peer_name(stream)} by connector {connector.name}", None)

    async def _guarded(
        self,
        stream: trio.abc.Stream,
        register: Callable[[], Connection],
        settings: ConnectionSettings,
        label: str,
        counters: ListenerCounters | None,
        *,
        initial: bytes = b"",
        deadline: float | None = None,
    ) -> None:
        """The guard around one connection's whole life: registering it with the core, driving
        it and forgetting it. An exception from any of them (a bug, or hostile bytes the core
        or the engine mishandles) is logged and ends this connection only; however it ends,
        the core forgets it and the socket is closed."""
        conn_id = next(self._ids)
        engine: Connection | None = None
        try:
            engine = register()
            log.info("connection %d %s", conn_id, label)
            # Driven here, not in a coroutine of its own: every coroutine frame held while the
            # connection waits is memory of every idle connection.
            driver = self._new_driver(stream, engine, settings, conn_id, counters, initial, deadline)
            try:
                driver.wake()  # an outgoing connection's engine has its header and open queued already
                await driver.run()
            finally:
                del self._drivers[engine]
                self._paused.discard(driver)
        except* Exception:
            # `except*`: a failure that comes inside an exception group together with a
            # cancellation (the driver's tasks, while the router stops) is logged here too, and
            # only the cancellation goes on.
            log.exception("connection %d %s failed", conn_id, label)
        finally:
            if engine is not None:
                self._forget(engine, conn_id)
            with trio.CancelScope(shield=True):  # the driver closed it already, unless it never ran
                await trio.aclose_forcefully(stream)

    def _new_driver(
        self,
        stream: trio.abc.Stream,
        engine: Connection,
        settings: ConnectionSettings,
        conn_id: int,
        counters: ListenerCounters | None,
        initial: bytes = b"",
        deadline: float | None = None,
    ) -> ConnectionDriver:
        """The driver of a connection, registered (the caller runs it and unregisters it)."""
        # No socket options to set: trio's SocketStream turns TCP_NODELAY on for every TCP
        # stream (checked by the server tests). With Nagle on, a small disposition or flow
        # would wait for the peer's delayed ACK, costing ~40 ms per round trip.

        # The handshake time-out: the peer must have finished the protocol header, SASL and its
        # open by `deadline` (`timeout_s` after it connected, its TLS handshake included: a
        # silent, header-only, SASL-stalled or vanished peer would otherwise hold a descriptor
        # until the idle time-out, which only starts after open). The driver watches it as one
        # more deadline of its reader: a task per connection for it cost ~2 KiB for 10 s.
        timeout_s = settings.handshake_timeout_s
        if not timeout_s:
            deadline = math.inf
        elif deadline is None:
            deadline = trio.current_time() + timeout_s
        driver = _ServerDriver(self, stream, engine, settings, conn_id, counters, initial, deadline)
        self._drivers[engine] = driver
        return driver

    def _forget(self, engine: Connection, conn_id: int) -> None:
        """However the connection ended, the core forgets it and releases what it held. Each
        step is guarded on its own: a failure in one must not skip the others or escape."""
        now = self.clock()
        try:
            # Normally the driver already fed the end of stream (the core saw TransportClosed);
            # after a cancellation or a failure it did not.
            engine.receive_data(b"", trio.current_time())
            events = engine.events()
            if events:
                self.core.handle(engine, events, now)
        except Exception:
            log.exception("connection %d: the core failed on its last events", conn_id)
        try:
            self.core.forget(engine, now)
        except Exception:
            log.exception("connection %d: the core failed to forget it", conn_id)
        try:
            self._after_core()
        except Exception:
            log.exception("connection %d: flushing after it closed failed", conn_id)
        log.info("connection %d closed%s", conn_id, _close_reason(engine))

    def _on_events(self, engine: Connection, events: list[Event]) -> None:
        self.core.handle(engine, events, self.clock())
        self._after_core()

    def _after_core(self) -> None:
        """After any call into the core: flush what it queued, let paused readers look again,
        and move the timer if the core now needs it earlier."""
        drivers = self._drivers
        for engine in self.core.take_touched():
            driver = drivers.get(engine)
            if driver is not None:
                try:
                    driver.flush()  # written now when the socket takes it: no writer wake-up
                except Exception:
                    # Its failure (the engine's output, or the core's output-blocked call) is
                    # that connection's, not the one whose call got here: end that one.
                    log.exception("a connection failed while flushing its output")
                    driver.abort()
        # The core's buffered bytes change only inside its calls, and every call ends here:
        # a paused reader is therefore always asked again after the change that may free it.
        if self._paused:
            paused, self._paused = self._paused, set()
            for driver in paused:
                driver.resume_reading()
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._timer_at:
            self._timer_wake.set()
        if self._in_flight is not None and not self._drained.is_set() and not self._in_flight():
            self._drained.set()

    async def _timer(self) -> None:
        """Tick the core at its next deadline.

        Woken by an event only when a call moved the deadline earlier than the one we sleep
        until (a later one costs a single early wake-up, after which we re-read it). Polling
        every 100 ms instead would wake an idle router ten times a second forever and make
        timers up to 100 ms late; an event per call would cost a task switch per batch.
        The deadline is in the server's clock; the sleep is in trio's (the same by default).
        """
        while True:
            deadline = self.core.next_deadline()
            self._timer_at = math.inf if deadline is None else deadline
            self._timer_wake = trio.Event()
            with trio.move_on_after(max(0.0, self._timer_at - self.clock())):
                await self._timer_wake.wait()
                continue  # re-read the deadline
            try:
                self.core.tick(self.clock())
                self._after_core()
            except Exception:
                # A core bug must not stop the router's timers (nor end the router): log it,
                # and do not spin if the same deadline fails again at once.
                log.exception("the core's timer failed")
                await trio.sleep(TIMER_FAILURE_PAUSE_S)


class _ServerDriver(ConnectionDriver):
    """A connection's driver in the server. Its callbacks are its own methods: a closure or a
    partial per callback cost ~1 KiB of every idle connection (bench/idlemem.py)."""

    __slots__ = ("server", "conn_id", "counters", "timeout_s")

    def __init__(
        self, server: RouterServer, stream: trio.abc.Stream, engine: Connection, settings: ConnectionSettings,
        conn_id: int, counters: ListenerCounters | None, initial: bytes, open_deadline: float,
    ) -> None:  # fmt: skip
        self.server = server
        self.conn_id = conn_id
        self.counters = counters
        self.timeout_s = settings.handshake_timeout_s
        super().__init__(
            stream,
            engine,
            self._core_events,
            pause_reading=self._core_pauses_reading,
            write_high_water=settings.write_high_water_bytes,
            on_output_blocked=self._core_output_blocked,
            initial=initial,
            open_deadline=open_deadline,
            on_open_timeout=self._handshake_timed_out,
        )

    def _core_events(self, events: list[Event]) -> None:
        self.server._on_events(self.engine, events)

    def _core_pauses_reading(self) -> bool:
        server = self.server
        if server.core.read_paused(self.engine):
            server._paused.add(self)  # _after_core asks it to look again
            return True
        return False

    def _core_output_blocked(self, blocked: bool) -> None:
        server = self.server
        server.core.set_output_blocked(self.engine, blocked, server.clock())
        server._after_core()

    def _handshake_timed_out(self) -> None:
        """The driver drops the connection now (it closes the socket; _forget releases the rest)."""
        if self.counters is not None:
            self.counters.handshake_timeouts += 1
        log.info("connection %d: no open within the handshake time-out (%g s); dropping it", self.conn_id, self.timeout_s)


def _close_reason(engine: Connection) -> str:
    """What the log says of the peer's close: its error's condition and description when it is
    an error record. The engine checks the field's type; this does not rely on it (a string or
    a number there must not break the clean-up), and bounds what hostile text gets logged."""
    error: Any = engine.remote_error
    if error is None:
        return ""
    if isinstance(error, Error):
        text = f"{error.condition}: {error.description or ''}"
    else:
        text = f"an error field of type {type(error).__name__}"
    return f" ({text[:CLOSE_REASON_MAX]!r})"
