"""The single router with Proton clients (tests/support/router_proton.py): producer credit
(only while a consumer exists, in a window of link capacity) and drain."""

from __future__ import annotations

from typing import Any

import pytest
from proton import Message

from .support.router_process import RouterProcess
from .support.router_proton import Clients, router, run_clients, shared_router

pytestmark = [pytest.mark.interop, pytest.mark.process]


# --- credit ------------------------------------------------------------------------------------------


class CreditWindow(Clients):
    """A producer attaches to an address without consumers (round trip: no credit), a consumer
    with no credit of its own attaches (credit: exactly the window), the producer fills the
    window (round trip: no more credit while all of it waits), the consumer takes everything
    (round trip: the window is open again), the consumer detaches (credit drained to 0)."""

    def __init__(self, router: RouterProcess, listener: str, address: str) -> None:
        super().__init__(router, prefetch=0)
        self.listener, self.address = listener, address
        self.phase = "attach"
        self.credit: dict[str, int] = {}
        self.sent = self.accepted = self.received = 0
        self.sender: Any = None
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        self.producer = self.connect(event.container, self.listener)
        self.sender = event.container.create_sender(self.producer, self.address)

    def on_link_opened(self, event: Any) -> None:
        container = event.container
        if event.link == self.sender:
            self.probe(container, self.producer, "no-consumer")
        elif event.link.name == "no-consumer":
            self.credit["no consumer"] = self.sender.credit
            self.phase = "consumer"
            self.receiver = container.create_receiver(self.connect(container, self.listener), self.address)
        elif event.link.name == "window-full":
            self.credit["window full"] = self.sender.credit
            self.receiver.flow(10_000)
        elif event.link.name == "all-settled":
            self.credit["all settled"] = self.sender.credit
            self.phase = "gone"
            self.receiver.close()

    def on_link_flow(self, event: Any) -> None:
        if event.link != self.sender:
            return
        credit = self.sender.credit
        if self.phase == "consumer" and credit > 0:
            self.credit["consumer"] = credit
            while self.sender.credit > 0:
                self.sender.send(Message(body=self.sent))
                self.sent += 1
            self.phase = "full"
            self.probe(event.container, self.producer, "window-full")
        elif self.phase == "gone" and credit == 0:
            self.credit["consumer gone"] = credit
            self.finish()

    def on_message(self, event: Any) -> None:
        self.received += 1
        self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.sent:
            self.probe(event.container, self.producer, "all-settled")


@pytest.mark.parametrize(("listener", "capacity"), [("small", 10), ("mid", 100)])
async def test_credit_only_while_a_consumer_exists_in_a_window_of_link_capacity(
    router: RouterProcess, listener: str, capacity: int
) -> None:
    clients = CreditWindow(router, listener, f"credit.{listener}")
    await run_clients(clients)
    clients.check()
    credit = clients.credit
    assert credit["no consumer"] == 0
    assert credit["consumer"] == capacity  # the link_capacity of the producer's listener
    assert credit["window full"] == 0  # every credit is used by a delivery still in flight
    # Nothing in flight: the window is open again (the router tops up in batches, once at
    # least a quarter of it is used, so between three quarters and all of it).
    assert capacity - capacity // 4 <= credit["all settled"] <= capacity
    assert credit["consumer gone"] == 0  # the last consumer went: drained
    assert clients.sent == clients.received == clients.accepted == capacity


