"""Runs one sans-IO AMQP connection engine over a trio stream: TCP, TLS (a TlsStream: encrypted
and decrypted through its session around the same direct socket I/O as plain TCP), or any other
stream through its receive_some/send_all. The reads and writes themselves are stream.py's.

In the server a TCP stream (plain or under TLS) is read by the poller (poller.py) while the
reader is parked: the poller calls readable(now) when the socket has bytes, which reads and
dispatches, and hands the reader its task back for what it must do itself (the end, a pause, a
failure); a deadline of the reader's cancels the parking.

Owns: the reader task (bytes in, event dispatch, the loop around the deadlines) and the parked
reads the poller makes for it. The read pause, the reader's deadlines and what it does when one
falls due, and the connection's life (run(), abort()) are driverlife.py's DriverLife; the
writing half (the writer task, flush(), backpressure at the socket, the close) is output.py's
DriverOutput. This class is both. Everything protocol-related is the engine's; everything
application-related is the `on_events` callback's.
Must not touch: protocol decisions, routing, the descriptor and the TLS session (stream.py).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import trio

from ..amqp.connection import Connection
from .driverlife import DriverLife, PausePredicate
from .now import trio_now
from .output import BlockedHandler, EventHandler
from .poller import Poller
from .stream import SealedStream
from .tlssession import TlsSession

# Bytes asked of the socket per read. 32 KiB cut most 10 KiB messages across two reads (the
# engine then joins the pieces): 128 KiB took router CPU per 10 KiB message from ~60 to ~30 us
# (interpreted). But 128 KiB is a sender's whole window of 1,000 100-byte messages: the router
# read and handled all of it before the consumer got the first, and the window's round trip
# (not CPU) bounded throughput. 64 KiB lets half a window go on while the rest is read: 100 B
# unsettled through one router 0.40-0.42 -> 0.50-0.53 of the direct ceiling, a chain of 3
# 0.20 -> 0.22, 10 KiB messages as fast (+8 % CPU each, compiled); see bench/README.md.
READ_SIZE = 64 * 1024


class ConnectionDriver(DriverLife):
    """Pumps bytes between `stream` and `engine`, handing events to `on_events`.

    Application code running in other tasks may call engine methods and then `wake()` so that
    the writer flushes what they queued. `run()` returns once the connection is over.
    """

    # No instance dict: every connection has a driver (the dict was ~1.6 KiB of each idle one).
    __slots__ = (
        "_initial", "_poller", "_parked", "_parked_scope", "_parked_deadline", "_poll_ended",
        "_poll_failure",
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
        super().__init__(
            stream, engine, on_events, read_size, write_high_water, on_output_blocked,
            pause_reading, open_deadline, on_open_timeout,
        )  # fmt: skip
        self._initial = initial
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
