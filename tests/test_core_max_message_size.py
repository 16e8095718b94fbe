"""Consumers' max-message-size (transport §2.7.3), sans-IO: the router never sends a consumer a
message larger than the max-message-size of its attach (docs/addressing.md, "Consumers'
max-message-size"; router.core.sizelimits).

The consumers here are the harness's clients, whose engine enforces its own max-message-size as
amqp10's does: a larger delivery detaches its link with amqp:link:message-size-exceeded. So a
consumer link still attached at the end of a test is one the router never overran.

- anycast: a message goes only to consumers it fits (closest and balanced), a streaming one
  preferably to a consumer without a limit; too large for every consumer: rejected at once with
  amqp:link:message-size-exceeded (presettled: dropped), also after waiting for credit when the
  last consumer that could take it leaves;
- a message streaming in that grows past the limit of the consumer it goes to: aborted there,
  the producer told modified (delivery-failed) when another consumer could take it, rejected
  when none could; the consumer's link carries the next message;
- multicast: no copy for a consumer the message does not fit, a copy that grows past its
  consumer's limit is aborted and counts as released; the producer hears the other copies'.
"""

from __future__ import annotations

from typing import Any

import pytest

from router.amqp import errors as E
from router.amqp.endpoints import ACTIVE
from router.amqp.events import TransferReceived
from router.amqp.link import Link
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Accepted, Modified, Rejected, Released
from router.config.models import AddressConfig, RouterConfig, RouterSection
from router.testing.routerharness import Client, RouterHarness

CONFIG = RouterConfig(router=RouterSection(id="R"), addresses=(
    AddressConfig(prefix="cl", distribution="closest"), AddressConfig(prefix="mc", distribution="multicast"),
))  # fmt: skip  (any other address: balanced, the default)


def _message(size: int) -> bytes:
    """An encoded message of exactly `size` bytes (a data body)."""
    payload = encode_message(Message.data(b"x" * size))
    payload = encode_message(Message.data(b"x" * (2 * size - len(payload))))
    assert len(payload) == size
    return payload


def _consumer(h: RouterHarness, name: str, address: str, limit: int | None, credit: int = 100) -> tuple[Client, Link]:
    client = h.connect(name)
    rx = client.receiver(address, max_message_size=limit)
    h.pump()
    if credit:
        rx.flow(credit)
        h.pump()
    return client, rx


def _sizes(client: Client, rx: Link) -> list[int]:
    return [len(r.payload) for r in client.received[rx]]


def _aborted(client: Client) -> int:
    return sum(1 for e in client.events if isinstance(e, TransferReceived) and e.aborted)


def _size_exceeded(state: Any, address: str, size: str) -> None:
    assert isinstance(state, Rejected), state
    assert state.error is not None and state.error.condition == E.MESSAGE_SIZE_EXCEEDED
    assert state.error.description == (
        f"message of {size} bytes is larger than the max-message-size of every consumer of {address}")


def _stream(h: RouterHarness, tx: Link, payload: bytes, frame: int) -> int:
    """Send `payload` as one delivery in transfers of `frame` bytes, pumping after each; its
    delivery-id."""
    delivery = -1
    for at in range(0, len(payload), frame):
        delivery = tx.send_transfer(b"s", payload[at:at + frame], more=at + frame < len(payload))
        h.pump()
    return delivery


@pytest.mark.parametrize("address", ["cl", "q"], ids=["closest", "balanced"])
def test_a_large_message_skips_the_consumer_it_does_not_fit(address: str) -> None:
    h = RouterHarness(CONFIG)
    small_c, small_rx = _consumer(h, "small", address, 1000)
    big_c, big_rx = _consumer(h, "big", address, None)
    producer = h.connect("p")
    tx = producer.sender(address)
    h.pump()
    sent = [producer.send(tx, _message(size)) for size in (5000, 5000, 5000, 5000, 100, 100, 100, 100)]
    h.pump()
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent)
    assert _sizes(big_c, big_rx).count(5000) == 4
    assert _sizes(small_c, small_rx) and max(_sizes(small_c, small_rx)) == 100  # it gets the small ones
    assert small_rx.state.local is ACTIVE and small_rx.state.remote is ACTIVE  # never overran


def test_exactly_the_limit_is_delivered() -> None:
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "c", "q", 1000)
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    d = producer.send(tx, _message(1000))
    h.pump()
    assert isinstance(producer.outcomes[d], Accepted) and _sizes(consumer, rx) == [1000]


