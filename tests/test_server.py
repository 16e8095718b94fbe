"""RouterServer: listening, TCP_NODELAY, graceful shutdown (asked for or by cancellation),
memory streams, the core's timer, and socket backpressure end to end."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
import trio
import trio.testing

from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.message import Message
from router.config.models import Listener
from router.net.client import ConnectionClosed, connect
from router.net.driver import ConnectionDriver
from router.net.server import RouterServer

from .support.router_process import core_ready, router_config, router_server

__all__ = ["router_server"]  # the fixture, imported for pytest

needs_core = pytest.mark.skipif(not core_ready(), reason="the routing core cannot route yet")


async def _forced_close(receiver: Any) -> str | None:
    with trio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
        await receiver.receive()
    return closed.value.condition


@needs_core
async def test_connections_use_tcp_nodelay(router_server: tuple[RouterServer, int]) -> None:
    server, port = router_server
    async with connect("127.0.0.1", port):
        (driver,) = server._drivers.values()  # the router's side of our connection
        assert isinstance(driver.stream, trio.SocketStream)
        assert driver.stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


@needs_core
async def test_shutdown_closes_every_connection_forced_then_stops(nursery: trio.Nursery) -> None:
    config = router_config().model_copy(update={"listeners": (Listener(name="a", port=0), Listener(name="b", port=0))})
    server = RouterServer(config)
    addresses = await nursery.start(server.run)
    assert [name for name, _, _ in addresses] == ["a", "b"] and all(port for _, _, port in addresses)
    async with connect("127.0.0.1", addresses[0][2]) as one, connect("127.0.0.1", addresses[1][2]) as two:
        receivers = [await one.open_receiver("x"), await two.open_receiver("y")]
        assert server.stats()["connections"] == 2
        server.shutdown()
        for receiver in receivers:
            assert await _forced_close(receiver) == "amqp:connection:forced"
    with trio.fail_after(5):
        await server.wait_stopped()
    for _, _, port in addresses:
        with pytest.raises(OSError):
            await trio.open_tcp_stream("127.0.0.1", port)


@needs_core
async def test_cancelling_run_stops_gracefully() -> None:
    server = RouterServer(router_config())
    async with trio.open_nursery() as nursery:
        port = (await nursery.start(server.run))[0][2]
        async with connect("127.0.0.1", port) as client:
            receiver = await client.open_receiver("x")
            nursery.cancel_scope.cancel()
            assert await _forced_close(receiver) == "amqp:connection:forced"
    assert server.stopping


@needs_core
async def test_serve_stream_runs_a_connection_over_memory_streams(nursery: trio.Nursery) -> None:
    server = RouterServer(router_config())
    client_end, router_end = trio.testing.memory_stream_pair()
    nursery.start_soon(server.serve_stream, router_end, server.config.listeners[0])
    client = Connection(ConnectionConfig(container_id="memory-client"))
    opened = trio.Event()

    def on_events(events: list[ev.Event]) -> None:
        if any(isinstance(event, ev.RemoteOpen) for event in events):
            opened.set()

    driver = ConnectionDriver(client_end, client, on_events)
    nursery.start_soon(driver.run)
    client.open()
    driver.wake()
    with trio.fail_after(5):
        await opened.wait()
    assert client.remote_open is not None
    assert client.remote_open.container_id == "test-router"
    assert server.stats()["connections"] == 1
    client.close()
    driver.wake()
    with trio.fail_after(5):
        await driver.wait_closed()


class TimerCore:
    """A stand-in core that only has a timer: its deadline is set by the test."""

    router_id = "timer"

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.ticked = trio.Event()
        self.deadline_on_handle: float | None = None

    def accept(self, engine: Connection, listener: Listener, *, host: str, tls: Any) -> None:
        pass

    def handle(self, engine: Connection, events: list[ev.Event], now: float) -> None:
        if self.deadline_on_handle is not None:
            self.deadline = self.deadline_on_handle

    def take_touched(self) -> set[Connection]:
        return set()

    def tick(self, now: float) -> None:
        if self.deadline is not None and now >= self.deadline:
            self.deadline = None
            self.ticked.set()

    def next_deadline(self) -> float | None:
        return self.deadline

    def set_output_blocked(self, engine: Connection, blocked: bool, now: float) -> None:
        pass

    def read_paused(self, engine: Connection) -> bool:
        return False

    def forget(self, engine: Connection, now: float) -> None:
        pass

    def shutdown(self, now: float) -> None:
        pass


async def test_timer_ticks_the_core_at_its_deadline_even_when_a_call_moves_it(nursery: trio.Nursery) -> None:
    core = TimerCore()
    server = RouterServer(router_config(), core=core)
    await nursery.start(server.run)  # the timer sleeps: no deadline
    core.deadline_on_handle = trio.current_time() + 0.05  # the next call into the core sets one
    client_end, router_end = trio.testing.memory_stream_pair()
    nursery.start_soon(server.serve_stream, router_end, server.config.listeners[0])
    client = Connection(ConnectionConfig(container_id="c"))
    client.open()
    await client_end.send_all(client.data_to_send())  # the open reaches the core
    with trio.fail_after(2):
        await core.ticked.wait()
    server.shutdown()


@needs_core
async def test_slow_consumer_blocks_output_and_credit_holds_the_producer(nursery: trio.Nursery) -> None:
    """A consumer that stops reading: the router's writes to it pass the high-water mark, the
    core holds deliveries, and the producer is held back by credit sized to the bytes the router
    holds for it (router.core.bounds): its socket is never paused, so anything it sends (a close)
    is read. When the consumer reads again, everything flows and every delivery is accepted."""
    high_water = 1024 * 1024
    server = RouterServer(router_config(write_high_water_bytes=65536, read_high_water_bytes=high_water, link_capacity=50))
    port = (await nursery.start(server.run))[0][2]
    count, body = 200, Message.data(b"y" * 32768)
    async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
        receiver = await consumer.open_receiver("slow", credit=count)
        consumer_paused = True
        consumer.driver.pause_reading = lambda: consumer_paused  # our client stops reading
        sender = await producer.open_sender("slow")
        trackers: list[Any] = []

        async def produce() -> None:
            for _ in range(count):
                trackers.append(await sender.start_send(body))

        nursery.start_soon(produce)
        window = high_water // 32800  # 31 messages of 32 KiB fit the connection's bound
        held = [state.buffered_bytes for state in server.core.connections.values()]
        with trio.fail_after(10):  # no event tells us: poll the server's counters
            while not (server.stats()["output_blocked"] and sender.link.credit == 0 and max(held) > 0):
                await trio.sleep(0.01)
                held = [state.buffered_bytes for state in server.core.connections.values()]
        assert len(trackers) < count  # the producer is held back
        assert max(held) <= window * 32800 <= high_water
        assert server.stats()["reading_paused"] == 0  # by credit, not by a paused socket

        received = 0

        async def consume() -> None:
            nonlocal received
            while True:
                receiver.accept(await receiver.receive())
                received += 1

        consumer_paused = False
        consumer.driver.resume_reading()
        async with trio.open_nursery() as consuming:
            consuming.start_soon(consume)
            with trio.fail_after(20):
                while len(trackers) < count:
                    await trio.sleep(0.01)
                outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
            consuming.cancel_scope.cancel()
        # Even the first window (sizes not known yet) fits: it is sized for single-frame messages
        # of our max-frame-size, so nothing had to be released.
        assert set(outcomes) == {"Accepted"} and received == count
        assert server.core.bounds.released_over_budget == 0
        assert server.stats() == {"connections": 2, "reading_paused": 0, "output_blocked": 0}


async def test_the_log_names_a_connection_by_its_management_identity(
    router_server: tuple[RouterServer, int], caplog: pytest.LogCaptureFixture
) -> None:
    server, port = router_server
    caplog.set_level("INFO", logger="router.net.server")
    async with connect("127.0.0.1", port) as client:
        await client.open_receiver("anything", credit=1)
        (entity,) = [c for c in server.agent.entities("connection") if c.get("role") == "normal"]
        assert f"connection {entity['identity']} from 127.0.0.1:" in caplog.text


async def test_connections_know_the_peer_address(router_server: tuple[RouterServer, int]) -> None:
    """Management's connection entities show where each peer connected from."""
    server, port = router_server
    async with connect("127.0.0.1", port) as client:
        await client.open_receiver("anything", credit=1)  # a round trip: the open was handled
        stream = client.driver.stream
        assert isinstance(stream, trio.SocketStream)
        local_port = stream.socket.getsockname()[1]
        (entity,) = [c for c in server.agent.entities("connection") if c.get("role") == "normal"]
        assert entity["host"] == f"127.0.0.1:{local_port}"
