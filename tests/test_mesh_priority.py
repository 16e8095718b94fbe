"""Priorities on inter-router links, sans-IO (docs/mesh.md, "Priorities"): every level crosses a
chain on its band's data link with its outcome back at the sender; an address's configured
priority overrides the header's; a small urgent message overtakes a large streaming one; a lost
neighbour gives every delivery in flight on every band an outcome; a router with one data link
and one with bands work together."""

from __future__ import annotations

from typing import Any

from router.amqp.events import TransferReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, Accepted, Header, Modified, Released
from router.config.models import PRIORITY_BANDS_DEFAULT, AddressConfig
from router.core.links import InLink
from router.core.paths import band_of
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client


def _line(*ids: str, bands: dict[str, int] | None = None, **router: Any) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1, **router)
        # (about the bands: large messages stream on their band's link, as with no streaming
        # link free; tests/test_mesh_streaming_links.py has those)
        h.cores[rid].mesh.streaming_links = 0
        if bands and rid in bands:  # (a section of its own: the harness's defaults are shared)
            core = h.cores[rid]
            core.mesh.priority_bands = bands[rid]
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    h.converge()
    return h


def _arrivals(h: MeshHarness, rid: str) -> list[tuple[str, bytes]]:
    """(data link name, first frame) of deliveries arriving at `rid` from other routers."""
    seen: list[tuple[str, bytes]] = []

    def observe(events: list[object]) -> None:
        for event in events:
            if isinstance(event, TransferReceived) and event.first:
                ctx = event.link.context
                if isinstance(ctx, InLink) and ctx.peer is not None:
                    seen.append((event.link.name, bytes(event.payload)))

    h.tap(rid, observe)
    return seen


def _band_name(sender: str, receiver: str, band: int, bands: int = PRIORITY_BANDS_DEFAULT) -> str:
    default = band_of(4, bands)
    return f"{sender}>{receiver}/data" if band == default else f"{sender}>{receiver}/data.{band}"


def _message(body: Any, priority: int | None) -> Message:
    return Message.value(body, header=Header(priority=priority) if priority is not None else None)


def _clients(h: MeshHarness, at_p: str, at_c: str, *addresses: str) -> tuple[Client, Client, dict[str, Any], dict[str, Any]]:
    producer, consumer = h.client(at_p, "p"), h.client(at_c, "c")
    receivers = {a: consumer.receiver(a) for a in addresses}
    h.advance(0.5)
    for rx in receivers.values():
        rx.flow(100)
    senders = {a: producer.sender(a) for a in addresses}
    h.pump()
    return producer, consumer, senders, receivers


def test_every_priority_crosses_a_chain_on_its_band_and_its_outcome_comes_back() -> None:
    h = _line("A", "B", "C")
    at_b, at_c = _arrivals(h, "B"), _arrivals(h, "C")
    producer, consumer, tx, rx = _clients(h, "A", "C", "orders")
    deliveries = {}
    for priority in [None, *range(10), 200]:
        deliveries[priority] = producer.send(tx["orders"], _message(priority, priority))
    h.pump()
    assert consumer.bodies(rx["orders"]) == [None, *range(10), 200]
    for delivery in deliveries.values():
        assert isinstance(producer.outcomes[delivery], Accepted) and delivery in producer.settled
    # each went on its band's link, hop by hop (no header: 4; 200 counts as 9)
    expected = [band_of(4 if p is None else p, PRIORITY_BANDS_DEFAULT) for p in deliveries]
    assert [name for name, _ in at_b] == [_band_name("A", "B", band) for band in expected]
    assert [name for name, _ in at_c] == [_band_name("B", "C", band) for band in expected]
    assert len({name for name, _ in at_c}) == PRIORITY_BANDS_DEFAULT


def test_the_address_priority_overrides_the_header() -> None:
    h = MeshHarness()
    rule = AddressConfig(prefix="alerts", priority=9)
    h.router("A", instance=1, addresses=(rule,))
    h.router("B", instance=2, addresses=(rule,))
    h.link("A", "B")
    h.converge()
    at_b = _arrivals(h, "B")
    producer, consumer, tx, rx = _clients(h, "A", "B", "alerts", "orders")
    producer.send(tx["alerts"], _message("a", 0))
    producer.send(tx["orders"], _message("o", 0))
    h.pump()
    assert consumer.bodies(rx["alerts"]) == ["a"] and consumer.bodies(rx["orders"]) == ["o"]
    assert [name for name, _ in at_b] == [_band_name("A", "B", PRIORITY_BANDS_DEFAULT - 1), _band_name("A", "B", 0)]
    # at run time too (management's CREATE): addresses looked up from then on
    h.cores["A"].table.remove_rule(h.cores["A"].table.matcher.lookup("alerts"))  # type: ignore[arg-type]
    h.cores["A"].table.add_rule(AddressConfig(prefix="orders", priority=9))
    producer.send(tx["alerts"], _message("a2", 0))
    producer.send(tx["orders"], _message("o2", 0))
    h.pump()
    assert [name for name, _ in at_b[2:]] == [_band_name("A", "B", 0), _band_name("A", "B", PRIORITY_BANDS_DEFAULT - 1)]


