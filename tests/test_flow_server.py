"""Flow records in a running RouterServer: the flush task writes gzip JSON lines files once a
second (and the last records when the router stops), management's `router` entity shows the
records emitted and dropped, and a full buffer drops and counts instead of growing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import trio

from router.amqp.message import Message
from router.config.models import Flow, Listener, RouterConfig, RouterSection
from router.flow.recorder import FlowRecorder
from router.net.client import connect
from router.net.server import RouterServer

from .support.mgmt import MgmtHarness
from .support.router_process import core_ready

pytestmark = pytest.mark.skipif(not core_ready(), reason="routing core not importable")


def _files(directory: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(directory.glob("flow-*.json.gz")):
        with gzip.open(path, "rt") as f:
            records += [json.loads(line) for line in f]
    return records


async def test_the_server_writes_flow_files_and_the_last_records_at_stop(tmp_path: Path) -> None:
    config = RouterConfig(
        router=RouterSection(id="files"), listeners=(Listener(host="127.0.0.1", port=0),),
        flow=Flow(enabled=True, interval_s=1, file_dir=str(tmp_path), mesh_address=None),
    )  # fmt: skip
    server = RouterServer(config)
    async with trio.open_nursery() as nursery:
        port = (await nursery.start(server.run))[0][2]
        async with connect("127.0.0.1", port) as client:
            receiver = await client.open_receiver("orders", credit=10)
            sender = await client.open_sender("orders")
            for i in range(7):
                tracker = await sender.start_send(Message.value(i))
                receiver.accept(await receiver.receive())
                await tracker.wait()
            with trio.fail_after(10):
                while not any(r["type"] == "address_interval" for r in _files(tmp_path)):
                    await trio.sleep(0.1)
        server.shutdown()
    records = _files(tmp_path)
    (address,) = [r for r in records if r["type"] == "address_interval"]
    assert address["address"] == "orders" and address["deliveries"] == 7 and address["accepted"] == 7
    assert sum(address["residence_hist"]) == 7 and sum(address["settle_hist"]) == 7
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))  # none lost, none doubled
    assert {r["type"] for r in records} >= {"router", "link", "link_interval", "address_interval"}
    closed = [r for r in records if r["type"] == "link" and r["state"] == "closed"]
    assert len(closed) == 2  # both client links, seen gone before the stop
    assert server.core.read.totals(0.0).flow_records_emitted == len(records)  # type: ignore[attr-defined]


def test_management_shows_records_emitted_and_dropped() -> None:
    m = MgmtHarness(RouterConfig(router=RouterSection(id="mgmt"), flow=Flow(enabled=True, buffer_records=10)))
    recorder = FlowRecorder(m.h.core, m.h.config.flow, version="t", compiled=False)
    recorder.poll(m.h.now)
    snapshots = len(recorder.emitter)  # the router's and the management client's links'
    assert snapshots == 3
    for _ in range(25):
        recorder.emitter.emit("hop", 1.0, {})
    recorder.take(4)
    status, _, entity = m.op("READ", type="router", name="mgmt")
    assert status == 200
    assert entity["flowRecordsEmitted"] == 4 and entity["flowRecordsDropped"] == 25 - (10 - snapshots)
    assert len(recorder.emitter) == 6  # the bound held
