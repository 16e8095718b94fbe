"""A connection's protocol-header and SASL stage (transport §2.2, security §5): what comes
before the first AMQP frame.

Owns: the protocol headers we send and the peer's we judge (a refused one is answered with a
header we support, then the stream ends: transport §2.2), the SASL exchange on either side
(security §5.3, through sasl.py's SaslClient and SaslServer), its frames' checks, and a failed
login's outcome held back until a deadline (login throttling, security §5.3.3.6).

Collaborators, passed in: the ConnectionConfig, the connection's FrameOutput (headers and SASL
frames go straight to its `pieces`, ahead of the frames it defers), and the connection as a
HandshakeOwner, the few things the handshake changes in it: events, its end, the start of the
AMQP stage with the rest of the read, the authenticated user, our AMQP header (which lets the
frames waiting for it go).
Must not touch: AMQP frames (the rest of a read goes to the owner as it came), sessions, open
and close, timers other than the held outcome's, sockets, clocks (time is a parameter).

Its own object rather than methods of the Connection: it lives only until AMQP frames flow (the
connection then drops it, so an idle connection carries no SASL state), and it can be tested
alone. The connection keeps its stage (handshake, AMQP, held, done) in one attribute of its own,
so that a read of AMQP frames costs one compare and no call into this module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from . import errors as E
from .decode import decode_at
from .events import Authenticated, AuthenticationFailed, Event, ProtocolViolation
from .frameout import FrameOutput
from .framing import AMQP_HEADER, FRAME_HEADER, FRAME_SASL, SASL_HEADER, classify_header, frame
from .performatives import SASL_PERFORMATIVES
from .sasl import SaslClient, SaslProtocolError, SaslResult, SaslServer

if TYPE_CHECKING:
    from .connection import ConnectionConfig

_unpack_frame_header = FRAME_HEADER.unpack_from
_HEADER: Final = 0  # waiting for the peer's protocol header
_SASL: Final = 1  # SASL frames
_HELD: Final = 2  # a failed login's outcome waits for its deadline
_OVER: Final = 3  # AMQP frames flow, or the connection ended


class HandshakeOwner(Protocol):
    """The connection, as its handshake sees it (Connection implements it)."""

    # Server side: how long to hold back a failed login's outcome (seconds), asked with `now`
    # and the failed result; None: send it at once.
    sasl_failure_delay: Callable[[float, SaslResult], float] | None

    def emit(self, event: Event) -> None: ...

    def handshake_failed(self) -> None:
        """The handshake failed, its last bytes are queued: read nothing more, end the stream."""

    def hold_failed_login(self) -> None:
        """Read nothing more: a failed login's outcome is held back (Handshake.tick sends it)."""

    def start_amqp(self, rest: bytes) -> None:
        """The AMQP stage begins; `rest` is what followed the peer's header in this read."""

    def authenticated(self, user: str | None) -> None: ...

    def write_amqp_header(self) -> None: ...


