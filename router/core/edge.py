"""Edge routers: both sides of an edge connection (docs/mesh.md, "Edge routers").

Owns, on an edge router (mode edge): its uplinks (connections of connectors with role edge),
the one in use (the oldest that is up; the next takes over when it drops), routing everything
that has no local consumer to it, and telling it which mobile addresses have consumers here
(an EDGE-ADDRESSES control message with the whole set, sent when the set changes and when an
uplink becomes the active one).
On an interior router (an edge listener): the edges connected to it and the addresses each has
consumers for. An edge's data link is then a consumer of each such address, like a client's
link: the interior advertises the address as its own and delivers to the edge over it.
Must not touch: the inter-router protocol (edges take no part in it: no HELLO, no routes of
their own), choosing among destinations (forwarding.py, remote.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topology.routes import LinkState, compute_routes

from ..amqp import errors as E
from ..amqp.errors import DecodeError
from ..amqp.message import Message, decode_message, encode_message
from ..amqp.performatives import Error
from .connections import ConnState
from .interrouter import Peer, attach_links
from .links import OutLink
from .table import AddressEntry

if TYPE_CHECKING:
    from .mesh import Mesh

OPCODE = "EDGE-ADDRESSES"
VERSION = 1
MAX_ADDRESSES = 1_000_000


def encode_addresses(edge_id: str, seq: int, addresses: list[str]) -> bytes:
    body = {"op": OPCODE, "pv": VERSION, "id": edge_id, "seq": seq, "addresses": addresses}
    return encode_message(Message.value(body, application_properties={"opcode": OPCODE}))


def decode_addresses(payload: bytes) -> list[str] | None:
    """The address set of an EDGE-ADDRESSES message; None for another (or newer) message."""
    try:
        body = decode_message(payload).body_value
    except (DecodeError, TypeError):
        return None
    if not isinstance(body, dict) or body.get("op") != OPCODE:
        return None
    version = body.get("pv")
    if not isinstance(version, int) or version > VERSION:
        return None  # a newer version: ignored, as the topology messages are
    addresses = body.get("addresses")
    if not isinstance(addresses, list) or len(addresses) > MAX_ADDRESSES:
        return None
    if not all(isinstance(a, str) and a for a in addresses):
        return None
    return [str(a) for a in addresses]


class Edges:
    """Edge connections of one router (see the module docstring)."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.edges: dict[str, Peer] = {}  # interior: edge id -> its connection
        self.addresses: dict[str, set[str]] = {}  # interior: edge id -> its consumers' addresses
        self.uplinks: dict[str, Peer] = {}  # edge: interior id -> connection, oldest first
        self.active: str | None = None  # edge: the uplink in use
        self.seq = 0  # edge: EDGE-ADDRESSES sent
        self.dirty = False  # edge: the address set must be sent
        self.failovers = 0

    # --- both sides -------------------------------------------------------------------------------

    def opened(self, state: ConnState, cost: int, now: float) -> None:
        remote = state.engine.remote_open
        assert remote is not None
        peer_id = remote.container_id
        table = self.uplinks if self.mesh.edge else self.edges
        existing = table.pop(peer_id, None)
        if existing is not None and existing.conn is not state:  # a reconnect: the newer wins
            self.mesh.replaced_connections += 1
            if not self.mesh.edge:
                self._set_addresses(existing, set())  # its link consumes nothing any more
            error = Error(condition=E.CONNECTION_FORCED, description=f"a newer connection with {peer_id} replaced it")
            self.mesh.core.close_connection(existing.conn, error, now)
        peer = Peer(peer_id, state, cost)
        peer.edge = True
        state.peer = peer
        table[peer_id] = peer
        attach_links(self.mesh.core, peer)
        if self.mesh.edge:
            self._choose(now)

    def gone(self, peer: Peer, now: float) -> None:
        if self.mesh.edge:
            if self.uplinks.get(peer.id) is peer:
                del self.uplinks[peer.id]
                self._choose(now)
        elif self.edges.get(peer.id) is peer:
            del self.edges[peer.id]
            self._set_addresses(peer, set())

    # --- edge router ------------------------------------------------------------------------------

    def _choose(self, now: float) -> None:
        """Use the oldest uplink that is up; on a change every address is routed anew."""
        mesh, core = self.mesh, self.mesh.core
        active = next(iter(self.uplinks), None)
        if active == self.active:
            return
        if self.active is not None and active is not None:
            self.failovers += 1
        self.active = active
        me = mesh.me
        if active is None:
            mesh.routes, mesh.links = compute_routes({}, me), {}
            core.table.fallback = None
        else:
            out = self.uplinks[active].data_out
            assert out is not None
            states = {me: LinkState(seq=1, peers={active: 1}), active: LinkState(seq=1, peers={me: 1})}
            mesh.routes, mesh.links = compute_routes(states, me), {active: out}
            fallback = AddressEntry("U", f"<uplink {active}>", "closest")
            fallback.remote = frozenset((active,))
            core.table.fallback = fallback
            self.dirty = mesh.dirty = True  # tell the new uplink our addresses
        mesh.last_change = now
        mesh.paths.clear()  # new routes and links
        for entry in list(core.table.entries.values()):
            if entry.key[0] != "L":
                mesh.set_remote(entry, mesh.remote_for(entry.key))

    def local_changed(self) -> None:
        self.dirty = self.mesh.dirty = True

    def service(self) -> None:
        """Send the address set to the active uplink if it changed."""
        if not self.dirty or self.active is None:
            return
        self.dirty = False
        entries = self.mesh.core.table.entries.values()
        addresses = sorted(e.key[1:] for e in entries if e.key[0] == "M" and e.consumers)
        self.seq += 1
        self.mesh.send_control(self.uplinks[self.active], encode_addresses(self.mesh.me, self.seq, addresses))

    # --- interior router --------------------------------------------------------------------------

    def on_control(self, peer: Peer, payload: bytes) -> None:
        addresses = decode_addresses(payload)
        if addresses is None:
            self.mesh.malformed_control += 1
        elif not self.mesh.edge and self.edges.get(peer.id) is peer:
            self._set_addresses(peer, set(addresses))

    def _set_addresses(self, peer: Peer, new: set[str]) -> None:
        """The edge's data link consumes exactly `new` (mobile addresses) from now on."""
        mesh, core = self.mesh, self.mesh.core
        forwarder, table = core.forwarder, core.table
        out = peer.data_out
        old = self.addresses.pop(peer.id, set())
        if new:
            self.addresses[peer.id] = new
        if out is None:
            return
        for address in sorted(new - old):
            entry = table.get_or_create(address, consumer=True)
            if entry is None or entry.key[0] != "M":
                continue  # an edge reports mobile addresses only
            first = not entry.consumers
            entry.consumers.append(out)
            if first:
                for producer in entry.producers:
                    forwarder.credit_dirty(producer)
                mesh.local_consumers(entry, True)
            forwarder.reroute(entry)
        for address in sorted(old - new):
            entry = table.entries.get("M" + address)
            if entry is None or out not in entry.consumers:
                continue
            entry.consumers.remove(out)
            if not entry.consumers:
                mesh.local_consumers(entry, False)
                forwarder.reroute(entry)  # to other routers, or released
                for producer in entry.producers:
                    forwarder.credit_dirty(producer)
            table.discard_if_unused(entry)

    def ready(self, out: OutLink) -> None:
        """An edge's data link got credit: deliveries waiting at its addresses may go."""
        table = self.mesh.core.table
        for address in sorted(self.addresses.get(out.neighbour or "", ())):
            entry = table.entries.get("M" + address)
            if entry is not None and entry.pending:
                self.mesh.core.forwarder.reroute(entry)

    def read(self) -> dict[str, Any]:
        """For the read API: edges here (interior) or uplinks (edge)."""
        if self.mesh.edge:
            return {"uplinks": list(self.uplinks), "active": self.active, "failovers": self.failovers}
        return {"edges": {e: sorted(self.addresses.get(e, ())) for e in sorted(self.edges)}}
