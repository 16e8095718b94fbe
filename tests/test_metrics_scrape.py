"""/metrics at scale: a scrape is written a slice of addresses at a time with the router's
connections running between slices, reads an address table that changes meanwhile without
failing, writes what Prometheus's parser reads back (any address, any value), and reads the
process's figures without a walk of its descriptors (router.management.procstat)."""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from router.config.models import RouterConfig
from router.management import procstat
from router.management.agent import ManagementAgent
from router.management.exposition import family, labelled
from router.management.http import ManagementApp
from router.management.metrics import ADDRESS_SLICE, Metrics, process_memory
from router.testing.routerharness import RouterHarness
from tests.support.management import metric_samples

ADDRESSES = 3 * ADDRESS_SLICE + 7  # four slices, the last one short
SUBSCRIBERS = "amqp_router_address_subscribers"


async def _get_metrics(app: ManagementApp) -> bytes:
    """GET /metrics through the ASGI callable (the way the HTTP server calls it)."""
    sent: list[Mapping[str, Any]] = []

    async def receive() -> Mapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": "/metrics", "raw_path": b"/metrics", "query_string": b"", "headers": []}
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    return bytes(sent[1]["body"])


def _scraped(app: ManagementApp) -> bytes:
    return trio.run(_get_metrics, app)


class CountedMetrics(Metrics):
    """Metrics that count the scrapes written."""

    written = 0

    def pieces(self) -> Iterator[str | None]:
        self.written += 1
        return super().pieces()


async def _checkpoint(seconds: float) -> None:
    await trio.lowlevel.checkpoint()


def _router_with_addresses(count: int) -> tuple[RouterHarness, Any, ManagementAgent]:
    harness = RouterHarness(RouterConfig())
    client = harness.connect("many")
    for n in range(count):
        client.receiver(f"queue/{n}")
    harness.pump()
    return harness, client, ManagementAgent(harness.core, harness.config)


def _without_process(samples: dict[Any, float]) -> dict[Any, float]:
    """The router's series (the process's, the runtime's and the collector's pauses move
    between two reads)."""
    moving = ("process_", "python_", "amqp_router_gc_")
    return {key: value for key, value in samples.items() if not key[0].startswith(moving)}


def test_a_scrape_lets_the_router_run_between_slices_of_addresses() -> None:
    _, _, agent = _router_with_addresses(ADDRESSES)
    let_run: list[float] = []

    async def sleep(seconds: float) -> None:
        let_run.append(seconds)
        await trio.lowlevel.checkpoint()

    metrics = Metrics(agent)
    app = ManagementApp(agent, healthy=lambda: True, metrics=metrics, sleep=sleep)
    body = _scraped(app)
    # Once after the router's own series, once between address slices, once per address
    # family, once after them: never a stretch longer than a slice or a family's join.
    assert len(let_run) >= ADDRESSES // ADDRESS_SLICE + 5 and set(let_run) == {0}
    samples = metric_samples(body.decode())
    for n in range(ADDRESSES):
        assert samples[(SUBSCRIBERS, (("address", f"queue/{n}"),))] == 1
        assert samples[("amqp_router_address_deliveries_ingress_total", (("address", f"queue/{n}"),))] == 0
    # The same series as the whole text at once (handle(), as tests and tools call it).
    whole = metric_samples(app.handle("GET", "/metrics", "", {}, b"").body.decode())
    assert _without_process(samples) == _without_process(whole)


def test_addresses_that_go_during_a_scrape_are_left_out_and_the_scrape_completes() -> None:
    harness, client, agent = _router_with_addresses(ADDRESSES)
    let_run: list[float] = []

    async def sleep(seconds: float) -> None:
        let_run.append(seconds)
        if len(let_run) == 2:  # after the first slice of addresses: every consumer goes
            harness.disconnect(client)
        await trio.lowlevel.checkpoint()

    body = _scraped(ManagementApp(agent, healthy=lambda: True, metrics=Metrics(agent), sleep=sleep))
    samples = metric_samples(body.decode())
    queues = [labels for name, labels in samples if name == SUBSCRIBERS and dict(labels)["address"].startswith("queue/")]
    assert len(queues) == ADDRESS_SLICE  # the first slice, read before they went; none after
    assert samples[("amqp_router_links", ())] == ADDRESSES  # (read before the addresses)
    # A scrape after it sees the router as it is now.
    after = metric_samples(Metrics(agent).text().decode())
    assert after[("amqp_router_links", ())] == 0
    assert not [labels for name, labels in after if name == SUBSCRIBERS and dict(labels)["address"].startswith("queue/")]


