"""Link routes across the mesh (MeshHarness, sans-IO): A - B - C in a line, the route container
on C, the client on A. The route is configured on C only and learnt by A and B from the address
exchange; the attach goes hop by hop, each router pairing its incoming link with an outgoing one;
a path that breaks detaches the client's link with an error and leaves no pair anywhere."""

from __future__ import annotations

from router.amqp import errors as E
from router.amqp import events as ev
from router.amqp.endpoints import UNINIT
from router.amqp.link import Link
from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED
from router.config.models import LinkRouteConfig, Listener
from router.testing.meshharness import CLIENTS, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

BROKER = Listener(name="broker", port=5675, role="route-container")


def attached_to(broker: Client) -> Link:
    for event in broker.events:
        if isinstance(event, ev.RemoteBegin) and event.session.state.local is UNINIT:
            event.session.begin()
    return [e.link for e in broker.events if isinstance(e, ev.RemoteAttach)][-1]


def answered(h: MeshHarness, broker: Client, credit: int = 0) -> Link:
    upstream = attached_to(broker)
    upstream.answer(source=upstream.remote_source, target=upstream.remote_target)
    if credit:
        upstream.flow(credit)
    h.pump()
    return upstream


def send_through(h: MeshHarness, client: Client, broker: Client, address: str) -> None:
    """A message from `client` to the container's queue `address`, accepted end to end."""
    sender = client.sender(address)
    h.pump()
    upstream = answered(h, broker, credit=1)
    assert upstream.remote_target.address == address and upstream.name == sender.name
    assert sender.remotely_attached and sender.credit == 1
    delivery = client.send(sender, Message.value("routed"))
    h.pump()
    (arrived,) = broker.received[upstream]
    assert arrived.message.body_value == "routed"
    upstream.dispose(arrived.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert client.outcomes[delivery] == ACCEPTED and delivery in client.settled


def line() -> tuple[MeshHarness, Client, Client]:
    h = MeshHarness()
    h.router("A")
    h.router("B")
    h.router("C", listeners=(CLIENTS, INTER_ROUTER, BROKER), link_routes=(
        LinkRouteConfig(prefix="q", direction="in", connection="broker"),
        LinkRouteConfig(prefix="q", direction="out", connection="broker"),
    ))  # fmt: skip
    h.link("A", "B")
    h.link("B", "C")
    broker = h.client("C", "broker", listener=BROKER)
    broker.auto_accept = False
    h.converge()
    return h, broker, h.client("A", "client")


def test_attach_and_messages_go_hop_by_hop() -> None:
    h, broker, client = line()
    assert len(h.cores["A"].link_routes.remote_routes) == 2  # learnt, not configured
    send_through(h, client, broker, "q.far")
    for rid in "ABC":  # one pair per router: the client's side at A, the incoming hop at B and C
        assert len(h.cores[rid].link_routes.pairs) == 1
    # No router made an address of it.
    assert all(h.cores[rid].table.find("q.far") is None for rid in "ABC")


def test_the_path_breaking_detaches_the_client_and_leaves_nothing() -> None:
    h, broker, client = line()
    receiver = client.receiver("q.jobs")
    h.pump()
    upstream = attached_to(broker)
    upstream.answer(source=upstream.remote_source, target=upstream.remote_target)
    h.pump()
    receiver.flow(3)
    h.pump()
    assert upstream.credit == 3  # the client's credit, end to end through B
    h.cut(h.wire_between("B", "C"))
    detaches = [e for e in client.events if isinstance(e, ev.RemoteDetach)]
    assert len(detaches) == 1 and detaches[0].link is receiver
    error = detaches[0].error
    assert error is not None and error.condition == E.NOT_FOUND and "routed link lost" in (error.description or "")
    assert "next router (C)" in (error.description or "")
    assert not h.cores["A"].link_routes.pairs and not h.cores["B"].link_routes.pairs
    assert [e for e in broker.events if isinstance(e, ev.RemoteDetach)]  # C let the broker go too
    assert not h.cores["C"].link_routes.pairs
