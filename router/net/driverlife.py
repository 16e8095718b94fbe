"""The connection's life around its reads (driver.py's ConnectionDriver is a DriverLife): when
the reader must not read, when it must act without a read, and how the connection ends.

Backpressure on reading (optional, used by the router's server): while the `pause_reading()`
predicate is true the reader does not read; it looks again when someone calls
`resume_reading()` (and when an engine timer falls due). Nor does it read while more than
`read_pause_unsent` bytes wait to be written to the peer (0: no such bound), until a write
brings them under it: a peer that sends requests the engine answers on its own (echoed flows)
without reading the answers must not grow them without end. On writing: output.py.
The open deadline (optional, used by the router's server for its handshake time-out): a peer
whose open has not come by then is dropped (after a call to `on_open_timeout`). It is one more
deadline of the reader's, not a task of its own: an idle connection holds as little as it can
(see bench/README.md, "Idle connections").

Owns: the read pause (the predicate, resume_reading), the reader's deadlines (the engine's
timer, the peer's open, the grace for the peer's close once ours is out) and what it does when
one falls due (the handshake time-out, the engine's tick, a paused reader's look at the peer before it),
and the connection's life: run() (the reader, then the writer's last flush, then the close) and
abort(). Must not touch: the reads themselves and the poller's parking (driver.py), writing
(output.py), the descriptor and the TLS session (stream.py), protocol decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from ..amqp.connection import Connection
from ..amqp.endpoints import CLOSED
from .now import trio_now
from .output import BlockedHandler, DriverOutput, EventHandler

PausePredicate = Callable[[], bool]

CLOSE_GRACE_S = 2.0  # after our close, how long we wait for the peer's before dropping it
# When an engine timer falls due while reading is paused we look whether the peer's bytes wait
# (a socket: readable, not read) or read once (other streams) before ticking (see _at_deadline).
# A live peer's bytes are already in the socket buffer, so this bound only matters for a silent
# peer, whose idle time-out it delays by at most this much.
PAUSED_TIMER_READ_S = 0.1


class DriverLife(DriverOutput):
    """The reader's pause and deadlines, and run()/abort() (see the module docstring); the
    reader itself is the subclass's `_reader`."""

    __slots__ = (
        "pause_reading", "on_open_timeout", "_resume", "_open_deadline", "_reading_paused",
        "_paused_when_due", "_grace_deadline", "_aborted", "read_pause_unsent",
    )  # fmt: skip

    def __init__(
        self, stream: trio.abc.Stream, engine: Connection, on_events: EventHandler | None, read_size: int,
        write_high_water: int | None, on_output_blocked: BlockedHandler | None,
        pause_reading: PausePredicate | None, open_deadline: float, on_open_timeout: Callable[[], None] | None,
    ) -> None:  # fmt: skip
        """The arguments as ConnectionDriver's (driver.py)."""
        super().__init__(stream, engine, on_events, read_size, write_high_water, on_output_blocked)
        self.pause_reading = pause_reading
        # Made when first needed: most connections never pause (an Event is ~200 bytes on
        # every idle connection).
        self._resume: trio.Event | None = None
        self._open_deadline = open_deadline  # math.inf once the peer's open has come
        self.on_open_timeout = on_open_timeout
        self._reading_paused = False
        self._paused_when_due = False  # the reader was paused when its deadline fell due
        self._grace_deadline = math.inf  # once our close is out: until when we wait for the peer's
        self._aborted = False
        self.read_pause_unsent = 0  # (see the module docstring; set by the server's driver)

    @property
    def reading_paused(self) -> bool:
        return self._reading_paused

    def resume_reading(self) -> None:
        """The `pause_reading` predicate may have changed: a paused reader looks again."""
        if self._resume is not None:
            self._resume.set()

    def _pause_wanted(self) -> bool:
        if self.engine.finished:
            return False
        # Once our close is out, what the peer sends can only be its close (or frames the
        # engine drops): keep reading so that the connection can finish.
        if self.engine.state.local is CLOSED:
            return False
        bound = self.read_pause_unsent
        if bound != 0 and self._unsent > bound:
            return True
        return self._owner_pauses()

    def _after_write(self) -> None:
        if self._reading_paused and self.read_pause_unsent != 0:
            self.resume_reading()  # (the reader asks again, and pauses again if still above)

    def _owner_pauses(self) -> bool:
        """The `pause_reading` predicate, or a subclass overrides this (as `_deliver`)."""
        pause_reading = self.pause_reading
        return pause_reading is not None and pause_reading()

    def _should_pause(self) -> bool:
        # The event is made once the predicate said pause, with no checkpoint between that and
        # the wait: a resume_reading() after the answer is never missed. Not one per read: an
        # Event held by every idle connection, and made on every read, cost memory and time.
        if self._pause_wanted():
            self._resume = trio.Event()
            return True
        return False

    def _reader_deadline(self) -> float:
        """When the reader must act next: the engine's timer, the peer's open (handshake
        time-out), or the end of the grace period for the peer's close once ours is out."""
        engine = self.engine
        if engine.finished:
            if self._grace_deadline == math.inf:
                self._grace_deadline = trio_now() + CLOSE_GRACE_S
            return self._grace_deadline
        next_deadline = engine.next_deadline()
        deadline = math.inf if next_deadline is None else next_deadline
        open_deadline = self._open_deadline
        if open_deadline != math.inf:  # until the peer's open has come
            if engine.remote_open is not None:
                self._open_deadline = math.inf
            elif open_deadline < deadline:
                deadline = open_deadline
        return deadline

    def abort(self) -> None:
        """End the connection now, from any task: run() stops reading and writing, closes the
        stream and returns (the caller of run() then cleans up as after any other end)."""
        self._aborted = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    if self._aborted:
                        nursery.cancel_scope.cancel()
                    if self._wake_pending:  # woken before run(): output is queued already
                        self._kick_writer()
                    await self._reader()
                    # The reader saw the end; give the writer a moment to flush the last frames.
                    with trio.move_on_after(CLOSE_GRACE_S):
                        await self.wait_closed()
                    nursery.cancel_scope.cancel()
                finally:
                    self._nursery = None  # closing: no writer starts any more
        finally:
            self._set_closed()
            with trio.CancelScope(shield=True):
                await self._close_stream()
            # Its owner's callbacks (a server's are the driver's own bound methods: each a cycle
            # through the driver) are not called once it ran: none is left for the collector.
            self.on_output_blocked = None
            self.on_open_timeout = None
            self.pause_reading = None

    async def _reader(self) -> None:
        """Read and dispatch until the peer is gone, acting on deadlines (`_at_deadline`): the
        subclass's (driver.py)."""
        raise NotImplementedError

    async def _at_deadline(self) -> bool:
        """A deadline of the reader's fell due: act on it. True: the reader is done."""
        engine = self.engine
        now = trio_now()
        if now >= self._open_deadline and engine.remote_open is None and not engine.finished:
            if self.on_open_timeout is not None:
                self.on_open_timeout()
            self.abort()  # run() closes the stream; its caller releases the rest
            return True
        if engine.finished:
            if now < self._grace_deadline:
                return False
            engine.receive_data(b"", now)  # our close is out and the peer never answered
            self._dispatch()
            return True
        if self._paused_when_due:
            # Ticking at once could close a live peer for idle time-out: its frames
            # (heartbeats included) wait unread in the socket. A socket that is readable says
            # so without a read: a read would take in more of what the pause holds back (a
            # read's worth more held at every timer, for as long as the pause lasts). Other
            # streams cannot tell: read once, then tick.
            waiting = await self._stream.peer_waiting(PAUSED_TIMER_READ_S)
            if waiting:
                engine.peer_not_idle(now)
            elif waiting is None:
                data = None
                with trio.move_on_after(PAUSED_TIMER_READ_S):
                    data = await self._stream.receive()
                if data is not None:
                    engine.receive_data(data, now)
                    if not data:
                        self._dispatch()
                        return True
        engine.tick(now)
        self._dispatch()
        return False
