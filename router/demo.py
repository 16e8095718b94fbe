"""The router demo: a router, a receiver and a sender in one process, showing what flows.

Starts a RouterServer on an ephemeral 127.0.0.1 port with the embedded default configuration,
then, over TCP with our client: a receiver on `demo/orders`, a sender to the same address, and
messages of a few shapes. The receiver decides each message's fate from its subject; the table
shows what it saw and the outcome the sender learned back through the router (settlement is
end to end: the router stores nothing). A throughput run through the router closes the demo,
which takes a few seconds.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import trio
from rich.console import Console
from rich.table import Table

from .amqp.errors import PRECONDITION_FAILED
from .amqp.message import Message
from .amqp.messaging import AmqpValue, Properties
from .config.models import Listener, RouterConfig
from .net.client import Delivery, Receiver, connect
from .net.server import RouterServer

ADDRESS = "demo/orders"
# (what, subject telling the receiver what to answer, the message, presettled)
SHOWCASE: list[tuple[str, str, Message, bool]] = [
    ("'hello, mesh'", "accept", Message.value("hello, mesh"), False),
    ("1 MiB of data", "accept", Message.data(bytes(range(256)) * 4096), False),
    ("'please reject me'", "reject", Message.value("please reject me"), False),
    ("'release me'", "release", Message.value("release me"), False),
    ("'modify me'", "modify", Message.value("modify me"), False),
    ("'fire and forget'", "accept", Message.value("fire and forget"), True),
]


def _describe(delivery: Delivery) -> str:
    message = delivery.message
    if isinstance(message.body, AmqpValue):
        seen = repr(message.body_value)
    else:
        seen = f"{len(message.body_bytes):,} bytes"
    return seen + (" (presettled)" if delivery.settled else "")


def _outcome(state: Any) -> str:
    if state is None:
        return "- (no outcome: presettled)"
    error = getattr(state, "error", None)
    detail = f" {error.condition}" if error is not None else ""
    return type(state).__name__ + detail


async def _answer(receiver: Receiver, seen: trio.MemorySendChannel[tuple[str, str]]) -> None:
    """The receiving application: decide each delivery's outcome from its subject."""
    while True:
        delivery = await receiver.receive()
        saw = _describe(delivery)  # before settling: settling marks the delivery settled
        properties = delivery.message.properties
        subject = properties.subject if properties is not None else None
        if delivery.settled:
            answer = "- (nothing to answer)"
        elif subject == "reject":
            receiver.reject(delivery, PRECONDITION_FAILED, "the demo receiver said no")
            answer = "rejected"
        elif subject == "release":
            receiver.release(delivery)
            answer = "released"
        elif subject == "modify":
            receiver.modify(delivery, delivery_failed=True)
            answer = "modified"
        else:
            receiver.accept(delivery)
            answer = "accepted"
        await seen.send((saw, answer))


async def _showcase(port: int, console: Console) -> None:
    async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
        receiver = await consumer.open_receiver(ADDRESS, credit=10)
        # The receiver attaches first: the router gives a sender credit only while something
        # can receive from its address.
        sender = await producer.open_sender(ADDRESS)
        seen_in, seen_out = trio.open_memory_channel[tuple[str, str]](len(SHOWCASE))
        table = Table("sent", "receiver saw", "receiver said", "sender learned")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_answer, receiver, seen_in)
            for what, subject, message, presettled in SHOWCASE:
                message = Message(body=message.body, properties=Properties(subject=subject))
                outcome = await sender.send(message, presettled=presettled)
                saw, answered = await seen_out.receive()
                table.add_row(what, saw, answered, _outcome(outcome))
            nursery.cancel_scope.cancel()
        console.print(table)


async def _throughput(port: int, count: int, console: Console) -> None:
    async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
        receiver = await consumer.open_receiver("demo/throughput", credit=250)
        sender = await producer.open_sender("demo/throughput")

        async def consume() -> None:
            for _ in range(count):
                receiver.accept(await receiver.receive())

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            trackers = [await sender.start_send(Message.value(i)) for i in range(count)]
            outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
        elapsed = time.perf_counter() - started
        accepted = outcomes.count("Accepted")
        console.print(
            f"{count} messages through the router, {accepted} accepted end to end, in {elapsed:.2f} s: "
            f"[bold]{count / elapsed:,.0f}[/] messages/s (sender, router and receiver in one Python process)"
        )


async def run_demo(count: int, console: Console) -> int:
    config = RouterConfig(listeners=(Listener(port=0),))  # the default, on an ephemeral port
    server = RouterServer(config)
    async with trio.open_nursery() as nursery:
        addresses = await nursery.start(server.run)
        _, host, port = addresses[0]
        console.print(f"[bold]router[/] {config.router.id} listening on amqp://{host}:{port}")
        with trio.fail_after(60):  # a demo must never hang
            await _showcase(port, console)
            await _throughput(port, count, console)
        server.shutdown()
        await server.wait_stopped()
        console.print("router stopped")
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--count", type=int, default=2000, help="messages in the throughput run")
    args = parser.parse_args()
    raise SystemExit(trio.run(run_demo, args.count, Console()))


if __name__ == "__main__":
    main()
