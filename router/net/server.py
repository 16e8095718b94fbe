"""The router's network side: it joins trio sockets to the sans-IO routing core.

    server = RouterServer(config)
    addresses = await nursery.start(server.run)   # [(listener name, host, port), ...]
    ...
    server.shutdown()                             # or cancel run(): both stop gracefully
    server.http_addresses                         # [(http listener name, host, port), ...]

Owns: composing the network side's parts, each with one job, and the router's life cycle. The
parts: the core pump (corepump.py: events into the core, flushing the connections it touched,
its timer, the one monotonic clock `clock` the core is called with, trio's by default; the
wall-clock offset is captured once here), the connection guard (guard.py: one ConnectionDriver
per connection, confined to it and released however it ends, the handshake time-out), the
intake (intake.py: TLS and the WebSocket upgrade before AMQP, the engine registered with the
core), the AMQP listeners and connectors (listeners.py, connectors.py) and their run-time
control (control.py: the management agent's ConfigControl, and `reload`, applying a changed
configuration file through the agent), the HTTP listeners (http_server.py serves
router.management.http: management as JSON, /metrics, /healthz) and the management agent's
installation (management_face.py). The life cycle: open the listeners, serve, and stop
gracefully (stop accepting; quiesce the core, no new credit nor links, and wait until no
delivery is in flight or the drain deadline; close every connection with amqp:connection:forced,
let writers flush until `drain_s` is up, then drop the sockets; a cancelled run() skips the
wait for deliveries in flight).
Must not touch: routing decisions (router.core), protocol rules (router.amqp).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from ..amqp.connection import Connection
from ..config.models import Connector, Listener, RouterConfig, SslProfile
from .connectors import Connectors, Dial
from .control import NetControl
from .corepump import Core, CorePump
from .driver import ConnectionDriver
from .flowtask import FlowTask
from .guard import ConnectionGuard
from .guard import _close_reason as _close_reason  # noqa: F401  (tests import it from here)
from .http_server import serve_http
from .intake import ConnectionIntake
from .listeners import AmqpListeners, Bind, ListenerCounters
from .now import run_clock
from .poller import Poller
from .reload import ReloadReport
from .tls import TlsProfiles

__all__ = ["BoundAddress", "Core", "RouterServer"]

log = logging.getLogger(__name__)

SHUTDOWN_FLUSH_S = 2.0  # how long writers may flush the closes before sockets are dropped
# Of `drain_s`, what is kept for the closes after waiting for deliveries in flight (at most half).
CLOSE_MARGIN_S = 1.0

BoundAddress = tuple[str, str, int]  # (listener name, host, port)


class RouterServer:
    """Serves every listener of `config` with one RouterCore and its management agent (or the
    `core` given, for tests, with the `agent` given or none)."""

    def __init__(
        self,
        config: RouterConfig,
        *,
        core: Core | None = None,
        agent: Any = None,
        clock: Callable[[], float] | None = None,
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
        self.drain_s = drain_s
        if clock is None:  # trio's, read without finding the run each time (now.run_clock)
            clock = run_clock()
        self.clock = clock
        self.wall_offset = wall_clock() - clock()
        self._installs_agent = False
        if core is None:
            # Imported here rather than at the top so that this module (and the server tests,
            # which may run it on a stand-in core) does not depend on the core's internals.
            from ..core.router import RouterCore

            core = RouterCore(config, wall_offset=self.wall_offset)
            self._installs_agent = agent is None
        self.core: Core = core
        self.pump = CorePump(core, clock)
        self.poller = Poller()
        self.guard = ConnectionGuard(self.pump, self.poller)
        # TlsError (naming the profile and the file) if a profile's files do not load.
        self.tls = TlsProfiles(config.ssl_profiles)
        self.intake = ConnectionIntake(self._config_in_force, core, clock, self.tls, self._listener_counters, self.guard)
        # The connections' handlers: the intake's own (a trampoline here would be one more
        # coroutine frame held by every idle connection).
        self.serve_stream = self.intake.serve_stream
        self.serve_outgoing = self.intake.serve_outgoing
        self._listeners = AmqpListeners(self.intake.serve_stream, bind=bind)
        self._connectors = Connectors(self.intake.serve_outgoing, secure=self.intake.secure_outgoing, dial=dial)
        self.control = NetControl(config, self._listeners, self._connectors, self.tls,
                                  stopping=self._stopping, after_core=self.pump.after_core)  # fmt: skip
        if self._installs_agent:
            from .management_face import new_agent  # it loads the agent, which reads the core

            # Its ConfigControl is this server (which hands each call to the control), so that
            # what management changes goes through the same methods as the CLI's and tests'.
            agent = new_agent(core, config, self, clock)
        self.agent: Any = agent
        self.control.agent = agent
        for connector in config.connectors:
            self._connectors.add(connector)
        # Flow records (router.net.flowtask), when configured: on the router's own core only.
        self.flow: FlowTask | None = None
        if config.flow.enabled and hasattr(core, "forwarder"):
            from .. import __version__

            self.flow = FlowTask(core, config.flow, clock, __version__)
        self.addresses: list[BoundAddress] = []
        self.http_addresses: list[BoundAddress] = []
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._http_stop = trio.Event()  # set once the AMQP side has stopped
        self._app: Any = None

    @property
    def config(self) -> RouterConfig:
        """The configuration in force (a reload changes its users)."""
        return self.control.config

    @property
    def file_config(self) -> RouterConfig:
        """The last configuration file applied (what reload() diffs a changed file against)."""
        return self.control.file_config

    @property
    def _drivers(self) -> dict[Connection, ConnectionDriver]:
        """Every connection's driver, by engine (tests look at them)."""
        return self.pump.drivers

    def stats(self) -> dict[str, int]:
        """Connections, and how many of them are held back by backpressure right now."""
        return self.guard.stats()

    def _config_in_force(self) -> RouterConfig:
        return self.control.config

    def _listener_counters(self, name: str) -> ListenerCounters:
        return self._listeners.counters(name)

    def _stopping(self) -> bool:
        return self._stop.is_set()

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
                self.pump.drained.set()
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
        listeners = self.config.listeners
        ports = self._listeners.open_all(listeners)
        self.addresses = [(listener.name, listener.host, port) for listener, port in zip(listeners, ports)]

    async def _serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Shielded so that cancelling run() cannot cut the connections off mid-flush: run()
        # asks for a stop instead and this scope finishes it within SHUTDOWN_FLUSH_S.
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as connections:
                    # Accept loops live beside the connections: each has its own cancel scope.
                    self._listeners.serve(connections, connections)
                    self._connectors.serve(connections)
                    connections.start_soon(self.pump.timer)
                    connections.start_soon(self.poller.run)
                    if self.flow is not None:
                        connections.start_soon(self.flow.run, self.pump.after_core)
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
        await self.pump.drain_in_flight(deadline - min(CLOSE_MARGIN_S, self.drain_s / 2))
        pump, drivers = self.pump, self.pump.drivers
        if self.flow is not None:  # the last records go out while their subscribers are still here
            try:
                self.flow.final(self.clock())
                pump.after_core()
            except Exception:
                log.exception("flow records: the last flush failed")
        log.info("shutting down: closing %d connection(s)", len(drivers))
        try:
            self.core.shutdown(self.clock())
            pump.after_core()
        except Exception:  # the connections are dropped below all the same
            log.exception("the core failed to close the connections")
        with trio.move_on_at(deadline):
            for driver in list(drivers.values()):
                await driver.wait_closed()
        unfinished = sum(1 for driver in drivers.values() if not driver.closed)
        if unfinished:
            log.info("dropping %d connection(s) that did not finish closing", unfinished)

    def _http_app(self) -> Any:
        """The ASGI application of every HTTP listener (one: its metrics registry reads the router
        once per scrape, whichever listener the scrape came in on)."""
        if self._app is None:
            if self.agent is None:
                raise RuntimeError("HTTP listeners need the management agent (a stand-in core has none)")
            from .management_face import http_app

            # After an HTTP request the agent may have changed the core (an address rule): flush
            # what that queued, as after any call into the core.
            self._app = http_app(self.agent, healthy=lambda: not self.stopping, after_call=self.pump.after_core)
        return self._app

    # --- run-time configuration (the management agent's ConfigControl): control.py's ----------

    def reload(self, new: RouterConfig) -> ReloadReport:
        return self.control.reload(new)

    def create_listener(self, listener: Listener) -> int:
        return self.control.create_listener(listener)

    def delete_listener(self, name: str) -> bool:
        return self.control.delete_listener(name)

    def listener_ports(self) -> dict[str, int]:
        return self.control.listener_ports()

    def listener_counters(self, name: str) -> dict[str, int]:
        return self.control.listener_counters(name)

    def update_ssl_profile(self, profile: SslProfile) -> None:
        self.control.update_ssl_profile(profile)

    def remove_ssl_profile(self, name: str) -> None:
        self.control.remove_ssl_profile(name)

    def ssl_profile_loads(self, name: str) -> int:
        return self.control.ssl_profile_loads(name)

    def create_connector(self, connector: Connector) -> None:
        self.control.create_connector(connector)

    def delete_connector(self, name: str) -> bool:
        return self.control.delete_connector(name)

    def connector_status(self, name: str) -> tuple[str, str] | None:
        return self.control.connector_status(name)
