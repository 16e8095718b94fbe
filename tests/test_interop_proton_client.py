"""Interoperability: Proton clients (python-qpid-proton, Proton C underneath) against our engine.

Our end is the QueuePeer test double (router.testing.peer) on a real loopback listener; the other
end is a third-party AMQP 1.0 implementation, both its blocking API (BlockingConnection) and its
reactor API (Container + MessagingHandler). Proton runs on its own thread (tests.support.interop),
our endpoint on trio; every wait has a deadline and every thread is joined.

Also here, as the baseline for the SASL cases, our own client against the same endpoint.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import trio
from proton import ConnectionException, Delivery, Endpoint, Link, Message, Timeout
from proton.handlers import MessagingHandler
from proton.reactor import AtMostOnce, Container, LinkOption
from proton.utils import BlockingConnection

from router.amqp import errors as E
from router.amqp.decode import decode_at
from router.amqp.events import (
    Authenticated,
    AuthenticationFailed,
    ProtocolViolation,
    RemoteOpen,
    TransferReceived,
)
from router.amqp.framing import AMQP_HEADER, FRAME_HEADER, frame
from router.amqp.message import Message as OurMessage
from router.amqp.message import decode_message
from router.amqp.messaging import Accepted, Data
from router.amqp.performatives import Close, Open
from router.amqp.sasl import SaslServerConfig
from router.net.client import AuthenticationError, connect

from .support.interop import RecordingPeer, run_in_thread, run_proton, start_recording_peer

pytestmark = pytest.mark.interop

TIMEOUT_S = 5.0  # every Proton blocking call
BIG = 1024 * 1024 + 4321  # a body over 1 MB that is not a multiple of any frame size


def url(port: int) -> str:
    return f"amqp://127.0.0.1:{port}"


def queued(peer: RecordingPeer, address: str) -> list[tuple[bytes, bool]]:
    return list(peer.queues.get(address, ()))


def check_plain(authzid: str, user: str, password: str) -> bool:
    return (user, password) == ("alice", "s3cret")


PLAIN_ONLY = SaslServerConfig(mechanisms=("PLAIN",), check_plain=check_plain)


# --- BlockingConnection --------------------------------------------------------------------------


async def test_blocking_client_unsettled_sends_get_accepted(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)

    def send() -> list[tuple[Any, bool]]:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S)
        try:
            sender = conn.create_sender("orders")
            results = []
            for i in range(5):
                msg = Message(
                    body={"n": i, "text": "h\u00e9llo"}, id=f"id-{i}", subject="order",
                    properties={"seq": i},
                )  # fmt: skip
                delivery = sender.send(msg)
                results.append((delivery.remote_state, delivery.settled))
            return results
        finally:
            conn.close()

    results = await run_in_thread(send)
    assert results == [(Delivery.ACCEPTED, True)] * 5
    stored = queued(peer, "orders")
    assert [settled for _, settled in stored] == [False] * 5  # each went unsettled
    decoded = [decode_message(payload) for payload, _ in stored]
    assert [m.body.value for m in decoded] == [{"n": i, "text": "h\u00e9llo"} for i in range(5)]
    assert [m.properties.message_id for m in decoded] == [f"id-{i}" for i in range(5)]
    assert [m.application_properties for m in decoded] == [{"seq": i} for i in range(5)]
    assert peer.stats.outcomes == {"accepted": 5}

    def receive() -> list[Any]:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S)
        try:
            receiver = conn.create_receiver("orders", credit=10)
            got = []
            for _ in range(5):
                msg = receiver.receive(timeout=TIMEOUT_S)
                got.append((msg.body, msg.id, msg.subject, msg.properties))
                receiver.accept()
            return got
        finally:
            conn.close()

    got = await run_in_thread(receive)
    assert got == [({"n": i, "text": "h\u00e9llo"}, f"id-{i}", "order", {"seq": i}) for i in range(5)]
    assert queued(peer, "orders") == []


async def test_blocking_client_presettled_sends_arrive_settled(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)

    def send() -> None:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S)
        try:
            sender = conn.create_sender("fire-and-forget", options=AtMostOnce())
            for i in range(3):
                delivery = sender.send(Message(body=f"m{i}"))  # returns at once: settled
                assert delivery.remote_state == 0  # no outcome, and none awaited
        finally:  # the close goes out after the transfers: our endpoint has them all by then
            conn.close()

    await run_in_thread(send)
    transfers = peer.of_type(TransferReceived)
    assert len(transfers) == 3
    assert all(t.settled for t in transfers)  # what the receiving side saw
    assert [s for _, s in queued(peer, "fire-and-forget")] == [True] * 3
    assert [decode_message(p).body.value for p, _ in queued(peer, "fire-and-forget")] == [
        "m0", "m1", "m2",
    ]  # fmt: skip


async def test_blocking_client_dynamic_receiver(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)

    def run() -> tuple[str, Any]:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S)
        try:
            receiver = conn.create_receiver(None, dynamic=True, credit=1)
            address = receiver.remote_source.address
            sender = conn.create_sender(address)
            delivery = sender.send(Message(body="to the temporary queue"))
            assert delivery.remote_state == Delivery.ACCEPTED
            msg = receiver.receive(timeout=TIMEOUT_S)
            receiver.accept()
            return address, msg.body
        finally:
            conn.close()

    address, body = await run_in_thread(run)
    assert address.startswith("tmp/")
    assert body == "to the temporary queue"


async def test_blocking_client_large_message_to_small_frame_endpoint(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery, max_frame_size=512)
    body = os.urandom(BIG)

    def send() -> tuple[int, Any]:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S)
        try:
            remote_max = conn.conn.transport.remote_max_frame_size
            delivery = conn.create_sender("big").send(Message(body=body, inferred=True))  # a data section
            return remote_max, delivery.remote_state
        finally:
            conn.close()

    remote_max, state = await run_in_thread(send)
    assert remote_max == 512
    assert state == Delivery.ACCEPTED
    frames = peer.of_type(TransferReceived)
    assert len(frames) >= BIG // 512  # really split into frames of at most 512 bytes
    assert [f.more for f in frames] == [True] * (len(frames) - 1) + [False]
    [(payload, _)] = queued(peer, "big")
    assert decode_message(payload).body == (Data(value=body),)


async def test_blocking_client_large_message_from_endpoint_to_small_frames(
    nursery: trio.Nursery,
) -> None:
    peer, port = await start_recording_peer(nursery)
    body = os.urandom(BIG)

    def run() -> bytes:
        sending = BlockingConnection(url(port), timeout=TIMEOUT_S)
        try:
            assert sending.create_sender("big").send(Message(body=body, inferred=True)).remote_state == (
                Delivery.ACCEPTED
            )
        finally:
            sending.close()
        receiving = BlockingConnection(url(port), timeout=TIMEOUT_S, max_frame_size=512)
        try:
            receiver = receiving.create_receiver("big", credit=1)
            msg = receiver.receive(timeout=TIMEOUT_S)
            receiver.accept()
            assert isinstance(msg.body, (bytes, memoryview))  # a data section
            return bytes(msg.body)
        finally:
            receiving.close()

    received = await run_in_thread(run)
    assert received == body
    opens = [e.open for e in peer.of_type(RemoteOpen)]
    assert [o.max_frame_size for o in opens][-1] == 512  # the receiving Proton asked for 512
    assert not peer.of_type(ProtocolViolation)


# --- Container (reactor) clients -----------------------------------------------------------------


class SendThenReceive(MessagingHandler):
    """Send `count` messages, wait for every outcome, then receive them back on the same
    connection, and close."""

    def __init__(self, url: str, address: str, count: int) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address, self.count = url, address, count
        self.sent = 0
        self.accepted = 0
        self.other_outcomes: list[int] = []
        self.received: list[tuple[Any, bool]] = []
        self.conn: Any = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.conn, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.count:
            event.sender.send(Message(body={"seq": self.sent}, id=self.sent))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.count:
            receiver = event.container.create_receiver(self.conn, self.address)
            receiver.flow(self.count)

    def on_rejected(self, event: Any) -> None:
        self.other_outcomes.append(event.delivery.remote_state)

    on_released = on_rejected

    def on_message(self, event: Any) -> None:
        self.received.append((event.message.body, event.delivery.settled))
        self.accept(event.delivery)
        if len(self.received) == self.count:
            event.connection.close()


async def test_container_client_sends_and_receives(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)
    handler = SendThenReceive(url(port), "reactor-queue", 20)
    await run_proton(Container(handler), TIMEOUT_S)
    assert handler.accepted == 20
    assert handler.other_outcomes == []
    assert handler.received == [({"seq": i}, False) for i in range(20)]
    assert peer.stats.received == 20 and peer.stats.sent == 20


class Presettled(MessagingHandler):
    """Send presettled on a mixed link (settling each delivery as it is sent), then receive on
    an at-most-once link; record the settled flag of every delivery seen."""

    def __init__(self, url: str, address: str, count: int) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address, self.count = url, address, count
        self.sent = 0
        self.receiving = False
        self.dispositions = 0
        self.received: list[tuple[Any, bool]] = []
        self.conn: Any = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.conn, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.count:
            event.sender.send(Message(body=self.sent)).settle()
            self.sent += 1
        if self.sent == self.count and not self.receiving:
            # The attach goes out after the transfers: they are queued by the time it arrives.
            self.receiving = True
            receiver = event.container.create_receiver(
                self.conn, self.address, options=AtMostOnce()
            )
            receiver.flow(self.count)

    def on_accepted(self, event: Any) -> None:
        self.dispositions += 1

    on_rejected = on_released = on_settled = on_accepted

    def on_message(self, event: Any) -> None:
        self.received.append((event.message.body, event.delivery.settled))
        if len(self.received) == self.count:
            event.connection.close()


async def test_container_client_presettled_both_ways(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)
    handler = Presettled(url(port), "presettled", 4)
    await run_proton(Container(handler), TIMEOUT_S)
    # Proton -> our endpoint: every transfer arrived settled, so no disposition came back.
    transfers = peer.of_type(TransferReceived)
    assert [t.settled for t in transfers] == [True] * 4
    assert handler.dispositions == 0
    # Our endpoint -> Proton on an at-most-once link: delivered settled.
    assert handler.received == [(i, True) for i in range(4)]


class SendOne(MessagingHandler):
    """Send one message to `address` and record the outcome the receiving side gave it."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__(prefetch=0, auto_settle=True)
        self.url, self.address = url, address
        self.sent = False
        self.outcome: dict[str, Any] | None = None

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(conn, self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            event.sender.send(Message(body="judge me"))
            self.sent = True

    def _record(self, event: Any) -> None:
        delivery = event.delivery
        condition = delivery.remote.condition
        self.outcome = {
            "state": delivery.remote_state,
            "settled": delivery.settled,
            "condition": condition.name if condition else None,
            "description": condition.description if condition else None,
            "failed": delivery.remote.failed,
            "undeliverable": delivery.remote.undeliverable,
        }
        event.connection.close()

    on_accepted = on_rejected = on_released = _record


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("queue/a", {"state": Delivery.ACCEPTED, "condition": None}),
        ("reject/a", {"state": Delivery.REJECTED, "condition": E.PRECONDITION_FAILED,
                      "description": "rejected by test peer"}),
        ("release/a", {"state": Delivery.RELEASED, "condition": None}),
        ("modify/a", {"state": Delivery.MODIFIED, "failed": True, "undeliverable": True}),
    ],
    ids=["accepted", "rejected", "released", "modified"],
)  # fmt: skip
async def test_container_client_sees_every_outcome(
    nursery: trio.Nursery, address: str, expected: dict[str, Any]
) -> None:
    peer, port = await start_recording_peer(nursery)
    handler = SendOne(url(port), address)
    await run_proton(Container(handler), TIMEOUT_S)
    assert handler.outcome is not None
    assert handler.outcome["settled"] is True  # our endpoint settles when it decides
    for key, value in expected.items():
        assert handler.outcome[key] == value, key


