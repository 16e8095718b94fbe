"""The sans-IO connection engine (transport §2.4): bytes in, events and bytes out.

Owns: the connection's stage (protocol headers and SASL, AMQP frames, held, done), frame
splitting and frame-level checks (max-frame-size, channel-max, doff), the frame loop's dispatch
of transfer, flow and disposition to their session (sessionin.py), the read's view for large
payloads, the events queue, and the output taken for the socket. The engine never raises on
hostile bytes: what the frame loop catches goes to violations.py. What it has to send is queued
in a FrameOutput (frameout.py). Before AMQP frames flow, the protocol headers and SASL
(transport §2.2, security §5) are a Handshake's (handshake.py), which it drops once they do.
Every other frame (the peer's open, close, begin, end, attach, detach) the frame loop hands to
connctl.py's control. Cold paths are units of their own, its methods handing over to them: our
open, close and non-transfer frames (connout.py), idle time-out and heartbeats (keepalive.py),
our sessions' channels (channels.py).

    conn = Connection(ConnectionConfig(container_id="c1"))
    conn.receive_data(data, now)   # b"" when the peer closed the stream
    for event in conn.events(): ...   # (and first frames to conn.transfer_sink, if one is set)
    sock.send(conn.data_to_send())
    conn.tick(now) at conn.next_deadline()

Must not touch: sockets, clocks (time is a parameter), routing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from mypy_extensions import i64

from . import errors as E
from .channels import claim_channel, forget_session, new_session, sessions_of
from .connctl import control
from .connout import send_close, send_frame, send_open
from .cutframe import CutFrame
from .decode import decode_at
from .endpoints import CLOSED, UNINIT, Halves
from .events import Event, TransferSink, TransportClosed
from .fastparse import parse_transfer, u32
from .fastparse_fields import parse_disposition, parse_flow
from .frameout import FrameOutput
from .framing import AMQP_HEADER, FRAME_AMQP, MIN_MAX_FRAME_SIZE
from .handshake import Handshake
from .keepalive import next_deadline, run_timers
from .link import Link
from .performatives import Error, Fields, Open, Symbols, Transfer
from .sasl import SaslClientConfig, SaslResult, SaslServerConfig
from .session import Session
from .sessionin import on_disposition, on_flow, on_transfer
from .violations import connection_error, link_error, session_error

_HANDSHAKE: Final = 0  # protocol headers and SASL (the Handshake's)
_AMQP: Final = 2
_DONE: Final = 3
_HELD: Final = 4  # a failed SASL outcome held back until a deadline (login throttling)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionConfig:
    container_id: str
    server: bool = False  # we accepted the TCP connection (we answer protocol headers)
    max_frame_size: int = 65536
    channel_max: int = 32767
    idle_timeout_s: float | None = None  # close if the peer is silent this long
    sasl_client: SaslClientConfig | None = None
    sasl_server: SaslServerConfig | None = None  # None: plain AMQP only


class Connection:
    __slots__ = (
        "config", "state", "remote_open", "remote_error", "failed", "finished", "user",
        "remote_max_frame_size", "remote_channel_max", "remote_idle_timeout_s",
        "_cut", "_read_view", "_read_of",
        "output", "_header_out", "_events", "_stage", "_handshake",
        "sessions_by_local", "sessions_by_remote",
        "_now", "_last_received", "last_sent", "_stream_ended", "context", "sasl_failure_delay",
        "transfer_sink", "sunk",
    )  # fmt: skip

    def __init__(self, config: ConnectionConfig) -> None:
        if config.max_frame_size < MIN_MAX_FRAME_SIZE:
            raise E.LocalUsageError(f"max_frame_size must be >= {MIN_MAX_FRAME_SIZE}")
        self.config = config
        self.state = Halves("connection")
        self.remote_open: Open | None = None
        self.remote_error: Error | None = None
        self.failed = False
        self.finished = False
        self.user: str | None = None
        self.remote_max_frame_size = MIN_MAX_FRAME_SIZE  # until the peer's open (§2.4.1)
        self.remote_channel_max = 0
        self.remote_idle_timeout_s: float | None = None
        self._cut = CutFrame(config.max_frame_size)  # a frame cut by the end of a read (AMQP stage)
        # A view of the read being parsed, made once for all its large payloads (read_view)
        self._read_view: memoryview | None = None
        self._read_of: bytes | None = None
        self.output = FrameOutput()  # what the peer gets next (frameout.py)
        self._header_out = False
        self._events: list[Event] = []
        # Where first frames go instead of becoming events (events.TransferSink; None: all are
        # events), and whether it took one since the last events().
        self.transfer_sink: TransferSink | None = None
        self.sunk = False
        self._stage = _HANDSHAKE
        # Sessions by our channel and by the peer's (the peer's begin and end: connctl.py).
        self.sessions_by_local: dict[int, Session] = {}
        self.sessions_by_remote: dict[int, Session] = {}
        self._now = 0.0
        self._last_received = 0.0
        self.last_sent = 0.0  # public: the heartbeat timer restarts it (keepalive.py)
        self._stream_ended = False
        self.context: Any = None
        # Server side: asked with `now` and the failed result when a login fails (the router logs
        # it there), how long to hold back the failed
        # sasl-outcome (seconds; the router's LoginThrottle). The handshake holds it, and the end
        # of the connection, until that deadline (next_deadline/tick), the engine dropping what
        # the peer sends meanwhile.
        self.sasl_failure_delay: Callable[[float, SaslResult], float] | None = None
        # Until AMQP frames flow (a client's first protocol header is written here).
        self._handshake: Handshake | None = Handshake(config, self.output, self)

    # --- the sans-IO surface -------------------------------------------------------------------

    @property
    def last_received(self) -> float:
        """When bytes last came from the peer (the `now` given to receive_data; 0.0 before any)."""
        return self._last_received

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the peer; b"" means the peer closed its side of the stream."""
        self._now = now
        if not data:
            # Reported once, however the connection ended (a violation, a refused header or SASL
            # exchange included): the application releases what the connection held on it.
            if not self._stream_ended:
                self._stream_ended = True
                clean = self.state.both_closed
                self._stage = _DONE
                self.finished = True
                self._handshake = None
                self._events.append(TransportClosed(clean=clean))
            return
        if self._stage >= _DONE:  # done, or a failed login's outcome held back: nothing to read
            return
        self._last_received = now
        if self._stage == _AMQP:
            if not self.finished:  # both closes exchanged: nothing more is read
                self._amqp_data(data)
        elif self._handshake is not None:
            self._handshake.receive(data, now)

    def events(self) -> list[Event]:
        """The events since the last call (and `sunk` is reset: see events.TransferSink)."""
        events, self._events = self._events, []
        self.sunk = False
        return events

    @property
    def now(self) -> float:
        """The `now` of the bytes being read (receive_data's)."""
        return self._now

    def data_to_send(self) -> bytes:
        data = self.output.take()
        if len(data) != 0:
            self.last_sent = self._now
        return data

    def chunks_to_send(self) -> list[bytes | memoryview]:
        """What data_to_send would return, in chunks for a gathered write (writev): the large
        payloads, views of the reads they came in, are not copied (FrameOutput.take_chunks)."""
        chunks = self.output.take_chunks()
        if len(chunks) != 0:
            self.last_sent = self._now
        return chunks

    @property
    def pending_output(self) -> int:
        """Frames queued but not yet taken by data_to_send (for the driver's backpressure)."""
        return len(self.output.pieces)

    def next_deadline(self) -> float | None:
        """When tick() must next be called, or None if no timer runs."""
        if self._stage != _AMQP or self.failed or self.finished:  # no timers after both closes
            # (but a held-back failed login's outcome has one: the AMQP path pays nothing for it)
            handshake = self._handshake
            return handshake.deadline() if handshake is not None and self._stage == _HELD else None
        return next_deadline(self)

    def tick(self, now: float) -> None:
        """Run timers: close on local idle time-out, send a heartbeat if the peer needs one."""
        self._now = now
        if self._stage != _AMQP or self.failed or self.finished:
            if self._handshake is not None and self._stage == _HELD:
                self._handshake.tick(now)
            return
        run_timers(self, now)

    # --- application commands ------------------------------------------------------------------

    def open(
        self,
        *,
        hostname: str | None = None,
        offered_capabilities: Symbols | None = None,
        desired_capabilities: Symbols | None = None,
        properties: Fields | None = None,
    ) -> None:
        """Send our open (transport §2.7.1)."""
        send_open(
            self, hostname=hostname, offered_capabilities=offered_capabilities,
            desired_capabilities=desired_capabilities, properties=properties,
        )  # fmt: skip

    def close(self, error: Error | None = None) -> None:
        """Send our close (transport §2.7.9); opens first if we never did."""
        send_close(self, error)

    def begin_session(self, **begin: Any) -> Session:
        """Create a session and send its begin (arguments as Session.begin)."""
        return new_session(self, **begin)

    @property
    def sessions(self) -> list[Session]:
        return sessions_of(self)

    # --- used by sessions and links ------------------------------------------------------------

    def check_not_closed(self) -> None:
        """Our close must be the last frame we write (transport §2.4.3, Closing a Connection)."""
        if self.state.local is CLOSED:
            raise E.LocalUsageError("the connection is closed")

    def read_view(self, buf: bytes) -> memoryview:
        """A memoryview of `buf`, the read being parsed, for slicing its large payloads: made
        once per read (a memoryview per payload cost ~700 instructions), dropped after it."""
        if self._read_of is not buf or self._read_view is None:
            self._read_view = memoryview(buf)
            self._read_of = buf
        return self._read_view

    def view_made(self, buf: bytes) -> memoryview | None:
        """read_view's memoryview of `buf` if one was made, else None (nothing is made)."""
        return self._read_view if self._read_of is buf else None

    def events_list(self) -> list[Event]:
        """The pending events, for the hot path to append to without a call per event."""
        return self._events

    def emit(self, event: Event) -> None:
        self._events.append(event)

    def write_bytes(self, data: bytes) -> None:
        self.output.buffer().append(data)

    def write_pieces(self, *pieces: bytes | memoryview) -> None:
        self.output.buffer().extend(pieces)

    def write_frame(self, channel: int, performative: Any) -> None:
        """Write one non-transfer frame, within the peer's max-frame-size (connout.send_frame)."""
        send_frame(self, channel, performative)

    def allocate_channel(self, session: Session) -> int:
        return claim_channel(self, session)

    def release_session(self, session: Session) -> None:
        forget_session(self, session)

    def link_error(self, link: Link, condition: str, description: str) -> None:
        """The peer misused a link: detach it with the condition (transport §2.6.5)."""
        link_error(self, link, condition, description)

    # --- the handshake's owner (handshake.HandshakeOwner) ---------------------------------------

    def handshake_failed(self) -> None:
        self.discard_input()

    def discard_input(self) -> None:
        """Read nothing more: the stream ends (a failed handshake, a connection error)."""
        self._cut.clear()
        self._stage = _DONE
        self.finished = True
        self._handshake = None

    def hold_failed_login(self) -> None:
        self._stage = _HELD

    def start_amqp(self, rest: bytes) -> None:
        self._stage = _AMQP
        self._handshake = None
        if rest:  # what followed the header in its read
            self._amqp_data(rest)

    def authenticated(self, user: str | None) -> None:
        self.user = user

    def write_amqp_header(self) -> None:
        self.output.pieces.append(AMQP_HEADER)
        self._header_out = True
        self.release_deferred()

    def release_deferred(self) -> None:
        # Only a server reads a peer's frames before its own open (a client opens first), so
        # only a server's frames wait for the open.
        if self._header_out and (self.state.local is not UNINIT or not self.config.server):
            self.output.release()

    # --- input processing ----------------------------------------------------------------------

    def _amqp_data(self, data: bytes) -> None:
        """Frames are parsed straight from each read's immutable bytes, so large payloads can be
        handed on as memoryview slices without a copy. A frame cut by the end of a read waits
        until the reads that complete it (cutframe.py)."""
        cut = self._cut
        start = cut.complete(self, data) if cut.waiting else 0
        consumed = self.amqp_frames(data, start)
        if consumed < len(data) and not self.failed:
            cut.hold(self, data, consumed)
        if self._read_of is not None:  # the reads stay pinned by their payloads' views only
            self._read_view = self._read_of = None

    def amqp_frames(self, buf: bytes, pos: int = 0) -> int:
        """Handle every complete frame in `buf` from `pos`; return where the unhandled rest
        starts."""
        # Offsets, sizes and codes are native ints (i64): compiled, plain machine arithmetic.
        n: i64 = len(buf)
        at: i64 = pos
        limit: i64 = self.config.max_frame_size
        # After our close only the peer's close matters (transport §2.4.3): with no sessions,
        # every other frame takes the control path, which discards it.
        sessions = self.sessions_by_remote if self.state.local is not CLOSED else {}
        channel: i64 = 0
        # The session of the last channel looked up: a run of frames on one channel needs one
        # dict lookup (~130 instructions each). Forgotten after any frame that may begin or end
        # a session, and after a session error.
        known_channel: i64 = -1
        known: Session | None = None
        size: i64
        doff: i64
        ftype: i64
        code: i64
        start: i64
        try:
            while n - at >= 8 and not self.failed:
                # transport §2.3.1: size(4) doff(1) type(1) channel(2), read inline (bytes indexing
                # compiles to a load; struct.unpack_from would build a tuple per frame)
                size = u32(buf, at)
                doff, ftype, channel = buf[at + 4], buf[at + 5], (buf[at + 6] << 8) | buf[at + 7]
                if size > limit or size < 8 or doff < 2 or doff * 4 > size:
                    raise E.ProtocolError(
                        f"bad frame header: size {size}, doff {doff} (max-frame-size {limit})",
                        E.FRAMING_ERROR,
                    )
                if n - at < size:
                    break
                end: i64 = at + size
                body: i64 = at + doff * 4
                at = end
                if body == end:
                    continue  # an empty frame: a heartbeat (transport §2.4.5)
                if ftype != FRAME_AMQP:
                    raise E.ProtocolError(f"frame type {ftype} after the AMQP header", E.FRAMING_ERROR)
                if channel > self.config.channel_max:
                    raise E.ProtocolError(
                        f"channel {channel} above channel-max {self.config.channel_max}",
                        E.FRAMING_ERROR,
                    )
                if channel != known_channel:
                    known = sessions.get(channel)
                    known_channel = channel
                session = known
                # Inline descriptor check: smallulong codes are what every peer sends. -1, not
                # None, for the others: an Optional code would be boxed and compared generically.
                if body + 3 <= end and buf[body] == 0x00 and buf[body + 1] == 0x53:
                    code, start = buf[body + 2], body + 3
                else:
                    code, start = -1, body
                try:
                    if code == 0x14 and session is not None and session.state.local is not CLOSED:
                        on_transfer(session, buf, parse_transfer(buf, start, end), end)
                    elif code == 0x13 and session is not None and session.state.local is not CLOSED:
                        on_flow(session, parse_flow(buf, start, end))
                    elif code == 0x15 and session is not None and session.state.local is not CLOSED:
                        on_disposition(session, parse_disposition(buf, start, end))
                    else:
                        known_channel = -1
                        performative, stop = decode_at(buf, body, end)
                        if type(performative) is Transfer:
                            control(self, channel, session, performative, buf, stop, end)
                        elif stop != end:
                            raise E.DecodeError(
                                f"{end - stop} bytes after a {type(performative).__name__}"
                            )
                        else:
                            control(self, channel, session, performative, buf, stop, end)
                except E.ProtocolError as exc:
                    if exc.scope != "session" or session is None:
                        raise
                    known_channel = -1
                    session_error(self, session, exc)
        except E.ProtocolError as exc:
            connection_error(self, exc.condition, exc.description)
            return n
        except E.DecodeError as exc:
            connection_error(self, E.DECODE_ERROR, exc.description)
            return n
        return at
