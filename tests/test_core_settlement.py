"""Settlement end to end through one router, sans-IO: every outcome reaches the producer,
settle modes, presettled traffic, multicast combination, and failures where every delivery is
accounted for (received, or reported released/modified)."""

from __future__ import annotations

from typing import Any

import pytest

from router.amqp.events import DispositionReceived, RemoteClose
from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Modified, Received, Rejected, Released
from router.amqp.performatives import RCV_SECOND, RECEIVER, SENDER, Error
from router.config.models import AddressConfig, RouterConfig, RouterSection
from router.testing.routerharness import Client, RouterHarness


def _pair(
    h: RouterHarness, address: str = "q", credit: int = 100, sender: dict[str, Any] | None = None, **receiver: object
) -> tuple[Client, Client, Any, Any]:
    producer, consumer = h.connect("p"), h.connect("c")
    rx = consumer.receiver(address, **receiver)  # type: ignore[arg-type]
    tx = producer.sender(address, **(sender or {}))
    h.pump()
    rx.flow(credit)
    h.pump()
    return producer, consumer, tx, rx


def _one_held(h: RouterHarness, producer: Client, consumer: Client, tx: Any, rx: Any) -> tuple[int, Any]:
    """A message the consumer receives and neither settles nor answers yet: (its delivery-id at
    the producer, what the consumer received)."""
    consumer.auto_accept = False
    delivery_id = producer.send(tx, Message.value("m"))
    h.pump()
    (received,) = consumer.received[rx]
    return delivery_id, received



def _fan_out(h: RouterHarness, count: int, sender: dict[str, Any] | None = None) -> tuple[Client, Any, list[Client], list[Any]]:
    """A producer on "mc" and `count` consumers of it, each with 10 credit and answering nothing
    by itself: (producer, its link, consumers, their links)."""
    producer = h.connect("p")
    consumers = [h.connect(f"c{i}") for i in range(count)]
    receivers = [c.receiver("mc") for c in consumers]
    tx = producer.sender("mc", **(sender or {}))
    h.pump()
    for c, r in zip(consumers, receivers):
        c.auto_accept = False
        r.flow(10)
    h.pump()
    return producer, tx, consumers, receivers

OUTCOMES = [
    ACCEPTED,
    Rejected(error=Error(condition="app:bad-order", description="no such product", info={"sku": "x1"})),
    RELEASED,
    Modified(delivery_failed=True, undeliverable_here=True, message_annotations={"x-retry": 3}),
]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
def test_the_consumers_outcome_reaches_the_producer_intact(outcome: object) -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    delivery_id, received = _one_held(h, producer, consumer, tx, rx)
    rx.dispose(received.delivery_id, state=outcome, settled=True)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[delivery_id] == outcome
    assert delivery_id in producer.settled


def test_presettled_traffic_flows_without_dispositions() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    for i in range(5):
        producer.send(tx, Message.value(i), settled=True)  # type: ignore[arg-type]
    h.pump()
    assert [r.settled for r in consumer.received[rx]] == [True] * 5  # type: ignore[index]
    assert not any(isinstance(e, DispositionReceived) for e in producer.events)


