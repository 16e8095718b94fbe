"""A consumer that stalls a large message arriving from another router must not take that
router out of the routes: whole RouterServers on memory streams (router.testing.memrouter, virtual
time). The consumer on B keeps its session incoming window closed (transport §2.5.6) while a
message of 8 MiB streams to it from A: B holds its frames up to the inter-router connection's
byte bound and then stops reading A (router.core.holding, bounds.read_paused), so A's HELLOs wait
unread at B. Before, B's topology node took that for A's silence after the dead interval and
both routers dropped each other from their routes; now a neighbour this router does not read is
not judged (topology/neighbours.py `hold`). Messages the other way keep flowing meanwhile (their
outcomes wait with everything else from A), and once the consumer opens its window the whole
message arrives and every producer hears accepted."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified
from router.amqp.session import Session
from router.amqp.sessionout import write_session_flow
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.net.client import LinkDetached
from router.testing.memrouter import MemNetwork, MemRouter

BOUND = 1024 * 1024  # read_high_water_bytes of the inter-router connection, both ends
BODY = bytes(range(251)) * (8 * 1024 * 1024 // 251)  # every byte says where it belongs


def interior(name: str, *connectors: Connector, stalled_s: float = 60.0) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=name, mode="interior"),
        listeners=(Listener(name="amqp", port=0, stalled_stream_timeout_s=stalled_s),
                   Listener(name="ir", port=0, role="inter-router", read_high_water_bytes=BOUND)),
        connectors=connectors,
    )  # fmt: skip


def _window(session: Session | None, size: int) -> None:
    assert session is not None
    session.incoming_window = session.incoming_window_size = size
    write_session_flow(session)


def _linked(a: MemRouter, b: MemRouter) -> bool:
    return "B" in a.core.mesh.routes.next_hops and "A" in b.core.mesh.routes.next_hops


async def _known_at(router: MemRouter, address: str) -> None:
    with trio.fail_after(30):
        while not router.core.table.find(address) or not router.core.table.find(address).remote:
            await trio.sleep(0.1)


async def _mesh(mem_network: MemNetwork, stalled_s: float = 60.0) -> tuple[MemRouter, MemRouter]:
    a = await mem_network.start(interior("A"))
    to_a = Connector(name="to-a", host="127.0.0.1", port=a.port("ir"), role="inter-router", read_high_water_bytes=BOUND)
    b = await mem_network.start(interior("B", to_a, stalled_s=stalled_s))
    with trio.fail_after(30):
        while not _linked(a, b):
            await trio.sleep(0.1)
    return a, b


async def test_a_stalled_consumer_of_a_stream_from_another_router_leaves_the_routes_alone(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a, b = await _mesh(mem_network)
    async with b.connect() as stalled, a.connect() as producer, a.connect() as listener, b.connect() as talker:
        _window(stalled.session, 0)  # (before the attach: the router knows it first)
        big = await stalled.open_receiver("big", credit=10)
        replies = await listener.open_receiver("b-to-a", credit=10)
        await _known_at(a, "big")
        await _known_at(b, "b-to-a")
        tracker = await (await producer.open_sender("big")).start_send(Message.data(BODY))
        with trio.fail_after(30):
            while not b.server.stats()["reading_paused"]:
                await trio.sleep(0.1)
        held = sum(state.held_frame_bytes for state in b.core.connections.values())
        assert BOUND // 2 <= held <= BOUND + 2 * 65536

        await trio.sleep(10 * 3.0)  # ten dead intervals with A's HELLOs unread at B
        assert _linked(a, b)
        assert b.server.stats()["reading_paused"] == 1
        # The mesh still carries what B sends to A (its outcome comes back the way B does not
        # read now: it waits with the rest).
        with trio.fail_after(10):
            reply = await (await talker.open_sender("b-to-a")).start_send(Message.value("still linked"))
            got = await replies.receive()
            assert got.message.body_value == "still linked"
            replies.accept(got)

        _window(stalled.session, 2048)
        stalled.driver.wake()
        with trio.fail_after(60):
            delivery = await big.receive()
            big.accept(delivery)
            assert isinstance(await tracker.wait(), Accepted)
            assert isinstance(await reply.wait(), Accepted)
        assert delivery.message.body_bytes == BODY
        with trio.fail_after(10):
            while b.server.stats()["reading_paused"]:
                await trio.sleep(0.1)
        assert _linked(a, b)


async def test_a_consumer_stalling_a_stream_from_another_router_is_detached_after_its_timeout(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    """What keeps one consumer from holding up a neighbour's whole connection for good: after
    stalled_stream_timeout_s (5 s here) of taking nothing, its link is detached, the producer on
    the other router hears modified, and B reads A again."""
    a, b = await _mesh(mem_network, stalled_s=5.0)
    async with b.connect() as stalled, a.connect() as producer:
        _window(stalled.session, 0)
        big = await stalled.open_receiver("big", credit=10)
        await _known_at(a, "big")
        sender = await producer.open_sender("big")
        sent_at = trio.current_time()
        tracker = await sender.start_send(Message.data(BODY))
        with trio.fail_after(30):
            while not b.server.stats()["reading_paused"]:
                await trio.sleep(0.1)
        with trio.fail_after(30):
            outcome = await tracker.wait()
        assert isinstance(outcome, Modified) and outcome.delivery_failed
        assert 5.0 <= trio.current_time() - sent_at <= 10.0
        with trio.fail_after(5), pytest.raises(LinkDetached) as detached:
            await big.receive()
        assert detached.value.condition == "amqp:resource-limit-exceeded"
        with trio.fail_after(10):
            while b.server.stats()["reading_paused"]:
                await trio.sleep(0.1)
        assert sum(state.held_frame_bytes for state in b.core.connections.values()) == 0
        assert _linked(a, b)
