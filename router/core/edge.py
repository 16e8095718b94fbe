"""Edge routers: both sides of an edge connection (docs/mesh.md, "Edge routers").

Owns, on an edge router (mode edge): its uplinks (connections of connectors with role edge),
the one in use (the oldest that is up; the next takes over when it drops), routing everything
that has no local consumer to it, and telling it which mobile addresses have consumers here
(an EDGE-ADDRESSES control message with the whole set, sent when the set changes and when an
uplink becomes the active one).
On an interior router (an edge listener): the edges connected to it and the addresses each has
consumers for. An edge's data link is then a consumer of each such address, like a client's
link: the interior advertises the address as its own and delivers to the edge over it. The
interior also tells each edge which mobile addresses have a destination other than that edge
(MESH-ADDRESSES: the whole set on connect, then changes), and the edge gives its producers credit
by that, as an interior does by its own table (docs/mesh.md, "Edge routers"); the messages
themselves are edgemsg.py's.
Must not touch: the inter-router protocol (edges take no part in it: no HELLO, no routes of
their own), choosing among destinations (sending.py, multicast.py, remote.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol

from topology.routes import LinkState, compute_routes

from ..amqp import errors as E
from ..amqp.performatives import Error
from .connections import ConnState
from .edgemsg import EDGE_ADDRESSES, MESH_ADDRESSES, MESH_REQUEST, MeshAddresses, decode
from .edgemsg import decode_addresses as decode_addresses
from .edgemsg import encode_addresses, encode_mesh_addresses, encode_request
from .interrouter import Peer, attach_links
from .links import OutLink
from .table import AddressEntry, AddressTable

if TYPE_CHECKING:
    from topology.config import TopologyConfig
    from topology.routes import Routes

    from .paths import Paths
    from .ports import ConnectionCloser, Routing


class EdgeMesh(Protocol):
    """The mesh (router.core.mesh), as its edges see it: its routes and data links (an edge
    router's are its uplink's), control messages, counters, and the forwarder as `routing`."""

    me: str
    edge: bool
    dirty: bool
    routes: Routes
    links: dict[str, OutLink]
    paths: Paths
    last_change: float | None
    malformed_control: int
    topology_config: TopologyConfig
    routing: Routing

    def send_control(self, peer: Peer, payload: bytes) -> None: ...

    def remote_for(self, key: str) -> frozenset[str]: ...

    def set_remote(self, entry: AddressEntry, routers: frozenset[str]) -> None: ...

    def local_consumers(self, entry: AddressEntry, present: bool) -> None: ...


class Edges:
    """Edge connections of one router (see the module docstring)."""

    def __init__(self, mesh: EdgeMesh, table: AddressTable, closer: ConnectionCloser) -> None:
        """`mesh`: the mesh that owns these edges (its routes, control messages, and the
        forwarder as `mesh.routing`); `closer`: the core, which closes connections."""
        self.mesh = mesh
        self.table = table
        self.closer = closer
        self.edges: dict[str, Peer] = {}  # interior: edge id -> its connection
        self.addresses: dict[str, set[str]] = {}  # interior: edge id -> its consumers' addresses
        self.uplinks: dict[str, Peer] = {}  # edge: interior id -> connection, oldest first
        self.active: str | None = None  # edge: the uplink in use
        self.seq = 0  # edge: EDGE-ADDRESSES sent
        self.dirty = False  # edge: the address set must be sent
        self.failovers = 0
        self.replaced = 0  # connections closed for a newer one with the same router
        # Edge: what each uplink says has destinations in the mesh besides this edge
        # (MESH-ADDRESSES), the seq of its last message, uplinks asked for the whole set again.
        self.mesh_addresses: dict[str, set[str]] = {}
        self.mesh_seq: dict[str, int] = {}
        self.awaiting_full: dict[str, float] = {}  # uplink -> when its whole set was asked for
        self.retry_s = mesh.topology_config.hello_interval_s  # asked again this often until it comes
        self.deadline = math.inf  # the next such retry
        # Interior: what each edge was told, the seq of the last message to it, addresses whose
        # destinations may have changed since, and edges owed the whole set.
        self.told: dict[str, set[str]] = {}
        self.told_seq: dict[str, int] = {}
        self.changed: set[str] = set()
        self.full_due: set[str] = set()
        self.full_sent_at: dict[str, float] = {}  # a request soon after one is ignored (it retries)

    # --- both sides -------------------------------------------------------------------------------

    def opened(self, state: ConnState, cost: int, now: float) -> None:
        remote = state.engine.remote_open
        assert remote is not None
        peer_id = remote.container_id
        table = self.uplinks if self.mesh.edge else self.edges
        existing = table.pop(peer_id, None)
        if existing is not None and existing.conn is not state:  # a reconnect: the newer wins
            self.replaced += 1
            if not self.mesh.edge:
                self._set_addresses(existing, set())  # its link consumes nothing any more
            error = Error(condition=E.CONNECTION_FORCED, description=f"a newer connection with {peer_id} replaced it")
            self.closer.close_connection(existing.conn, error, now)
        peer = Peer(peer_id, state, cost)
        peer.edge = True
        state.peer = peer
        table[peer_id] = peer
        attach_links(self.mesh.me, peer, now)
        if self.mesh.edge:
            self.mesh_addresses.pop(peer_id, None)  # none until this uplink says
            self.mesh_seq.pop(peer_id, None)
            self.awaiting_full.pop(peer_id, None)
            self._choose(now)
        else:
            self.told.pop(peer_id, None)
            self.full_due.add(peer_id)  # tell it which addresses have destinations
            self.mesh.dirty = True

    def gone(self, peer: Peer, now: float) -> None:
        if self.mesh.edge:
            if self.uplinks.get(peer.id) is peer:
                del self.uplinks[peer.id]
                self.mesh_addresses.pop(peer.id, None)
                self.mesh_seq.pop(peer.id, None)
                self.awaiting_full.pop(peer.id, None)
                self._choose(now)
        elif self.edges.get(peer.id) is peer:
            del self.edges[peer.id]
            self._set_addresses(peer, set())
            self.told.pop(peer.id, None)
            self.told_seq.pop(peer.id, None)
            self.full_due.discard(peer.id)
            self.full_sent_at.pop(peer.id, None)

    # --- edge router ------------------------------------------------------------------------------

    def _choose(self, now: float) -> None:
        """Use the oldest uplink that is up; on a change every address is routed anew."""
        mesh, table = self.mesh, self.table
        active = next(iter(self.uplinks), None)
        if active == self.active:
            return
        if self.active is not None and active is not None:
            self.failovers += 1
        self.active = active
        me = mesh.me
        if active is None:
            mesh.routes, mesh.links = compute_routes({}, me), {}
            table.fallback = None
        else:
            out = self.uplinks[active].data_out
            assert out is not None
            states = {me: LinkState(seq=1, peers={active: 1}), active: LinkState(seq=1, peers={me: 1})}
            mesh.routes, mesh.links = compute_routes(states, me), {active: out}
            fallback = AddressEntry("U", f"<uplink {active}>", "closest")
            fallback.remote = frozenset((active,))
            table.fallback = fallback
            self.dirty = mesh.dirty = True  # tell the new uplink our addresses
        mesh.last_change = now
        mesh.paths.clear()  # new routes and links
        for entry in list(table.entries.values()):
            if entry.key[0] != "L":
                mesh.set_remote(entry, mesh.remote_for(entry.key))

    def local_changed(self) -> None:
        self.dirty = self.mesh.dirty = True

    def service(self, now: float) -> None:
        """Edge: send the address set to the active uplink if it changed; ask again for an
        uplink's whole set of addresses with destinations if it has not come. Interior: tell
        each edge what changed in the addresses with destinations."""
        if not self.mesh.edge:
            self._tell_edges(now)
            return
        if self.awaiting_full and now >= self.deadline:
            self._ask_again(now)
        if not self.dirty or self.active is None:
            return
        self.dirty = False
        entries = self.table.entries.values()
        addresses = sorted(e.key[1:] for e in entries if e.key[0] == "M" and e.consumers)
        self.seq += 1
        self.mesh.send_control(self.uplinks[self.active], encode_addresses(self.mesh.me, self.seq, addresses))

    def _ask_again(self, now: float) -> None:
        """An uplink's whole set, asked for, has not come (the answer too may be lost from a
        full queue, and what follows it is ignored meanwhile): ask again, each retry_s."""
        self.deadline = math.inf
        for uplink, asked in list(self.awaiting_full.items()):
            peer = self.uplinks.get(uplink)
            if peer is None:
                del self.awaiting_full[uplink]
                continue
            if now >= asked + self.retry_s:
                self.awaiting_full[uplink] = asked = now
                self.mesh.send_control(peer, encode_request(self.mesh.me))
            self.deadline = min(self.deadline, asked + self.retry_s)

    def _on_mesh_addresses(self, peer: Peer, message: MeshAddresses, now: float) -> None:
        """An uplink says which addresses have destinations in the mesh: producers of those get
        credit (while that uplink is the active one), the others are drained, as on an
        interior router."""
        uplink = peer.id
        current = self.mesh_addresses.get(uplink)
        if message.full:
            new = set(message.add)
            self.awaiting_full.pop(uplink, None)
        elif current is None or uplink in self.awaiting_full or message.seq != self.mesh_seq.get(uplink, 0) + 1:
            if uplink not in self.awaiting_full:  # a change was missed: ask for the whole set
                self.awaiting_full[uplink] = now
                self.mesh.send_control(peer, encode_request(self.mesh.me))
                self.deadline = min(self.deadline, now + self.retry_s)
            return
        else:
            new = (current - set(message.remove)) | set(message.add)
        self.mesh_seq[uplink] = message.seq
        self.mesh_addresses[uplink] = new
        if uplink != self.active:
            return
        mesh, table = self.mesh, self.table
        for address in sorted(new ^ (current or set())):
            entry = table.entries.get("M" + address)
            if entry is not None:
                mesh.set_remote(entry, mesh.remote_for(entry.key))

    # --- interior router --------------------------------------------------------------------------

    def on_control(self, peer: Peer, payload: bytes, now: float) -> None:
        decoded = decode(payload)
        if decoded is None:
            self.mesh.malformed_control += 1
            return
        op, what = decoded
        if self.mesh.edge:
            if op == MESH_ADDRESSES and self.uplinks.get(peer.id) is peer:
                self._on_mesh_addresses(peer, what, now)
        elif self.edges.get(peer.id) is peer:
            if op == EDGE_ADDRESSES:
                self._set_addresses(peer, set(what))
            elif op == MESH_REQUEST and now - self.full_sent_at.get(peer.id, -math.inf) >= self.retry_s / 2:
                # (more often, a request is ignored: each costs a walk of every address, and an
                # edge that really lost the answer asks again)
                self.full_due.add(peer.id)
                self.mesh.dirty = True

    def address_changed(self, address: str) -> None:
        """Interior: mobile `address` may have gained or lost destinations (edges are told)."""
        if self.edges:
            self.changed.add(address)
            self.mesh.dirty = True

    @staticmethod
    def _elsewhere(entry: AddressEntry | None, out: OutLink | None) -> bool:
        """`entry` has a destination other than the edge whose data link is `out`."""
        if entry is None:
            return False
        if entry.local is not None or entry.has_remote:
            return True
        return any(c is not out for c in entry.consumers)

    def _tell_edges(self, now: float) -> None:
        """Send each edge the change in the mobile addresses with destinations other than that
        edge (the whole set when it connects or asks)."""
        changed, self.changed = self.changed, set()
        if not self.edges or (not changed and not self.full_due):
            return
        mesh, entries = self.mesh, self.table.entries
        for edge_id, peer in self.edges.items():
            out = peer.data_out
            told = self.told.get(edge_id)
            seq = self.told_seq.get(edge_id, 0) + 1
            if told is None or edge_id in self.full_due:
                current = {e.key[1:] for e in entries.values() if e.key[0] == "M" and self._elsewhere(e, out)}
                payload = encode_mesh_addresses(mesh.me, seq, True, sorted(current), [])
                self.full_sent_at[edge_id] = now
            else:
                add, remove = [], []
                for address in sorted(changed):
                    has = self._elsewhere(entries.get("M" + address), out)
                    if has and address not in told:
                        add.append(address)
                    elif not has and address in told:
                        remove.append(address)
                if not add and not remove:
                    continue
                current = (told - set(remove)) | set(add)
                payload = encode_mesh_addresses(mesh.me, seq, False, add, remove)
            self.told[edge_id] = current
            self.told_seq[edge_id] = seq
            mesh.send_control(peer, payload)
        self.full_due.clear()

    def _set_addresses(self, peer: Peer, new: set[str]) -> None:
        """The edge's data link consumes exactly `new` (mobile addresses) from now on."""
        mesh, table = self.mesh, self.table
        forwarder = mesh.routing
        out = peer.data_out
        old = self.addresses.pop(peer.id, set())
        if new:
            self.addresses[peer.id] = new
        for address in new ^ old:  # other edges learn whether it has a destination besides them
            self.address_changed(address)
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
        table = self.table
        for address in sorted(self.addresses.get(out.neighbour or "", ())):
            entry = table.entries.get("M" + address)
            if entry is not None and entry.pending:
                self.mesh.routing.reroute(entry)

    def read(self) -> dict[str, Any]:
        """For the read API: edges here (interior) or uplinks (edge)."""
        if self.mesh.edge:
            return {"uplinks": list(self.uplinks), "active": self.active, "failovers": self.failovers}
        return {"edges": {e: sorted(self.addresses.get(e, ())) for e in sorted(self.edges)}}
