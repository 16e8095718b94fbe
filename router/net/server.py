"""The router's network side: it joins trio sockets to the sans-IO routing core.

    server = RouterServer(config)
    addresses = await nursery.start(server.run)   # [(listener name, host, port), ...]
    ...
    server.shutdown()                             # or cancel run(): both stop gracefully

Owns: the listeners, one ConnectionDriver per connection (engine from `new_engine`), calling
the core with wall-clock time and waking the writers of the engines it touched, the core's
timer, socket backpressure (reads paused while the core says so, output blocked/unblocked as
writers cross their high-water marks) and graceful shutdown (stop accepting, close every
connection with amqp:connection:forced, let writers flush, then drop the sockets).
Must not touch: routing decisions (router.core), protocol rules (router.amqp).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from functools import partial
from typing import Any, Protocol

import trio

from ..amqp.connection import Connection
from ..amqp.events import Event
from ..config.models import Listener, RouterConfig
from ..core.connections import new_engine
from .driver import ConnectionDriver

log = logging.getLogger(__name__)

SHUTDOWN_FLUSH_S = 2.0  # how long writers may flush the closes before sockets are dropped

BoundAddress = tuple[str, str, int]  # (listener name, host, port)


class Core(Protocol):
    """What the server needs from the routing core (router.core.router.RouterCore)."""

    @property
    def router_id(self) -> str: ...
    def accept(self, engine: Connection, listener: Listener) -> Any: ...
    def handle(self, engine: Connection, events: list[Event], now: float) -> None: ...
    def take_touched(self) -> set[Connection]: ...
    def tick(self, now: float) -> None: ...
    def next_deadline(self) -> float | None: ...
    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None: ...
    def read_paused(self, engine: Connection) -> bool: ...
    def shutdown(self, now: float) -> None: ...


def _peer_name(stream: trio.abc.Stream) -> str:
    if isinstance(stream, trio.SocketStream):
        try:
            host, port = stream.socket.getpeername()[:2]
            return f"{host}:{port}"
        except OSError:
            pass
    return type(stream).__name__


class RouterServer:
    """Serves every listener of `config` with one RouterCore (or the `core` given, for tests)."""

    def __init__(self, config: RouterConfig, *, core: Core | None = None) -> None:
        if core is None:
            # Imported here rather than at the top so that this module (and the server tests,
            # which may run it on a stand-in core) does not depend on the core's internals.
            from ..core.router import RouterCore

            core = RouterCore(config)
        self.config = config
        self.core: Core = core
        self.addresses: list[BoundAddress] = []
        self._drivers: dict[Connection, ConnectionDriver] = {}
        self._paused: set[ConnectionDriver] = set()
        self._ids = itertools.count(1)
        # The timer sleeps until _timer_at (wall clock) or until _timer_wake is set.
        self._timer_at = math.inf
        self._timer_wake = trio.Event()
        self._stop = trio.Event()
        self._stopped = trio.Event()

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
        bound = await self._bind()  # before anything runs: a port in use fails run() at once
        async with trio.open_nursery() as nursery:
            try:
                await nursery.start(self._serve, bound)
                task_status.started(list(self.addresses))
                await self._stopped.wait()
            finally:
                # Cancellation lands here: _serve is shielded and turns this into the same
                # graceful stop (bounded by SHUTDOWN_FLUSH_S) before run() lets it propagate.
                self.shutdown()

    @property
    def stopping(self) -> bool:
        """shutdown() was called (or run() cancelled)."""
        return self._stop.is_set()

    def shutdown(self) -> None:
        """Stop accepting, close every connection (amqp:connection:forced), flush, stop."""
        self._stop.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def _bind(self) -> list[tuple[Listener, list[trio.SocketListener]]]:
        bound: list[tuple[Listener, list[trio.SocketListener]]] = []
        try:
            for listener in self.config.listeners:
                sockets = await trio.open_tcp_listeners(listener.port, host=listener.host)
                bound.append((listener, sockets))
        except BaseException:
            for _, sockets in bound:
                for sock in sockets:
                    await trio.aclose_forcefully(sock)
            raise
        # With port 0 every socket of a listener (one per address of the host) gets its own
        # port: the first one is the one we report.
        self.addresses = [
            (listener.name, listener.host, sockets[0].socket.getsockname()[1]) for listener, sockets in bound
        ]
        for name, host, port in self.addresses:
            log.info("listener %s on %s:%d", name, host, port)
        return bound

    async def _serve(
        self,
        bound: list[tuple[Listener, list[trio.SocketListener]]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        # Shielded so that cancelling run() cannot cut the connections off mid-flush: run()
        # asks for a stop instead and this scope finishes it within SHUTDOWN_FLUSH_S.
        try:
            with trio.CancelScope(shield=True):
                async with trio.open_nursery() as connections:
                    accepting = trio.CancelScope()
                    connections.start_soon(self._accept, bound, connections, accepting)
                    connections.start_soon(self._timer)
                    task_status.started()
                    await self._stop.wait()
                    await self._stop_gracefully(accepting)
                    connections.cancel_scope.cancel()
        finally:
            self._stopped.set()

    async def _stop_gracefully(self, accepting: trio.CancelScope) -> None:
        accepting.cancel()  # listeners close as their accept loops end
        log.info("shutting down: closing %d connection(s)", len(self._drivers))
        self.core.shutdown(time.time())
        self._after_core()
        with trio.move_on_after(SHUTDOWN_FLUSH_S):
            for driver in list(self._drivers.values()):
                await driver.wait_closed()
        unfinished = sum(1 for driver in self._drivers.values() if not driver.closed)
        if unfinished:
            log.info("dropping %d connection(s) that did not finish closing", unfinished)

    async def _accept(
        self,
        bound: list[tuple[Listener, list[trio.SocketListener]]],
        connections: trio.Nursery,
        scope: trio.CancelScope,
    ) -> None:
        try:
            with scope:
                async with trio.open_nursery() as nursery:
                    for listener, sockets in bound:
                        handler = partial(self.serve_stream, listener=listener)
                        nursery.start_soon(
                            partial(trio.serve_listeners, handler, sockets, handler_nursery=connections)
                        )
        finally:
            # serve_listeners closes its sockets; these are the ones it never got to.
            with trio.CancelScope(shield=True):
                for _, sockets in bound:
                    for sock in sockets:
                        await trio.aclose_forcefully(sock)

    # --- connections -----------------------------------------------------------------------------

    async def serve_stream(self, stream: trio.abc.Stream, listener: Listener) -> None:
        """Run one connection (accepted on `listener`) over `stream` until it is over."""
        # No socket options to set: trio's SocketStream turns TCP_NODELAY on for every TCP
        # stream (checked by the server tests). With Nagle on, a small disposition or flow
        # would wait for the peer's delayed ACK, costing ~40 ms per round trip.
        engine = new_engine(self.config, listener)
        self.core.accept(engine, listener)
        conn_id = next(self._ids)

        def pause_reading() -> bool:
            if self.core.read_paused(engine):
                self._paused.add(driver)  # _after_core asks it to look again
                return True
            return False

        def output_blocked(blocked: bool) -> None:
            self.core.set_output_blocked(engine, blocked, time.time())
            self._after_core()

        driver = ConnectionDriver(
            stream,
            engine,
            partial(self._on_events, engine),
            pause_reading=pause_reading,
            write_high_water=listener.write_high_water_bytes,
            on_output_blocked=output_blocked,
        )
        self._drivers[engine] = driver
        log.info("connection %d from %s on listener %s", conn_id, _peer_name(stream), listener.name)
        try:
            await driver.run()
        except Exception:
            # A bug (or hostile bytes the core mishandles) costs this connection, not the router.
            log.exception("connection %d failed", conn_id)
        finally:
            del self._drivers[engine]
            self._paused.discard(driver)
            self._forget(engine, conn_id)

    def _forget(self, engine: Connection, conn_id: int) -> None:
        # Normally the driver already fed the end of stream (the core saw TransportClosed);
        # after a cancellation or a failure it did not, and the core must still forget us.
        engine.receive_data(b"", trio.current_time())
        events = engine.events()
        try:
            if events:
                self.core.handle(engine, events, time.time())
            self._after_core()
        except Exception:
            log.exception("connection %d: the core failed to forget it", conn_id)
        error = engine.remote_error
        reason = f" ({error.condition}: {error.description or ''})" if error is not None else ""
        log.info("connection %d closed%s", conn_id, reason)

    def _on_events(self, engine: Connection, events: list[Event]) -> None:
        self.core.handle(engine, events, time.time())
        self._after_core()

    def _after_core(self) -> None:
        """After any call into the core: flush what it queued, let paused readers look again,
        and move the timer if the core now needs it earlier."""
        drivers = self._drivers
        for engine in self.core.take_touched():
            driver = drivers.get(engine)
            if driver is not None:
                driver.flush()  # written now when the socket takes it: no writer wake-up
        # The core's buffered bytes change only inside its calls, and every call ends here:
        # a paused reader is therefore always asked again after the change that may free it.
        if self._paused:
            paused, self._paused = self._paused, set()
            for driver in paused:
                driver.resume_reading()
        deadline = self.core.next_deadline()
        if deadline is not None and deadline < self._timer_at:
            self._timer_wake.set()

    async def _timer(self) -> None:
        """Tick the core at its next deadline.

        Woken by an event only when a call moved the deadline earlier than the one we sleep
        until (a later one costs a single early wake-up, after which we re-read it). Polling
        every 100 ms instead would wake an idle router ten times a second forever and make
        timers up to 100 ms late; an event per call would cost a task switch per batch.
        """
        while True:
            deadline = self.core.next_deadline()
            self._timer_at = math.inf if deadline is None else deadline
            self._timer_wake = trio.Event()
            with trio.move_on_after(max(0.0, self._timer_at - time.time())):
                await self._timer_wake.wait()
                continue  # re-read the deadline
            self.core.tick(time.time())
            self._after_core()
