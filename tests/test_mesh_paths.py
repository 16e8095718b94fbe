"""Path choices are remembered per kind of delivery (router.core.remote.Paths): they must follow
the routes and data links as they are now. Sans-IO, on a diamond A-B-D, A-C-D with consumers
on B and C (both one hop from A)."""

from __future__ import annotations

import functools
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.amqp.message import Message, encode_message
from router.amqp.messaging import Properties
from router.config.models import AddressConfig
from router.core import remote
from router.core.addressentry import AddressEntry
from router.core.annotparse import Record
from router.core.delivery import Forward, Meta
from router.core.links import OutLink
from router.testing.meshharness import MeshHarness


def _diamond() -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate("ABCD"):
        h.router(rid, instance=i + 1, addresses=(AddressConfig(prefix="near", distribution="closest"),))
    for a, b in (("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")):
        h.link(a, b)
    h.converge()
    for rid in "BC":
        consumer = h.client(rid, f"c{rid}")
        for address in ("far", "near"):
            consumer.receiver(address).flow(10)
    h.advance(0.5)
    return h


@pytest.mark.parametrize("address", ["far", "near"], ids=["balanced", "closest"])
def test_a_data_link_gone_since_a_choice_was_made_is_not_chosen(address: str) -> None:
    h = _diamond()
    mesh = h.cores["A"].mesh
    entry = h.cores["A"].table.lookup(address)
    assert entry is not None and entry.remote == {"B", "C"}
    payload = encode_message(Message.value("m", properties=Properties(to=address)))
    fwd = Forward(None, -1, True, payload, len(payload), True, entry, 0)
    chosen = {remote.anycast(mesh, fwd, address == "far")[0].neighbour for _ in range(4)}  # type: ignore[index]
    assert chosen == ({"B"} if address == "far" else {"B", "C"})  # balanced: the first of equals
    # the link to B goes before the mesh hears of it (routes and links unchanged)
    mesh.links["B"].gone = True
    for _ in range(4):
        choice = remote.anycast(mesh, fwd, address == "far")
        assert choice is not None and choice[0] is mesh.links["C"]


def test_choices_follow_the_routes_after_a_router_is_lost() -> None:
    h = _diamond()
    producer = h.client("A", "p")
    tx = producer.sender("near")
    h.pump()
    for i in range(4):
        producer.send(tx, Message.value(i))
    h.pump()
    h.kill("B")
    h.advance(1.0)  # routes recomputed without B
    sent_via_c = h.cores["A"].mesh.links["C"].delivered
    for i in range(4):
        producer.send(tx, Message.value(i))
    h.pump()
    assert h.cores["A"].mesh.links["C"].delivered == sent_via_c + 4
    assert set(h.cores["A"].mesh.links) == {"C"}


def test_a_choice_remembered_on_an_address_lets_a_lost_neighbours_links_go() -> None:
    # The last choice for an idle address named the data link of a neighbour whose connection
    # is gone: remembered on the address entry, it kept that connection (its engine, sessions
    # and links) alive until the address had another delivery, perhaps never.
    h = _diamond()
    producer = h.client("A", "p")
    tx = producer.sender("near")
    h.pump()
    producer.send(tx, Message.value(0))
    h.pump()
    entry = h.cores["A"].table.find("near")
    assert entry is not None and entry.remembered is not None and entry.remembered.known is not None
    h.kill("B")
    h.kill("C")
    h.advance(1.0)  # routes recomputed without B and C
    known = entry.remembered.known if entry.remembered is not None else None
    assert not [out for candidates in known or () for _, _, out in candidates if out.gone]


def _transit_meta(trace: tuple[str, ...]) -> Meta:
    """A delivery's metadata as annotparse.parse makes it for a section from router X."""
    record = Record(None, "X", trace, [])
    meta = Meta("near", False, record.ingress, record.trace, None, 0, True, "X")
    meta.record = record
    return meta


