"""Random client traffic for the failure tests (test_core_failure_random, test_mesh_failure_random):
clients attach producers and consumers of anycast and multicast addresses, send settled and
unsettled messages of one or several frames, give credit, settle with any outcome and detach, as
hypothesis draws them; at the end every consumer left takes and accepts everything. The tests
add their harness (one router, or a mesh) and what they check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from router.amqp.endpoints import ACTIVE
from router.amqp.link import Link
from router.amqp import events as ev
from router.amqp.message import Message, decode_message
from router.amqp.messaging import ACCEPTED, Accepted, Header, Modified, Rejected, Released
from router.amqp.performatives import Error
from router.testing.routerharness import Client

FRAME = 512  # a larger message crosses a hop in several transfer frames
ADDRESSES = ["any/a", "any/b", "mc/a"]  # mc: multicast
SIZES = [10, 700, 1700]  # one, two and four frames
OUTCOMES = [ACCEPTED, Rejected(error=Error(condition="test:nope")), Released(), Modified(delivery_failed=True)]
# Steps: (op, peer, a, b, c) with small integers the op reads as it needs.
OPS = st.sampled_from(["producer", "consumer", "detach"] + ["send"] * 5 + ["flow"] * 2 + ["settle"] * 2)

# Where a failure is injected: (unit, method) of a router's core. The per-message path (arriving
# frames, routing, sending, waiting, credit, settlement both ways, the flush), the attach/detach
# path, the bounds; the mesh test adds the mesh's own.
CORE_POINTS = [
    ("forwarder", name)
    for name in (
        "on_transfer", "first_frame", "_next_frame", "_route", "_send", "_send_copy", "_multicast", "_stream",
        "_stream_done", "_wait", "consumer_ready", "on_flow", "on_disposition", "consumer_outcome",
        "relay_outcome", "_copy_outcome", "_copy_failed", "handed_over", "_presettled_sent", "unroutable",
        "fail_sent", "consumer_gone", "producer_gone", "_aborted", "reroute", "credit_dirty", "flush",
        "dispose", "unsettled_out", "end_stream",
    )
] + [
    ("links", name) for name in ("attach_link", "detach_link", "link_gone", "_add_consumer", "_add_producer")
] + [
    ("bounds", name) for name in ("observe", "hold", "reached", "settled", "gone")
]  # fmt: skip


def step_strategy(priorities: int) -> Any:
    """A step's strategy; `b` goes up to `priorities + 2` (a message's priority, when asked)."""
    return st.tuples(OPS, st.integers(0, 2), st.integers(0, 7), st.integers(0, priorities + 2), st.integers(0, 3))


def first_links(most: int) -> Any:
    """Each client's first links: ("producer" or "consumer", address, the consumer's first credit)."""
    return st.lists(st.tuples(st.sampled_from(["producer", "consumer"]), st.integers(0, 2), st.integers(0, 6)),
                    min_size=1, max_size=most)  # fmt: skip


@dataclass
class Peer:
    """One client and what the test remembers of its links."""

    client: Client
    producers: list[Link] = field(default_factory=list)
    consumers: list[Link] = field(default_factory=list)
    # Unsettled deliveries sent, by delivery-id: the link they went on.
    unsettled: dict[int, Link] = field(default_factory=dict)
    disposed: set[tuple[Link, int]] = field(default_factory=set)
    sent = 0


def apply_step(
    peer: Peer, bodies: set[str], step: tuple[str, int, int, int, int], *, most_links: int, settled_from: int,
    priority: bool = False,
) -> None:  # fmt: skip
    """One step of `peer`'s client (the caller pumps). A message is sent settled when `b` is at
    least `settled_from`; with `priority` its header carries `b` as its priority."""
    op, _, a, b, c = step
    client = peer.client
    if op == "producer" and len(peer.producers) < most_links:
        client.tags += 1  # (the link's name)
        peer.producers.append(client.sender(ADDRESSES[a % len(ADDRESSES)]))
    elif op == "consumer" and len(peer.consumers) < most_links:
        rx = client.receiver(ADDRESSES[a % len(ADDRESSES)])
        peer.consumers.append(rx)
        rx.flow(b)
    elif op == "send" and peer.producers:
        tx = peer.producers[a % len(peer.producers)]
        for _ in range(min(1 + c, tx.credit if tx.state.local is ACTIVE else 0)):
            body = f"{client.name}-{peer.sent}-" + "x" * SIZES[b % len(SIZES)]
            peer.sent += 1
            bodies.add(body)
            settled = b >= settled_from
            message = Message.value(body, header=Header(priority=b)) if priority else Message.value(body)
            delivery_id = client.send(tx, message, settled=settled)
            if not settled:
                peer.unsettled[delivery_id] = tx
    elif op == "flow" and peer.consumers:
        rx = peer.consumers[a % len(peer.consumers)]
        if rx.state.local is ACTIVE:
            rx.flow(b + 1)
    elif op == "settle" and peer.consumers:
        settle(peer, peer.consumers[a % len(peer.consumers)], b + 1, OUTCOMES[c])
    elif op == "detach":
        links = peer.producers + peer.consumers
        if links:
            link = links[a % len(links)]
            if link.state.local is ACTIVE:
                link.detach(closed=True)


def settle(peer: Peer, rx: Link, n: int, state: Any) -> None:
    """`peer` settles up to `n` of the deliveries `rx` received and has not settled yet."""
    if rx.state.local is not ACTIVE:
        return
    for received in peer.client.received.get(rx, []):
        if n <= 0:
            return
        key = (rx, received.delivery_id)
        if received.settled or key in peer.disposed:
            continue
        peer.disposed.add(key)
        rx.dispose(received.delivery_id, state=state, settled=True)
        n -= 1


def assert_served(survivors: list[Peer], bodies: Any, *context: Any) -> None:
    """The peers a failure was not about: still open, never told of a protocol violation, an
    outcome for every delivery still linked, only whole messages as they were sent (`bodies`)."""
    for peer in survivors:
        client = peer.client
        assert client.engine.state.remote is ACTIVE, client.name
        assert not [e for e in client.events if isinstance(e, ev.ProtocolViolation)], client.name
        for delivery_id, tx in peer.unsettled.items():  # an outcome for everything still linked
            if tx.state.local is ACTIVE:
                assert delivery_id in client.settled, (client.name, delivery_id, *context)
                assert isinstance(client.outcomes[delivery_id], (Accepted, Rejected, Released, Modified))
        for rx, received in client.received.items():  # whole messages, as they were sent
            for got in received:
                assert decode_message(got.payload).body_value in bodies, (client.name, rx.name)
            assert not client.partial.get(rx), (client.name, rx.name)


def passes_whole(pump: Callable[[], None], producer: Client, tx: Link, consumer: Client, rx: Link, body: str) -> None:
    """What a failure left must not stop the next delivery: `body` from `producer` on `tx`
    reaches `consumer` on `rx` whole (its only message there), and its acceptance comes back."""
    delivery_id = producer.send(tx, Message.value(body))
    pump()
    assert consumer.bodies(rx) == [body]
    settle(Peer(consumer), rx, 1, ACCEPTED)
    pump()
    assert isinstance(producer.outcomes.get(delivery_id), Accepted)


def drain(live: list[Client], peers: list[Peer], run: Callable[[], None], also: Callable[[], int] = lambda: 0) -> None:
    """Every consumer of a client still `live` takes and accepts everything, `run()` moving the
    traffic each round, until nothing moves: no new delivery, and no change in what `also()`
    counts (e.g. the router's connections)."""
    for _ in range(50):
        before = sum(len(r) for p in peers for r in p.client.received.values()), also()
        for peer in peers:
            if peer.client not in live:
                continue
            for rx in peer.consumers:
                if rx.state.local is ACTIVE:
                    if rx.credit < 20:
                        rx.flow(50)
                    settle(peer, rx, 1 << 30, ACCEPTED)
        run()
        if (sum(len(r) for p in peers for r in p.client.received.values()), also()) == before:
            return
    raise AssertionError("deliveries kept coming")
