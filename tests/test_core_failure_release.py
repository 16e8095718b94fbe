"""A connection the core failed on leaves nothing behind (router.core.release), through the whole
RouterServer on memory streams in virtual time.

A failure is injected into one of the core's collaborators while it handles one connection's
input (the `nth` call of a method, only for that connection), at a point of handle() where the
connection holds something: deliveries in flight to a consumer elsewhere, a consumer receiving
from a producer elsewhere, an attach or detach half done. The network layer ends that connection
and the core forgets it; then nothing of it may remain (its consumers and producers unlisted,
no delivery sent through it without an outcome, no bytes or unsettled counts left), everyone
else is told (released or modified, never silence), and the other connections keep working."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

from router.amqp.connection import Connection
from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified, Released
from router.config.models import Listener, RouterConfig, RouterSection
from router.core.connections import ConnState
from router.core.router import RouterCore
from router.net.client import Client
from router.testing.memrouter import MemNetwork, MemRouter

from .support import release_checks
from .support.release_checks import Fault

FRAME = 512  # the router's max-frame-size: a larger message arrives in several transfer frames


def config() -> RouterConfig:
    return RouterConfig(
        router=RouterSection(id="failing"),
        listeners=(Listener(name="amqp", host="127.0.0.1", port=0, max_frame_size=FRAME, idle_timeout_s=0),),
    )


@pytest.fixture
async def router(mem_network: MemNetwork) -> MemRouter:
    return await mem_network.start(config())


def unit_of(core: RouterCore, where: str) -> Any:
    return {"forwarder": core.forwarder, "links": core.links, "mesh": core.mesh, "bounds": core.bounds}[where]


def state_of(router: MemRouter, client: Client) -> ConnState:
    container = client.engine.config.container_id
    (state,) = [s for s in router.core.connections.values()
                if s.engine.remote_open is not None and s.engine.remote_open.container_id == container]  # fmt: skip
    return state


async def gone(router: MemRouter, state: ConnState) -> None:
    """Wait until the router has forgotten the connection (its driver ended, the core released it)."""
    with trio.fail_after(10):
        while state.engine in router.core.connections or state.engine in router.server._drivers:
            await trio.sleep(0.01)  # no event says "forgotten": poll


def assert_nothing_of(router: MemRouter, state: ConnState) -> None:
    """Nothing of `state` remains anywhere in the core, nor in management's connection list."""
    release_checks.assert_nothing_of(router.core, state)
    assert len(router.agent.entities("connection")) == len(router.core.connections)


def assert_quiet(core: RouterCore) -> None:
    release_checks.assert_quiet(core)


async def still_serves(router: MemRouter, address: str = "alive") -> None:
    with trio.fail_after(10):
        async with router.connect() as client:
            receiver = await client.open_receiver(address, credit=1)
            sender = await client.open_sender(address)
            tracker = await sender.start_send(Message.value("ping"))
            receiver.accept(await receiver.receive())
            assert isinstance(await tracker.wait(), Accepted)


# (a) the failing connection is a producer with deliveries in flight to a consumer elsewhere.
PRODUCER_POINTS = [
    ("forwarder", "_route", 1),  # a first frame read, in the producer's map, not routed
    ("forwarder", "_send", 1),  # routed to the consumer, not yet sent
    ("forwarder", "handed_over", 1),  # sent, the producer's window not yet freed
    ("forwarder", "flush", 1),  # the batch done, its outcomes and credit not yet written
]


