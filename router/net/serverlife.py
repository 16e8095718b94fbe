"""The router server's life cycle (server.py's RouterServer is a ServerLifecycle): open the
listeners, serve, and stop gracefully.

run() opens the AMQP listeners (a port in use fails it at once), installs the management agent
the server made, serves the connections (accept loops, connectors, the core's timer, the poller,
flow records) in a shielded nursery, and the HTTP listeners beside it. The graceful stop (shutdown(), or a
cancelled run()): stop accepting; quiesce the core, no new credit nor links, and wait until no
delivery is in flight or the drain deadline; close every connection with
amqp:connection:forced, let writers flush until `drain_s` is up, then drop the sockets; a
cancelled run() skips the wait for deliveries in flight. HTTP stops last.
Owns: the stop's events and its order, the addresses bound, the HTTP listeners' application.
Must not touch: making the parts (server.py's), routing decisions (router.core), protocol rules
(router.amqp).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import trio

from ..management import gcpauses
from .connectors import Connectors
from .control import NetControl
from .corepump import Core, CorePump
from .flowtask import FlowTask
from .http_server import serve_http
from .listeners import AmqpListeners
from .poller import Poller

log = logging.getLogger("router.net.server")  # the server's log, as before its parts had modules

SHUTDOWN_FLUSH_S = 2.0  # how long writers may flush the closes before sockets are dropped
# Of `drain_s`, what is kept for the closes after waiting for deliveries in flight (at most half).
CLOSE_MARGIN_S = 1.0

BoundAddress = tuple[str, str, int]  # (listener name, host, port)


class ServerLifecycle:
    """Runs and stops the parts a RouterServer made (the attributes declared here, set by its
    __init__ after this one's)."""

    core: Core
    agent: Any
    pump: CorePump
    poller: Poller
    flow: FlowTask | None
    clock: Callable[[], float]
    control: NetControl
    _listeners: AmqpListeners
    _connectors: Connectors
    _installs_agent: bool

    def __init__(self, drain_s: float) -> None:
        self.drain_s = drain_s
        self.addresses: list[BoundAddress] = []
        self.http_addresses: list[BoundAddress] = []
        self._stop = trio.Event()
        self._stopped = trio.Event()
        self._http_stop = trio.Event()  # set once the AMQP side has stopped
        self._app: Any = None

    async def run(self, *, task_status: trio.TaskStatus[list[BoundAddress]] = trio.TASK_STATUS_IGNORED) -> None:
        """Bind every listener, serve until shutdown() or cancellation, then stop gracefully."""
        self._open_configured()  # before anything runs: a port in use fails run() at once
        gcpauses.watch()  # the collector's pauses, for the memory entity and /metrics
        if self._installs_agent:
            from .management_face import install_management

            install_management(self.core, self.agent)
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(self._serve)
                for http in self.control.config.http:
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
        listeners = self.control.config.listeners
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