class QuarterTopUp(Clients):
    """A consumer with plenty of credit, a producer on a listener of link capacity 100: the
    producer sends 24 messages (less than a quarter of its window), all accepted (round trip:
    its credit is still 76, no flow per message), then one more (round trip: topped up to 100)."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router, prefetch=0)
        self.address = address
        self.credit: dict[str, int] = {}
        self.sent = self.accepted = 0
        self.sender: Any = None
        self.receiver: Any = None

    def on_start(self, event: Any) -> None:
        container = event.container
        self.receiver = container.create_receiver(self.connect(container), self.address)
        self.producer = self.connect(container, "mid")

    def on_link_opened(self, event: Any) -> None:
        container = event.container
        if event.link == self.receiver:
            self.receiver.flow(1000)
            self.sender = container.create_sender(self.producer, self.address)
        elif event.link.name == "after-24":
            self.credit["after 24"] = self.sender.credit
            self.send(1)
        elif event.link.name == "after-25":
            self.credit["after 25"] = self.sender.credit
            self.finish()

    def on_link_flow(self, event: Any) -> None:
        if event.link == self.sender and self.sent == 0 and self.sender.credit > 0:
            self.credit["first"] = self.sender.credit
            self.send(24)

    def send(self, count: int) -> None:
        for _ in range(count):
            self.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_message(self, event: Any) -> None:
        self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.sent:
            self.probe(event.container, self.producer, f"after-{self.sent}")


async def test_a_producer_is_topped_up_once_a_quarter_of_its_window_is_used(router: RouterProcess) -> None:
    """Flows go out in batches, not one per message, but before the producer runs short: the
    router only looks at the end of a batch of reads, and topped up at half the window a
    producer streaming at full speed ran dry before the flow reached it."""
    clients = QuarterTopUp(router, "credit.quarter")
    await run_clients(clients)
    clients.check()
    assert clients.credit == {"first": 100, "after 24": 76, "after 25": 100}


class FirstWindow(Clients):
    """A consumer with credit, then a producer on the default listener: its first window is what
    the connection's byte bound holds of single-frame messages of the largest frame (16 MiB /
    64 KiB), not the whole link capacity; one small message later (round trip) it is the whole
    link capacity."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.credit: dict[str, int] = {}
        self.sender: Any = None

    def on_start(self, event: Any) -> None:
        container = event.container
        self.consumer = self.connect(container)
        container.create_receiver(self.consumer, self.address)
        self.probe(container, self.consumer, "consumer-ready")

    def on_link_opened(self, event: Any) -> None:
        container = event.container
        if event.link.name == "consumer-ready":
            self.producer = self.connect(container)
            self.sender = container.create_sender(self.producer, self.address)
        elif event.link.name == "after-one":
            self.credit["after one"] = self.sender.credit
            self.finish()

    def on_sendable(self, event: Any) -> None:
        if event.link == self.sender and "first" not in self.credit:
            self.credit["first"] = self.sender.credit
            self.sender.send(Message(body="small"))

    def on_accepted(self, event: Any) -> None:
        self.probe(event.container, self.producer, "after-one")


async def test_the_first_window_is_sized_by_bytes_then_grows_to_link_capacity(router: RouterProcess) -> None:
    clients = FirstWindow(router, "credit.first-window")
    await run_clients(clients)
    clients.check()
    assert clients.credit["first"] == 16 * 1024 * 1024 // 65536  # read_high_water_bytes / max_frame_size
    assert clients.credit["after one"] == 1000  # link_capacity: small messages, sizes not watched


class Drain(Clients):
    """A consumer without credit; three messages wait for it in the router (round trip on the
    producer's connection); the consumer drains with credit 10: three arrive and 7 credits come
    back. Then flow(5) and drain(0) with nothing waiting: all 5 come back."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router, prefetch=0)
        self.address = address
        self.received: list[Any] = []
        self.drained: list[tuple[int, int, int]] = []  # (messages so far, credits returned, credit after)
        self.accepted = 0
        self.sent = False

    def on_start(self, event: Any) -> None:
        self.consumer = self.connect(event.container)
        self.receiver = event.container.create_receiver(self.consumer, self.address)

    def on_link_opened(self, event: Any) -> None:
        if event.link == self.receiver:
            self.producer = self.connect(event.container)
            event.container.create_sender(self.producer, self.address)
        elif event.link.name == "queued":
            self.receiver.drain(10)  # credit 10, drain=true

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            self.sent = True
            for i in range(3):
                event.sender.send(Message(body=i))
            self.probe(event.container, self.producer, "queued")

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)
        self.accept(event.delivery)

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if link != self.receiver or not link.drain_mode:
            return
        returned = link.drained()
        if returned or (link.credit == 0 and not link.draining()):
            self.drained.append((len(self.received), returned, link.credit))
            if len(self.drained) == 1:
                link.drain_mode = False
                link.flow(5)
                link.drain(0)  # drain what we have
            else:
                self.finish()


async def test_drain_requests_from_a_container_receiver_are_honoured(router: RouterProcess) -> None:
    clients = Drain(router, "drain.q")
    await run_clients(clients)
    clients.check()
    assert clients.received == [0, 1, 2]
    # The waiting messages went out, then the rest of the credit came back; the second drain
    # found nothing waiting and returned all of it.
    assert clients.drained == [(3, 7, 0), (3, 5, 0)]
