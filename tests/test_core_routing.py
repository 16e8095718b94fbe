"""Routing semantics of a single router, sans-IO: addresses, distributions, credit, anonymous
relay, dynamic reply-to addresses. (Process-level tests with Proton clients cover the same
ground over sockets.)"""

from __future__ import annotations

from collections import Counter

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Properties, Released, Source
from router.config.models import AddressConfig, Listener, RouterConfig, RouterSection
from router.testing.routerharness import RouterHarness


def _config(**kw: object) -> RouterConfig:
    return RouterConfig(router=RouterSection(id="R1"), **kw)  # type: ignore[arg-type]


def test_no_credit_until_a_consumer_then_a_window_of_link_capacity() -> None:
    h = RouterHarness(_config(listeners=(Listener(link_capacity=40),)))
    producer, consumer = h.connect("p"), h.connect("c")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit == 0  # no destination anywhere: no credit (anchors' rule)
    receiver = consumer.receiver("orders")
    h.pump()
    assert sender.credit == 40
    receiver.detach()
    h.pump()
    assert sender.credit == 0  # the last consumer left: credit drained


def test_mobile_address_delivers_and_outcomes_come_back() -> None:
    h = RouterHarness(_config())
    producer, consumer = h.connect("p"), h.connect("c")
    sender = producer.sender("orders")
    receiver = consumer.receiver("orders")
    h.pump()
    receiver.flow(10)
    h.pump()
    ids = [producer.send(sender, Message.value(i)) for i in range(5)]
    h.pump()
    assert consumer.bodies(receiver) == [0, 1, 2, 3, 4]
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)
    assert producer.settled >= set(ids)


def test_local_and_topological_forms_reach_the_same_local_address() -> None:
    h = RouterHarness(_config())
    producer, consumer = h.connect("p"), h.connect("c")
    receiver = consumer.receiver("_local/svc")
    h.pump()
    receiver.flow(10)
    via_topo = producer.sender("_topo/0/R1/svc")
    via_local = producer.sender("_local/svc")
    mobile = producer.sender("svc")  # a different (mobile) address: no consumer, no credit
    h.pump()
    producer.send(via_topo, Message.value("topo"))
    producer.send(via_local, Message.value("local"))
    h.pump()
    assert consumer.bodies(receiver) == ["topo", "local"]
    assert mobile.credit == 0


def test_another_routers_topological_address_is_refused_on_a_standalone_router() -> None:
    h = RouterHarness(_config())
    consumer = h.connect("c")
    receiver = consumer.receiver("_topo/0/R9/svc")
    h.pump()
    assert receiver.remote_error is not None and receiver.remote_error.condition == "amqp:not-found"


def _spread(h: RouterHarness, address: str, consumers: int, messages: int, credit: int = 100) -> list[int]:
    producer = h.connect("p")
    clients = [h.connect(f"c{i}") for i in range(consumers)]
    receivers = [c.receiver(address) for c in clients]
    sender = producer.sender(address)
    h.pump()
    for r in receivers:
        r.flow(credit)
    h.pump()
    for i in range(messages):
        producer.send(sender, Message.value(i))
    h.pump()
    return [len(c.received[r]) for c, r in zip(clients, receivers)]


def test_closest_round_robins_between_equal_consumers() -> None:
    h = RouterHarness(_config(addresses=(AddressConfig(prefix="rr", distribution="closest"),)))
    assert _spread(h, "rr.x", consumers=3, messages=30) == [10, 10, 10]


def test_balanced_prefers_the_least_busy_consumer() -> None:
    h = RouterHarness(_config())  # balanced is the default
    producer = h.connect("p")
    busy, idle = h.connect("busy"), h.connect("idle")
    busy.auto_accept = False  # holds every delivery unsettled
    rb, ri = busy.receiver("work"), idle.receiver("work")
    sender = producer.sender("work")
    h.pump()
    rb.flow(100)
    ri.flow(100)
    h.pump()
    for i in range(20):
        producer.send(sender, Message.value(i))
        h.pump()
    # The idle consumer settles at once, so it always has the least outstanding work.
    assert len(idle.received[ri]) >= 18 and len(busy.received[rb]) <= 2


def test_multicast_copies_to_every_consumer_and_combines_outcomes() -> None:
    h = RouterHarness(_config(addresses=(AddressConfig(pattern="events/#", distribution="multicast"),)))
    assert _spread(h, "events/a/b", consumers=3, messages=7) == [7, 7, 7]
    producer = h.clients[0]
    assert sum(isinstance(s, Accepted) for s in producer.outcomes.values()) == 7


def test_most_specific_address_rule_wins() -> None:
    config = _config(addresses=(
        AddressConfig(pattern="#", distribution="multicast"),
        AddressConfig(prefix="queue", distribution="closest"),
    ))  # fmt: skip
    h = RouterHarness(config)
    assert h.core.table.distribution_for("queue.x") == "closest"
    assert h.core.table.distribution_for("other") == "multicast"
    assert RouterHarness(_config()).core.table.distribution_for("x") == "balanced"


