"""A connection a router's core fails on, anywhere in random traffic across a mesh, leaves
nothing behind (router.core.release, router.core.mend), in process (router.testing.meshharness).

Three interior routers in a line (A - B - C, and a variant with an edge router below C); clients
on any of them attach producers and consumers of anycast and multicast addresses and send
settled and unsettled messages of one or several frames, of any priority (so every band's data
link carries some). One connection is doomed: a client's, or one end of an inter-router (or
edge) connection, on its router. From a chosen step on, the `nth` call of one of that router's
core methods raises while the core handles that connection's input; the harness does what the
network layer does (the connection ends unwritten, its core forgets it; the other end of an
inter-router connection sees it drop and loses its neighbour) and the connector dials again.
At the end every consumer left gives credit and settles what it holds, and then: nothing of the
failed connection remains in its router; every unsettled delivery a surviving producer sent on a
link still attached has a settled outcome; every message a consumer got is one that was sent,
whole; no router has a delivery, unsettled count or byte left counted; and once the mesh has
converged again a new producer and consumer on different routers exchange a message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st

from router.amqp.connection import Connection
from router.amqp.endpoints import ACTIVE
from router.amqp.message import Message
from router.config.models import AddressConfig
from router.core.connections import ConnState
from router.core.router import RouterCore
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness, Wire
from router.testing.routerharness import Client

from .support.random_traffic import (
    CORE_POINTS, FRAME, Peer, apply_step, drain, first_links, passes_whole, step_strategy, assert_served,
)  # fmt: skip
from .support.release_checks import needs_patchable_core, Fault, InjectedFault, Watch, assert_nothing_of, assert_quiet

pytestmark = needs_patchable_core  # every test here injects faults into the core

INTERIORS = ["A", "B", "C"]
CLIENT_LISTENER = CLIENTS.model_copy(update={"max_frame_size": FRAME, "max_unsettled_per_link": 4})
LISTENERS = (
    CLIENT_LISTENER,
    INTER_ROUTER.model_copy(update={"max_frame_size": FRAME}),
    EDGE.model_copy(update={"max_frame_size": FRAME}),
)

# Where the failure is injected: (unit, method), on the doomed connection's router. The
# per-message path, the attach/detach path, the mesh's control messages and links, the bounds.
# Where the failure is injected, on the doomed connection's router: the core's points and the
# mesh's control messages and links.
POINTS = CORE_POINTS + [
    ("mesh", name) for name in ("consumers_changed", "on_transfer", "on_flow", "send_control", "set_remote")
]


class Harness(MeshHarness):
    """MeshHarness whose pump ends a connection its core raised on, as the network layer does;
    a lost inter-router or edge connection is dialled again by its connector."""

    def __init__(self, edge: bool) -> None:
        super().__init__(hello_interval_s=0.2, dead_interval_s=0.6)
        self.clients: list[Client] = []
        self.lost: list[Client] = []
        self.redial: list[tuple[str, str, bool]] = []  # (from, to, edge) of lost router connections
        for i, rid in enumerate(INTERIORS):
            self.router(rid, instance=i + 1, listeners=LISTENERS, addresses=(MC,))
        for a, b in zip(INTERIORS, INTERIORS[1:]):
            self.link(a, b, max_frame_size=FRAME)
        if edge:
            self.router("E", instance=9, mode="edge", addresses=(MC,),
                        listeners=(CLIENT_LISTENER,))  # fmt: skip
            self.uplink("E", "C")

    def handle(self, wire: Wire, core: RouterCore, engine: Connection, events: list[Any]) -> None:
        try:
            super().handle(wire, core, engine, events)
        except InjectedFault:
            if wire.a_client is not None:
                self.clients.remove(wire.a_client)
                self.lost.append(wire.a_client)
            else:
                a, b = (self.id_of(c) for c in (wire.a_core, wire.b_core))
                self.redial.append((a, b, "=>" in wire.name))
            self.drop(wire, engine)

    def id_of(self, core: RouterCore | None) -> str:
        return next(rid for rid, c in self.cores.items() if c is core)

    def add_client(self, rid: str, name: str) -> Client:
        client = self.client(rid, name, listener=CLIENT_LISTENER)
        client.auto_accept = False
        self.clients.append(client)
        return client

    def dial_again(self) -> None:
        for a, b, edge in self.redial:
            if edge:
                self.uplink(a, b)
            else:
                self.link(a, b, max_frame_size=FRAME)
        self.redial.clear()


MC = AddressConfig(prefix="mc", distribution="multicast")


PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink]  # (explaining a failure takes minutes)


def _step(h: Harness, peers: list[Peer], bodies: set[str], step: tuple[str, int, int, int, int]) -> None:
    peer = peers[step[1]]
    if peer.client not in h.clients:
        return
    apply_step(peer, bodies, step, most_links=2, settled_from=7, priority=True)  # (priorities: every band)
    h.pump()
    if step[0] in ("consumer", "detach"):
        h.advance(0.05)  # (the address reaches the other routers)


def _drain(h: Harness, peers: list[Peer]) -> None:
    drain(h.clients, peers, lambda: h.advance(0.05))


def _doomed(h: Harness, peers: list[Peer], doomed: int) -> tuple[RouterCore, Connection]:
    """Doomed 0-2: a client; 3+: one end of a connection between routers."""
    if doomed < len(peers):
        client = peers[doomed].client
        wire = next(w for w in h.wires if w.a_client is client)
        assert wire.b_core is not None
        return wire.b_core, client.router_side
    routers = [w for w in h.wires if w.a_core is not None and w.b_core is not None]
    wire = routers[(doomed - len(peers)) // 2 % len(routers)]
    if doomed % 2:
        assert wire.a_core is not None
        return wire.a_core, wire.a
    assert wire.b_core is not None
    return wire.b_core, wire.b


class Calls(Watch):
    """The calls of every POINT the core makes while it handles the `doomed` connection's input
    (while `armed`): a dry run of an example lists them, so that the failure can be injected at
    one of them (the harness is deterministic: the run with the failure is the same up to it)."""

    def __init__(self, core: RouterCore) -> None:
        super().__init__(core)
        self.seen: list[tuple[str, str]] = []
        for point in POINTS:
            self._wrap(core, point)

    def _wrap(self, core: RouterCore, point: tuple[str, str]) -> None:
        unit = getattr(core, point[0])
        original = getattr(unit, point[1])

        def listed(*args: Any, **kwargs: Any) -> Any:
            if self.in_doomed():
                self.seen.append(point)
            return original(*args, **kwargs)

        setattr(unit, point[1], listed)


@dataclass
class Run:
    h: Harness
    peers: list[Peer]
    core: RouterCore  # the doomed connection's router
    engine: Connection  # the doomed connection's engine there
    state: ConnState  # and its state
    fault: Fault | Calls
    bodies: set[str] = field(default_factory=set)


def _play(
    edge: bool, where: list[int], links: list[list[tuple[str, int, int]]], steps: list[tuple[str, int, int, int, int]],
    doomed: int, pick: int | None,
) -> Run:  # fmt: skip
    """The example's traffic, with the failure at call `pick` of those a dry run lists (None:
    the dry run), up to the doomed connection's end (by the failure, or else as usual)."""
    h = Harness(edge)
    h.converge()
    routers = list(h.cores)
    peers = [Peer(h.add_client(routers[r % len(routers)], f"c{i}")) for i, r in enumerate(where)]
    core, engine = _doomed(h, peers, doomed)
    if pick is None:
        fault: Fault | Calls = Calls(core)
    else:
        dry = _play(edge, where, links, steps, doomed, None).fault
        assert isinstance(dry, Calls)
        if dry.seen:
            points = list(dict.fromkeys(dry.seen))  # (each method as likely, in order of first call)
            unit, name = point = points[pick % len(points)]
            nth = 1 + pick // len(points) % dry.seen.count(point)
            event(f"point: {unit}.{name}")
            fault = Fault(core, getattr(core, unit), name, nth)
        else:
            fault = Calls(core)
    fault.doomed = engine
    run = Run(h, peers, core, engine, core.connections[engine], fault)
    for who, first in enumerate(links):
        for kind, address, credit in first:
            _step(h, peers, run.bodies, (kind, who, address, credit, 0))
    for step in steps:
        _step(h, peers, run.bodies, step)
    doomed_client = next((p for p in peers if p.client.router_side is engine), None)
    if not fault.fired and doomed_client is not None:  # its links go, one by one
        for link in doomed_client.producers + doomed_client.consumers:
            if doomed_client.client in h.clients and link.state.local is ACTIVE:
                link.detach(closed=True)
                h.pump()
    if not fault.fired:  # the connection's last input: its timers and whatever comes
        h.advance(0.3)
    fault.armed = False
    if not fault.fired:  # the failure never came: the doomed connection ends the usual way
        wire = next(w for w in h.wires if engine in (w.a, w.b))
        if doomed_client is not None:
            h.clients.remove(doomed_client.client)
        h.cut(wire)
        if doomed_client is None:
            h.redial.append((h.id_of(wire.a_core), h.id_of(wire.b_core), "=>" in wire.name))
    return run


