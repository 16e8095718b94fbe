"""How long the garbage collector holds the router's loop.

    pauses = watch()                 # once per process (idempotent): RouterServer.run
    pauses.seconds, pauses.longest   # per generation: total and longest time in collections

Owns: `GcPauses`, a `gc.callbacks` hook timing every collection per generation (a few
microseconds per collection, nothing per message), and the warning when one collection held
the loop past WARN_S (at most once per WARN_EVERY_S, saying what to do: docs/deploy.md
"Garbage-collection pauses").
Why: the hot path makes no cyclic garbage (3,000,000 relayed messages ran no collection at all),
so collections come from connections and links opening and closing. A full collection walks
every object the collector tracks, ~85 per idle connection with a link, and its cost per object
grows once they outgrow the CPU's caches: ~3 ms at 500 connections, 9-16 ms at 1,000, 50-87 ms
at 2,000 and ~200 ms at 5,000 (bench/gcpause.py). With `router run`'s settings (tune_gc) one
comes rarely (after some 900,000 connections opened and closed), but it stops every connection
for that long when it comes: an operator must be able to see it.
Must not touch: the collector's settings (router.cli.run.tune_gc sets them).
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable
from typing import Any, Final

log = logging.getLogger("router.memory")

WARN_S: Final = 0.1  # a collection holding the loop this long is worth a line in the log
WARN_EVERY_S: Final = 600.0
GENERATIONS: Final = 3


class GcPauses:
    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.clock = clock
        self.counts = [0] * GENERATIONS
        self.seconds = [0.0] * GENERATIONS
        self.longest = [0.0] * GENERATIONS
        self._started: float | None = None
        self._warned_at: float | None = None

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        """gc.callbacks' hook: `phase` is "start" or "stop", `info` names the generation."""
        if sys.is_finalizing():  # the interpreter's last collections, the router gone
            return
        now = self.clock()
        if phase == "start":
            self._started = now
            return
        started, self._started = self._started, None
        generation = info.get("generation")
        if started is None or not isinstance(generation, int) or not 0 <= generation < GENERATIONS:
            return
        took = now - started
        self.counts[generation] += 1
        self.seconds[generation] += took
        if took > self.longest[generation]:
            self.longest[generation] = took
        if took >= WARN_S and (self._warned_at is None or now - self._warned_at >= WARN_EVERY_S):
            self._warned_at = now
            self._warn(generation, took)

    @staticmethod
    def _warn(generation: int, took: float) -> None:
        log.warning(
            "a garbage collection (generation %d) held the router %.0f ms: every connection waited; "
            "fewer connections per router (edge routers) shorten it (docs/deploy.md, garbage-collection "
            "pauses; the memory entity has every generation's pauses; said at most every %.0f min)",
            generation, took * 1e3, WARN_EVERY_S / 60,
        )  # fmt: skip


_PAUSES: GcPauses | None = None


def watch() -> GcPauses:
    """The process's watcher, hooked into the collector the first time (the collector is the
    process's: several routers in one process, as in tests, share it)."""
    global _PAUSES
    if _PAUSES is None:
        _PAUSES = GcPauses()
        gc.callbacks.append(_PAUSES)
    return _PAUSES


def current() -> GcPauses | None:
    """The watcher, if a router of this process installed it."""
    return _PAUSES
