"""Settlement travels both ways, end to end, through one, two and three routers (sans-IO, the
mesh harness): the "three-ack" pattern (the consumer accepts without settling, the producer
settles once it has seen the outcome, and only then is the consumer's delivery settled), state
updates the consumer makes without settling (received, or an outcome with data) reaching the
producer through every hop, and every way one side leaves with the other still waiting.

With N routers the producer is on the first and the consumer on the last of a line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, Accepted, Modified, Received, Rejected, is_terminal
from router.amqp.performatives import RCV_SECOND, Error
from router.core.delivery import SessionMaps
from router.core.router import RouterCore
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client

NAMES = ("A", "B", "C")


def _line(n: int) -> tuple[MeshHarness, Client, Client, object, object]:
    h = MeshHarness(hello_interval_s=1.0, dead_interval_s=3.0)
    for name in NAMES[:n]:
        h.router(name)
    for a, b in zip(NAMES[: n - 1], NAMES[1:n]):
        h.link(a, b)
    if n > 1:
        h.converge()
    producer, consumer = h.client(NAMES[0], "p"), h.client(NAMES[n - 1], "c")
    consumer.auto_accept = False
    rx = consumer.receiver("q")
    h.pump()
    rx.flow(100)
    h.advance(2.0)  # the address reaches the first router
    tx = producer.sender("q")
    h.advance(0.5)
    assert tx.credit > 0
    return h, producer, consumer, tx, rx


def _maps(core: RouterCore) -> Iterator[SessionMaps]:
    for state in core.connections.values():
        for session in state.engine.sessions:
            if isinstance(session.context, SessionMaps):
                yield session.context


def _nothing_held(h: MeshHarness) -> None:
    """No router holds a record of a delivery, nor counts one as unsettled."""
    for rid, core in h.cores.items():
        for maps in _maps(core):
            assert maps.inbound.empty and maps.outbound.empty, rid
        for state in core.connections.values():
            for out in state.out_links:
                assert out.outstanding == 0, (rid, out)


ROUTERS = pytest.mark.parametrize("n", [1, 2, 3], ids=lambda n: f"{n}-router")


@ROUTERS
def test_three_ack_the_consumers_delivery_is_settled_once_the_producer_has(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
    h.pump()
    # The producer sees accepted, not settled: it settles itself.
    assert isinstance(producer.outcomes[sent], Accepted)
    assert sent not in producer.settled
    # The consumer's delivery stays unsettled until then.
    assert got.delivery_id not in consumer.remote_settled
    tx.dispose(sent, state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
    h.pump()
    assert got.delivery_id in consumer.remote_settled
    assert isinstance(consumer.remote_states[got.delivery_id], Accepted)
    _nothing_held(h)


@ROUTERS
def test_states_the_consumer_sets_without_settling_reach_the_producer(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=Received(section_number=2, section_offset=7), settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == Received(section_number=2, section_offset=7)
    assert sent not in producer.settled
    outcome = Modified(delivery_failed=True, message_annotations={"x-why": "busy", "x-retry": 3})
    rx.dispose(got.delivery_id, state=outcome, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == outcome  # the data in the state arrives unchanged
    tx.dispose(sent, state=outcome, settled=True)  # type: ignore[attr-defined]
    h.pump()
    assert got.delivery_id in consumer.remote_settled
    _nothing_held(h)


@ROUTERS
def test_a_consumer_that_settles_after_its_outcome_settles_the_producers_delivery(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rejected = Rejected(error=Error(condition="app:no", description="not today"))
    rx.dispose(got.delivery_id, state=rejected, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == rejected and sent not in producer.settled
    rx.dispose(got.delivery_id, settled=True)  # type: ignore[attr-defined]  # no state: settling only
    h.pump()
    assert sent in producer.settled
    assert producer.outcomes[sent] == rejected
    _nothing_held(h)


@ROUTERS
def test_a_consumer_that_settles_first_settles_at_once_as_before(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    consumer.auto_accept = True
    ids = [producer.send(tx, Message.value(i)) for i in range(20)]  # type: ignore[arg-type]
    h.pump()
    assert all(isinstance(producer.outcomes[i], Accepted) and i in producer.settled for i in ids)
    _nothing_held(h)


@ROUTERS
def test_presettled_deliveries_need_no_settlement(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    for i in range(5):
        producer.send(tx, Message.value(i), settled=True)  # type: ignore[arg-type]
    h.pump()
    assert [r.settled for r in consumer.received[rx]] == [True] * 5  # type: ignore[index]
    assert not producer.outcomes
    _nothing_held(h)


@ROUTERS
def test_a_producer_that_leaves_before_settling_frees_the_waiting_consumer(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert isinstance(producer.outcomes[sent], Accepted)
    tx.detach()  # type: ignore[attr-defined]
    h.pump()
    # Nobody will settle it any more: the router does, with the outcome.
    assert got.delivery_id in consumer.remote_settled
    _nothing_held(h)


@ROUTERS
def test_a_consumer_that_leaves_after_its_outcome_leaves_nothing_behind(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
    h.pump()
    rx.detach()  # type: ignore[attr-defined]
    h.pump()
    assert isinstance(producer.outcomes[sent], Accepted)  # the outcome stands (not modified)
    tx.dispose(sent, state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
    h.pump()
    _nothing_held(h)


@ROUTERS
def test_a_consumer_that_leaves_before_any_outcome_still_yields_modified(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    rx.detach()  # type: ignore[attr-defined]
    h.pump()
    outcome = producer.outcomes[sent]
    assert isinstance(outcome, Modified) and outcome.delivery_failed
    assert sent in producer.settled
    _nothing_held(h)


def test_many_three_acks_in_a_range_each_wait_for_the_producer() -> None:
    h, producer, consumer, tx, rx = _line(2)
    ids = [producer.send(tx, Message.value(i)) for i in range(10)]  # type: ignore[arg-type]
    h.pump()
    got = consumer.received[rx]  # type: ignore[index]
    first, last = got[0].delivery_id, got[-1].delivery_id
    rx.dispose(first, last, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert all(isinstance(producer.outcomes[i], Accepted) and i not in producer.settled for i in ids)
    tx.dispose(ids[0], ids[4], state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
    h.pump()
    assert {r.delivery_id for r in got[:5]} <= consumer.remote_settled
    assert not {r.delivery_id for r in got[5:]} & consumer.remote_settled
    tx.dispose(ids[5], ids[9], state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
    h.pump()
    assert {r.delivery_id for r in got} <= consumer.remote_settled
    _nothing_held(h)


# --- any order of what either end does (hypothesis) ----------------------------------------------

ACTIONS = st.lists(
    st.sampled_from(["received", "accept", "modify", "consumer settles", "producer settles",
                     "consumer leaves", "producer leaves"]),  # fmt: skip
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3), actions=ACTIONS, rcv_second=st.booleans())
def test_settlement_in_any_order_keeps_both_ends_consistent(n: int, actions: list[str], rcv_second: bool) -> None:
    """Whatever the two ends do and in whatever order: the consumer's delivery is settled by the
    router only once the producer has settled or gone (or the consumer settled it itself), the
    producer learns every outcome and state the consumer set, and nothing is left held."""
    h, producer, consumer, tx, rx = _line(n)
    if rcv_second:
        tx.detach()  # type: ignore[attr-defined]
        h.pump()
        tx = producer.sender("q", rcv_settle_mode=RCV_SECOND)
        h.advance(0.5)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    cid = got.delivery_id
    told: object = None  # the last state the consumer set
    consumer_here = producer_here = True
    consumer_settled = producer_settled = False
    for action in actions:
        if action in ("received", "accept", "modify") and consumer_here and not consumer_settled and not is_terminal(told):
            told = {"received": Received(section_number=0, section_offset=1), "accept": ACCEPTED,
                    "modify": Modified(delivery_failed=True, message_annotations={"x": action})}[action]  # fmt: skip
            rx.dispose(cid, state=told, settled=False)  # type: ignore[attr-defined]
        elif action == "consumer settles" and consumer_here and not consumer_settled:
            rx.dispose(cid, state=told if is_terminal(told) else ACCEPTED, settled=True)  # type: ignore[attr-defined]
            told = told if is_terminal(told) else ACCEPTED
            consumer_settled = True
        elif action == "producer settles" and producer_here and not producer_settled and is_terminal(producer.outcomes.get(sent)):
            tx.dispose(sent, state=producer.outcomes[sent], settled=True)  # type: ignore[attr-defined]
            producer_settled = True
        elif action == "consumer leaves" and consumer_here:
            rx.detach()  # type: ignore[attr-defined]
            consumer_here = False
        elif action == "producer leaves" and producer_here:
            tx.detach()  # type: ignore[attr-defined]
            producer_here = False
        else:
            continue
        h.pump()
        if producer_here and consumer_here and not producer_settled and not consumer_settled:
            assert cid not in consumer.remote_settled, f"settled before the producer did, after {action}"
        if producer_here and told is not None and (consumer_here or is_terminal(told)):
            # the producer knows what the consumer said (or, consumer gone first, modified)
            assert producer.outcomes.get(sent) == told, action
        if producer_settled and consumer_here and not consumer_settled:
            assert cid in consumer.remote_settled
        if consumer_settled and producer_here and not producer_settled and not rcv_second:
            assert sent in producer.settled
    # Both ends finish: nothing may stay held anywhere.
    if producer_here and not producer_settled:
        if not is_terminal(producer.outcomes.get(sent)) and consumer_here and not consumer_settled:
            rx.dispose(cid, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
            h.pump()
        tx.dispose(sent, state=producer.outcomes.get(sent), settled=True)  # type: ignore[attr-defined]
        h.pump()
    if consumer_here and not consumer_settled:
        rx.dispose(cid, state=ACCEPTED, settled=True)  # type: ignore[attr-defined]
        h.pump()
    _nothing_held(h)


@ROUTERS
@pytest.mark.parametrize("settled", [True, False], ids=["settled", "unsettled"])
def test_an_outcome_before_the_whole_message_arrived_ends_the_stream(n: int, settled: bool) -> None:
    """A consumer that decides on a delivery still streaming to it (a large message refused
    after its first frame): the producer hears the outcome, the rest is not sent (the delivery
    ends with an abort), and the consumer's link, and on the way every data link between
    routers, carries the next delivery."""
    h, producer, consumer, tx, rx = _line(n)
    payload = encode_message(Message.value("x" * 5000))
    sent = tx.send_transfer(b"big", payload[:100], more=True)  # type: ignore[attr-defined]
    h.pump()
    assert len(consumer.partial[rx]) == 1  # type: ignore[index]
    refused = Rejected(error=Error(condition="app:too-big", description="no thanks"))
    rx.dispose(0, state=refused, settled=settled)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == refused and sent in producer.settled
    assert consumer.partial[rx] == []  # type: ignore[index]  # aborted: discarded
    tx.send_transfer(b"big", payload[100:], more=False)  # type: ignore[attr-defined]
    h.pump()
    assert not consumer.received[rx]  # type: ignore[index]
    consumer.auto_accept = True
    after = producer.send(tx, Message.value("next"))  # type: ignore[arg-type]
    h.pump()
    assert consumer.bodies(rx) == ["next"]  # type: ignore[arg-type]
    assert isinstance(producer.outcomes[after], Accepted)
    _nothing_held(h)
