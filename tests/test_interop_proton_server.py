"""Interoperability: our client (router.net.client) against a server on Proton's reactor.

The server is tests.support.proton_broker.ProtonBroker, a small broker-like MessagingHandler on a
Proton Container listening on 127.0.0.1 (its own thread). It keeps one queue per address, answers
reject/, release/ and modify/ addresses with that outcome, sends presettled out of presettled/
addresses, honours drain, grants credit to held/ addresses only on command, and records what it
saw, so each test can assert on both ends.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import trio
import trio.testing
from proton import Delivery

from router.amqp.connection import Connection
from router.amqp.events import TransferReceived
from router.amqp.message import Message
from router.amqp.messaging import (
    Accepted,
    Data,
    Modified,
    Properties,
    Rejected,
    Released,
)
from router.net.client import AuthenticationError, Client, Receiver, connect

from .support.interop import run_in_thread
from .support.proton_broker import (
    MODIFY_ANNOTATIONS,
    REJECT_CONDITION,
    REJECT_DESCRIPTION,
    ProtonBroker,
)

pytestmark = pytest.mark.interop

TIMEOUT_S = 5.0
BIG = 1024 * 1024 + 4321  # over 1 MB, not a multiple of any frame size


async def broker_reaches(broker: ProtonBroker, predicate: Any) -> None:
    """Wait (without blocking trio) until the broker's records satisfy `predicate`."""
    await run_in_thread(broker.wait_for, predicate, TIMEOUT_S)


def open_client(broker: ProtonBroker, **kwargs: Any) -> Any:
    return connect("127.0.0.1", broker.port, open_timeout_s=TIMEOUT_S, **kwargs)


async def receive(receiver: Receiver) -> Any:
    with trio.fail_after(TIMEOUT_S):
        return await receiver.receive()


def count_frames(receiver: Receiver) -> list[TransferReceived]:
    """Record every transfer frame the receiver's link gets (wraps its handler)."""
    frames: list[TransferReceived] = []
    original = receiver.on_transfer

    def on_transfer(event: TransferReceived) -> None:
        frames.append(event)
        original(event)

    receiver.on_transfer = on_transfer  # type: ignore[method-assign]
    return frames


# --- settlement ----------------------------------------------------------------------------------


async def test_unsettled_sends_get_accepted_and_round_trip() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("orders")
            for i in range(5):
                message = Message.value(
                    {"n": i, "text": "h\u00e9llo"},
                    properties=Properties(message_id=f"id-{i}", subject="order"),
                )
                assert await sender.send(message) == Accepted()
            receiver = await client.open_receiver("orders", credit=10)
            got = []
            for _ in range(5):
                delivery = await receive(receiver)
                assert not delivery.settled  # the broker sends unsettled
                got.append(delivery.message)
                receiver.accept(delivery)
            await broker_reaches(broker, lambda b: len(b.outcomes) == 5)
    assert [m.body.value for m in got] == [{"n": i, "text": "h\u00e9llo"} for i in range(5)]
    assert [m.properties.message_id for m in got] == [f"id-{i}" for i in range(5)]
    assert [(a.address, a.settled, a.body) for a in broker.arrivals] == [
        ("orders", False, {"n": i, "text": "h\u00e9llo"}) for i in range(5)
    ]
    assert [(o.state, o.remote_settled) for o in broker.outcomes] == [(Delivery.ACCEPTED, True)] * 5


async def test_presettled_sends_arrive_settled_without_outcome() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            mixed = await client.open_sender("fire")
            trackers = [await mixed.start_send(Message.value(i), presettled=True) for i in range(3)]
            settled_link = await client.open_sender("fire", settle="settled")
            assert await settled_link.send(Message.value(3)) is None
            await broker_reaches(broker, lambda b: len(b.arrivals) == 4)
            assert mixed.unsettled == 0 and settled_link.unsettled == 0
    assert all(t.settled and t.state is None for t in trackers)
    # What the receiving side saw: every delivery arrived already settled.
    assert [(a.body, a.settled) for a in broker.arrivals] == [(i, True) for i in range(4)]


async def test_presettled_deliveries_from_proton_arrive_settled() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("presettled/q")
            for i in range(3):
                assert await sender.send(Message.value(i)) == Accepted()
            receiver = await client.open_receiver("presettled/q", credit=10)
            deliveries = [await receive(receiver) for _ in range(3)]
            for delivery in deliveries:
                receiver.accept(delivery)  # a no-op for settled deliveries: nothing goes out
            # A later unsettled delivery's outcome proves nothing was said about the first three.
            plain = await client.open_sender("plain")
            await plain.send(Message.value("marker"))
            marker_receiver = await client.open_receiver("plain", credit=1)
            marker = await receive(marker_receiver)
            marker_receiver.accept(marker)
            await broker_reaches(broker, lambda b: len(b.outcomes) == 1)
    assert [(d.message.body.value, d.settled) for d in deliveries] == [(i, True) for i in range(3)]
    assert [o.address for o in broker.outcomes] == ["plain"]


