"""One monotonic clock: the server drives the core with trio's clock and reads the wall clock
once, at start, for what must be wall time. A wall clock that steps an hour forward or back
then changes nothing: neighbours stay (a step forward once made every neighbour look dead, a
step back stalled the timer and so this router's HELLOs), held deliveries do not expire; and
wall times in messages (absolute-expiry-time) still mean wall time."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

from router.amqp.message import Message
from router.amqp.messaging import Header, Properties
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.core.router import RouterCore
from router.net.client import connect
from router.net.server import RouterServer
from router.testing.memrouter import MemNetwork

HELLO_S, DEAD_S = 0.15, 0.6  # short, with room for a loaded machine


class SteppingWallClock:
    """The real wall clock plus `step` seconds (the test moves it)."""

    def __init__(self) -> None:
        self.step = 0.0
        self._real = time.time

    def __call__(self) -> float:
        return self._real() + self.step


def interior(name: str, hello_s: float = HELLO_S, dead_s: float = DEAD_S, **extra: Any) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=name, mode="interior", hello_interval_s=hello_s, dead_interval_s=dead_s),
        listeners=(Listener(name="amqp", host="127.0.0.1", port=0),
                   Listener(name="ir", host="127.0.0.1", port=0, role="inter-router")),  # fmt: skip
        **extra,
    )


@asynccontextmanager
async def running(config: RouterConfig, wall: Callable[[], float], nursery: trio.Nursery) -> AsyncIterator[RouterServer]:
    server = RouterServer(config, wall_clock=wall)
    await nursery.start(server.run)
    try:
        yield server
    finally:
        server.shutdown()
        with trio.fail_after(5):
            await server.wait_stopped()


def neighbours(server: RouterServer) -> set[str]:
    return {n["id"] for n in server.agent.entities("router.node") if n.get("nextHop") != "(self)"}


def inter_router_connections(server: RouterServer) -> set[str]:
    return {c["identity"] for c in server.agent.entities("connection") if c["role"] == "inter-router"}


async def test_wall_clock_steps_lose_no_neighbour_and_no_delivery(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On memory streams and trio's autojump clock (router.testing.memrouter): the routers'
    real HELLO and dead intervals, a minute of them per step, in no real time."""
    wall = SteppingWallClock()
    # Whatever still read the wall clock would see the steps too.
    monkeypatch.setattr(time, "time", wall)
    hello_s, dead_s = 1.0, 3.0
    a = await mem_network.start(interior("A", hello_s=hello_s, dead_s=dead_s), wall_clock=wall)
    to_a = Connector(name="to-a", host="127.0.0.1", port=a.port("ir"))
    b = await mem_network.start(interior("B", hello_s=hello_s, dead_s=dead_s, connectors=(to_a,)), wall_clock=wall)
    with trio.fail_after(30):
        while neighbours(a.server) != {"B"} or neighbours(b.server) != {"A"}:
            await trio.sleep(0.1)  # convergence: poll management (free in virtual time)
    links = inter_router_connections(a.server), inter_router_connections(b.server)
    async with a.connect() as producer, b.connect() as consumer:
        receiver = await consumer.open_receiver("held", credit=0)  # no credit: B holds
        with trio.fail_after(30):
            while not a.core.table.find("held") or not a.core.table.find("held").has_destination:
                await trio.sleep(0.1)
        sender = await producer.open_sender("held")
        in_a_minute = int((wall() + 60) * 1000)
        trackers = [
            await sender.start_send(Message.value("ttl", header=Header(ttl=60_000))),
            await sender.start_send(Message.value("absolute", properties=Properties(absolute_expiry_time=in_a_minute))),
        ]
        for step in (3600.0, -3600.0):
            wall.step = step
            # Many dead intervals: HELLOs must keep flowing both ways.
            await trio.sleep(dead_s * 5)
            assert neighbours(a.server) == {"B"} and neighbours(b.server) == {"A"}
            assert (inter_router_connections(a.server), inter_router_connections(b.server)) == links
        receiver.flow(2)
        with trio.fail_after(5):
            bodies = []
            for _ in trackers:
                delivery = await receiver.receive()
                bodies.append(delivery.message.body_value)
                receiver.accept(delivery)
            outcomes = [type(await tracker.wait()).__name__ for tracker in trackers]
        assert sorted(bodies) == ["absolute", "ttl"]
        assert outcomes == ["Accepted"] * 2


async def test_an_absolute_expiry_time_in_the_past_still_expires(nursery: trio.Nursery) -> None:
    """The offset converts message wall times: a message that expired a minute ago (wall
    clock) is not delivered, whatever trio's clock reads."""
    async with running(interior("C"), time.time, nursery) as c:
        async with connect("127.0.0.1", c.listener_ports()["amqp"]) as client:
            receiver = await client.open_receiver("late", credit=1)
            sender = await client.open_sender("late")
            a_minute_ago = int((time.time() - 60) * 1000)
            expired = await sender.start_send(Message.value("old", properties=Properties(absolute_expiry_time=a_minute_ago)))
            fresh = await sender.start_send(Message.value("new", header=Header(ttl=60_000)))
            with trio.fail_after(5):
                delivery = await receiver.receive()
                receiver.accept(delivery)
                assert delivery.message.body_value == "new"
                assert type(await fresh.wait()).__name__ == "Accepted"
                assert type(await expired.wait()).__name__ != "Accepted"


def test_the_mesh_instance_is_wall_time_so_it_grows_across_restarts() -> None:
    """The inter-router instance must differ after a restart although the monotonic clock may
    start anywhere: it is taken from the wall clock through the offset."""
    config = interior("D")
    before = RouterCore(config, wall_offset=1_700_000_000.0)
    after = RouterCore(config, wall_offset=1_700_000_100.0)
    for core in (before, after):
        core.mesh.start(5.0)  # the same monotonic reading in both processes
    assert before.mesh.node is not None and after.mesh.node is not None
    assert before.mesh.node.instance == 1_700_000_005_000
    assert after.mesh.node.instance > before.mesh.node.instance
    assert before.wall_time(5.0) == 1_700_000_005.0
