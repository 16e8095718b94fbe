"""The counters the management model shows per link (router.link) and per address
(router.address): each is present, and each the core keeps moves with the traffic that should
move it.

Sans-IO: a real RouterCore and client engines (tests/support/mgmt.py); outcomes are chosen by
hand (the consumer does not auto-accept), time moves only when the test says so.
"""

from __future__ import annotations

from typing import Any

from router.amqp.link import Link
from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified, Properties, Rejected, Released
from router.amqp.performatives import Error

from router.testing.routerharness import Client
from .support.mgmt import MgmtHarness

LINK_COUNTERS = ("deliveryCount", "acceptedCount", "rejectedCount", "releasedCount", "modifiedCount",
                 "presettledCount", "droppedPresettledCount", "unsettledCount", "undeliveredCount",
                 "creditAvailable", "zeroCreditSeconds", "capacity")  # fmt: skip
ADDRESS_COUNTERS = ("deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "accepted", "rejected", "released",
                    "modified", "presettled", "dropped", "expired", "unsettledCount", "undeliveredCount",
                    "creditAvailable", "zeroCreditSeconds")  # fmt: skip


def link_of(m: MgmtHarness, link: Link) -> dict[str, Any]:
    status, _, rows = m.op("QUERY", {"attributeNames": []}, entityType="router.link")
    assert status == 200
    names = rows["attributeNames"]
    found = [dict(zip(names, row)) for row in rows["results"] if dict(zip(names, row))["name"] == link.name]
    assert len(found) == 1, link.name
    return found[0]


def address(m: MgmtHarness, name: str) -> dict[str, Any]:
    status, description, entity = m.op("READ", type="router.address", name=name)
    assert status == 200, description
    return dict(entity)


class Traffic:
    """A consumer that settles by hand and a producer, both on `addr`."""

    def __init__(self, m: MgmtHarness, addr: str, credit: int = 10) -> None:
        self.m = m
        self.consumer: Client = m.h.connect("consumer")
        self.consumer.auto_accept = False
        self.receiver = self.consumer.receiver(addr)
        m.h.pump()
        self.receiver.flow(credit)
        self.producer: Client = m.h.connect("producer")
        self.sender = self.producer.sender(addr)
        m.h.pump()

    def send(self, *, settled: bool = False, **properties: Any) -> int:
        message = Message.value("x", properties=Properties(**properties) if properties else None)
        delivery = self.producer.send(self.sender, message, settled=settled)
        self.m.h.pump()
        return delivery

    def settle(self, index: int, state: Any) -> None:
        received = self.consumer.received[self.receiver][index]
        self.receiver.dispose(received.delivery_id, state=state, settled=True)
        self.m.h.pump()


def test_every_counter_is_an_attribute() -> None:
    m = MgmtHarness()
    traffic = Traffic(m, "present")
    link = link_of(m, traffic.receiver)
    assert set(LINK_COUNTERS) <= set(link)
    assert set(ADDRESS_COUNTERS) <= set(address(m, "present"))
    _, _, described = m.op("GET-ATTRIBUTES", {}, entityType="router.link")
    assert set(LINK_COUNTERS) <= set(described["org.apache.qpid.dispatch.router.link"])
    _, _, described = m.op("GET-ATTRIBUTES", {}, entityType="router.address")
    assert set(ADDRESS_COUNTERS) <= set(described["org.apache.qpid.dispatch.router.address"])


def test_link_counters_follow_each_outcome() -> None:
    m = MgmtHarness()
    t = Traffic(m, "outcomes", credit=10)
    for _ in range(5):
        t.send()
    t.send(settled=True)
    t.settle(0, Accepted())
    t.settle(1, Rejected(error=Error(condition="amqp:invalid-field", description="no")))
    t.settle(2, Released())
    t.settle(3, Modified(delivery_failed=True))
    # the fifth stays unsettled (in flight); the sixth arrived presettled
    consumer, producer = link_of(m, t.receiver), link_of(m, t.sender)
    assert (consumer["linkDir"], producer["linkDir"]) == ("out", "in")
    for side in (consumer, producer):
        assert side["deliveryCount"] == 6
        assert (side["acceptedCount"], side["rejectedCount"], side["releasedCount"], side["modifiedCount"]) == (1, 1, 1, 1)
        assert side["unsettledCount"] == 1, side
    assert producer["presettledCount"] == 1 and producer["droppedPresettledCount"] == 0
    assert (consumer["creditAvailable"], consumer["capacity"]) == (4, 1000)  # 10 given, 6 used
    assert consumer["undeliveredCount"] == 0 and consumer["zeroCreditSeconds"] == 0
    assert producer["creditAvailable"] > 0 and producer["zeroCreditSeconds"] == 0
    # the outcomes reached the producer as the consumer gave them
    states = [type(t.producer.outcomes[i]) for i in range(4)]
    assert states == [Accepted, Rejected, Released, Modified]