# --- large messages ------------------------------------------------------------------------------


async def test_large_message_to_proton_with_small_frames() -> None:
    body = os.urandom(BIG)
    with ProtonBroker.running(max_frame_size=512) as broker:
        async with open_client(broker) as client:
            assert client.engine.remote_max_frame_size == 512
            sender = await client.open_sender("big")
            assert await sender.send(Message.data(body)) == Accepted()
            await broker_reaches(broker, lambda b: len(b.arrivals) == 1)
            receiver = await client.open_receiver("big", credit=1)
            back = await receive(receiver)
            receiver.accept(back)
    [arrival] = broker.arrivals
    assert arrival.body == body  # every byte, reassembled by Proton from 512-byte frames
    assert back.message.body == (Data(value=body),)


async def test_large_message_from_proton_to_small_frame_client() -> None:
    body = os.urandom(BIG)
    with ProtonBroker.running() as broker:
        async with open_client(broker, max_frame_size=512) as client:
            sender = await client.open_sender("big")
            assert await sender.send(Message.data(body)) == Accepted()
            receiver = await client.open_receiver("big", credit=1)
            frames = count_frames(receiver)
            delivery = await receive(receiver)
            receiver.accept(delivery)
            await broker_reaches(broker, lambda b: len(b.outcomes) == 1)
    assert broker.connections_seen[0].remote_max_frame_size == 512
    assert len(frames) >= BIG // 512
    assert [f.more for f in frames] == [True] * (len(frames) - 1) + [False]
    assert delivery.message.body == (Data(value=body),)
    assert broker.outcomes[0].state == Delivery.ACCEPTED


# --- drain ---------------------------------------------------------------------------------------


async def test_drain_against_proton_sender_with_fewer_messages_than_credit() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("drain-me")
            for i in range(2):
                assert await sender.send(Message.value(i)) == Accepted()
            receiver = await client.open_receiver("drain-me", credit=0)
            receiver.flow(5)
            with trio.fail_after(TIMEOUT_S):
                await receiver.drain()
            assert receiver.link.credit == 0
            assert receiver.buffered == 2  # the queued messages came before the drained flow
            bodies = [(await receive(receiver)).message.body.value for _ in range(2)]
            await broker_reaches(broker, lambda b: len(b.drains) >= 1)
    assert bodies == [0, 1]
    assert sum(d.credit_returned for d in broker.drains) == 3


async def test_drain_against_empty_proton_sender() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            receiver = await client.open_receiver("nothing-here", credit=7)
            with trio.fail_after(TIMEOUT_S):
                await receiver.drain()
            assert receiver.link.credit == 0
            assert receiver.buffered == 0
            await broker_reaches(broker, lambda b: len(b.drains) == 1)
    assert broker.drains[0].credit_returned == 7


async def _grant(client: Client, address: str, credit: int, drain: bool) -> None:
    """Have the broker grant `credit` (draining or not) to our sender on `address`."""
    control = await client.open_sender("control")
    assert await control.send(
        Message.value({"grant": address, "credit": credit, "drain": drain})
    ) == Accepted()


@pytest.mark.parametrize("drain", [False, True], ids=["flow", "drain"])
async def test_sends_waiting_for_credit_all_go_when_proton_grants_it(drain: bool) -> None:
    # Both sends wait for credit; Proton then grants exactly enough for both. Each must go out,
    # and with drain set, the credit must be used for them rather than handed back
    # (transport §2.6.7: a drained sender hands back credit "after sending all available
    # messages").
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("held/waiting")
            outcomes: list[Any] = []

            async def send(body: str) -> None:
                outcomes.append(await sender.send(Message.value(body)))

            with trio.fail_after(TIMEOUT_S):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send, "first")
                    nursery.start_soon(send, "second")
                    await trio.testing.wait_all_tasks_blocked()
                    assert sender.link.credit == 0  # both are waiting for credit
                    await _grant(client, "held/waiting", 2, drain)
            await broker_reaches(broker, lambda b: len(b.arrivals) == 3)
    assert outcomes == [Accepted(), Accepted()]
    assert sorted(a.body for a in broker.arrivals if a.address == "held/waiting") == [
        "first", "second",
    ]  # fmt: skip
    assert broker.credit_returned_by_clients == 0


