"""The engine demo: our client exchanges messages with an endpoint on our engine over loopback.

Starts an in-memory queue peer (router.testing.peer) on 127.0.0.1, connects our client with SASL
PLAIN, sends messages of a few shapes (small, presettled, multi-frame), receives them back,
shows every outcome, and prints a small throughput figure. Runs in a couple of seconds.
"""

from __future__ import annotations

import argparse
import time

import trio
from rich.console import Console
from rich.table import Table

from .amqp.message import Message
from .amqp.messaging import AmqpValue, Properties
from .amqp.sasl import SaslServerConfig
from .net.client import connect
from .testing.peer import start_peer


async def run_demo(count: int, console: Console) -> int:
    sasl = SaslServerConfig(
        mechanisms=("PLAIN", "ANONYMOUS"),
        check_plain=lambda _authzid, user, password: (user, password) == ("demo", "demo"),
    )
    async with trio.open_nursery() as nursery:
        peer, port = await start_peer(nursery, sasl=sasl, max_frame_size=4096)
        console.print(f"[bold]endpoint[/] on 127.0.0.1:{port} (max-frame-size 4096, SASL PLAIN)")
        async with connect("127.0.0.1", port, username="demo", password="demo") as client:
            table = Table("what", "outcome", "detail")
            sender = await client.open_sender("demo/queue")
            outcome = await sender.send(
                Message.value("hello, mesh", properties=Properties(message_id=1, subject="greeting"))
            )
            table.add_row("send 'hello, mesh'", type(outcome).__name__, "unsettled, sender learns the outcome")
            big = bytes(range(256)) * 4096  # 1 MiB: split into 4 KiB frames on the wire
            outcome = await sender.send(Message.data(big))
            table.add_row("send 1 MiB", type(outcome).__name__, "multi-frame delivery")
            await sender.send(Message.value("fire and forget"), presettled=True)
            table.add_row("send presettled", "-", "no disposition expected")
            rejecter = await client.open_sender("reject/demo")
            outcome = await rejecter.send(Message.value("please reject me"))
            error = getattr(outcome, "error", None)
            detail = f"{error.condition}: {error.description}" if error else ""
            table.add_row("send to reject/demo", type(outcome).__name__, detail)

            receiver = await client.open_receiver("demo/queue", credit=10)
            for _ in range(3):
                delivery = await receiver.receive()
                message = delivery.message
                body = message.body_value if isinstance(message.body, AmqpValue) else f"{len(message.body_bytes)} bytes"
                receiver.accept(delivery)
                table.add_row("received", "accepted by us", repr(body)[:40])
            console.print(table)

            started = time.perf_counter()
            trackers = [await sender.start_send(Message.value(i)) for i in range(count)]
            for tracker in trackers:
                await tracker.wait()
            for _ in range(count):
                receiver.accept(await receiver.receive())
            elapsed = time.perf_counter() - started
            console.print(
                f"{count} messages sent (unsettled) and received back in {elapsed:.2f} s: "
                f"[bold]{2 * count / elapsed:,.0f}[/] transfers/s through our Python client"
            )
            await receiver.close()
        nursery.cancel_scope.cancel()
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("-n", "--count", type=int, default=2000, help="messages in the throughput run")
    args = parser.parse_args()
    raise SystemExit(trio.run(run_demo, args.count, Console()))


if __name__ == "__main__":
    main()
