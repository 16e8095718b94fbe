"""Runs one sans-IO AMQP connection engine over a trio stream (TCP now, TLS the same way).

Owns: the reader task (bytes in, timers, event dispatch), the writer task (one write per batch
of frames), bounded buffering, and
closing the stream when the engine is finished. Writes are never interleaved: one task writes. Everything protocol-related is the engine's;
everything application-related is the `on_events` callback's.
Must not touch: protocol decisions, routing.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import trio

from ..amqp.connection import Connection
from ..amqp.events import Event

EventHandler = Callable[[list[Event]], None]

READ_SIZE = 32 * 1024  # matched to typical credit windows: bigger reads made relays slower
CLOSE_GRACE_S = 2.0  # after our close, how long we wait for the peer's before dropping it


class ConnectionDriver:
    """Pumps bytes between `stream` and `engine`, handing events to `on_events`.

    Application code running in other tasks may call engine methods and then `wake()` so that
    the writer flushes what they queued. `run()` returns once the connection is over.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        engine: Connection,
        on_events: EventHandler,
        *,
        read_size: int = READ_SIZE,
    ) -> None:
        self.stream = stream
        self.engine = engine
        self.on_events = on_events
        self.read_size = read_size
        self._wakeup = trio.Event()
        self._closed = trio.Event()
        self._written_bytes = 0

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    def wake(self) -> None:
        """Ask the writer to flush whatever the engine has queued."""
        self._wakeup.set()

    def _dispatch(self) -> None:
        events = self.engine.events()
        if events:
            self.on_events(events)
        self._wakeup.set()

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                await self._reader()
                # The reader saw the end; give the writer a moment to flush the last frames.
                with trio.move_on_after(CLOSE_GRACE_S):
                    await self._closed.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._closed.set()
            with trio.CancelScope(shield=True):
                await trio.aclose_forcefully(self.stream)

    async def _reader(self) -> None:
        engine = self.engine
        grace_deadline = math.inf
        while True:
            if engine.finished:
                # Our close is out (or the peer is gone): wait briefly for the peer's close or
                # for EOF, then stop reading.
                if grace_deadline == math.inf:
                    grace_deadline = trio.current_time() + CLOSE_GRACE_S
                deadline = grace_deadline
            else:
                next_deadline = engine.next_deadline()
                deadline = math.inf if next_deadline is None else next_deadline
            data: bytes | None = None
            with trio.move_on_at(deadline):
                try:
                    data = bytes(await self.stream.receive_some(self.read_size))
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    data = b""
            now = trio.current_time()
            if data is None:
                if engine.finished:
                    engine.receive_data(b"", now)
                    self._dispatch()
                    return
                engine.tick(now)
            else:
                engine.receive_data(data, now)
            self._dispatch()
            if data == b"":
                return

    async def _writer(self) -> None:
        engine = self.engine
        stream = self.stream
        while True:
            await self._wakeup.wait()
            self._wakeup = trio.Event()
            data = engine.data_to_send()
            if data:
                try:
                    # Not shielded: a peer that stops reading must not hang our shutdown, and a
                    # cancelled write only ever happens when the connection is being torn down.
                    await stream.send_all(data)
                    self._written_bytes += len(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    engine.receive_data(b"", trio.current_time())
                    self._dispatch()
                    break
            if engine.finished and not engine.pending_output:
                break
        self._closed.set()
        await trio.aclose_forcefully(stream)
