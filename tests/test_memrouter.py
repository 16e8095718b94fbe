"""The memory-stream router kit (router.testing.memrouter): whole RouterServers on a virtual
network, in virtual time."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from router.amqp.message import Message
from router.config.models import Connector, Listener, RouterConfig, RouterSection
from router.testing.memrouter import FIRST_PORT, MemNetwork, MemRouter


def interior(name: str, *connectors: Connector, hello_s: float = 1.0, dead_s: float = 3.0) -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id=name, mode="interior", hello_interval_s=hello_s, dead_interval_s=dead_s),
        listeners=(Listener(name="amqp", port=0), Listener(name="ir", port=0, role="inter-router")),
        connectors=connectors,
    )


def neighbours(router: MemRouter) -> set[str]:
    """The routers `router` can reach (a lost one stays listed a while, with no next hop)."""
    return {n["id"] for n in router.agent.entities("router.node") if n.get("nextHop") not in ("(self)", None)}


async def test_a_message_crosses_a_router_on_memory_streams(autojump_clock: trio.testing.MockClock, mem_network: MemNetwork) -> None:
    router = await mem_network.start(RouterConfig(router=RouterSection(id="solo"), listeners=(Listener(port=0),)))
    assert router.port() == FIRST_PORT
    async with router.connect() as producer, router.connect() as consumer:
        receiver = await consumer.open_receiver("queue", credit=1)
        sender = await producer.open_sender("queue")
        with trio.fail_after(5):
            tracker = await sender.start_send(Message.value("over memory"))
            delivery = await receiver.receive()
            receiver.accept(delivery)
            assert type(await tracker.wait()).__name__ == "Accepted"
        assert delivery.message.body_value == "over memory"


async def test_half_an_hour_passes_at_once_and_a_heartbeating_client_stays(autojump_clock: trio.testing.MockClock, mem_network: MemNetwork) -> None:
    """A listener with a 30 s idle time-out: our client sends empty frames at half of it, so it
    is kept for half an hour of virtual time (a test of seconds)."""
    config = RouterConfig(router=RouterSection(id="idle"), listeners=(Listener(port=0, idle_timeout_s=30),))
    router = await mem_network.start(config)
    started = trio.current_time()
    async with router.connect() as client:
        await client.open_receiver("x")
        # Our client heartbeats at half the router's idle time-out: it stays for half an hour.
        await trio.sleep(1800)
        client.check()
    assert trio.current_time() - started >= 1800


async def test_a_dial_where_nothing_listens_is_refused_and_the_connector_backs_off(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    to_nowhere = Connector(name="to-nowhere", host="127.0.0.1", port=1, role="inter-router", reconnect_initial_s=1, reconnect_max_s=60)
    router = await mem_network.start(interior("A", to_nowhere))
    await trio.sleep(600)
    status = router.server.connector_status("to-nowhere")
    assert status is not None and status[0] == "FAILED" and "nothing listens" in status[1]
    # Backing off from 1 s doubling to 60 s (equal jitter: each wait at least half its ceiling):
    # at most 26 dials in 10 minutes (15 with the longest waits), not hundreds.
    assert 10 <= mem_network.dials <= 26


async def test_two_routers_become_neighbours_and_lose_each_other_in_virtual_time(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    a = await mem_network.start(interior("A"))
    b = await mem_network.start(interior("B", Connector(name="to-a", host="127.0.0.1", port=a.port("ir"), role="inter-router")))
    with trio.fail_after(30):
        while neighbours(a) != {"B"} or neighbours(b) != {"A"}:
            await trio.sleep(0.1)  # costs nothing in virtual time
    await trio.sleep(600)  # ten minutes of HELLOs
    assert neighbours(a) == {"B"} and neighbours(b) == {"A"}
    stopped = trio.current_time()
    await b.stop()
    with trio.fail_after(30):
        while neighbours(a):
            await trio.sleep(0.1)
    assert neighbours(a) == set()
    assert trio.current_time() - stopped < 3.0  # its connection closed: sooner than the dead interval


async def test_the_fixture_refuses_a_real_clock() -> None:
    from tests.support.memrouter import mem_network as fixture

    with pytest.raises(pytest.fail.Exception, match="autojump_clock"):
        await fixture.__wrapped__().__anext__()  # type: ignore[attr-defined]


async def test_a_closed_listener_refuses_new_connections(autojump_clock: trio.testing.MockClock, mem_network: MemNetwork) -> None:
    router = await mem_network.start(RouterConfig(router=RouterSection(id="closing"), listeners=(Listener(name="amqp", port=0),)))
    port = router.port()
    assert router.server.delete_listener("amqp")
    with pytest.raises(ConnectionRefusedError):
        await mem_network.dial("127.0.0.1", port)
    assert router.server.listener_ports() == {}


async def test_a_consumer_that_never_settles_holds_a_graceful_stop_until_the_drain_deadline(
    autojump_clock: trio.testing.MockClock, mem_network: MemNetwork
) -> None:
    """The server's drain with a realistic 20 s grace period, in virtual time: the stop waits
    for the deliveries in flight until a second before its deadline, then the closes release
    them and the producer hears it."""
    drain_s = 20.0
    router = await mem_network.start(RouterConfig(router=RouterSection(id="drain"), listeners=(Listener(port=0),)), drain_s=drain_s)
    async with router.connect() as consumer, router.connect() as producer:
        receiver = await consumer.open_receiver("stuck", credit=10)
        sender = await producer.open_sender("stuck")
        trackers = [await sender.start_send(Message.value(i)) for i in range(5)]
        with trio.fail_after(5):
            for _ in trackers:
                await receiver.receive()  # held, never settled
        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(router.stop)
            with trio.fail_after(drain_s + 5):
                outcomes = {type(await tracker.wait()).__name__ for tracker in trackers}
            released_after = trio.current_time() - started
    assert outcomes <= {"Released", "Modified"}, outcomes
    assert drain_s - 1.5 <= released_after <= drain_s, released_after
    assert router.server.stopping