def test_too_large_for_every_consumer_is_rejected_at_once() -> None:
    """No consumer with credit is needed to know: it is rejected as it arrives, never parked
    (released would have the producer send it again for ever)."""
    h = RouterHarness(CONFIG)
    one, rx1 = _consumer(h, "c1", "q", 1000)
    two, rx2 = _consumer(h, "c2", "q", 2000, credit=0)
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    big = producer.send(tx, _message(3000))
    small = producer.send(tx, _message(500))
    dropped = producer.send(tx, _message(3000), settled=True)
    h.pump()
    _size_exceeded(producer.outcomes[big], "q", "3000")
    assert big in producer.settled
    assert isinstance(producer.outcomes[small], Accepted) and _sizes(one, rx1) == [500]
    assert dropped not in producer.outcomes
    entry = h.core.table.entries["Mq"]
    assert entry.rejected == 1 and entry.dropped == 1 and not entry.pending
    rx2.flow(10)
    h.pump()
    assert not two.received[rx2]
    assert rx1.state.local is ACTIVE and rx2.state.local is ACTIVE


def test_a_message_waiting_for_the_only_consumer_it_fits_is_rejected_when_that_consumer_leaves() -> None:
    h = RouterHarness(CONFIG)
    limited, lrx = _consumer(h, "limited", "q", 1000)
    free, frx = _consumer(h, "free", "q", None, credit=0)
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    big = producer.send(tx, _message(3000))
    h.pump()
    assert big not in producer.outcomes  # waits for the consumer it fits
    lrx.flow(5, drain=True)  # the limited consumer takes nothing of it: its drain ends at once
    h.pump()
    assert not limited.received[lrx] and lrx.credit == 0
    frx.detach()
    h.pump()
    _size_exceeded(producer.outcomes[big], "q", "3000")
    assert not h.core.table.entries["Mq"].pending


@pytest.mark.parametrize("other", [None, "busy"], ids=["only-consumer", "another-consumer"])
def test_a_stream_growing_past_the_limit_is_aborted_and_the_link_carries_on(other: str | None) -> None:
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "c", "q", 10_000)
    if other is not None:
        _consumer(h, "other", "q", None, credit=0)  # could take it, has no credit now
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    delivery = _stream(h, tx, _message(30_000), 4000)
    frames = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert frames[-1].aborted and sum(len(e.payload) for e in frames if not e.aborted) <= 10_000
    if other is None:  # nobody here could take it: the truth
        _size_exceeded(producer.outcomes[delivery], "q", "at least 12000")
    else:  # as when a consumer is lost mid-stream: the producer may send it again
        state = producer.outcomes[delivery]
        assert isinstance(state, Modified) and state.delivery_failed
    assert delivery in producer.settled
    after = producer.send(tx, _message(9000))
    h.pump()
    assert isinstance(producer.outcomes[after], Accepted) and _sizes(consumer, rx) == [9000]
    assert rx.state.local is ACTIVE
    assert h.core.table.entries["Mq"].consumers[0].outstanding == 0


def test_a_waiting_stream_that_outgrows_every_consumer_is_rejected_as_it_does() -> None:
    """Its first frames fit the consumer, which has no credit: it waits, and is rejected at the
    frame that makes it too large for every consumer (not when credit comes)."""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "c", "q", 10_000, credit=0)
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    payload = _message(30_000)
    delivery = tx.send_transfer(b"s", payload[:8000], more=True)
    h.pump()
    assert delivery not in producer.outcomes and h.core.table.entries["Mq"].pending
    tx.send_transfer(b"s", payload[8000:12_000], more=True)
    h.pump()
    _size_exceeded(producer.outcomes[delivery], "q", "at least 12000")
    tx.send_transfer(b"s", payload[12_000:])  # the rest is discarded
    h.pump()
    assert all(state.buffered_bytes == 0 for state in h.core.connections.values())  # nothing held of it
    after = producer.send(tx, _message(500))
    h.pump()
    rx.flow(10)
    h.pump()
    assert isinstance(producer.outcomes[after], Accepted) and _sizes(consumer, rx) == [500]


def test_a_stream_prefers_a_consumer_without_a_limit() -> None:
    h = RouterHarness(CONFIG)
    limited, lrx = _consumer(h, "limited", "q", 100_000)
    free, frx = _consumer(h, "free", "q", None)
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    streamed = [_stream(h, tx, _message(20_000), 8000) for _ in range(3)]
    assert all(isinstance(producer.outcomes[d], Accepted) for d in streamed)
    assert _sizes(free, frx) == [20_000] * 3 and not limited.received[lrx]
    whole = [producer.send(tx, _message(20_000)) for _ in range(4)]  # complete: both take them
    h.pump()
    assert all(isinstance(producer.outcomes[d], Accepted) for d in whole)
    assert len(limited.received[lrx]) == 2


def test_multicast_copies_only_to_consumers_the_message_fits() -> None:
    h = RouterHarness(CONFIG)
    consumers = [_consumer(h, f"c{limit}", "mc", limit) for limit in (1000, None, 100_000)]
    producer = h.connect("p")
    tx = producer.sender("mc")
    h.pump()
    big = producer.send(tx, _message(5000))
    small = producer.send(tx, _message(500))
    h.pump()
    assert isinstance(producer.outcomes[big], Accepted) and isinstance(producer.outcomes[small], Accepted)
    assert [_sizes(c, rx) for c, rx in consumers] == [[500], [5000, 500], [5000, 500]]
    assert all(rx.state.local is ACTIVE for _, rx in consumers)


