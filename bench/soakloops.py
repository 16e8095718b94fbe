"""The churn soak's load (bench/soakchurn.py): clients of a mesh that come and go, each loop
one trio task repeating its kind of visit until cancelled. Every visit is a connection of its
own, and it ends in one of several ways:

- `close`: the connection is closed with its links still attached;
- `detach`: each link detached first, then the connection closed;
- `abort`: the socket closed with no AMQP close (FIN), at a chosen point (mid-stream);
- `reset`: the same with SO_LINGER 0 (RST): the router's next write or read fails.

Kinds of visit:

- `routed_visit` (clients of E and of B): a sender and a receiver on a link-routed `q.<...>`
  (through the mesh to the broker behind A), three small messages and a large one (1-4 MiB)
  sent and received back; an abort may come while the large one is being sent or received, or
  after the client stopped reading (its socket is no longer read) while it arrives.
- `mobile_visit`: a consumer of a fresh address on one router, a producer on the other (E and A,
  both ways), small messages and a large one, accepted; then both go.
- `stalled_visit`: a consumer that takes a few messages, stops reading its socket for 2-6 s while
  a producer keeps sending small and large ones, then vanishes without settling what it holds.
- `burst_visit`: six producers each send a large message to one consumer at once (the routers'
  streaming links grow beyond the configured four).
- `management_visit`: a query of one entity type at one router.

Messages carry their number (message-id): `receive` checks that they come as sent (in order
from one producer to one consumer); one a router released over its byte bounds is sent again
(`settle_or_resend`), as a producer must.

What happened is counted in a Tally (visits by kind and ending, messages, bytes, time-outs, and
client errors by class): the soak's figures, and the sign that the load really ran.
"""

from __future__ import annotations

import random
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from router.amqp.message import Message, encode_message, scan_sections
from router.amqp.messaging import Modified, Properties, Released
from router.net.client import Client, ClientError, Receiver, Sender, SendTracker, connect
from router.net.management_client import management_session

MIB = 2**20
BIG = b"\xa5" * (4 * MIB)
VISIT_TIMEOUT_S = 60.0  # a visit still going after this is counted as timed out and abandoned
RECEIVE_TIMEOUT_S = 45.0  # messages sent and not received by then: an error saying what came
ENDINGS = ("close", "detach", "abort", "reset")


class Tally(Counter[str]):
    """Counts of what the load did (see the module docstring)."""

    errors_shown = 0

    def error(self, kind: str, exc: BaseException) -> None:
        self[f"error.{kind}.{type(exc).__name__}"] += 1
        if self.errors_shown < 10:  # the first few, as they happen: what went wrong
            self.errors_shown += 1
            print(f"  ({kind}: {type(exc).__name__}: {exc})", flush=True)


def message(size: int, n: int = 0) -> bytes:
    """An encoded message of `size` body bytes, numbered `n` (its message-id); the client sends
    bytes as they are."""
    return encode_message(Message.data(BIG[:size], properties=Properties(message_id=n)))


def number(payload: bytes) -> int:
    properties = scan_sections(payload).properties(payload)
    return int(properties.message_id) if properties is not None else -1


@asynccontextmanager
async def client(port: int, name: str) -> AsyncIterator[Client]:
    async with connect("127.0.0.1", port, container_id=f"churn-{name}") as c:
        yield c


def vanish(c: Client, ending: str) -> None:
    """`abort` or `reset`: the socket goes with no AMQP close (the rest close on leaving `client`)."""
    if ending == "reset":
        sock = getattr(c.driver.stream, "socket", None)
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.driver.abort()


async def leave(c: Client, ending: str, *links: Sender | Receiver) -> None:
    if ending == "detach":
        for link in links:
            await link.close()
    elif ending in ("abort", "reset"):
        vanish(c, ending)


def stop_reading(c: Client) -> None:
    """The client's socket is no longer read: what the router writes to it waits, then backs up."""
    c.driver.pause_reading = lambda: True


