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
our sessions' channels (channels.py). What the engine holds, its construction, the
application's commands and the handshake's side of it are its base's (connbase.py).

    conn = Connection(ConnectionConfig(container_id="c1"))
    conn.receive_data(data, now)   # b"" when the peer closed the stream
    for event in conn.events(): ...   # (and first frames to conn.transfer_sink, if one is set)
    sock.send(conn.data_to_send())
    conn.tick(now) at conn.next_deadline()

Must not touch: sockets, clocks (time is a parameter), routing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mypy_extensions import i64

from . import errors as E
from .channels import new_session
from .connbase import STAGE_AMQP, STAGE_DONE, STAGE_HELD, ConnectionBase
from .connctl import control
from .decode import decode_at
from .endpoints import CLOSED
from .events import Event, TransportClosed
from .fastparse import parse_transfer, u32
from .fastparse_fields import parse_disposition, parse_flow
from .framing import FRAME_AMQP
from .handshake import Handshake
from .keepalive import next_deadline, run_timers
from .performatives import Transfer
from .sasl import SaslClientConfig, SaslServerConfig
from .session import Session
from .sessionin import on_disposition, on_flow, on_transfer
from .violations import connection_error, session_error


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionConfig:
    container_id: str
    server: bool = False  # we accepted the TCP connection (we answer protocol headers)
    max_frame_size: int = 65536
    channel_max: int = 32767
    idle_timeout_s: float | None = None  # close if the peer is silent this long
    sasl_client: SaslClientConfig | None = None
    sasl_server: SaslServerConfig | None = None  # None: plain AMQP only


class Connection(ConnectionBase):
    """The engine (the module docstring); what it holds and its cold methods: connbase.py."""

    __slots__ = ()

    def __init__(self, config: ConnectionConfig) -> None:
        super().__init__(config)
        # Until AMQP frames flow (a client's first protocol header is written here).
        self._handshake = Handshake(config, self.output, self)

    # --- the sans-IO surface -------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> None:
        """Feed bytes from the peer; b"" means the peer closed its side of the stream."""
        self._now = now
        if not data:
            # Reported once, however the connection ended (a violation, a refused header or SASL
            # exchange included): the application releases what the connection held on it.
            if not self._stream_ended:
                self._stream_ended = True
                clean = self.state.both_closed
                self._stage = STAGE_DONE
                self.finished = True
                self._handshake = None
                self._events.append(TransportClosed(clean=clean))
            return
        if self._stage >= STAGE_DONE:  # done, or a failed login's outcome held back: nothing to read
            return
        self._last_received = now
        if self._stage == STAGE_AMQP:
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
        if self._stage != STAGE_AMQP or self.failed or self.finished:  # no timers after both closes
            # (but a held-back failed login's outcome has one: the AMQP path pays nothing for it)
            handshake = self._handshake
            return handshake.deadline() if handshake is not None and self._stage == STAGE_HELD else None
        return next_deadline(self)

    def tick(self, now: float) -> None:
        """Run timers: close on local idle time-out, send a heartbeat if the peer needs one."""
        self._now = now
        if self._stage != STAGE_AMQP or self.failed or self.finished:
            if self._handshake is not None and self._stage == STAGE_HELD:
                self._handshake.tick(now)
            return
        run_timers(self, now)

    # --- application commands (the rest: connbase.py) --------------------------------------------

    def begin_session(self, **begin: Any) -> Session:
        """Create a session of this engine and send its begin (arguments as Session.begin)."""
        return new_session(self, **begin)

    # --- used by sessions and links in the frame loop (the rest: connbase.py) -------------------

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

    def write_pieces(self, *pieces: bytes | memoryview) -> None:
        self.output.buffer().extend(pieces)

    # --- the frame loop ------------------------------------------------------------------------

    def start_amqp(self, rest: bytes) -> None:
        """The handshake is over (handshake.HandshakeOwner): AMQP frames flow."""
        self._stage = STAGE_AMQP
        self._handshake = None
        if rest:  # what followed the header in its read
            self._amqp_data(rest)

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
                            if self.state.remote is CLOSED:
                                # The peer's close: nothing may follow it (transport §2.4.3), and
                                # its transfers, flows and dispositions must not reach sessions
                                # the application is told are gone. Every later frame takes the
                                # control path, which refuses it.
                                sessions = {}
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