@release_checks.needs_patchable_core
@pytest.mark.parametrize("large", [False, True], ids=["one frame", "several frames"])
@pytest.mark.parametrize("where,name,nth", PRODUCER_POINTS)
async def test_a_producer_failing_mid_delivery_leaves_its_consumer_whole(
    autojump_clock: trio.testing.MockClock, router: MemRouter, monkeypatch: pytest.MonkeyPatch,
    where: str, name: str, nth: int, large: bool,
) -> None:  # fmt: skip
    fault = Fault(router.core, unit_of(router.core, where), name, nth, patch=monkeypatch.setattr)
    body = "x" * (3 * FRAME if large else 10)
    async with router.connect() as bystander:
        consumer = await bystander.open_receiver("a", credit=20)
        async with router.connect() as doomed:
            sender = await doomed.open_sender("a")
            for n in range(3):
                await sender.start_send(Message.value(f"{n}{body}"))
            with trio.fail_after(10):
                held = [await consumer.receive() for _ in range(3)]  # unsettled at the consumer
            state = state_of(router, doomed)
            fault.doomed = state.engine
            await sender.start_send(Message.value(f"3{body}"))  # the core fails on it
            await gone(router, state)
        assert fault.fired
        assert_nothing_of(router, state)
        for delivery in held:  # the consumer settles what it got: the core forgets those too
            consumer.accept(delivery)
        async with router.connect() as producer:  # the same consumer link still takes deliveries whole
            other = await producer.open_sender("a")
            tracker = await other.start_send(Message.value("after"))
            with trio.fail_after(10):
                while True:
                    delivery = await consumer.receive()
                    consumer.accept(delivery)
                    if delivery.message.body.value == "after":
                        break
                    assert delivery.message.body.value == f"3{body}"  # (sent whole before the failure)
                assert isinstance(await tracker.wait(), Accepted)
    await still_serves(router)
    assert_quiet(router.core)


# (b) the failing connection is a consumer of deliveries from a producer elsewhere.
CONSUMER_POINTS = [
    ("forwarder", "on_disposition", 1),  # its settlement not read at all
    ("forwarder", "consumer_outcome", 1),  # taken from the session's map, not relayed to the producer
    ("forwarder", "relay_outcome", 2),  # one outcome relayed, the next one taken but not relayed
    ("forwarder", "consumer_ready", 1),  # its new credit not acted on
]


@release_checks.needs_patchable_core
@pytest.mark.parametrize("where,name,nth", CONSUMER_POINTS)
async def test_a_consumer_failing_mid_settlement_leaves_no_producer_unanswered(
    autojump_clock: trio.testing.MockClock, router: MemRouter, monkeypatch: pytest.MonkeyPatch,
    where: str, name: str, nth: int,
) -> None:  # fmt: skip
    fault = Fault(router.core, unit_of(router.core, where), name, nth, patch=monkeypatch.setattr)
    async with router.connect() as bystander:
        sender = await bystander.open_sender("b")
        async with router.connect() as doomed:
            receiver = await doomed.open_receiver("b", credit=0)
            receiver.flow(5)
            trackers = [await sender.start_send(Message.value(n)) for n in range(8)]  # 5 sent, 3 wait
            with trio.fail_after(10):
                got = [await receiver.receive() for _ in range(5)]
            state = state_of(router, doomed)
            fault.doomed = state.engine
            receiver.accept(got[0])
            receiver.accept(got[1])
            receiver.flow(1)
            await gone(router, state)
        assert fault.fired
        with trio.fail_after(10):  # every delivery gets an outcome: none is left unanswered
            outcomes = [await tracker.wait() for tracker in trackers]
        assert all(isinstance(o, (Accepted, Modified, Released)) for o in outcomes), outcomes
        assert all(isinstance(o, Modified) and o.delivery_failed for o in outcomes[2:5]), outcomes  # sent, unsettled
        assert not any(isinstance(o, Accepted) for o in outcomes[5:]), outcomes  # never sent
        assert_nothing_of(router, state)
        # Its address has no consumer left: the producer gets no credit for it, a new consumer does.
        assert router.core.table.find("b") is None or not router.core.table.find("b").consumers  # type: ignore[union-attr]
    await still_serves(router, "b")
    assert_quiet(router.core)


# (c) an attach or a detach half done.
async def _attach_consumer(client: Client, dynamic: bool) -> None:
    await client.open_receiver(None if dynamic else "c", dynamic=dynamic, credit=5)