def _overtake(bands: int) -> tuple[list[str], Client, dict[str, int]]:
    """A large low-priority message streams A -> B -> C; half-way a small urgent one is sent.
    Returns the bodies in the order their last frames reached the consumer, after the urgent
    one was sent and pumped through, and at the end."""
    h = _line("A", "B", "C", bands={"A": bands, "B": bands, "C": bands})
    producer, consumer, tx, rx = _clients(h, "A", "C", "bulk", "urgent")
    big = encode_message(_message(b"x" * 600_000, 0))
    half = len(big) // 2
    bulk_id = tx["bulk"].send_transfer(b"big", big[:half], more=True)
    h.pump()
    assert consumer.partial.get(rx["bulk"]), "the large message is on its way to the consumer"
    urgent_id = producer.send(tx["urgent"], _message("urgent", 9))
    h.pump()
    early = [r.message.body_value for link in (rx["bulk"], rx["urgent"]) for r in consumer.received[link]]
    tx["bulk"].send_transfer(b"big", big[half:])
    h.pump()
    assert consumer.bodies(rx["bulk"]) == [b"x" * 600_000] and consumer.bodies(rx["urgent"]) == ["urgent"]
    return early, producer, {"bulk": bulk_id, "urgent": urgent_id}


def test_a_small_urgent_message_overtakes_a_large_streaming_one() -> None:
    early, producer, ids = _overtake(PRIORITY_BANDS_DEFAULT)
    assert early == ["urgent"]  # delivered while the large one was still streaming
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids.values())


def test_with_one_band_the_urgent_message_waits_for_the_stream() -> None:
    early, producer, ids = _overtake(1)
    assert early == []  # behind the large message on the one data link
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids.values())


