"""A link-routed stream that stalls between routers stops its routed links only (MeshHarness,
sans-IO; docs/mesh.md, "Link routes"): the route container on B stops taking bytes while a large
message streams to it from a client on A. B holds the frames (router.core.linkrelay) against the
session of routed links they came on as well as against the connection from A; past the band
share of the bound it shuts that session's window (router.core.bandwindow), and A holds what
follows against its producer. The connection between the routers is never paused: a message to
a mobile address on B still arrives, and once the container reads again the whole message
arrives in order and the producer hears accepted."""

from __future__ import annotations

from router.amqp import events as ev
from router.amqp.link import Link
from router.amqp.message import Message
from router.amqp.messaging import ACCEPTED, Released
from router.config.models import LinkRouteConfig
from router.core import linkpairs
from router.core.connections import ConnState
from router.core.linkrelay import RoutedLink
from router.testing.meshharness import CLIENTS, INTER_ROUTER, MeshHarness
from router.testing.routerharness import Client

from .test_mesh_linkroute import BROKER, answered, send_through

BODY = bytes(range(251)) * (6 * 1024 * 1024 // 251)  # ~6 MiB, every byte says where it belongs
FRAME = 64 * 1024


def _routed_to(core_conns: dict[object, ConnState], towards_router: bool) -> RoutedLink:
    (found,) = [r for state in core_conns.values() for r in state.routed
                if r.link.is_sender and (state.peer is not None) == towards_router]  # fmt: skip
    return found


def _stream(h: MeshHarness, sender: Link) -> int:
    """BODY from `sender`, a frame at a time as a socket would give them; its delivery-id."""
    delivery_id: int = sender.send_transfer(b"big", BODY[:FRAME], more=True)
    for start in range(FRAME, len(BODY), FRAME):
        h.pump()
        sender.send_transfer(b"", BODY[start:start + FRAME], more=start + FRAME < len(BODY))
    h.pump()
    return delivery_id


def _stalled_stream() -> tuple[MeshHarness, Client, Client, Link, int, ConnState]:
    """A - B, the container on B; a client on A streams BODY to it through the route while B's
    output to the container is blocked. The harness, the client, the container, the container's
    link, the delivery and B's connection to the container."""
    h = MeshHarness()
    h.router("A")
    h.router("B", listeners=(CLIENTS, INTER_ROUTER, BROKER), link_routes=(
        LinkRouteConfig(prefix="q", direction="in", connection="broker"),))  # fmt: skip
    h.link("A", "B")
    broker = h.client("B", "broker", listener=BROKER)
    broker.auto_accept = False
    h.converge()
    b = h.cores["B"]
    client = h.client("A", "producer")
    sender = client.sender("q.big")
    h.pump()
    upstream = answered(h, broker, credit=5)
    # The container stops reading: B's output to it is blocked (as its socket would be).
    broker_conn = next(s for s in b.connections.values() if s.role == "route-container")
    b.set_output_blocked(broker_conn.engine, True, h.now)
    delivery_id = _stream(h, sender)
    return h, client, broker, upstream, delivery_id, broker_conn


def test_a_stalled_routed_stream_shuts_its_session_not_the_connection() -> None:
    h, client, broker, upstream, delivery_id, broker_conn = _stalled_stream()
    a, b = h.cores["A"], h.cores["B"]
    from_a = next(s for s in b.connections.values() if s.peer is not None)
    # B shut the routed links' session, and only that one; it still reads A.
    shut = [s for s in from_a.engine.sessions if s.window_shut]
    assert len(shut) == 1 and all(isinstance(link.context, RoutedLink) for link in shut[0].links)
    assert not b.read_paused(from_a.engine)
    assert from_a.held_frame_bytes < len(BODY) // 2  # the rest waits at A, against its producer
    towards_b = _routed_to(a.connections, towards_router=True)
    assert towards_b.held and towards_b.link.session.remote_incoming_window <= 0
    client_conn = next(s for s in a.connections.values() if s.peer is None and s.routed)
    assert client_conn.held_frame_bytes == sum(len(item[3]) for item in towards_b.held)
    # Message routing between A and B goes on.
    listener = h.client("B", "listener")
    rx = listener.receiver("mobile")
    h.advance(0.5)
    rx.flow(5)
    h.pump()
    other = h.client("A", "other")
    tx = other.sender("mobile")
    h.advance(0.5)
    sent = other.send(tx, Message.value("meanwhile"))
    h.pump()
    assert listener.bodies(rx) == ["meanwhile"] and other.outcomes[sent] == ACCEPTED
    # The container reads again: the whole message, in order; the producer hears accepted.
    b.set_output_blocked(broker_conn.engine, False, h.now)
    upstream.flow(5)  # (any input from the container: its connection is handled again)
    h.pump()
    (arrived,) = broker.received[upstream]
    assert arrived.payload == BODY
    upstream.dispose(arrived.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert client.outcomes[delivery_id] == ACCEPTED
    assert not [s for s in from_a.engine.sessions if s.window_shut]
    assert from_a.held_frame_bytes == 0 and client_conn.held_frame_bytes == 0


def test_a_routed_stream_stalled_past_the_time_out_is_detached_and_nothing_stays_held() -> None:
    h, client, broker, upstream, delivery_id, broker_conn = _stalled_stream()
    a, b = h.cores["A"], h.cores["B"]
    from_a = next(s for s in b.connections.values() if s.peer is not None)
    assert [s for s in from_a.engine.sessions if s.window_shut]
    h.advance(broker_conn.listener.stalled_stream_timeout_s + 5.0, step=1.0)
    # The container's link is detached (resource-limit-exceeded), the client's side of the pair
    # plainly (linkpairs.detach_stalled); its delivery gets an outcome it can act on.
    assert [e for e in client.events if isinstance(e, ev.RemoteDetach) and e.closed]
    assert isinstance(client.outcomes.get(delivery_id), Released)  # none of it reached the container
    assert not [s for s in from_a.engine.sessions if s.window_shut]
    for core in (a, b):
        assert not core.link_routes.pairs
        assert all(state.held_frame_bytes == 0 for state in core.connections.values())


def test_a_stalled_routed_stream_does_not_stop_another_pair_between_the_same_routers() -> None:
    # Two containers on B (q1 and q2), two clients on A: the first container stops reading while
    # a large message streams to it; the routed links have sessions of their own
    # (linkpairs.routed_sessions), so a large message to the second crosses whole meanwhile.
    h = MeshHarness()
    h.router("A")
    h.router("B", listeners=(CLIENTS, INTER_ROUTER, BROKER), link_routes=(
        LinkRouteConfig(prefix="q1", direction="in", container_id="broker-1"),
        LinkRouteConfig(prefix="q2", direction="in", container_id="broker-2"),
    ))  # fmt: skip
    h.link("A", "B")
    brokers = [h.client("B", f"broker-{n}", listener=BROKER) for n in (1, 2)]
    for broker in brokers:
        broker.auto_accept = False
    h.converge()
    b = h.cores["B"]
    clients = [h.client("A", f"producer-{n}") for n in (1, 2)]
    senders, upstreams = [], []
    for n, (client, broker) in enumerate(zip(clients, brokers, strict=True), start=1):
        senders.append(client.sender(f"q{n}.big"))
        h.pump()
        upstreams.append(answered(h, broker, credit=5))
    stalled_conn = next(s for s in b.connections.values()
                        if s.engine.remote_open is not None and s.engine.remote_open.container_id == "broker-1")
    b.set_output_blocked(stalled_conn.engine, True, h.now)
    _stream(h, senders[0])
    from_a = next(s for s in b.connections.values() if s.peer is not None)
    assert len([s for s in from_a.engine.sessions if s.window_shut]) == 1
    # The other pair streams meanwhile, through a session of its own.
    delivery_id = _stream(h, senders[1])
    (arrived,) = brokers[1].received[upstreams[1]]
    assert arrived.payload == BODY and not brokers[0].received.get(upstreams[0])
    upstreams[1].dispose(arrived.delivery_id, state=ACCEPTED, settled=True)
    h.pump()
    assert clients[1].outcomes[delivery_id] == ACCEPTED


def _pair_sessions(h: MeshHarness, name: str) -> set[object]:
    """The sessions of the routed links `name` has towards another router."""
    pairs = h.cores[name].link_routes.pairs
    return {p.peer.link.session for p in pairs if p.peer is not None and p.peer.conn.peer is not None}


def _routed_pairs(count: int, **settings: object) -> tuple[MeshHarness, Client, Client]:
    """`count` senders on A, each routed to its own queue of the container on B, accepted."""
    h = MeshHarness()
    h.router("A")
    h.router("B", listeners=(CLIENTS, INTER_ROUTER, BROKER),
             link_routes=(LinkRouteConfig(prefix="q", direction="in", container_id="broker"),))  # fmt: skip
    h.link("A", "B", **settings)
    broker = h.client("B", "broker", listener=BROKER)
    h.converge()
    client = h.client("A", "producer")
    for n in range(count):
        send_through(h, client, broker, f"q.{n}")
    return h, client, broker


def test_every_routed_pair_between_two_routers_has_a_session_of_its_own() -> None:
    # More pairs than the 16 sessions routed links once had between two routers: with the
    # default channels (256 a connection) each has its own, so none waits behind another's stall.
    h, _, _ = _routed_pairs(20)
    assert len(h.cores["A"].link_routes.pairs) == 20
    assert len(_pair_sessions(h, "A")) == 20


def test_routed_pairs_share_sessions_past_the_channels_the_routers_allow() -> None:
    # 46 sessions a connection: 43 are kept for the mesh's control, band and streaming links,
    # so routed pairs get 3 sessions and the fourth and fifth share them (each still works).
    h, _, _ = _routed_pairs(5, max_sessions_per_connection=46)
    assert linkpairs.routed_sessions(next(s for s in h.cores["A"].connections.values() if s.peer).engine) == 3
    assert len(_pair_sessions(h, "A")) == 3