async def test_idle_sender_answers_proton_drain() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("held/idle")
            await _grant(client, "held/idle", 3, drain=True)
            await broker_reaches(broker, lambda b: b.credit_returned_by_clients == 3)
            assert sender.link.credit == 0
            assert sender.link.delivery_count == 3  # credit consumed by advancing the count


# --- outcomes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("queue/o", Accepted()),
        ("reject/o", Rejected(error=None)),  # error compared below
        ("release/o", Released()),
        ("modify/o", Modified(delivery_failed=True, undeliverable_here=True)),
    ],
    ids=["accepted", "rejected", "released", "modified"],
)
async def test_outcome_from_proton_receiver_reaches_our_sender(address: str, expected: Any) -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender(address)
            outcome = await sender.send(Message.value("judge me"))
    assert type(outcome) is type(expected)
    if isinstance(outcome, Rejected):
        assert outcome.error is not None
        assert outcome.error.condition == REJECT_CONDITION
        assert outcome.error.description == REJECT_DESCRIPTION
    if isinstance(outcome, Modified):
        assert outcome.delivery_failed is True and outcome.undeliverable_here is True
        assert outcome.message_annotations == MODIFY_ANNOTATIONS


async def _settle_with(client: Client, address: str, how: str) -> None:
    sender = await client.open_sender(address)
    assert await sender.send(Message.value(how)) == Accepted()
    receiver = await client.open_receiver(address, credit=1)
    delivery = await receive(receiver)
    if how == "accept":
        receiver.accept(delivery)
    elif how == "reject":
        receiver.reject(delivery, "com.example:bad-order", "order \u2116 7 is malformed")
    elif how == "release":
        receiver.release(delivery)
    else:
        receiver.modify(
            delivery, delivery_failed=True, undeliverable_here=True,
            annotations={"x-opt-hint": "try-elsewhere", "x-opt-retries": 2},
        )  # fmt: skip


@pytest.mark.parametrize("how", ["accept", "reject", "release", "modify"])
async def test_outcome_from_our_receiver_reaches_proton_sender(how: str) -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            await _settle_with(client, f"out/{how}", how)
            await broker_reaches(broker, lambda b: len(b.outcomes) == 1)
    [seen] = broker.outcomes
    assert seen.remote_settled is True
    if how == "accept":
        assert seen.state == Delivery.ACCEPTED
    elif how == "reject":
        assert seen.state == Delivery.REJECTED
        assert (seen.condition, seen.description) == ("com.example:bad-order", "order \u2116 7 is malformed")
    elif how == "release":
        assert seen.state == Delivery.RELEASED
    else:
        assert seen.state == Delivery.MODIFIED
        assert (seen.failed, seen.undeliverable) == (True, True)
        assert seen.annotations == {"x-opt-hint": "try-elsewhere", "x-opt-retries": 2}
        assert all(type(k).__name__ == "symbol" for k in seen.annotations)  # messaging §3.4.5


async def test_rcv_settle_mode_second_with_proton_sender() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("second/q")
            assert await sender.send(Message.value("twice settled")) == Accepted()
            receiver = await client.open_receiver("second/q", credit=1, second=True)
            assert receiver.link.remote_attach.rcv_settle_mode == 1  # Proton agreed to "second"
            settled_by_sender = trio.Event()
            original = receiver.on_disposition

            def on_disposition(event: Any) -> None:
                original(event)
                if event.settled:
                    settled_by_sender.set()

            receiver.on_disposition = on_disposition
            delivery = await receive(receiver)
            receiver.accept(delivery)
            with trio.fail_after(TIMEOUT_S):
                await settled_by_sender.wait()
            assert receiver._awaiting_settle == {}  # we settled once the sender had
            await broker_reaches(broker, lambda b: len(b.outcomes) == 1)
    [seen] = broker.outcomes
    assert seen.state == Delivery.ACCEPTED
    assert seen.remote_settled is False  # the outcome came unsettled: the sender settles first


# --- dynamic, SASL, idle time-out ----------------------------------------------------------------


async def test_dynamic_receiver_on_proton_server() -> None:
    with ProtonBroker.running() as broker:
        async with open_client(broker) as client:
            receiver = await client.open_receiver(None, dynamic=True, credit=1)
            assert receiver.address is not None and receiver.address.startswith("dynamic/")
            sender = await client.open_sender(receiver.address)
            assert await sender.send(Message.value("reply")) == Accepted()
            delivery = await receive(receiver)
            receiver.accept(delivery)
    assert delivery.message.body.value == "reply"


