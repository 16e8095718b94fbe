"""Mobile addresses across the mesh, sans-IO: a router advertises an address while it has local
consumers; other routers record it as a remote destination; producers get credit while a
destination exists anywhere and are drained when the last one goes."""

from __future__ import annotations

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Properties, Source
from router.testing.meshharness import MeshHarness


def _mesh(*ids: str) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1)
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    h.converge()
    return h


def _remote(h: MeshHarness, rid: str, address: str) -> frozenset[str]:
    node = h.cores[rid].mesh.node
    assert node is not None
    return node.routers_for(address)


def test_first_consumer_advertises_and_last_one_withdraws() -> None:
    h = _mesh("A", "B", "C")
    consumer = h.client("C", "c")
    r1 = consumer.receiver("orders")
    r2 = consumer.receiver("orders")
    h.advance(0.5)
    assert _remote(h, "A", "orders") == {"C"} and _remote(h, "B", "orders") == {"C"}
    assert h.cores["C"].mesh.node.local_addresses == {"orders"}  # type: ignore[union-attr]
    r1.detach()
    h.advance(0.5)
    assert _remote(h, "A", "orders") == {"C"}  # one consumer left
    r2.detach()
    h.advance(0.5)
    assert _remote(h, "A", "orders") == frozenset() and _remote(h, "B", "orders") == frozenset()


def test_local_and_dynamic_addresses_are_not_advertised() -> None:
    h = _mesh("A", "B")
    consumer = h.client("B", "c")
    consumer.receiver("_local/private")
    consumer.receiver(None, source=Source(dynamic=True))
    h.advance(0.5)
    assert h.cores["A"].mesh.node.address_table() == {}  # type: ignore[union-attr]


def test_a_sender_gets_credit_for_a_remote_consumer_and_is_drained_when_it_goes() -> None:
    h = _mesh("A", "B", "C")
    producer = h.client("A", "p")
    sender = producer.sender("orders")
    h.pump()
    assert sender.credit == 0  # no destination anywhere
    consumer = h.client("C", "c")
    receiver = consumer.receiver("orders")
    h.advance(0.5)
    assert sender.credit == 256  # the first window: 16 MiB of 64 KiB frames (link capacity 1000)
    entry = h.cores["A"].table.find("orders")
    assert entry is not None and entry.remote == {"C"} and not entry.consumers
    receiver.detach()
    h.advance(0.5)
    assert sender.credit == 0  # the last destination anywhere left: drained
    assert entry.remote == frozenset()
    sender.detach()
    h.pump()
    assert h.cores["A"].table.find("orders") is None  # unused and advertised by no one: gone


def test_consumers_on_two_routers_are_both_destinations() -> None:
    h = _mesh("A", "B", "C")
    for rid in ("A", "C"):
        h.client(rid, f"c{rid}").receiver("jobs")
    h.advance(0.5)
    assert _remote(h, "B", "jobs") == {"A", "C"}
    assert _remote(h, "A", "jobs") == {"C"}  # its own consumer is local, not remote


def test_an_anonymous_sender_reaches_an_address_known_only_remotely() -> None:
    h = _mesh("A", "B")
    producer, consumer = h.client("A", "p"), h.client("B", "c")
    receiver = consumer.receiver("remote-only")
    h.advance(0.5)
    receiver.flow(5)
    anonymous = producer.sender(None)
    h.pump()
    entry = h.cores["A"].table.find("remote-only")  # every router lists every mobile address
    assert entry is not None and entry.remote == {"B"} and not entry.consumers
    delivery = producer.send(anonymous, Message.value("hi", properties=_to("remote-only")))
    h.pump()
    assert consumer.bodies(receiver) == ["hi"]
    assert isinstance(producer.outcomes[delivery], Accepted)
    unknown = producer.send(anonymous, Message.value("x", properties=_to("nobody")))
    h.pump()
    assert type(producer.outcomes[unknown]).__name__ == "Released"


def test_a_late_router_learns_existing_addresses() -> None:
    h = _mesh("A", "B")
    h.client("A", "c").receiver("early")
    h.advance(0.5)
    h.router("C", instance=3)
    h.link("B", "C")
    h.converge()
    assert _remote(h, "C", "early") == {"A"}


def _to(address: str) -> Properties:
    return Properties(to=address)
