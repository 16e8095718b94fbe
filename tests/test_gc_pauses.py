"""The garbage collector's pauses (router.management.gcpauses): every collection timed per
generation, the longest kept, a warning when one holds the router long (at most once per
WARN_EVERY_S), and the figures on the memory entity and /metrics of a running router."""

from __future__ import annotations

import gc
import logging

import pytest

from router.management import gcpauses
from router.management.gcpauses import WARN_EVERY_S, WARN_S, GcPauses

from .support.management import managed_router, metric_samples


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _collection(pauses: GcPauses, clock: _Clock, generation: int, took: float) -> None:
    pauses("start", {"generation": generation})
    clock.now += took
    pauses("stop", {"generation": generation, "collected": 0, "uncollectable": 0})


def test_each_collection_is_timed_per_generation_and_the_longest_kept() -> None:
    clock = _Clock()
    pauses = GcPauses(clock)
    _collection(pauses, clock, 0, 0.001)
    _collection(pauses, clock, 0, 0.003)
    _collection(pauses, clock, 2, 0.050)
    assert pauses.counts == [2, 0, 1]
    assert pauses.seconds == pytest.approx([0.004, 0.0, 0.050])
    assert pauses.longest == pytest.approx([0.003, 0.0, 0.050])
    # A stop without its start, or a generation the collector does not have, counts nothing.
    pauses("stop", {"generation": 1})
    _collection(pauses, clock, 7, 1.0)
    assert pauses.counts == [2, 0, 1]


def test_a_long_pause_is_logged_at_most_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    pauses = GcPauses(clock)
    with caplog.at_level(logging.WARNING, logger="router.memory"):
        _collection(pauses, clock, 2, WARN_S / 2)  # short: not worth a line
        assert caplog.records == []
        _collection(pauses, clock, 2, WARN_S * 2)
        _collection(pauses, clock, 2, WARN_S * 3)  # within the period: counted, not said again
        assert len(caplog.records) == 1
        assert "generation 2" in caplog.text and "held the router 200 ms" in caplog.text and "deploy.md" in caplog.text
        clock.now += WARN_EVERY_S
        _collection(pauses, clock, 2, WARN_S * 2)
        assert len(caplog.records) == 2
    assert pauses.counts[2] == 4 and pauses.longest[2] == pytest.approx(WARN_S * 3)


async def test_a_running_router_shows_its_pauses_on_the_memory_entity_and_metrics() -> None:
    async with managed_router() as router:
        watcher = gcpauses.current()
        assert watcher is not None and watcher in gc.callbacks  # hooked once a router runs
        hooked = gc.callbacks.count(watcher)
        before = watcher.counts[2]
        gc.collect()  # the collector is the process's: this router's, too
        assert watcher.counts[2] == before + 1
        (memory,) = (await router.http("GET", "/management/memory")).json
        assert len(memory["gcPauseSeconds"]) == 3 and memory["gcPauseSeconds"][2] > 0
        assert 0 < memory["gcLongestPauseSeconds"][2] <= memory["gcPauseSeconds"][2]
        samples = metric_samples((await router.http("GET", "/metrics")).body.decode())
        assert samples[("amqp_router_gc_pause_seconds_total", (("generation", "2"),))] > 0
        assert samples[("amqp_router_gc_longest_pause_seconds", (("generation", "2"),))] > 0
    async with managed_router():  # a second router in the process does not hook it again
        assert gc.callbacks.count(watcher) == hooked == 1


def test_reading_the_memory_figures_walks_no_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory entity (and `router stat memory`) is read while the router serves: a count of
    every tracked object (gc.get_objects) held the loop ~20 ms at 2,000 connections, so none is
    made; the collector's own figures are O(1)."""
    from router.management.metrics import process_memory

    def walk(*args: object) -> list[object]:
        raise AssertionError("the memory figures walked every tracked object")

    monkeypatch.setattr(gc, "get_objects", walk)
    figures = process_memory()
    assert figures["residentMemoryBytes"] > 0 and len(figures["gcCollections"]) == 3
    assert "pythonObjects" not in figures
