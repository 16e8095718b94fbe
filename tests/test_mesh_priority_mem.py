"""Priorities between whole RouterServers on memory streams (router.testing.memrouter, virtual
time): routers with 4, 10 and 1 bands in a chain carry every level with its outcome back, and a
neighbour stopped with deliveries in flight on several bands gives each of them an outcome."""

from __future__ import annotations

import trio
import trio.testing

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Header, Modified, Released
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.testing.memrouter import MemNetwork, MemRouter


def interior(name: str, bands: int, *connectors: Connector) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=name, mode="interior", priority_bands=bands),
        listeners=(Listener(name="amqp", port=0), Listener(name="ir", port=0, role="inter-router")),
        connectors=connectors,
    )


def to(router: MemRouter) -> Connector:
    return Connector(name=f"to-{router.core.mesh.me}", host="127.0.0.1", port=router.port("ir"), role="inter-router")


async def chain(mem_network: MemNetwork, bands: tuple[int, int, int]) -> tuple[MemRouter, MemRouter, MemRouter]:
    a = await mem_network.start(interior("A", bands[0]))
    b = await mem_network.start(interior("B", bands[1], to(a)))
    c = await mem_network.start(interior("C", bands[2], to(b)))
    with trio.fail_after(30):
        while "C" not in a.core.mesh.routes.next_hops or "A" not in c.core.mesh.routes.next_hops:
            await trio.sleep(0.1)
    return a, b, c


def data_links_in(router: MemRouter, sender: str) -> dict[str, int]:
    return {link["name"]: link["deliveryCount"] for link in router.agent.entities("router.link")
            if str(link["name"]).startswith(f"{sender}>") and "/data" in str(link["name"])}  # fmt: skip


async def remote_known(router: MemRouter, address: str) -> None:
    """Until `router` knows a consumer of `address` on another router (the mesh's advert)."""
    with trio.fail_after(30):
        while not router.core.table.find(address) or not router.core.table.find(address).remote:
            await trio.sleep(0.1)  # on the autojump clock: the advert arrives within the wait


async def test_every_level_crosses_routers_with_different_band_counts(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a, b, c = await chain(mem_network, (4, 10, 1))
    async with c.connect() as consumer, a.connect() as producer:
        receiver = await consumer.open_receiver("levels", credit=100)
        await remote_known(a, "levels")
        sender = await producer.open_sender("levels")
        with trio.fail_after(30):
            trackers = [await sender.start_send(Message.value(p, header=Header(priority=p))) for p in range(10)]
            got = []
            for _ in range(10):
                delivery = await receiver.receive()
                receiver.accept(delivery)
                got.append(delivery.message.body_value)
            outcomes = [await tracker.wait() for tracker in trackers]
    assert sorted(got) == list(range(10))
    assert all(isinstance(outcome, Accepted) for outcome in outcomes)
    # A (4 bands) -> B: four links used; B (10 bands) -> C: one per level; C sends on one link
    assert len([n for n, count in data_links_in(b, "A").items() if count]) == 4
    assert sorted(count for count in data_links_in(c, "B").values()) == [1] * 10
    assert list(data_links_in(b, "C")) == ["C>B/data"]


async def test_a_stopped_neighbour_leaves_no_delivery_on_any_band_without_an_outcome(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a, b, c = await chain(mem_network, (4, 4, 4))
    async with c.connect() as consumer, a.connect() as producer:
        receiver = await consumer.open_receiver("held", credit=100)
        await remote_known(a, "held")
        sender = await producer.open_sender("held")
        with trio.fail_after(30):
            trackers = [await sender.start_send(Message.value(i, header=Header(priority=i % 10))) for i in range(20)]
            for _ in range(20):
                await receiver.receive()  # never settled: all in flight
        peer = a.core.mesh.peers["B"]
        assert peer.bands is not None and all(out.outstanding for out in peer.bands)
        await b.stop()
        with trio.fail_after(30):
            outcomes = [await tracker.wait() for tracker in trackers]
    assert all(isinstance(outcome, (Released, Modified)) for outcome in outcomes)


async def test_large_low_band_streams_and_urgent_messages_all_arrive_through_blocked_outputs(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    """Inter-router outputs with the smallest write high-water mark block at almost every batch
    of a large stream: its frames are held and released as the drivers drain (router.core.holding,
    CorePump, ConnectionDriver.expect_drain), and every message arrives whole with its outcome."""
    small = {"write_high_water_bytes": 65536}

    def config(name: str, *connectors: Connector) -> RouterConfig:
        return RouterConfig(
            router=RouterSection(id=name, mode="interior", priority_bands=4),
            listeners=(Listener(name="amqp", port=0), Listener(name="ir", port=0, role="inter-router", **small)),
            connectors=tuple(c.model_copy(update=small) for c in connectors),
        )

    a = await mem_network.start(config("A"))
    b = await mem_network.start(config("B", to(a)))
    c = await mem_network.start(config("C", to(b)))
    big = bytes(range(256)) * 4096  # 1 MiB, every byte in its place
    async with c.connect() as consumer, a.connect() as producer:
        bulk_rx = await consumer.open_receiver("bulk", credit=10)
        urgent_rx = await consumer.open_receiver("urgent", credit=100)
        await remote_known(a, "bulk")
        await remote_known(a, "urgent")
        bulk_tx = await producer.open_sender("bulk")
        urgent_tx = await producer.open_sender("urgent")
        with trio.fail_after(60):
            trackers = [await bulk_tx.start_send(Message.value(big, header=Header(priority=0))) for _ in range(3)]
            trackers += [await urgent_tx.start_send(Message.value(i, header=Header(priority=9))) for i in range(20)]
            urgent = []
            for _ in range(20):
                delivery = await urgent_rx.receive()
                urgent_rx.accept(delivery)
                urgent.append(delivery.message.body_value)
            for _ in range(3):
                delivery = await bulk_rx.receive()
                bulk_rx.accept(delivery)
                assert delivery.message.body_value == big
            outcomes = [await tracker.wait() for tracker in trackers]
    assert sorted(urgent) == list(range(20))
    assert all(isinstance(outcome, Accepted) for outcome in outcomes)
    for router in (a, b):
        assert not router.core.held_output and router.core.bounds.buffered_total == 0