def test_presettled_deliveries_dropped_and_released_when_expired() -> None:
    m = MgmtHarness()
    t = Traffic(m, "expiring")
    past = 1_000  # absolute-expiry-time in ms: long before the harness's clock
    t.send(settled=True, absolute_expiry_time=past)
    t.send(absolute_expiry_time=past)
    producer = link_of(m, t.sender)
    assert (producer["deliveryCount"], producer["presettledCount"], producer["droppedPresettledCount"]) == (2, 1, 1)
    assert producer["releasedCount"] == 1 and producer["unsettledCount"] == 0
    entry = address(m, "expiring")
    assert (entry["expired"], entry["dropped"], entry["released"], entry["deliveriesEgress"]) == (2, 1, 1, 0)
    assert isinstance(t.producer.outcomes[1], Released)  # the unsettled one


def test_address_counters_move_with_traffic_credit_and_waiting_deliveries() -> None:
    m = MgmtHarness()
    t = Traffic(m, "metered", credit=2)
    before = address(m, "metered")
    assert (before["subscriberCount"], before["producerCount"], before["creditAvailable"]) == (1, 1, 2)
    assert before["zeroCreditSeconds"] == 0 and before["undeliveredCount"] == 0
    for _ in range(3):
        t.send()
    during = address(m, "metered")
    assert (during["deliveriesIngress"], during["deliveriesEgress"]) == (3, 2)
    assert during["unsettledCount"] == 2  # sent to the consumer, no outcome yet
    assert during["undeliveredCount"] == 1  # waiting for consumer credit
    assert during["creditAvailable"] == 0
    t.settle(0, Accepted())
    t.settle(1, Accepted())
    t.receiver.flow(1)
    m.h.pump()
    after = address(m, "metered")
    assert (after["deliveriesEgress"], after["undeliveredCount"], after["unsettledCount"]) == (3, 0, 1)
    assert after["deliveriesTransit"] == 0 and after["remoteCount"] == 0 and after["remoteHostRouters"] == []


def test_no_consumers_means_no_zero_credit_time() -> None:
    m = MgmtHarness()
    client = m.h.connect("producer-only")
    client.sender("lonely")
    m.h.pump()
    entry = address(m, "lonely")
    assert entry["subscriberCount"] == 0 and entry["zeroCreditSeconds"] is None and entry["creditAvailable"] == 0


def test_address_outcome_counters_move() -> None:
    m = MgmtHarness()
    t = Traffic(m, "outcome.counters")
    for _ in range(3):
        t.send()
    t.send(settled=True)
    t.settle(0, Accepted())
    t.settle(1, Rejected())
    t.settle(2, Modified())
    entry = address(m, "outcome.counters")
    assert (entry["accepted"], entry["rejected"], entry["modified"], entry["presettled"]) == (1, 1, 1, 1)


def test_zero_credit_time_grows_while_a_consumer_has_no_credit() -> None:
    m = MgmtHarness()
    t = Traffic(m, "starved", credit=1)
    t.send()
    m.h.advance(7)
    assert link_of(m, t.receiver)["zeroCreditSeconds"] == 7
    assert address(m, "starved")["zeroCreditSeconds"] == 7


def test_max_message_size_in_force_on_each_link() -> None:
    """A consumer's max-message-size (the router sends it nothing larger), and the router's own
    on a producer's link (none configured here: 0)."""
    m = MgmtHarness()
    consumer, producer = m.h.connect("limited"), m.h.connect("producer")
    limited, unlimited = consumer.receiver("sized", max_message_size=5000), consumer.receiver("sized")
    sender = producer.sender("sized")
    m.h.pump()
    assert link_of(m, limited)["maxMessageSize"] == 5000
    assert link_of(m, unlimited)["maxMessageSize"] == 0
    assert link_of(m, sender)["maxMessageSize"] == 0
