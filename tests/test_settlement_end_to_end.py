"""Settlement travels both ways, end to end, through one, two and three routers (sans-IO, the
mesh harness). An outcome the consumer gives without settling: to a producer in rcv-settle-mode
first (the default) it arrives settled and the consumer's delivery is settled at once, since a
first-mode receiver settles without waiting for the sender (transport §2.7.5); to one in mode
second, the "three-ack" pattern (the producer settles once it has seen the outcome, and only then
is the consumer's delivery settled), the outcome unsettled hop by hop over the data links either
way. State updates the consumer makes without settling (received, or an outcome with data)
reaching the producer through every hop, and every way one side leaves with the other still
waiting.

With N routers the producer is on the first and the consumer on the last of a line."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp.events import DispositionReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Modified, Received, Rejected, is_terminal
from router.amqp.performatives import RCV_FIRST, RCV_SECOND, RECEIVER, SENDER, Error
from router.config.models import AddressConfig
from router.core.delivery import SessionMaps
from router.core.router import RouterCore
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client

NAMES = ("A", "B", "C")


def _line(n: int, second: bool = False) -> tuple[MeshHarness, Client, Client, object, object]:
    """A line of `n` routers, the producer on the first (`second`: its link in rcv-settle-mode
    second), the consumer, accepting nothing by itself, on the last."""
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
    tx = producer.sender("q", rcv_settle_mode=RCV_SECOND) if second else producer.sender("q")
    h.advance(0.5)
    assert tx.credit > 0
    assert tx.remote_attach is not None and tx.remote_attach.rcv_settle_mode == (RCV_SECOND if second else RCV_FIRST)
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


OUTCOMES = [
    ACCEPTED,
    Rejected(error=Error(condition="app:no", description="not today")),
    RELEASED,
    Modified(delivery_failed=True, undeliverable_here=True, message_annotations={"x-why": "busy"}),
]


@ROUTERS
@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: type(o).__name__)
def test_an_outcome_the_consumer_does_not_settle_reaches_a_first_mode_producer_settled(n: int, outcome: object) -> None:
    """rcv-settle-mode first (the default): the router, the producer's receiver, settles without
    waiting for it (transport §2.7.5); the consumer's delivery is settled at once, every data
    link's on the way too, the producer doing nothing more."""
    h, producer, consumer, tx, rx = _line(n)
    # What each router hears on its data links: from the router after it (role receiver, the
    # outcome) and from the router before it (role sender, settlement). Clients' dispositions
    # are left out: the producer's (role sender) reach only the first router, the consumer's
    # (role receiver) only the last.
    heard: dict[str, list[tuple[bool, bool, object]]] = {name: [] for name in NAMES[:n]}
    for i, name in enumerate(NAMES[:n]):
        def tap(events: list[object], name: str = name, first: bool = i == 0, last: bool = i == n - 1) -> None:
            for e in events:
                if isinstance(e, DispositionReceived) and not (first if e.role is SENDER else last):
                    heard[name].append((e.role, e.settled, e.state))
        h.tap(name, tap)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=outcome, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == outcome and sent in producer.settled
    assert got.delivery_id in consumer.remote_settled
    assert consumer.remote_states[got.delivery_id] == outcome
    # Hop by hop: each router relays the outcome unsettled to the one before it, the first
    # router (the producer's) settles, and each settles the one after it in turn.
    for i, name in enumerate(NAMES[:n]):
        expected = []
        if i < n - 1:
            expected.append((RECEIVER, False, outcome))
        if i > 0:
            expected.append((SENDER, True, outcome))
        assert sorted(heard[name], key=repr) == sorted(expected, key=repr), name
    _nothing_held(h)
    # The producer settling now (a client that settles what it sees, settled or not): nothing.
    tx.dispose(sent, state=outcome, settled=True)  # type: ignore[attr-defined]
    h.pump()
    _nothing_held(h)


