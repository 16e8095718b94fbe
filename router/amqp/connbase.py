"""What a connection engine holds, how it is made, and its cold methods: the base of Connection.

Owns: the engine's attributes and their construction (in the handshake stage), the stages'
values, the handshake's side of the engine (handshake.HandshakeOwner: input discarded, a failed
login held, the authenticated user, our AMQP header and the frames it lets go), the
application's commands (open, close, sessions: connout.py and channels.py do the work), what
sessions and links call on it outside the frame loop (control frames written, channels, a
link's error), and the two one-line primitives the units that take this type write through
(emit, write_bytes: on the hot path too, where a compiled call to them is the same direct call
whichever class defines them). Nothing else here runs per frame or per message.
Must not touch: the frame loop, reads, events and the output taken for the socket, timers
(connection.py), the frames' contents (connout.py, connctl.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from . import errors as E
from .channels import claim_channel, forget_session, sessions_of
from .connout import frame_bytes, send_close, send_frame, send_open
from .cutframe import CutFrame
from .endpoints import UNINIT, Halves
from .events import Event, TransferSink
from .frameout import FrameOutput
from .framing import AMQP_HEADER, MIN_MAX_FRAME_SIZE
from .handshake import Handshake
from .link import Link
from .performatives import Error, Fields, Open, Symbols
from .sasl import SaslResult
from .session import Session
from .violations import link_error

if TYPE_CHECKING:
    from .connection import ConnectionConfig

# The connection's stage (Connection._stage): one compare per read tells AMQP frames from the rest.
STAGE_HANDSHAKE: Final = 0  # protocol headers and SASL (the Handshake's)
STAGE_AMQP: Final = 2
STAGE_DONE: Final = 3
STAGE_HELD: Final = 4  # a failed SASL outcome held back until a deadline (login throttling)


class ConnectionBase:
    """See the module docstring; the engine itself is connection.Connection."""

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
        """Connection.__init__ starts the handshake once this is done."""
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
        self._stage = STAGE_HANDSHAKE
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
        # Until AMQP frames flow (Connection.__init__ makes it; the frame loop drops it).
        self._handshake: Handshake | None = None

    @property
    def last_received(self) -> float:
        """When bytes last came from the peer (the `now` given to receive_data; 0.0 before any)."""
        return self._last_received

    def peer_not_idle(self, now: float) -> None:
        """The peer's bytes wait unread (its reader is paused by the application's
        backpressure): it is not idle, whatever the local idle time-out would say."""
        self._last_received = now

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

    @property
    def sessions(self) -> list[Session]:
        return sessions_of(self)

    def dismantle(self) -> None:
        """The connection is over and its application is done with it (a router: after its
        core forgot it). The references that tie the engine, its sessions, their links and
        what the application hung on them (`context`) into cycles go, so that reference
        counting frees them at once: a closed connection was ~50 objects of cyclic garbage,
        freed only by the collector's next young collection, which they made longer. What
        still refers to a session or a link (a delivery in flight elsewhere) reads it as it
        was; the engine just has no sessions, and they no links."""
        for sessions in (self.sessions_by_local, self.sessions_by_remote):
            for session in sessions.values():
                session.dismantle()
            sessions.clear()
        self.context = None
        self.sasl_failure_delay = None
        self.transfer_sink = None
        self._handshake = None

    # --- used by sessions, links and the cold units (the frame loop's own: connection.py) --------

    def emit(self, event: Event) -> None:
        """Queue an event (the frame loop's transfers append to events_list without a call)."""
        self._events.append(event)

    def write_bytes(self, data: bytes) -> None:
        """Write a frame already encoded (after the deferred ones, if any wait)."""
        self.output.buffer().append(data)

    def write_frame(self, channel: int, performative: Any) -> None:
        """Write one non-transfer frame, within the peer's max-frame-size (connout.send_frame)."""
        send_frame(self, channel, performative)

    def encode_frame(self, channel: int, performative: Any) -> bytes:
        """The frame write_frame would write (for one that waits in a session's queue)."""
        return frame_bytes(self, channel, performative)

    def allocate_channel(self, session: Session) -> int:
        return claim_channel(self, session)

    def release_session(self, session: Session) -> None:
        forget_session(self, session)

    def link_error(self, link: Link, condition: str, description: str) -> None:
        """The peer misused a link: detach it with the condition (transport §2.6.5)."""
        link_error(self, link, condition, description)

    # --- the handshake's owner (handshake.HandshakeOwner; start_amqp is Connection's) ----------

    def handshake_failed(self) -> None:
        self.discard_input()

    def discard_input(self) -> None:
        """Read nothing more: the stream ends (a failed handshake, a connection error)."""
        self._cut.clear()
        self._stage = STAGE_DONE
        self.finished = True
        self._handshake = None

    def hold_failed_login(self) -> None:
        self._stage = STAGE_HELD

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
