"""trio's clock, read without its Python layers: `trio_now()` is `trio.current_time()`.

trio.current_time() is three Python-level calls (the generated wrapper, the runner's method, the
clock's) around one perf_counter: the connection driver reads it on every read and the core
pump on every batch, so it was about a tenth of what a lone message cost once the poller took
trio's scheduling out of reads (bench/README.md, "Lone messages"). On trio's own clock this reads
the clock's offset and perf_counter directly; any other clock (trio's mock clocks in tests) is
asked as trio asks it. Compiled with the hot path.

Owns: nothing but that read. Relies on trio's run context and SystemClock (trio._core._run);
where they are not what this was written for, trio_now is trio.current_time itself.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter
from typing import Any, Final

import trio

_perf_counter: Final = perf_counter


def _fallback() -> float:
    return trio.current_time()


def _direct() -> float:
    try:
        runner: Any = _RUN_CONTEXT.runner
    except AttributeError:
        raise RuntimeError("must be called from async context") from None
    clock = runner.clock
    if type(clock) is _SYSTEM_CLOCK:
        offset: float = clock.offset
        return offset + _perf_counter()
    result: float = clock.current_time()
    return result


try:
    from trio._core._run import GLOBAL_RUN_CONTEXT as _RUN_CONTEXT
    from trio._core._run import SystemClock as _SYSTEM_CLOCK

    trio_now: Callable[[], float] = _direct
except ImportError:  # another trio: its own way
    trio_now = _fallback
