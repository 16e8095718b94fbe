"""Per-listener `strip_annotations` (in, out, both, no; default both), as the anchors' listener
attribute: whether the router's x-opt-qd.* message annotations are removed from what a
listener's clients send (in) and from what they receive (out). A router-aware client on a
listener that keeps them passes its ingress and trace on (this router is added to the trace);
a consumer that keeps them sees them as the next router would. The client's other annotations
always travel untouched, and a client's x-opt-qd.to never redirects a message.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from proton import Message as ProtonMessage
from proton import symbol
from proton.utils import BlockingConnection

from router.amqp.message import Message
from router.config.models import HttpListener, Listener, RouterConfig, RouterSection
from router.testing.routerharness import RouterHarness

from .support.interop import run_in_thread
from .support.management import managed_router

ROUTER = "R"
TIMEOUT_S = 10.0
FROM_CLIENT = {"x-opt-qd.trace": ["0/other"], "x-opt-qd.ingress": "0/other", "x-opt-qd.to": "elsewhere", "x-opt-app": 7}


def _relay(producer_strip: str, consumer_strip: str, annotations: dict[str, Any] | None) -> dict[str, Any] | None:
    """One message from a client on a listener with `producer_strip` to one on `consumer_strip`;
    the annotations the consumer got."""
    h = RouterHarness(RouterConfig(router=RouterSection(id=ROUTER)))
    consumer = h.connect("consumer", listener=Listener(name="c", strip_annotations=consumer_strip))  # type: ignore[arg-type]
    producer = h.connect("producer", listener=Listener(name="p", strip_annotations=producer_strip))  # type: ignore[arg-type]
    rx = consumer.receiver("q")
    tx = producer.sender("q")
    h.pump()
    rx.flow(10)
    h.pump()
    producer.send(tx, Message.value("m", message_annotations=annotations))  # type: ignore[arg-type]
    h.pump()
    (received,) = consumer.received[rx]
    assert received.message.body_value == "m"
    got = received.message.message_annotations
    return dict(got) if got else None


@pytest.mark.parametrize("producer", ["in", "both"])
@pytest.mark.parametrize("consumer", ["out", "both"])
def test_stripped_both_ways(producer: str, consumer: str) -> None:
    assert _relay(producer, consumer, FROM_CLIENT) == {"x-opt-app": 7}
    assert _relay(producer, consumer, None) is None


@pytest.mark.parametrize("producer", ["out", "no"])
def test_kept_in_but_stripped_out(producer: str) -> None:
    assert _relay(producer, "both", FROM_CLIENT) == {"x-opt-app": 7}


@pytest.mark.parametrize("producer", ["in", "both"])
@pytest.mark.parametrize("consumer", ["in", "no"])
def test_a_consumer_that_keeps_them_sees_this_router(producer: str, consumer: str) -> None:
    expected = {"x-opt-app": 7, "x-opt-qd.ingress": ROUTER, "x-opt-qd.trace": [ROUTER]}
    assert _relay(producer, consumer, FROM_CLIENT) == expected
    assert _relay(producer, consumer, None) == {"x-opt-qd.ingress": ROUTER, "x-opt-qd.trace": [ROUTER]}


@pytest.mark.parametrize("producer", ["out", "no"])
def test_a_router_aware_client_passes_its_annotations_on(producer: str) -> None:
    got = _relay(producer, "no", FROM_CLIENT)
    assert got is not None
    assert got["x-opt-qd.ingress"] == "0/other" and got["x-opt-qd.trace"] == ["0/other", ROUTER]
    assert got["x-opt-qd.to"] == "q" and got["x-opt-app"] == 7  # routed by its link, not "elsewhere"


def test_malformed_router_annotations_from_a_keeping_listener_are_stripped() -> None:
    bad = {"x-opt-qd.trace": "not a list", "x-opt-app": 7}
    assert _relay("no", "both", bad) == {"x-opt-app": 7}
    assert _relay("no", "no", bad) == {"x-opt-app": 7, "x-opt-qd.ingress": ROUTER, "x-opt-qd.trace": [ROUTER]}


# --- over sockets, with python-qpid-proton ---------------------------------------------------------


ANNOTATIONS = {symbol("x-opt-qd.trace"): ["0/other"], symbol("x-opt-qd.ingress"): "0/other", symbol("x-opt-app"): 7}
SENDS = (("aware", "strip.q.plain"), ("amqp", "strip.q.aware"), ("aware", "strip.q.aware"))


def consume(port: int, address: str, count: int) -> list[dict[str, Any]]:
    """`count` messages from `address` on one connection (its own thread: a blocking connection
    only moves its frames while it is waited on)."""
    conn = BlockingConnection(f"127.0.0.1:{port}", timeout=TIMEOUT_S)
    try:
        receiver = conn.create_receiver(address, credit=5)
        got = []
        for _ in range(count):
            message = receiver.receive(timeout=TIMEOUT_S)
            receiver.accept()
            got.append({str(k): v for k, v in (message.annotations or {}).items()})
        conn.create_sender("strip.q.sync")  # a round trip: the accepts are out
        return got
    finally:
        conn.close()


def produce(ports: dict[str, int]) -> None:
    """Sends in order, each waiting for its outcome (credit comes once the consumer is there)."""
    for listener, address in SENDS:
        conn = BlockingConnection(f"127.0.0.1:{ports[listener]}", timeout=TIMEOUT_S)
        try:
            conn.create_sender(address).send(ProtonMessage(body="m", annotations=ANNOTATIONS), timeout=TIMEOUT_S)
        finally:
            conn.close()


@pytest.mark.interop
async def test_strip_annotations_with_proton() -> None:
    config = RouterConfig(
        router=RouterSection(id="strip-router"),
        listeners=(Listener(name="amqp", port=0), Listener(name="aware", port=0, strip_annotations="no")),
        http=(HttpListener(name="http", port=0),),
    )
    async with managed_router(config) as router:
        ports = {name: port for name, _, port in router.server.addresses}
        received: dict[str, Any] = {}

        async def consumer(listener: str, address: str, count: int) -> None:
            received[address] = await run_in_thread(consume, ports[listener], address, count, timeout_s=3 * TIMEOUT_S)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consumer, "amqp", "strip.q.plain", 1)
            nursery.start_soon(consumer, "aware", "strip.q.aware", 2)
            await run_in_thread(produce, ports, timeout_s=3 * TIMEOUT_S)
        listener = await router.http("GET", "/management/listener/listener%2Faware")
    assert received["strip.q.plain"] == [{"x-opt-app": 7}]  # kept in, stripped out
    from_plain, aware = received["strip.q.aware"]
    assert from_plain == {"x-opt-app": 7, "x-opt-qd.ingress": "strip-router", "x-opt-qd.trace": ["strip-router"]}
    assert aware["x-opt-qd.ingress"] == "0/other" and aware["x-opt-qd.trace"] == ["0/other", "strip-router"]
    assert listener.status == 200 and listener.json["stripAnnotations"] == "no"


# --- across routers ------------------------------------------------------------------------------


def test_a_router_aware_client_across_three_routers() -> None:
    """Kept on ingress at A and on egress at C: the consumer sees the client's ingress and its
    trace with every router the message passed (A, B, C), and nothing the client forged routes."""
    from router.testing.meshharness import MeshHarness

    h = MeshHarness()
    for rid in ("A", "B", "C"):
        h.router(rid)
    h.link("A", "B")
    h.link("B", "C")
    h.converge()
    keep = Listener(name="aware", port=5675, strip_annotations="no")
    consumer = h.client("C", "c", listener=keep)
    rx = consumer.receiver("orders")
    h.pump()
    rx.flow(10)
    h.converge()
    producer = h.client("A", "p", listener=keep)
    tx = producer.sender("orders")
    h.pump()
    producer.send(tx, Message.value("m", message_annotations=FROM_CLIENT))  # type: ignore[arg-type]
    h.pump()
    (received,) = consumer.received[rx]
    got = dict(received.message.message_annotations or {})
    assert got == {"x-opt-app": 7, "x-opt-qd.ingress": "0/other", "x-opt-qd.trace": ["0/other", "A", "B", "C"],
                   "x-opt-qd.to": "orders"}  # fmt: skip
