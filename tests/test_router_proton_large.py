"""The single router with Proton clients (tests/support/router_proton.py): large messages
(cut through in small frames, reframed for a small-frame consumer) and aborted ones (by the
producer, or by its dying mid-message)."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, cast

import pytest
import trio
from proton import Delivery, Message
from proton.utils import BlockingConnection

from .support.router_process import RouterProcess, router_env
from .support.router_proton import (
    Clients,
    MiB,
    TIMEOUT_S,
    performatives,
    router,
    run_clients,
    run_threads,
    shared_router,
    trace_frames,
    url,
)

pytestmark = [pytest.mark.interop, pytest.mark.process]


# --- large messages ------------------------------------------------------------------------------------


class LargeMessage(Clients):
    """Stream the first half of a large message, wait until the consumer holds part of it (the
    router forwards before the message is complete), then the rest; every frame the consumer
    reads is traced."""

    def __init__(self, router: RouterProcess, address: str, payload: bytes, listener: str, consumer_frame: int) -> None:
        super().__init__(router, prefetch=1, auto_accept=True)
        self.address, self.payload = address, payload
        self.listener, self.consumer_frame = listener, consumer_frame
        self.partial_before_rest = 0
        self.rest_sent = False
        self.body: Any = None
        self.outcome: int | None = None
        self.consumer_frames: list[str] = []
        self.producer_remote_max_frame = 0

    def on_start(self, event: Any) -> None:
        self.consumer = self.connect(event.container, self.listener, max_frame_size=self.consumer_frame)
        event.container.create_receiver(self.consumer, self.address, name="consumer")

    def on_connection_bound(self, event: Any) -> None:
        if event.connection == self.consumer:
            trace_frames(event.transport, self.consumer_frames)

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.producer = self.connect(event.container, self.listener)
            self.sender = event.container.create_sender(self.producer, self.address)
            self.started = False

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            self.started = True
            self.producer_remote_max_frame = event.transport.remote_max_frame_size
            event.sender.delivery(b"big")
            event.sender.stream(self.payload[: len(self.payload) // 2])

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.link.is_receiver and delivery.partial and not self.rest_sent:
            self.rest_sent = True
            self.partial_before_rest = delivery.pending
            self.sender.stream(self.payload[len(self.payload) // 2 :])
            self.sender.advance()

    def on_message(self, event: Any) -> None:
        self.body = bytes(event.message.body)  # a view of Proton's buffer: copy it

    def on_accepted(self, event: Any) -> None:
        self.outcome = event.delivery.remote_state
        self.finish()


async def test_ten_megabytes_cut_through_in_small_frames_arrive_intact(router: RouterProcess) -> None:
    body = os.urandom(10 * MiB)
    payload = Message(body=body, inferred=True).encode()  # one data section
    clients = LargeMessage(router, "big.q", payload, "small", consumer_frame=4096)
    await run_clients(clients, timeout_s=30)
    clients.check()
    assert clients.producer_remote_max_frame == 4096  # the listener's max_frame_size
    assert clients.partial_before_rest > 0  # forwarded while the producer still held half of it
    assert clients.outcome == Delivery.ACCEPTED
    assert clients.body == body
    transfers = performatives(clients.consumer_frames, "<-")["transfer"]
    assert transfers >= len(payload) // 4096  # the consumer got it in frames of at most 4 KiB


async def test_blocking_ten_megabytes_reframed_for_a_small_frame_consumer(router: RouterProcess) -> None:
    body = os.urandom(10 * MiB)

    def consume() -> bytes:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S, max_frame_size=4096)
        try:
            receiver = conn.create_receiver("big.blocking", credit=1)
            msg = receiver.receive(timeout=TIMEOUT_S)
            receiver.accept()
            return bytes(cast(bytes, msg.body))  # a data section (a view of Proton's buffer)
        finally:
            conn.close()

    def produce() -> int:
        conn = BlockingConnection(url(router), timeout=TIMEOUT_S)  # 64 KiB frames in
        try:
            return conn.create_sender("big.blocking").send(Message(body=body, inferred=True)).remote_state
        finally:
            conn.close()

    received, state = await run_threads(consume, produce, timeout_s=30)
    assert state == Delivery.ACCEPTED
    assert received == body


class ProducerAborts(Clients):
    """The producer streams part of a message, aborts it once the consumer has some of it, then
    sends an ordinary message on the same link."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.aborted = 0
        self.bodies: list[Any] = []
        self.partial_seen = False
        self.outcome: int | None = None

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address, name="consumer")

    def on_link_opened(self, event: Any) -> None:
        if event.link.name == "consumer":
            self.sender = event.container.create_sender(self.connect(event.container), self.address)
            self.started = False

    def on_sendable(self, event: Any) -> None:
        if not self.started:
            self.started = True
            self.streaming = event.sender.delivery(b"doomed")
            event.sender.stream(Message(body=b"x" * 300_000, inferred=True).encode()[:150_000])

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if delivery.link.is_receiver and delivery.partial and not delivery.aborted and not self.partial_seen:
            self.partial_seen = True
            self.streaming.abort()
            self.sender.send(Message(body="after"))

    def on_aborted(self, event: Any) -> None:
        self.aborted += 1

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)

    def on_accepted(self, event: Any) -> None:
        self.outcome = event.delivery.remote_state
        self.finish()


