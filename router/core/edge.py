"""Edge routers: both sides of an edge connection (docs/mesh.md, "Edge routers").

    edges = Edges(mesh, table, closer)      # built by the mesh, on interior and edge routers
    edges.opened(state, cost, now) / edges.gone(peer, now)
    edges.on_control(peer, payload, now)    # a control message on an edge connection

Owns: the edge connections of one router: on an edge router (mode edge) its uplinks (connections
of connectors with role edge), on an interior router (an edge listener) the edges connected to
it; a reconnect from the same router replacing the older connection (counted in `replaced`),
the links attached on a new one, the control messages arriving on them decoded (a malformed one
counted in the mesh's `malformed_control`) and handed to the side this router is on, and what the
read API shows. What each side does: uplinks.py (an edge router: the uplink in use, our
addresses told to it, what it says has destinations in the mesh), edgehost.py (an interior: the
addresses its edges consume, which addresses have destinations besides each edge); the messages
themselves are edgemsg.py's.
Must not touch: the inter-router protocol (edges take no part in it: no HELLO, no routes of
their own), choosing among destinations (sending.py, multicast.py, remote.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..amqp import errors as E
from ..amqp.performatives import Error
from .connections import ConnState
from .edgehost import EdgeHost
from .edgemsg import MESH_ADDRESSES, decode
from .interrouter import Peer, attach_links
from .links import OutLink
from .table import AddressTable
from .uplinks import Uplinks

if TYPE_CHECKING:
    from .ports import ConnectionCloser, EdgeMesh


class Edges:
    """Edge connections of one router (see the module docstring)."""

    def __init__(self, mesh: EdgeMesh, table: AddressTable, closer: ConnectionCloser) -> None:
        """`mesh`: the mesh that owns these edges (its routes, control messages, and the
        forwarder as `mesh.routing`); `closer`: the core, which closes connections."""
        self.mesh = mesh
        self.closer = closer
        self.edges: dict[str, Peer] = {}  # interior: edge id -> its connection
        self.uplinks: dict[str, Peer] = {}  # edge: interior id -> connection, oldest first
        self.replaced = 0  # connections closed for a newer one with the same router
        # An edge asks again this often for what it missed until it comes; an interior answers
        # at most twice as often.
        retry_s = mesh.topology_config.hello_interval_s
        self.as_edge = Uplinks(mesh, table, self.uplinks, retry_s)
        self.as_interior = EdgeHost(mesh, table, self.edges, retry_s)
        # Edge: what each uplink says has destinations in the mesh besides this edge (Uplinks'
        # map, which the mesh reads for each address it reports).
        self.mesh_addresses = self.as_edge.mesh_addresses

    @property
    def active(self) -> str | None:
        """Edge: the uplink in use."""
        return self.as_edge.active

    @property
    def deadline(self) -> float:
        """Edge: when to ask an uplink again for what it missed."""
        return self.as_edge.deadline

    def opened(self, state: ConnState, cost: int, now: float) -> None:
        remote = state.engine.remote_open
        assert remote is not None
        peer_id = remote.container_id
        table = self.uplinks if self.mesh.edge else self.edges
        existing = table.pop(peer_id, None)
        if existing is not None and existing.conn is not state:  # a reconnect: the newer wins
            self.replaced += 1
            if not self.mesh.edge:
                self.as_interior.set_addresses(existing, set())  # its link consumes nothing any more
            error = Error(condition=E.CONNECTION_FORCED, description=f"a newer connection with {peer_id} replaced it")
            self.closer.close_connection(existing.conn, error, now)
        peer = Peer(peer_id, state, cost)
        peer.edge = True
        state.peer = peer
        table[peer_id] = peer
        attach_links(self.mesh.me, peer, now, streams=self.mesh.streaming_links)
        if self.mesh.edge:
            self.as_edge.changed(peer_id, now)
        else:
            self.as_interior.opened(peer_id)

    def gone(self, peer: Peer, now: float) -> None:
        if self.mesh.edge:
            if self.uplinks.get(peer.id) is peer:
                del self.uplinks[peer.id]
                self.as_edge.changed(peer.id, now)
        elif self.edges.get(peer.id) is peer:
            del self.edges[peer.id]
            self.as_interior.gone(peer)

    def on_control(self, peer: Peer, payload: bytes, now: float) -> None:
        decoded = decode(payload)
        if decoded is None:
            self.mesh.malformed_control += 1
            return
        op, what = decoded
        if self.mesh.edge:
            if op == MESH_ADDRESSES and self.uplinks.get(peer.id) is peer:
                self.as_edge.on_mesh_addresses(peer, what, now)
        elif self.edges.get(peer.id) is peer:
            self.as_interior.on_control(peer, op, what, now)

    def service(self, now: float) -> None:
        """Edge: send the address set to the active uplink if it changed; ask again for an
        uplink's whole set of addresses with destinations if it has not come. Interior: tell
        each edge what changed in the addresses with destinations."""
        if self.mesh.edge:
            self.as_edge.service(now)
        else:
            self.as_interior.service(now)

    def local_changed(self) -> None:
        """Edge: an address gained its first or lost its last consumer here."""
        self.as_edge.local_changed()

    def address_changed(self, address: str) -> None:
        """Interior: mobile `address` may have gained or lost destinations (edges are told)."""
        self.as_interior.address_changed(address)

    def ready(self, out: OutLink) -> None:
        """Interior: an edge's data link got credit: deliveries waiting at its addresses may go."""
        self.as_interior.ready(out)

    def read(self) -> dict[str, Any]:
        """For the read API: edges here (interior) or uplinks (edge)."""
        return self.as_edge.read() if self.mesh.edge else self.as_interior.read()
