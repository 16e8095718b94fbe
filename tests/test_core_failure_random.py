"""A connection the core fails on, anywhere in random traffic, leaves nothing behind
(router.core.release), in process (router.testing.routerharness, no sockets).

Several clients attach producers and consumers of anycast and multicast addresses and send
settled and unsettled messages of one or several frames; consumers give credit and settle with
any outcome. One client is doomed: from a chosen step on, the `nth` call of one of the core's
per-message or attach/detach methods raises while the core handles that client's input. The
harness then does what the network layer does (the connection ends unwritten, the core forgets
it) and the others carry on. At the end every consumer left gives credit and settles what it
holds, and then: nothing of the failed connection remains in the core; every unsettled delivery
the others sent on a link still attached has a settled outcome; every message a consumer got
is one that was sent, whole; no delivery, unsettled count or byte is left counted; and a new
producer and consumer still exchange a message, on every address."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from router.amqp import events as ev
from router.amqp.endpoints import ACTIVE
from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified, Released
from router.config.models import AddressConfig, Listener, RouterConfig, RouterSection
from router.core.connections import ConnState
from router.testing.routerharness import Client, RouterHarness

from .support.random_traffic import (
    ADDRESSES, CORE_POINTS, FRAME, Peer, apply_step, drain, first_links, passes_whole, step_strategy, assert_served,
)  # fmt: skip
from .support.release_checks import needs_patchable_core, Fault, InjectedFault, assert_nothing_of, assert_quiet

pytestmark = needs_patchable_core  # every test here injects faults into the core

POINTS = CORE_POINTS + [("mesh", "consumers_changed")]


def config(unsettled: int = 4) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id="failing"),
        # A small unsettled bound: consumers reach it (bounds.reached) in a few messages.
        listeners=(Listener(name="amqp", port=0, max_frame_size=FRAME, max_unsettled_per_link=unsettled),),
        addresses=(AddressConfig(prefix="mc", distribution="multicast"),),
    )


class Harness(RouterHarness):
    """RouterHarness whose pump ends a connection the core raised on, as the network layer does:
    what the engine had to write is never written, and the core forgets it."""

    def __init__(self, unsettled: int = 4) -> None:
        super().__init__(config(unsettled))
        self.lost: list[Client] = []

    def handle(self, client: Client, events: list[Any]) -> None:
        try:
            super().handle(client, events)
        except InjectedFault:
            self.clients.remove(client)
            self.lost.append(client)
            self.core.forget(client.router_side, self.now)


def _step(h: Harness, peers: list[Peer], bodies: set[str], step: tuple[str, int, int, int, int]) -> None:
    peer = peers[step[1]]
    if peer.client in h.clients:
        apply_step(peer, bodies, step, most_links=3, settled_from=5)
        h.pump()


def _drain(h: Harness, peers: list[Peer]) -> None:
    drain(h.clients, peers, h.pump, also=lambda: len(h.core.connections))


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    links=st.lists(first_links(3), min_size=3, max_size=3),
    steps=st.lists(step_strategy(5), min_size=4, max_size=30),
    point=st.sampled_from(POINTS),
    nth=st.integers(1, 6),
    doomed=st.integers(0, 2),
    arm_at=st.integers(0, 6),
)
def test_a_failure_anywhere_leaves_nothing_behind_and_everyone_answered(
    links: list[list[tuple[str, int, int]]], steps: list[tuple[str, int, int, int, int]], point: tuple[str, str],
    nth: int, doomed: int, arm_at: int,
) -> None:  # fmt: skip
    h = Harness()
    unit, name = point
    fault = Fault(h.core, getattr(h.core, unit), name, nth)
    fault.armed = False  # armed at a random step below
    peers = [Peer(h.connect(f"c{i}")) for i in range(3)]
    for peer in peers:
        peer.client.auto_accept = False
    fault.doomed = peers[doomed].client.router_side
    state = peers[doomed].client.router_side.context
    assert isinstance(state, ConnState)
    bodies: set[str] = set()
    for who, first in enumerate(links):
        for kind, address, credit in first:
            _step(h, peers, bodies, (kind, who, address, credit, 0))
    for i, step in enumerate(steps):
        fault.armed = i >= arm_at
        _step(h, peers, bodies, step)
    fault.armed = True
    if not fault.fired:  # its links go, one by one (the failure may come on the way)
        peer = peers[doomed]
        for link in peer.producers + peer.consumers:
            if peer.client in h.clients and link.state.local is ACTIVE:
                link.detach(closed=True)
                h.pump()
    event(f"fired: {fault.fired}")
    if not fault.fired:  # the failure never came: the doomed connection ends the usual way
        fault.armed = False
        h.disconnect(peers[doomed].client)
    survivors = [p for i, p in enumerate(peers) if i != doomed]
    _drain(h, survivors)

    assert_nothing_of(h.core, state)
    assert_served(survivors, bodies, point)
    assert_quiet(h.core)

    # Everyone still serves: a new producer reaches every address, a new pair its own.
    fresh = h.connect("fresh")
    rx = fresh.receiver("fresh")
    rx.flow(1)
    h.pump()
    for address in [*ADDRESSES, "fresh"]:
        fresh.tags += 1
        tx = fresh.sender(address)
        h.pump()
        consumers = h.core.table.find(address)
        if consumers is None or not consumers.consumers:
            continue
        assert tx.credit > 0, address
        delivery_id = fresh.send(tx, Message.value(f"after-{address}"))
        _drain(h, [*survivors, Peer(fresh, consumers=[rx])])
        assert isinstance(fresh.outcomes.get(delivery_id), Accepted), (address, fresh.outcomes.get(delivery_id))
    assert fresh.bodies(rx) == ["after-fresh"]
    assert_quiet(h.core)


# --- the two leaks the random test was written to reach, each on its own ------------------------


def test_a_transfer_written_in_part_is_aborted_and_the_consumer_link_carries_on() -> None:
    """The core fails inside _send after the first frame of a multi-frame delivery went out on
    a consumer's link (more=true) and before the delivery was recorded as streaming there: the
    rest never comes. The consumer is told the delivery is aborted (transport §2.6.12, §2.7.5),
    and the next delivery on that link arrives whole: without the abort it would have been
    written as the continuation of the one left open."""
    h = Harness(unsettled=1)  # its first unsettled delivery puts the consumer at its bound
    consumer, producer = h.connect("consumer"), h.connect("producer")
    consumer.auto_accept = False
    rx = consumer.receiver("q")
    rx.flow(10)
    tx = producer.sender("q")
    h.pump()
    fault = Fault(h.core, h.core.bounds, "reached", 1)  # (called in _send once the transfer is written)
    fault.doomed, fault.armed = producer.router_side, True
    producer.send(tx, Message.value("cut" + "x" * 3 * FRAME))
    h.pump()
    assert fault.fired and producer in h.lost
    assert [e.aborted for e in consumer.events if isinstance(e, ev.TransferReceived)][-1]
    assert not consumer.partial.get(rx) and not consumer.received[rx]
    assert_quiet(h.core)
    other = h.connect("other")
    tx = other.sender("q")
    h.pump()
    passes_whole(h.pump, other, tx, consumer, rx, "whole" + "y" * 2 * FRAME)
    assert_quiet(h.core)


@pytest.mark.parametrize("presettled", [True, False], ids=["presettled", "unsettled"])
@pytest.mark.parametrize("doomed", ["producer", "consumer"])
def test_multicast_copies_cut_short_by_a_failure_are_finished(presettled: bool, doomed: str) -> None:
    """A failure while a multicast delivery's copies are being sent: the copies neither sent nor
    queued any more get their outcome (released), so the delivery finishes: its producer's
    in-flight count comes down (a presettled delivery has no other record that would), and an
    unsettled one's producer hears the outcome."""
    h = Harness()
    producer, first, second = h.connect("producer"), h.connect("first"), h.connect("second")
    rx1, rx2 = first.receiver("mc/x"), second.receiver("mc/x")
    rx1.flow(5)
    tx = producer.sender("mc/x")
    h.pump()
    if doomed == "producer":  # its transfer is being copied: the first copy goes, then the failure
        fault = Fault(h.core, h.core.forwarder, "_send_copy", 2)
        fault.doomed, fault.armed = producer.router_side, True
        rx2.flow(5)
        h.pump()
        delivery_id = producer.send(tx, Message.value("m"), settled=presettled)
        h.pump()
        survivors = [first, second]
    else:  # its credit takes the copy waiting for it, which fails on the way out
        delivery_id = producer.send(tx, Message.value("m"), settled=presettled)
        h.pump()
        fault = Fault(h.core, h.core.forwarder, "_send_copy", 1)
        fault.doomed, fault.armed = second.router_side, True
        rx2.flow(5)
        h.pump()
        survivors = [producer, first]
    assert fault.fired and len(h.lost) == 1
    assert first.bodies(rx1) == ["m"]
    for client in survivors:
        for rx in client.received:
            assert not client.partial.get(rx)
    if doomed == "consumer" and not presettled:
        assert isinstance(producer.outcomes[delivery_id], (Accepted, Released, Modified))
    assert_quiet(h.core)
