"""Flow records acknowledged (docs/flow-records.md, "Transport"): a router sends its batches
unsettled, one at a time, and keeps each in its bounded buffer until a collector accepts it; a
collector that goes away before it writes (modified), or none at all (released), gets the
batch again after a backoff, so that no record is lost and, with the collector's dedupe, none
is doubled; a refused batch (rejected) is dropped and counted; with no collector for an hour
the buffer stays within its bound (a FlowTask on trio's autojump clock)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from router.amqp.messaging import ACCEPTED, Rejected
from router.amqp.performatives import Error
from router.cli.collect_files import PartitionWriter
from router.config.models import Flow
from router.flow.publish import RETRY_FIRST_S, Publisher
from router.flow.records import Emitter, decode_lines
from router.net.flowtask import FlowTask
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client

FLOW = Flow(enabled=True, sample_one_in=0, batch_records=3, buffer_records=50)


def _mesh() -> tuple[MeshHarness, Emitter, Publisher]:
    """A - B - C; A's records (a publisher as FlowTask makes it) go to collectors elsewhere."""
    h = MeshHarness()
    for i, rid in enumerate(("A", "B", "C")):
        h.router(rid, instance=i + 1, flow=FLOW)
    h.link("A", "B")
    h.link("B", "C")
    h.converge()
    emitter = Emitter("A", FLOW.buffer_records, boot="boot-a")
    for i in range(10):
        emitter.emit("hop", 1_700_000_000.0 + i, {"trace_id": f"t{i}"})
    return h, emitter, Publisher(emitter, "_flow/records", FLOW.batch_records)


def _collector(h: MeshHarness, router_id: str, name: str) -> tuple[Client, Any]:
    client = h.client(router_id, name)
    client.auto_accept = False
    rx = client.receiver("_flow/records")
    h.advance(0.5)
    rx.flow(100)
    h.pump()
    h.advance(1.0)  # the address reaches A
    return client, rx


def _seqs(client: Client, rx: Any, start: int = 0) -> list[list[int]]:
    return [[r["seq"] for r in decode_lines(got.message.body_bytes)] for got in client.received[rx][start:]]