class Drainer(MessagingHandler):
    """Queue `count` messages, then attach a receiver and drain with `credit` > count."""

    def __init__(self, url: str, address: str, count: int, credit: int) -> None:
        super().__init__(prefetch=0, auto_accept=True)
        self.url, self.address, self.count, self.credit = url, address, count, credit
        self.sent = self.accepted = 0
        self.received: list[Any] = []
        self.returned = 0
        self.drain_done = False
        self.credit_after = -1
        self.conn: Any = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.conn, self.address)

    def on_sendable(self, event: Any) -> None:
        while event.sender.credit > 0 and self.sent < self.count:
            event.sender.send(Message(body=self.sent))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.count:
            event.container.create_receiver(self.conn, self.address)

    def on_link_opened(self, event: Any) -> None:
        if event.link.is_receiver:
            event.link.drain(self.credit)  # credit and drain=true in one flow

    def on_message(self, event: Any) -> None:
        self.received.append(event.message.body)

    def on_link_flow(self, event: Any) -> None:
        link = event.link
        if not link.is_receiver or not link.drain_mode:
            return
        self.returned += link.drained()
        if link.credit == 0 and not link.draining() and not self.drain_done:
            self.drain_done = True
            self.credit_after = link.credit
            event.connection.close()


async def test_container_receiver_drains_our_sender(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)
    handler = Drainer(url(port), "drain-me", count=2, credit=5)
    await run_proton(Container(handler), TIMEOUT_S)
    assert handler.drain_done
    assert handler.received == [0, 1]  # what was queued went out
    assert handler.returned == 3  # the rest of the credit came back
    assert handler.credit_after == 0
    assert queued(peer, "drain-me") == []


