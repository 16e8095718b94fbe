"""The routing core's side of the mesh: drives the topology engine (topology.TopologyNode) and
applies what it computes to the address table.

Owns: the node of an interior router (created at the first call that brings the time, its instance = that time in
milliseconds unless given), when to tick the node, handing it the neighbours that come and go
(which connection is a neighbour's: peering.py; a neighbour silent for its dead interval,
sending nothing at all, has its connection closed: liveness.py) and the control messages that
arrive (on the wire: meshcontrol.py), sending its messages, and applying its events:
RoutesChanged -> the routes forwarding reads and the destinations of `_topo` addresses;
AddressesChanged -> the remote routers of mobile addresses. Producers gain or lose credit when
an address gains its first or loses its last destination anywhere (or fallback destination:
the forwarder hears of those, router.core.fallback); deliveries waiting for a path are routed
again when routes change.
Must not touch: the protocol's rules (topology/), message bytes of routed deliveries, choosing
destinations (sending.py, multicast.py, remote.py), edge connections (edge.py: an edge router has no
node; the Mesh hands its connections and control messages to Edges).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from topology.config import TopologyConfig
from topology.events import AddressesChanged, NeighbourSilent, RoutesChanged, TopologyEvent
from topology.node import TopologyNode
from topology.routes import Routes, compute_routes

from ..amqp.errors import DecodeError
from ..amqp.events import FlowReceived, TransferReceived
from ..amqp.link import Link
from ..config.models import RouterConfig
from .addressentry import AddressEntry
from .connections import ConnState
from .edge import Edges
from .interrouter import ControlIn, Peer, answer_attach
from .links import OutLink
from .liveness import Liveness
from .meshcontrol import ControlChannel, decode_control, encode_control
from .meshread import MeshReadApi
from .paths import Paths
from .peering import Peering
from .table import FALLBACK, AddressTable

if TYPE_CHECKING:
    from .ports import ConnectionCloser, LinkRouteAdverts, Routing
    from .touched import Touched

LINK_ROUTE_MARK = "\x00lr/"  # the advertised addresses of link routes (router.core.linkroute.MARK)


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
        # Path choices under these routes and links (remote.py): cleared when links change.
        self.paths = Paths(table)
        self.peering = Peering(self.me, self.paths, closer)
        self.peers: dict[str, Peer] = self.peering.peers  # neighbour id -> its active connection
        # Our data link to each neighbour (default priority; by band: paths.bands, read by
        # remote.on_band). An edge router's Edges replace it with their active uplink's.
        self.links: dict[str, OutLink] = self.peering.links
        self.priority_bands = config.router.priority_bands
        self.streaming_links = config.router.streaming_links
        self.control = ControlChannel(touched, closer)
        self.dirty = False  # an input since the last service(): tick the node at once
        self.deadline = math.inf
        # Counters (management, tests); the peers' are peering's and edges'.
        self.dropped_loop = 0  # deliveries whose trace shows a loop or is longer than radius + 1
        self.dropped_invalid_origin = 0  # multicast copies not delivered here (duplicate path)
        self.malformed_control = 0
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
        for peer in self.peers.values():
            # Not read now (it holds too much for a consumer that is slow: bounds.read_paused):
            # its HELLOs wait unread, which must not take it out of the routes (liveness.py
            # already keeps its connection open).
            if self.closer.read_paused(peer.conn.engine):
                node.hold_neighbour(peer.id, now)
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
                    if address.startswith(FALLBACK):  # (router.core.fallback)
                        self.routing.fallback_changed("M" + address)
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
        assert state.engine.remote_open is not None
        if state.role == "edge":
            self.edges.opened(state, cost, now)
            return
        self.start(now)
        node = self.node
        assert node is not None
        peer = self.peering.opened(state, cost, node, self.priority_bands, now, self.streaming_links)
        if peer is not None:
            node.neighbour_up(peer.id, cost, now=now)
            self.dirty = True

    def peer_gone(self, state: ConnState, now: float) -> None:
        """An inter-router connection closed or failed: the neighbour is lost at once."""
        peer = state.peer
        if not isinstance(peer, Peer):
            return
        state.peer = None
        if peer.edge:
            self.edges.gone(peer, now)
        elif self.peering.gone(peer) and self.node is not None:
            self.node.neighbour_down(peer.id, now=now)
            self.dirty = True

    def neighbour(self, router_id: str) -> Peer | None:
        """The connection to neighbour `router_id`: an inter-router peer, or on an edge router
        its uplink (the next hop of every route there)."""
        peer = self.peers.get(router_id)
        if peer is None and self.edge:
            peer = self.edges.uplinks.get(router_id)
        return peer

    def peer_attach(self, state: ConnState, link: Link, now: float) -> None:
        peer = state.peer if isinstance(state.peer, Peer) else None
        answer_attach(peer, state, link, now, credit=self.routing, max_message_size=self.max_message_size,
                      edge_router=self.edge)  # fmt: skip

    # --- control messages -------------------------------------------------------------------------

    def send_control(self, peer: Peer, payload: bytes) -> None:
        self.control.send(peer, payload)

    def on_flow(self, event: FlowReceived) -> None:
        self.control.on_flow(event)

    def on_transfer(self, event: TransferReceived, now: float) -> None:
        ctx = event.link.context
        if type(ctx) is not ControlIn:
            return
        peer = ctx.peer
        payload = self.control.receive(peer, event, now)
        if payload is None:
            return
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
        self._forget_choices()
        table = self.table
        for entry in list(table.entries.values()):
            kind = entry.key[0]
            if kind in "RT":
                self.set_remote(entry, self.remote_for(entry.key))
            elif entry.pending and (not entry.consumers or entry.limited):
                # (with limited consumers, some may wait for a path because they fit none of
                # them: router.core.sizelimits)
                self.routing.reroute(entry)
            table.discard_if_unused(entry)  # e.g. entries a delivery to another router needed once

    def _forget_choices(self) -> None:
        """The choices remembered on address entries and on the annotation records of the links
        from neighbours: stale after a clear (remade on the next delivery), they would keep the
        data links they name, and a lost neighbour's whole connection with them, until then."""
        for entry in self.table.entries.values():
            entry.remembered = None
        for peer in self.peers.values():
            for inl in peer.conn.in_links:
                seen = inl.seen
                if seen is not None:
                    for record in seen.records.values():
                        record.remembered = None

    def set_remote(self, entry: AddressEntry, routers: frozenset[str]) -> None:
        forwarder = self.routing
        had = entry.has_destination
        entry.remote = routers
        if had != entry.has_destination:
            for producer in entry.producers:
                forwarder.credit_dirty(producer)  # credit now, or drained
        if entry.pending and (not entry.consumers or entry.limited):
            # A new path, or none (released; or rejected, when too large for every consumer
            # here: router.core.sizelimits).
            forwarder.reroute(entry)
        self.table.discard_if_unused(entry)

    def consumers_changed(self, entry: AddressEntry) -> None:
        """A consumer of `entry` came or went (any, not only the first or last): edges connected
        here are told whether it has a destination besides each of them (edge.py)."""
        if entry.key[0] == "M" and self.edges.edges:
            self.edges.address_changed(entry.key[1:])

    def local_consumers(self, entry: AddressEntry, present: bool) -> None:
        """Mobile address `entry` gained its first or lost its last local consumer."""
        if entry.key.startswith(FALLBACK, 1):  # fallback destinations (router.core.fallback)
            self.routing.fallback_changed(entry.key)
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
