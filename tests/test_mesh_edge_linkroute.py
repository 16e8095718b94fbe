"""Link routes through edge routers (MeshHarness, sans-IO; docs/mesh.md, "Link routes"): a client
on an edge router reaches a route container anywhere in the mesh through its uplink, and a
container connected to an edge router serves clients anywhere. An edge router learns the
routes from its uplink's MESH-ADDRESSES and tells it its own in EDGE-ADDRESSES; the interior
serves an edge's routes for the mesh."""

from __future__ import annotations

from collections import deque

import pytest

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.link import Link
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, Modified
from router.config.models import LinkRouteConfig, Listener
from router.core.linkroute import EDGE_ROUTES_MAX
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

from .test_autolinks import BROKERS, IN, OUT
from .test_autolinks import _broker as autolink_broker
from .test_mesh_linkroute import answered, send_through

BROKER = Listener(name="broker", port=5675, role="route-container")
ROUTES = (
    LinkRouteConfig(prefix="q", direction="in", connection="broker"),
    LinkRouteConfig(prefix="q", direction="out", connection="broker"),
)


def mesh(container_on: str) -> tuple[MeshHarness, Client]:
    """Interiors A - B; edge E1 up to A (then B), edge E2 up to B; the route container (and the
    routes) on router `container_on`."""
    h = MeshHarness()
    for rid, mode in (("A", "interior"), ("B", "interior"), ("E1", "edge"), ("E2", "edge")):
        listeners = (CLIENTS, INTER_ROUTER, EDGE) if mode == "interior" else (CLIENTS,)
        if rid == container_on:
            h.router(rid, mode=mode, listeners=(*listeners, BROKER), link_routes=ROUTES)
        else:
            h.router(rid, mode=mode, listeners=listeners)
    h.link("A", "B")
    h.uplink("E1", "A")
    h.uplink("E1", "B")
    h.uplink("E2", "B")
    broker = h.client(container_on, "broker", listener=BROKER)
    broker.auto_accept = False
    h.converge()
    h.advance(0.5)
    return h, broker


def receiving(h: MeshHarness, client: Client, broker: Client, address: str, credit: int) -> Link:
    """`client`'s receiver from the container's queue `address`, its credit passed on to the
    container end to end."""
    receiver = client.receiver(address)
    h.pump()
    upstream = answered(h, broker)
    receiver.flow(credit)
    h.pump()
    assert upstream.credit == credit and upstream.remote_source.address == address
    return receiver


def refusal(client: Client, link: Link) -> ev.RemoteDetach:
    (detach,) = [e for e in client.events if isinstance(e, ev.RemoteDetach) and e.link is link]
    return detach


def test_a_client_on_an_edge_reaches_a_container_on_an_interior() -> None:
    h, broker = mesh("B")
    assert set(h.cores["E1"].link_routes.remote_routes) == {"\x00lr/in/p/q", "\x00lr/out/p/q"}
    send_through(h, h.client("E1", "producer"), broker, "q.orders")  # E1 -> A -> B -> broker
    for rid in ("E1", "A", "B"):
        assert len(h.cores[rid].link_routes.pairs) == 1
    assert h.cores["E1"].table.find("q.orders") is None  # not a mobile address anywhere
    # and a receiver: the client's credit reaches the broker end to end
    receiving(h, h.client("E2", "consumer"), broker, "q.orders", credit=5)


def test_a_container_on_an_edge_serves_clients_on_interiors_and_other_edges() -> None:
    h, broker = mesh("E2")
    for rid in ("A", "B"):  # B serves the route for E2; A learnt it from the mesh
        assert set(h.cores[rid].link_routes.remote_routes) | set(h.cores[rid].link_routes.at_edges.routes) == {
            "\x00lr/in/p/q", "\x00lr/out/p/q"}  # fmt: skip
    assert set(h.cores["B"].link_routes.at_edges.routes["\x00lr/in/p/q"].routers) == {"E2"}
    send_through(h, h.client("A", "on-interior"), broker, "q.a")  # A -> B -> E2 -> broker
    send_through(h, h.client("E1", "on-edge"), broker, "q.b")  # E1 -> A -> B -> E2 -> broker
    assert len(h.cores["E2"].link_routes.pairs) == 2


def test_an_edge_is_not_told_of_the_routes_only_it_serves() -> None:
    h, broker = mesh("E2")
    assert not h.cores["E2"].link_routes.remote_routes  # only E2 has the container
    assert h.cores["E1"].link_routes.remote_routes  # E1 reaches it through its uplink
    # A client of E2 is served by E2's own container, directly.
    send_through(h, h.client("E2", "local"), broker, "q.here")
    assert len(h.cores["B"].link_routes.pairs) == 0


