"""The core's read API (router.core.coreread): frozen snapshots of its links, addresses,
connections and totals, sans-IO through one router. Router-wide totals hold what links that are
gone counted, and a snapshot does not change when the core does."""

from __future__ import annotations

import dataclasses

import pytest

from router.amqp.message import Message
from router.testing.routerharness import RouterHarness


def test_totals_keep_what_a_detached_producer_counted_and_snapshots_do_not_follow_the_core() -> None:
    h = RouterHarness()
    producer, consumer = h.connect("p"), h.connect("c")
    rx = consumer.receiver("q")
    tx = producer.sender("q")
    h.pump()
    rx.flow(10)
    h.pump()
    for i in range(3):
        producer.send(tx, Message.value(i))
    h.pump()
    read = h.core.read
    links = read.links(h.now)
    # By link id: the producer's link (its connection was made first), then the consumer's.
    assert [(link.incoming, link.table_key, link.address, link.delivered) for link in links] == [
        (True, "Mq", "q", 3), (False, "Mq", "q", 3)]  # fmt: skip
    before = read.totals(h.now)
    assert (before.ingress, before.egress, before.accepted, before.links) == (3, 3, 3, 2)
    address = read.address("Mq", None, h.now)
    assert address is not None and (address.consumers, address.producers, address.ingress) == (1, 1, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        address.consumers = 5  # type: ignore[misc]

    tx.detach(closed=True)
    h.pump()
    after = read.totals(h.now)
    assert (after.ingress, after.accepted, after.links) == (3, 3, 1)  # the gone producer's counts stay
    assert (before.links, address.producers) == (2, 1)  # earlier snapshots are unchanged
    assert read.address(None, "q", h.now) == dataclasses.replace(address, producers=0)
    assert [c.link_count for c in read.connections(h.now)] == [0, 1]  # the producer's connection first
