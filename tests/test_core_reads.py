"""The routing core's read API (router/core/coreread.py) as its readers take it: snapshots made
as each is taken, so that a page of a few costs a few and a reader taking some at a time with
the router running between (the flow recorder) sees each record as it is when reached, and
router-wide totals summed in one pass. Run compiled as well (Makefile COMPILED_TESTS): compiled,
a generator expression is a list made whole, which these would catch."""

from __future__ import annotations

from router.config.models import RouterConfig
from router.testing.routerharness import RouterHarness

NOW = 1_000_000.0


def test_connection_snapshots_are_made_as_they_are_taken() -> None:
    harness = RouterHarness(RouterConfig())
    first, second = harness.connect("first"), harness.connect("second")
    assert first.engine and second.engine
    taken = harness.core.read.connections(NOW)
    before = next(taken)
    assert before.link_count == 0
    second.receiver("late")  # after the first was taken, before the second is
    harness.pump()
    (after,) = list(taken)
    assert after.container_id == "second" and after.link_count == 1


def test_links_gone_before_their_turn_are_skipped() -> None:
    harness = RouterHarness(RouterConfig())
    client = harness.connect()
    links = [client.receiver(f"queue/{n}") for n in range(3)]
    harness.pump()
    read = harness.core.read
    ids = {snapshot.id for snapshot in read.links(NOW)}
    assert len(ids) == 3
    taken = read.links_of(ids, NOW)
    reached = next(taken)
    for link in links:
        if link.name != reached.name:
            link.detach()
    harness.pump()
    assert list(taken) == []  # the other two went before their turn


def test_address_snapshots_are_made_as_they_are_taken() -> None:
    harness = RouterHarness(RouterConfig())
    client = harness.connect()
    client.receiver("a/1")
    client.receiver("a/2")
    harness.pump()
    taken = (snapshot for snapshot in harness.core.read.addresses(NOW) if snapshot.address.startswith("a/"))
    assert next(taken).address == "a/1"
    client.receiver("a/2")  # a second consumer of the address not yet reached
    harness.pump()
    (second,) = list(taken)
    assert second.address == "a/2" and second.consumers == 2


def test_totals_count_every_link_and_connection_in_one_pass() -> None:
    harness = RouterHarness(RouterConfig())
    idle = harness.connect("idle")  # no link: read without making its link sets
    busy = harness.connect("busy")
    busy.receiver("q").flow(10)
    sender = busy.sender("q")
    harness.pump()
    for _ in range(3):
        busy.send(sender, b"\x00Sw\xa1\x02hi")
    harness.pump()
    totals = harness.core.read.totals(NOW)
    assert (totals.connections, totals.links) == (2, 2)
    assert (totals.ingress, totals.egress, totals.accepted) == (3, 3, 3)
    assert idle.engine is not None
