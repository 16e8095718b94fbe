"""The header ttl of a delivery the router held is reduced by the time it waited (messaging §3.2.1;
router.core.ttl), sans-IO on the harness's clock: every path where a waiting delivery is sent on
(a consumer's credit, a consumer with filters or a max-message-size, a multicast copy, routed
again to the address's fallback destinations), and what is never touched (a delivery sent on at
once, one without a header ttl). Across routers: tests/test_mesh_ttl.py."""

from __future__ import annotations

from typing import Any

from router.amqp.link import Link
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Accepted, Header, Properties, Released, Source
from router.amqp.sections import header_ttl_at
from router.config.models import AddressConfig, RouterConfig, RouterSection
from router.testing.routerharness import Client, RouterHarness

CONFIG = RouterConfig(router=RouterSection(id="R"), addresses=(
    AddressConfig(prefix="mc", distribution="multicast"), AddressConfig(prefix="fb", enable_fallback=True),
))  # fmt: skip


def _message(ttl: int | None, body: Any = "m", **sections: Any) -> Message:
    return Message.value(body, header=Header(ttl=ttl) if ttl is not None else None, **sections)


def _consumer(h: RouterHarness, address: str, credit: int = 0, **attach: Any) -> tuple[Client, Link]:
    client = h.connect(f"c{len(h.clients)}")
    rx = client.receiver(address, **attach)
    h.pump()
    if credit:
        rx.flow(credit)
        h.pump()
    return client, rx


def _producer(h: RouterHarness, address: str) -> tuple[Client, Link]:
    producer = h.connect("p")
    tx = producer.sender(address)
    h.pump()
    return producer, tx


def _payloads(client: Client, rx: Link) -> list[bytes]:
    return [r.payload for r in client.received[rx]]


def _ulong_ttl(ttl: int, body: str) -> bytes:
    """A message whose header ttl is a ulong (0x80, eight bytes: peers widen as they like, and
    the router reads any integer that fits), with message annotations and properties after it."""
    rest = encode_message(Message.value(body, message_annotations={"x-opt-app": 1}, properties=Properties(message_id="m-1")))
    fields = b"\x41\x40\x80" + ttl.to_bytes(8, "big")  # durable true, no priority, ttl
    return b"\x00\x53\x70\xc0" + bytes((len(fields) + 1, 3)) + fields + rest


def test_a_message_that_waited_for_credit_goes_on_with_the_ttl_it_has_left() -> None:
    """ttl 10 s, 4 s waiting for the consumer's credit: delivered with 6 s. Only the ttl's four
    bytes differ from what the producer sent (the uint keeps its width)."""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q")
    producer, tx = _producer(h, "q")
    sections = {"message_annotations": {"x-opt-app": 7}, "properties": Properties(message_id="m-1", to="q")}
    producer.send(tx, _message(10_000, **sections))
    h.pump()
    assert not consumer.received[rx]  # waiting
    h.advance(4.0)
    rx.flow(1)
    h.pump()
    (payload,) = _payloads(consumer, rx)
    assert payload == encode_message(_message(6_000, **sections))


def test_a_consumer_with_a_max_message_size_gets_the_reduced_ttl_too() -> None:
    """(Its deliveries are taken from the queue that passes over those it cannot take.)"""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q", max_message_size=100_000)
    producer, tx = _producer(h, "q")
    producer.send(tx, _message(10_000))
    h.pump()
    h.advance(2.5)
    rx.flow(1)
    h.pump()
    (received,) = consumer.received[rx]
    assert received.message.header == Header(ttl=7_500)


def test_a_message_sent_on_at_once_keeps_its_exact_bytes() -> None:
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q", credit=10)
    producer, tx = _producer(h, "q")
    sent = [encode_message(_message(10_000)), _ulong_ttl(10_000, "wide")]
    for payload in sent:
        producer.send(tx, payload)
    h.pump()
    assert _payloads(consumer, rx) == sent


def test_a_message_without_a_header_ttl_that_waited_keeps_its_exact_bytes() -> None:
    """No header, a header without a ttl, an absolute-expiry-time alone (wall-clock time: the
    next hop computes the same expiry)."""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q")
    producer, tx = _producer(h, "q")
    later_ms = int((h.core.wall_time(h.now) + 60) * 1000)
    sent = [
        encode_message(_message(None)),
        encode_message(Message.value("durable", header=Header(durable=True, priority=7))),
        encode_message(_message(None, properties=Properties(absolute_expiry_time=later_ms))),
    ]
    for payload in sent:
        producer.send(tx, payload)
    h.pump()
    h.advance(4.0)
    rx.flow(10)
    h.pump()
    assert _payloads(consumer, rx) == sent


def test_a_message_that_waits_past_its_expiry_is_still_expired() -> None:
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q")
    producer, tx = _producer(h, "q")
    stale = producer.send(tx, _message(1_000))
    h.pump()
    h.advance(1.5)
    assert isinstance(producer.outcomes[stale], Released)
    assert h.core.table.entries["Mq"].expired == 1
    rx.flow(10)
    h.pump()
    assert not consumer.received[rx]


