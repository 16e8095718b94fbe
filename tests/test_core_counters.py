"""The counters the core keeps for management, sans-IO through one router: outcomes and
presettled arrivals per address, presettled sends per consumer link, and since when a link's
credit has been zero (set when it runs out, cleared when credit comes back)."""

from __future__ import annotations

from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED, Modified, Rejected, Released
from router.amqp.performatives import Error
from router.config.models import Limits, Listener, RouterConfig
from router.core.links import InLink, OutLink
from router.testing.routerharness import Client, RouterHarness


def _pair(h: RouterHarness, address: str = "q", credit: int = 10) -> tuple[Client, Client, object, object]:
    producer, consumer = h.connect("p"), h.connect("c")
    rx = consumer.receiver(address)
    tx = producer.sender(address)
    h.pump()
    rx.flow(credit)  # type: ignore[attr-defined]
    h.pump()
    return producer, consumer, tx, rx


def _links(h: RouterHarness) -> tuple[InLink, OutLink]:
    ins = [link for s in h.core.connections.values() for link in s.in_links]
    outs = [link for s in h.core.connections.values() for link in s.out_links]
    assert len(ins) == 1 and len(outs) == 1
    return ins[0], outs[0]


def test_address_counts_each_outcome_told_to_producers_and_presettled_arrivals() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    consumer.auto_accept = False
    for i in range(4):
        producer.send(tx, Message.value(i))  # type: ignore[arg-type]
    producer.send(tx, Message.value("settled"), settled=True)  # type: ignore[arg-type]
    h.pump()
    received = consumer.received[rx]  # type: ignore[index]
    outcomes = [ACCEPTED, Rejected(error=Error(condition="app:no")), Modified(delivery_failed=True), Released()]
    for r, state in zip(received, outcomes):
        rx.dispose(r.delivery_id, state=state, settled=True)  # type: ignore[attr-defined]
    h.pump()
    entry = h.core.table.entries["Mq"]
    assert (entry.accepted, entry.rejected, entry.modified, entry.presettled) == (1, 1, 1, 1)
    inl, out = _links(h)
    assert (inl.accepted, inl.rejected, inl.modified, inl.released, inl.presettled) == (1, 1, 1, 1, 1)
    assert out.presettled == 1 and out.delivered == 5


def test_a_refused_delivery_counts_as_rejected_at_its_address() -> None:
    h = RouterHarness(RouterConfig(limits=Limits(max_message_size=200)))
    producer, _, tx, _ = _pair(h)
    delivery = producer.send(tx, Message.value("x" * 500))  # type: ignore[arg-type]
    h.pump()
    assert isinstance(producer.outcomes[delivery], Rejected)
    assert h.core.table.entries["Mq"].rejected == 1


def test_zero_credit_since_is_set_when_credit_runs_out_and_cleared_when_it_returns() -> None:
    h = RouterHarness(RouterConfig(listeners=(Listener(name="amqp", port=5672, link_capacity=4),)))
    producer, consumer, tx, rx = _pair(h, credit=2)
    consumer.auto_accept = False
    inl, out = _links(h)
    assert out.zero_credit_since is None and inl.zero_credit_since is None  # both have credit
    started = h.now
    for i in range(2):
        producer.send(tx, Message.value(i))  # type: ignore[arg-type]
    h.pump()
    assert out.link.credit == 0 and out.zero_credit_since == started
    assert inl.link.credit == 4  # both went to the consumer: they hold no slot in the window
    h.advance(5)
    # with no consumer credit the next four wait in the router: the producer's window (4) is full
    for i in range(4):
        producer.send(tx, Message.value(i))  # type: ignore[arg-type]
    h.pump()
    assert inl.link.credit == 0 and inl.zero_credit_since == h.now
    h.advance(1)
    rx.flow(4)  # type: ignore[attr-defined]
    h.pump()
    # handed over at once: slots free again, while the consumer's credit is used up anew
    assert inl.link.credit == 4 and inl.zero_credit_since is None
    assert out.link.credit == 0 and out.zero_credit_since == h.now
    rx.flow(1)  # type: ignore[attr-defined]
    h.pump()
    assert out.zero_credit_since is None


def test_a_drained_consumer_has_zero_credit_since_the_drain() -> None:
    h = RouterHarness()
    _, consumer, _, rx = _pair(h, credit=5)
    _, out = _links(h)
    h.advance(2)
    rx.flow(5, drain=True)  # type: ignore[attr-defined]
    h.pump()
    assert out.link.credit == 0 and out.zero_credit_since == h.now