def test_overlapping_scrapes_share_one_and_the_next_writes_anew() -> None:
    _, _, agent = _router_with_addresses(ADDRESSES)
    metrics = CountedMetrics(agent)
    app = ManagementApp(agent, healthy=lambda: True, metrics=metrics, sleep=_checkpoint, new_event=trio.Event)
    bodies: list[bytes] = []

    async def scrapes() -> None:
        async def one() -> None:
            bodies.append(await _get_metrics(app))

        async with trio.open_nursery() as nursery:
            for _ in range(3):  # three monitors at once
                nursery.start_soon(one)
        assert metrics.written == 1
        bodies.append(await _get_metrics(app))  # one after them: a scrape of its own
        assert metrics.written == 2

    trio.run(scrapes)
    assert len(bodies) == 4 and bodies[0] == bodies[1] == bodies[2]
    assert metric_samples(bodies[3].decode())[(SUBSCRIBERS, (("address", "queue/0"),))] == 1


def test_a_scrape_whose_request_goes_away_leaves_the_waiting_ones_a_scrape_of_their_own() -> None:
    _, _, agent = _router_with_addresses(ADDRESSES)
    metrics = CountedMetrics(agent)
    stopped: list[bool] = []

    async def sleep(seconds: float) -> None:
        if not stopped:  # the first scrape stops at its first slice (its client is slow to go)
            stopped.append(True)
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()

    app = ManagementApp(agent, healthy=lambda: True, metrics=metrics, sleep=sleep, new_event=trio.Event)
    bodies: list[bytes] = []

    async def scrapes() -> None:
        async def waiting() -> None:
            bodies.append(await _get_metrics(app))

        async def first(gone: trio.CancelScope) -> None:
            with gone:
                await _get_metrics(app)

        async with trio.open_nursery() as nursery:
            gone = trio.CancelScope()
            nursery.start_soon(first, gone)
            await trio.testing.wait_all_tasks_blocked()  # the first is writing (stopped)
            nursery.start_soon(waiting)
            nursery.start_soon(waiting)
            await trio.testing.wait_all_tasks_blocked()  # both wait for it
            assert metrics.written == 1 and bodies == []
            gone.cancel()  # its request goes away mid-scrape

    trio.run(scrapes)
    assert len(bodies) == 2 and bodies[0] == bodies[1]
    assert metrics.written == 2  # the one that went, then one for both waiters
    assert metric_samples(bodies[0].decode())[(SUBSCRIBERS, (("address", "queue/0"),))] == 1


_LABELS = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
_VALUES = st.one_of(
    st.integers(min_value=0, max_value=2**63), st.floats(allow_nan=True, allow_infinity=True)
)


@given(label=_LABELS, value=_VALUES)
def test_any_address_and_value_reads_back_as_written(label: str, value: float) -> None:
    text = family("amqp_router_x", "gauge", "A help text with \\ and\na line break.", [(labelled("address", label), value)])
    (parsed,) = text_string_to_metric_families(text)
    (sample,) = parsed.samples
    assert sample.labels == {"address": label}
    assert parsed.documentation == "A help text with \\ and\na line break."
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(sample.value)
    else:
        assert sample.value == float(value)


def test_open_descriptors_are_counted_without_listing_them(monkeypatch: pytest.MonkeyPatch) -> None:
    before = procstat.open_fds()
    assert before is not None
    with socket.socket() as extra:
        assert extra.fileno() >= 0
        assert procstat.open_fds() == before + 1
        listed = len(os.listdir("/proc/self/fd")) - 1  # (less the listing's own descriptor)
        assert procstat.open_fds() == listed
        assert process_memory()["openFds"] == listed
        # A kernel that does not give the count as the directory's size (before Linux 6.2):
        # the listing, less its own descriptor.
        real_stat = os.stat

        def sizeless(path: Any, *args: Any, **kwargs: Any) -> Any:
            result = real_stat(path, *args, **kwargs)
            if str(path).endswith("/fd"):
                return os.stat_result((*result[:6], 0, *result[7:10]))
            return result

        monkeypatch.setattr(procstat.os, "stat", sizeless)
        assert procstat.open_fds() == listed
    figures = procstat.process_figures()
    assert {name for name, _, _ in procstat.PROCESS_FAMILIES} <= set(figures)
    assert figures["process_resident_memory_bytes"] > 0 and figures["process_cpu_seconds_total"] > 0