@ROUTERS
def test_three_ack_the_consumers_delivery_is_settled_once_a_second_mode_producer_has(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n, second=True)
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
    assert sent in producer.settled  # (mode second: the router settles after the producer)
    assert got.delivery_id in consumer.remote_settled
    assert isinstance(consumer.remote_states[got.delivery_id], Accepted)
    _nothing_held(h)


@ROUTERS
@pytest.mark.parametrize("second", [False, True], ids=["first", "second"])
def test_states_the_consumer_sets_without_settling_reach_the_producer(n: int, second: bool) -> None:
    h, producer, consumer, tx, rx = _line(n, second)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=Received(section_number=2, section_offset=7), settled=False)  # type: ignore[attr-defined]
    h.pump()
    # Not an outcome: an unsettled state update in either mode.
    assert producer.outcomes[sent] == Received(section_number=2, section_offset=7)
    assert sent not in producer.settled
    assert got.delivery_id not in consumer.remote_settled
    outcome = Modified(delivery_failed=True, message_annotations={"x-why": "busy", "x-retry": 3})
    rx.dispose(got.delivery_id, state=outcome, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == outcome  # the data in the state arrives unchanged
    if second:
        assert sent not in producer.settled and got.delivery_id not in consumer.remote_settled
        tx.dispose(sent, state=outcome, settled=True)  # type: ignore[attr-defined]
        h.pump()
    assert sent in producer.settled
    assert got.delivery_id in consumer.remote_settled
    _nothing_held(h)


@ROUTERS
def test_a_consumer_that_settles_after_its_outcome_leaves_a_second_mode_producer_to_settle_first(n: int) -> None:
    h, producer, consumer, tx, rx = _line(n, second=True)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rejected = Rejected(error=Error(condition="app:no", description="not today"))
    rx.dispose(got.delivery_id, state=rejected, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert producer.outcomes[sent] == rejected and sent not in producer.settled
    rx.dispose(got.delivery_id, settled=True)  # type: ignore[attr-defined]  # no state: settling only
    h.pump()
    assert sent not in producer.settled  # the producer settles first (transport §2.8.3)
    assert producer.outcomes[sent] == rejected
    tx.dispose(sent, state=rejected, settled=True)  # type: ignore[attr-defined]
    h.pump()
    assert sent in producer.settled
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
    h, producer, consumer, tx, rx = _line(n, second=True)
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
    h, producer, consumer, tx, rx = _line(n, second=True)
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


def test_many_unsettled_outcomes_in_a_range_all_settle_for_a_first_mode_producer() -> None:
    h, producer, consumer, tx, rx = _line(2)
    ids = [producer.send(tx, Message.value(i)) for i in range(10)]  # type: ignore[arg-type]
    h.pump()
    got = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got[0].delivery_id, got[-1].delivery_id, state=ACCEPTED, settled=False)  # type: ignore[attr-defined]
    h.pump()
    assert all(isinstance(producer.outcomes[i], Accepted) and i in producer.settled for i in ids)
    assert {r.delivery_id for r in got} <= consumer.remote_settled
    _nothing_held(h)


def test_many_three_acks_in_a_range_each_wait_for_a_second_mode_producer() -> None:
    h, producer, consumer, tx, rx = _line(2, second=True)
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


# --- multicast, edge routers -----------------------------------------------------------------


@ROUTERS
@pytest.mark.parametrize("second", [False, True], ids=["first", "second"])
def test_unsettled_multicast_outcomes_settle_every_copy_and_the_producer_by_its_mode(n: int, second: bool) -> None:
    """Multicast copies are settled by the router once terminal, settled or not by their
    consumer (the outcomes are combined): no copy waits for the producer. The combined outcome
    reaches a first-mode producer settled; a second-mode one unsettled, and it settles first."""
    h = MeshHarness(hello_interval_s=1.0, dead_interval_s=3.0)
    for name in NAMES[:n]:
        h.router(name, addresses=(AddressConfig(prefix="mc", distribution="multicast"),))
    for a, b in zip(NAMES[: n - 1], NAMES[1:n]):
        h.link(a, b)
    if n > 1:
        h.converge()
    consumers = [h.client(name, f"c{name}") for name in (NAMES[0], NAMES[n - 1])]
    links = []
    for consumer in consumers:
        consumer.auto_accept = False
        links.append(consumer.receiver("mc.q"))
    h.pump()
    for rx in links:
        rx.flow(10)
    h.advance(2.0)
    producer = h.client(NAMES[0], "p")
    tx = producer.sender("mc.q", rcv_settle_mode=RCV_SECOND) if second else producer.sender("mc.q")
    h.advance(0.5)
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    got = [consumer.received[rx][0] for consumer, rx in zip(consumers, links)]  # type: ignore[index]
    for rx, delivery in zip(links, got):
        rx.dispose(delivery.delivery_id, state=ACCEPTED, settled=False)
    h.pump()
    for consumer, delivery in zip(consumers, got):
        assert delivery.delivery_id in consumer.remote_settled
    assert isinstance(producer.outcomes[sent], Accepted)
    if second:
        assert sent not in producer.settled
        tx.dispose(sent, state=ACCEPTED, settled=True)
        h.pump()
    assert sent in producer.settled
    _nothing_held(h)


@pytest.mark.parametrize("second", [False, True], ids=["first", "second"])
@pytest.mark.parametrize("way", ["edge-to-interior", "interior-to-edge", "edge-to-edge"])
def test_unsettled_outcomes_through_edge_routers(way: str, second: bool) -> None:
    """Edge E1 - interior A - interior B - edge E2: the edges' uplinks relay an unsettled outcome
    hop by hop like the data links between interiors; the router the producer is attached to
    decides by the producer's rcv-settle-mode."""
    h = MeshHarness(hello_interval_s=1.0, dead_interval_s=3.0)
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.router("E1", mode="edge")
    h.router("E2", mode="edge")
    h.link("A", "B")
    h.uplink("E1", "A")
    h.uplink("E2", "B")
    h.converge()
    at = {"edge-to-interior": ("E1", "B"), "interior-to-edge": ("A", "E2"), "edge-to-edge": ("E1", "E2")}[way]
    producer, consumer = h.client(at[0], "p"), h.client(at[1], "c")
    consumer.auto_accept = False
    rx = consumer.receiver("q")
    h.pump()
    rx.flow(10)
    h.advance(2.0)
    tx = producer.sender("q", rcv_settle_mode=RCV_SECOND) if second else producer.sender("q")
    h.advance(0.5)
    assert tx.credit > 0
    sent = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    (got,) = consumer.received[rx]  # type: ignore[index]
    rx.dispose(got.delivery_id, state=ACCEPTED, settled=False)
    h.pump()
    assert isinstance(producer.outcomes[sent], Accepted)
    if second:
        assert sent not in producer.settled and got.delivery_id not in consumer.remote_settled
        tx.dispose(sent, state=ACCEPTED, settled=True)
        h.pump()
    assert sent in producer.settled
    assert got.delivery_id in consumer.remote_settled
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
    """Whatever the two ends do and in whatever order: with a producer in rcv-settle-mode
    second, the consumer's delivery is settled by the router only once the producer has settled
    or gone (or the consumer settled it itself); in mode first, an outcome settles both ends at
    once; the producer learns every outcome and state the consumer set, and nothing is left
    held."""
    h, producer, consumer, tx, rx = _line(n, rcv_second)
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
            if rcv_second or not is_terminal(told):
                assert cid not in consumer.remote_settled, f"settled before the producer did, after {action}"
            else:  # rcv-settle-mode first: the router settles both ends with the outcome
                assert cid in consumer.remote_settled and sent in producer.settled, action
        if not rcv_second and producer_here and is_terminal(producer.outcomes.get(sent)):
            assert sent in producer.settled, action  # mode first: never an unsettled outcome
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
