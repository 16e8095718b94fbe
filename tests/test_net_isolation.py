"""Nothing a connection does escapes its own task, and every way a connection ends makes the
core forget it and release what it held. Through the whole RouterServer: over real sockets,
and (endings in time, and the memory test, which waits for the drivers' deadlines) on memory
streams in virtual time (router.testing.memrouter).

Hostile closes (an `error` field that is a boolean, a string, a number) once took the process
down from the connection clean-up; connections that failed with a protocol error were never
forgotten by the core (management listed them, and each kept ~1.7 KB)."""

from __future__ import annotations

import gc
import socket
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from router.amqp.message import Message
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.net.client import ClientError, connect
from router.net.guard import _close_reason
from router.net.server import RouterServer
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.link import Link
from router.amqp.session import Session
from router.core.connections import ConnState
from router.net.driver import ConnectionDriver
from router.net.driverlife import CLOSE_GRACE_S
from router.testing.memrouter import MemNetwork, MemRouter

from .rawamqp import (BOOLEAN_TRUE, CLOSE_CODE, HEADER, OPEN, SMALLINT_5, STRING_X, UNKNOWN_PERFORMATIVE, close_with,
                      frame, read_until, read_until_closed)  # fmt: skip
from .support.release_checks import needs_patchable_core, needs_patchable_driver
from .support.router_process import RouterProcess


def two_listener_config(**listener: Any) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id="iso", mode="interior"),
        listeners=(
            Listener(name="amqp", host="127.0.0.1", port=0, **listener),
            Listener(name="ir", host="127.0.0.1", port=0, role="inter-router", **listener),
        ),
    )


@pytest.fixture
async def server(nursery: trio.Nursery) -> AsyncIterator[RouterServer]:
    server = RouterServer(two_listener_config(idle_timeout_s=0.2, handshake_timeout_s=0.3))
    await nursery.start(server.run)
    yield server
    server.shutdown()
    with trio.fail_after(5):
        await server.wait_stopped()


@pytest.fixture
async def mem_router(mem_network: MemNetwork) -> MemRouter:
    """The `server` fixture's router on memory streams (tests name autojump_clock), with time-outs
    of realistic length: virtual time makes them free."""
    return await mem_network.start(two_listener_config(idle_timeout_s=10, handshake_timeout_s=10))


def port(server: RouterServer, name: str) -> int:
    return server.listener_ports()[name]


async def open_stream(target: RouterServer | MemRouter, listener: str) -> trio.abc.Stream:
    if isinstance(target, MemRouter):
        return await target.open_stream(listener)
    return await trio.open_tcp_stream("127.0.0.1", port(target, listener))


async def forgotten(target: RouterServer | MemRouter) -> None:
    """Wait until the router holds no connection at all: the server's drivers, the core's
    connection table and management's connection list are empty."""
    server = target.server if isinstance(target, MemRouter) else target
    with trio.fail_after(5):
        while server.stats()["connections"] or server.core.connections:  # type: ignore[attr-defined]
            await trio.sleep(0.01)  # no event says "forgotten": poll the counters
    assert server.agent.entities("connection") == []


async def still_serves(target: RouterServer | MemRouter) -> None:
    """A well-behaved client gets a message through, end to end."""
    with trio.fail_after(5):
        stream = await open_stream(target, "amqp")
        async with connect("127.0.0.1", 0, stream=stream) as client:
            receiver = await client.open_receiver("alive", credit=1)
            sender = await client.open_sender("alive")
            tracker = await sender.start_send(Message.value("ping"))
            delivery = await receiver.receive()
            receiver.accept(delivery)
            assert type(await tracker.wait()).__name__ == "Accepted"


