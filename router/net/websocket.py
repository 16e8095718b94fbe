"""AMQP over WebSocket (RFC 6455, the AMQP WebSocket binding), sans-IO: the server side of the
HTTP upgrade and the framing of AMQP bytes in binary messages.

    upgrade = WebSocketUpgrade(path="/amqp", max_request_bytes=8192)
    decision = upgrade.receive(data)          # None: send more; else Accepted or Refused
    framing = WebSocketFraming(max_frame_bytes, decision.trailing)   # once Accepted
    amqp, reply, ended = framing.receive(data)    # AMQP bytes in; pongs and close frames out
    wire = framing.wrap(amqp_bytes)               # AMQP bytes out, one binary message

The binding carries AMQP as a byte stream: frames may be split over or joined in WebSocket
messages and frames arbitrarily, so the payloads of binary messages are handed on as they come
and the AMQP engine finds its own frame boundaries. The peer is hostile until checked: the
request head is bounded (431), the subprotocol `amqp` is required (400), text messages are
refused (close 1003), frames longer than the bound (close 1009) or malformed or unmasked
(close 1002, RFC 6455 5.1/5.2) end the WebSocket with a close frame saying why; browsers'
requests from origins not allowed are refused (403).

Owns: the upgrade's checks and answer, the WebSocket frame layer after it (wsproto).
Must not touch: sockets, time, AMQP itself (the engine's).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

import h11
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import LocalProtocolError

SUBPROTOCOL = "amqp"  # the AMQP WebSocket binding's Sec-WebSocket-Protocol
WEBSOCKET_VERSION = b"13"  # RFC 6455 4.1
_ACCEPT_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 1.3
# Our frames carry at most max-frame-size bytes of AMQP; a peer may join a few small AMQP frames
# in one WebSocket frame, so the bound on its WebSocket frames is that plus this margin.
FRAME_MARGIN_BYTES = 64 * 1024
# What we send is cut into messages (one frame each) of at most this: clients bound the frames
# they take too, some at 64 KiB (Netty's default, under Qpid JMS), whatever their AMQP max-frame-size.
OUT_MESSAGE_BYTES = 32 * 1024


def accept_token(key: bytes) -> bytes:
    """Sec-WebSocket-Accept for a client's Sec-WebSocket-Key (RFC 6455 4.2.2)."""
    return base64.b64encode(hashlib.sha1(key + _ACCEPT_GUID).digest())


def max_frame_bytes(amqp_max_frame_size: int) -> int:
    """The longest WebSocket frame a peer may send on a listener with this AMQP max-frame-size."""
    return amqp_max_frame_size + FRAME_MARGIN_BYTES


@dataclass(frozen=True)
class Accepted:
    response: bytes  # the 101 answer, to send
    trailing: bytes  # WebSocket bytes that came after the request head
    path: str


@dataclass(frozen=True)
class Refused:
    response: bytes  # the HTTP error answer, to send (empty if the peer is gone)
    reason: str  # in words, for the log


