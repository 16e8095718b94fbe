"""The AMQP listeners that are open right now, by name, and their accept loops.

    listeners = AmqpListeners(handler)            # handler(stream, listener): runs one connection
    port = listeners.open(listener)               # bound synchronously: the port is known at once
    listeners.serve(accept_nursery, connection_nursery)
    listeners.close("amqp")                       # stops accepting; its connections carry on

Owns: binding (synchronously, so that a management request that creates a listener can answer
with the bound port in the same call, and a request that deletes one returns only after the port
refuses connections), one accept task per socket that can end alone (backing off when accept
fails, e.g. out of descriptors), per-listener counters of refusals, and closing.
Must not touch: what a connection does once accepted (the handler's), the listener's settings.

Deleting a listener closes its sockets only. Connections it accepted keep running with the
settings they were accepted with: an operator who removes a listener to stop new clients should
not cut off the ones that are working (qdrouterd behaves the same); closing those is a
separate, explicit act.
"""

from __future__ import annotations

import errno
import logging
import math
import socket as stdsocket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import trio

from ..config.models import Listener

log = logging.getLogger(__name__)



class BoundSocket(Protocol):
    """What the listeners use of a bound socket: its address (for the port) and closing it."""

    def getsockname(self) -> Any: ...
    def close(self) -> None: ...


class ListeningSocket(Protocol):
    """A trio.SocketListener, or a stand-in with no socket (router.testing.memrouter): accept()
    raises trio.ClosedResourceError once `socket.close()` was called."""

    @property
    def socket(self) -> BoundSocket: ...
    async def accept(self) -> trio.abc.Stream: ...


Handler = Callable[[trio.abc.Stream, Listener], Awaitable[None]]
Bind = Callable[[str, int], list[ListeningSocket]]

# Accept errors that mean "out of file descriptors or memory for now": wait and try again
# rather than end the listener (trio.serve_listeners does the same). Other accept errors back
# off the same way: a listener that stops accepting for good is worse than one that retries.
CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
ACCEPT_BACKOFF_MIN_S = 0.01  # the first wait after a failed accept; it doubles per failure ...
ACCEPT_BACKOFF_MAX_S = 1.0  # ... up to this
ACCEPT_LOG_INTERVAL_S = 10.0  # at most one log line per listener socket this often


@dataclass
class ListenerCounters:
    """What management shows of a listener's refusals (from 0 whenever it is opened)."""

    accept_failures: int = 0  # accept() failed (EMFILE, ENFILE, ENOBUFS, ENOMEM, ...)
    handshake_timeouts: int = 0  # connections dropped: no open within handshake_timeout_s
    upgrades_refused: int = 0  # WebSocket upgrade requests refused with an HTTP error (websocket listeners)


@dataclass
class _Open:
    listener: Listener
    sockets: list[ListeningSocket]
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    started: bool = False

    @property
    def port(self) -> int:
        # With port 0 every socket (one per address of the host) gets its own port: the first
        # one is the one we report.
        port: int = self.sockets[0].socket.getsockname()[1]
        return port


def bind_tcp(host: str, port: int) -> list[ListeningSocket]:
    """Listening sockets for every address of `host`, bound now (like trio.open_tcp_listeners,
    which is async only because of the name lookup; the hosts of listeners are addresses or
    names the system resolves locally, so the lookup does not wait on the network)."""
    infos = stdsocket.getaddrinfo(host or None, port, type=stdsocket.SOCK_STREAM, flags=stdsocket.AI_PASSIVE)
    sockets: list[ListeningSocket] = []
    try:
        for family, kind, proto, _, address in infos:
            sock = stdsocket.socket(family, kind, proto)
            try:
                sock.setsockopt(stdsocket.SOL_SOCKET, stdsocket.SO_REUSEADDR, 1)
                if family == stdsocket.AF_INET6:
                    sock.setsockopt(stdsocket.IPPROTO_IPV6, stdsocket.IPV6_V6ONLY, 1)
                sock.bind(address)
                sock.listen(stdsocket.SOMAXCONN)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            sockets.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
    except BaseException:
        for listener in sockets:
            listener.socket.close()
        raise
    if not sockets:
        raise OSError(errno.EADDRNOTAVAIL, f"no address to listen on for {host!r}")
    return sockets


