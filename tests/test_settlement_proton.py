"""Settlement both ways with python-qpid-proton on both ends, over real `router run` processes:
one router, and two routers in a mesh.

The receiver (auto-settle off) accepts without settling, and settles only after it has seen its
delivery settled by the router. With a sender in rcv-settle-mode second, the "three-ack" pattern:
the sender sees `accepted` unsettled and settles, and only then does the router settle the
receiver's delivery (so the receiver knows the sender will not send it again). With a sender in
rcv-settle-mode first (the default), the router, a first-mode receiver, does not wait for the
sender (transport §2.7.5): the sender sees the outcome settled, and the receiver's delivery is
settled at once, the sender doing nothing. A receiver that modifies with annotations, still
unsettled, shows the sender the annotations; one that marks a delivery received (a non-terminal
state, unsettled in either mode) shows the sender the section and offset it gave.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from .support.interop import run_container, run_in_thread
from .support.router_proton import SettleSecond
from router.testing.meshprocs import MeshProcesses
from .support.router_process import RouterProcess

pytestmark = [pytest.mark.interop, pytest.mark.process]

TIMEOUT_S = 20.0
COUNT = 40  # every fourth is modified (with annotations); of the others, one in three is first
#             marked received (a non-terminal state), then accepted once the sender has seen that


class ThreeAck(MessagingHandler):
    def __init__(self, sender_url: str, receiver_url: str, second: bool) -> None:
        super().__init__(auto_accept=False, auto_settle=False)
        self.sender_url, self.receiver_url = sender_url, receiver_url
        self.second = second  # the sender's link in rcv-settle-mode second
        self.sent = 0
        self.seen_by_sender: dict[int, Any] = {}  # message number -> (state, annotations)
        self.unsettled_when_seen: set[int] = set()  # the sender saw the outcome unsettled
        self.settled_at_receiver: list[int] = []  # settled by the router, in order
        self.early: list[int] = []  # settled at the receiver before the sender saw the outcome
        self.errors: list[str] = []
        self.connections: list[Any] = []
        self.awaiting_received: dict[int, Any] = {}  # number -> the receiver's delivery
        self.received_seen: dict[int, tuple[int, int]] = {}  # number -> section number and offset

    def on_start(self, event: Any) -> None:
        rconn = event.container.connect(self.receiver_url, reconnect=False)
        sconn = event.container.connect(self.sender_url, reconnect=False)
        self.connections = [rconn, sconn]
        event.container.create_receiver(rconn, "three-ack")
        event.container.create_sender(sconn, "three-ack", options=SettleSecond() if self.second else None)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit and self.sent < COUNT:
            delivery = event.sender.send(Message(body=self.sent))
            delivery.number = self.sent  # type: ignore[attr-defined]
            self.sent += 1

    def received(self, delivery: Any, number: int) -> None:
        delivery.number = number  # type: ignore[attr-defined]
        if number % 4 == 3:
            delivery.local.annotations = {"x-why": "try later", "x-number": number}
            delivery.local.failed = True
            delivery.update(Delivery.MODIFIED)  # not settled
        elif number % 4 == 1:
            delivery.local.section_number = 0
            delivery.local.section_offset = number
            delivery.update(Delivery.RECEIVED)  # accepted once the sender has seen this
            self.awaiting_received[number] = delivery
        else:
            delivery.update(Delivery.ACCEPTED)  # not settled

    def on_delivery(self, event: Any) -> None:
        delivery = event.delivery
        if event.link.is_sender:
            if delivery.updated and delivery.remote_state == Delivery.RECEIVED:
                number = delivery.number
                self.received_seen[number] = (delivery.remote.section_number, delivery.remote.section_offset)
                waiting = self.awaiting_received.pop(number, None)
                if waiting is not None:
                    waiting.update(Delivery.ACCEPTED)  # now the outcome, still not settled
            elif delivery.updated and delivery.remote_state in (Delivery.ACCEPTED, Delivery.MODIFIED):
                number = delivery.number
                if number not in self.seen_by_sender:
                    annotations = delivery.remote.annotations
                    self.seen_by_sender[number] = (delivery.remote_state, dict(annotations or {}))
                    if not delivery.settled:  # (Proton: settled by the remote end)
                        self.unsettled_when_seen.add(number)
                    if self.second:
                        delivery.settle()  # the sender is done with it (mode first: nothing to do)
            return
        if delivery.readable and not delivery.partial:
            message = Message()
            message.decode(event.link.recv(delivery.pending))
            event.link.advance()
            self.received(delivery, message.body)
        elif delivery.settled and delivery.number not in self.settled_at_receiver:
            number = delivery.number
            if number not in self.seen_by_sender:
                self.early.append(number)
            self.settled_at_receiver.append(number)
            delivery.settle()  # the third acknowledgement
            if len(self.settled_at_receiver) == COUNT:
                for conn in self.connections:
                    conn.close()

    def on_transport_error(self, event: Any) -> None:
        self.errors.append(f"transport {event.transport.condition}")

    def on_link_error(self, event: Any) -> None:
        self.errors.append(f"link {event.link.remote_condition}")

    def on_connection_error(self, event: Any) -> None:
        self.errors.append(f"connection {event.connection.remote_condition}")


async def _run(handler: ThreeAck) -> None:
    await run_in_thread(lambda: run_container(Container(handler), timeout_s=TIMEOUT_S), timeout_s=TIMEOUT_S + 3)
    assert not handler.errors
    assert len(handler.seen_by_sender) == COUNT
    if handler.second:
        assert handler.unsettled_when_seen == set(range(COUNT)), "the router settled before the sender"
        assert not handler.early, "a receiver's delivery was settled before the sender saw its outcome"
    else:
        assert not handler.unsettled_when_seen, "a first-mode sender was told an outcome unsettled"
    assert sorted(handler.settled_at_receiver) == list(range(COUNT))
    assert handler.received_seen == {n: (0, n) for n in range(COUNT) if n % 4 == 1}  # received, as set
    for number, (state, annotations) in handler.seen_by_sender.items():
        if number % 4 == 3:
            assert state == Delivery.MODIFIED
            assert annotations == {"x-why": "try later", "x-number": number}
        else:
            assert state == Delivery.ACCEPTED


@pytest.mark.parametrize("mode", ["second", "first"])
@pytest.mark.parametrize("routers", [1, 2])
async def test_unsettled_outcomes_with_proton_on_both_ends(tmp_path: Path, routers: int, mode: str) -> None:
    """second: three-ack; first: both ends settled by the router with the outcome."""
    with ExitStack() as stack:
        if routers == 1:
            router = stack.enter_context(RouterProcess.running(tmp_path))
            url = f"amqp://127.0.0.1:{router.ports['amqp']}"
            sender_url = receiver_url = url
        else:
            mesh = stack.enter_context(MeshProcesses(tmp_path, "A-B"))
            await mesh.wait_converged()
            sender_url, receiver_url = (f"amqp://127.0.0.1:{mesh.port(r)}" for r in ("A", "B"))
        await _run(ThreeAck(sender_url, receiver_url, second=mode == "second"))