def test_a_lost_neighbour_gives_every_delivery_on_every_band_an_outcome() -> None:
    h = _line("A", "B", "C")
    producer, consumer, tx, rx = _clients(h, "A", "C", "orders")
    consumer.auto_accept = False  # everything stays in flight
    sent = [producer.send(tx["orders"], _message(i, i % 10)) for i in range(30)]
    h.pump()
    assert len(consumer.received[rx["orders"]]) == 30
    peer = h.cores["A"].mesh.peers["B"]
    assert peer.bands is not None
    busy = [out for out in peer.bands if out.outstanding]
    assert len(busy) == PRIORITY_BANDS_DEFAULT  # in flight on every band
    h.cut(h.wire_between("A", "B"))
    for delivery in sent:
        assert isinstance(producer.outcomes.get(delivery), (Released, Modified)), delivery
        assert delivery in producer.settled
    # the consumer's late accepts go nowhere, and nothing is left outstanding at A
    for received in consumer.received[rx["orders"]]:
        rx["orders"].dispose(received.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert all(not out.outstanding for out in peer.bands)


def test_a_router_with_one_data_link_and_one_with_bands_work_together() -> None:
    h = _line("A", "B", "C", bands={"A": 1})
    at_b, at_a = _arrivals(h, "B"), _arrivals(h, "A")
    assert h.cores["A"].mesh.peers["B"].bands is None
    assert len(h.cores["A"].mesh.peers["B"].conn.out_links) == 1
    # B takes A's one link and still sends on its bands to A
    assert len(h.cores["B"].mesh.peers["A"].conn.out_links) == PRIORITY_BANDS_DEFAULT
    for src, dst in (("A", "C"), ("C", "A")):
        producer, consumer, tx, rx = _clients(h, src, dst, f"to-{dst}")
        sent = [producer.send(tx[f"to-{dst}"], _message(p, p)) for p in range(10)]
        h.pump()
        assert consumer.bodies(rx[f"to-{dst}"]) == list(range(10))
        assert all(isinstance(producer.outcomes[d], Accepted) for d in sent)
    assert {name for name, _ in at_b if name.startswith("A>")} == {"A>B/data"}
    assert {name for name, _ in at_a} == {_band_name("B", "A", b) for b in range(PRIORITY_BANDS_DEFAULT)}


def test_management_creates_an_address_priority_and_shows_it_on_the_address() -> None:
    from .support.mgmt import MgmtHarness

    m = MgmtHarness()
    consumers = m.h.connect("consumers")
    status, _, rule = m.op("CREATE", {"prefix": "alerts", "priority": 8}, type="address", name="alerts")
    assert status == 201 and rule["priority"] == 8
    for address in ("alerts.disk", "orders"):
        consumers.receiver(address)
    m.h.pump()
    assert m.op("READ", type="router.address", name="alerts.disk")[2]["priority"] == 8
    assert m.op("READ", type="router.address", name="orders")[2]["priority"] == -1  # the header's
    assert m.op("CREATE", {"prefix": "bad", "priority": 10}, type="address", name="bad")[0] == 400
    assert m.op("DELETE", type="address", name="alerts")[0] == 204
    assert m.op("READ", type="router.address", name="alerts.disk")[2]["priority"] == -1


def refused_attaches(h: MeshHarness, rid: str) -> dict[str, str]:
    """Pump: the links `rid` attached that its peer refused (detached with an error), by name."""
    from router.amqp.events import RemoteDetach

    seen: list[Any] = []
    h.tap(rid, lambda events: seen.extend(e for e in events if isinstance(e, RemoteDetach)))
    h.pump()
    return {e.link.name: e.error.condition for e in seen if e.error is not None}


def test_a_peer_attaching_more_data_links_than_levels_is_refused_beyond_them() -> None:
    from router.amqp.messaging import Source, Target
    from router.core.interrouter import DATA_CAPABILITY, DATA_LINKS_IN_MAX

    h = _line("A", "B")
    wire = h.wire_between("A", "B")
    a_side = wire.a if wire.a_core is h.cores["A"] else wire.b
    b_engine = wire.b if a_side is wire.a else wire.a
    assert len(h.cores["A"].mesh.peers["B"].conn.in_links) == PRIORITY_BANDS_DEFAULT
    session = b_engine.begin_session()
    extra = [session.attach_sender(f"B>A/extra.{i}", source=Source(address=None),
                                   target=Target(address=None, capabilities=(DATA_CAPABILITY,)))  # fmt: skip
             for i in range(DATA_LINKS_IN_MAX)]  # fmt: skip
    refused = refused_attaches(h, "B")
    allowed = DATA_LINKS_IN_MAX - PRIORITY_BANDS_DEFAULT
    # (links B's core did not make: what B then does with them is beside the point here)
    assert refused == {link.name: "amqp:resource-limit-exceeded" for link in extra[allowed:]}


def test_multicast_copies_go_on_their_band_links() -> None:
    h = MeshHarness()
    rule = AddressConfig(prefix="news", distribution="multicast")
    for i, rid in enumerate("ABC"):
        h.router(rid, instance=i + 1, addresses=(rule,))
    h.link("A", "B")
    h.link("B", "C")
    h.converge()
    at_b, at_c = _arrivals(h, "B"), _arrivals(h, "C")
    producer = h.client("A", "p")
    consumers = [h.client(rid, f"c{rid}") for rid in "BC"]
    receivers = [c.receiver("news") for c in consumers]
    h.advance(0.5)
    for rx in receivers:
        rx.flow(100)
    tx = producer.sender("news")
    h.pump()
    for priority in (0, 9, 4):
        producer.send(tx, _message(priority, priority))
    h.pump()
    for consumer, rx in zip(consumers, receivers):
        assert consumer.bodies(rx) == [0, 9, 4]
    bands = [band_of(p, PRIORITY_BANDS_DEFAULT) for p in (0, 9, 4)]
    assert [name for name, _ in at_b] == [_band_name("A", "B", band) for band in bands]
    assert [name for name, _ in at_c] == [_band_name("B", "C", band) for band in bands]


def test_band_links_a_peer_refuses_fall_back_to_the_default_data_link(monkeypatch: Any) -> None:
    from router.core import interrouter

    monkeypatch.setattr(interrouter, "DATA_LINKS_IN_MAX", 2)  # each router takes /data and one band
    h = _line("A", "B")
    peer = h.cores["A"].mesh.peers["B"]
    assert peer.bands is not None and peer.data_out is not None and not peer.data_out.gone
    gone = [out for out in peer.bands if out.gone]
    assert len(gone) == PRIORITY_BANDS_DEFAULT - 2
    at_b = _arrivals(h, "B")
    producer, consumer, tx, rx = _clients(h, "A", "B", "orders")
    sent = [producer.send(tx["orders"], _message(p, p)) for p in range(10)]
    h.pump()
    assert consumer.bodies(rx["orders"]) == list(range(10))
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent)
    live = {out.link.name for out in peer.bands if not out.gone}
    assert {name for name, _ in at_b} <= live and "A>B/data" in live