def test_receiver_settle_mode_second_settles_after_the_producer() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h, credit=10, sender={"rcv_settle_mode": RCV_SECOND})
    assert tx.remote_attach is not None and tx.remote_attach.rcv_settle_mode == RCV_SECOND
    delivery_id = producer.send(tx, Message.value("m"))
    h.pump()
    # The router told the outcome but has not settled: the producer settles first (§2.8.3).
    assert isinstance(producer.outcomes[delivery_id], Accepted)
    assert delivery_id not in producer.settled
    tx.dispose(delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert delivery_id in producer.settled


def _dispositions(client: Client) -> list[tuple[bool, int, int, bool, object]]:
    """Every disposition the router sent `client`: (role, first, last, settled, state)."""
    return [(e.role, e.first, e.last, e.settled, e.state) for e in client.events if isinstance(e, DispositionReceived)]


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
def test_an_unsettled_outcome_is_settled_both_ways_for_a_first_mode_producer(outcome: object) -> None:
    """The router, receiver of a rcv-settle-mode first producer, settles without waiting for it
    (transport §2.7.5): one settled disposition to the producer, one to the consumer."""
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    delivery_id, received = _one_held(h, producer, consumer, tx, rx)
    rx.dispose(received.delivery_id, state=outcome, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert _dispositions(producer) == [(RECEIVER, delivery_id, delivery_id, True, outcome)]
    assert _dispositions(consumer) == [(SENDER, received.delivery_id, received.delivery_id, True, outcome)]
    for state in h.core.connections.values():
        assert all(out.outstanding == 0 for out in state.out_links)
        assert all(inl.inflight == 0 for inl in state.in_links)
    assert all(s.context.inbound.empty and s.context.outbound.empty for c in h.clients for s in c.router_side.sessions if s.context)


@pytest.mark.parametrize("second", [False, True], ids=["first", "second"])
def test_an_unsettled_non_terminal_state_is_an_unsettled_update_in_either_mode(second: bool) -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h, credit=10, sender={"rcv_settle_mode": RCV_SECOND} if second else None)
    delivery_id, received = _one_held(h, producer, consumer, tx, rx)
    state = Received(section_number=0, section_offset=3)
    rx.dispose(received.delivery_id, state=state, settled=False)
    h.pump()
    assert _dispositions(producer) == [(RECEIVER, delivery_id, delivery_id, False, state)]
    assert _dispositions(consumer) == []
    rx.dispose(received.delivery_id, state=ACCEPTED, settled=False)
    h.pump()
    assert _dispositions(producer)[1:] == [(RECEIVER, delivery_id, delivery_id, not second, ACCEPTED)]
    assert bool(_dispositions(consumer)) is not second  # second: settled once the producer has


def test_receiver_settle_mode_second_keeps_an_unsettled_outcome_until_the_producer_settles() -> None:
    """The three acknowledgements (transport §2.6.12): the producer, in rcv-settle-mode second,
    settles first; only then does the router settle towards it and towards the consumer."""
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h, credit=10, sender={"rcv_settle_mode": RCV_SECOND})
    delivery_id, received = _one_held(h, producer, consumer, tx, rx)
    rx.dispose(received.delivery_id, state=ACCEPTED, settled=False)
    h.pump()
    assert _dispositions(producer) == [(RECEIVER, delivery_id, delivery_id, False, ACCEPTED)]
    assert _dispositions(consumer) == []
    tx.dispose(delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert _dispositions(producer)[1:] == [(RECEIVER, delivery_id, delivery_id, True, ACCEPTED)]
    assert _dispositions(consumer) == [(SENDER, received.delivery_id, received.delivery_id, True, ACCEPTED)]


def test_unsettled_multicast_settles_with_the_strongest_outcome() -> None:
    config = RouterConfig(router=RouterSection(id="R"), addresses=(AddressConfig(prefix="mc", distribution="multicast"),))
    h = RouterHarness(config)
    producer, tx, consumers, receivers = _fan_out(h, 3)
    delivery_id = producer.send(tx, Message.value("m"))
    h.pump()
    states = [RELEASED, ACCEPTED, Modified(delivery_failed=True)]
    for c, r, state in zip(consumers[:2], receivers[:2], states[:2]):
        r.dispose(c.received[r][0].delivery_id, state=state, settled=True)
    h.pump()
    assert delivery_id not in producer.outcomes  # not every copy is terminal yet
    c, r = consumers[2], receivers[2]
    r.dispose(c.received[r][0].delivery_id, state=states[2], settled=True)
    h.pump()
    assert isinstance(producer.outcomes[delivery_id], Accepted)  # rejected > accepted > modified > released


@pytest.mark.parametrize("second", [False, True], ids=["first", "second"])
def test_multicast_copies_given_unsettled_outcomes_are_settled_by_the_router(second: bool) -> None:
    """Copies are settled once terminal, whatever the producer's mode (their outcomes are
    combined, none waits for the producer); the combined outcome goes to a first-mode producer
    settled, to a second-mode one unsettled (it settles first)."""
    config = RouterConfig(router=RouterSection(id="R"), addresses=(AddressConfig(prefix="mc", distribution="multicast"),))
    h = RouterHarness(config)
    producer, tx, consumers, receivers = _fan_out(h, 2, {"rcv_settle_mode": RCV_SECOND} if second else None)
    delivery_id = producer.send(tx, Message.value("m"))
    h.pump()
    for c, r in zip(consumers, receivers):
        copy_id = c.received[r][0].delivery_id
        r.dispose(copy_id, state=ACCEPTED, settled=False)
        h.pump()
        assert _dispositions(c) == [(SENDER, copy_id, copy_id, True, ACCEPTED)]
    assert _dispositions(producer) == [(RECEIVER, delivery_id, delivery_id, not second, ACCEPTED)]
    if second:
        tx.dispose(delivery_id, state=ACCEPTED, settled=True)
        h.pump()
        assert _dispositions(producer)[1:] == [(RECEIVER, delivery_id, delivery_id, True, ACCEPTED)]
    assert all(s.context.inbound.empty and s.context.outbound.empty for c in h.clients for s in c.router_side.sessions if s.context)


@pytest.mark.parametrize("how", ["detach", "disconnect"])
def test_every_delivery_is_received_or_reported_when_the_consumer_vanishes(how: str) -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h, credit=30)
    consumer.auto_accept = False  # 30 arrive and stay unsettled, 20 wait in the router
    ids = [producer.send(tx, Message.value(i)) for i in range(50)]  # type: ignore[arg-type]
    h.pump()
    received = len(consumer.received[rx])  # type: ignore[index]
    assert received == 30
    if how == "detach":
        rx.detach()  # type: ignore[attr-defined]
        h.pump()
    else:
        h.disconnect(consumer)
    outcomes = [producer.outcomes.get(i) for i in ids]
    assert all(o is not None for o in outcomes), "a delivery was left without an outcome"
    # sent but unsettled: in doubt (modified, delivery-failed); never sent: released
    assert sum(isinstance(o, Modified) and o.delivery_failed for o in outcomes) == 30
    assert sum(isinstance(o, Released) for o in outcomes) == 20
    assert set(ids) <= producer.settled


