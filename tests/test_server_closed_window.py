"""Peers that take nothing, over real sockets through the whole server: a consumer whose session
incoming window stays closed while its link has credit (transport §2.5.6: the router's engine
must hold the transfers), and a peer that asks for echoed flows without reading the answers.
Neither may make the router hold more than its bounds for them: the frames a closed window holds
count as output that has not drained (router/amqp/sessionheld.py, router/net/output.py), so the
core stops writing there and holds the producer back by credit; a connection whose unsent
answers pass four write high-water marks is not read further (router/net/driverlife.py). Once
the peer takes what it was sent, everything arrives and nothing is lost. A consumer that takes
nothing for stalled_stream_timeout_s is detached; a producer paused meanwhile is not read at its
timers (heartbeats) either."""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
import trio

from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.fastpath import flow_performative, frame_header
from router.amqp.message import Message
from router.amqp.messaging import Source
from router.amqp.session import Session
from router.amqp.sessionout import write_session_flow
from router.config.connections import READ_PAUSE_UNSENT_FACTOR
from router.config.models import RouterConfig
from router.net.client import LinkDetached, connect
from router.net.driver import ConnectionDriver
from router.net.server import RouterServer

from .support.router_process import core_ready, router_config

pytestmark = pytest.mark.skipif(not core_ready(), reason="the routing core cannot route yet")

HIGH_WATER = 256 * 1024  # the listener's write_high_water_bytes
MESSAGE = 32 * 1024


def _window(session: Session, size: int) -> None:
    """Our session's incoming window, announced to the router at once (a session flow)."""
    session.incoming_window = session.incoming_window_size = size
    write_session_flow(session)


async def _until(predicate: Any, timeout_s: float = 10.0) -> None:
    """No event tells us: poll the server's state."""
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.01)


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, "the router closed the connection"
        data += chunk
    return bytes(data)


