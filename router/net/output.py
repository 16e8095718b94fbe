"""The writing half of a connection's driver (driver.py's ConnectionDriver is a DriverOutput):
the engine's frames out to the stream, the writer task, backpressure at the socket, and the
connection's close.

Writes are never interleaved: one task writes. On a TCP socket most writes are made directly by
flush() (the socket takes them at once), so the writer task lives only while it has something
to write: started when a write would block (or output is queued from another task), ended when
it has written everything. Other streams keep theirs from the first write to the end.

Backpressure (optional, used by the router's server): the writer counts the bytes taken from
the engine but not yet accepted by the stream, adds those the engine's sessions hold until the
peer opens its incoming window (`FrameOutput.held_bytes`: a peer that opens no window is a peer
that does not read), and calls `on_output_blocked(True)` when they exceed `write_high_water`,
then `on_output_blocked(False)` once they drain below half of it (hysteresis, so a connection
near the mark does not flap); `expect_drain()` for a caller that holds more to write once what
is queued drains. The reader (driverlife.py) stops reading a peer whose unsent bytes pass a
higher bound, `read_pause_unsent`: what the engine answers on its own (an echoed flow, say)
does not wait for the output to drain, so a peer that asks without reading is not read further.

Owns: the output queue, the writer task, the closed state and closing the stream (once the
reading half let go of it: `_stop_reads`). Must not touch: reading (driver.py), timers (driverlife.py), the
descriptor and the TLS session (stream.py).
"""

from __future__ import annotations

from collections.abc import Callable
import trio

from ..amqp.connection import Connection
from ..amqp.events import Event
from .now import trio_now
from .stream import Chunk, open_stream

EventHandler = Callable[[list[Event]], None]
BlockedHandler = Callable[[bool], None]