def test_the_container_going_away_from_an_edge_withdraws_the_route_from_the_mesh() -> None:
    h, broker = mesh("E2")
    client = h.client("A", "late")
    receiver = client.receiver("q.x")
    h.pump()
    answered(h, broker)
    h.cut(next(w for w in h.wires if w.a_client is broker))
    h.advance(2.0)
    detach = refusal(client, receiver)  # the routed link: lost with the container
    assert detach.error is not None and detach.error.condition == E.NOT_FOUND
    for rid in ("A", "B", "E1", "E2"):
        core = h.cores[rid].link_routes
        assert not core.remote_routes and not core.at_edges.routes and not core.pairs, rid
    other = client.receiver("q.y")  # no route left: a mobile address again
    h.pump()
    assert other.remotely_attached and h.cores["A"].table.find("q.y") is not None


def test_an_edge_without_its_uplink_refuses_routed_attaches_and_fails_over() -> None:
    h, broker = mesh("B")
    client = h.client("E1", "client")
    receiver = receiving(h, client, broker, "q.jobs", credit=1)
    h.cut(h.wire_between("E1", "A"))  # E1 fails over to B
    h.advance(2.0)
    detach = refusal(client, receiver)
    assert detach.error is not None and detach.error.condition == E.NOT_FOUND
    assert h.cores["E1"].mesh.edges.active == "B"
    send_through(h, client, broker, "q.after")  # through B now
    h.cut(h.wire_between("E1", "B"))  # no uplink at all: the routes stay known, unreachable
    h.advance(2.0)
    stranded = client.sender("q.none")
    h.pump()
    detach = refusal(client, stranded)
    assert detach.error is not None and detach.error.condition == E.NOT_FOUND
    assert "no route container" in (detach.error.description or "")
    assert h.cores["E1"].table.find("q.none") is None


def test_an_edge_uplink_lost_mid_delivery_gives_every_delivery_an_outcome() -> None:
    h, broker = mesh("B")
    client = h.client("E1", "producer")
    sender = client.sender("q.orders")
    h.pump()
    upstream = answered(h, broker, credit=2)
    delivery = client.send(sender, Message.value("in flight"))
    h.pump()
    assert broker.received[upstream]  # at the broker, not settled
    h.cut(h.wire_between("E1", "A"))
    h.advance(1.0)
    assert isinstance(client.outcomes[delivery], Modified)
    assert refusal(client, sender).error is not None
    assert not h.cores["E1"].link_routes.pairs


def test_auto_links_on_an_edge_serve_the_whole_mesh() -> None:
    # The queue behind an edge router is a consumer (out) and a producer (in) for every router.
    h = MeshHarness()
    h.router("A", instance=1)
    h.router("B", instance=2)
    h.router("E2", mode="edge", listeners=(CLIENTS, BROKERS), auto_links=(OUT, IN))
    h.link("A", "B")
    h.uplink("E2", "B")
    broker = autolink_broker(h, "E2", "broker")
    h.converge()
    h.advance(0.5)
    assert h.cores["E2"].autolinks.runs[OUT.key].state == "active"
    producer = h.client("A", "producer")
    sender = producer.sender("orders")
    h.advance(0.5)
    assert sender.credit > 0  # the queue on E2 is a consumer of "orders" as far as A can tell
    ids = [producer.send(sender, Message.value(f"order {i}")) for i in range(3)]
    h.pump()
    assert broker.stored() == ["order 0", "order 1", "order 2"]
    assert all(producer.outcomes[i] == ACCEPTED for i in ids)
    broker.queues["/queue/orders"] = deque(encode_message(Message.value(f"done {i}")) for i in range(2))
    consumer = h.client("A", "consumer")
    receiver = consumer.receiver("orders-done")
    h.advance(0.5)
    receiver.flow(10)
    h.pump()
    broker.pump_out()
    h.pump()
    assert consumer.bodies(receiver) == ["done 0", "done 1"]


def test_an_edge_reporting_too_many_routes_has_the_first_ones_served(caplog: pytest.LogCaptureFixture) -> None:
    h, _ = mesh("B")
    routes = h.cores["A"].link_routes
    keys = {f"\x00lr/in/p/q{n:05}" for n in range(EDGE_ROUTES_MAX + 5)} | {"\x00lr/bogus"}
    routes.edge_served("E9", keys)
    assert len(routes.edge_keys["E9"]) == EDGE_ROUTES_MAX and "\x00lr/bogus" not in routes.edge_keys["E9"]
    assert "reports 1005 link routes" in caplog.text
    routes.edge_served("E9", set())  # the edge went: nothing of it stays
    assert "E9" not in routes.edge_keys and not routes.at_edges.routes
