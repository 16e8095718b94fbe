"""Failures in the mesh, sans-IO: an inter-router connection or a whole router lost mid-stream.
Routes are recomputed at once, deliveries not yet sent out are released, sent-but-unsettled ones
become modified (delivery-failed), new deliveries take the surviving path, and every delivery is
accounted for at its producer."""

from __future__ import annotations

from collections import Counter
from typing import Any

from router.amqp.message import Message
from router.amqp.messaging import Accepted, Modified, Released
from router.config.models import AddressConfig
from router.amqp.connection import Connection, ConnectionConfig
from router.core.connections import new_engine
from router.core.interrouter import COST_PROPERTY, ROLE_PROPERTY, VERSION_PROPERTY
from router.testing.meshharness import INTER_ROUTER, MeshHarness, Wire
from router.testing.routerharness import Client

RING = [("A", "B"), ("B", "C"), ("C", "D"), ("D", "A")]


def _ring(**router: Any) -> MeshHarness:
    h = MeshHarness()
    for i, rid in enumerate("ABCD"):
        h.router(rid, instance=i + 1, **router)
    for a, b in RING:
        h.link(a, b)
    h.converge()
    return h


def _setup(h: MeshHarness, address: str = "orders") -> tuple[Client, Client, Any, Any]:
    consumer = h.client("C", "c")
    consumer.auto_accept = False  # deliveries stay unsettled at the consumer until we say
    rx = consumer.receiver(address)
    h.advance(0.5)
    rx.flow(10_000)
    producer = h.client("A", "p")
    tx = producer.sender(address)
    h.pump()
    return producer, consumer, tx, rx


def _outcomes(producer: Client, ids: list[int]) -> Counter[str]:
    return Counter(type(producer.outcomes.get(i)).__name__ for i in ids)


def test_a_lost_link_mid_stream_reports_every_delivery_and_traffic_moves_over() -> None:
    h = _ring()
    producer, consumer, tx, rx = _setup(h)
    assert h.cores["A"].mesh.routes.next_hops["C"] == "B"  # equal costs: the smaller id
    in_flight = [producer.send(tx, Message.value(i)) for i in range(50)]
    h.pump()
    assert len(consumer.received[rx]) == 50  # at the consumer, unsettled
    # B cannot write to C for a while: the next deliveries wait at B, not sent out
    b_to_c = h.cores["B"].mesh.peers["C"].conn.engine
    h.cores["B"].set_output_blocked(b_to_c, True, h.now)
    waiting = [producer.send(tx, Message.value(i)) for i in range(50, 70)]
    h.pump()
    assert len(consumer.received[rx]) == 50
    h.cut(h.wire_between("B", "C"))
    assert _outcomes(producer, in_flight) == {"Modified": 50}
    assert all(producer.outcomes[i].delivery_failed for i in in_flight)
    assert _outcomes(producer, waiting) == {"Released": 20}
    assert set(in_flight + waiting) <= producer.settled
    h.advance(0.2)  # routes recomputed: C is reached through D now
    assert h.cores["A"].mesh.routes.next_hops["C"] == "D"
    consumer.auto_accept = True
    after = [producer.send(tx, Message.value(i)) for i in range(70, 100)]
    h.pump()
    assert _outcomes(producer, after) == {"Accepted": 30}
    bodies = consumer.bodies(rx)
    assert bodies[-30:] == list(range(70, 100))
    assert not set(bodies) & set(range(50, 70))  # released means: never delivered


