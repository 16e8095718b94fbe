"""What a peer router sends a router over one connection, recorded as seeds for bench/fuzz.py
(`--peer router|edge|uplink`) and tests/test_fuzz_mesh_peer.py.

    mesh = fuzzed_mesh()               # the fuzzed router and its standing clients (MeshHarness)
    seed = interior_session()          # [(seconds since the start, bytes of one read), ...]

The fuzzed router (`FUZZED`, interior, instance 1) has an inter-router, an edge and a
route-container listener, link routes `lr*` to the container, and three standing clients: a
consumer of `sink`, a producer to `far` (up to 3 unsettled) and the route container (answers
every attach, gives credit, accepts). The seeds are what the other router sends it in an
ordinary exchange, recorded in MeshHarness on a fixed clock with fixed instances, so they are
the same on every run:

- `interior_session()`: router `peer` connects to its inter-router listener: open with the
  inter-router role, HELLO, RA, LSR/LSU, MAR/MAU of its consumer of `far`, its control link,
  the data links of every priority band and the streaming links, deliveries to `sink` (every
  band, one streaming, one multicast) with the router's annotations, its dispositions of the
  deliveries of `far` it got, a link-routed attach to `lr.q` with a transfer and a detach, and
  its close (the router stops).
- `edge_session()`: edge router `edge` connects to the edge listener: open with the edge role,
  EDGE-ADDRESSES (its consumer of `far`), MESH-ADDRESSES-REQUEST if it asks, deliveries to
  `sink`, dispositions of `far`'s, a link-routed attach through it, its close.
- `uplink_session()`: the other way round: the fuzzed router is edge router `fuzzed-edge` and
  the seed is what interior router `peer` answers on its uplink (MESH-ADDRESSES, deliveries to
  a consumer of the edge, dispositions); `fuzzed_edge()` builds that edge router.

Each read is what the recorded side wrote in one round of MeshHarness.pump, with the virtual
time it was written at: a peer router answers what this router sent (the begin answering our
session, the attach answering our link), so replaying all of it in one read would fail at the
first answer. The fuzzer keeps the rounds (and sometimes merges them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from router.amqp import events as ev
from router.amqp.connection import Connection, ConnectionConfig
from router.amqp.endpoints import UNINIT
from router.amqp.link import Link
from router.amqp.message import Message, encode_message
from router.amqp.messaging import ACCEPTED, Accepted, Header, Modified, Rejected, Released
from router.amqp.performatives import RECEIVER
from router.amqp.serial import serial_range
from router.config.models import AddressConfig, Connector, LinkRouteConfig, Listener
from router.core.connections import new_engine, new_outgoing_engine
from router.core.router import RouterCore
from router.testing.meshharness import CLIENTS, EDGE, INTER_ROUTER, MeshHarness, Wire
from router.testing.routerharness import Client

FUZZED = "fuzzed"
FUZZED_EDGE = "fuzzed-edge"
PEER = "peer"
EDGE_ROUTER = "edge"
START = 1_000_000.0
BROKER = Listener(name="broker", port=5675, role="route-container")
LINK_ROUTES = (
    LinkRouteConfig(prefix="lr", direction="in", connection="broker"),
    LinkRouteConfig(prefix="lr", direction="out", connection="broker"),
)
ADDRESSES = (AddressConfig(prefix="mc", distribution="multicast"),)
FAR_UNSETTLED = 3  # the standing producer's deliveries to `far` in flight at most

Reads = list[tuple[float, bytes]]
OUTCOMES = (Accepted, Rejected, Released, Modified)


class Standing(Client):
    """A client of the fuzzed router that stays for the whole run: it keeps counts, not what
    it got (bounded memory), and plays its part: a consumer accepts what comes, a producer
    sends while it has credit, the route container answers attaches."""

    role: str = "consumer"
    got = 0  # deliveries received (consumer, container)
    sent = 0
    outcomes_seen = 0  # outcomes of our deliveries, settled
    unsettled: set[int]
    producer: Link | None = None
    routed: list[Link]

    def on_events(self, events: list[ev.Event]) -> None:
        for event in events:
            t = type(event)
            if t is ev.TransferReceived:
                assert isinstance(event, ev.TransferReceived)
                if not event.more and not event.aborted:
                    self.got += 1
                    if not event.settled:
                        event.link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
                if event.link.credit < 50 and event.link.state.local is not UNINIT:
                    event.link.flow(200)
            elif t is ev.DispositionReceived:
                assert isinstance(event, ev.DispositionReceived)
                if event.role is RECEIVER and (event.settled or isinstance(event.state, OUTCOMES)):
                    done = [d for d in serial_range(event.first, event.last) if d in self.unsettled]
                    for delivery_id in done:
                        self.unsettled.discard(delivery_id)
                        self.outcomes_seen += 1
                    if done and not event.settled:  # an outcome the receiver left to us to settle
                        event.link.dispose(event.first, event.last, state=event.state, settled=True)
            elif t is ev.RemoteBegin and self.role == "container":
                assert isinstance(event, ev.RemoteBegin)
                if event.session.state.local is UNINIT:
                    event.session.begin()
            elif t is ev.RemoteAttach and self.role == "container":
                assert isinstance(event, ev.RemoteAttach)
                link = event.link
                link.answer(source=link.remote_source, target=link.remote_target)
                if not link.is_sender:
                    link.flow(100)
            elif t is ev.RemoteDetach:
                assert isinstance(event, ev.RemoteDetach)
                if event.link.state.local is not UNINIT:
                    event.link.detach()
            elif t is ev.RemoteEnd:
                assert isinstance(event, ev.RemoteEnd)
                event.session.end()
        self.send_some()

    def send_some(self) -> None:
        link = self.producer
        while link is not None and link.credit > 0 and len(self.unsettled) < FAR_UNSETTLED:
            delivery_id = link.send_transfer(b"f%d" % self.sent, encode_message(Message.value(f"far {self.sent}")))
            self.unsettled.add(delivery_id)
            self.sent += 1


def standing(h: MeshHarness, router_id: str, name: str, role: str, listener: Listener = CLIENTS) -> Standing:
    core = h.cores[router_id]
    router_side = new_engine(core.config, listener)
    core.accept(router_side, listener)
    engine = Connection(ConnectionConfig(container_id=name))
    client = Standing(name, engine, router_side)
    client.role = role
    client.unsettled = set()
    client.routed = []
    h.wires.append(Wire(engine, router_side, None, core, a_client=client, name=f"{name}@{router_id}"))
    engine.open()
    client.session = engine.begin_session()
    h.pump()
    return client


@dataclass
class FuzzedMesh:
    """The fuzzed router in a MeshHarness, with its standing clients."""

    h: MeshHarness
    core: RouterCore
    clients: list[Standing] = field(default_factory=list)


def fuzzed_mesh(edge: bool = False, **router: Any) -> FuzzedMesh:
    """The fuzzed router (interior, or with `edge` the edge router `FUZZED_EDGE`) and its
    standing clients, at time START."""
    h = MeshHarness(now=START, **router)
    if edge:
        core = h.router(FUZZED_EDGE, mode="edge", addresses=ADDRESSES)
        names = [FUZZED_EDGE]
    else:
        core = h.router(FUZZED, instance=1, listeners=(CLIENTS, INTER_ROUTER, EDGE, BROKER),
                        link_routes=LINK_ROUTES, addresses=ADDRESSES)  # fmt: skip
        names = [FUZZED]
    rid = names[0]
    sink = standing(h, rid, "sink", "consumer")
    for address in ("sink", "mc.x"):
        receiver = sink.receiver(address)
        receiver.flow(200)
    far = standing(h, rid, "far", "producer")
    far.producer = far.sender("far")
    clients = [sink, far]
    if not edge:
        container = standing(h, rid, "container", "container", BROKER)
        clients.append(container)
    h.pump()
    return FuzzedMesh(h, core, clients)


# --- recording --------------------------------------------------------------------------------


def _record(engine: Connection, h: MeshHarness) -> Reads:
    """What `engine` sends from now on, each chunk with its time since START (the harness's tap
    on the wire: a compiled engine's class cannot be swapped for a recording one)."""
    tape: Reads = []
    h.recorders[id(engine)] = lambda data: tape.append((h.now - START, data))
    return tape


def _stop_recording(engine: Connection, h: MeshHarness) -> None:
    h.recorders.pop(id(engine), None)


def _deliveries(h: MeshHarness, client: Client, address: str, count: int, **message: Any) -> None:
    link = client.sender(address)
    h.pump()
    for i in range(count):
        client.send(link, Message.value(f"{address} {i}", **message))
    h.pump()


def _capture(h: MeshHarness, recorded: Connection, wire: Wire, scene: Any) -> Reads:
    tape = _record(recorded, h)
    h.wires.append(wire)
    try:
        scene()
    finally:
        _stop_recording(recorded, h)
    return tape


def _traffic(h: MeshHarness, on: str, routed: bool) -> None:
    """Clients of router `on` (the recorded one): deliveries to `sink` (every band, one that
    streams, one multicast), and with `routed` a link-routed sender to `lr.q` with a transfer."""
    producer = h.client(on, "producer")
    _deliveries(h, producer, "sink", 1)
    for priority in (0, 9):
        link = producer.sender("sink")
        h.pump()
        producer.send(link, Message.value(f"priority {priority}", header=Header(priority=priority)))
    big = producer.sender("sink")
    h.pump()
    producer.send(big, Message.value("x" * 70_000))
    _deliveries(h, producer, "mc.x", 1)
    h.advance(0.2)
    if routed:
        client = h.client(on, "routed")
        sender = client.sender("lr.q")
        h.pump()
        client.send(sender, Message.value("routed"))
        h.advance(0.2)
        sender.detach()
        h.advance(0.2)


def interior_session() -> Reads:
    """What interior router PEER sends on its connection to FUZZED's inter-router listener
    (see the module docstring)."""
    mesh = fuzzed_mesh()
    h = mesh.h
    peer = h.router(PEER, instance=2, addresses=ADDRESSES)
    connector = Connector(name="to-fuzzed", host="127.0.0.1", port=5673, cost=1)
    engine = new_outgoing_engine(peer.config, connector)
    accepted = new_engine(mesh.core.config, INTER_ROUTER)
    mesh.core.accept(accepted, INTER_ROUTER)
    peer.connect(engine, connector, h.now)

    def scene() -> None:
        consumer = h.client(PEER, "far-consumer")
        rx = consumer.receiver("far")
        h.converge()
        rx.flow(10)
        h.advance(0.5)
        _traffic(h, PEER, routed=True)
        peer.shutdown(h.now)
        h.pump()

    return _capture(h, engine, Wire(engine, accepted, peer, mesh.core, name="peer->fuzzed"), scene)


def edge_session() -> Reads:
    """What edge router EDGE_ROUTER sends on its uplink to FUZZED's edge listener."""
    mesh = fuzzed_mesh()
    h = mesh.h
    edge = h.router(EDGE_ROUTER, mode="edge", addresses=ADDRESSES)
    connector = Connector(name="up-fuzzed", host="127.0.0.1", port=5674, role="edge")
    engine = new_outgoing_engine(edge.config, connector)
    accepted = new_engine(mesh.core.config, EDGE)
    mesh.core.accept(accepted, EDGE)
    edge.connect(engine, connector, h.now)

    def scene() -> None:
        h.advance(0.5)
        consumer = h.client(EDGE_ROUTER, "far-consumer")
        rx = consumer.receiver("far")
        h.advance(0.5)
        rx.flow(10)
        h.advance(0.5)
        _traffic(h, EDGE_ROUTER, routed=True)
        edge.shutdown(h.now)
        h.pump()

    return _capture(h, engine, Wire(engine, accepted, edge, mesh.core, name="edge=>fuzzed"), scene)


def fuzzed_edge() -> FuzzedMesh:
    """The fuzzed router as edge router FUZZED_EDGE (for uplink_session's inputs)."""
    return fuzzed_mesh(edge=True)


UPLINK = Connector(name="up-peer", host="127.0.0.1", port=5674, role="edge")


def uplink_session() -> Reads:
    """What interior router PEER sends on the uplink edge router FUZZED_EDGE opened to it."""
    mesh = fuzzed_edge()
    h = mesh.h
    peer = h.router(PEER, instance=2, listeners=(CLIENTS, INTER_ROUTER, EDGE, BROKER), link_routes=LINK_ROUTES,
                    addresses=ADDRESSES)  # fmt: skip
    container = standing(h, PEER, "container", "container", BROKER)
    assert container.role == "container"
    engine = new_outgoing_engine(mesh.core.config, UPLINK)
    accepted = new_engine(peer.config, EDGE)
    peer.accept(accepted, EDGE)
    mesh.core.connect(engine, UPLINK, h.now)

    def scene() -> None:
        h.advance(0.5)
        consumer = h.client(PEER, "far-consumer")
        rx = consumer.receiver("far")
        h.advance(0.5)
        rx.flow(10)
        h.advance(0.5)
        _traffic(h, PEER, routed=False)
        peer.shutdown(h.now)
        h.pump()

    return _capture(h, accepted, Wire(engine, accepted, mesh.core, peer, name="fuzzed-edge=>peer"), scene)


def describe(reads: Reads) -> str:
    """The frames of `reads`, one line each (to look at a seed)."""
    from router.amqp.decode import decode_at
    from router.testing.wire import split_stream

    lines = []
    for at, data in reads:
        for piece in split_stream(data):
            if piece[:4] == b"AMQP":
                lines.append(f"{at:8.3f} header {piece!r}")
                continue
            try:
                performative, _ = decode_at(piece, piece[4] * 4, len(piece)) if len(piece) > 8 else (None, 0)
            except Exception as exc:  # noqa: BLE001
                performative = exc
            text = repr(performative)
            lines.append(f"{at:8.3f} ch{int.from_bytes(piece[6:8], 'big')} {len(piece):6} {text[:150]}")
    return "\n".join(lines)