def test_one_batch_at_a_time_held_until_a_collector_accepts_it() -> None:
    h, emitter, publisher = _mesh()
    woken: list[int] = []
    publisher.woken = lambda: woken.append(1)
    assert not publisher.send(h.cores["A"], h.now)  # no collector anywhere: nothing goes
    client, rx = _collector(h, "C", "collector")
    assert publisher.send(h.cores["A"], h.now)
    assert not publisher.send(h.cores["A"], h.now)  # the first is in flight: the next waits
    h.pump()
    assert _seqs(client, rx) == [[1, 2, 3]]
    assert emitter.held == 3 and emitter.emitted == 0 and len(emitter) == 7
    got = client.received[rx][0]
    assert not got.settled  # unsettled on every hop
    rx.dispose(got.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert woken and publisher.in_flight is None and publisher.accepted == 1
    assert emitter.held == 0 and emitter.emitted == 3
    assert publisher.send(h.cores["A"], h.now)  # at once: no backoff after an accepted batch
    h.pump()
    assert _seqs(client, rx) == [[1, 2, 3], [4, 5, 6]]


def test_a_collector_that_dies_before_it_writes_loses_no_record_and_doubles_none(tmp_path: Path) -> None:
    h, emitter, publisher = _mesh()
    core = h.cores["A"]
    first, rx1 = _collector(h, "C", "first")
    writer = PartitionWriter(tmp_path)
    assert publisher.send(core, h.now)
    h.pump()
    got = first.received[rx1][0]
    assert writer.write(decode_lines(got.message.body_bytes)) == 3  # written, and the collector dies before its accept
    writer.close()
    h.cut(next(w for w in h.wires if w.name == "first@C"))  # its connection drops: the batch comes back modified
    assert publisher.in_flight is None and publisher.retried == 1 and emitter.held == 0 and len(emitter) == 10
    h.advance(0.5)
    assert not publisher.send(core, h.now)  # the backoff starts
    assert not publisher.send(core, h.now + RETRY_FIRST_S / 2)
    second, rx2 = _collector(h, "B", "second")  # the collector again, elsewhere, with the same files
    writer = PartitionWriter(tmp_path)
    while emitter.held or len(emitter):
        assert publisher.send(core, h.now + RETRY_FIRST_S)
        h.pump()
        got = second.received[rx2][-1]
        writer.write(decode_lines(got.message.body_bytes))
        rx2.dispose(got.delivery_id, state=ACCEPTED, settled=True)
        h.pump()
    assert _seqs(second, rx2)[0] == [1, 2, 3]  # the same batch again, first
    assert writer.duplicates == 3 and emitter.emitted == 10 and emitter.dropped == 0
    writer.close()
    on_disk = sorted(json.loads(line)["seq"] for path in tmp_path.glob("date=*/hour=*/router=A/*.json.gz")
                     for line in __import__("gzip").open(path, "rt"))  # fmt: skip
    assert on_disk == list(range(1, 11))  # none lost, none doubled


def test_a_refused_batch_is_dropped_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    h, emitter, publisher = _mesh()
    core = h.cores["A"]
    client, rx = _collector(h, "C", "collector")
    refused = Rejected(error=Error(condition="amqp:decode-error", description="not records"))
    with caplog.at_level(logging.ERROR, logger="router.flow"):
        for expected in ([1, 2, 3], [4, 5, 6]):
            assert publisher.send(core, h.now)
            h.pump()
            got = client.received[rx][-1]
            assert [r["seq"] for r in decode_lines(got.message.body_bytes)] == expected
            rx.dispose(got.delivery_id, state=refused, settled=True)
            h.pump()
    assert publisher.rejected == 2 and emitter.dropped == 6 and emitter.held == 0 and emitter.emitted == 0
    assert core.read.totals(h.now).flow_records_dropped == 0  # (this emitter is not the core's own)
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "not records" in caplog.records[0].message and len(caplog.records) == 1
    assert publisher.send(core, h.now)  # no backoff: the next batch goes


def test_no_collector_for_a_long_time_the_buffer_stays_within_its_bound() -> None:
    flow = Flow(enabled=True, sample_one_in=0, batch_records=100, buffer_records=500)
    h = MeshHarness()
    h.router("A", instance=1, flow=flow)
    h.router("B", instance=2, flow=flow)
    h.link("A", "B")
    h.converge()
    core = h.cores["A"]
    task = FlowTask(core, flow, lambda: h.now, "test")
    emitter = task.recorder.emitter
    publisher = task.publisher
    assert publisher is not None
    peak = [0]

    async def traffic() -> None:
        while True:  # 40 hop records a second; the mesh's clock follows trio's
            for _ in range(40):
                emitter.emit("hop", 1_700_000_000.0, {})
            peak[0] = max(peak[0], len(emitter) + emitter.held)
            await trio.sleep(1)
            h.advance(1.0)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(traffic)
            nursery.start_soon(task.run, h.pump)
            await trio.sleep(600)
            assert publisher.in_flight is None and emitter.emitted == 0
            client, rx = _collector(h, "B", "brief")  # takes one batch and goes away without a word
            await trio.sleep(3)
            assert len(client.received[rx]) == 1 and emitter.held == 100
            h.cut(next(w for w in h.wires if w.name == "brief@B"))
            await trio.sleep(600)
            nursery.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert peak[0] <= flow.buffer_records and len(emitter) + emitter.held <= flow.buffer_records
    assert publisher.retried == 1 and publisher.in_flight is None and emitter.held == 0 and emitter.emitted == 0
    assert len(emitter) == flow.buffer_records  # full, of the records that wait
    dropped = core.read.totals(h.now).flow_records_dropped
    assert dropped >= 1200 * 40 - flow.buffer_records  # every record that did not fit, counted


def test_an_edge_routers_records_reach_a_collector_on_its_interior_and_are_acknowledged() -> None:
    h = MeshHarness()
    h.router("I", instance=1, flow=FLOW)
    h.router("E", instance=2, mode="edge", flow=FLOW)
    h.uplink("E", "I")
    h.converge()
    client, rx = _collector(h, "I", "collector")
    emitter = Emitter("E", FLOW.buffer_records, boot="boot-e")
    for _ in range(5):
        emitter.emit("hop", 1_700_000_000.0, {})
    publisher = Publisher(emitter, "_flow/records", FLOW.batch_records)
    assert publisher.send(h.cores["E"], h.now)
    h.pump()
    assert _seqs(client, rx) == [[1, 2, 3]]
    rx.dispose(client.received[rx][0].delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert publisher.accepted == 1 and emitter.emitted == 3 and emitter.held == 0