@pytest.mark.parametrize("listener", ["amqp", "ir"])
@pytest.mark.parametrize("error_field", [BOOLEAN_TRUE, STRING_X, SMALLINT_5], ids=["boolean", "string", "number"])
async def test_a_close_with_a_wrongly_typed_error_costs_that_connection_only(
    server: RouterServer, listener: str, error_field: bytes
) -> None:
    async with connect("127.0.0.1", port(server, "amqp")) as bystander:
        watcher = await bystander.open_receiver("bystander", credit=1)
        hostile = await trio.open_tcp_stream("127.0.0.1", port(server, listener))
        payload = HEADER + frame(OPEN) + frame(close_with(error_field))
        assert len(payload) < 48  # the whole attack fits in one small write
        await hostile.send_all(payload)
        await read_until_closed(hostile)
        await hostile.aclose()
        sender = await bystander.open_sender("bystander")
        with trio.fail_after(5):
            tracker = await sender.start_send(Message.value("still here"))
            watcher.accept(await watcher.receive())
            assert type(await tracker.wait()).__name__ == "Accepted"
    assert not server.stopping
    await forgotten(server)


def test_the_close_log_line_reads_any_error_field() -> None:
    """The clean-up's log line does not rely on the engine's type checks."""
    engine = Connection(ConnectionConfig(container_id="x"))
    for hostile in (True, "x", 5, b"\xff", ["condition"], None):
        engine.remote_error = hostile  # type: ignore[assignment]
        reason = _close_reason(engine)
        assert (reason == "") == (hostile is None)
    engine.remote_error = None
    long = type("E", (), {})()
    engine.remote_error = long  # type: ignore[assignment]
    assert "type E" in _close_reason(engine)


@needs_patchable_core
async def test_a_core_failure_costs_that_connection_only(server: RouterServer, caplog: pytest.LogCaptureFixture) -> None:
    """A core call that raises for one connection ends that connection (logged), is forgotten by
    the core, and nobody else notices."""
    core: Any = server.core
    handle = core.handle
    doomed: list[Connection] = []

    def failing_handle(engine: Connection, events: list[Any], now: float) -> None:
        if engine in doomed:
            raise RuntimeError("a bug in the core")
        handle(engine, events, now)

    core.handle = failing_handle
    async with connect("127.0.0.1", port(server, "amqp")) as bystander:
        watcher = await bystander.open_receiver("bystander", credit=1)
        with trio.fail_after(5):
            async with connect("127.0.0.1", port(server, "amqp")) as victim:
                await victim.open_receiver("v", credit=1)
                (engine,) = [e for e in server._drivers if e.remote_open.container_id == victim.engine.config.container_id]
                doomed.append(engine)
                with pytest.raises(ClientError):
                    await victim.open_sender("v")  # its attach reaches the failing core
        with trio.fail_after(5):
            while len(core.connections) > 1:
                await trio.sleep(0.01)
        sender = await bystander.open_sender("bystander")  # the same connection, still served
        with trio.fail_after(5):
            tracker = await sender.start_send(Message.value("unaffected"))
            watcher.accept(await watcher.receive())
            assert type(await tracker.wait()).__name__ == "Accepted"
    assert any("failed" in r.getMessage() and r.exc_info for r in caplog.records)
    await forgotten(server)
    await still_serves(server)
    assert not server.stopping


async def _open_then(target: RouterServer | MemRouter, how: str) -> None:
    """One connection that ends in the way `how` names."""
    listener = "ir" if how == "inter-router decode error" else "amqp"
    stream = await open_stream(target, listener)
    wait_s = 30.0 if isinstance(target, MemRouter) else 5.0  # past the time-outs of either
    try:
        if how in ("decode error", "inter-router decode error"):
            await stream.send_all(HEADER + frame(OPEN) + frame(UNKNOWN_PERFORMATIVE))
            await read_until_closed(stream)
        elif how == "bad close":
            await stream.send_all(HEADER + frame(OPEN) + frame(close_with(BOOLEAN_TRUE)))
            await read_until_closed(stream)
        elif how == "bad header":
            await stream.send_all(b"HTTP/1.1 GET /\r\n\r\n")
            await read_until_closed(stream)
        elif how == "idle time-out":
            await stream.send_all(HEADER + frame(OPEN))
            await read_until(stream, CLOSE_CODE, timeout_s=wait_s)  # the router closes a silent peer
        elif how == "handshake time-out":
            await stream.send_all(HEADER)
            await read_until_closed(stream, timeout_s=wait_s)
        elif how == "reset":
            await stream.send_all(HEADER + frame(OPEN))
            await read_until(stream, b"\x00\x53\x10")  # its open: the core knows us
            assert isinstance(stream, trio.SocketStream)
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    finally:
        await stream.aclose()


