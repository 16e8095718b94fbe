"""Multicast deliveries, sans-IO: what a finished delivery leaves behind (nothing the cyclic
collector must find: the router runs with few young collections, router.cli.run.tune_gc), and
each copy's outcome combined into the producer's whatever mix of settle modes the copies have."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from router.amqp.events import TransferReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, RELEASED, Accepted, Modified, Rejected
from router.amqp.performatives import SND_SETTLED, SND_UNSETTLED, Error
from router.config.models import AddressConfig, RouterConfig, RouterSection
from router.core.delivery import Copy, Forward
from router.testing.routerharness import Client, RouterHarness

CONFIG = RouterConfig(router=RouterSection(id="R"), addresses=(AddressConfig(prefix="mc", distribution="multicast"),))


def _multicast(h: RouterHarness, consumers: int, credit: int = 100, **attach: object) -> tuple[Client, object, list[Client], list[object]]:
    producer = h.connect("p")
    clients = [h.connect(f"c{i}") for i in range(consumers)]
    receivers = [c.receiver("mc", **attach) for c in clients]  # type: ignore[arg-type]
    tx = producer.sender("mc")
    h.pump()
    for r in receivers:
        r.flow(credit)  # type: ignore[attr-defined]
    h.pump()
    return producer, tx, clients, receivers


@contextmanager
def _cycles_found() -> Iterator[list[object]]:
    """What the cyclic collector would have to free of what the block made (router records)."""
    found: list[object] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(o for o in gc.garbage if type(o) in (Forward, Copy))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("presettled", [False, True], ids=["unsettled", "presettled"])
def test_a_finished_multicast_delivery_leaves_no_cycle(presettled: bool) -> None:
    h = RouterHarness(CONFIG)
    producer, tx, clients, receivers = _multicast(h, 3)
    with _cycles_found() as found:
        ids = [producer.send(tx, Message.value(i), settled=presettled) for i in range(20)]  # type: ignore[arg-type]
        h.pump()
    assert all(c.bodies(r) == list(range(20)) for c, r in zip(clients, receivers))  # type: ignore[arg-type]
    if not presettled:
        assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)
    assert found == []


def test_an_aborted_multicast_stream_leaves_no_cycle() -> None:
    h = RouterHarness(CONFIG)
    producer, tx, clients, receivers = _multicast(h, 2)
    with _cycles_found() as found:
        tx.send_transfer(b"t", encode_message(Message.data(b"x" * 70000))[:50000], more=True)  # type: ignore[attr-defined]
        h.pump()
        tx.abort()  # type: ignore[attr-defined]
        h.pump()
    for c in clients:
        frames = [e for e in c.events if isinstance(e, TransferReceived)]
        assert frames and frames[-1].aborted
    assert found == []


def test_copies_settled_on_sending_and_by_the_consumer_combine() -> None:
    """One consumer takes its copies presettled (snd-settle-mode settled: accepted once sent),
    the other settles them itself: the producer hears once both are done, and nothing waits."""
    h = RouterHarness(CONFIG)
    producer = h.connect("p")
    settling, presettled = h.connect("a"), h.connect("b")
    settling.auto_accept = False
    ra = settling.receiver("mc")
    rb = presettled.receiver("mc", snd_settle_mode=SND_SETTLED)
    tx = producer.sender("mc")
    h.pump()
    ra.flow(10)
    rb.flow(10)
    h.pump()
    delivery_id = producer.send(tx, Message.value("m"))
    h.pump()
    assert [r.settled for r in presettled.received[rb]] == [True]
    assert delivery_id not in producer.outcomes  # the other copy is still unsettled
    ra.dispose(settling.received[ra][0].delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert isinstance(producer.outcomes[delivery_id], Accepted) and delivery_id in producer.settled
    assert all(s.context.outbound.empty for c in h.clients for s in c.router_side.sessions if s.context)


def test_every_consumer_of_a_copy_is_woken_once_a_round() -> None:
    h = RouterHarness(CONFIG)
    producer, tx, clients, receivers = _multicast(h, 3)
    h.core.take_touched()
    producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    data = producer.engine.data_to_send()
    producer.router_side.receive_data(data, h.now)
    h.core.handle(producer.router_side, producer.router_side.events(), h.now)
    touched = h.core.take_touched()
    assert len(touched) == len(set(touched))  # each engine once
    assert set(touched) >= {c.router_side for c in clients}


def test_touch_conn_marks_an_engine_once_a_round() -> None:
    h = RouterHarness(CONFIG)
    a, b = h.connect("a"), h.connect("b")
    h.core.take_touched()
    sa, sb = h.core.connections[a.router_side], h.core.connections[b.router_side]
    touched = h.core.touched
    for state in (sa, sb, sa, sb):
        touched.touch_conn(state)
    assert h.core.take_touched() == [a.router_side, b.router_side]
    touched.touch_conn(sa)  # a new round marks it again
    assert h.core.take_touched() == [a.router_side]
    touched.touch_conn(sb)
    touched.discard(b.router_side)  # nothing more can be written to it
    touched.touch_conn(sb)
    assert h.core.take_touched() == []


def test_touch_lists_an_engine_once_a_round() -> None:
    """By engine (most callers) as by connection state: alternating, repeated, mixed."""
    h = RouterHarness(CONFIG)
    a, b = h.connect("a"), h.connect("b")
    h.core.take_touched()
    touched = h.core.touched
    for engine in (a.router_side, b.router_side, a.router_side, a.router_side, b.router_side):
        touched.touch(engine)
    touched.touch_conn(h.core.connections[a.router_side])
    assert h.core.take_touched() == [a.router_side, b.router_side]
    touched.touch(b.router_side)  # the next round starts empty, and lists it again
    assert h.core.take_touched() == [b.router_side]
    assert h.core.take_touched() == []


@pytest.mark.parametrize("order", list(itertools.permutations(range(4))), ids=str)
def test_the_strongest_outcome_wins_whatever_the_order(order: tuple[int, ...]) -> None:
    """rejected > accepted > modified > released (docs/mesh.md, the anchors' rule)."""
    states = [RELEASED, Modified(delivery_failed=True), ACCEPTED, Rejected(error=Error(condition="app:no"))]
    h = RouterHarness(CONFIG)
    producer, tx, clients, receivers = _multicast(h, 4)
    for c in clients:
        c.auto_accept = False
    delivery_id = producer.send(tx, Message.value("m"))  # type: ignore[arg-type]
    h.pump()
    for i in order:
        c, r = clients[i], receivers[i]
        r.dispose(c.received[r][0].delivery_id, state=states[i], settled=True)  # type: ignore[attr-defined,index]
        h.pump()
    assert producer.outcomes[delivery_id] == states[3] and delivery_id in producer.settled


@pytest.mark.parametrize("unsettled_last", [False, True])
def test_a_presettled_delivery_to_a_consumer_taking_it_unsettled_finishes_once(unsettled_last: bool) -> None:
    """A consumer with snd-settle-mode unsettled gets its copy unsettled (a record); the delivery
    finishes, and leaves its producer's window, exactly once whichever copy goes last."""
    h = RouterHarness(CONFIG)
    producer = h.connect("p")
    plain, strict = h.connect("a"), h.connect("b")
    tx = producer.sender("mc")
    h.pump()
    links = [(plain, plain.receiver("mc")), (strict, strict.receiver("mc", snd_settle_mode=SND_UNSETTLED))]
    h.pump()  # (the order they attached in is the order of the copies)
    if not unsettled_last:
        links.reverse()
    for _, rx in links:
        rx.flow(10)  # type: ignore[attr-defined]
    h.pump()
    producer.send(tx, Message.value("m"), settled=True)  # type: ignore[arg-type]
    h.pump()
    assert [r.settled for r in strict.received[links[-1 if unsettled_last else 0][1]]] == [False]
    (inl,) = h.core.connections[producer.router_side].in_links
    assert inl.inflight == 0 and inl.held == 0