class SettleSecond(LinkOption):
    def apply(self, link: Any) -> None:
        link.rcv_settle_mode = Link.RCV_SECOND


class SecondModeReceiver(MessagingHandler):
    """Queue one message, receive it on a link in rcv-settle-mode second: send the outcome
    unsettled, wait for our endpoint (the sender) to settle, then settle."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__(prefetch=0, auto_accept=False)
        self.url, self.address = url, address
        self.sent = False
        self.agreed_mode: int | None = None
        self.settled_on_arrival: bool | None = None
        self.sender_settled_with: int | None = None

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url, reconnect=False)
        event.container.create_sender(self.conn, self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.sent:
            event.sender.send(Message(body="settle me twice"))
            self.sent = True

    def on_accepted(self, event: Any) -> None:
        if event.link.is_sender:
            receiver = event.container.create_receiver(
                self.conn, self.address, options=SettleSecond()
            )
            receiver.flow(1)

    def on_message(self, event: Any) -> None:
        self.agreed_mode = event.link.remote_rcv_settle_mode
        self.settled_on_arrival = event.delivery.settled
        event.delivery.update(Delivery.ACCEPTED)  # the outcome, not yet settled

    def on_settled(self, event: Any) -> None:
        if event.link.is_receiver:
            self.sender_settled_with = event.delivery.remote_state
            event.delivery.settle()
            event.connection.close()


async def test_container_receiver_in_rcv_settle_mode_second(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery)
    handler = SecondModeReceiver(url(port), "second")
    await run_proton(Container(handler), TIMEOUT_S)
    assert handler.agreed_mode == Link.RCV_SECOND
    assert handler.settled_on_arrival is False
    # Our endpoint settled after the receiver's outcome (transport §2.8.3, second).
    assert handler.sender_settled_with == Delivery.ACCEPTED


# --- SASL ----------------------------------------------------------------------------------------


async def test_proton_sasl_anonymous(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(
        nursery, sasl=SaslServerConfig(mechanisms=("ANONYMOUS",))
    )

    def run() -> Any:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S, allowed_mechs="ANONYMOUS")
        try:
            return conn.create_sender("q").send(Message(body="anon")).remote_state
        finally:
            conn.close()

    assert await run_in_thread(run) == Delivery.ACCEPTED
    [auth] = peer.of_type(Authenticated)
    assert auth.mechanism == "ANONYMOUS"


async def test_proton_sasl_plain_good_password(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(nursery, sasl=PLAIN_ONLY)

    def run() -> Any:
        conn = BlockingConnection(
            url(port), timeout=TIMEOUT_S, user="alice", password="s3cret", allowed_mechs="PLAIN"
        )
        try:
            return conn.create_sender("q").send(Message(body="plain")).remote_state
        finally:
            conn.close()

    assert await run_in_thread(run) == Delivery.ACCEPTED
    [auth] = peer.of_type(Authenticated)
    assert (auth.mechanism, auth.user) == ("PLAIN", "alice")


async def test_proton_sasl_plain_bad_password_then_endpoint_keeps_serving(
    nursery: trio.Nursery,
) -> None:
    peer, port = await start_recording_peer(nursery, sasl=PLAIN_ONLY)

    def bad() -> str:
        try:
            conn = BlockingConnection(
                url(port), timeout=TIMEOUT_S, user="alice", password="wrong", allowed_mechs="PLAIN"
            )
        except ConnectionException as exc:
            return str(exc)
        conn.close()
        raise AssertionError("a bad password was accepted")

    error = await run_in_thread(bad)
    assert "amqp:unauthorized-access" in error
    [failed] = peer.of_type(AuthenticationFailed)
    assert failed.mechanism == "PLAIN"
    assert not peer.of_type(Authenticated)

    def good() -> Any:
        conn = BlockingConnection(
            url(port), timeout=TIMEOUT_S, user="alice", password="s3cret", allowed_mechs="PLAIN"
        )
        try:
            return conn.create_sender("q").send(Message(body="second try")).remote_state
        finally:
            conn.close()

    assert await run_in_thread(good) == Delivery.ACCEPTED
    assert peer.stats.connections == 2


async def test_our_client_sasl_against_our_endpoint(nursery: trio.Nursery) -> None:
    peer, port = await start_recording_peer(
        nursery,
        sasl=SaslServerConfig(mechanisms=("PLAIN", "ANONYMOUS"), check_plain=check_plain),
    )
    async with connect("127.0.0.1", port, username="alice", password="s3cret") as client:
        sender = await client.open_sender("q")
        assert await sender.send(OurMessage.value("plain")) == Accepted()
    async with connect("127.0.0.1", port, mechanisms=("ANONYMOUS",)) as client:
        sender = await client.open_sender("q")
        assert await sender.send(OurMessage.value("anonymous")) == Accepted()
    with pytest.raises(AuthenticationError):
        async with connect("127.0.0.1", port, username="alice", password="nope") as client:
            pass
    # still serving after a failed authentication
    async with connect("127.0.0.1", port, username="alice", password="s3cret") as client:
        receiver = await client.open_receiver("q", credit=5)
        bodies = [(await receiver.receive()).message.body.value for _ in range(2)]
        assert bodies == ["plain", "anonymous"]
    auths = [(a.mechanism, a.user) for a in peer.of_type(Authenticated)]
    assert auths == [("PLAIN", "alice"), ("ANONYMOUS", "anonymous"), ("PLAIN", "alice")]
    assert [f.mechanism for f in peer.of_type(AuthenticationFailed)] == ["PLAIN"]


# --- idle time-out -------------------------------------------------------------------------------


@pytest.mark.parametrize("ours", [0.5, None], ids=["both-time-out", "only-proton-times-out"])
async def test_proton_heartbeats_keep_idle_connection_alive(
    nursery: trio.Nursery, ours: float | None
) -> None:
    idle = 0.5
    peer, port = await start_recording_peer(nursery, idle_timeout_s=ours)

    def run() -> tuple[float, Any]:
        conn = BlockingConnection(url(port), timeout=TIMEOUT_S, heartbeat=idle)
        try:
            sender = conn.create_sender("idle")
            try:  # no application traffic for three idle time-outs; only heartbeats flow
                conn.wait(lambda: False, timeout=3 * idle)
            except Timeout:
                pass
            assert conn.conn.state & Endpoint.REMOTE_ACTIVE
            remote_idle = conn.conn.transport.remote_idle_timeout
            return remote_idle, sender.send(Message(body="still here")).remote_state
        finally:
            conn.close()

    start = time.monotonic()
    remote_idle, state = await run_in_thread(run)
    assert time.monotonic() - start >= 3 * idle
    assert state == Delivery.ACCEPTED
    # We advertise half our own time-out (transport §2.4.5), or nothing.
    assert remote_idle == (ours / 2 if ours else 0)
    assert not peer.of_type(ProtocolViolation)
    [open_] = [e.open for e in peer.of_type(RemoteOpen)]
    assert open_.idle_time_out  # Proton asked us for heartbeats, and got them


def _read_frames(data: bytes) -> list[Any]:
    """Decode the performatives of complete AMQP frames in `data` (heartbeats skipped)."""
    out, pos = [], 0
    while len(data) - pos >= 8:
        size, doff, _type, _channel = FRAME_HEADER.unpack_from(data, pos)
        if len(data) - pos < size:
            break
        if size > doff * 4:
            performative, _ = decode_at(data, pos + doff * 4, pos + size)
            out.append(performative)
        pos += size
    return out


async def test_endpoint_closes_a_silent_peer(nursery: trio.Nursery) -> None:
    idle = 0.4
    peer, port = await start_recording_peer(nursery, idle_timeout_s=idle)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(AMQP_HEADER + frame(0, Open(container_id="silent-peer")))
        opened_at = trio.current_time()
        received = b""
        with trio.fail_after(idle * 5):
            while chunk := await stream.receive_some(65536):  # until our endpoint hangs up
                received += chunk
        closed_after = trio.current_time() - opened_at
    assert received[:8] == AMQP_HEADER
    frames = _read_frames(received[8:])
    assert [type(f) for f in frames] == [Open, Close]
    their_open, close = frames
    assert their_open.idle_time_out == int(idle * 500)
    assert close.error is not None and close.error.condition == E.RESOURCE_LIMIT_EXCEEDED
    assert closed_after >= idle
    assert any(
        v.condition == E.RESOURCE_LIMIT_EXCEEDED for v in peer.of_type(ProtocolViolation)
    )
