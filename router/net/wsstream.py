"""The trio side of AMQP over WebSocket: the upgrade on an accepted stream (plain TCP or a
TlsStream: wss) and WebSocketStream, the stream of AMQP bytes the connection driver runs over.

    stream, initial = await accept(tcp_or_tls, listener)   # WebSocketRefused with the reason
    ConnectionDriver(stream, engine, ..., initial=initial)
    await linger_after_refusal(tcp_or_tls)                  # after a refusal, before the close

The driver sees an ordinary trio stream (receive_some/send_all): it reads TCP and TLS sockets
directly for speed, a WebSocket connection pays a task switch per read more, which only
WebSocket listeners choose. Two tasks write here: the driver's writer (AMQP, send_all) and its
reader (pongs and the answer to the peer's close, from receive_some); a lock keeps their frames
whole. A peer that floods pings but does not read stalls only its own reader.

Both ends are lingering closes: after our close frame (or a refusal's HTTP answer) what the peer
still sends is read and dropped, briefly and up to a bound, because closing a socket with unread
bytes resets the connection and the reset can destroy the answer before the peer reads it.

Owns: the upgrade's socket I/O (within the caller's time-out), WebSocket framing on the wire,
the close frame and the lingering close.
Must not touch: the upgrade's checks (websocket.py), TLS (tlssession.py), AMQP.
"""

from __future__ import annotations

import trio

from ..config.models import Listener
from .websocket import Accepted, WebSocketFraming, WebSocketUpgrade, max_frame_bytes

UPGRADE_READ = 4096
CLOSE_SEND_S = 0.5  # how long a refusal's HTTP answer may take to go out
CLOSE_LINGER_S = 0.5  # as the connection ends: how long our close frame and the peer's answer may take ...
CLOSE_LINGER_BYTES = 256 * 1024  # ... and how much of what it still sends is read and dropped

_STREAM_ERRORS = (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError)


class WebSocketRefused(Exception):
    """A peer that did not get as far as a WebSocket (a refused or unfinished upgrade)."""

    def __init__(self, reason: str, *, answered: bool = False) -> None:
        super().__init__(reason)
        self.answered = answered  # refused with an HTTP error (not a peer that left mid-request)


async def accept(stream: trio.abc.Stream, listener: Listener, initial: bytes = b"") -> tuple[WebSocketStream, bytes]:
    """Run the server side of the upgrade on `stream` (`initial`: bytes of it read already):
    (the stream of AMQP bytes, AMQP bytes that came with the upgrade). WebSocketRefused after
    the refusal's HTTP answer went out (linger_after_refusal before closing the socket)."""
    upgrade = WebSocketUpgrade(path=listener.websocket_path, max_request_bytes=listener.websocket_max_request_bytes,
                               origins=listener.websocket_origins)  # fmt: skip
    data = initial
    while True:
        if not data:
            data = bytes(await stream.receive_some(UPGRADE_READ))
        decision = upgrade.receive(data)
        if decision is not None:
            break
        data = b""
    if not isinstance(decision, Accepted):
        if decision.response:
            try:
                with trio.move_on_after(CLOSE_SEND_S):  # the answer tells the peer why; never wait long for it
                    await stream.send_all(decision.response)
            except _STREAM_ERRORS:
                pass
        raise WebSocketRefused(decision.reason, answered=bool(decision.response))
    await stream.send_all(decision.response)
    framing = WebSocketFraming(max_frame_bytes(listener.max_frame_size))
    ws = WebSocketStream(stream, framing)
    first = b""
    if decision.trailing:  # a client that sent frames right behind its request
        first = await ws.take(decision.trailing)
        if ws.ended:
            raise WebSocketRefused(f"the WebSocket ended at once ({framing.close_code} {framing.close_reason})")
    return ws, first


async def linger_after_refusal(stream: trio.abc.Stream) -> None:
    """After a refusal's answer, before the socket closes: what the peer still sends (the rest of
    an oversized request) is read and dropped until it closes, within CLOSE_LINGER_S and
    CLOSE_LINGER_BYTES. Closing with unread bytes would reset the connection, and the reset can
    destroy the answer before the peer has read it."""
    with trio.move_on_after(CLOSE_LINGER_S):
        try:
            if isinstance(stream, trio.SocketStream):
                await stream.send_eof()
            drained = 0
            while drained < CLOSE_LINGER_BYTES:
                data = await stream.receive_some(UPGRADE_READ * 16)
                if not data:
                    return
                drained += len(data)
        except _STREAM_ERRORS:
            pass


class WebSocketStream(trio.abc.Stream):
    """AMQP bytes over a WebSocket on `transport` (TCP or TLS)."""

    def __init__(self, transport: trio.abc.Stream, framing: WebSocketFraming) -> None:
        self.transport_stream = transport
        self.framing = framing
        self._send_lock = trio.Lock()
        self._closed = False
        self._receiving = False  # a receive_some is running (aclose must not read then) ...
        self._receive_idle = trio.Event()  # ... until this is set

    @property
    def ended(self) -> bool:
        return self.framing.ended

    async def take(self, raw: bytes) -> bytes:
        """The AMQP bytes `raw` (from the transport) carries; what the WebSocket layer answers
        (pongs, the close handshake) goes out first."""
        amqp, reply, _ = self.framing.receive(raw)
        if reply:
            try:
                await self._send_raw(reply)
            except _STREAM_ERRORS:
                pass  # the peer is gone: the next read says so
        return amqp

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """The next AMQP bytes; b"" once the WebSocket or the socket has ended."""
        self._receiving, self._receive_idle = True, trio.Event()
        try:
            while not self.framing.ended:
                try:
                    raw = bytes(await self.transport_stream.receive_some(max_bytes))
                except _STREAM_ERRORS:
                    raw = b""
                amqp = await self.take(raw)
                if amqp:
                    return amqp
            return b""
        finally:
            self._receiving = False
            self._receive_idle.set()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        frame = self.framing.wrap(bytes(data))
        if not frame:  # the WebSocket is closing: AMQP bytes after that are lost, like after a socket close
            raise trio.BrokenResourceError("the WebSocket is closed")
        await self._send_raw(frame)

    async def _send_raw(self, data: bytes) -> None:
        async with self._send_lock:
            await self.transport_stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Our close frame (1000, unless one went out already), then a lingering close: what
        the peer still sends is read, until its close frame or its end, within CLOSE_LINGER_S
        and CLOSE_LINGER_BYTES. Closing a socket with unread bytes resets the connection, and
        the reset can destroy our close frame before the peer has read it (a peer refused for
        an oversized frame is usually still sending it). Shielded: the driver closes through
        aclose_forcefully."""
        if self._closed:
            return
        self._closed = True
        try:
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_LINGER_S):
                try:
                    async with self._send_lock:  # after a frame in progress (the reader's answer, say)
                        farewell = self.framing.close()
                        if farewell:
                            await self.transport_stream.send_all(farewell)
                        if isinstance(self.transport_stream, trio.SocketStream):
                            await self.transport_stream.send_eof()  # nothing more from us
                    if self._receiving:  # the driver's reader: cancelled as the connection ends
                        await self._receive_idle.wait()
                    await self._linger()
                except _STREAM_ERRORS:
                    pass
        finally:
            await trio.aclose_forcefully(self.transport_stream)

    async def _linger(self) -> None:
        transport = self.transport_stream
        drained = 0
        while not self.framing.peer_closed and drained < CLOSE_LINGER_BYTES:
            data = bytes(await transport.receive_some(UPGRADE_READ * 16))
            self.framing.receive(data)
            drained += len(data)