def test_a_router_dying_mid_stream_moves_traffic_to_the_other_path() -> None:
    h = _ring()
    producer, consumer, tx, rx = _setup(h)
    sent = [producer.send(tx, Message.value(i)) for i in range(40)]
    h.pump()
    h.kill("B")
    # what went through B and is unsettled is in doubt; nothing is left without an outcome
    assert _outcomes(producer, sent) == {"Modified": 40}
    consumer.auto_accept = True
    during = [producer.send(tx, Message.value(i)) for i in range(40, 45)]  # before new routes
    h.pump()
    h.advance(0.2)
    after = [producer.send(tx, Message.value(i)) for i in range(45, 85)]
    h.pump()
    for i in during:  # either on the new path already, or released (the producer may resend)
        assert isinstance(producer.outcomes.get(i), (Accepted, Released))
    assert _outcomes(producer, after) == {"Accepted": 40}
    assert h.cores["A"].mesh.routes.next_hops == {"C": "D", "D": "D"}


def test_deliveries_waiting_for_a_path_take_the_new_one() -> None:
    h = _ring()
    producer, consumer, tx, rx = _setup(h)
    consumer.auto_accept = True
    h.cut(h.wire_between("A", "B"))
    # A's routes still say B until they are recomputed: nothing is lost meanwhile
    waiting = [producer.send(tx, Message.value(i)) for i in range(5)]
    h.pump()
    h.advance(0.2)
    assert _outcomes(producer, waiting) == {"Accepted": 5}
    assert consumer.bodies(rx) == list(range(5))


def test_multicast_copies_on_a_lost_link_are_reported_and_combined() -> None:
    h = _ring(addresses=(AddressConfig(prefix="mc", distribution="multicast"),))
    consumers = {}
    for rid in "BC":
        client = h.client(rid, f"c{rid}")
        client.auto_accept = False
        consumers[rid] = (client, client.receiver("mc.x"))
    h.advance(0.5)
    for client, link in consumers.values():
        link.flow(100)
    producer = h.client("A", "p")
    tx = producer.sender("mc.x")
    h.pump()
    delivery = producer.send(tx, Message.value("m"))
    h.pump()
    client_b, link_b = consumers["B"]
    link_b.dispose(client_b.received[link_b][0].delivery_id, state=Accepted(), settled=True)
    h.pump()
    assert delivery not in producer.settled  # B holds its copy's outcome until C's copy is terminal
    h.cut(h.wire_between("A", "B"))
    # A sent one copy (B and C share the next hop B): B had not settled it, so it is in doubt
    outcome = producer.outcomes[delivery]
    assert isinstance(outcome, Modified) and outcome.delivery_failed and delivery in producer.settled


def _diamond() -> MeshHarness:
    """A - B - D is the short way (cost 2), A - C - D the long one (cost 10)."""
    h = MeshHarness(hello_interval_s=1.0, dead_interval_s=3.0)
    for i, rid in enumerate("ABCD"):
        h.router(rid, instance=i + 1)
    h.link("A", "B")
    h.link("B", "D")
    h.link("A", "C", cost=5)
    h.link("C", "D", cost=5)
    h.converge()
    return h


def test_a_frozen_neighbour_is_left_after_the_dead_interval_and_traffic_moves_over() -> None:
    h = _diamond()
    consumer = h.client("D", "c")
    rx = consumer.receiver("orders")
    h.advance(0.5)
    rx.flow(10_000)
    producer = h.client("A", "p")
    tx = producer.sender("orders")
    h.advance(0.5)
    a = h.cores["A"]
    assert a.mesh.routes.next_hops["D"] == "B"
    h.freeze("B")  # SIGSTOP: its connections stay up, it reads and answers nothing
    frozen_at = h.now
    in_flight = [producer.send(tx, Message.value(i)) for i in range(30)]
    h.pump()
    assert not consumer.received[rx] and not any(i in producer.outcomes for i in in_flight)
    # Within the dead interval (3 s) plus one hello interval, far below the idle time-out (16 s):
    # A leaves B, what it sent to B is in doubt (modified), and routes go through C.
    h.advance(3.0)
    while not all(i in producer.outcomes for i in in_flight):
        assert h.now - frozen_at < 4.5, "deliveries to the frozen router were held"
        h.advance(0.1)
    assert _outcomes(producer, in_flight) == {"Modified": 30}
    assert all(producer.outcomes[i].delivery_failed for i in in_flight)
    assert "B" not in a.mesh.peers and a.mesh.liveness.closed == 1
    h.advance(0.5)  # routes recomputed
    assert a.mesh.routes.next_hops["D"] == "C"
    again = [producer.send(tx, Message.value(i)) for i in range(30)]
    h.pump()
    assert _outcomes(producer, again) == {"Accepted": 30}
    assert len(consumer.received[rx]) == 30


