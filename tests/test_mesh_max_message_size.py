"""Consumers' max-message-size across the mesh, sans-IO (docs/addressing.md, "Consumers'
max-message-size"). A router does not know other routers' consumers' limits: the egress router,
where the limit is known, decides. A message no consumer there can take goes on to another
router with consumers when there is a way on, and is otherwise rejected back to the producer
with amqp:link:message-size-exceeded (never left waiting). A stream that grows past the limit is
aborted there and the producer hears the outcome. A multicast copy a router cannot give any of
its consumers is released back (it counts for nothing where the copies' outcomes combine).

The consumers are the harness's clients, whose engine detaches a link overrun by a larger
delivery (as amqp10's): a link still attached is one the router never overran."""

from __future__ import annotations

from typing import Any

from router.amqp import errors as E
from router.amqp.endpoints import ACTIVE
from router.amqp.events import TransferReceived
from router.amqp.message import Message, encode_message
from router.amqp.messaging import Accepted, Rejected, Released
from router.config.models import AddressConfig
from router.testing.meshharness import MeshHarness

ADDRESSES = (AddressConfig(prefix="cl", distribution="closest"), AddressConfig(prefix="mc", distribution="multicast"))


def _line(*ids: str) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate(ids):
        h.router(rid, instance=i + 1, addresses=ADDRESSES)
    for a, b in zip(ids, ids[1:]):
        h.link(a, b)
    h.converge()
    return h


def _consumers(h: MeshHarness, address: str, *where: tuple[str, str, int | None]) -> list[tuple[Any, Any]]:
    """A consumer of `address` per (router, name, max-message-size or None), each known to the
    mesh and with 100 credit: their (client, receiving link)."""
    made = []
    for rid, name, limit in where:
        client = h.client(rid, name)
        made.append((client, client.receiver(address, max_message_size=limit) if limit else client.receiver(address)))
    h.advance(0.5)  # the consumers are known everywhere
    for _, rx in made:
        rx.flow(100)
    return made


def _producer(h: MeshHarness, address: str, at: str = "A") -> tuple[Any, Any]:
    producer = h.client(at, "p")
    tx = producer.sender(address)
    h.pump()
    return producer, tx


def _message(size: int) -> bytes:
    payload = encode_message(Message.data(b"x" * size))
    return encode_message(Message.data(b"x" * (2 * size - len(payload))))


def _sizes(client: Any, rx: Any) -> list[int]:
    return [len(r.payload) for r in client.received[rx]]


def _size_exceeded(state: Any, address: str) -> str:
    assert isinstance(state, Rejected), state
    assert state.error is not None and state.error.condition == E.MESSAGE_SIZE_EXCEEDED
    description = state.error.description
    assert description is not None and description.endswith(f"larger than the max-message-size of every consumer of {address}")
    return description


def test_a_message_too_large_for_the_far_consumer_is_rejected_back_to_the_producer() -> None:
    h = _line("A", "B")
    ((consumer, rx),) = _consumers(h, "cl", ("B", "c", 10_000))
    producer, tx = _producer(h, "cl")
    big = producer.send(tx, _message(30_000))
    small = producer.send(tx, _message(5000))
    h.pump()
    assert _size_exceeded(producer.outcomes[big], "cl").startswith("message of 30")  # with B's router annotations
    assert big in producer.settled
    assert isinstance(producer.outcomes[small], Accepted) and _sizes(consumer, rx) == [5000]
    assert rx.state.local is ACTIVE
    assert not h.cores["B"].table.entries["Mcl"].pending and not h.cores["A"].table.entries["Mcl"].pending


