"""The server's reads of TCP connections (plain or under TLS): one task waits for all of them and
reads the ready ones itself, instead of a trio wait per connection per read.

    poller = Poller()
    nursery.start_soon(poller.run)          # for as long as the server runs
    poller.watch(fd, driver)                # driver.readable(now) is called while fd has bytes
    poller.unwatch(fd)                      # (before the descriptor is closed; idempotent)

Why: a lone message (a router at low load, or many flows at a low rate each) paid a whole trio
wake-up per read: the run loop's iteration (its deadlines, its instruments, the task switch down
a connection's coroutine chain) and re-arming the descriptor in trio's one-shot epoll (a system
call per read). That was about half of the router's instructions per lone message
(bench/README.md, "Lone messages"). Here the ready descriptors come from an epoll of our own,
level-triggered, so nothing is re-armed, and each is read and dispatched to its (compiled)
driver synchronously.

The task cooperates with trio rather than replacing it. When trio has nothing to run, it blocks
in its own epoll, bounded by trio's next deadline, with trio's epoll descriptor in its set: any
descriptor trio waits for (listeners, writers waiting for room, WebSocket connections, handshakes,
the wake-up socket of signals and threads) wakes it, and it then yields so that trio handles it.
When trio has tasks to run, it only looks (no wait) and yields after each round, so a busy
router shares its time as before. Where blocking would hide the process's state from trio
(trio's mock clocks, `wait_all_tasks_blocked`, or a trio whose internals are not the ones this
was written for) it waits the ordinary way: for a second epoll of the same descriptors, through
trio (an epoll inside trio's cannot hold trio's own: the kernel refuses loops).

Busy polling (`busy_poll_s` > 0, the router's `busy_poll_us`): before blocking, the poller keeps
looking (epoll without a wait) for that long, bounded by trio's next deadline. A process that
blocks is woken by the kernel when a peer writes, and on an idle CPU (above all a virtual one)
that wake-up costs more than the router's own work on a lone message; a request and its reply
cross the router twice, so a request/response round trip through the router paid four wake-ups
where a direct one pays two (bench/README.md, "Busy polling"). The price is CPU: up to
`busy_poll_s` of it after every last event, which a router sharing its core with other busy
processes takes from them. Off by default.

Owns: the two epoll descriptors, which driver each descriptor belongs to, when to block and when
to yield, busy polling and its counters. Must not touch: what a read does (the driver's
`readable`), closing descriptors.
"""

from __future__ import annotations

import logging
import select
from time import perf_counter
from typing import Any, Final, Protocol

import trio

from .now import system_clock_offset, trio_now

log = logging.getLogger("router.net.server")

_READABLE: Final = select.EPOLLIN
_MAX_WAIT_S: Final = 3600.0  # one wait's bound when trio has no deadline at all
_perf_counter: Final = perf_counter
_INF: Final = float("inf")
_checkpoint: Final = trio.lowlevel.checkpoint
_wait_readable: Final = trio.lowlevel.wait_readable


class Readable(Protocol):
    def readable(self, now: float) -> None: ...