def test_a_multicast_copy_that_waited_gets_the_reduced_ttl_the_one_sent_at_once_the_exact_bytes() -> None:
    h = RouterHarness(CONFIG)
    ready, ready_rx = _consumer(h, "mc", credit=10)
    late, late_rx = _consumer(h, "mc")
    producer, tx = _producer(h, "mc")
    sent = encode_message(_message(10_000))
    producer.send(tx, sent)
    h.pump()
    assert _payloads(ready, ready_rx) == [sent]
    h.advance(4.0)
    late_rx.flow(10)
    h.pump()
    assert _payloads(late, late_rx) == [encode_message(_message(6_000))]


def test_a_multicast_copy_that_waits_past_its_expiry_is_expired_not_sent() -> None:
    """A copy waiting for its consumer's credit is looked at as it leaves the queue: past its
    ttl it is expired there (released into the combined outcome), never sent with a ttl of 1.
    The copy sent at once is accepted: the producer hears accepted, settled."""
    h = RouterHarness(CONFIG)
    ready, ready_rx = _consumer(h, "mc", credit=10)
    late, late_rx = _consumer(h, "mc")
    producer, tx = _producer(h, "mc")
    sent = producer.send(tx, _message(1_000))
    h.pump()
    assert len(ready.received[ready_rx]) == 1
    assert sent not in producer.settled  # the late copy still waits
    h.advance(1.5)
    late_rx.flow(10)
    h.pump()
    assert not late.received[late_rx]
    assert h.core.table.entries["Mmc"].expired == 1
    assert isinstance(producer.outcomes[sent], Accepted) and sent in producer.settled
    fresh = producer.send(tx, _message(10_000))  # the late consumer takes what has not expired
    h.pump()
    assert len(late.received[late_rx]) == 1 and fresh in producer.settled


def test_a_presettled_multicast_copy_that_waits_past_its_expiry_is_dropped_and_counted() -> None:
    h = RouterHarness(CONFIG)
    late, late_rx = _consumer(h, "mc")
    producer, tx = _producer(h, "mc")
    producer.send(tx, _message(1_000), settled=True)
    h.pump()
    h.advance(1.5)
    late_rx.flow(10)
    h.pump()
    assert not late.received[late_rx]
    entry = h.core.table.entries["Mmc"]
    assert entry.expired == 1 and entry.dropped == 1


def test_a_small_ttl_keeps_its_one_byte_encoding() -> None:
    """A uint ttl below 256 is a smalluint (0x52): the reduced one is written in its place."""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q")
    producer, tx = _producer(h, "q")
    sent = encode_message(_message(200))
    producer.send(tx, sent)
    h.pump()
    h.advance(0.0505)  # 50.5 ms: rounded down
    rx.flow(1)
    h.pump()
    (payload,) = _payloads(consumer, rx)
    assert payload == encode_message(_message(149)) and len(payload) == len(sent)


def test_a_ttl_of_another_encoding_has_the_header_encoded_anew_and_the_rest_kept() -> None:
    """A ulong ttl: the header section is encoded again (its ttl a uint now, four bytes shorter);
    the message annotations and the bare message keep their exact bytes. The delivery waits,
    is routed again when one consumer leaves (it waits again, with its new size), then goes to
    the other: the bytes it held leave the producer's byte bound as they entered it."""
    h = RouterHarness(CONFIG)
    leaving, leaving_rx = _consumer(h, "q", max_message_size=100_000)
    staying, staying_rx = _consumer(h, "q", max_message_size=100_000)
    producer, tx = _producer(h, "q")
    sent = _ulong_ttl(10_000, "wide")
    producer.send(tx, sent)
    h.pump()
    h.advance(1.0)
    leaving_rx.detach()  # routed again (an address with limited consumers): it waits again
    h.pump()
    h.advance(1.0)
    staying_rx.flow(1)
    h.pump()
    (received,) = staying.received[staying_rx]
    message = received.message
    assert message.header == Header(durable=True, ttl=8_000)
    at = header_ttl_at(sent)
    assert at is not None
    header_end = at[1]
    assert received.payload[:3] == b"\x00\x53\x70"
    assert received.payload.endswith(sent[header_end:]) and len(received.payload) == len(sent) - 4
    assert all(state.buffered_bytes == 0 for state in h.core.connections.values())


def test_a_message_streamed_in_several_transfers_has_its_first_frame_rewritten() -> None:
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "q")
    producer, tx = _producer(h, "q")
    body = bytes(range(256)) * 400
    sent = encode_message(Message.data(body, header=Header(ttl=10_000)))
    for at in range(0, len(sent), 20_000):
        tx.send_transfer(b"s", sent[at : at + 20_000], more=at + 20_000 < len(sent))
        h.pump()
    h.advance(3.0)
    rx.flow(1)
    h.pump()
    (payload,) = _payloads(consumer, rx)
    assert payload == encode_message(Message.data(body, header=Header(ttl=7_000)))
    assert all(state.buffered_bytes == 0 for state in h.core.connections.values())


def test_a_message_routed_again_to_a_fallback_destination_gets_the_reduced_ttl() -> None:
    """It waited for the only consumer's credit; the consumer left and the address's fallback
    destination took it (router.core.fallback)."""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "fb")
    store, store_rx = _consumer(h, "_$fallback/fb", credit=10, source=Source(address="fb", capabilities=("qd.fallback",)))
    producer, tx = _producer(h, "fb")
    producer.send(tx, _message(10_000))
    h.pump()
    assert not store.received[store_rx]
    h.advance(4.0)
    rx.detach()
    h.pump()
    (received,) = store.received[store_rx]
    assert received.message.header == Header(ttl=6_000)

