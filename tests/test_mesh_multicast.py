"""Multicast across the mesh, sans-IO: one copy per local consumer and per distinct next hop,
exactly once on redundant meshes (full mesh, ring, diamond), combined outcomes across routers,
`_topo/0/all/x` to every router, and deliveries whose trace shows a loop dropped and counted."""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from typing import Any

import pytest

from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.message import Message, encode_message
from router.amqp.messaging import RELEASED, Accepted, Properties, Rejected, Released, Source, Target
from router.amqp.performatives import Error
from router.config.models import AddressConfig
from router.core.connections import new_engine
from router.core.interrouter import COST_PROPERTY, DATA_CAPABILITY, ROLE_PROPERTY, VERSION_PROPERTY
from router.testing.meshharness import INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

MULTICAST = (AddressConfig(prefix="mc", distribution="multicast"),)


def _mesh(ids: str, links: list[tuple[str, str]]) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1, addresses=MULTICAST)
    for a, b in links:
        h.link(a, b)
    h.converge()
    return h


TOPOLOGIES = {
    "full-mesh-4": ("ABCD", list(combinations("ABCD", 2))),
    "ring-4": ("ABCD", [("A", "B"), ("B", "C"), ("C", "D"), ("D", "A")]),
    "diamond": ("ABCD", [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")]),
    "ring-5-with-chord": ("ABCDE", [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E"), ("E", "A"), ("B", "E")]),
}


def _consumers(h: MeshHarness, address: str, per_router: int = 1) -> dict[str, tuple[Client, list[Any]]]:
    out = {}
    for rid in h.cores:
        client = h.client(rid, f"c{rid}")
        out[rid] = (client, [client.receiver(address) for _ in range(per_router)])
    h.advance(0.5)
    for _, links in out.values():
        for link in links:
            link.flow(1000)
    h.pump()
    return out


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
@pytest.mark.parametrize("origin", ["A", "C"])
def test_every_consumer_gets_each_message_exactly_once(name: str, origin: str) -> None:
    ids, links = TOPOLOGIES[name]
    h = _mesh(ids, links)
    consumers = _consumers(h, "mc.news", per_router=2 if name == "diamond" else 1)
    producer = h.client(origin, "p")
    tx = producer.sender("mc.news")
    h.pump()
    assert tx.credit > 0
    sent = [producer.send(tx, Message.value(i)) for i in range(20)]
    h.pump()
    for rid, (client, rx_links) in consumers.items():
        for link in rx_links:
            assert client.bodies(link) == list(range(20)), f"consumer on {rid}"
    assert Counter(type(producer.outcomes[d]).__name__ for d in sent) == {"Accepted": 20}
    assert sum(c.mesh.dropped_loop for c in h.cores.values()) == 0


def test_presettled_multicast_reaches_every_router_once_on_a_ring() -> None:
    ids, links = TOPOLOGIES["ring-4"]
    h = _mesh(ids, links)
    consumers = _consumers(h, "mc.ticks")
    producer = h.client("B", "p")
    tx = producer.sender("mc.ticks")
    h.pump()
    for i in range(10):
        producer.send(tx, Message.value(i), settled=True)
    h.pump()
    for client, (link,) in consumers.values():
        assert client.bodies(link) == list(range(10))


def test_outcomes_of_copies_on_several_routers_combine_rejected_first() -> None:
    h = _mesh("ABC", [("A", "B"), ("B", "C")])
    consumers = _consumers(h, "mc.x")
    for client, _ in consumers.values():
        client.auto_accept = False
    producer = h.client("A", "p")
    tx = producer.sender("mc.x")
    h.pump()
    delivery = producer.send(tx, Message.value("m"))
    h.pump()
    states = {"A": Accepted(), "B": RELEASED, "C": Rejected(error=Error(condition="app:no"))}
    for rid, (client, (link,)) in consumers.items():
        (received,) = client.received[link]
        link.dispose(received.delivery_id, state=states[rid], settled=True)
        h.pump()
        if rid != "C":
            assert delivery not in producer.settled  # settled upstream when every copy is terminal
    assert isinstance(producer.outcomes[delivery], Rejected) and delivery in producer.settled


def test_multicast_to_routers_without_consumers_is_not_sent_there() -> None:
    h = _mesh("ABC", [("A", "B"), ("B", "C")])
    consumer = h.client("B", "c")
    rx = consumer.receiver("mc.y")
    h.advance(0.5)
    rx.flow(10)
    producer = h.client("A", "p")
    tx = producer.sender("mc.y")
    h.pump()
    producer.send(tx, Message.value(1))
    h.pump()
    assert consumer.bodies(rx) == [1]
    entry = h.cores["B"].table.find("mc.y")
    assert entry is not None and entry.deliveries_transit == 0


def test_topo_all_reaches_the_local_address_on_every_router() -> None:
    h = _mesh("ABCD", TOPOLOGIES["ring-4"][1])
    receivers = {}
    for rid in "ABCD":
        client = h.client(rid, f"svc{rid}")
        link = client.receiver("_local/svc")
        receivers[rid] = (client, link)
    h.pump()
    for client, link in receivers.values():
        link.flow(10)
    producer = h.client("A", "p")
    tx = producer.sender("_topo/0/all/svc")
    h.pump()
    assert tx.credit > 0
    delivery = producer.send(tx, Message.value("to everyone"))
    h.pump()
    for client, link in receivers.values():
        assert client.bodies(link) == ["to everyone"]
    assert isinstance(producer.outcomes[delivery], Accepted)


class FakeRouter:
    """A hand-driven peer that claims to be router `rid` on an inter-router listener and sends
    raw deliveries on its data link (for annotations a real router would never send)."""

    def __init__(self, h: MeshHarness, to: str, rid: str = "X") -> None:
        core = h.cores[to]
        self.h = h
        router_side = new_engine(core.config, INTER_ROUTER)
        core.accept(router_side, INTER_ROUTER)
        self.engine = Connection(ConnectionConfig(container_id=rid))
        self.client = Client(rid, self.engine, router_side)
        from router.testing.meshharness import Wire

        h.wires.append(Wire(self.engine, router_side, None, core, a_client=self.client, name=rid))
        self.engine.open(properties={ROLE_PROPERTY: "inter-router", VERSION_PROPERTY: 1, COST_PROPERTY: 1})
        h.pump()
        session = self.engine.begin_session()
        self.data = session.attach_sender("x-data", source=Source(), target=Target(capabilities=(DATA_CAPABILITY,)))
        h.pump()

    def send(self, annotations: dict[str, Any], to: str = "mc.z") -> int:
        message = Message.value("m", message_annotations=annotations, properties=Properties(to=to))
        delivery = self.data.send_transfer(b"t", encode_message(message))
        self.h.pump()
        return delivery


def test_a_delivery_whose_trace_shows_a_loop_is_dropped_and_counted() -> None:
    h = _mesh("AB", [("A", "B")])
    consumers = _consumers(h, "mc.z")
    fake = FakeRouter(h, "A")
    assert fake.data.credit > 0
    looped = fake.send({"x-opt-qd.ingress": "B", "x-opt-qd.trace": ["B", "A", "X"]})
    too_long = fake.send({"x-opt-qd.ingress": "Q", "x-opt-qd.trace": ["Q", "R", "S", "T", "X"]})
    assert isinstance(fake.client.outcomes[looped], Released)
    assert isinstance(fake.client.outcomes[too_long], Released)
    assert h.cores["A"].mesh.dropped_loop == 2
    assert all(client.bodies(link) == [] for client, (link,) in consumers.values())


def test_malformed_router_annotations_are_rejected() -> None:
    h = _mesh("AB", [("A", "B")])
    fake = FakeRouter(h, "A")
    bad = fake.send({"x-opt-qd.trace": "not-a-list"})
    outcome = fake.client.outcomes[bad]
    assert isinstance(outcome, Rejected) and outcome.error is not None
    assert outcome.error.condition == "amqp:decode-error"


def test_a_router_annotation_that_is_not_utf8_is_rejected() -> None:
    h = _mesh("AB", [("A", "B")])
    _consumers(h, "mc.z")
    fake = FakeRouter(h, "A")
    message = Message.value("m", message_annotations={"x-opt-qd.to": "zz"}, properties=Properties(to="mc.z"))
    payload = encode_message(message).replace(b"\xa1\x02zz", b"\xa1\x02\xff\xfe")
    bad = fake.data.send_transfer(b"t", payload)
    h.pump()
    outcome = fake.client.outcomes[bad]
    assert isinstance(outcome, Rejected) and outcome.error is not None
    assert outcome.error.condition == "amqp:decode-error"
    assert fake.send({"x-opt-qd.ingress": "X", "x-opt-qd.trace": ["X"]}) in fake.client.outcomes  # still works