async def receive(receiver: Receiver, sent: list[bytes], tally: Tally, count: int | None = None,
                  check: str = "order", trackers: list[SendTracker] | None = None) -> list[bytes]:  # fmt: skip
    """Receive (and accept) the first `count` of the messages `sent` (all by default); every
    visit has an address of its own, so they are these. `check`: "order", they come in the order
    sent (docs/mesh.md: one producer's messages to one consumer); "set", each once (several
    producers, or some sent again); "increasing", in the order sent, some perhaps missing (released
    by a router, not sent again); "", the caller checks; "sizes", only their sizes (through the broker: the Proton C example broker
    alters a message that reaches it in several pieces, reading each piece to the start of its
    buffer, though it keeps its size). Past RECEIVE_TIMEOUT_S an error says what came and, given
    the senders' `trackers`, the outcomes they heard."""
    expected = sent[: len(sent) if count is None else count]
    got: list[bytes] = []
    with trio.move_on_after(RECEIVE_TIMEOUT_S):
        for _ in expected:
            delivery = await receiver.receive()
            receiver.accept(delivery)
            got.append(delivery.payload)
    if len(got) < len(expected):
        outcomes = [type(t.state).__name__ if t.settled else "none yet" for t in trackers or ()]
        raise TimeoutError(f"{len(got)} of {len(expected)} messages in {RECEIVE_TIMEOUT_S:.0f} s "
                           f"(sizes {sorted(map(len, got))} of {sorted(map(len, expected))}); outcomes {outcomes}")  # fmt: skip
    tally["messages.received"] += len(got)
    tally["bytes.received"] += sum(len(p) for p in got)
    if check:
        check_received(got, expected, check, tally)
    return got


def check_received(got: list[bytes], expected: list[bytes], check: str, tally: Tally) -> None:
    if check == "sizes":
        if sorted(map(len, got)) != sorted(map(len, expected)):
            tally.error("receive", ValueError(f"received sizes {sorted(map(len, got))}, sent {sorted(map(len, expected))}"))
    elif check == "set" and sorted(map(number, got)) != sorted(map(number, expected)):
        tally.error("receive", ValueError(f"received messages {sorted(map(number, got))}, sent {sorted(map(number, expected))}"))
    elif check == "increasing" and [number(p) for p in got] != sorted(set(map(number, got))):
        tally.error("receive", ValueError(f"received messages {[number(p) for p in got]} in this order"))
    elif check == "order" and [number(p) for p in got] != [number(p) for p in expected]:
        tally.error("receive", ValueError(f"received messages {[number(p) for p in got]} in this order, "
                                          f"sent {[number(p) for p in expected]}"))  # fmt: skip


async def routed_visit(port: int, name: str, i: int, rng: random.Random, tally: Tally) -> str:
    address = f"q.{name}.{i}"
    ending = rng.choice((*ENDINGS, "abort-send", "abort-receive", "stall-receive"))
    big = rng.randint(1, 4) * MIB - rng.randrange(4096)
    sent = [message(size, n) for n, size in enumerate((100, 2000, big, 100))]
    async with client(port, f"{name}-{i}") as c:
        sender = await c.open_sender(address)
        receiver = await c.open_receiver(address, credit=4)
        if ending == "abort-send":  # the large message is leaving when the socket goes
            await sender.send(sent[0])
            await sender.start_send(sent[2])
            await trio.sleep(rng.uniform(0, 0.05))
            vanish(c, rng.choice(("abort", "reset")))
            return ending
        trackers = [await sender.start_send(m) for m in sent]
        for tracker in trackers:
            await tracker.wait()
        _sent(tally, sent)
        if ending in ("abort-receive", "stall-receive"):  # the large one is arriving
            await receive(receiver, sent, tally, count=2, check="sizes")
            if ending == "stall-receive":
                stop_reading(c)
                await trio.sleep(rng.uniform(1, 3))
            else:
                await trio.sleep(rng.uniform(0, 0.02))
            vanish(c, rng.choice(("abort", "reset")))
            return ending
        await receive(receiver, sent, tally, check="sizes")
        await leave(c, ending, sender, receiver)
    return ending


def _sent(tally: Tally, sent: list[bytes]) -> None:
    tally["messages.sent"] += len(sent)
    tally["bytes.sent"] += sum(len(m) for m in sent)


async def settle_or_resend(sender: Sender, payload: bytes, tracker: SendTracker, tally: Tally,
                           trackers: list[SendTracker], resent: list[int]) -> None:  # fmt: skip
    """Wait for `tracker`'s outcome; a delivery released (or modified) by a router is sent again,
    as a producer must (a router releases what it cannot hold within its byte bounds, e.g. a
    message waiting for a stalled consumer's credit past the connection's bound)."""
    for _ in range(5):
        state = await tracker.wait()
        if not isinstance(state, (Released, Modified)):
            return
        tally[f"messages.sent.again.{type(state).__name__}"] += 1
        resent.append(1)
        tracker = await sender.start_send(payload)
        trackers.append(tracker)