class DriverOutput:
    """The engine's output to `stream` (see the module docstring); `on_events` (or a subclass's
    `_deliver`) gets the events of each batch the engine produced (`_dispatch`, after a read or
    the stream's end)."""

    __slots__ = (
        "engine", "on_events", "write_high_water", "on_output_blocked", "_wakeup", "_wake_pending",
        "_writer_running", "_closed", "_closed_event", "_outq", "_unsent", "_sending",
        "_output_blocked", "_nursery", "_stream",
    )  # fmt: skip

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: Connection,
        on_events: EventHandler | None,
        read_size: int,
        write_high_water: int | None,
        on_output_blocked: BlockedHandler | None,
    ) -> None:
        self.engine = engine
        self.on_events = on_events
        self.write_high_water = write_high_water
        self.on_output_blocked = on_output_blocked
        # The writer: running or not (see the module docstring), something for it to do, and
        # the event it waits on (only a writer that stays between writes waits).
        self._writer_running = False
        self._wake_pending = False
        self._wakeup: trio.Event | None = None
        # Made when first needed: only run() waits for the close (an Event is ~200 bytes on
        # every idle connection).
        self._closed = False
        self._closed_event: trio.Event | None = None
        self._outq: list[Chunk] = []  # taken from the engine, not yet handed to the stream
        self._unsent = 0  # bytes in _outq plus those of the write in progress
        self._sending = False
        self._output_blocked = False
        self._nursery: trio.Nursery | None = None  # while the driver runs (its writer starts in it)
        # The peer's bytes in and ours out (stream.py). A TCP stream's socket (plain or under
        # TLS) is written directly by flush() when it takes the bytes at once: that saves a task
        # switch per forwarding hop. Under TLS every byte taken from the engine is sealed
        # (encrypted) before it goes anywhere (flush, _take_output): _outq carries wire bytes.
        self._stream = open_stream(stream, read_size, self._tls_output)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def unsent_bytes(self) -> int:
        """Bytes taken from the engine that the stream has not accepted yet."""
        return self._unsent

    @property
    def output_blocked(self) -> bool:
        return self._output_blocked

    async def wait_closed(self) -> None:
        if self._closed:
            return
        if self._closed_event is None:
            self._closed_event = trio.Event()
        await self._closed_event.wait()

    def _set_closed(self) -> None:
        self._closed = True
        if self._closed_event is not None:
            self._closed_event.set()

    def wake(self) -> None:
        """Ask the writer to flush whatever the engine has queued."""
        if self._sending:
            # A write is in progress, so the peer reads slower than we produce: take the new
            # frames now so that they count towards the high-water mark (the engine only
            # counts frames, not bytes). They go out together in the next write.
            self._take_output()
        self._kick_writer()

    def _kick_writer(self) -> None:
        """There is something for the writer: wake it, or start it (before run() has started,
        run() does)."""
        self._wake_pending = True
        if self._writer_running:
            if self._wakeup is not None:
                self._wakeup.set()
        elif self._nursery is not None:
            self._writer_running = True
            self._nursery.start_soon(self._writer)

    def flush(self) -> None:
        """Write what the engine has queued now, from the calling task, if the socket accepts it
        without blocking; the rest goes to the writer task. Nothing is interleaved: this only
        writes while no write is in progress and nothing is waiting for the writer."""
        stream = self._stream
        engine = self.engine
        if stream.fd < 0 or self._sending or self._outq or engine.finished:
            self.wake()
        else:
            # On an error nothing is written: the writer meets the same error and tears down.
            if stream.sealing:
                data = engine.data_to_send()
                rest = stream.write_now(stream.seal(data)) if data else data
            else:  # large payloads go from the reads they arrived in to the socket, never copied
                chunks = engine.chunks_to_send()
                rest = stream.gather_now(chunks) if len(chunks) != 0 else b""
            if len(rest) != 0:
                self._queue(rest)
                self._kick_writer()
                return
        if self._output_blocked or engine.output.held_bytes:
            self._held_changed()

    def _held_changed(self) -> None:
        """After the engine's output was taken, with frames held for the peer's window or the
        output blocked: the held frames may pass the mark (no byte was queued to say so), or
        (the window opened, their link detached) what blocked the output may have drained: the
        writer says so, as after any write."""
        high = self.write_high_water
        if high is None:
            return
        if not self._output_blocked:
            if self._unsent + self.engine.output.held_bytes > high:
                self._set_output_blocked(True)
        else:
            self._kick_writer()

    def _dispatch(self) -> None:
        engine = self.engine
        sunk = engine.sunk  # (events() resets it) transfers the engine's sink took: their batch ends here
        events = engine.events()
        if events or sunk:
            self._deliver(events)
        self.flush()

    def _deliver(self, events: list[Event]) -> None:
        """Hand a batch of events on: to `on_events`, or a subclass overrides this (called
        natively, where a callback is a call through Python, and no bound method is held by
        every connection: serverdriver.py)."""
        on_events = self.on_events
        assert on_events is not None, "a driver without on_events overrides _deliver"
        on_events(events)

    def _take_output(self) -> None:
        data = self.engine.data_to_send()
        if not data:
            return
        stream = self._stream
        if stream.sealing:
            data = stream.seal(data)
        self._queue(data)

    def _tls_output(self, data: bytes) -> None:
        """What the TLS layer itself must send (stream.py): after what is queued."""
        self._queue(data)
        self._kick_writer()

    def _queue(self, data: Chunk) -> None:
        self._outq.append(data)
        self._unsent += len(data)
        high = self.write_high_water
        if high is not None and not self._output_blocked and self._unsent + self.engine.output.held_bytes > high:
            self._set_output_blocked(True)

    def expect_drain(self) -> bool:
        """The caller has more to write once what is queued drains (the core holds frames of
        lower priority bands, router.core.holding): True when bytes are on their way to the
        stream, the output then counts as blocked until they drain below half the high-water
        mark (`on_output_blocked(False)` follows, as after any block); False when everything is
        written already, the caller may write more now."""
        if self._output_blocked:
            return True
        if self.engine.pending_output:
            self.wake()  # (whatever the core queued since the last flush: taken or the writer woken)
        if self.write_high_water is None or not (self._unsent or self._wake_pending or self._sending):
            return False
        self._set_output_blocked(True)
        return True

    def _drained(self) -> bool:
        """Below half the high-water mark (only asked while the output is blocked, so there is
        a mark), counting what the engine holds for the peer's window."""
        high = self.write_high_water
        return high is not None and self._unsent + self.engine.output.held_bytes < high // 2

    def _after_write(self) -> None:
        """Bytes were written (the reader's pause may end: driverlife.py)."""

    def _set_output_blocked(self, blocked: bool) -> None:
        self._output_blocked = blocked
        if self.on_output_blocked is not None:
            self.on_output_blocked(blocked)

    def _stop_reads(self) -> None:
        """Before the stream closes: whatever reads it directly lets go of it (the driver's)."""

    async def _close_stream(self) -> None:
        self._stop_reads()
        # A TLS close_notify only when nothing is left unwritten (it must come last).
        await self._stream.aclose(goodbye=not self._outq and not self._sending)

    async def _writer(self) -> None:
        try:
            await self._write_while_woken()
        finally:
            self._writer_running = self._wake_pending = False
            self._wakeup = None

    async def _write_while_woken(self) -> None:
        engine = self.engine
        stream = self._stream
        while True:
            self._wake_pending = False
            self._take_output()
            while self._outq:
                # Everything taken so far goes out together (frames queued during the previous
                # write included), written from the chunks as they are.
                chunks = self._outq
                self._outq = []
                size = 0
                for chunk in chunks:
                    size += len(chunk)
                self._sending = True
                try:
                    sent = await stream.send_all(chunks)
                finally:
                    self._sending = False
                if not sent:
                    self._outq, self._unsent = [], 0
                    engine.receive_data(b"", trio_now())
                    self._dispatch()
                    self._set_closed()
                    await self._close_stream()
                    return
                self._unsent -= size
                self._after_write()
                if self._output_blocked and self._drained():
                    self._set_output_blocked(False)
            if self._output_blocked and self._drained():
                # Blocked by expect_drain while flush() wrote what this writer was woken for
                # (or what the peer's window held went out so): nothing is left to drain, and
                # this is the last chance to say so.
                self._set_output_blocked(False)
            if engine.finished and not engine.pending_output:
                break
            if self._wake_pending:
                continue
            if stream.fd >= 0:
                return  # all written: the next write that would block starts a writer again
            self._wakeup = wakeup = trio.Event()
            await wakeup.wait()
            self._wakeup = None
        self._set_closed()
        await self._close_stream()
