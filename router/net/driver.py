"""Runs one sans-IO AMQP connection engine over a trio stream: TCP, TLS (a TlsStream: encrypted
and decrypted through its session around the same direct socket I/O as plain TCP), or any other
stream through its receive_some/send_all. The reads and writes themselves are stream.py's.

In the server a TCP stream (plain or under TLS) is read by the poller (poller.py) while the
reader is parked: the poller calls readable(now) when the socket has bytes, which reads and
dispatches, and hands the reader its task back for what it must do itself (the end, a pause, a
failure); a deadline of the reader's cancels the parking.

Owns: the reader task (bytes in, timers, event dispatch), the parked reads the poller makes for
it, backpressure on reading, and the connection's life (run(), abort()). The writing half (the
writer task, flush(), backpressure at the socket, the close) is output.py's DriverOutput, which
this class is. Everything protocol-related is the engine's; everything application-related is
the `on_events` callback's.

Backpressure on reading (optional, used by the router's server): while the `pause_reading()`
predicate is true the reader does not read; it looks again when someone calls
`resume_reading()` (and when an engine timer falls due). On writing: output.py.
The open deadline (optional, used by the router's server for its handshake time-out): a peer
whose open has not come by then is dropped (after a call to `on_open_timeout`). It is one more
deadline of the reader's, not a task of its own: an idle connection holds as little as it can
(see bench/README.md, "Idle connections").
Must not touch: protocol decisions, routing, the descriptor and the TLS session (stream.py).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from ..amqp.connection import Connection
from ..amqp.endpoints import CLOSED
from .now import trio_now
from .output import BlockedHandler, DriverOutput, EventHandler
from .poller import Poller
from .stream import SealedStream
from .tlssession import TlsSession

PausePredicate = Callable[[], bool]

# Bytes asked of the socket per read. 32 KiB cut most 10 KiB messages across two reads (the
# engine then joins the pieces): 128 KiB took router CPU per 10 KiB message from ~60 to ~30 us
# (interpreted). But 128 KiB is a sender's whole window of 1,000 100-byte messages: the router
# read and handled all of it before the consumer got the first, and the window's round trip
# (not CPU) bounded throughput. 64 KiB lets half a window go on while the rest is read: 100 B
# unsettled through one router 0.40-0.42 -> 0.50-0.53 of the direct ceiling, a chain of 3
# 0.20 -> 0.22, 10 KiB messages as fast (+8 % CPU each, compiled); see bench/README.md.
READ_SIZE = 64 * 1024
CLOSE_GRACE_S = 2.0  # after our close, how long we wait for the peer's before dropping it
# When an engine timer falls due while reading is paused we read once before ticking (see
# _reader). A live peer's bytes are already in the socket buffer, so this bound only matters
# for a silent peer, whose idle time-out it delays by at most this much.
PAUSED_TIMER_READ_S = 0.1


class ConnectionDriver(DriverOutput):
    """Pumps bytes between `stream` and `engine`, handing events to `on_events`.

    Application code running in other tasks may call engine methods and then `wake()` so that
    the writer flushes what they queued. `run()` returns once the connection is over.
    """

    # No instance dict: every connection has a driver (the dict was ~1.6 KiB of each idle one).
    __slots__ = (
        "pause_reading", "on_open_timeout", "_initial", "_resume", "_open_deadline",
        "_reading_paused", "_paused_when_due", "_grace_deadline", "_aborted", "_poller", "_parked",
        "_parked_scope", "_parked_deadline", "_poll_ended", "_poll_failure",
    )  # fmt: skip

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: Connection,
        on_events: EventHandler | None,
        *,
        read_size: int = READ_SIZE,
        pause_reading: PausePredicate | None = None,
        write_high_water: int | None = None,
        on_output_blocked: BlockedHandler | None = None,
        initial: bytes = b"",
        open_deadline: float = math.inf,
        on_open_timeout: Callable[[], None] | None = None,
        poller: Poller | None = None,
    ) -> None:
        """`initial`: bytes of the connection read from the stream already (the first bytes a
        listener looked at to tell TLS from plain AMQP); the engine gets them first.
        `open_deadline` (trio's clock): the connection is dropped if the peer's open has not
        come by then: `on_open_timeout` is called, then run() closes the stream and returns.
        `poller`: reads a TCP stream (plain or under TLS) for the reader while it runs (router.net.poller)."""
        super().__init__(stream, engine, on_events, read_size, write_high_water, on_output_blocked)
        self._initial = initial
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
        # The poller reads a TCP socket (plain or under TLS; not a WebSocket's) while the reader
        # is parked in its task: `_parked` is that task, `_parked_scope` the reader's cancel scope
        # (its deadline), and what ended the parking is told in `_poll_ended`/`_poll_failure`.
        self._poller = poller if self._stream.fd >= 0 else None
        self._parked: trio.lowlevel.Task | None = None
        self._parked_scope: trio.CancelScope | None = None
        self._parked_deadline = math.inf  # the scope's deadline (read once: a property of trio's)
        self._poll_ended = False
        self._poll_failure: Exception | None = None

    @property
    def stream(self) -> trio.abc.Stream:
        """The trio stream the connection runs over."""
        return self._stream.stream

    # What tests look at inside (the descriptor, the TLS session, the next read): the Stream's.
    @property
    def _fd(self) -> int:
        return self._stream.fd

    @_fd.setter
    def _fd(self, fd: int) -> None:
        self._stream.fd = fd

    @property
    def _tls(self) -> TlsSession | None:
        stream = self._stream
        return stream.session if isinstance(stream, SealedStream) else None

    @property
    def _receive(self) -> Callable[[], Awaitable[bytes]]:
        return self._stream.receive

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
        return self._owner_pauses()

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

    async def _reader(self) -> None:
        """Read and dispatch until the peer is gone; tick the engine when its timer falls due.

        Reads share one cancel scope until a timer falls due: entering a scope per read cost
        more than the read. The scope's deadline only ever moves earlier (moving it later would
        cost as much), so it may fire before the engine's timer: the tick is then a no-op and
        the next scope takes the later deadline."""
        engine = self.engine
        stream = self._stream
        if self._initial:
            engine.receive_data(self._initial, trio_now())
            self._initial = b""
            self._dispatch()
        while True:
            self._paused_when_due = False
            # Read and dispatch until the stream ends (return) or the scope is cancelled at the
            # next deadline: the engine's timer, the peer's open (handshake time-out), or the
            # grace period for the peer's close once ours is out. Inline, not a coroutine of its
            # own: each coroutine frame held while waiting is memory of every idle connection.
            with trio.CancelScope() as scope:
                while True:
                    deadline = self._reader_deadline()
                    if deadline < scope.deadline:
                        scope.deadline = deadline
                    if not engine.finished and self._should_pause():
                        self._reading_paused = self._paused_when_due = True
                        resume = self._resume
                        assert resume is not None  # made by _should_pause
                        try:
                            await resume.wait()
                        finally:
                            self._reading_paused = False
                            self._resume = None
                        self._paused_when_due = False
                        continue  # look at the predicate again
                    poller = self._poller
                    if poller is not None and poller.running and stream.fd >= 0:
                        if await self._polled(poller, stream.fd, scope):
                            return  # the stream ended
                        continue  # a pause, or a deadline moved: look again
                    data = await stream.receive()
                    engine.receive_data(data, trio_now())
                    self._dispatch()
                    if not data:
                        return  # the stream ended
            if await self._at_deadline():
                return

    async def _polled(self, poller: Poller, fd: int, scope: trio.CancelScope) -> bool:
        """Park the reader while the poller reads `fd` for it (readable() below), until the
        stream ends (True), a read wants the reader to pause (False), or a deadline of `scope`
        falls due (cancelled). A failure of a read is raised here, in the connection's task."""
        poller.watch(fd, self)  # (first: if it fails, nothing says parked)
        self._parked = trio.lowlevel.current_task()
        self._parked_scope = scope
        self._parked_deadline = scope.deadline
        self._poll_ended = False
        await trio.lowlevel.wait_task_rescheduled(self._parking_cancelled)
        failure, self._poll_failure = self._poll_failure, None
        if failure is not None:
            raise failure
        return self._poll_ended

    def _parking_cancelled(self, raise_cancel: object) -> trio.lowlevel.Abort:
        self._unpark()
        return trio.lowlevel.Abort.SUCCEEDED

    def _unpark(self) -> trio.lowlevel.Task | None:
        """No more reads by the poller; the parked task, if it was parked."""
        task = self._parked
        if task is not None:
            self._parked = None
            self._parked_scope = None
            if self._poller is not None:
                self._poller.unwatch(self._stream.fd)
        return task

    def _hand_back(self, ended: bool, failure: Exception | None = None) -> None:
        task = self._unpark()
        if task is not None:
            self._poll_ended = ended
            self._poll_failure = failure
            trio.lowlevel.reschedule(task)

    def _stop_reads(self) -> None:
        self._hand_back(True)  # (a parked reader: the poller lets go of the descriptor first)

    def readable(self, now: float) -> None:
        """The poller's call while the reader is parked: `fd` has bytes (or its end); `now` is
        trio's time. Read once and dispatch, as the reader would; hand the reader back its task
        when the stream ended, the core wants reading paused, or anything failed. Never raises."""
        stream = self._stream
        try:
            data = stream.read_now()
            if data is None:
                return  # (nothing yet: a TLS record's first part)
            engine = self.engine
            engine.receive_data(data, now)
            self._dispatch()
            if data and stream.ended():  # a TLS close_notify after the last plaintext
                data = b""
                engine.receive_data(data, now)
                self._dispatch()
            if not data:
                self._hand_back(True)
                return
            deadline = self._reader_deadline()
            scope = self._parked_scope
            if scope is not None and deadline < self._parked_deadline:
                scope.deadline = self._parked_deadline = deadline
            if self._pause_wanted():
                self._hand_back(False)
        except Exception as exc:
            self._hand_back(False, exc)

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
            # (heartbeats included) wait unread in the socket. Read once, then tick.
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