async def test_sasl_anonymous_against_proton_server() -> None:
    with ProtonBroker.running(sasl_mechanisms="ANONYMOUS") as broker:
        async with open_client(broker, mechanisms=("ANONYMOUS",)) as client:
            sender = await client.open_sender("q")
            assert await sender.send(Message.value("anonymous")) == Accepted()
    assert broker.connections_seen[0].user == "anonymous"


async def test_sasl_plain_is_not_offered_by_proton_server() -> None:
    # Proton's built-in SASL (python-qpid-proton wheels carry no Cyrus SASL) only offers
    # ANONYMOUS and EXTERNAL as a server, so PLAIN is tested against our endpoint only
    # (test_interop_proton_client.py). Asking for PLAIN alone must fail cleanly here.
    with ProtonBroker.running(sasl_mechanisms="ANONYMOUS PLAIN") as broker:
        with pytest.raises(AuthenticationError, match="no usable mechanism"):
            async with open_client(broker, mechanisms=("PLAIN",), username="u", password="p"):
                pass


@pytest.mark.parametrize("ours", [0.5, None], ids=["both-time-out", "only-proton-times-out"])
async def test_heartbeats_keep_idle_connection_to_proton_alive(ours: float | None) -> None:
    idle = 0.5
    with ProtonBroker.running(idle_timeout_s=idle) as broker:
        async with open_client(broker, idle_timeout_s=ours) as client:
            sender = await client.open_sender("idle")
            assert client.engine.remote_idle_timeout_s  # Proton wants heartbeats from us
            await trio.sleep(3 * idle)  # no application traffic: only heartbeats keep it open
            assert not client.engine.failed
            assert await sender.send(Message.value("still here")) == Accepted()
    [seen] = broker.connections_seen
    # We advertise half our own time-out (transport §2.4.5), or nothing.
    assert seen.remote_idle_timeout_s == (ours / 2 if ours else 0)
    assert broker.transport_errors == []
    assert [a.body for a in broker.arrivals] == ["still here"]


async def test_sender_waits_for_proton_session_window() -> None:
    # 4 KB of session capacity at 512-byte frames: Proton advertises an incoming-window of 8
    # frames, far less than the ~150 frames queued below, so our session must hold transfers
    # back and resume on each of Proton's session flows (transport §2.5.6).
    bodies = [os.urandom(2000 + i) for i in range(30)]
    with ProtonBroker.running(max_frame_size=512, session_capacity=4096) as broker:
        async with open_client(broker) as client:
            sender = await client.open_sender("windowed")
            assert client.session is not None
            assert client.session.remote_begin.incoming_window == 8
            with trio.fail_after(TIMEOUT_S):
                trackers = [await sender.start_send(Message.data(b)) for b in bodies]
                assert client.session.blocked_frames > 0  # really held back by the window
                outcomes = [await t.wait() for t in trackers]
    assert outcomes == [Accepted()] * len(bodies)
    assert [a.body for a in broker.arrivals] == bodies


class StallingBroker(ProtonBroker):
    """Blocks its reactor thread, so reads nothing, for `STALL_S` when a message with the body
    "stall" arrives: a slow consumer that makes our writes back up."""

    STALL_S = 0.5

    def on_message(self, event: Any) -> None:
        if event.message.body == "stall":
            time.sleep(self.STALL_S)
        super().on_message(event)


async def test_heartbeat_timer_does_not_starve_reads_during_a_long_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While a large write is stuck on a slow reader, the heartbeat Proton asked for comes due.
    # Once one is queued behind the write, no heartbeat timer may stay due: a deadline left in
    # the past had our connection spin on its timers, reading nothing Proton sent meanwhile
    # (its heartbeats, flows, dispositions) until its own idle time-out fired on a live peer.
    ticks = 0
    engine_tick = Connection.tick

    def counting_tick(self: Connection, now: float) -> None:
        nonlocal ticks
        ticks += 1
        engine_tick(self, now)

    monkeypatch.setattr(Connection, "tick", counting_tick)
    with StallingBroker.running(idle_timeout_s=1.0) as broker:
        async with open_client(broker, idle_timeout_s=1.2) as client:
            sender = await client.open_sender("slow")
            stall = await sender.start_send(Message.value("stall"))
            big = await sender.start_send(Message.data(os.urandom(16 << 20)))
            with trio.fail_after(4 * TIMEOUT_S):
                assert await stall.wait() == Accepted()
                assert await big.wait() == Accepted()
            assert not client.engine.failed
    assert broker.transport_errors == []
    assert ticks < 100  # timers ran now and then, not in a loop