class WebSocketUpgrade:
    """The server side of one HTTP/1.1 upgrade request (RFC 6455 4.2.1)."""

    def __init__(self, *, path: str | None, max_request_bytes: int, origins: tuple[str, ...] = ()) -> None:
        """`path`: the request target to serve (None: any); `max_request_bytes`: the longest
        request head taken (a longer one is refused with 431); `origins`: the Origin values
        a browser's request may carry (empty: any)."""
        self._path = path
        self._origins = {origin.rstrip("/").lower().encode() for origin in origins}
        self._max = max_request_bytes
        self._received = 0
        self._first_line = b""  # the start of the request line, until its end is in
        self._line_done = False
        self._http = h11.Connection(h11.SERVER, max_incomplete_event_size=max_request_bytes)

    def receive(self, data: bytes) -> Accepted | Refused | None:
        """Bytes from the peer (b"": it closed): the decision once the request head is in."""
        if not data:  # a request complete before the peer closed was decided already
            return Refused(b"", "the peer closed the connection during the WebSocket upgrade")
        if not self._line_done:
            # A request line is printable ASCII: an AMQP header (or TLS on a plain port) is
            # answered at once, not at the handshake time-out after h11 waited for its end.
            self._first_line = (self._first_line + data)[:256]
            line, end, _ = self._first_line.partition(b"\n")
            self._line_done = bool(end) or len(self._first_line) == 256
            if any(byte >= 0x7F or (byte < 0x20 and byte != 0x0D) for byte in line):
                return self._refuse(400, "Bad Request", "not an HTTP request (this port serves AMQP over WebSocket)")
        self._received += len(data)
        try:
            self._http.receive_data(data)
            event = self._http.next_event()
        except h11.RemoteProtocolError as exc:
            if self._received > self._max:
                return self._refuse(431, "Request Header Fields Too Large", f"request head over {self._max} bytes")
            return self._refuse(400, "Bad Request", f"not an HTTP request ({exc})")
        if event is h11.NEED_DATA:
            return None
        if not isinstance(event, h11.Request):  # h11 has no other event for a server's first one
            return self._refuse(400, "Bad Request", "not an HTTP request")
        if len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers) > self._max:
            return self._refuse(431, "Request Header Fields Too Large", f"request head over {self._max} bytes")
        return self._check(event)

    def _check(self, request: h11.Request) -> Accepted | Refused:
        headers: dict[bytes, list[bytes]] = {}
        for name, value in request.headers:  # h11 gives names lower-cased
            headers.setdefault(name, []).append(value)

        def tokens(name: bytes, lower: bool = True) -> list[bytes]:
            words = b",".join(headers.get(name, [])).split(b",")
            return [w.strip().lower() if lower else w.strip() for w in words if w.strip()]

        target = request.target.decode("ascii", "replace")
        if request.http_version != b"1.1":
            return self._refuse(400, "Bad Request", "HTTP/1.1 expected (RFC 6455 4.1)")
        if request.method != b"GET":
            return self._refuse(405, "Method Not Allowed", f"method {request.method.decode('ascii', 'replace')} (GET expected)",
                                [(b"Allow", b"GET")])  # fmt: skip
        if b"websocket" not in tokens(b"upgrade") or b"upgrade" not in tokens(b"connection"):
            return self._refuse(426, "Upgrade Required", "not a WebSocket upgrade request (this port serves AMQP over WebSocket)",
                                [(b"Upgrade", b"websocket"), (b"Sec-WebSocket-Protocol", SUBPROTOCOL.encode())])  # fmt: skip
        if tokens(b"sec-websocket-version") != [WEBSOCKET_VERSION]:
            return self._refuse(426, "Upgrade Required", "unsupported Sec-WebSocket-Version (13 expected)",
                                [(b"Sec-WebSocket-Version", WEBSOCKET_VERSION)])  # fmt: skip
        keys = headers.get(b"sec-websocket-key", [])
        try:
            valid_key = len(keys) == 1 and len(base64.b64decode(keys[0], validate=True)) == 16
        except (binascii.Error, ValueError):
            valid_key = False
        if not valid_key:
            return self._refuse(400, "Bad Request", "missing or malformed Sec-WebSocket-Key")
        if SUBPROTOCOL.encode() not in tokens(b"sec-websocket-protocol", lower=False):
            return self._refuse(400, "Bad Request", "Sec-WebSocket-Protocol must offer amqp (the AMQP WebSocket binding)",
                                [(b"Sec-WebSocket-Protocol", SUBPROTOCOL.encode())])  # fmt: skip
        if self._path is not None and target.split("?", 1)[0] != self._path:
            return self._refuse(404, "Not Found", f"path {target!r} (this listener serves {self._path!r})")
        origin = headers.get(b"origin")
        if self._origins and origin is not None and (len(origin) != 1 or origin[0].lower() not in self._origins):
            # Only a browser sends Origin, and a page from another site cannot forge it (RFC 6455
            # 10.2): the check keeps such pages from using a browser's client certificate here.
            return self._refuse(403, "Forbidden", f"origin {b', '.join(origin).decode('ascii', 'replace')!r} is not allowed")
        if headers.get(b"content-length", [b"0"]) != [b"0"] or b"transfer-encoding" in headers:
            return self._refuse(400, "Bad Request", "an upgrade request carries no body")
        # No extension is accepted (permessage-deflate would cost a compressor per connection and
        # let a small frame inflate into a large one): answering none is how RFC 6455 9.1 declines.
        response = h11.InformationalResponse(status_code=101, reason=b"Switching Protocols", headers=[
            (b"Upgrade", b"websocket"), (b"Connection", b"Upgrade"),
            (b"Sec-WebSocket-Accept", accept_token(keys[0])),
            (b"Sec-WebSocket-Protocol", SUBPROTOCOL.encode()),
        ])  # fmt: skip
        try:
            data = self._http.send(response) or b""
        except h11.LocalProtocolError as exc:  # not expected after the checks above; refused all the same
            return self._refuse(400, "Bad Request", f"cannot switch protocols ({exc})")
        trailing, _ = self._http.trailing_data
        return Accepted(data, bytes(trailing), target)

    def _refuse(self, status: int, phrase: str, reason: str, headers: list[tuple[bytes, bytes]] | None = None) -> Refused:
        body = f"{status} {phrase}: {reason}\n".encode("utf-8", "replace")
        head = [f"HTTP/1.1 {status} {phrase}".encode()]
        head += [name + b": " + value for name, value in headers or []]
        head += [b"Content-Type: text/plain; charset=utf-8", b"Content-Length: %d" % len(body), b"Connection: close"]
        return Refused(b"\r\n".join(head) + b"\r\n\r\n" + body, f"WebSocket upgrade refused ({status}): {reason}")