async def mobile_visit(producer_port: int, consumer_port: int, name: str, i: int, rng: random.Random, tally: Tally) -> str:
    address = f"m.{name}.{i}"
    ending = rng.choice(ENDINGS)
    sizes = [100, rng.randint(1, 4) * MIB - rng.randrange(4096), 1000, 100]
    rng.shuffle(sizes)
    sent = [message(size, n) for n, size in enumerate(sizes)]
    async with client(consumer_port, f"{name}-{i}-rx") as cc:
        receiver = await cc.open_receiver(address, credit=rng.choice((1, 5, 50)))
        async with client(producer_port, f"{name}-{i}-tx") as pc:
            sender = await pc.open_sender(address)
            trackers: list[SendTracker] = []
            resent: list[int] = []
            async with trio.open_nursery() as nursery:
                for m in sent:
                    tracker = await sender.start_send(m)
                    trackers.append(tracker)
                    nursery.start_soon(settle_or_resend, sender, m, tracker, tally, trackers, resent)
                got = await receive(receiver, sent, tally, check="", trackers=trackers)
            check_received(got, sent, "set" if resent else "order", tally)
            _sent(tally, sent)
            await leave(pc, rng.choice(ENDINGS), sender)
        await leave(cc, ending, receiver)
    return ending


async def stalled_visit(producer_port: int, consumer_port: int, name: str, i: int, rng: random.Random, tally: Tally) -> str:
    address = f"s.{name}.{i}"
    ending = rng.choice(ENDINGS)
    sent = [message(rng.randint(1, 4) * MIB if n % 4 == 3 else 500, n) for n in range(40)]
    async with client(consumer_port, f"{name}-{i}-rx") as cc, client(producer_port, f"{name}-{i}-tx") as pc:
        receiver = await cc.open_receiver(address, credit=rng.choice((5, 20)))
        sender = await pc.open_sender(address)

        async def produce() -> None:
            for m in sent:
                await sender.start_send(m)
                _sent(tally, [m])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            with trio.move_on_after(10):
                await receive(receiver, sent, tally, count=rng.randint(0, 4), check="increasing")
            stop_reading(cc)
            await trio.sleep(rng.uniform(2, 6))
            await leave(cc, ending, receiver)  # its unsettled deliveries go with it
            await trio.sleep(rng.uniform(0, 1))
            nursery.cancel_scope.cancel()
        await leave(pc, rng.choice(ENDINGS), sender)
    return ending


async def burst_visit(producer_port: int, consumer_port: int, name: str, i: int, rng: random.Random, tally: Tally) -> str:
    """Six producers each send a large message to one consumer at once: more streams at once
    than the routers' configured streaming links (4), so they grow (given back idle a minute later)."""
    address = f"b.{name}.{i}"
    ending = rng.choice(ENDINGS)
    sent = [message(rng.randint(1, 2) * MIB, n) for n in range(6)]
    async with client(consumer_port, f"{name}-{i}-rx") as cc:
        receiver = await cc.open_receiver(address, credit=10)

        async def produce(payload: bytes, n: int) -> None:
            async with client(producer_port, f"{name}-{i}-tx{n}") as pc:
                sender = await pc.open_sender(address)
                await settle_or_resend(sender, payload, await sender.start_send(payload), tally, [], [])
                await leave(pc, ending, sender)

        async with trio.open_nursery() as nursery:
            for n, payload in enumerate(sent):
                nursery.start_soon(produce, payload, n)
            await receive(receiver, sent, tally, check="set")
        _sent(tally, sent)
        await leave(cc, ending, receiver)
    await trio.sleep(rng.uniform(0, 5))
    return ending


MANAGED_TYPES = ("connection", "router.link", "router.address", "router.node", "router.config.linkRoute", "router")


async def management_visit(port: int, name: str, i: int, rng: random.Random, tally: Tally) -> str:
    async with client(port, f"{name}-{i}") as c, management_session(c) as mgmt:
        rows = await mgmt.query_dicts(rng.choice(MANAGED_TYPES))
        tally["management.rows"] += len(rows)
    await trio.sleep(rng.uniform(0.5, 2))
    return "close"


Visit = Callable[[int, random.Random, Tally], Any]


async def loop(kind: str, visit: Visit, seed: int, tally: Tally) -> None:
    """Visit after visit until cancelled; each counted by kind and ending (or error)."""
    rng = random.Random(seed)
    i = 0
    while True:
        i += 1
        try:
            with trio.move_on_after(VISIT_TIMEOUT_S) as scope:
                ending = await visit(i, rng, tally)
                tally[f"{kind}.{ending}"] += 1
            if scope.cancelled_caught:
                tally.error(kind, TimeoutError(f"visit {i} still going after {VISIT_TIMEOUT_S:.0f} s"))
        except (ClientError, OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            tally.error(kind, exc)
            await trio.sleep(0.5)
