"""SIGTERM drains a `router run` process under traffic: it stops accepting, every delivery in
flight gets an outcome (released to its sender), every connection is closed with
amqp:connection:forced saying the router is shutting down, and the process exits 0 well within
the grace period."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio

from router.amqp.errors import LocalUsageError
from router.amqp.message import Message
from router.net.client import SendTracker, connect
from router.net.errors import ConnectionClosed
from tests.rawamqp import HEADER, OPEN, frame, read_until
from tests.support.router_process import RouterProcess, core_ready

IN_FLIGHT = 40  # deliveries the consumer holds unsettled when the signal comes
GRACE_S = 20.0  # router run's default --grace-period-s


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
async def test_sigterm_under_traffic_gives_every_delivery_an_outcome(tmp_path: Path) -> None:
    with RouterProcess.running(tmp_path) as router:
        port = router.ports["amqp"]
        async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
            receiver = await consumer.open_receiver("drain/orders", credit=IN_FLIGHT * 2)
            sender = await producer.open_sender("drain/orders")
            # Some settled end to end before the signal ...
            for i in range(10):
                tracker = await sender.start_send(Message.value(f"early {i}"))
                receiver.accept(await receiver.receive())
                assert type(await tracker.wait()).__name__ == "Accepted"
            # ... and IN_FLIGHT held by the consumer, unsettled, when it comes.
            trackers = [await sender.start_send(Message.value(i)) for i in range(IN_FLIGHT)]
            with trio.fail_after(10):
                for _ in range(IN_FLIGHT):
                    await receiver.receive()
            signalled = time.monotonic()
            router.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
            assert set(outcomes) <= {"Released", "Modified"}, outcomes
            assert len(outcomes) == IN_FLIGHT
            # The consumer learns why its connection ends.
            with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
                await receiver.receive()
            assert closed.value.condition == "amqp:connection:forced"
            assert "shutting down" in str(closed.value)
        code = await trio.to_thread.run_sync(router.wait, GRACE_S)
        elapsed = time.monotonic() - signalled
    assert code == 0, router.output
    assert elapsed < GRACE_S
    assert "Traceback" not in router.output
    with pytest.raises(OSError):  # nothing accepts any more
        await trio.open_tcp_stream("127.0.0.1", port)


@pytest.mark.process
@pytest.mark.parametrize("grace_s", [1.5, 3.0])
async def test_a_silent_peer_cannot_hold_the_exit_past_the_grace_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grace_s: float
) -> None:
    import tests.support.router_process as support

    plain = support.router_command
    monkeypatch.setattr(support, "router_command", lambda *args: plain(*args, "--grace-period-s", str(grace_s)))
    with RouterProcess.running(tmp_path) as router:
        # A peer that opens and then neither reads nor answers the router's close.
        stream = await trio.open_tcp_stream("127.0.0.1", router.ports["amqp"])
        await stream.send_all(HEADER + frame(OPEN))
        await read_until(stream, b"\x00\x53\x10")  # the router's open: the connection is up
        signalled = time.monotonic()
        router.send_signal(signal.SIGTERM)
        code = await trio.to_thread.run_sync(router.wait, grace_s + 5)
        elapsed = time.monotonic() - signalled
        await stream.aclose()
    assert code == 0, router.output
    assert grace_s - 1.5 <= elapsed < grace_s + 1.0, elapsed  # it waited for the peer, within the period


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
async def test_sigterm_during_a_continuous_stream_leaves_no_sender_guessing(tmp_path: Path) -> None:
    """Messages keep flowing when the signal comes: each sent delivery ends with an outcome, or
    (the few still on the wire when the router closed) its sender is told the connection was
    forced closed; none waits forever."""
    with RouterProcess.running(tmp_path) as router:
        port = router.ports["amqp"]
        trackers = []
        async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
            receiver = await consumer.open_receiver("drain/stream", credit=50)
            sender = await producer.open_sender("drain/stream")

            async def consume() -> None:
                try:
                    while True:
                        receiver.accept(await receiver.receive())
                except (ConnectionClosed, LocalUsageError):  # accepting what arrived just before the close
                    return

            async def signal_once_settled(tracker: SendTracker) -> None:
                await tracker.wait()  # traffic is flowing end to end: now
                router.send_signal(signal.SIGTERM)

            async def produce(nursery: trio.Nursery) -> None:
                try:
                    for i in range(100_000):
                        trackers.append(await sender.start_send(Message.value(i)))
                        if i == 100:
                            nursery.start_soon(signal_once_settled, trackers[100])
                except ConnectionClosed:
                    return

            with trio.fail_after(15):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(consume)
                    nursery.start_soon(produce, nursery)
                fates: dict[str, int] = {}
                for tracker in trackers:
                    try:
                        fate = type(await tracker.wait()).__name__
                    except ConnectionClosed as exc:
                        assert exc.condition == "amqp:connection:forced", exc
                        fate = "connection forced"
                    fates[fate] = fates.get(fate, 0) + 1
        code = await trio.to_thread.run_sync(router.wait, GRACE_S)
    assert code == 0, router.output
    assert fates.get("Accepted", 0) > 100, fates
    assert set(fates) <= {"Accepted", "Released", "Modified", "connection forced"}, fates