def _run(
    edge: bool, where: list[int], links: list[list[tuple[str, int, int]]], steps: list[tuple[str, int, int, int, int]],
    doomed: int, pick: int,
) -> None:  # fmt: skip
    run = _play(edge, where, links, steps, doomed, pick)
    h, peers, core, engine, state, fault = run.h, run.peers, run.core, run.engine, run.state, run.fault
    bodies = run.bodies
    event(f"fired: {fault.fired}")
    event(f"doomed: {'client' if any(p.client.router_side is engine for p in peers) else 'router'}")
    if isinstance(fault, Fault):  # the dry run listed this call: the run reached it too
        assert fault.fired
    survivors = [p for p in peers if p.client in h.clients]
    _drain(h, survivors)

    assert_nothing_of(core, state)
    assert state.peer is None and all(p.conn is not state for p in core.mesh.peers.values())
    assert_served(survivors, bodies)
    for rid, router in h.cores.items():
        assert not router.ending.failed_conns, rid
        assert_quiet(router)

    # The connector dials again, the mesh converges, and a new pair exchanges messages across it.
    h.dial_again()
    h.converge()
    ends = [INTERIORS[0], list(h.cores)[-1]]  # (A, and C or the edge router)
    consumer, producer = h.add_client(ends[0], "fresh-c"), h.add_client(ends[1], "fresh-p")
    rx = consumer.receiver("fresh")
    rx.flow(2)
    h.advance(0.3)
    tx = producer.sender("fresh")
    h.pump()
    assert tx.credit > 0
    passes_whole(h.pump, producer, tx, consumer, rx, "after" + "y" * 2 * FRAME)
    for router in h.cores.values():
        assert_quiet(router)


