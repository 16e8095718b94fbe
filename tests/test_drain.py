"""SIGTERM drains a `router run` process under traffic: it stops accepting, producers get no more
credit, deliveries in flight still reach their consumers and their outcomes the senders (a
consumer that settles a little later still has its deliveries accepted), then every connection
is closed with amqp:connection:forced saying the router is shutting down, and the process exits
0 well within the grace period."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio

from router.amqp.errors import LocalUsageError
from router.amqp.message import Message
from router.net.client import SendTracker, connect
from router.net.errors import ConnectionClosed, LinkDetached
from tests.rawamqp import HEADER, OPEN, frame, read_until
from tests.support.router_process import RouterProcess, core_ready
from tests.test_reload import wait_for_line

IN_FLIGHT = 40  # deliveries the consumer holds unsettled when the signal comes
GRACE_S = 20.0  # router run's default --grace-period-s
SLOW_CONSUMER_S = 0.5  # how long the consumer takes to settle after the signal


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
async def test_sigterm_under_traffic_lets_the_deliveries_in_flight_be_accepted(tmp_path: Path) -> None:
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
                held = [await receiver.receive() for _ in range(IN_FLIGHT)]
            signalled = time.monotonic()
            router.send_signal(signal.SIGTERM)
            # A slow consumer: it settles a moment after the signal (the router's old stop
            # released everything at once, before this).
            await trio.sleep(SLOW_CONSUMER_S)
            assert sender.link.credit == 0  # the router took the producer's credit back
            with trio.fail_after(10), pytest.raises(LinkDetached) as refused:  # no new links
                await producer.open_sender("drain/late")
            assert refused.value.condition == "amqp:link:detach-forced"
            for delivery in held:
                receiver.accept(delivery)
            with trio.fail_after(10):
                outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
            assert outcomes == ["Accepted"] * IN_FLIGHT
            # Nothing is in flight any more: the router closes, the consumer learns why.
            with trio.fail_after(10), pytest.raises(ConnectionClosed) as closed:
                await receiver.receive()
            assert closed.value.condition == "amqp:connection:forced"
            assert "shutting down" in str(closed.value)
        code = await trio.to_thread.run_sync(router.wait, GRACE_S)
        elapsed = time.monotonic() - signalled
    assert code == 0, router.output
    assert elapsed < GRACE_S / 2  # it stopped once nothing was in flight, not at the deadline
    assert "Traceback" not in router.output
    with pytest.raises(OSError):  # nothing accepts any more
        await trio.open_tcp_stream("127.0.0.1", port)


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
async def test_a_consumer_that_never_settles_holds_the_drain_only_until_its_deadline(
    tmp_path: Path,
) -> None:
    """What is still in flight at the drain deadline is released, and the exit stays within
    the grace period."""
    grace_s = 3.0
    with RouterProcess.running(tmp_path, run_args=("--grace-period-s", str(grace_s))) as router:
        port = router.ports["amqp"]
        async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
            receiver = await consumer.open_receiver("drain/stuck", credit=10)
            sender = await producer.open_sender("drain/stuck")
            trackers = [await sender.start_send(Message.value(i)) for i in range(5)]
            with trio.fail_after(10):
                for _ in trackers:
                    await receiver.receive()
            signalled = time.monotonic()
            router.send_signal(signal.SIGTERM)
            with trio.fail_after(grace_s + 5):
                outcomes = {type(await tracker.wait()).__name__ for tracker in trackers}
            assert outcomes <= {"Released", "Modified"}, outcomes
        code = await trio.to_thread.run_sync(router.wait, grace_s + 5)
        elapsed = time.monotonic() - signalled
    assert code == 0, router.output
    assert elapsed < grace_s + 0.5, elapsed


@pytest.mark.process
@pytest.mark.parametrize("grace_s", [1.5, 3.0])
async def test_a_silent_peer_cannot_hold_the_exit_past_the_grace_period(
    tmp_path: Path, grace_s: float
) -> None:
    with RouterProcess.running(tmp_path, run_args=("--grace-period-s", str(grace_s))) as router:
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


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
async def test_a_second_sigterm_ends_the_wait_for_deliveries_in_flight(tmp_path: Path) -> None:
    with RouterProcess.running(tmp_path) as router:
        port = router.ports["amqp"]
        async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
            receiver = await consumer.open_receiver("drain/again", credit=10)
            sender = await producer.open_sender("drain/again")
            trackers = [await sender.start_send(Message.value(i)) for i in range(5)]
            with trio.fail_after(10):
                for _ in trackers:
                    await receiver.receive()  # held, never settled
            signalled = time.monotonic()
            router.send_signal(signal.SIGTERM)
            await wait_for_line(router, "waiting for 5 deliveries in flight")
            router.send_signal(signal.SIGTERM)
            with trio.fail_after(10):
                outcomes = {type(await tracker.wait()).__name__ for tracker in trackers}
            assert outcomes <= {"Released", "Modified"}, outcomes
        code = await trio.to_thread.run_sync(router.wait, GRACE_S)
        elapsed = time.monotonic() - signalled
    assert code == 0, router.output
    assert elapsed < GRACE_S / 2, elapsed


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
@pytest.mark.interop
async def test_a_proton_consumer_settles_during_the_drain(tmp_path: Path) -> None:
    """The consumer is Proton (BlockingConnection): what it accepts after the signal reaches the
    producer as accepted, and it sees the router's close at the end."""
    from proton import ConnectionException
    from proton.utils import BlockingConnection

    count = 10
    with RouterProcess.running(tmp_path) as router:
        port = router.ports["amqp"]
        proton = await trio.to_thread.run_sync(lambda: BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=5))
        try:
            proton_rx = await trio.to_thread.run_sync(lambda: proton.create_receiver("drain/proton", credit=count * 2))
            async with connect("127.0.0.1", port) as producer:
                sender = await producer.open_sender("drain/proton")
                trackers = [await sender.start_send(Message.value(i)) for i in range(count)]
                bodies = await trio.to_thread.run_sync(lambda: [proton_rx.receive(timeout=5).body for _ in range(count)])
                assert bodies == list(range(count))
                router.send_signal(signal.SIGTERM)
                await wait_for_line(router, f"waiting for {count} deliveries in flight")

                def accept_all_then_wait_for_the_close() -> str:
                    for _ in range(count):
                        proton_rx.accept()
                    try:
                        proton.wait(lambda: False, timeout=10, msg="the router's close")
                    except ConnectionException as exc:
                        return str(exc)
                    return "no close"

                closed = await trio.to_thread.run_sync(accept_all_then_wait_for_the_close)
                with trio.fail_after(10):
                    outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
        finally:
            await trio.to_thread.run_sync(lambda: _close_quietly(proton))
        code = await trio.to_thread.run_sync(router.wait, GRACE_S)
    assert outcomes == ["Accepted"] * count
    assert "amqp:connection:forced" in closed, closed
    assert code == 0, router.output


def _close_quietly(connection: object) -> None:
    try:
        connection.close()  # type: ignore[attr-defined]
    except Exception:  # already closed by the router
        pass