def test_outcomes_after_the_producer_left_are_dropped_quietly() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    consumer.auto_accept = False
    for i in range(3):
        producer.send(tx, Message.value(i))  # type: ignore[arg-type]
    h.pump()
    h.disconnect(producer)
    assert consumer.bodies(rx) == [0, 1, 2]  # type: ignore[arg-type]
    for received in consumer.received[rx]:  # type: ignore[index]
        rx.dispose(received.delivery_id, state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
    h.pump()  # nobody to tell: no error, nothing left behind
    assert not h.core.table.entries["Mq"].producers
    assert all(s.context.inbound.empty and s.context.outbound.empty for c in h.clients for s in c.router_side.sessions if s.context)


def test_shutdown_with_an_outcome_to_report_closes_every_connection_forced() -> None:
    # The consumer's connection goes first: the message waiting for it is released towards
    # the producer, whose connection is then closed before the batch of dispositions is
    # written. Dispositions for a connection we closed are dropped (our close is its last frame).
    h = RouterHarness()
    consumer, producer = h.connect("c"), h.connect("p")
    consumer.receiver("q")  # no credit: the message waits in the router
    tx = producer.sender("q")
    h.pump()
    producer.send(tx, Message.value("waiting"))
    h.pump()
    h.core.shutdown(h.now)
    h.pump()
    for client in (consumer, producer):
        closes = [e for e in client.events if isinstance(e, RemoteClose)]
        assert closes and closes[0].error is not None and closes[0].error.condition == "amqp:connection:forced"


def test_shutdown_reports_every_delivery_in_flight_before_closing() -> None:
    # Producer connected after the consumer (teardown order must not matter).
    h = RouterHarness()
    consumer = h.connect("c")
    producer = h.connect("p")
    rx = consumer.receiver("q")
    tx = producer.sender("q")
    h.pump()
    rx.flow(3)
    h.pump()
    consumer.auto_accept = False
    ids = [producer.send(tx, Message.value(i)) for i in range(6)]  # 3 sent, 3 waiting
    h.pump()
    h.core.shutdown(h.now)
    h.pump()
    outcomes = [producer.outcomes.get(i) for i in ids]
    assert sum(isinstance(o, Modified) for o in outcomes) == 3
    assert sum(isinstance(o, Released) for o in outcomes) == 3
    closes = [e for e in producer.events if type(e).__name__ == "RemoteClose"]
    assert closes and closes[0].error.condition == "amqp:connection:forced"  # type: ignore[attr-defined]


@pytest.mark.parametrize("role", ["consumer", "producer"])
def test_a_disposition_naming_two_billion_ids_settles_what_is_held_and_no_more(role: str) -> None:
    # Each disposition's range is walked by what the router holds, not by its width: a peer
    # naming 2**31 - 1 ids in one frame must not keep the router busy for minutes.
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    consumer.auto_accept = False
    sent = [producer.send(tx, Message.value(i)) for i in range(3)]  # type: ignore[arg-type]
    h.pump()
    first = consumer.received[rx][0].delivery_id  # type: ignore[index]
    if role == "consumer":
        rx.dispose(first, (first + 2**31 - 2) & 0xFFFFFFFF, state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
        h.pump()
        assert [type(producer.outcomes[i]) for i in sent] == [Accepted] * 3
    else:  # the producer settles first: the router settles downstream in turn
        tx.dispose(sent[0], (sent[0] + 2**31 - 2) & 0xFFFFFFFF, settled=True)  # type: ignore[attr-defined]
        h.pump()
        settled = [e for e in consumer.events if isinstance(e, DispositionReceived) and e.settled]
        assert sum(e.last - e.first + 1 for e in settled) == 3
    for state in h.core.connections.values():
        assert all(out.outstanding == 0 for out in state.out_links)
        assert all(inl.inflight == 0 for inl in state.in_links)