def test_the_egress_router_sends_it_on_to_a_consumer_it_fits() -> None:
    """A - B - C, closest: A sends to B (the closer); B's consumer is too small for the large
    message, so B sends it on to C's; the small ones stay with B's."""
    h = _line("A", "B", "C")
    (limited, lrx), (free, frx) = _consumers(h, "cl", ("B", "limited", 10_000), ("C", "free", None))
    producer, tx = _producer(h, "cl")
    sent = [producer.send(tx, _message(size)) for size in (30_000, 500, 30_000, 500)]
    h.pump()
    assert all(isinstance(producer.outcomes[d], Accepted) for d in sent)
    assert _sizes(limited, lrx) == [500, 500] and _sizes(free, frx) == [30_000, 30_000]
    assert lrx.state.local is ACTIVE


def test_a_stream_growing_past_the_far_consumers_limit_is_aborted_there() -> None:
    h = _line("A", "B", "C")
    ((consumer, rx),) = _consumers(h, "cl", ("C", "c", 10_000))
    producer, tx = _producer(h, "cl")
    payload = _message(40_000)
    delivery = -1
    for at in range(0, len(payload), 4000):
        delivery = tx.send_transfer(b"s", payload[at:at + 4000], more=at + 4000 < len(payload))
        h.pump()
    frames = [e for e in consumer.events if isinstance(e, TransferReceived)]
    assert frames[-1].aborted and sum(len(e.payload) for e in frames if not e.aborted) <= 10_000
    assert _size_exceeded(producer.outcomes[delivery], "cl").startswith("message of at least ")
    assert delivery in producer.settled
    after = producer.send(tx, _message(8000))
    h.pump()
    assert isinstance(producer.outcomes[after], Accepted) and _sizes(consumer, rx) == [8000]
    assert rx.state.local is ACTIVE
    for rid in "ABC":  # nothing left in flight anywhere
        core = h.cores[rid]
        assert all(out.outstanding == 0 for conn in core.connections.values() for out in conn.out_links), rid


def test_multicast_across_routers_skips_consumers_too_small() -> None:
    """A's consumer takes the large message; B's, too small, gets no copy, and B releases the
    copy it got, which counts for nothing at A: the producer hears accepted. When no consumer
    anywhere can take it, A's own is passed over and B's copy is released: the producer hears
    released (a router does not know another's consumers' limits; docs/addressing.md)."""
    h = _line("A", "B")
    (local, lrx), (far, frx) = _consumers(h, "mc", ("A", "local", None), ("B", "far", 10_000))
    producer, tx = _producer(h, "mc")
    big, small = producer.send(tx, _message(30_000)), producer.send(tx, _message(500))
    h.pump()
    assert isinstance(producer.outcomes[big], Accepted) and isinstance(producer.outcomes[small], Accepted)
    assert _sizes(local, lrx) == [30_000, 500] and _sizes(far, frx) == [500]
    lrx.detach()
    limited = local.receiver("mc", max_message_size=10_000)
    h.pump()
    limited.flow(100)
    h.pump()
    nowhere = producer.send(tx, _message(30_000))
    h.pump()
    assert isinstance(producer.outcomes[nowhere], Released)
    assert not local.received[limited] and _sizes(far, frx) == [500]
    assert frx.state.local is ACTIVE and limited.state.local is ACTIVE


def test_a_message_waiting_for_a_lost_path_is_rejected_once_no_router_has_consumers() -> None:
    """A's own consumer is too small; B's could take the message, but the connection to B has
    just dropped: A's producer's message waits for a path (routes are changing). Once the
    routes say B is gone, nothing can ever take it: rejected, not left waiting."""
    h = _line("A", "B")
    (local, lrx), (far, frx) = _consumers(h, "cl", ("A", "local", 10_000), ("B", "far", None))
    producer, tx = _producer(h, "cl")
    h.cut(h.wire_between("A", "B"))
    big = producer.send(tx, _message(30_000))
    h.pump()
    assert big not in producer.outcomes  # waits: the routes still name B
    h.advance(5.0)
    _size_exceeded(producer.outcomes[big], "cl")
    assert not h.cores["A"].table.entries["Mcl"].pending and not local.received[lrx]