def test_a_loop_check_remembered_on_a_record_is_made_again_under_new_routes() -> None:
    # A trace longer than radius + 1 is a loop (remote.looped); the record keeps the answer only
    # while the routes it was found under stand: a router joining far away raises the radius.
    h = MeshHarness()
    for i, rid in enumerate("AB"):
        h.router(rid, instance=i + 1)
    h.link("A", "B")
    h.converge()
    mesh = h.cores["A"].mesh
    meta = _transit_meta(("X", "Y", "Z"))
    radius = mesh.routes.radius
    assert remote.looped(mesh, meta) == (3 > radius + 1)
    assert remote.looped(mesh, meta) == (3 > radius + 1)  # (remembered)
    h.router("C", instance=3)
    h.link("B", "C")
    h.converge()
    assert mesh.routes.radius > radius
    assert remote.looped(mesh, meta) == (3 > mesh.routes.radius + 1)


def test_a_choice_remembered_on_a_record_follows_the_destinations_and_the_routes() -> None:
    h = _diamond()
    mesh = h.cores["A"].mesh
    entry = h.cores["A"].table.lookup("near")
    assert entry is not None
    payload = encode_message(Message.value("m", properties=Properties(to="near")))
    fwd = Forward(None, -1, True, payload, len(payload), True, entry, 0)
    fwd.meta = meta = _transit_meta(("X",))
    assert meta.record is not None
    chosen = {remote.anycast(mesh, fwd, False)[0].neighbour for _ in range(4)}  # type: ignore[index]
    assert chosen == {"B", "C"}
    assert meta.record.remembered is not None and meta.record.remembered.remote is entry.remote
    # C's consumer goes: the address's destinations change (a new set), so the choice does too
    h.cut(next(w for w in h.wires if w.name == "cC@C"))
    h.advance(0.5)
    assert entry.remote == {"B"}
    chosen = {remote.anycast(mesh, fwd, False)[0].neighbour for _ in range(4)}  # type: ignore[index]
    assert chosen == {"B"}
    # B is lost: the routes change (the Paths are cleared) and no path is left
    generation = mesh.paths.generation
    h.kill("B")
    h.advance(1.0)
    assert mesh.paths.generation > generation
    assert remote.anycast(mesh, fwd, False) is None


def test_an_anonymous_link_finds_the_address_entry_made_after_the_one_it_used() -> None:
    # Forwarder._lookup keeps the entry of a link's last address while the table is unchanged:
    # the consumer leaving removes the entry and a new consumer makes another one.
    h = MeshHarness()
    h.router("A", instance=1)
    producer = h.client("A", "p")
    relay = producer.sender(None)
    first = h.client("A", "c1")
    rx1 = first.receiver("q")
    rx1.flow(10)
    h.pump()
    producer.send(relay, Message.value(1, properties=Properties(to="q")))
    h.pump()
    assert first.bodies(rx1) == [1]
    old = h.cores["A"].table.find("q")
    h.cut(next(w for w in h.wires if w.name == "c1@A"))
    assert h.cores["A"].table.find("q") is None
    second = h.client("A", "c2")
    rx2 = second.receiver("q")
    rx2.flow(10)
    h.pump()
    assert h.cores["A"].table.find("q") not in (None, old)
    producer.send(relay, Message.value(2, properties=Properties(to="q")))
    h.pump()
    assert second.bodies(rx2) == [2]


@functools.cache
def _data_links() -> list[OutLink]:
    """Real data links (the checks are typed: compiled, a stand-in object would not do)."""
    mesh = _diamond().cores["A"].mesh
    return [out for peer in mesh.peers.values() for out in (peer.bands or [peer.data_out]) if out is not None]


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2)), max_size=60))
def test_an_addresss_unsettled_counts_per_data_link_match_a_plain_count(steps: list[tuple[bool, int]]) -> None:
    # AddressEntry.sent_on / settled_on keep the last link's count at hand; what balanced anycast
    # and management read (remote_out) must be the plain count, links with none left out.
    entry = AddressEntry("Mq", "q", "balanced")
    links = _data_links()[:3]
    expected: Counter[int] = Counter()
    for sent, i in steps:
        if sent:
            entry.sent_on(links[i])
            expected[i] += 1
        else:
            entry.settled_on(links[i])
            if expected[i]:
                expected[i] -= 1
        assert {links.index(out): c.n for out, c in entry.remote_out.items()} == +expected
