"""A consumer that stalls a large message arriving from another router stops that message's
priority band between the two routers, and nothing else: whole RouterServers on memory streams
(router.testing.memrouter, virtual time). The consumer on B keeps its session incoming window
closed (transport §2.5.6) while a message of 8 MiB streams to it from A. B holds its frames
(router.core.holding) until the band's share of the inter-router connection's byte bound, then
shuts that band's session window at A (router.core.bandwindow) and keeps reading A: A's HELLOs,
its other bands and the outcomes it sends back. Before, B stopped reading A altogether: every
band waited, and B's topology node took the unread HELLOs for A's silence after the dead
interval (both routers dropped each other from their routes). Once the consumer opens its window
the whole message arrives and every producer hears accepted."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Header, Modified
from router.amqp.session import Session
from router.amqp.sessionout import write_session_flow
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.net.client import LinkDetached
from router.testing.memrouter import MemNetwork, MemRouter

BOUND = 1024 * 1024  # read_high_water_bytes of the inter-router connection, both ends
BODY = bytes(range(251)) * (8 * 1024 * 1024 // 251)  # every byte says where it belongs


def interior(
    name: str, *connectors: Connector, stalled_s: float = 60.0, bands: int = 4, streams: int = 4
) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=name, mode="interior", priority_bands=bands, streaming_links=streams),
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


def _shut(router: MemRouter) -> int:
    """Sessions whose incoming window this router has shut."""
    return sum(s.window_shut for state in router.core.connections.values() for s in state.engine.sessions)


def _held(router: MemRouter) -> int:
    return sum(state.held_frame_bytes for state in router.core.connections.values())


async def _until(check: object, seconds: float = 30) -> None:
    with trio.fail_after(seconds):
        while not check():  # type: ignore[operator]
            await trio.sleep(0.1)


async def _urgent_arrives(urgent: Any, hurry: Any) -> None:
    with trio.fail_after(10):
        got = await urgent.receive()
        urgent.accept(got)
        assert isinstance(await hurry.wait(), Accepted)


async def _big_arrives_once_read(stalled: Any, big: Any, tracker: Any) -> None:
    """The stalled consumer opens its window: the whole message arrives, its producer hears accepted."""
    _window(stalled.session, 2048)
    stalled.driver.wake()
    with trio.fail_after(60):
        delivery = await big.receive()
        big.accept(delivery)
        assert isinstance(await tracker.wait(), Accepted)
    assert delivery.message.body_bytes == BODY


async def _mesh(
    mem_network: MemNetwork, stalled_s: float = 60.0, bands: int = 4, streams: int = 4
) -> tuple[MemRouter, MemRouter]:
    a = await mem_network.start(interior("A", bands=bands, streams=streams))
    to_a = Connector(name="to-a", host="127.0.0.1", port=a.port("ir"), role="inter-router", read_high_water_bytes=BOUND)
    b = await mem_network.start(interior("B", to_a, stalled_s=stalled_s, bands=bands, streams=streams))
    with trio.fail_after(30):
        while not _linked(a, b):
            await trio.sleep(0.1)
    return a, b


@pytest.mark.parametrize(("bands", "streams", "priority"), [(4, 0, 9), (1, 0, 4), (1, 4, 4), (4, 4, 4)])
async def test_a_stalled_consumer_of_a_stream_from_another_router_stops_only_its_link(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork, bands: int, streams: int, priority: int
) -> None:
    """Without streaming links the stream stops its band: with four bands an urgent message to
    another consumer on B overtakes it; with one band it waits for it, but the control link and
    the way back still flow. With streaming links it stops only its own link: a message of the
    same priority overtakes it."""
    a, b = await _mesh(mem_network, bands=bands, streams=streams)
    async with (b.connect() as stalled, b.connect() as fast, a.connect() as producer,
                a.connect() as listener, b.connect() as talker):  # fmt: skip
        _window(stalled.session, 0)  # (before the attach: the router knows it first)
        big = await stalled.open_receiver("big", credit=10)
        urgent = await fast.open_receiver("urgent", credit=10)
        replies = await listener.open_receiver("b-to-a", credit=10)
        await _known_at(a, "big")
        await _known_at(a, "urgent")
        await _known_at(b, "b-to-a")
        tracker = await (await producer.open_sender("big")).start_send(Message.data(BODY))
        await _until(lambda: _shut(b) == 1)
        await trio.sleep(1.0)  # what A wrote before it heard arrives
        held = _held(b)
        assert BOUND // 8 < held <= BOUND  # the band's share, and what was on its way: well inside the bound
        assert b.server.stats()["reading_paused"] == 0
        # Management says which connection's band is stopped, at both ends.
        assert [c.shut_windows for c in b.core.read.connections(0.0) if c.role == "inter-router"] == [1]
        assert [c.peer_shut_windows for c in a.core.read.connections(0.0) if c.role == "inter-router"] == [1]

        await trio.sleep(10 * 3.0)  # ten dead intervals
        assert _linked(a, b)
        assert _held(b) == held  # nothing more of the band came
        # What B sends to A, and A's outcome back: B reads A.
        with trio.fail_after(10):
            reply = await (await talker.open_sender("b-to-a")).start_send(Message.value("still linked"))
            got = await replies.receive()
            assert got.message.body_value == "still linked"
            replies.accept(got)
            assert isinstance(await reply.wait(), Accepted)
        hurry = await (await producer.open_sender("urgent")).start_send(
            Message.value("now", header=Header(priority=priority)))  # fmt: skip
        overtakes = streams > 0 or bands > 1  # (a link of its own, or a band of its own)
        if overtakes:
            await _urgent_arrives(urgent, hurry)
        else:
            await trio.sleep(10.0)
            assert urgent.buffered == 0  # behind the big one in their band
        await _big_arrives_once_read(stalled, big, tracker)
        if not overtakes:
            await _urgent_arrives(urgent, hurry)
        await _until(lambda: _shut(b) == 0, 10)
        assert _held(b) == 0 and b.server.stats()["reading_paused"] == 0
        assert _linked(a, b)


async def test_a_consumer_stalling_a_stream_from_another_router_is_detached_after_its_timeout(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    """What keeps one consumer from holding up a neighbour's band for good: after
    stalled_stream_timeout_s (5 s here) of taking nothing, its link is detached, the producer on
    the other router hears modified, and B opens the band again."""
    a, b = await _mesh(mem_network, stalled_s=5.0)
    async with b.connect() as stalled, a.connect() as producer:
        _window(stalled.session, 0)
        big = await stalled.open_receiver("big", credit=10)
        await _known_at(a, "big")
        sender = await producer.open_sender("big")
        sent_at = trio.current_time()
        tracker = await sender.start_send(Message.data(BODY))
        await _until(lambda: _shut(b) == 1)
        with trio.fail_after(30):
            outcome = await tracker.wait()
        assert isinstance(outcome, Modified) and outcome.delivery_failed
        assert 5.0 <= trio.current_time() - sent_at <= 10.0
        with trio.fail_after(5), pytest.raises(LinkDetached) as detached:
            await big.receive()
        assert detached.value.condition == "amqp:resource-limit-exceeded"
        await _until(lambda: _shut(b) == 0, 10)
        assert _held(b) == 0
        assert b.server.stats()["reading_paused"] == 0
        assert _linked(a, b)


async def test_a_stalled_band_stops_band_by_band_back_along_a_chain_of_routers(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    """C -> A -> B, the stalled consumer on B: B shuts the band at A; A, holding that band's
    frames for B against the connection from C, shuts the band at C in turn; C holds the rest
    against its producer's connection. No router stops reading another, an urgent message from
    C still crosses both hops, and once the consumer reads everything arrives whole."""
    a = await mem_network.start(interior("A"))
    to_a = Connector(name="to-a", host="127.0.0.1", port=a.port("ir"), role="inter-router", read_high_water_bytes=BOUND)
    b = await mem_network.start(interior("B", to_a))
    c = await mem_network.start(interior("C", to_a))
    await _until(lambda: "B" in c.core.mesh.routes.next_hops and "C" in b.core.mesh.routes.next_hops)
    async with (b.connect() as stalled, b.connect() as fast, c.connect() as producer,
                c.connect() as other):  # fmt: skip
        _window(stalled.session, 0)
        big = await stalled.open_receiver("big", credit=10)
        urgent = await fast.open_receiver("urgent", credit=10)
        await _known_at(c, "big")
        await _known_at(c, "urgent")
        tracker = await (await producer.open_sender("big")).start_send(Message.data(BODY))
        await _until(lambda: _shut(b) == 1 and _shut(a) == 1)
        await trio.sleep(5.0)
        assert _held(b) <= BOUND and _held(a) <= BOUND
        assert [r.server.stats()["reading_paused"] for r in (a, b)] == [0, 0]
        hurry = await (await other.open_sender("urgent")).start_send(
            Message.value("now", header=Header(priority=9)))  # fmt: skip
        await _urgent_arrives(urgent, hurry)
        await _big_arrives_once_read(stalled, big, tracker)
        await _until(lambda: _shut(a) + _shut(b) + _shut(c) == 0, 10)
        assert _held(a) + _held(b) + _held(c) == 0


async def test_a_message_after_a_stalled_stream_reaches_the_same_consumer_after_it(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    """Streaming links do not reorder one producer's messages to one consumer: the stream's
    first frame reaches B first, and the small message sent after it on the band link waits at
    B's consumer link behind the stream (a link takes one delivery at a time)."""
    a, b = await _mesh(mem_network)
    async with b.connect() as stalled, a.connect() as producer:
        _window(stalled.session, 0)
        big = await stalled.open_receiver("big", credit=10)
        await _known_at(a, "big")
        sender = await producer.open_sender("big")
        tracker = await sender.start_send(Message.data(BODY))
        await _until(lambda: _shut(b) == 1)
        done = await sender.start_send(Message.value("done"))
        await trio.sleep(5.0)
        assert big.buffered == 0
        await _big_arrives_once_read(stalled, big, tracker)
        with trio.fail_after(10):
            after = await big.receive()
            big.accept(after)
            assert isinstance(await done.wait(), Accepted)
        assert after.message.body_value == "done"