ATTACH_POINTS: list[tuple[str, str, int, Callable[[Client], Any]]] = [
    ("mesh", "consumers_changed", 1, lambda c: _attach_consumer(c, False)),  # listed at its address, then the failure
    ("links", "_add_consumer", 1, lambda c: _attach_consumer(c, True)),  # a dynamic address made, no consumer yet
    ("forwarder", "credit_dirty", 1, lambda c: c.open_sender("c")),  # a producer listed, no credit yet
]


@release_checks.needs_patchable_core
@pytest.mark.parametrize("where,name,nth,attach", ATTACH_POINTS, ids=[p[1] for p in ATTACH_POINTS])
async def test_a_half_done_attach_is_undone(
    autojump_clock: trio.testing.MockClock, router: MemRouter, monkeypatch: pytest.MonkeyPatch,
    where: str, name: str, nth: int, attach: Callable[[Client], Any],
) -> None:  # fmt: skip
    fault = Fault(router.core, unit_of(router.core, where), name, nth, patch=monkeypatch.setattr)
    entries = set(router.core.table.entries)
    async with router.connect() as doomed:
        state = state_of(router, doomed)
        fault.doomed = state.engine
        with trio.move_on_after(5):  # its answer may never come: the connection ends
            try:
                await attach(doomed)
            except Exception:  # noqa: BLE001 - the client sees its connection lost
                pass
        await gone(router, state)
    assert fault.fired
    assert_nothing_of(router, state)
    assert set(router.core.table.entries) <= entries  # no address made for it is left
    await still_serves(router, "c")
    assert_quiet(router.core)


@release_checks.needs_patchable_core
async def test_a_half_done_detach_unlists_the_consumer(
    autojump_clock: trio.testing.MockClock, router: MemRouter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The core failed after marking the consumer gone, before unlisting it at its address: the
    ordinary close skips a link marked gone; the release after the failure finds it."""
    fault = Fault(router.core, router.core.forwarder, "consumer_gone", patch=monkeypatch.setattr)
    async with router.connect() as bystander:
        sender = await bystander.open_sender("d")
        async with router.connect() as doomed:
            receiver = await doomed.open_receiver("d", credit=5)
            with trio.fail_after(10):
                tracker = await sender.start_send(Message.value("held"))
                await receiver.receive()  # unsettled when the consumer goes
            state = state_of(router, doomed)
            fault.doomed = state.engine
            with trio.move_on_after(5):
                try:
                    await receiver.close()
                except Exception:  # noqa: BLE001 - the connection is lost meanwhile
                    pass
            await gone(router, state)
        assert fault.fired
        with trio.fail_after(10):
            outcome = await tracker.wait()
        assert isinstance(outcome, Modified) and outcome.delivery_failed
        assert_nothing_of(router, state)
        entry = router.core.table.find("d")
        assert entry is None or not entry.consumers
    await still_serves(router, "d")
    assert_quiet(router.core)


async def test_a_request_cut_short_at_an_in_process_endpoint_leaves_the_byte_count_alone(
    autojump_clock: trio.testing.MockClock, router: MemRouter
) -> None:
    """A multi-frame request to $management past its size limit is aborted while the endpoint
    collects it: its bytes were never counted as waiting, so none may be taken off (the router's
    byte budget once went negative by the first frame of each: bounds then never bound)."""
    from router.core.streaming import LOCAL_MESSAGE_LIMIT

    async with router.connect() as client:
        sender = await client.open_sender("$management")
        with trio.fail_after(30):
            outcome = await sender.send(Message.value("x" * (LOCAL_MESSAGE_LIMIT + FRAME)))
        assert type(outcome).__name__ == "Rejected"
        assert router.core.bounds.buffered_total == 0 and router.core.bounds.holders == 0
    await still_serves(router)
    assert_quiet(router.core)
