"""Multi-hop anycast, sans-IO: deliveries cross routers with router annotations (to, ingress,
trace), consumers get them without; closest and balanced over path costs; every outcome and
settlement travels back hop by hop (accepted, rejected, released, modified; unsettled and
presettled); streaming messages cross routers frame by frame."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from router.amqp.events import TransferReceived
from router.amqp.message import Message, decode_message, encode_message
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Modified, Properties, Rejected
from router.amqp.peek import peek
from router.amqp.performatives import Error
from router.config.models import AddressConfig, Listener
from router.core import annotate, annotparse
from router.core.links import InLink
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client


def _line(*ids: str, **router: Any) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1, **router)
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    h.converge()
    return h


def _spy(h: MeshHarness, rid: str) -> list[bytes]:
    """Payloads of first frames arriving at `rid` from other routers (on data links)."""
    seen: list[bytes] = []

    def observe(events: list[object]) -> None:
        for event in events:
            if isinstance(event, TransferReceived) and event.first:
                ctx = event.link.context
                if isinstance(ctx, InLink) and ctx.peer is not None:
                    seen.append(bytes(event.payload))

    h.tap(rid, observe)
    return seen


def _pair(h: MeshHarness, at_p: str, at_c: str, address: str = "orders", credit: int = 100) -> tuple[Client, Client, Any, Any]:
    producer, consumer = h.client(at_p, "p"), h.client(at_c, "c")
    rx = consumer.receiver(address)
    h.advance(0.5)
    rx.flow(credit)
    tx = producer.sender(address)
    h.pump()
    return producer, consumer, tx, rx


def test_three_routers_in_a_line_deliver_and_annotate_each_hop() -> None:
    h = _line("A", "B", "C")
    at_b, at_c = _spy(h, "B"), _spy(h, "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    message = Message.value("m", message_annotations={"x-opt-app": 7, "x-opt-qd.trace": ["forged"]})
    delivery = producer.send(tx, message)
    h.pump()
    (received,) = consumer.received[rx]
    # the consumer sees the client's own annotations, no router ones (and not the forged trace)
    assert received.message.message_annotations == {"x-opt-app": 7}
    assert isinstance(producer.outcomes[delivery], Accepted) and delivery in producer.settled
    hop1 = decode_message(at_b[0]).message_annotations
    hop2 = decode_message(at_c[0]).message_annotations
    assert hop1 == {"x-opt-app": 7, "x-opt-qd.ingress": "A", "x-opt-qd.trace": ["A"], "x-opt-qd.to": "orders"}
    assert hop2 == {"x-opt-app": 7, "x-opt-qd.ingress": "A", "x-opt-qd.trace": ["A", "B"], "x-opt-qd.to": "orders"}


def test_the_bare_message_keeps_its_exact_bytes_across_routers() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    sent = encode_message(Message.value({"k": [1, 2, 3]}, properties=Properties(message_id="m-1", subject="s"),
                                        application_properties={"a": 1}))  # fmt: skip
    producer.send(tx, sent)
    h.pump()
    assert consumer.received[rx][0].payload == sent


def test_an_anonymous_producer_is_routed_by_properties_to_across_routers() -> None:
    h = _line("A", "B", "C")
    at_c = _spy(h, "C")
    producer, consumer, _, rx = _pair(h, "A", "C")
    anonymous = producer.sender(None)
    h.pump()
    producer.send(anonymous, Message.value("x", properties=Properties(to="orders")))
    h.pump()
    assert consumer.bodies(rx) == ["x"]
    # properties.to is enough downstream: no x-opt-qd.to is added
    assert "x-opt-qd.to" not in (decode_message(at_c[0]).message_annotations or {})


def test_each_delivery_gets_its_own_annotations_when_a_link_carries_many_kinds() -> None:
    # Routers read a section seen before on a link from what they remember of it: deliveries
    # with different annotations, addresses and producers (more than a link remembers) must
    # each still be routed and annotated by their own.
    h = _line("A", "B", "C")
    at_c = _spy(h, "C")
    producer, consumer = h.client("A", "p"), h.client("C", "c")
    receivers = {address: consumer.receiver(address) for address in ("q1", "q2")}
    h.advance(0.5)
    for rx in receivers.values():
        rx.flow(1000)
    anonymous, targeted = producer.sender(None), producer.sender("q2")
    h.pump()
    expected: dict[str, list[Any]] = {"q1": [], "q2": []}
    for i in range(annotparse.SEEN_MAX + 50):
        own = {"x-opt-seq": i % (annotparse.SEEN_MAX + 20)} if i % 3 else None
        if i % 2:
            producer.send(targeted, Message.value(i, message_annotations=own))
            expected["q2"].append((i, own))
        else:
            address = "q1" if i % 4 else "q2"
            producer.send(anonymous, Message.value(i, message_annotations=own, properties=Properties(to=address)))
            expected[address].append((i, own))
    h.pump()
    for address, rx in receivers.items():
        got = [(r.message.body_value, r.message.message_annotations) for r in consumer.received[rx]]
        assert got == expected[address]
    for frame in at_c:
        message = decode_message(frame)
        routed = dict(message.message_annotations or {})
        assert routed.pop("x-opt-qd.ingress") == "A" and routed.pop("x-opt-qd.trace") == ["A", "B"]
        assert routed.pop("x-opt-qd.to", None) == ("q2" if message.properties is None else None)
        i = message.body_value
        assert routed == ({"x-opt-seq": i % (annotparse.SEEN_MAX + 20)} if i % 3 else {})


OUTCOMES = [
    ACCEPTED,
    Rejected(error=Error(condition="app:bad", description="no", info={"sku": "x1"})),
    RELEASED,
    Modified(delivery_failed=True, undeliverable_here=True, message_annotations={"x-retry": 3}),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
def test_every_outcome_travels_back_over_three_routers(outcome: Any) -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    consumer.auto_accept = False
    delivery = producer.send(tx, Message.value("m"))
    h.pump()
    (received,) = consumer.received[rx]
    rx.dispose(received.delivery_id, state=outcome, settled=True)
    h.pump()
    assert producer.outcomes[delivery] == outcome
    assert delivery in producer.settled
    for core in h.cores.values():  # nothing left in flight anywhere
        for state in core.connections.values():
            assert all(out.outstanding == 0 for out in state.out_links)
            assert all(inl.inflight == inl.held == 0 for inl in state.in_links)


def test_deliveries_sent_to_another_router_hold_the_producers_window_until_settled() -> None:
    # Across the mesh the window stays end to end (unsettled deliveries): that is what holds a
    # fast producer back when a consumer on another router is slow. The last router hands
    # them to its consumer, which frees their slots on its data link at once.
    h = _line("A", "B")
    producer, consumer = h.client("A", "p", listener=Listener(name="amqp", port=5672, link_capacity=10)), h.client("B", "c")
    consumer.auto_accept = False
    rx = consumer.receiver("orders")
    h.advance(0.5)
    rx.flow(100)
    tx = producer.sender("orders")
    h.pump()
    assert tx.credit == 10
    for i in range(10):
        producer.send(tx, Message.value(i))
    h.pump()
    assert consumer.bodies(rx) == list(range(10))
    assert tx.credit == 0  # all ten unsettled beyond A: no room in the window
    (inl,) = [inl for state in h.cores["A"].connections.values() for inl in state.in_links if inl.peer is None]
    assert (inl.inflight, inl.held) == (10, 10)
    # (default priority: the default band's data link, named .../data)
    (data,) = [inl for state in h.cores["B"].connections.values() for inl in state.in_links
               if inl.peer == "A" and inl.link.name.endswith("/data")]  # fmt: skip
    assert (data.inflight, data.held) == (10, 0)
    for received in consumer.received[rx]:
        rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert tx.credit == 10 and (inl.inflight, inl.held) == (0, 0)


def test_presettled_deliveries_cross_routers_without_dispositions() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    for i in range(10):
        producer.send(tx, Message.value(i), settled=True)
    h.pump()
    assert consumer.bodies(rx) == list(range(10))
    assert all(r.settled for r in consumer.received[rx])
    assert producer.outcomes == {}


def test_producer_settling_first_settles_downstream_hop_by_hop() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    consumer.auto_accept = False
    delivery = producer.send(tx, Message.value("m"))
    h.pump()
    tx.dispose(delivery, settled=True)  # the producer no longer cares
    h.pump()
    for core in h.cores.values():
        for state in core.connections.values():
            assert all(out.outstanding == 0 for out in state.out_links)


def test_a_streamed_message_crosses_routers_frame_by_frame() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    body = bytes(range(256)) * 1200  # ~300 KiB: several frames on every hop
    delivery = producer.send(tx, Message.data(body))
    h.pump()
    assert consumer.received[rx][0].message.body_bytes == body
    assert isinstance(producer.outcomes[delivery], Accepted)


def test_closest_prefers_the_lower_cost_router_and_round_robins_equal_costs() -> None:
    h = MeshHarness()
    for i, rid in enumerate("ABC"):
        h.router(rid, instance=i + 1, addresses=(AddressConfig(prefix="q", distribution="closest"),))
    h.link("A", "B", cost=1)
    h.link("A", "C", cost=5)
    h.converge()
    producer = h.client("A", "p")
    receivers = {rid: h.client(rid, f"c{rid}") for rid in "BC"}
    links = {rid: c.receiver("q") for rid, c in receivers.items()}
    h.advance(0.5)
    for link in links.values():
        link.flow(100)
    tx = producer.sender("q")
    h.pump()
    for i in range(6):
        producer.send(tx, Message.value(i))
    h.pump()
    assert len(receivers["B"].bodies(links["B"])) == 6 and receivers["C"].bodies(links["C"]) == []
    # equal costs: C's link becomes as cheap as B's
    h.cut(h.wire_between("A", "C"))
    h.link("A", "C", cost=1)
    h.converge()
    h.advance(0.5)
    for i in range(6):
        producer.send(tx, Message.value(i))
    h.pump()
    assert len(receivers["B"].bodies(links["B"])) == 9 and len(receivers["C"].bodies(links["C"])) == 3


def test_closest_takes_a_local_consumer_over_remote_ones() -> None:
    h = MeshHarness()
    for i, rid in enumerate("AB"):
        h.router(rid, instance=i + 1, addresses=(AddressConfig(prefix="q", distribution="closest"),))
    h.link("A", "B")
    h.converge()
    local, far = h.client("A", "local"), h.client("B", "far")
    lrx, frx = local.receiver("q"), far.receiver("q")
    h.advance(0.5)
    lrx.flow(100)
    frx.flow(100)
    producer = h.client("A", "p")
    tx = producer.sender("q")
    h.pump()
    for i in range(5):
        producer.send(tx, Message.value(i))
    h.pump()
    assert local.bodies(lrx) == [0, 1, 2, 3, 4] and far.bodies(frx) == []


def test_balanced_spreads_by_outstanding_work_plus_path_cost() -> None:
    h = _line("A", "B")
    local, far = h.client("A", "local"), h.client("B", "far")
    local.auto_accept = far.auto_accept = False  # nothing settles: outstanding work grows
    lrx, frx = local.receiver("work"), far.receiver("work")
    h.advance(0.5)
    lrx.flow(100)
    frx.flow(100)
    producer = h.client("A", "p")
    tx = producer.sender("work")
    h.pump()
    for i in range(21):
        producer.send(tx, Message.value(i))
    h.pump()
    # local: value = outstanding; remote: outstanding + cost 1 -> local takes one more
    assert (len(local.bodies(lrx)), len(far.bodies(frx))) == (11, 10)
    entry = h.cores["A"].table.find("work")
    assert entry is not None and sum(c.n for c in entry.remote_out.values()) == 10
    for client, link in ((local, lrx), (far, frx)):
        for received in client.received[link]:
            link.dispose(received.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert entry.remote_out == {}  # settled: no outstanding work towards B any more


def test_a_router_that_loses_its_consumers_releases_what_arrives_for_them() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C")
    consumer.auto_accept = False
    delivery = producer.send(tx, Message.value("m"))
    h.pump()
    rx.detach()  # the consumer leaves with the delivery unsettled: in doubt
    h.pump()
    assert isinstance(producer.outcomes[delivery], Modified)
    assert producer.outcomes[delivery].delivery_failed


def test_unsettled_traffic_is_all_accounted_under_load() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _pair(h, "A", "C", credit=1000)
    ids = [producer.send(tx, Message.value(i)) for i in range(200)]
    h.pump()
    assert Counter(type(producer.outcomes[i]).__name__ for i in ids) == {"Accepted": 200}
    assert consumer.bodies(rx) == list(range(200))


def test_router_annotations_are_spliced_without_touching_other_sections() -> None:
    message = Message.value("body", properties=Properties(to="orders"), message_annotations={"x-opt-a": 1})
    payload = encode_message(message)
    view = peek(payload)
    meta = annotate.for_client_delivery(view, "orders", True)
    routed = annotate.for_router(payload, meta, "R1")
    assert routed.endswith(payload[view.annotations_span[1]:])  # type: ignore[index]
    parsed = annotparse.parse(routed, peek(routed), "R1")
    assert (parsed.to, parsed.ingress, parsed.trace) == ("orders", "R1", ("R1",))
    clean = annotate.strip(routed, parsed)
    assert decode_message(bytes(clean)) == message


def test_a_first_frame_too_short_to_route_by_is_not_sent_to_another_router() -> None:
    h = _line("A", "B")
    producer, consumer, tx, rx = _pair(h, "A", "B")
    payload = encode_message(Message.value("x" * 100, properties=Properties(message_id="m", subject="s" * 50)))
    delivery = tx.send_transfer(b"t", payload[:7], more=True)  # cut inside the properties
    tx.send_transfer(b"t", payload[7:], more=False)
    h.pump()  # no exception out of the core
    assert type(producer.outcomes[delivery]).__name__ == "Released"
    assert consumer.bodies(rx) == []
    ok = producer.send(tx, Message.value("whole"))  # the link still works
    h.pump()
    assert consumer.bodies(rx) == ["whole"] and isinstance(producer.outcomes[ok], Accepted)
