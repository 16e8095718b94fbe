"""RouterCore.quiesce, the first step of a graceful stop, sans-IO: producers' credit is taken
back and never granted again, while the deliveries already in flight still reach consumers and
their outcomes still reach the producers; new links and connections are refused."""

from __future__ import annotations

from router.amqp.events import RemoteClose
from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED, Accepted
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client, RouterHarness


def _pair(h: RouterHarness) -> tuple[Client, Client, object, object]:
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False  # the consumer holds what it gets until the test settles it
    rx = consumer.receiver("q")
    tx = producer.sender("q")
    h.pump()
    rx.flow(100)
    h.pump()
    return producer, consumer, tx, rx


def test_quiesce_grants_no_credit_yet_in_flight_deliveries_get_their_outcomes() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    held = [producer.send(tx, Message.value(i)) for i in range(5)]  # type: ignore[arg-type]
    h.pump()
    assert len(consumer.received[rx]) == 5  # type: ignore[index]
    assert tx.credit > 0  # type: ignore[attr-defined]
    # One more is on the wire (written, not yet read by the router) when the router quiesces.
    on_the_wire = producer.send(tx, Message.value("late"))  # type: ignore[arg-type]
    h.core.quiesce(h.now)
    h.pump()
    assert tx.credit == 0  # type: ignore[attr-defined]  # taken back with a flow (transport 2.6.7)
    received = consumer.received[rx]  # type: ignore[index]
    assert [r.message.body_value for r in received] == [0, 1, 2, 3, 4, "late"]  # the late one still routed
    assert h.core.in_flight() == 6
    for r in received:
        rx.dispose(r.delivery_id, state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
    h.pump()
    for delivery_id in [*held, on_the_wire]:
        assert isinstance(producer.outcomes[delivery_id], Accepted)
        assert delivery_id in producer.settled
    assert h.core.in_flight() == 0
    assert tx.credit == 0  # type: ignore[attr-defined]  # settling freed the window: still no credit
    h.advance(5.0)
    assert tx.credit == 0  # type: ignore[attr-defined]


def test_quiesce_refuses_new_links_and_new_connections() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    h.core.quiesce(h.now)
    h.pump()
    late_rx = consumer.receiver("q2")
    late_tx = producer.sender("q2")
    h.pump()
    for link in (late_rx, late_tx):
        assert link.remote_closed
        assert link.remote_error is not None and link.remote_error.condition == "amqp:link:detach-forced"
    # The links attached before keep working: the consumer's credit still reaches the router.
    assert not rx.remote_closed and not tx.remote_closed  # type: ignore[attr-defined]
    late = h.connect("late")
    (close,) = [e for e in late.events if isinstance(e, RemoteClose)]
    assert close.error is not None and close.error.condition == "amqp:connection:forced"


def test_shutdown_after_quiesce_releases_what_is_left() -> None:
    h = RouterHarness()
    producer, consumer, tx, rx = _pair(h)
    delivery_id = producer.send(tx, Message.value("held"))  # type: ignore[arg-type]
    h.pump()
    h.core.quiesce(h.now)
    h.pump()
    assert h.core.in_flight() == 1
    h.core.shutdown(h.now)
    h.pump()
    assert type(producer.outcomes[delivery_id]).__name__ in {"Released", "Modified"}
    assert h.core.in_flight() == 0


def test_a_quiescing_router_in_a_mesh_finishes_what_crosses_it_and_takes_nothing_new() -> None:
    """Producer on A, consumer on B: B quiesces. Outcomes of what already crossed still travel
    back over the mesh; A gets no credit to send more to B; once B closes, A sees it leave and
    what waited there is released to its sender."""
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.link("A", "B")
    h.converge()
    producer, consumer = h.client("A", "p"), h.client("B", "c")
    consumer.auto_accept = False
    rx = consumer.receiver("orders")
    h.advance(0.5)
    rx.flow(100)
    tx = producer.sender("orders")
    h.pump()
    crossed = [producer.send(tx, Message.value(i)) for i in range(3)]
    h.pump()
    assert len(consumer.received[rx]) == 3
    b = h.cores["B"]
    b.quiesce(h.now)
    h.pump()
    waits = producer.send(tx, Message.value("after"))
    h.pump()
    assert len(consumer.received[rx]) == 3  # B gave A no credit for it
    for r in consumer.received[rx]:
        rx.dispose(r.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert all(isinstance(producer.outcomes[d], Accepted) for d in crossed)
    assert b.in_flight() == 0
    b.shutdown(h.now)
    h.pump()
    h.kill("B")
    h.advance(5.0)
    assert type(producer.outcomes.get(waits)).__name__ in {"Released", "Modified"}


def test_a_delivery_still_waiting_for_credit_is_not_waited_for() -> None:
    # The consumer has given 2 credits: 2 deliveries go out, 3 wait in the router for credit.
    h = RouterHarness()
    producer, consumer = h.connect("p"), h.connect("c")
    consumer.auto_accept = False
    rx = consumer.receiver("q")
    tx = producer.sender("q")
    h.pump()
    rx.flow(2)
    h.pump()
    sent = [producer.send(tx, Message.value(i)) for i in range(5)]  # type: ignore[arg-type]
    h.pump()
    assert len(consumer.received[rx]) == 2  # type: ignore[index]
    h.core.quiesce(h.now)
    h.pump()
    assert h.core.in_flight() == 2  # only what went on to the consumer: the close releases the rest
    h.core.shutdown(h.now)
    h.pump()
    assert [type(producer.outcomes.get(d)).__name__ for d in sent[2:]] == ["Released"] * 3
