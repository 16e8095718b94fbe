"""Across routers, sans-IO: a delivery held by the router it entered the mesh at goes on with its
header ttl reduced by the time it waited there (messaging §3.2.1, router.core.ttl), and the next
router counts its expiry from that reduced ttl. It waits at the ingress router for its data
link to the next router (the connection's output blocked), or for a local consumer's credit
until that consumer leaves and it is routed again to the other router."""

from __future__ import annotations

from typing import Any

from router.amqp.events import TransferReceived
from router.amqp.link import Link
from router.amqp.message import Message, decode_message, encode_message
from router.amqp.messaging import Header, Released
from router.config.models import AddressConfig
from router.core.links import InLink
from router.core.router import RouterCore
from router.testing.meshharness import MeshHarness
from router.testing.routerharness import Client

ADDRESSES = (AddressConfig(prefix="closest", distribution="closest"),)


def _two_routers() -> MeshHarness:
    h = MeshHarness()
    h.router("A", instance=1, addresses=ADDRESSES)
    h.router("B", instance=2, addresses=ADDRESSES)
    h.link("A", "B")
    h.converge()
    return h


def _arriving_at(h: MeshHarness, rid: str) -> list[bytes]:
    """The first frames that reach router `rid` from other routers, as they came."""
    seen: list[bytes] = []

    def observe(events: list[Any]) -> None:
        for event in events:
            if isinstance(event, TransferReceived) and event.first and isinstance(event.link.context, InLink):
                if event.link.context.peer is not None:
                    seen.append(bytes(event.payload))

    h.tap(rid, observe)
    return seen


def _consumer(h: MeshHarness, rid: str, address: str, credit: int) -> tuple[Client, Link]:
    consumer = h.client(rid, f"c-{rid}")
    rx = consumer.receiver(address)
    h.advance(0.5)  # the address reaches the other router
    if credit:
        rx.flow(credit)
        h.pump()
    return consumer, rx


def _producer(h: MeshHarness, address: str) -> tuple[Client, Link]:
    producer = h.client("A", "p")
    tx = producer.sender(address)
    h.pump()
    return producer, tx


def _held_at_a(h: MeshHarness, producer: Client, tx: Link, message: Message, seconds: float) -> int:
    """Send `message` while A cannot write to B, for `seconds`: it waits for A's data link to B."""
    a: RouterCore = h.cores["A"]
    to_b = a.mesh.peers["B"].conn.engine
    a.set_output_blocked(to_b, True, h.now)
    delivery = producer.send(tx, message)
    h.pump()
    h.advance(seconds)
    a.set_output_blocked(to_b, False, h.now)
    h.pump()
    return delivery


def test_a_message_held_at_the_ingress_router_reaches_the_other_router_with_the_reduced_ttl() -> None:
    h = _two_routers()
    at_b = _arriving_at(h, "B")
    consumer, rx = _consumer(h, "B", "orders", credit=10)
    producer, tx = _producer(h, "orders")
    _held_at_a(h, producer, tx, Message.value("m", header=Header(ttl=10_000)), 4.0)
    (crossed,) = at_b
    assert decode_message(crossed).header == Header(ttl=6_000)
    (received,) = consumer.received[rx]
    assert received.payload == encode_message(Message.value("m", header=Header(ttl=6_000)))


def test_the_next_router_expires_it_by_the_reduced_ttl() -> None:
    """ttl 10 s, 4 s held at A: B, whose consumer has no credit, expires it 6 s after it came
    (not 10 s), and the producer hears released."""
    h = _two_routers()
    _consumer(h, "B", "orders", credit=0)
    producer, tx = _producer(h, "orders")
    delivery = _held_at_a(h, producer, tx, Message.value("m", header=Header(ttl=10_000)), 4.0)
    waiting = h.cores["B"].table.entries["Morders"]
    assert len(waiting.pending) == 1
    h.advance(5.9)
    assert waiting.expired == 0 and delivery not in producer.outcomes
    h.advance(0.2)
    assert waiting.expired == 1
    assert isinstance(producer.outcomes[delivery], Released)


def test_a_large_message_held_at_the_ingress_router_crosses_whole_with_the_reduced_ttl() -> None:
    """Streamed in several transfers while A cannot write to B: it waits with all its frames,
    then goes on a streaming link (docs/mesh.md); only its first frame changes."""
    h = _two_routers()
    consumer, rx = _consumer(h, "B", "orders", credit=10)
    producer, tx = _producer(h, "orders")
    body = bytes(range(256)) * 1000
    sent = encode_message(Message.data(body, header=Header(ttl=10_000)))
    a = h.cores["A"]
    to_b = a.mesh.peers["B"].conn.engine
    a.set_output_blocked(to_b, True, h.now)
    for at in range(0, len(sent), 50_000):
        tx.send_transfer(b"big", sent[at : at + 50_000], more=at + 50_000 < len(sent))
        h.pump()
    h.advance(2.5)
    a.set_output_blocked(to_b, False, h.now)
    h.pump()
    (received,) = consumer.received[rx]
    assert received.payload == encode_message(Message.data(body, header=Header(ttl=7_500)))


def test_a_message_waiting_for_a_local_consumer_routed_again_to_the_other_router_has_the_reduced_ttl() -> None:
    """closest: the local consumer (no credit) wins; it leaves after 3 s, and the delivery goes
    to the consumer on B."""
    h = _two_routers()
    remote, remote_rx = _consumer(h, "B", "closest.q", credit=10)
    local, local_rx = _consumer(h, "A", "closest.q", credit=0)
    producer, tx = _producer(h, "closest.q")
    producer.send(tx, Message.value("m", header=Header(ttl=10_000)))
    h.pump()
    assert not remote.received[remote_rx]  # waiting at A for the local consumer
    h.advance(3.0)
    local_rx.detach()
    h.pump()
    (received,) = remote.received[remote_rx]
    assert received.message.header == Header(ttl=7_000)


def test_a_message_that_outlived_its_ttl_waiting_for_the_data_link_is_expired_there() -> None:
    """ttl 10 s, 12 s held at A for its data link to B: A expires it as the link takes it (the
    producer hears released, A's address counts it expired); B never sees it."""
    h = _two_routers()
    at_b = _arriving_at(h, "B")
    consumer, rx = _consumer(h, "B", "orders", credit=10)
    producer, tx = _producer(h, "orders")
    delivery = _held_at_a(h, producer, tx, Message.value("m", header=Header(ttl=10_000)), 12.0)
    assert at_b == [] and not consumer.received[rx]
    assert isinstance(producer.outcomes[delivery], Released)
    assert h.cores["A"].table.entries["Morders"].expired == 1


def test_a_multicast_copy_that_outlived_its_ttl_waiting_for_the_data_link_is_expired_there() -> None:
    """The same for a multicast copy bound for the other router: A expires it as the data link
    takes it (its copy released: the producer hears released, settled); B never sees it."""
    h = MeshHarness()
    multicast = (AddressConfig(prefix="mc", distribution="multicast"),)
    h.router("A", instance=1, addresses=multicast)
    h.router("B", instance=2, addresses=multicast)
    h.link("A", "B")
    h.converge()
    at_b = _arriving_at(h, "B")
    consumer, rx = _consumer(h, "B", "mc.news", credit=10)
    producer, tx = _producer(h, "mc.news")
    delivery = _held_at_a(h, producer, tx, Message.value("m", header=Header(ttl=10_000)), 12.0)
    assert at_b == [] and not consumer.received[rx]
    assert isinstance(producer.outcomes[delivery], Released) and delivery in producer.settled
    assert h.cores["A"].table.entries["Mmc.news"].expired == 1