@settings(max_examples=50, deadline=None, derandomize=True, phases=PHASES)
@given(
    where=st.lists(st.integers(0, 2), min_size=3, max_size=3),
    links=st.lists(first_links(2), min_size=3, max_size=3),
    steps=st.lists(step_strategy(7), min_size=4, max_size=20),
    doomed=st.integers(0, 6),  # 0-2: a client; 3-6: an end of A-B or B-C
    pick=st.integers(0, 1 << 16),  # which of the calls on the doomed connection fails
)
def test_a_failure_anywhere_in_a_line_of_routers_leaves_nothing_behind(
    where: list[int], links: list[list[tuple[str, int, int]]], steps: list[tuple[str, int, int, int, int]],
    doomed: int, pick: int,
) -> None:  # fmt: skip
    _run(False, where, links, steps, doomed, pick)


@settings(max_examples=25, deadline=None, derandomize=True, phases=PHASES)
@given(
    where=st.lists(st.integers(0, 3), min_size=3, max_size=3),  # 3: the edge router
    links=st.lists(first_links(2), min_size=3, max_size=3),
    steps=st.lists(step_strategy(7), min_size=4, max_size=16),
    doomed=st.integers(0, 8),  # 0-2: a client; 3-8: an end of A-B, B-C or the uplink E=>C
    pick=st.integers(0, 1 << 16),
)
def test_a_failure_anywhere_with_an_edge_router_leaves_nothing_behind(
    where: list[int], links: list[list[tuple[str, int, int]]], steps: list[tuple[str, int, int, int, int]],
    doomed: int, pick: int,
) -> None:  # fmt: skip
    _run(True, where, links, steps, doomed, pick)


# --- what the random test found, on its own --------------------------------------------------


@pytest.mark.parametrize("presettled", [False, True], ids=["unsettled", "presettled"])
def test_a_delivery_whose_last_frame_the_core_failed_on_never_reaches_a_consumer_cut(presettled: bool) -> None:
    """C's core fails on the last frame of a delivery arriving from B, after marking it whole
    and before keeping the frame (its consumer has no credit yet: the delivery waits). The
    delivery is dropped with the connection (aborted, as its producer's end would abort it),
    and when the consumer gives credit it gets nothing, rather than a message with its end
    missing; the next delivery, over the connection B dials again, arrives whole."""
    h = Harness(edge=False)
    h.converge()
    producer, consumer = h.add_client("A", "p"), h.add_client("C", "c")
    rx = consumer.receiver("any/q")
    h.advance(0.3)
    tx = producer.sender("any/q")
    h.pump()
    core = h.cores["C"]
    wire = h.wire_between("B", "C")
    fault = Fault(core, core.bounds, "observe", 1)  # (called for the last frame of a delivery)
    fault.doomed = wire.b
    producer.send(tx, Message.value("cut" + "x" * 3 * FRAME), settled=presettled)
    h.pump()
    assert fault.fired and wire not in h.wires
    rx.flow(5)
    h.advance(0.3)
    assert not consumer.received[rx] and not consumer.partial.get(rx)
    for router in h.cores.values():
        assert_quiet(router)
    h.dial_again()
    h.converge()
    passes_whole(h.pump, producer, tx, consumer, rx, "whole" + "y" * 3 * FRAME)
    for router in h.cores.values():
        assert_quiet(router)
