"""One connection's whole life in the server, inside a guard: registered with the core, driven,
forgotten.

    guard = ConnectionGuard(pump)
    await guard.run(stream, register, settings, label, counters)   # never raises but cancellation
    guard.stats()                                                  # connections, backpressure

Owns: connection numbers (for the log), making each connection's driver (a ServerDriver: its
callbacks go to the core pump) and registering it in the pump's registry for as long as it runs,
the handshake time-out's deadline and counting it, confining whatever a connection does (a bug,
or hostile bytes the core or the engine mishandles) to that connection, and releasing
everything however it ends (the core forgets it, the stream is closed), the log line of its end.
Must not touch: how the stream was made (router.net.intake), the core's calls beyond the pump's.
"""

from __future__ import annotations

import itertools
import logging
import math
import socket as stdsocket
from collections.abc import Callable
from typing import Any

import trio

from ..amqp.connection import Connection
from ..amqp.performatives import Error
from ..config.models import ConnectionSettings
from .corepump import CorePump
from .listeners import ListenerCounters
from .poller import Poller
from .serverdriver import ServerDriver
from .tls import transport_of

log = logging.getLogger("router.net.server")  # the server's log, as before its parts had modules

CLOSE_REASON_MAX = 200  # characters of a peer's close error that the log shows


class ConnectionGuard:
    def __init__(self, pump: CorePump, poller: Poller | None = None) -> None:
        """`poller`: reads the TCP connections (plain or under TLS) (router.net.poller) while it runs."""
        self.pump = pump
        self.poller = poller
        self._ids = itertools.count(1)

    def stats(self) -> dict[str, int]:
        """Connections, and how many of them are held back by backpressure right now."""
        drivers = self.pump.drivers.values()
        return {
            "connections": len(drivers),
            "reading_paused": sum(1 for driver in drivers if driver.reading_paused),
            "output_blocked": sum(1 for driver in drivers if driver.output_blocked),
        }

    async def run(
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
        """The guard around one connection's whole life: `register()` makes its engine and
        registers it with the core; then it is driven and forgotten. An exception from any of
        them is logged and ends this connection only; however it ends, the core forgets it and
        the stream is closed. `deadline` (trio's clock): of the handshake time-out, when it
        started before (a TLS handshake's); from now otherwise."""
        conn_id = next(self._ids)
        engine: Connection | None = None
        pump = self.pump
        try:
            engine = register()
            # Named as the core names it (management's connection identity, the core's own log
            # lines) once it has one.
            core_id = getattr(engine.context, "id", None)
            if isinstance(core_id, int):
                conn_id = core_id
            log.info("connection %d %s", conn_id, label)
            # Driven here, not in a coroutine of its own: every coroutine frame held while the
            # connection waits is memory of every idle connection.
            driver = self._new_driver(stream, engine, settings, conn_id, counters, initial, deadline)
            try:
                driver.wake()  # an outgoing connection's engine has its header and open queued already
                await driver.run()
            finally:
                pump.unregister(engine)
        except* Exception:
            # `except*`: a failure that comes inside an exception group together with a
            # cancellation (the driver's tasks, while the router stops) is logged here too, and
            # only the cancellation goes on.
            log.exception("connection %d %s failed", conn_id, label)
        finally:
            if engine is not None:
                pump.forget(engine, conn_id)
                log.info("connection %d closed%s", conn_id, _close_reason(engine))
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
    ) -> ServerDriver:
        """The driver of a connection, registered (run() runs it and unregisters it)."""
        # trio's SocketStream turns TCP_NODELAY on for every TCP stream (checked by the server
        # tests): with Nagle on, a small disposition or flow would wait for the peer's delayed
        # ACK, costing ~40 ms per round trip. The kernel buffers are bounded where asked
        # (socket_buffer_bytes; the kernel autotunes them otherwise): bytes queued there are
        # out of reach of the router's priority bands (docs/mesh.md, "Priorities").
        if settings.socket_buffer_bytes:
            bound_socket_buffers(stream, settings.socket_buffer_bytes)

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
        driver = ServerDriver(self.pump, stream, engine, settings, conn_id, counters, initial, deadline, self.poller)
        self.pump.drivers[engine] = driver
        return driver


def bound_socket_buffers(stream: trio.abc.Stream, nbytes: int) -> None:
    """SO_SNDBUF and SO_RCVBUF of `stream`'s TCP socket (under TLS too) to `nbytes` (the kernel
    doubles them for its bookkeeping); nothing for a stream without one (memory, WebSocket)."""
    transport = transport_of(stream)
    if not isinstance(transport, trio.SocketStream):
        return
    sock = transport.socket
    for option in (stdsocket.SO_SNDBUF, stdsocket.SO_RCVBUF):
        try:
            sock.setsockopt(stdsocket.SOL_SOCKET, option, nbytes)
        except OSError as exc:  # (a socket already reset: the connection fails on its own)
            log.debug("socket buffer not set: %s", exc)


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
