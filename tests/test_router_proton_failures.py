"""The single router with Proton clients (tests/support/router_proton.py): a consumer that
vanishes leaves no delivery without an outcome."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
import trio
from proton import Message

from .support.router_process import RouterProcess, router_env
from .support.router_proton import A, Clients, M, R, RE, TIMEOUT_S, router, run_clients, shared_router, url

pytestmark = [pytest.mark.interop, pytest.mark.process]


# --- failures ------------------------------------------------------------------------------------------

CONSUMER_SCRIPT = """
import sys
from proton.handlers import MessagingHandler
from proton.reactor import Container

class Consumer(MessagingHandler):
    def __init__(self):
        super().__init__(prefetch=20, auto_accept=False)
        self.seen = 0

    def on_start(self, event):
        self.conn = event.container.connect(sys.argv[1], reconnect=False)
        event.container.create_receiver(self.conn, sys.argv[2], name="consumer")

    def on_message(self, event):
        self.seen += 1
        if self.seen <= 5:
            self.accept(event.delivery)
        if self.seen == 10:  # a round trip: the router has our accepts when the answer comes
            event.container.create_receiver(self.conn, "probe.holding", name="probe")

    def on_link_opened(self, event):
        if event.link.name == "probe":
            print("holding", flush=True)

Container(Consumer()).run()
"""


class Outcomes(Clients):
    """Counts what a producer learns about each of its `n` messages."""

    def __init__(self, router: RouterProcess, address: str, n: int, **kwargs: Any) -> None:
        super().__init__(router, **kwargs)
        self.address, self.n = address, n
        self.sent = 0
        self.counts: Counter[str] = Counter()
        self.failed_flags: list[bool] = []

    def start_producer(self, container: Any, listener: str = "amqp") -> None:
        self.producer = self.connect(container, listener)
        container.create_sender(self.producer, self.address, name="producer")

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.n:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        if event.link.name != "producer":
            return
        state = event.delivery.remote_state
        self.counts[{A: "accepted", R: "rejected", RE: "released", M: "modified"}[state]] += 1
        if state == M:
            self.failed_flags.append(event.delivery.remote.failed)
        if sum(self.counts.values()) == self.n:
            self.finish()

    on_rejected = on_released = on_accepted


class VanishingConsumer(Outcomes):
    """The consumer accepts 5 messages, holds the next 5 unsettled, then detaches its link or
    closes its connection while the producer's 100 are in flight."""

    def __init__(self, router: RouterProcess, address: str, how: str) -> None:
        super().__init__(router, address, 100, prefetch=20, auto_accept=False)
        self.how = how
        self.consumed = 0

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")
        self.start_producer(event.container)

    def on_message(self, event: Any) -> None:
        self.consumed += 1
        if self.consumed <= 5:
            self.accept(event.delivery)
        elif self.consumed == 10:
            if self.how == "detach":
                event.receiver.close()
            else:
                event.connection.close()


@pytest.mark.parametrize("how", ["detach", "close", "kill"])
async def test_a_vanishing_consumer_leaves_no_delivery_without_an_outcome(router: RouterProcess, how: str) -> None:
    address = f"vanish.{how}"
    if how == "kill":  # a consumer process dies (SIGKILL) holding unsettled deliveries
        clients = Outcomes(router, address, 100)
        clients.on_start = lambda event: clients.start_producer(event.container)  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_clients, clients)
            consumer = await trio.lowlevel.open_process(
                [sys.executable, "-c", CONSUMER_SCRIPT, url(router), address], stdout=subprocess.PIPE, env=router_env()
            )
            try:
                assert await _read_until(consumer.stdout, b"holding\n")
            finally:
                consumer.kill()
                await consumer.wait()
                assert consumer.stdout is not None
                await consumer.stdout.aclose()
    else:
        clients = VanishingConsumer(router, address, how)
        await run_clients(clients)
    clients.check()
    counts = clients.counts
    assert sum(counts.values()) == clients.sent == 100  # every delivery has an outcome
    assert counts["accepted"] == 5
    assert counts["modified"] >= 5 and all(clients.failed_flags)  # sent, unsettled: in doubt
    assert counts["released"] > 0  # never sent: released
    assert counts["rejected"] == 0


async def _read_until(stream: Any, marker: bytes, timeout_s: float = TIMEOUT_S) -> bool:
    seen = b""
    with trio.fail_after(timeout_s):
        while marker not in seen:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return False
            seen += chunk
    return True