def test_a_neighbour_that_never_says_hello_is_closed_after_the_dead_interval() -> None:
    h = MeshHarness(hello_interval_s=1.0, dead_interval_s=3.0)
    core = h.router("A", instance=1)
    # Something that opens as router X on the inter-router listener, then says nothing.
    router_side = new_engine(core.config, INTER_ROUTER)
    core.accept(router_side, INTER_ROUTER)
    mute = Connection(ConnectionConfig(container_id="X"))
    client = Client("X", mute, router_side)
    wire = Wire(mute, router_side, None, core, a_client=client, name="X@A")
    h.wires.append(wire)
    mute.open(properties={ROLE_PROPERTY: "inter-router", VERSION_PROPERTY: 1, COST_PROPERTY: 1})
    h.pump()
    assert "X" in core.mesh.peers
    h.advance(2.9)
    assert "X" in core.mesh.peers and router_side.state.local.name == "ACTIVE"
    h.advance(0.2)
    assert router_side.state.local.name == "CLOSED"
    assert core.mesh.peers == {} and core.mesh.liveness.closed == 1
    assert mute.remote_error is not None and mute.remote_error.condition == "amqp:connection:forced"
    assert "no HELLO from router X" in (mute.remote_error.description or "")


def test_a_neighbour_is_not_blamed_while_this_router_does_not_read_it() -> None:
    h = _diamond()
    a = h.cores["A"]
    b_engine = a.mesh.peers["B"].conn.engine
    paused = {b_engine}

    class PausedCore:  # the core as liveness sees it (ports.ConnectionCloser), B's reading paused
        def read_paused(self, engine: Connection) -> bool:
            return engine in paused or a.read_paused(engine)

        def close_connection(self, state: Any, error: Any, now: float) -> None:
            a.close_connection(state, error, now)

    a.mesh.liveness.closer = PausedCore()
    h.freeze("B")
    h.advance(6.0)
    assert "B" in a.mesh.peers and a.mesh.liveness.closed == 0  # not read: its silence may be ours
    assert a.mesh.routes.next_hops["D"] == "C"  # but it left the routes at the dead interval
    paused.clear()
    h.advance(1.5)
    assert "B" not in a.mesh.peers and a.mesh.liveness.closed == 1


def test_a_router_that_was_itself_stopped_does_not_drop_its_neighbours_on_waking() -> None:
    # A judges with a 3 s dead interval; its neighbours with 30 s, so they keep A while it sleeps.
    h = MeshHarness(hello_interval_s=1.0, dead_interval_s=3.0)
    h.router("A", instance=1)
    h.router_defaults = {"hello_interval_s": 1.0, "dead_interval_s": 30.0}
    h.router("B", instance=2)
    h.router("C", instance=3)
    h.link("A", "B")
    h.link("A", "C")
    h.converge()
    a = h.cores["A"]
    h.freeze("A")
    h.advance(10.0)  # the others go on; their HELLOs wait unread in A's sockets
    h.thaw("A")
    h.advance(3.0)  # on waking, A's timers run before it reads what waited
    assert a.mesh.liveness.closed == 0 and set(a.mesh.peers) == {"B", "C"}
    h.converge()
    # The same silence while A is awake (B frozen) is B's: A closes it.
    h.freeze("B")
    h.advance(4.5)
    assert set(a.mesh.peers) == {"C"} and a.mesh.liveness.closed == 1