class WebSocketFraming:
    """The WebSocket frame layer of one accepted connection (server side)."""

    def __init__(self, max_frame_bytes: int, trailing: bytes = b"") -> None:
        self._ws = Connection(ConnectionType.SERVER)
        self._max_frame = max_frame_bytes
        self._frame_bytes = 0  # payload bytes of the peer's current frame so far
        self.close_code: int | None = None  # why the WebSocket ended: the peer's code or ours
        self.close_reason = ""
        self._pending = trailing
        self._peer_gone = False  # the peer's socket has closed

    @property
    def ended(self) -> bool:
        return self.close_code is not None

    def receive(self, data: bytes) -> tuple[bytes, bytes, bool]:
        """(the AMQP bytes `data` completes, what to send back: pongs, a close frame; whether
        the WebSocket has ended). b"" means the peer closed the socket."""
        if self._pending:
            data, self._pending = self._pending + data, b""
        if self.ended:
            self._drain(data)
            return b"", b"", True
        if not data:
            self._peer_gone = True
            self.close_code, self.close_reason = CloseReason.ABNORMAL_CLOSURE, "the peer closed the socket"
            return b"", b"", True
        self._ws.receive_data(data)
        amqp: list[bytes] = []
        reply: list[bytes] = []
        for event in self._ws.events():
            if isinstance(event, BytesMessage):
                self._frame_bytes += len(event.data)
                if self._frame_bytes > self._max_frame:
                    reply.append(self._close(CloseReason.MESSAGE_TOO_BIG, f"WebSocket frame over {self._max_frame} bytes"))
                    break
                if event.frame_finished:
                    self._frame_bytes = 0
                amqp.append(bytes(event.data))
            elif isinstance(event, Ping):
                reply.append(self._ws.send(event.response()))
            elif isinstance(event, TextMessage):
                reply.append(self._close(CloseReason.UNSUPPORTED_DATA, "AMQP travels in binary messages"))
                break
            elif isinstance(event, CloseConnection):
                if self._ws.state is ConnectionState.REMOTE_CLOSING:  # the peer's close: answered with its code
                    self.close_code, self.close_reason = event.code, event.reason or ""
                    reply.append(self._ws.send(event.response()))
                else:  # wsproto could not parse the peer's bytes (its code says why: 1002, 1007)
                    reply.append(self._close(event.code, event.reason or "malformed WebSocket frame"))
                break
            # Pong: nothing to do (we send no pings: AMQP's idle time-out keeps the connection alive)
        return b"".join(amqp), b"".join(reply), self.ended

    @property
    def peer_closed(self) -> bool:
        """The close handshake is complete: the peer's close frame is in (or its socket is gone)."""
        return self._ws.state is ConnectionState.CLOSED or self._peer_gone

    def _drain(self, data: bytes) -> None:
        """After our close frame only the peer's close matters (RFC 6455 5.5.1): look for it."""
        if not data:
            self._peer_gone = True
            return
        if self._ws.state is not ConnectionState.LOCAL_CLOSING:
            return
        try:
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, CloseConnection):
                    break
        except LocalProtocolError:
            pass

    def wrap(self, amqp: bytes) -> bytes:
        """Binary messages carrying `amqp`, OUT_MESSAGE_BYTES each at most (nothing once the
        WebSocket is closing)."""
        if self._ws.state is not ConnectionState.OPEN:
            return b""
        if len(amqp) <= OUT_MESSAGE_BYTES:
            return self._ws.send(BytesMessage(data=amqp))
        view = memoryview(amqp)
        return b"".join(self._ws.send(BytesMessage(data=bytes(view[i : i + OUT_MESSAGE_BYTES])))
                        for i in range(0, len(amqp), OUT_MESSAGE_BYTES))  # fmt: skip

    def close(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> bytes:
        """Our close frame (nothing if the WebSocket is closing already)."""
        if self._ws.state is not ConnectionState.OPEN:
            return b""
        return self._close(code, reason)

    def _close(self, code: int, reason: str) -> bytes:
        self.close_code, self.close_reason = code, reason
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        return self._ws.send(CloseConnection(code=code, reason=reason))
