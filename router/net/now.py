"""trio's clock, read without its Python layers: `trio_now()` is `trio.current_time()`.

trio.current_time() is three Python-level calls (the generated wrapper, the runner's method, the
clock's) around one perf_counter: the connection driver reads it on every read and the core
pump on every batch, so it was about a tenth of what a lone message cost once the poller took
trio's scheduling out of reads (bench/README.md, "Lone messages"). On trio's own clock this reads
the clock's offset and perf_counter directly; any other clock (trio's mock clocks in tests) is
asked as trio asks it. Compiled with the hot path.

Owns: that read, a run's clock read the same way without finding the run each time
(`run_clock`, the server's default clock), and telling whether trio runs on its own clock
(`system_clock_offset`, for the poller, which only waits by itself on that clock). Relies on
trio's run context and SystemClock (trio._core._run); where they are not what this was written
for, trio_now asks trio.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any, Final

import trio

_perf_counter: Final = perf_counter

try:
    from trio._core._run import GLOBAL_RUN_CONTEXT as _RUN_CONTEXT
    from trio._core._run import SystemClock as _SYSTEM_CLOCK

    _KNOWN = True
except ImportError:  # another trio: its own way
    _KNOWN = False


def trio_now() -> float:
    """trio.current_time(); RuntimeError outside trio.run, as there."""
    if not _KNOWN:
        return trio.current_time()
    try:
        runner: Any = _RUN_CONTEXT.runner
    except AttributeError:
        raise RuntimeError("must be called from async context") from None
    clock = runner.clock
    if type(clock) is _SYSTEM_CLOCK:
        offset: float = clock.offset
        return offset + _perf_counter()
    now: float = clock.current_time()
    return now


class OffsetClock:
    """trio's own clock for one run, read as its offset plus perf_counter: what trio_now() reads
    there, without finding the run (a thread-local) and its clock on every call."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def __call__(self) -> float:
        return self.offset + _perf_counter()


def run_clock() -> Callable[[], float]:
    """trio's clock for the run this is called in (a server's default clock: constructed inside
    trio.run, it lives as long as the run): an OffsetClock on trio's own clock, trio_now for any
    other (a mock clock is asked as trio asks it)."""
    if _KNOWN:
        try:
            offset = system_clock_offset(_RUN_CONTEXT.runner)
        except AttributeError:
            raise RuntimeError("must be called from async context") from None
        if offset is not None:
            return OffsetClock(offset)
    return trio_now


def system_clock_offset(runner: Any) -> float | None:
    """The offset of `runner`'s clock when it is trio's own (its time: offset + perf_counter());
    None for any other clock."""
    clock = runner.clock
    if _KNOWN and type(clock) is _SYSTEM_CLOCK:
        offset: float = clock.offset
        return offset
    return None