async def test_a_consumer_whose_session_window_stays_closed_holds_back_the_producer(nursery: trio.Nursery) -> None:
    server = RouterServer(router_config(
        write_high_water_bytes=HIGH_WATER, read_high_water_bytes=1024 * 1024, link_capacity=50,
    ))  # fmt: skip
    port = (await nursery.start(server.run))[0][2]
    count = 200
    async with connect("127.0.0.1", port) as consumer, connect("127.0.0.1", port) as producer:
        assert consumer.session is not None
        _window(consumer.session, 0)  # (sent before the attach: the router knows it first)
        receiver = await consumer.open_receiver("closed", credit=count)  # credit for them all
        sender = await producer.open_sender("closed")
        trackers: list[Any] = []

        async def produce() -> None:
            for i in range(count):
                trackers.append(await sender.start_send(Message.data(b"%08d" % i * (MESSAGE // 8))))

        nursery.start_soon(produce)

        def held() -> int:  # what the router's engines hold for closed windows
            return max(engine.output.held_bytes for engine in server._drivers)

        await _until(lambda: held() > 0 and server.stats()["output_blocked"] and sender.link.credit == 0)
        # The core stopped at the mark: what the window holds is one batch past it at most.
        assert HIGH_WATER < held() <= HIGH_WATER + 4 * (MESSAGE + 100)
        assert len(trackers) < count
        assert server.core.bounds.released_over_budget == 0
        # An operator sees why (management's connection entities, `router stat connections`).
        (row,) = [c for c in server.agent.entities("connection") if c["windowHeldBytes"]]
        assert row["outputBlocked"] is True and row["windowHeldBytes"] == held()

        _window(consumer.session, 2048)
        consumer.driver.wake()
        with trio.fail_after(20):
            bodies = []
            for _ in range(count):
                delivery = await receiver.receive()
                bodies.append(delivery.message.body_bytes)
                receiver.accept(delivery)
            while len(trackers) < count:
                await trio.sleep(0.01)
            outcomes = {type(await tracker.wait()).__name__ for tracker in trackers}
        assert outcomes == {"Accepted"}
        assert [body[:8] for body in bodies] == [b"%08d" % i for i in range(count)]
        await _until(lambda: server.stats()["output_blocked"] == 0 and held() == 0)


async def test_a_peer_that_asks_for_echoes_without_reading_them_is_not_read_further(nursery: trio.Nursery) -> None:
    # Small socket buffers on both ends, so that little hides below the router.
    high = 65536
    server = RouterServer(router_config(write_high_water_bytes=high, socket_buffer_bytes=high))
    port = (await nursery.start(server.run))[0][2]
    peer = trio.socket.socket()
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, high)
    peer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, high)
    await peer.connect(("127.0.0.1", port))
    stream = trio.SocketStream(peer)
    engine = Connection(ConnectionConfig(container_id="asks-without-reading"))
    engine.open(hostname="127.0.0.1")
    session = engine.begin_session()
    session.attach_receiver("echoes", source=Source(address="anything"))
    await stream.send_all(engine.data_to_send())
    await _until(lambda: len(server.core.connections) == 1 and any(d.engine.sessions_by_local for d in server._drivers.values()))
    (driver,) = server._drivers.values()
    # flow(next-incoming-id 0, window 2048, next-outgoing-id 0, window 2048, handle 0, credit 10, echo)
    body = flow_performative(0, 2048, 0, 2048, handle=0, delivery_count=0, link_credit=10, available=None, drain=False, echo=True)
    asks = 100_000
    flood = (frame_header(8 + len(body), 0) + body) * asks
    sent = trio.Event()

    async def ask() -> None:
        await stream.send_all(flood)
        sent.set()

    nursery.start_soon(ask)
    bound = READ_PAUSE_UNSENT_FACTOR * high
    await _until(lambda: driver.reading_paused)
    assert not sent.is_set()  # the router stopped taking them
    # What waits for us: past the bound by the answers to one read at most.
    assert bound < driver.unsent_bytes <= bound + 4 * 65536

    # We read now: the router reads again, and every ask has its answer (after the protocol
    # header, the router's open, begin and attach).
    expected = 3 + asks
    with trio.fail_after(30):
        received = bytearray(await _receive_exactly(stream, 8))
        assert received == b"AMQP\x00\x01\x00\x00"
        frames = 0
        while frames < expected:
            head = await _receive_exactly(stream, 4)
            size = struct.unpack(">I", head)[0]
            await _receive_exactly(stream, size - 4)
            frames += 1
    await sent.wait()
    assert not driver.reading_paused and driver.unsent_bytes == 0
    await stream.aclose()


async def test_a_consumer_that_stalls_a_stream_is_detached_and_its_producer_read_again(nursery: trio.Nursery) -> None:
    """A consumer taking nothing of a large message streaming to it (its window closed) for the
    listener's stalled_stream_timeout_s: its link is detached (resource-limit-exceeded), the
    producer hears modified (delivery-failed: it may send again), the frames held for it are
    dropped and the producer's connection, paused at its byte bound, is read again."""
    server = RouterServer(router_config(
        write_high_water_bytes=HIGH_WATER, read_high_water_bytes=1024 * 1024, stalled_stream_timeout_s=0.5,
    ))  # fmt: skip
    port = (await nursery.start(server.run))[0][2]
    body = bytes(range(251)) * (8 * 1024 * 1024 // 251)
    async with connect("127.0.0.1", port) as stalled, connect("127.0.0.1", port) as producer:
        assert stalled.session is not None
        _window(stalled.session, 0)
        receiver = await stalled.open_receiver("stream", credit=10)
        sender = await producer.open_sender("stream")
        tracker = await sender.start_send(Message.data(body))
        with trio.fail_after(10):
            outcome = await tracker.wait()
        assert type(outcome).__name__ == "Modified" and outcome.delivery_failed
        with trio.fail_after(5), pytest.raises(LinkDetached) as detached:
            await receiver.receive()
        assert detached.value.condition == "amqp:resource-limit-exceeded"
        assert "stalled_stream_timeout_s" in str(detached.value)
        await _until(lambda: sum(s.held_frame_bytes for s in server.core.connections.values()) == 0
                     and server.stats()["reading_paused"] == 0)
        # The producer sends it again, to a consumer that reads: it arrives whole.
        async with connect("127.0.0.1", port) as reader:
            again = await reader.open_receiver("stream", credit=10)
            tracker = await sender.start_send(Message.data(body))
            with trio.fail_after(20):
                delivery = await again.receive()
                again.accept(delivery)
                assert type(await tracker.wait()).__name__ == "Accepted"
            assert delivery.message.body_bytes == body


async def test_a_paused_producer_is_not_read_at_its_heartbeat_timers(nursery: trio.Nursery) -> None:
    """The producer's connection is paused at its byte bound (frames held for a consumer whose
    window is closed); it asked for heartbeats every 0.2 s (idle time-out 0.4 s), so the
    router's timers for it fall due again and again. Each used to read once, taking in another
    read's worth of the message to hold; now the router only looks that the peer's bytes wait."""
    server = RouterServer(router_config(write_high_water_bytes=HIGH_WATER, read_high_water_bytes=1024 * 1024))
    port = (await nursery.start(server.run))[0][2]
    # (The consumer closes first, on the way out: the producer's close waits behind the rest of
    # its message, unread while the router holds the maximum from it.)
    async with connect("127.0.0.1", port, idle_timeout_s=0.4) as producer, connect("127.0.0.1", port) as stalled:
        assert stalled.session is not None
        _window(stalled.session, 0)
        await stalled.open_receiver("stream", credit=10)
        tracker = await (await producer.open_sender("stream")).start_send(Message.data(bytes(24 * 1024 * 1024)))
        await _until(lambda: server.stats()["reading_paused"] == 1)

        def held() -> int:
            return sum(state.held_frame_bytes for state in server.core.connections.values())

        before = held()
        await trio.sleep(1.5)  # about seven heartbeat timers of the producer's connection
        assert held() - before < 65536
        assert server.stats()["reading_paused"] == 1 and not tracker.settled


class WindowlessBroker:
    """A broker double on our engine, over a socket: it takes the router's auto-link attaches (as
    the queue's receiver, with credit), keeps its session incoming window closed, answers
    detaches, and counts what it saw."""

    def __init__(self) -> None:
        self.engine = Connection(ConnectionConfig(container_id="windowless-broker"))
        self.attaches = 0
        self.detach_errors: list[str | None] = []
        self.attached = trio.Event()

    def on_events(self, events: list[Any]) -> None:
        for event in events:
            if isinstance(event, ev.RemoteBegin) and event.session.state.local.name == "UNINIT":
                event.session.begin(incoming_window=0)  # (the router begins the auto-link's session)
            elif isinstance(event, ev.RemoteAttach) and event.link.state.local.name == "UNINIT":
                link = event.link
                link.attach(source=link.remote_source, target=link.remote_target)
                link.flow(100)
                self.attaches += 1
                self.attached.set()
            elif isinstance(event, ev.RemoteDetach):
                self.detach_errors.append(event.error.condition if event.error is not None else None)
                if event.link.state.local.name == "ACTIVE":
                    event.link.detach()


async def test_an_auto_link_to_a_broker_that_takes_nothing_is_detached_and_attached_again(nursery: trio.Nursery) -> None:
    """The broker closes its session window while the router streams it a message (as a broker
    under a memory alarm): after the route-container listener's stalled_stream_timeout_s the
    auto-link is detached (the producer hears modified, the router holds nothing), and attached
    again after its retry back-off."""
    config = RouterConfig.model_validate({
        "router": {"id": "autolinked"},
        "listeners": [
            {"name": "amqp", "host": "127.0.0.1", "port": 0, "write_high_water_bytes": HIGH_WATER},
            {"name": "brokers", "host": "127.0.0.1", "port": 0, "role": "route-container",
             "write_high_water_bytes": HIGH_WATER, "stalled_stream_timeout_s": 0.5},
        ],
        "auto_links": [{"address": "orders", "direction": "out", "connection": "brokers", "retry_initial_s": 0.2}],
    })  # fmt: skip
    server = RouterServer(config)
    ports = {name: port for name, _, port in await nursery.start(server.run)}
    broker = WindowlessBroker()
    driver = ConnectionDriver(await trio.open_tcp_stream("127.0.0.1", ports["brokers"]), broker.engine, broker.on_events)
    nursery.start_soon(driver.run)
    broker.engine.open(hostname="127.0.0.1")
    driver.wake()
    with trio.fail_after(10):
        await broker.attached.wait()
    async with connect("127.0.0.1", ports["amqp"]) as producer:
        sender = await producer.open_sender("orders")
        tracker = await sender.start_send(Message.data(bytes(8 * 1024 * 1024)))
        with trio.fail_after(10):
            outcome = await tracker.wait()
        assert type(outcome).__name__ == "Modified" and outcome.delivery_failed
        await _until(lambda: broker.attaches == 2)  # attached again after the back-off
    assert broker.detach_errors == ["amqp:resource-limit-exceeded"]
    assert sum(state.held_frame_bytes for state in server.core.connections.values()) == 0
    assert server.stats()["reading_paused"] == 0