class Poller:
    """The reads of the server's TCP connections (see the module docstring)."""

    def __init__(self, busy_poll_s: float = 0.0) -> None:
        self.busy_poll_s = busy_poll_s  # how long to keep looking before blocking (0: not at all)
        self.busy_caught = 0  # busy polls that found a ready descriptor (a wake-up saved)
        self.busy_missed = 0  # busy polls that found none and blocked after all
        self.busy_seconds = 0.0  # time spent busy polling
        self.busy_polling = False  # in a busy poll now
        # Both hold every watched descriptor: `_own` also trio's epoll (waited in directly),
        # `_parked` not (waited for through trio, which holds it then).
        self._own = select.epoll()
        self._parked = select.epoll()
        self._drivers: dict[int, Any] = {}  # descriptor -> its driver (a ConnectionDriver)
        self.running = False  # run() is running: drivers use the poller only then

    def watch(self, fd: int, driver: Readable) -> None:
        """`driver.readable(now)` is called (from run()'s task) while `fd` has bytes to read;
        `now` is trio's time, read once per round of ready descriptors."""
        self._own.register(fd, _READABLE)
        try:
            self._parked.register(fd, _READABLE)
        except OSError:
            self._own.unregister(fd)
            raise
        self._drivers[fd] = driver

    def unwatch(self, fd: int) -> None:
        """No more calls for `fd` (call it before closing the descriptor); nothing if not watched."""
        if self._drivers.pop(fd, None) is None:
            return
        for epoll in (self._own, self._parked):
            try:
                epoll.unregister(fd)
            except OSError:  # (closed already: the kernel dropped it)
                pass

    @property
    def watched(self) -> int:
        return len(self._drivers)

    async def run(self) -> None:
        runner, trio_fd = _trio_loop()
        scheduled = _Scheduled()
        if runner is not None:
            self._own.register(trio_fd, _READABLE)
            trio.lowlevel.add_instrument(scheduled)  # type: ignore[arg-type]  # (duck-typed)
        self.running = True
        try:
            await self._run(runner, trio_fd, scheduled)
        finally:
            self.running = False
            # A driver still watched is parked in its task, whose cancellation unwatches it.
            if runner is not None:
                trio.lowlevel.remove_instrument(scheduled)  # type: ignore[arg-type]
                self._own.unregister(trio_fd)

    async def _run(self, runner: Any, trio_fd: int, scheduled: _Scheduled) -> None:
        """Wait for the watched descriptors and call their drivers, round after round.

        `alone`: this task is the only one trio would run now (nothing else runnable, in its
        queue or later in the batch this task runs in): only then may it block the thread. It
        knows that after a yield when nothing was queued as it yielded and no task but itself
        was scheduled since (trio's `task_scheduled` instrument counts them); it stays so while
        its rounds schedule nothing."""
        # The server's drivers, called natively when compiled (a call through the protocol,
        # by name, was ~300 instructions a read). Imported here: driver.py imports this module.
        from .driver import ConnectionDriver

        own, parked = self._own, self._parked
        parked_fd = parked.fileno()
        # Only on trio's own clock: a mock clock's time is not the one the waits would count.
        offset = system_clock_offset(runner) if runner is not None else None
        # trio's run queue, idle waiters and deadlines, looked up once (trio keeps these objects
        # for the whole run): each lookup by name is a dictionary search from compiled code.
        runq: Any = runner.runq if runner is not None else ()
        idle_waiters: Any = runner.waiting_for_idle if runner is not None else ()
        deadlines: Any = runner.deadlines if runner is not None else None
        drivers = self._drivers
        alone = False
        while True:
            if offset is None or idle_waiters:
                # The ordinary way: trio sees this task blocked (its idle detection and mock
                # clocks need that), woken by the second epoll.
                alone = False
                await _wait_readable(parked_fd)
                ready = parked.poll(0)
            elif not alone:
                queued = len(runq)
                mark = scheduled.count
                await _checkpoint()  # whatever else is runnable runs first
                alone = queued == 0 and scheduled.count == mark + 1  # (+1: this task's own)
                ready = own.poll(0)
            else:
                # trio's next deadline is the first of its heap (Deadlines.next_deadline without
                # the Python call; the heap itself may be replaced when trio prunes it). A stale
                # first entry (a scope's deadline moved) only ends this wait early once: trio
                # drops it as it expires deadlines.
                heap = deadlines._heap
                deadline: float = heap[0][0] if heap else _INF
                wait = deadline - (offset + _perf_counter())
                if wait <= 0:
                    alone = False  # trio's deadline is due: it acts on it when this task yields
                    continue
                if self.busy_poll_s > 0.0:
                    ready = self._busy_poll(own, min(self.busy_poll_s, wait))
                    if not ready:
                        wait = deadline - (offset + _perf_counter())
                        ready = own.poll(min(wait, _MAX_WAIT_S)) if wait > 0 else []
                else:
                    ready = own.poll(min(wait, _MAX_WAIT_S))
                if not ready:
                    alone = False  # (the deadline came)
                    continue
            mark = scheduled.count
            # trio's time for this round's reads: read here, where the clock's offset is known,
            # it costs a tenth of trio_now() (whose run lookup goes through a thread-local).
            now = offset + _perf_counter() if offset is not None else trio_now()
            for fd, _events in ready:
                if fd == trio_fd:
                    alone = False  # trio's own descriptors are ready: it handles them
                    continue
                driver = drivers.get(fd)
                if driver is not None:
                    # never raises: a failure is its connection's
                    if isinstance(driver, ConnectionDriver):
                        driver.readable(now)
                    else:  # (a stand-in of tests)
                        driver.readable(now)
            if scheduled.count != mark or runner is None or runq:
                alone = False  # the reads woke tasks (writers, the core's timer): they run next

    def _busy_poll(self, own: select.epoll, limit_s: float) -> list[tuple[int, int]]:
        """Look at `own` without waiting, again and again, for at most `limit_s`: what is ready
        (nothing when the time ran out)."""
        start = _perf_counter()
        end = start + limit_s
        self.busy_polling = True
        ready = own.poll(0)
        while not ready and _perf_counter() < end:
            ready = own.poll(0)
        self.busy_polling = False
        self.busy_seconds += _perf_counter() - start
        if ready:
            self.busy_caught += 1
        else:
            self.busy_missed += 1
        return ready


class _Scheduled:
    """A trio instrument counting the tasks scheduled (trio.abc.Instrument's `task_scheduled`;
    not a subclass, so that it compiles as a native class)."""

    def __init__(self) -> None:
        self.count = 0

    def task_scheduled(self, task: object) -> None:
        self.count += 1


def _trio_loop() -> tuple[Any, int]:
    """trio's run loop and its epoll descriptor, when they are what run() knows how to wait
    beside; (None, -1) otherwise (run() then waits the ordinary way)."""
    try:
        from trio._core._run import GLOBAL_RUN_CONTEXT

        runner: Any = GLOBAL_RUN_CONTEXT.runner
        trio_fd = runner.io_manager._epoll.fileno()
        runner.runq.__len__, runner.waiting_for_idle.__len__  # noqa: B018 (they are there)
        runner.deadlines._heap.__len__, runner.clock  # noqa: B018
        return runner, int(trio_fd)
    except Exception:  # another trio, or another I/O backend
        log.info("trio's run loop is not the one the poller knows: connections are read the ordinary way")
        return None, -1
