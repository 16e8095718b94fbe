"""The routing core's side of the mesh: drives the topology engine (topology.TopologyNode) and
applies what it computes to the address table.

Owns: the node of an interior router (created at the first call that brings the time, its instance = that time in
milliseconds unless given), the peers (one active inter-router connection per neighbour router:
a second connection claiming a live router's id is refused, a deterministic choice when two
come up at once; a neighbour silent for its dead interval, sending nothing at all, has its
connection closed), control messages in and out (an amqp-value map body
from topology.messages plus the application property `opcode`, sent presettled on the control
links, queued while a link has no credit), when to tick the node, and applying its events:
RoutesChanged -> the routes forwarding reads and the destinations of `_topo` addresses;
AddressesChanged -> the remote routers of mobile addresses. Producers gain or lose credit when
an address gains its first or loses its last destination anywhere; deliveries waiting for a
path are routed again when routes change.
Must not touch: the protocol's rules (topology/), message bytes of routed deliveries, choosing
destinations (sending.py, multicast.py, remote.py), edge connections (edge.py: an edge router has no
node; the Mesh hands its connections and control messages to Edges).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from topology.config import TopologyConfig
from topology.events import AddressesChanged, NeighbourSilent, RoutesChanged, TopologyEvent
from topology.messages import ControlMessage, MalformedMessage, Unsupported, from_map, to_map
from topology.node import TopologyNode
from topology.routes import Routes, compute_routes

from ..amqp import errors as E
from ..amqp.errors import DecodeError
from ..amqp.events import FlowReceived, TransferReceived
from ..amqp.link import Link
from ..amqp.message import Message, decode_message, encode_message
from ..amqp.messaging import ACCEPTED
from ..amqp.performatives import Error
from ..config.models import RouterConfig
from .connections import ConnState
from .edge import Edges
from .interrouter import ControlIn, ControlOut, Peer, answer_attach, attach_links, top_up_control
from .links import OutLink, alive
from .liveness import Liveness
from .meshread import MeshReadApi
from .paths import Paths
from .table import AddressEntry, AddressTable

if TYPE_CHECKING:
    from .ports import ConnectionCloser, LinkRouteAdverts, Routing
    from .touched import Touched

LINK_ROUTE_MARK = "\x00lr/"  # the advertised addresses of link routes (router.core.linkroute.MARK)
CONTROL_QUEUE_MAX = 4096  # control messages waiting for credit per peer (oldest dropped first)
CONTROL_MESSAGE_MAX = 16 << 20  # a longer control message closes the connection


def encode_control(message: ControlMessage) -> bytes:
    return encode_message(Message.value(to_map(message), application_properties={"opcode": message.OPCODE}))


def decode_control(payload: bytes) -> ControlMessage | Unsupported:
    try:
        body = decode_message(payload).body_value
    except TypeError as exc:
        raise MalformedMessage("a control message body is one amqp-value section") from exc
    return from_map(body)


class Mesh(MeshReadApi):
    """See the module docstring. `enabled` on interior and edge routers; `edge` on an edge."""

    # The forwarder (router.core.forwarding), set by RouterCore once built: it is built with
    # this mesh, and the mesh reroutes through it when destinations change.
    routing: Routing
    # The link routes (router.core.linkroute), set by RouterCore: they learn which routers
    # advertise a route container.
    link_routes: LinkRouteAdverts

    def __init__(self, config: RouterConfig, table: AddressTable, touched: Touched, closer: ConnectionCloser, *,
                 wall_offset: float = 0.0, instance: int | None = None) -> None:  # fmt: skip
        """`closer`: the core, which closes connections; `wall_offset`: wall-clock seconds minus
        `now` (RouterCore's)."""
        self.table = table
        self.touched = touched
        self.closer = closer
        self.wall_offset = wall_offset
        self.max_message_size = config.limits.max_message_size
        self.me = config.router.id
        self.enabled = config.router.mode in ("interior", "edge")
        self.edge = config.router.mode == "edge"
        self.topology_config = TopologyConfig(hello_interval_s=config.router.hello_interval_s,
                                              dead_interval_s=config.router.dead_interval_s)  # fmt: skip
        self._instance = instance
        self.node: TopologyNode | None = None
        self.routes: Routes = compute_routes({}, self.me)
        self.peers: dict[str, Peer] = {}  # neighbour id -> its active connection
        self.links: dict[str, OutLink] = {}  # neighbour id -> our data link to it (default priority)
        # (our data links to a neighbour by priority band: paths.bands, read by remote.on_band)
        self.priority_bands = config.router.priority_bands
        # Path choices under these routes and links (remote.py): cleared when links change.
        self.paths = Paths(table)
        self.dirty = False  # an input since the last service(): tick the node at once
        self.deadline = math.inf
        # Counters (management, tests).
        self.dropped_loop = 0  # deliveries whose trace shows a loop or is longer than radius + 1
        self.dropped_invalid_origin = 0  # multicast copies not delivered here (duplicate path)
        self.malformed_control = 0
        self.replaced_connections = 0
        self.refused_duplicates = 0  # connections claiming the id of a connected, live router
        self.events: list[TopologyEvent] = []  # the node's events, newest last (bounded)
        self.last_change: float | None = None  # when routes last changed (monotonic `now`)
        self.edges = Edges(self, table, closer)
        self.liveness = Liveness(self, closer)  # closing the connections of silent neighbours
        table.remote_for = self.remote_for
        table.keep_advertised = not self.edge

    # --- the node ---------------------------------------------------------------------------------

    def start(self, now: float) -> None:
        if self.node is None and not self.edge:
            # Wall time: the instance must grow across restarts, which a monotonic `now` does not.
            instance = self._instance if self._instance is not None else int((now + self.wall_offset) * 1000)
            self.node = TopologyNode(self.me, instance, self.topology_config)
            self.dirty = True

    def service(self, now: float) -> None:
        """Run the node's due timers, send its messages, apply its events."""
        node = self.node
        if node is None:
            self.dirty = False
            self.edges.service(now)
            self.deadline = self.edges.deadline
            return
        self.dirty = False
        liveness = self.liveness
        liveness.serviced(now)
        node.tick(now)
        outgoing = node.take_outgoing()
        if outgoing:
            encoded: dict[int, bytes] = {}
            for to, message in outgoing:
                payload = encoded.get(id(message))
                if payload is None:
                    payload = encoded[id(message)] = encode_control(message)
                if to is None:
                    for peer in self.peers.values():
                        self.send_control(peer, payload)
                else:
                    target = self.peers.get(to)
                    if target is not None:
                        self.send_control(target, payload)
        for event in node.take_events():
            self.events.append(event)
            if isinstance(event, RoutesChanged):
                self.last_change = now
                self._routes_changed(event.routes)
            elif isinstance(event, NeighbourSilent):
                liveness.reported(event.router_id, event.silent_s, now)
            elif isinstance(event, AddressesChanged):
                table = self.table
                for address, routers in event.changes.items():
                    if address.startswith(LINK_ROUTE_MARK):  # a link route's container (linkroute.py)
                        self.link_routes.remote_changed(address, routers)
                        continue
                    self.edges.address_changed(address)
                    entry = table.entries.get("M" + address)
                    if entry is not None:
                        self.set_remote(entry, routers)
                    elif routers:
                        table.get_or_create(address)  # remote destinations from remote_for
        del self.events[:-256]
        self.edges.service(now)  # edges learn what changed in the addresses with destinations
        if liveness.silent and now >= liveness.deadline:
            liveness.check(now)
        self.deadline = min(node.next_deadline(), liveness.deadline)

    def next_deadline(self) -> float | None:
        if self.node is None:  # an edge router: it may be waiting for an uplink's address set
            return self.edges.deadline if self.edges.deadline < math.inf else None
        return min(self.node.next_deadline(), self.liveness.deadline)

    # --- peers ------------------------------------------------------------------------------------

    def peer_opened(self, state: ConnState, cost: int, now: float) -> None:
        """Both opens of an inter-router connection are exchanged and checked."""
        remote = state.engine.remote_open
        assert remote is not None
        if state.role == "edge":
            self.edges.opened(state, cost, now)
            return
        peer_id = remote.container_id
        self.start(now)
        node = self.node
        assert node is not None
        existing = self.peers.get(peer_id)
        if existing is not None and existing.conn is not state and node.neighbour_heard(peer_id):
            # The router is connected and alive (its HELLOs arrive): a second connection
            # claiming its id is refused, whichever side opened it, and the first is untouched
            # (otherwise anyone reaching an inter-router listener could knock it out). A real
            # reconnect gets in once the old connection is seen to fail: at once when it drops,
            # after the dead interval when it goes silent (liveness.py).
            self.refused_duplicates += 1
            self.closer.close_connection(state, Error(condition=E.INVALID_FIELD, description=(
                f"router {peer_id} is already connected (connection #{existing.conn.id}) and alive: "
                "a second connection claiming its id is refused")), now)  # fmt: skip
            return
        if existing is not None and existing.conn is not state:
            # Two connections to one router before either is established (both routers connect
            # to each other at once, or a reconnect while the old connection is not heard).
            # Same direction: the newer wins; otherwise both routers keep the one the smaller
            # router id opened.
            keep_new = existing.conn.outgoing == state.outgoing or state.outgoing == (self.me < peer_id)
            error = Error(condition=E.CONNECTION_FORCED,
                          description=f"another connection to router {peer_id} is in use")  # fmt: skip
            self.replaced_connections += 1
            if not keep_new:
                self.closer.close_connection(state, error, now)
                return
            del self.peers[peer_id]
            self._forget_links(existing)
            self.paths.clear()
            self.closer.close_connection(existing.conn, error, now)
        peer = Peer(peer_id, state, cost)
        state.peer = peer
        self.peers[peer_id] = peer
        attach_links(self.me, peer, now, self.priority_bands)
        assert peer.data_out is not None
        self.links[peer_id] = peer.data_out
        if peer.bands is not None:
            self.paths.bands[peer.data_out] = peer.data_out.bands = peer.bands
        self.paths.clear()
        node.neighbour_up(peer_id, cost, now=now)
        self.dirty = True

    def peer_gone(self, state: ConnState, now: float) -> None:
        """An inter-router connection closed or failed: the neighbour is lost at once."""
        peer = state.peer
        if not isinstance(peer, Peer):
            return
        state.peer = None
        if peer.edge:
            self.edges.gone(peer, now)
        elif self.peers.get(peer.id) is peer:
            del self.peers[peer.id]
            self._forget_links(peer)
            self.paths.clear()
            if self.node is not None:
                self.node.neighbour_down(peer.id, now=now)
                self.dirty = True

    def _forget_links(self, peer: Peer) -> None:
        self.links.pop(peer.id, None)
        if peer.data_out is not None:
            self.paths.bands.pop(peer.data_out, None)
            peer.data_out.bands = None

    def peer_attach(self, state: ConnState, link: Link, now: float) -> None:
        peer = state.peer if isinstance(state.peer, Peer) else None
        answer_attach(peer, state, link, now, credit=self.routing, max_message_size=self.max_message_size,
                      edge_router=self.edge)  # fmt: skip

    # --- control messages -------------------------------------------------------------------------

    def send_control(self, peer: Peer, payload: bytes) -> None:
        if len(peer.queue) >= CONTROL_QUEUE_MAX:
            peer.queue.popleft()  # the protocol recovers (periodic RA, retried requests)
            peer.dropped += 1
        peer.queue.append(payload)
        self._flush_control(peer)

    def _flush_control(self, peer: Peer) -> None:
        link = peer.control_out
        if link is None or not peer.queue or not alive(link):
            return
        while peer.queue and link.credit > 0:
            link.send_transfer(b"c", peer.queue.popleft(), settled=True)
        self.touched.touch(peer.conn.engine)

    def on_flow(self, event: FlowReceived) -> None:
        ctx = event.link.context
        if type(ctx) is ControlOut:
            self._flush_control(ctx.peer)

    def on_transfer(self, event: TransferReceived, now: float) -> None:
        ctx = event.link.context
        if type(ctx) is not ControlIn:
            return
        peer, link = ctx.peer, event.link
        if event.aborted:
            peer.partial.clear()
            return
        peer.partial.append(bytes(event.payload))
        if not event.settled and not event.more:
            link.dispose(event.delivery_id, state=ACCEPTED, settled=True)
        if alive(link):
            top_up_control(link)
        if event.more:
            if sum(map(len, peer.partial)) > CONTROL_MESSAGE_MAX:
                self.closer.close_connection(peer.conn, Error(condition=E.RESOURCE_LIMIT_EXCEEDED,
                                           description="control message too large"), now)  # fmt: skip
            return
        payload = b"".join(peer.partial)
        peer.partial.clear()
        if peer.edge:
            self.edges.on_control(peer, payload, now)
            return
        try:
            message = decode_control(payload)
        except DecodeError:
            self.malformed_control += 1
            return
        if self.node is not None and self.peers.get(peer.id) is peer:
            self.node.receive(peer.id, message, now)
            self.dirty = True

    # --- what the node computed -------------------------------------------------------------------

    def remote_for(self, key: str) -> frozenset[str]:
        """The routers that are destinations of table key `key` now."""
        kind, name = key[0], key[1:]
        if self.edge:  # everything not local goes to the uplink in use
            active = self.edges.active
            if active is None or kind == "L":
                return frozenset()
            if kind == "M" and name not in self.edges.mesh_addresses.get(active, ()):
                return frozenset()  # no destination in the mesh (the uplink says)
            return frozenset((active,))
        if kind == "M":
            return self.node.routers_for(name) if self.node is not None else frozenset()
        if kind == "R":
            return frozenset((name,)) if name in self.routes.next_hops else frozenset()
        if kind == "T":  # every router, this one included (its consumers of _local/x)
            return self.routes.reachable | {self.me}
        return frozenset()

    def _routes_changed(self, routes: Routes) -> None:
        self.routes = routes
        # The choices made under the old routes go now: what remote.py remembers outside the
        # Paths' maps is checked against their clears, not against the routes.
        self.paths.clear()
        self.paths.routes = routes
        table = self.table
        for entry in list(table.entries.values()):
            kind = entry.key[0]
            if kind in "RT":
                self.set_remote(entry, self.remote_for(entry.key))
            elif entry.pending and not entry.consumers:
                self.routing.reroute(entry)
            table.discard_if_unused(entry)  # e.g. entries a delivery to another router needed once

    def set_remote(self, entry: AddressEntry, routers: frozenset[str]) -> None:
        forwarder = self.routing
        had = entry.has_destination
        entry.remote = routers
        if had != entry.has_destination:
            for producer in entry.producers:
                forwarder.credit_dirty(producer)  # credit now, or drained
        if entry.pending and not entry.consumers:
            forwarder.reroute(entry)  # a new path, or none (released)
        self.table.discard_if_unused(entry)

    def consumers_changed(self, entry: AddressEntry) -> None:
        """A consumer of `entry` came or went (any, not only the first or last): edges connected
        here are told whether it has a destination besides each of them (edge.py)."""
        if entry.key[0] == "M" and self.edges.edges:
            self.edges.address_changed(entry.key[1:])

    def local_consumers(self, entry: AddressEntry, present: bool) -> None:
        """Mobile address `entry` gained its first or lost its last local consumer."""
        if self.edge:
            self.edges.local_changed()
            return
        if self.node is None:
            return
        address = entry.key[1:]
        self.edges.address_changed(address)
        if present:
            self.node.set_local_addresses(added=(address,))
        else:
            self.node.set_local_addresses(removed=(address,))
        self.dirty = True
