"""Management `connection` times: uptimeSeconds (since the peer's open) and lastDlvSeconds
(since a transfer last came in or went out on it; null before any), both differences of the
core's clock, read through the operation dialect as the anchors' tools read them."""

from __future__ import annotations

from typing import Any

import trio

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



async def test_connection_times_over_http_with_a_live_router() -> None:
    from router.net.client import connect

    from .support.management import managed_router

    async with managed_router() as router:
        port = router.amqp_port
        async with connect("127.0.0.1", port, container_id="times-idle"), \
                connect("127.0.0.1", port, container_id="times-busy") as busy:  # fmt: skip
            receiver = await busy.open_receiver("times.q", credit=10)
            sender = await busy.open_sender("times.q")
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(sender.send, Message.value("x"))  # done when accepted
                    receiver.accept(await receiver.receive())
            response = await router.http("GET", "/management/connection")
    assert response.status == 200
    rows = {row["container"]: row for row in response.json}
    assert rows["times-idle"]["lastDlvSeconds"] is None and rows["times-idle"]["uptimeSeconds"] >= 0
    assert rows["times-busy"]["lastDlvSeconds"] == 0  # a transfer came in and went out just now