ENDINGS = ["decode error", "inter-router decode error", "bad close", "bad header", "reset"]
ENDINGS_IN_TIME = ["idle time-out", "handshake time-out"]  # in virtual time, on memory streams


@pytest.mark.parametrize("how", ENDINGS)
async def test_every_way_a_connection_ends_is_forgotten(server: RouterServer, how: str) -> None:
    for _ in range(3):
        await _open_then(server, how)
    await forgotten(server)
    await still_serves(server)
    await forgotten(server)


@pytest.mark.parametrize("how", ENDINGS_IN_TIME)
async def test_every_way_a_connection_ends_in_time_is_forgotten(
    autojump_clock: trio.testing.MockClock, mem_router: MemRouter, how: str
) -> None:
    started = trio.current_time()
    for _ in range(3):
        await _open_then(mem_router, how)
    assert trio.current_time() - started >= 3 * 10  # each waited for its 10 s time-out
    await forgotten(mem_router)
    await still_serves(mem_router)
    await forgotten(mem_router)


def _connection_objects() -> int:
    """Live objects that belong to some connection (engines, the core's states, drivers,
    sessions and links)."""
    gc.collect()
    kinds = (Connection, ConnState, ConnectionDriver, Session, Link)
    return sum(1 for obj in gc.get_objects() if isinstance(obj, kinds))


async def test_failed_connections_leave_no_memory_behind(autojump_clock: trio.testing.MockClock, mem_router: MemRouter) -> None:
    """Many connections that fail with a protocol error: no core state, no connection object
    left, no memory growth. Cancel scopes stay in trio's deadline heap until their deadline
    passes (the test's own time-outs among them): trio's files are left out, and the test
    waits (in virtual time) until the drivers' deadlines have passed between batches."""

    async def batch(n: int) -> None:
        for _ in range(n):
            await _open_then(mem_router, "decode error")
        await forgotten(mem_router)
        await trio.sleep(CLOSE_GRACE_S + 10 + 1)  # the drivers' and handshake deadlines pass: no event says so
        gc.collect()

    await batch(20)  # warm-up: caches, logging, lazily built tables
    objects = _connection_objects()
    tracemalloc.start()
    try:
        await batch(20)
        before = tracemalloc.take_snapshot()
        await batch(200)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert _connection_objects() == objects
    assert mem_router.server.stats()["connections"] == 0
    not_trio = [tracemalloc.Filter(False, "*/trio/*"), tracemalloc.Filter(False, tracemalloc.__file__)]
    growth = sum(stat.size_diff for stat in after.filter_traces(not_trio).compare_to(before.filter_traces(not_trio), "filename"))
    assert growth < 200 * 100, f"{growth} bytes for 200 failed connections"  # the leak was ~1.7 KB each


async def test_a_consumer_that_vanishes_releases_its_deliveries_and_address(server: RouterServer) -> None:
    """A consumer's connection reset while it holds an unsettled delivery: the producer hears
    released (or modified), and the consumer's link and address go from the core."""
    core: Any = server.core
    async with connect("127.0.0.1", port(server, "amqp")) as producer:
        async with connect("127.0.0.1", port(server, "amqp")) as consumer_client:
            receiver = await consumer_client.open_receiver("vanish", credit=1)
            sender = await producer.open_sender("vanish")
            tracker = await sender.start_send(Message.value("held"))
            await receiver.receive()  # arrived, not settled
            stream = consumer_client.driver.stream
            assert isinstance(stream, trio.SocketStream)
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            stream.socket.close()  # a reset, as a crashed host's would be
            with trio.fail_after(5):
                outcome = await tracker.wait()
            assert type(outcome).__name__ in ("Released", "Modified")
        with trio.fail_after(5):
            while len(core.connections) > 1:
                await trio.sleep(0.01)
        (state,) = core.connections.values()
        assert not state.out_links
        entry = core.table.find("vanish")
        assert entry is None or not entry.consumers