def test_multicast_too_large_for_every_consumer_is_rejected() -> None:
    h = RouterHarness(CONFIG)
    consumers = [_consumer(h, f"c{limit}", "mc", limit) for limit in (1000, 2000)]
    producer = h.connect("p")
    tx = producer.sender("mc")
    h.pump()
    big = producer.send(tx, _message(5000))
    h.pump()
    _size_exceeded(producer.outcomes[big], "mc", "5000")
    assert all(not c.received[rx] for c, rx in consumers)


def test_a_multicast_copy_growing_past_its_consumers_limit_is_aborted() -> None:
    """The copy to the consumer with the smaller limit is aborted once the stream passes it and
    counts as released; the others go on, and the producer hears theirs (accepted). The aborted
    consumer's link carries the next message."""
    h = RouterHarness(CONFIG)
    (c1, rx1), (c2, rx2), (c3, rx3) = [_consumer(h, f"c{i}", "mc", limit) for i, limit in enumerate((10_000, None, 50_000))]
    producer = h.connect("p")
    tx = producer.sender("mc")
    h.pump()
    delivery = _stream(h, tx, _message(30_000), 4000)
    assert isinstance(producer.outcomes[delivery], Accepted)
    assert _aborted(c1) == 1 and not c1.received[rx1]
    assert _sizes(c2, rx2) == [30_000] and _sizes(c3, rx3) == [30_000]
    after = producer.send(tx, _message(2000))
    h.pump()
    assert isinstance(producer.outcomes[after], Accepted)
    assert [_sizes(c, rx)[-1] for c, rx in ((c1, rx1), (c2, rx2), (c3, rx3))] == [2000] * 3
    assert all(rx.state.local is ACTIVE for rx in (rx1, rx2, rx3))


def test_a_waiting_multicast_copy_that_outgrows_its_consumer_is_released_at_once() -> None:
    """The copy for a consumer without credit waits with the frames; once the stream passes
    that consumer's limit, the copy counts as released then (the producer does not wait for
    that consumer's credit), and its consumer never gets it."""
    h = RouterHarness(CONFIG)
    c1, rx1 = _consumer(h, "c1", "mc", 10_000, credit=0)
    c2, rx2 = _consumer(h, "c2", "mc", None)
    producer = h.connect("p")
    tx = producer.sender("mc")
    h.pump()
    delivery = _stream(h, tx, _message(30_000), 4000)
    assert isinstance(producer.outcomes[delivery], Accepted) and _sizes(c2, rx2) == [30_000]
    rx1.flow(10)
    h.pump()
    assert not c1.received[rx1] and _aborted(c1) == 0


def test_every_multicast_copy_aborted_is_released() -> None:
    h = RouterHarness(CONFIG)
    c1, rx1 = _consumer(h, "c1", "mc", 10_000)
    producer = h.connect("p")
    tx = producer.sender("mc")
    h.pump()
    delivery = _stream(h, tx, _message(30_000), 4000)
    assert _aborted(c1) == 1
    assert isinstance(producer.outcomes[delivery], Released)


def test_a_limit_beyond_any_message_is_no_limit() -> None:
    """2**64 - 1 (what some clients send for "no limit") is kept as none."""
    h = RouterHarness(CONFIG)
    consumer, rx = _consumer(h, "c", "q", 2**64 - 1)
    entry = h.core.table.entries["Mq"]
    assert entry.limited == 0 and entry.consumers[0].max_message_size == 0
    limited, lrx = _consumer(h, "l", "q", 5000)
    assert entry.limited == 1
    lrx.detach()
    h.pump()
    assert entry.limited == 0


def test_a_message_rejected_for_one_consumer_goes_to_the_next_one_it_fits() -> None:
    """A stream rejected at the only consumer's limit; that consumer goes, one with a larger
    limit comes, and the same message sent again reaches it whole (the sequence a uamqp client
    ran into)."""
    h = RouterHarness(CONFIG)
    small, small_rx = _consumer(h, "small", "q", 10_000)
    producer = h.connect("p")
    tx = producer.sender("q")
    h.pump()
    payload = _message(30_000)
    first = _stream(h, tx, payload, 4000)
    _size_exceeded(producer.outcomes[first], "q", "at least 12000")
    small_rx.detach()
    h.pump()
    large, large_rx = _consumer(h, "large", "q", 60_000)
    again = _stream(h, tx, payload, 4000)
    assert isinstance(producer.outcomes[again], Accepted) and again in producer.settled
    assert _sizes(large, large_rx) == [30_000] and _aborted(large) == 0
    assert large_rx.state.local is ACTIVE