async def test_a_producer_abort_reaches_the_consumer(router: RouterProcess) -> None:
    clients = ProducerAborts(router, "abort.q")
    await run_clients(clients)
    clients.check()
    assert clients.partial_seen
    assert clients.aborted == 1
    assert clients.bodies == ["after"]  # the aborted message never arrived as a message
    assert clients.outcome == Delivery.ACCEPTED


PRODUCER_SCRIPT = """
import sys
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

class HalfSender(MessagingHandler):
    def __init__(self):
        super().__init__()
        self.started = False

    def on_start(self, event):
        conn = event.container.connect(sys.argv[1], reconnect=False)
        event.container.create_sender(conn, sys.argv[2])

    def on_sendable(self, event):
        if not self.started:
            self.started = True
            event.sender.delivery(b"half")
            event.sender.stream(Message(body=b"y" * 1000000, inferred=True).encode()[:200000])

Container(HalfSender()).run()
"""


class WaitForAbort(Clients):
    """A consumer that reports (to another thread) when part of a delivery has arrived, and ends
    when the delivery is aborted."""

    def __init__(self, router: RouterProcess, address: str) -> None:
        super().__init__(router)
        self.address = address
        self.attached = threading.Event()
        self.partial = threading.Event()
        self.aborted = 0
        self.bodies: list[Any] = []

    def on_start(self, event: Any) -> None:
        event.container.create_receiver(self.connect(event.container), self.address)

    def on_link_opened(self, event: Any) -> None:
        self.attached.set()

    def on_delivery(self, event: Any) -> None:
        if event.delivery.partial and not event.delivery.aborted:
            self.partial.set()

    def on_aborted(self, event: Any) -> None:
        self.aborted += 1
        self.finish()

    def on_message(self, event: Any) -> None:
        self.bodies.append(event.message.body)
        self.finish()


async def test_a_producer_dying_mid_message_aborts_it_downstream(router: RouterProcess) -> None:
    address = "dying.q"
    clients = WaitForAbort(router, address)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_clients, clients)
        producer = await trio.lowlevel.open_process(
            [sys.executable, "-c", PRODUCER_SCRIPT, url(router), address], env=router_env()
        )
        try:
            assert await trio.to_thread.run_sync(clients.partial.wait, TIMEOUT_S)
        finally:
            producer.kill()  # mid-message
            await producer.wait()
    clients.check()
    assert clients.aborted == 1
    assert clients.bodies == []