class Handshake:
    __slots__ = ("config", "output", "owner", "_stage", "_inbuf", "_sasl", "_sasl_done", "_held")

    def __init__(self, config: ConnectionConfig, output: FrameOutput, owner: HandshakeOwner) -> None:
        self.config = config
        self.output = output
        self.owner = owner
        self._stage = _HEADER
        self._inbuf = bytearray()
        self._sasl: SaslClient | SaslServer | None = None
        self._sasl_done = False
        self._held: tuple[float, list[bytes], Event] | None = None
        if not config.server:  # the TCP client speaks first (transport §2.2)
            if config.sasl_client is not None:
                self._sasl = SaslClient(config.sasl_client)
                output.pieces.append(SASL_HEADER)
            else:
                owner.write_amqp_header()

    def receive(self, data: bytes, now: float) -> None:
        """Bytes from the peer (never b""); `now` is when they came."""
        if self._stage >= _HELD:  # (the owner reads nothing then)
            return
        self._inbuf += data
        while self._inbuf:
            if self._stage == _HEADER:
                if len(self._inbuf) < 8:
                    return
                header = bytes(self._inbuf[:8])
                del self._inbuf[:8]
                self._on_header(header)
            elif self._stage == _SASL:
                if not self._sasl_frame(now):
                    return
            else:
                return

    def deadline(self) -> float | None:
        """When the held-back outcome is due (tick), or None when none is."""
        return self._held[0] if self._held is not None else None

    def tick(self, now: float) -> None:
        """The held-back failed sasl-outcome is sent when due, and the connection ends
        (security §5.3.3.6)."""
        held = self._held
        if held is None or now < held[0]:
            return
        _, frames, failed = held
        self._held = None
        self.output.pieces.extend(frames)
        self._end(failed)

    def _end(self, event: Event) -> None:
        self._stage = _OVER
        self._inbuf.clear()
        self.owner.handshake_failed()
        self.owner.emit(event)

    def _start_amqp(self) -> None:
        self._stage = _OVER
        rest = bytes(self._inbuf)
        self._inbuf.clear()
        self.owner.start_amqp(rest)

    def _header_failure(self, reply: bytes, description: str) -> None:
        """transport §2.2: answer with a header we support, then close the stream."""
        self.output.pieces.append(reply)
        self._end(
            ProtocolViolation(condition=E.FRAMING_ERROR, description=description, scope="connection")
        )

    def _on_header(self, header: bytes) -> None:
        kind = classify_header(header)
        cfg = self.config
        if not cfg.server:
            expected = "amqp" if self._sasl is None or self._sasl_done else "sasl"
            if kind != expected:
                self._header_failure(b"", f"server answered protocol header {header!r}")
            elif kind == "amqp":
                self._start_amqp()
            else:
                self._stage = _SASL
            return
        sasl = cfg.sasl_server
        if kind == "sasl" and sasl is not None and not self._sasl_done:
            server = SaslServer(sasl)
            self._sasl = server
            self.output.pieces.append(SASL_HEADER)
            self.output.pieces.append(frame(0, server.start(), frame_type=FRAME_SASL))
            self._stage = _SASL
        elif kind == "amqp" and (sasl is None or self._sasl_done or sasl.allow_no_sasl):
            self.owner.write_amqp_header()
            self._start_amqp()
        elif kind == "amqp":
            self._header_failure(SASL_HEADER, "SASL is required on this listener")
        elif kind == "sasl" and self._sasl_done:
            self._header_failure(AMQP_HEADER, "SASL header after SASL already completed")
        elif kind == "sasl":
            self._header_failure(AMQP_HEADER, "SASL is not offered on this listener")
        else:
            preferred = SASL_HEADER if sasl is not None and not self._sasl_done else AMQP_HEADER
            self._header_failure(preferred, f"unsupported protocol header {header!r}")

    def _sasl_frame(self, now: float) -> bool:
        """Handle one SASL frame (security §5.3); False when more bytes are needed or the
        exchange failed."""
        buf = self._inbuf
        if len(buf) < 8:
            return False
        size, doff, ftype, _channel = _unpack_frame_header(buf, 0)
        if size > self.config.max_frame_size or size < 8 or doff < 2 or doff * 4 > size:
            self._header_failure(b"", f"malformed SASL frame header (size {size}, doff {doff})")
            return False
        if len(buf) < size:
            return False
        try:
            if ftype != FRAME_SASL or size == doff * 4:
                raise E.DecodeError("expected a SASL frame")
            body, stop = decode_at(bytes(buf[doff * 4 : size]), 0, size - doff * 4)
            if type(body) not in SASL_PERFORMATIVES:
                raise E.DecodeError(f"{type(body).__name__} is not a SASL frame")
            assert self._sasl is not None
            replies, result = self._sasl.on_frame(body)
        except (E.DecodeError, SaslProtocolError) as exc:
            self._header_failure(b"", f"SASL negotiation failed: {exc}")
            return False
        del buf[:size]
        frames = [frame(0, reply, frame_type=FRAME_SASL) for reply in replies]
        if result is None:
            self.output.pieces.extend(frames)
            return True
        if not result.ok:
            failed = AuthenticationFailed(mechanism=result.mechanism, code=result.code, description=result.description)
            delay_of = self.owner.sasl_failure_delay if self.config.server else None
            delay = delay_of(now, result) if delay_of is not None else 0.0
            if delay > 0:  # security §5.3.3.6: the outcome, and the end, wait for the deadline
                self._held = (now + delay, frames, failed)
                self._stage = _HELD
                self._inbuf.clear()
                self.owner.hold_failed_login()
                return False
            self.output.pieces.extend(frames)
            self._end(failed)
            return False
        self.output.pieces.extend(frames)
        self._sasl_done = True
        self.owner.authenticated(result.user)
        self.owner.emit(Authenticated(mechanism=result.mechanism or "", user=result.user))
        self._stage = _HEADER  # the AMQP header follows (security §5.1)
        if not self.config.server:
            self.owner.write_amqp_header()
        return True
