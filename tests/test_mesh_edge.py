"""Edge routers, sans-IO: an edge uses one uplink to an interior router at a time and fails over
to the next; it sends what it cannot deliver locally up; it tells its interior which mobile
addresses it has consumers for, and the interior advertises them and delivers to the edge.
Edges take no part in the inter-router protocol."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified, Properties
from router.config.models import AddressConfig
from router.core.edgemsg import decode_addresses, encode_addresses
from router.core.edgemsg import MESH_ADDRESSES, MESH_REQUEST, MeshAddresses, decode, encode_mesh_addresses, encode_request
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client

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
    assert h.cores["E1"].mesh.edges.active == "B" and h.cores["E1"].mesh.edges.as_edge.failovers == 1
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
    _consumer(h, "A", "anything")
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


# --- credit on the edge follows destinations in the mesh (as on an interior) ----------------------


def _edge_producer(h: MeshHarness, rid: str, address: str) -> tuple[Client, Any]:
    producer = h.client(rid, f"p-{rid}-{address}")
    tx = producer.sender(address)
    h.pump()
    return producer, tx


@pytest.mark.parametrize("where", ["A", "B", "E1"])
def test_an_edge_producer_gets_credit_only_while_a_consumer_exists_somewhere(where: str) -> None:
    h = _mesh()
    producer, tx = _edge_producer(h, "E2", "orders")
    h.advance(1.0)
    assert tx.credit == 0  # no consumer anywhere: nothing may be sent (as on an interior)
    consumer, rx = _consumer(h, where, "orders")
    h.advance(0.5)
    assert tx.credit > 0
    sent = producer.send(tx, Message.value("hello"))
    h.pump()
    assert consumer.bodies(rx) == ["hello"] and isinstance(producer.outcomes[sent], Accepted)
    rx.detach()
    h.advance(1.0)
    assert tx.credit == 0  # drained when the last destination went away


def test_an_edge_whose_own_consumer_is_the_only_one_gets_no_credit_from_its_uplink() -> None:
    h = _mesh()
    consumer, rx = _consumer(h, "E1", "solo")
    h.advance(1.0)
    # The interiors know E1 consumes `solo`, but they tell E1 only about other destinations.
    assert "solo" not in h.cores["E1"].mesh.edges.mesh_addresses["A"]
    assert "solo" in h.cores["E2"].mesh.edges.mesh_addresses["B"]
    producer, tx = _edge_producer(h, "E1", "solo")
    assert tx.credit > 0  # its local consumer
    rx.detach()
    h.advance(1.0)
    assert tx.credit == 0


def test_after_failover_the_new_uplinks_view_gives_credit() -> None:
    h = _mesh()
    _consumer(h, "B", "jobs")
    producer, tx = _edge_producer(h, "E1", "jobs")
    h.advance(0.5)
    assert tx.credit > 0
    h.cut(h.wire_between("E1", "A"))
    assert h.cores["E1"].mesh.edges.active == "B"
    h.advance(0.5)
    assert tx.credit > 0
    sent = producer.send(tx, Message.value("via B"))
    h.pump()
    assert isinstance(producer.outcomes[sent], Accepted)


def test_an_edge_that_misses_a_change_asks_for_the_whole_set() -> None:
    h = _mesh()
    _consumer(h, "A", "kept")
    h.advance(0.5)
    e2 = h.cores["E2"].mesh.edges
    uplinks = e2.as_edge
    peer = e2.uplinks["B"]
    seq = uplinks.mesh_seq["B"]
    # A change from B that skips one: E2 must not trust its set, and asks B for the whole set.
    e2.on_control(peer, encode_mesh_addresses("B", seq + 2, False, ["ghost"], []), h.now)
    assert "ghost" not in uplinks.mesh_addresses["B"] and "B" in uplinks.awaiting_full
    h.pump()
    assert "B" not in uplinks.awaiting_full
    assert "kept" in uplinks.mesh_addresses["B"] and "ghost" not in uplinks.mesh_addresses["B"]


@pytest.mark.parametrize("then", ["the whole set comes", "the uplink goes"])
def test_an_edge_stops_its_retry_timer_once_no_whole_set_is_awaited(then: str) -> None:
    # The retry deadline of a request for an uplink's whole set stayed once nothing was awaited
    # any more; in the past, it was the router's next deadline for ever and its timer ticked
    # without pause (a busy loop): after any change an uplink skipped and answered, or an
    # uplink lost while asked.
    h = _mesh()
    h.advance(1.0)  # (B answers a request for the whole set at most once per half hello interval)
    e2 = h.cores["E2"]
    uplinks = e2.mesh.edges.as_edge
    peer = e2.mesh.edges.uplinks["B"]
    e2.mesh.edges.on_control(peer, encode_mesh_addresses("B", uplinks.mesh_seq["B"] + 2, False, ["x"], []), h.now)
    assert "B" in uplinks.awaiting_full
    if then == "the uplink goes":
        h.cut(h.wire_between("E2", "B"))
    h.pump()
    assert not uplinks.awaiting_full
    h.advance(5.0)
    deadline = e2.next_deadline()
    assert deadline is None or deadline > h.now


def test_mesh_address_messages_round_trip_and_reject_garbage() -> None:
    from router.amqp.message import encode_message

    assert decode(encode_mesh_addresses("A", 4, False, ["x"], ["y"])) == (MESH_ADDRESSES, MeshAddresses(4, False, ["x"], ["y"]))
    assert decode(encode_request("E")) == (MESH_REQUEST, None)
    bad = [
        {"op": "MESH-ADDRESSES", "pv": 1, "seq": "1", "full": True, "add": [], "remove": []},
        {"op": "MESH-ADDRESSES", "pv": 1, "seq": 1, "full": 1, "add": [], "remove": []},
        {"op": "MESH-ADDRESSES", "pv": 1, "seq": 1, "full": True, "add": [b"x"], "remove": []},
        {"op": "MESH-ADDRESSES", "pv": 1, "seq": 1, "full": True, "add": None, "remove": []},
        {"op": "NOPE", "pv": 1},
        {"op": "MESH-ADDRESSES", "pv": True},
    ]
    for body in bad:
        assert decode(encode_message(Message.value(body))) is None, body
    assert decode(encode_message(Message.value({"op": "MESH-ADDRESSES", "pv": 2}))) == ("", None)  # newer: ignored


# --- what edges learn stays right whatever changes and whatever is lost (hypothesis) -------------

CHURN = st.lists(st.tuples(st.sampled_from(["A", "B", "E1", "E2"]), st.sampled_from(["a0", "a1", "a2"]), st.booleans()),
                 min_size=1, max_size=12)  # fmt: skip


@settings(max_examples=40, deadline=None)
@given(churn=CHURN, drops=st.lists(st.booleans(), max_size=40))
@example(churn=[("E2", "a0", True), ("B", "a0", True)], drops=[])  # a second consumer, the first an edge's
@example(churn=[("E1", "a0", True), ("E1", "a1", True)], drops=[True, True, False, False, False, True])  # the whole set lost
def test_edges_learn_exactly_the_addresses_with_destinations_elsewhere(churn: list[tuple[str, str, bool]], drops: list[bool]) -> None:
    """Consumers come and go on interiors and edges while MESH-ADDRESSES messages are lost (a
    full control queue drops the oldest, so a later message always follows): once quiet, each
    edge's view of its active uplink is exactly the addresses with a consumer other than its own."""
    h = _mesh()
    lost = iter(drops)
    for rid in ("A", "B"):
        mesh = h.cores[rid].mesh
        send = mesh.send_control

        def lossy(peer: Any, payload: bytes, send: Any = send) -> None:
            if b"MESH-ADDRESSES" in payload and b"REQUEST" not in payload and next(lost, False):
                return  # lost
            send(peer, payload)

        mesh.send_control = lossy  # type: ignore[method-assign]
    links: dict[tuple[str, str], list[Any]] = {}
    for rid, address, attach in churn:
        held = links.setdefault((rid, address), [])
        if attach:
            _, link = _consumer(h, rid, address)
            held.append(link)
        elif held:
            held.pop().detach()
            h.advance(0.5)
    drops.clear()  # nothing more is lost: a last change reaches every edge
    _consumer(h, "A", "last")
    h.advance(2.0)
    for edge, uplink in (("E1", "A"), ("E2", "B")):
        edges = h.cores[edge].mesh.edges
        assert edges.active == uplink
        expected = {a for (rid, a), held in links.items() if held and rid != edge} | {"last"}
        seen = {a for a in edges.mesh_addresses[uplink] if not a.startswith("$")}
        assert seen == expected, (edge, churn)


def test_an_edge_flooding_requests_for_the_whole_set_gets_one_per_half_hello_interval() -> None:
    h = _mesh()
    b = h.cores["B"].mesh
    peer = b.edges.edges["E2"]
    sent = []
    send = b.send_control
    b.send_control = lambda p, payload: (sent.append(payload), send(p, payload))  # type: ignore[method-assign, func-returns-value]
    for _ in range(100):
        b.edges.on_control(peer, encode_request("E2"), h.now)
        b.service(h.now)
    fulls = [m for m in sent if decode(m) is not None and decode(m)[1].full]  # type: ignore[index, union-attr]
    assert len(fulls) <= 1
    h.advance(0.6)
    b.edges.on_control(peer, encode_request("E2"), h.now)
    b.service(h.now)
    assert len([m for m in sent if decode(m) is not None and decode(m)[1].full]) == len(fulls) + 1  # type: ignore[index, union-attr]