async def test_a_cancelled_connection_is_forgotten(nursery: trio.Nursery) -> None:
    """A connector removed at run time cancels its connection's task: both routers' cores
    forget the inter-router connection (the dialling side by cancellation, the other by the
    socket closing), and the mesh loses the neighbour."""
    hub = RouterServer(two_listener_config())
    await nursery.start(hub.run)
    to_hub = Connector(name="to-hub", host="127.0.0.1", port=port(hub, "ir"))
    spoke = RouterServer(RouterConfig(router=RouterSection(id="spoke", mode="interior"),
                                      listeners=(Listener(host="127.0.0.1", port=0),), connectors=(to_hub,)))  # fmt: skip
    await nursery.start(spoke.run)
    with trio.fail_after(10):
        while not any(c["role"] == "inter-router" and c["opened"] for c in hub.agent.entities("connection")):
            await trio.sleep(0.01)  # the connector dials: poll management
    assert spoke.delete_connector("to-hub")
    await forgotten(spoke)
    await forgotten(hub)
    for server in (spoke, hub):
        server.shutdown()
        with trio.fail_after(5):
            await server.wait_stopped()


def test_router_run_survives_hostile_closes(tmp_path: Path) -> None:
    """The 40-byte input that once stopped `router run`, on a client and an inter-router
    listener: the process keeps serving and logs no traceback."""
    config = {"router": {"id": "hostile", "mode": "interior"},
              "listeners": [{"name": "amqp", "port": 0}, {"name": "ir", "port": 0, "role": "inter-router"}]}  # fmt: skip
    with RouterProcess.running(tmp_path, config) as router:

        async def attack_then_use() -> str:
            for listener in ("amqp", "ir"):
                for error_field in (BOOLEAN_TRUE, STRING_X, SMALLINT_5):
                    stream = await trio.open_tcp_stream("127.0.0.1", router.ports[listener])
                    await stream.send_all(HEADER + frame(OPEN) + frame(close_with(error_field)))
                    await read_until_closed(stream)
                    await stream.aclose()
            with trio.fail_after(10):
                async with connect("127.0.0.1", router.ports["amqp"]) as client:
                    receiver = await client.open_receiver("after", credit=1)
                    sender = await client.open_sender("after")
                    tracker = await sender.start_send(Message.value("still serving"))
                    receiver.accept(await receiver.receive())
                    return type(await tracker.wait()).__name__

        assert trio.run(attack_then_use) == "Accepted"
        assert router.proc is not None and router.proc.poll() is None
    assert "Traceback" not in router.output


@needs_patchable_driver
async def test_a_failure_writing_to_one_connection_ends_that_one_not_the_caller(
    server: RouterServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer's delivery goes to a consumer whose output fails (here: its flush raises,
    as a core bug in the output-blocked call would): the consumer's connection ends, the
    producer hears an outcome and keeps its connection."""
    async with connect("127.0.0.1", port(server, "amqp")) as producer:
        async with connect("127.0.0.1", port(server, "amqp")) as consumer:
            await consumer.open_receiver("broken-out", credit=5)
            consumer_engine = next(e for e in server._drivers if e.context is not None and e.context.out_links)
            broken = server._drivers[consumer_engine]

            flush = type(broken).flush

            def failing_flush(driver: Any) -> None:  # drivers have __slots__: patch the class, fail one
                if driver is broken:
                    raise RuntimeError("a bug on the way out")
                flush(driver)

            monkeypatch.setattr(type(broken), "flush", failing_flush)
            sender = await producer.open_sender("broken-out")
            tracker = await sender.start_send(Message.value("to a broken consumer"))
            with trio.fail_after(5):
                await broken.wait_closed()
                outcome = await tracker.wait()
            assert type(outcome).__name__ in ("Released", "Modified")
        with trio.fail_after(5):
            while len(server.core.connections) > 1:  # type: ignore[attr-defined]
                await trio.sleep(0.01)
        await producer.open_receiver("producer-still-works", credit=1)
    await still_serves(server)
