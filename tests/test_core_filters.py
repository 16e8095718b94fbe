"""Source filters in the routing core, sans-IO (router.core.filtering): anycast only to matching
consumers (released when none matches), multicast copies only to matching ones, waiting
deliveries kept for the consumer they match, no-local, the attach echo and refusals, and a
two-router mesh where the consumer's router decides."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.filters import CAPABILITIES, DIRECT, NO_LOCAL, SELECTOR, TOPIC
from router.amqp.message import Message
from router.amqp.messaging import Accepted, Properties, Released, Source
from router.amqp.selector import matches, parse
from router.amqp.types import Described, Symbol
from router.config.models import AddressConfig, RouterConfig, RouterSection
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client, RouterHarness

MULTICAST = (AddressConfig(prefix="mc", distribution="multicast"),)


def _harness() -> RouterHarness:
    return RouterHarness(RouterConfig(router=RouterSection(id="R1"), addresses=MULTICAST))


def _filtered(client: Client, address: str, credit: int = 10, **filters: Described) -> Any:
    source = Source(address=address, filter={Symbol(k): v for k, v in filters.items()} or None)
    return client.receiver(address, source=source)


def sel(text: str) -> Described:
    return Described(Symbol(SELECTOR), text)


def _message(i: int, color: str, subject: str = "s") -> Message:
    return Message.value(i, properties=Properties(subject=subject), application_properties={"color": color})


def test_anycast_goes_only_to_a_matching_consumer_and_is_released_when_none_matches() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    blue = _filtered(consumer, "orders", f=sel("color = 'blue'"))
    sender = producer.sender("orders")
    h.pump()
    red.flow(10)
    blue.flow(10)
    h.pump()
    ids = [producer.send(sender, _message(i, c)) for i, c in enumerate(["red", "blue", "green", "red"])]
    h.pump()
    assert consumer.bodies(red) == [0, 3]
    assert consumer.bodies(blue) == [1]
    assert isinstance(producer.outcomes[ids[0]], Accepted)
    assert isinstance(producer.outcomes[ids[2]], Released) and ids[2] in producer.settled


def test_a_waiting_delivery_waits_for_the_consumer_it_matches() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    blue = _filtered(consumer, "orders", f=sel("color = 'blue'"))
    sender = producer.sender("orders")
    h.pump()
    producer.send(sender, _message(0, "red"))
    producer.send(sender, _message(1, "blue"))
    h.pump()
    blue.flow(5)  # only blue has credit: it takes only the blue one
    h.pump()
    assert consumer.bodies(blue) == [1] and consumer.bodies(red) == []
    red.flow(5)
    h.pump()
    assert consumer.bodies(red) == [0]


def test_waiting_deliveries_are_released_when_their_matching_consumer_goes() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    blue = _filtered(consumer, "orders", f=sel("color = 'blue'"))
    sender = producer.sender("orders")
    h.pump()
    delivery = producer.send(sender, _message(0, "red"))
    h.pump()
    assert delivery not in producer.outcomes  # waits for red's credit
    red.detach()
    h.pump()
    assert isinstance(producer.outcomes[delivery], Released)
    blue.flow(5)
    h.pump()
    assert consumer.bodies(blue) == []


def test_drain_ends_when_only_unmatched_deliveries_wait() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    blue = _filtered(consumer, "orders", f=sel("color = 'blue'"))
    sender = producer.sender("orders")
    h.pump()
    producer.send(sender, _message(0, "red"))
    h.pump()
    blue.flow(5, drain=True)
    h.pump()
    assert blue.credit == 0 and consumer.bodies(blue) == []  # drained: nothing for it
    red.flow(1)
    h.pump()
    assert consumer.bodies(red) == [0]


def test_multicast_copies_only_to_matching_consumers() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    stocks = _filtered(consumer, "mc.x", f=Described(Symbol(TOPIC), "*.stock.#"))
    eu = _filtered(consumer, "mc.x", f=Described(Symbol(DIRECT), "eur.stock"))
    everything = consumer.receiver("mc.x")
    sender = producer.sender("mc.x")
    h.pump()
    for link in (stocks, eu, everything):
        link.flow(10)
    h.pump()
    for i, subject in enumerate(["usd.stock", "eur.stock", "stock.nasdaq"]):
        producer.send(sender, _message(i, "x", subject))
    h.pump()
    assert consumer.bodies(stocks) == [0, 1]
    assert consumer.bodies(eu) == [1]
    assert consumer.bodies(everything) == [0, 1, 2]


def test_no_local_skips_the_consumers_own_connection() -> None:
    h = _harness()
    alice, bob = h.connect("alice"), h.connect("bob")
    mine = _filtered(alice, "mc.chat", f=Described(Symbol(NO_LOCAL), []))
    theirs = _filtered(bob, "mc.chat", f=Described(Symbol(NO_LOCAL), []))
    alice_tx, bob_tx = alice.sender("mc.chat"), bob.sender("mc.chat")
    h.pump()
    mine.flow(10)
    theirs.flow(10)
    h.pump()
    alice.send(alice_tx, Message.value("from alice"))
    bob.send(bob_tx, Message.value("from bob"))
    h.pump()
    assert alice.bodies(mine) == ["from bob"]
    assert bob.bodies(theirs) == ["from alice"]


def test_attach_echoes_the_filters_applied_keyed_as_received() -> None:
    h = _harness()
    consumer = h.connect("c")
    known = sel("color = 'red'")
    link = _filtered(consumer, "orders", s=known, mine=Described(Symbol("example:unknown"), "x"))
    h.pump()
    source = link.remote_source
    assert isinstance(source, Source)
    assert source.filter == {Symbol("s"): known}
    assert tuple(source.capabilities or ()) == (Symbol("APACHE.ORG:SELECTOR"),)
    opened = consumer.engine.remote_open
    assert opened is not None and set(CAPABILITIES) <= set(opened.offered_capabilities or ())


def test_an_invalid_selector_is_refused_naming_the_position_and_others_go_on() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    bad = _filtered(consumer, "orders", s=sel("color = = 'red'"))
    good = consumer.receiver("orders")
    sender = producer.sender("orders")
    h.pump()
    assert bad.remote_source is None  # attach-then-detach: refused
    assert bad.remote_error is not None and bad.remote_error.condition == E.INVALID_FIELD
    assert "position 8" in (bad.remote_error.description or "")
    good.flow(1)
    h.pump()
    producer.send(sender, Message.value("still here"))
    h.pump()
    assert consumer.bodies(good) == ["still here"]


def test_two_routers_the_consumers_router_decides_and_releases_back() -> None:
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.link("A", "B")
    h.converge()
    producer, consumer = h.client("A", "p"), h.client("B", "c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    h.advance(0.5)
    red.flow(10)
    sender = producer.sender("orders")
    h.pump()
    first = producer.send(sender, _message(0, "red"))
    second = producer.send(sender, _message(1, "blue"))
    h.pump()
    assert consumer.bodies(red) == [0]
    assert isinstance(producer.outcomes[first], Accepted)
    assert isinstance(producer.outcomes[second], Released) and second in producer.settled


def _two_routers(**router: Any) -> MeshHarness:
    h = MeshHarness()
    h.router("A", instance=1, **router)
    h.router("B", instance=2, **router)
    h.link("A", "B")
    h.converge()
    return h


def test_two_routers_a_local_consumer_that_does_not_match_leaves_it_to_the_other_router() -> None:
    h = _two_routers()
    producer, near, far = h.client("A", "p"), h.client("A", "near"), h.client("B", "far")
    blue_here = _filtered(near, "orders", f=sel("color = 'blue'"))
    red_there = _filtered(far, "orders", f=sel("color = 'red'"))
    h.advance(0.5)
    blue_here.flow(10)
    red_there.flow(10)
    sender = producer.sender("orders")
    h.pump()
    ids = [producer.send(sender, _message(i, c)) for i, c in enumerate(["red", "blue", "red"])]
    h.pump()
    assert far.bodies(red_there) == [0, 2] and near.bodies(blue_here) == [1]
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)


def test_two_routers_multicast_copies_are_filtered_on_each_consumers_router() -> None:
    h = _two_routers(addresses=MULTICAST)
    producer, near, far = h.client("A", "p"), h.client("A", "near"), h.client("B", "far")
    everything = near.receiver("mc.news")
    sport = _filtered(far, "mc.news", f=Described(Symbol(TOPIC), "sport.#"))
    h.advance(0.5)
    everything.flow(10)
    sport.flow(10)
    sender = producer.sender("mc.news")
    h.pump()
    ids = [producer.send(sender, _message(i, "x", s)) for i, s in enumerate(["sport.ski", "weather", "sport"])]
    h.pump()
    assert near.bodies(everything) == [0, 1, 2]
    assert far.bodies(sport) == [0, 2]
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)  # the strongest outcome wins


def test_a_streamed_message_whose_first_frame_cuts_its_properties_passes_no_reading_filter() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    sender = producer.sender("orders")
    h.pump()
    red.flow(10)
    h.pump()
    big = Message.value("big", application_properties={"color": "red", "pad": "x" * 100_000})
    delivery = producer.send(sender, big)  # split in frames: the first ends inside the map
    small = producer.send(sender, _message(1, "red"))
    h.pump()
    assert isinstance(producer.outcomes[delivery], Released)
    assert consumer.bodies(red) == [1] and isinstance(producer.outcomes[small], Accepted)


def test_a_presettled_message_no_consumer_matches_is_dropped_and_counted() -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    sender = producer.sender("orders")
    h.pump()
    red.flow(10)
    h.pump()
    producer.send(sender, _message(0, "blue"), settled=True)
    producer.send(sender, _message(1, "red"), settled=True)
    h.pump()
    assert consumer.bodies(red) == [1]
    entry = h.core.table.lookup("orders")
    assert entry is not None and entry.dropped == 1


def test_an_edge_routers_consumer_is_filtered_on_the_edge() -> None:
    h = MeshHarness()
    h.router("I", instance=1)
    h.router("E", instance=2, mode="edge")
    h.uplink("E", "I")
    h.converge()
    producer, consumer = h.client("I", "p"), h.client("E", "c")
    red = _filtered(consumer, "orders", f=sel("color = 'red'"))
    h.advance(0.5)
    red.flow(10)
    sender = producer.sender("orders")
    h.pump()
    first = producer.send(sender, _message(0, "blue"))
    second = producer.send(sender, _message(1, "red"))
    h.pump()
    assert consumer.bodies(red) == [1]
    assert isinstance(producer.outcomes[first], Released) and isinstance(producer.outcomes[second], Accepted)


def test_topo_all_copies_are_filtered_for_local_address_consumers_too() -> None:
    h = _two_routers()
    producer, near, far = h.client("A", "p"), h.client("A", "near"), h.client("B", "far")
    red_here = _filtered(near, "_local/svc", f=sel("color = 'red'"))
    red_there = _filtered(far, "_local/svc", f=sel("color = 'red'"))
    h.pump()
    red_here.flow(10)
    red_there.flow(10)
    sender = producer.sender("_topo/0/all/svc")
    h.pump()
    producer.send(sender, _message(0, "blue"))
    producer.send(sender, _message(1, "red"))
    h.pump()
    assert near.bodies(red_here) == [1] and far.bodies(red_there) == [1]


_SELECTORS = ["color = 'red'", "color IN ('red', 'blue')", "NOT color = 'red'", "weight > 2", "color IS NULL"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_SELECTORS + [None]), min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from(["red", "blue", "green", None]), st.integers(0, 4)), min_size=1, max_size=8),
       st.sampled_from(["orders", "mc.orders"]))  # fmt: skip
def test_every_delivery_reaches_only_consumers_it_matches_or_is_released(
    selectors: list[str | None], messages: list[tuple[str | None, int]], address: str
) -> None:
    h = _harness()
    producer, consumer = h.connect("p"), h.connect("c")
    links = [_filtered(consumer, address, **({"f": sel(s)} if s else {})) for s in selectors]
    sender = producer.sender(address)
    h.pump()
    for link in links:
        link.flow(20)
    h.pump()
    props = [{k: v for k, v in (("color", color), ("weight", weight)) if v is not None} for color, weight in messages]
    ids = [producer.send(sender, Message.value(i, application_properties=p)) for i, p in enumerate(props)]
    h.pump()
    wanted = [[s is None or matches(parse(s), p.get) for s in selectors] for p in props]
    for i, delivery in enumerate(ids):
        got_by = [n for n, link in enumerate(links) if i in consumer.bodies(link)]
        assert all(wanted[i][n] for n in got_by)  # only consumers it matches
        if address == "mc.orders":
            assert got_by == [n for n, ok in enumerate(wanted[i]) if ok]  # every one of them
        else:
            assert len(got_by) == (1 if any(wanted[i]) else 0)
        outcome = producer.outcomes[delivery]
        assert isinstance(outcome, Accepted if any(wanted[i]) else Released)
