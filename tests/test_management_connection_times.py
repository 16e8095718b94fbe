"""Management `connection` times: uptimeSeconds (since the peer's open) and lastDlvSeconds
(since a transfer last came in or went out on it; null before any), both differences of the
core's clock, read through the operation dialect as the anchors' tools read them."""

from __future__ import annotations

from typing import Any

from router.amqp.message import Message
from router.config.models import RouterConfig, RouterSection

from .support.mgmt import MgmtHarness

PREFIX = "org.apache.qpid.dispatch."


def _connections(m: MgmtHarness) -> dict[str, dict[str, Any]]:
    names = ["container", "uptimeSeconds", "lastDlvSeconds"]
    status, _, body = m.op("QUERY", {"attributeNames": names}, entityType=PREFIX + "connection",
                           type="org.amqp.management", name="self")  # fmt: skip
    assert status == 200
    return {row[0]: dict(zip(names, row)) for row in body["results"]}


def test_uptime_and_last_delivery_seconds() -> None:
    m = MgmtHarness(RouterConfig(router=RouterSection(id="R1")))
    producer, consumer, idle = m.h.connect("producer"), m.h.connect("consumer"), m.h.connect("idle")
    rx = consumer.receiver("q")
    tx = producer.sender("q")
    m.h.pump()
    rx.flow(5)
    m.h.pump()
    m.h.advance(3.0)
    producer.send(tx, Message.value("one"))
    m.h.pump()
    assert consumer.bodies(rx) == ["one"]
    m.h.advance(7.0)
    rows = _connections(m)
    assert rows["producer"]["uptimeSeconds"] == rows["consumer"]["uptimeSeconds"] == 10
    assert rows["producer"]["lastDlvSeconds"] == rows["consumer"]["lastDlvSeconds"] == 7
    assert rows["idle"]["lastDlvSeconds"] is None and rows["idle"]["uptimeSeconds"] == 10
    assert rows["mgmt"]["lastDlvSeconds"] == 0  # this very request
    producer.send(tx, Message.value("two"))
    m.h.pump()
    assert _connections(m)["consumer"]["lastDlvSeconds"] == 0