def test_anonymous_relay_routes_by_to_releases_unknown_and_rejects_missing_to() -> None:
    h = RouterHarness(_config())
    producer, consumer = h.connect("p"), h.connect("c")
    receiver = consumer.receiver("q1")
    h.pump()
    receiver.flow(10)
    anonymous = producer.sender(None)
    h.pump()
    offered = producer.engine.remote_open.offered_capabilities  # type: ignore[union-attr]
    assert "ANONYMOUS-RELAY" in offered
    assert anonymous.credit > 0  # anonymous senders get credit at once
    routed = producer.send(anonymous, Message.value("x", properties=Properties(to="q1")))
    unknown = producer.send(anonymous, Message.value("y", properties=Properties(to="nowhere")))
    missing = producer.send(anonymous, Message.value("z"))
    h.pump()
    assert consumer.bodies(receiver) == ["x"]
    assert isinstance(producer.outcomes[routed], Accepted)
    assert isinstance(producer.outcomes[unknown], Released)
    error = producer.outcomes[missing].error
    assert error.condition == "amqp:precondition-failed"


def test_dynamic_source_gets_a_temporary_address_and_request_reply_works() -> None:
    h = RouterHarness(_config())
    service, requester = h.connect("service"), h.connect("requester")
    requests = service.receiver("service")
    reply_rx = requester.receiver(None, source=Source(dynamic=True))
    h.pump()
    reply_to = reply_rx.remote_source.address
    assert reply_to.startswith("_topo/0/R1/temp.")
    requests.flow(10)
    reply_rx.flow(10)
    ask = requester.sender("service")
    answer = service.sender(None)  # replies through the anonymous relay
    h.pump()
    requester.send(ask, Message.value("ping", properties=Properties(reply_to=reply_to)))
    h.pump()
    (request,) = service.received[requests]
    service.send(answer, Message.value("pong", properties=Properties(to=request.message.properties.reply_to)))  # type: ignore[union-attr]
    h.pump()
    assert requester.bodies(reply_rx) == ["pong"]
    # Two dynamic receivers never share an address.
    other = requester.receiver(None, source=Source(dynamic=True))
    h.pump()
    assert other.remote_source.address != reply_to


def test_drain_request_from_a_consumer_is_answered() -> None:
    h = RouterHarness(_config())
    producer, consumer = h.connect("p"), h.connect("c")
    receiver = consumer.receiver("q")
    sender = producer.sender("q")
    h.pump()
    receiver.flow(10)
    h.pump()
    producer.send(sender, Message.value(1))
    h.pump()
    receiver.flow(receiver.credit, drain=True)
    h.pump()
    drained = [e for e in consumer.events if type(e).__name__ == "FlowReceived" and e.drained]  # type: ignore[attr-defined]
    assert drained and receiver.credit == 0
    assert consumer.bodies(receiver) == [1]


def test_deliveries_wait_for_consumer_credit_and_the_window_bounds_them() -> None:
    h = RouterHarness(_config(listeners=(Listener(link_capacity=10),)))
    producer, consumer = h.connect("p"), h.connect("c")
    receiver = consumer.receiver("q")
    sender = producer.sender("q")
    h.pump()
    receiver.flow(2)
    h.pump()
    for i in range(10):
        producer.send(sender, Message.value(i))
    h.pump()
    assert len(consumer.received[receiver]) == 2
    # 8 wait in the router, 2 were accepted: the window (10) has room for exactly 2 more.
    assert sender.credit == 2
    receiver.flow(100)
    h.pump()
    assert consumer.bodies(receiver) == list(range(10))
    assert Counter(type(s).__name__ for s in producer.outcomes.values()) == {"Accepted": 10}
    assert sender.credit > 0


def test_deliveries_handed_to_a_consumer_leave_the_window_before_their_outcome() -> None:
    # The window bounds what the router holds for a producer. Once a delivery is with a local
    # consumer, that consumer's credit bounds it: the producer does not wait for outcomes.
    h = RouterHarness(_config(listeners=(Listener(link_capacity=10),)))
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False
    receiver = consumer.receiver("q")
    sender = producer.sender("q")
    h.pump()
    receiver.flow(100)
    h.pump()
    sent = []
    for _ in range(3):
        assert sender.credit == 10
        sent += [producer.send(sender, Message.value(len(sent) + i)) for i in range(10)]
        h.pump()
    assert consumer.bodies(receiver) == list(range(30))
    assert producer.outcomes == {}  # all 30 unsettled at the consumer, none waiting in the router
    (inl,) = [inl for state in h.core.connections.values() for inl in state.in_links]
    assert (inl.inflight, inl.held) == (30, 0)
    for received in consumer.received[receiver]:
        receiver.dispose(received.delivery_id, state=Accepted(), settled=True)
    h.pump()
    assert [type(producer.outcomes[i]) for i in sent] == [Accepted] * 30
    assert producer.settled >= set(sent)
    assert (inl.inflight, inl.held) == (0, 0)
