"""A connection that ends leaves no cyclic garbage in the router: once the core forgot it, its
engine, sessions, links, the core's records of them and its driver are freed by reference
counting (Connection.dismantle, and the driver dropping its owner's callbacks), not left for the
collector's next young collection, which every closed connection made longer (~50 objects each;
bench/gcpause.py --churn counts them). Through the whole RouterServer over sockets: clean closes,
a client gone with deliveries unsettled, a protocol error, a silent peer dropped at its handshake
time-out, a connection over WebSocket, and an inter-router connection whose peer stops. Links
that detach and sessions that end on a connection that stays leave none either (the link and
the core's record of it referred to each other, as did a session and its maps)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import trio

from router.amqp.message import Message
from router.config.models import RouterConfig
from router.core.connections import ConnState
from router.core.delivery import SessionMaps
from router.core.links import InLink, OutLink
from router.net.client import connect
from router.net.serverdriver import ServerDriver
from router.net.websocket import WebSocketFraming
from router.net.wsstream import WebSocketStream
from router.testing.routerharness import RouterHarness

from .rawamqp import HEADER, UNKNOWN_PERFORMATIVE, frame, read_until_closed
from .test_net_isolation import forgotten, still_serves, two_listener_config
from .tlssupport import serving
from .wsclient import ws_bridge

# The router's own records of a connection: none of them may be left for the collector (the
# clients in this process leave theirs; they are not the router's).
ROUTER_SIDE = (ServerDriver, ConnState, InLink, OutLink, SessionMaps, WebSocketStream, WebSocketFraming)


def _config() -> RouterConfig:
    return two_listener_config(idle_timeout_s=5, handshake_timeout_s=0.3)


@contextmanager
def cyclic_garbage(extra: tuple[type, ...] = ()) -> Iterator[list[object]]:
    """The router's objects (ROUTER_SIDE and `extra` types) that only the collector would have
    freed of what the block made (listed after it, by a collection that keeps them)."""
    gc.collect()
    found: list[object] = []
    gc.disable()
    try:
        yield found
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        found.extend(o for o in gc.garbage if isinstance(o, ROUTER_SIDE + extra))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def _pair_and_leave(port: int, i: int, settle: bool) -> None:
    """A client with a receiver and a sender on an address of its own, a few messages; gone
    with deliveries unsettled when `settle` is False."""
    async with connect("127.0.0.1", port) as client:
        receiver = await client.open_receiver(f"garbage-{i}", credit=10)
        sender = await client.open_sender(f"garbage-{i}")
        trackers = [await sender.start_send(Message.value(n)) for n in range(3)]
        for _ in trackers:
            delivery = await receiver.receive()
            if settle:
                receiver.accept(delivery)
        if settle:
            for tracker in trackers:
                await tracker.wait()


async def test_connections_that_end_leave_no_cyclic_garbage() -> None:
    async with serving(_config()) as server:
        port = server.listener_ports()["amqp"]
        await still_serves(server)  # (the router's lazily made parts exist before counting)
        await forgotten(server)
        with cyclic_garbage() as garbage:
            for i in range(10):
                await _pair_and_leave(port, i, settle=i % 2 == 0)
            hostile = await trio.open_tcp_stream("127.0.0.1", port)  # a protocol error
            await hostile.send_all(HEADER + frame(UNKNOWN_PERFORMATIVE))
            await read_until_closed(hostile)
            silent = await trio.open_tcp_stream("127.0.0.1", port)  # dropped at its handshake time-out
            await read_until_closed(silent)
            await forgotten(server)
        assert garbage == []
        await still_serves(server)


async def test_a_websocket_connection_that_ends_leaves_no_cyclic_garbage() -> None:
    config = {"router": {"id": "ws"}, "listeners": [{"name": "ws", "port": 0, "websocket": True}]}
    async with serving(config) as server:
        async with ws_bridge(server.listener_ports()["ws"]) as port:
            await _pair_and_leave(port, 0, settle=True)  # (lazily made parts exist before counting)
            await forgotten(server)
            with cyclic_garbage() as garbage:
                for i in range(4):
                    await _pair_and_leave(port, i, settle=i % 2 == 0)
                await forgotten(server)
    assert garbage == []


async def test_an_inter_router_connection_that_ends_leaves_no_cyclic_garbage() -> None:
    interior = {"router": {"id": "A", "mode": "interior"},
                "listeners": [{"name": "ir", "port": 0, "role": "inter-router"}]}  # fmt: skip
    async with serving(interior) as a:
        peer = {"router": {"id": "B", "mode": "interior"}, "listeners": [],
                "connectors": [{"name": "to-a", "host": "127.0.0.1", "port": a.listener_ports()["ir"],
                                "role": "inter-router"}]}  # fmt: skip
        with cyclic_garbage() as garbage:
            async with serving(peer) as b:
                meshes = [a.core.mesh, b.core.mesh]  # type: ignore[attr-defined]
                with trio.fail_after(5):
                    while "B" not in meshes[0].peers or "A" not in meshes[1].peers:
                        await trio.sleep(0.01)  # (no event says "meshed": poll the peers)
                del meshes  # (B's mesh must not outlive B here)
            await forgotten(a)  # B stopped: A forgot its connection
    assert garbage == []


async def test_links_that_detach_on_a_connection_that_stays_leave_no_cyclic_garbage() -> None:
    async with serving(_config()) as server, connect("127.0.0.1", server.listener_ports()["amqp"]) as client:
        async def pair(i: int) -> None:
            receiver = await client.open_receiver(f"links-{i}", credit=10)
            sender = await client.open_sender(f"links-{i}")
            tracker = await sender.start_send(Message.value(i))
            receiver.accept(await receiver.receive())
            await tracker.wait()
            await sender.close()
            await receiver.close()

        await pair(0)  # (the router's lazily made parts exist before counting)
        with cyclic_garbage() as garbage:
            for i in range(1, 11):
                await pair(i)
            entities = server.agent.entities("connection")
        assert len(entities) == 1  # (the connection stayed)
        assert garbage == []


def test_sessions_that_end_on_a_connection_that_stays_leave_no_cyclic_garbage() -> None:
    h = RouterHarness()  # (sans-IO: the core and its engines, no sockets)
    client = h.connect("c")

    def session(i: int) -> None:
        client.session = client.engine.begin_session()
        h.pump()
        receiver, sender = client.receiver(f"s-{i}"), client.sender(f"s-{i}")
        h.pump()
        receiver.flow(10)
        h.pump()
        client.send(sender, Message.value(i))  # accepted by the client: settled both ways
        h.pump()
        client.session.end()
        h.pump()

    session(0)
    with cyclic_garbage() as garbage:
        for i in range(1, 11):
            session(i)
        assert [d.message.body.value for r in client.received.values() for d in r] == list(range(11))
    assert garbage == []
