"""Edge routers, sans-IO: an edge uses one uplink to an interior router at a time and fails over
to the next; it sends what it cannot deliver locally up; it tells its interior which mobile
addresses it has consumers for, and the interior advertises them and delivers to the edge.
Edges take no part in the inter-router protocol."""

from __future__ import annotations

from collections import Counter
from typing import Any

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified, Properties
from router.config.models import AddressConfig
from router.core.edge import decode_addresses, encode_addresses
from tests.meshharness import MeshHarness
from tests.routerharness import Client

MULTICAST = (AddressConfig(prefix="mc", distribution="multicast"),)


def _mesh(**router: Any) -> MeshHarness:
    """Interiors A - B; edge E1 with uplinks to A (first) and B; edge E2 with an uplink to B."""
    h = MeshHarness()
    h.router("A", instance=1, **router)
    h.router("B", instance=2, **router)
    h.router("E1", mode="edge", **router)
    h.router("E2", mode="edge", **router)
    h.link("A", "B")
    h.uplink("E1", "A")
    h.uplink("E1", "B")
    h.uplink("E2", "B")
    h.converge()
    return h


def _consumer(h: MeshHarness, rid: str, address: str, credit: int = 100) -> tuple[Client, Any]:
    client = h.client(rid, f"c-{rid}-{address}")
    link = client.receiver(address)
    h.advance(0.5)
    link.flow(credit)
    h.pump()
    return client, link


def test_edges_take_no_part_in_the_topology() -> None:
    h = _mesh()
    assert h.cores["A"].mesh.routes.reachable == {"B"}
    assert h.cores["E1"].mesh.node is None
    assert h.cores["E1"].mesh.edges.active == "A"
    assert sorted(h.cores["A"].mesh.edges.edges) == ["E1"] and sorted(h.cores["B"].mesh.edges.edges) == ["E1", "E2"]
    assert h.cores["E1"].mesh.edge_connections() == {"uplinks": ["A", "B"], "active": "A", "failovers": 0}
    _consumer(h, "E2", "x")
    assert h.cores["B"].mesh.edge_connections() == {"edges": {"E1": [], "E2": ["x"]}}


def test_an_interior_delivers_to_a_consumer_on_an_edge() -> None:
    h = _mesh()
    consumer, rx = _consumer(h, "E1", "orders")
    assert h.cores["A"].mesh.node.local_addresses == {"orders"}  # type: ignore[union-attr]
    assert h.cores["B"].mesh.node.routers_for("orders") == {"A"}  # type: ignore[union-attr]
    producer = h.client("B", "p")
    tx = producer.sender("orders")
    h.pump()
    assert tx.credit > 0
    ids = [producer.send(tx, Message.value(i)) for i in range(5)]
    h.pump()
    assert consumer.bodies(rx) == [0, 1, 2, 3, 4]
    assert all(isinstance(producer.outcomes[i], Accepted) for i in ids)
    assert consumer.received[rx][0].message.message_annotations is None  # no router annotations


def test_edge_to_edge_through_the_interiors() -> None:
    h = _mesh()
    consumer, rx = _consumer(h, "E1", "jobs")
    producer = h.client("E2", "p")
    tx = producer.sender("jobs")
    anonymous = producer.sender(None)
    h.pump()
    assert tx.credit > 0  # an edge gives credit while an uplink is up
    first = producer.send(tx, Message.value("targeted"))
    second = producer.send(anonymous, Message.value("anonymous", properties=Properties(to="jobs")))
    h.pump()
    assert consumer.bodies(rx) == ["targeted", "anonymous"]
    assert isinstance(producer.outcomes[first], Accepted) and isinstance(producer.outcomes[second], Accepted)


def test_an_edge_delivers_locally_first_and_sends_the_rest_up() -> None:
    h = _mesh()
    local, lrx = _consumer(h, "E1", "here")
    far, frx = _consumer(h, "A", "there")
    producer = h.client("E1", "p")
    here, there = producer.sender("here"), producer.sender("there")
    h.pump()
    producer.send(here, Message.value(1))
    producer.send(there, Message.value(2))
    h.pump()
    assert local.bodies(lrx) == [1] and far.bodies(frx) == [2]
    entry = h.cores["E1"].table.find("here")
    assert entry is not None and entry.deliveries_transit == 0


def test_an_edge_fails_over_to_its_next_uplink() -> None:
    h = _mesh()
    consumer, rx = _consumer(h, "E1", "orders")
    consumer.auto_accept = False
    producer = h.client("B", "p")
    tx = producer.sender("orders")
    h.pump()
    before = producer.send(tx, Message.value("before"))
    h.pump()
    h.cut(h.wire_between("E1", "A"))
    assert isinstance(producer.outcomes[before], Modified)  # in doubt: it was on the lost uplink
    assert h.cores["E1"].mesh.edges.active == "B" and h.cores["E1"].mesh.edges.failovers == 1
    h.advance(0.5)
    assert h.cores["B"].mesh.node.local_addresses == {"orders"}  # type: ignore[union-attr]
    assert h.cores["A"].mesh.node.routers_for("orders") == {"B"}  # type: ignore[union-attr]
    consumer.auto_accept = True
    after = producer.send(tx, Message.value("after"))
    h.pump()
    assert consumer.bodies(rx)[-1] == "after"
    assert isinstance(producer.outcomes[after], Accepted)


def test_an_edge_without_uplinks_drains_its_producers() -> None:
    h = _mesh()
    producer = h.client("E2", "p")
    tx = producer.sender("anything")
    h.pump()
    assert tx.credit > 0
    h.cut(h.wire_between("E2", "B"))
    assert tx.credit == 0


def test_multicast_with_edges_has_no_echo_and_no_duplicates() -> None:
    h = _mesh(addresses=MULTICAST)
    consumers = [_consumer(h, rid, "mc.news") for rid in ("E1", "A", "B", "E2")]
    for origin in ("E1", "B"):
        producer = h.client(origin, f"p{origin}")
        tx = producer.sender("mc.news")
        h.pump()
        for i in range(5):
            producer.send(tx, Message.value(f"{origin}{i}"))
        h.pump()
    for client, link in consumers:
        counts = Counter(client.bodies(link))
        assert sorted(counts) == sorted(f"{o}{i}" for o in ("E1", "B") for i in range(5))
        assert max(counts.values()) == 1


def test_edge_address_messages_round_trip_and_reject_garbage() -> None:
    assert decode_addresses(encode_addresses("E", 3, ["a", "b"])) == ["a", "b"]
    assert decode_addresses(b"\x00\x53\x77\xa1\x01x") is None
    from router.amqp.message import encode_message

    newer = encode_message(Message.value({"op": "EDGE-ADDRESSES", "pv": 9, "addresses": []}))
    assert decode_addresses(newer) is None