class AmqpListeners:
    def __init__(self, handler: Handler, *, bind: Bind | None = None) -> None:
        """`bind(host, port)`: the listening sockets (bind_tcp; tests give wrappers)."""
        self._handler = handler
        self._bind = bind or bind_tcp
        self._counters: dict[str, ListenerCounters] = {}
        self._open: dict[str, _Open] = {}
        self._accepting: trio.Nursery | None = None
        self._connections: trio.Nursery | None = None

    def ports(self) -> dict[str, int]:
        """The bound port of every open listener, by name."""
        return {name: entry.port for name, entry in self._open.items()}

    def counters(self, name: str) -> ListenerCounters:
        """The counters of listener `name` (zeros, not kept, for a listener that is not open)."""
        counters = self._counters.get(name)
        if counters is None:
            counters = ListenerCounters()
            if name in self._open:
                self._counters[name] = counters
        return counters

    def get(self, name: str) -> Listener | None:
        entry = self._open.get(name)
        return entry.listener if entry is not None else None

    def open(self, listener: Listener) -> int:
        """Bind `listener` (OSError if its port is taken) and start accepting once serving."""
        if listener.name in self._open:
            raise ValueError(f"listener {listener.name!r} exists")
        entry = _Open(listener, self._bind(listener.host, listener.port))
        self._open[listener.name] = entry
        log.info("listener %s on %s:%d", listener.name, listener.host, entry.port)
        if self._accepting is not None:
            self._start(entry)
        return entry.port

    def open_all(self, listeners: Iterable[Listener]) -> list[int]:
        """open() each of `listeners`, or none of them (the first failure closes the others)."""
        try:
            return [self.open(listener) for listener in listeners]
        except BaseException:
            self.close_all()
            raise

    def close(self, name: str) -> bool:
        """Stop accepting on `name` now (its sockets are closed before this returns); False if
        there is no such listener. Connections already accepted are not touched."""
        entry = self._open.pop(name, None)
        if entry is None:
            return False
        self._counters.pop(name, None)  # its counters start again if it is re-opened (an update)
        entry.scope.cancel()
        # Closed here rather than by the accept tasks as they end: the port must refuse new
        # connections as soon as the caller has its answer. trio's close wakes a task waiting
        # on the socket with ClosedResourceError, which the accept loop takes as its end.
        for sock in entry.sockets:
            sock.socket.close()
        log.info("listener %s closed", name)
        return True

    def close_all(self) -> None:
        for name in list(self._open):
            self.close(name)

    def serve(self, accepting: trio.Nursery, connections: trio.Nursery) -> None:
        """Accept on every open listener (and on those opened later) in `accepting`; run each
        connection in `connections`."""
        self._accepting, self._connections = accepting, connections
        for entry in self._open.values():
            self._start(entry)

    def _start(self, entry: _Open) -> None:
        assert self._accepting is not None
        if entry.started:
            return
        entry.started = True
        for sock in entry.sockets:
            self._accepting.start_soon(self._accept, entry, sock)

    async def _accept(self, entry: _Open, sock: ListeningSocket) -> None:
        assert self._connections is not None
        name = entry.listener.name
        counters = self.counters(name)
        delay = 0.0
        unlogged = 0  # failures since the last log line
        logged_at = -math.inf
        with entry.scope:
            while True:
                try:
                    stream = await sock.accept()
                except trio.ClosedResourceError:
                    return  # close() closed it
                except OSError as exc:
                    # Out of descriptors (or memory): every retry fails until a connection
                    # ends, so back off (10 ms doubling to 1 s) rather than spin, and log once
                    # per interval with the count rather than per failure.
                    counters.accept_failures += 1
                    unlogged += 1
                    delay = min(ACCEPT_BACKOFF_MAX_S, delay * 2) if delay else ACCEPT_BACKOFF_MIN_S
                    now = trio.current_time()
                    if now - logged_at >= ACCEPT_LOG_INTERVAL_S:
                        kind = "out of resources" if exc.errno in CAPACITY_ERRNOS else "error"
                        log.error("listener %s: cannot accept (%s: %s); %d failure(s) since the last report, "
                                  "%d in all; retrying within %g s", name, kind, exc, unlogged,
                                  counters.accept_failures, ACCEPT_BACKOFF_MAX_S)  # fmt: skip
                        logged_at, unlogged = now, 0
                    await trio.sleep(delay)
                else:
                    if delay:
                        log.info("listener %s: accepting again", name)
                        delay = 0.0
                    self._connections.start_soon(self._serve_one, stream, entry.listener)

    async def _serve_one(self, stream: trio.abc.Stream, listener: Listener) -> None:
        """One accepted connection: its exception (the handler is guarded already) must never
        reach the connections' nursery, which every other connection shares."""
        try:
            await self._handler(stream, listener)
        except Exception:
            log.exception("listener %s: a connection's handler failed", listener.name)
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(stream)
