"""An interior router's side of its edge connections: the edge routers connected to it
(docs/mesh.md, "Edge routers").

    host = EdgeHost(mesh, table, connections, retry_s)   # `connections`: Edges' edges
    host.opened(edge_id) / host.gone(peer)
    host.set_addresses(peer, addresses)     # what the edge's data link consumes from now on
    host.on_control(peer, op, what, now)    # EDGE-ADDRESSES, MESH-ADDRESSES-REQUEST
    host.address_changed(address); host.service(now)   # edges told what changed
    host.ready(out)                         # an edge's data link got credit

Owns: the addresses each edge has consumers for (EDGE-ADDRESSES). An edge's data link is a
consumer of each such address, like a client's link: the interior advertises the address as its
own and delivers to the edge over it. The link routes among them (keys of linkmatch's reserved
form: the edge has a container for them) go to the link routes instead, which serve them for the
mesh. Telling each edge which mobile addresses have a destination other than that edge, and
which link routes a container other than on that edge (MESH-ADDRESSES: the whole set on connect
and on request, then the changes once per batch of input, computed for the addresses whose
destinations changed), and answering an edge's requests for the whole set at most once each
half `retry_s`.
Collaborators (given by Edges): the mesh as a ports.EdgeMesh (control messages, a first or last
consumer of an address, the forwarder as `routing`), the address table, Edges' map of edge
connections (read only here: Edges adds and removes them), the edges' retry interval.
Must not touch: an edge router's side (uplinks.py), the connections themselves (edge.py), the
messages' encoding (edgemsg.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .addressentry import AddressEntry
from .edgemsg import EDGE_ADDRESSES, MESH_REQUEST, encode_mesh_addresses
from .interrouter import Peer
from .linkmatch import MARK
from .links import OutLink
from .table import AddressTable

if TYPE_CHECKING:
    from .ports import EdgeMesh


class EdgeHost:
    """See the module docstring; one per Edges, used on an interior router only."""

    def __init__(self, mesh: EdgeMesh, table: AddressTable, connections: dict[str, Peer], retry_s: float) -> None:
        self.mesh = mesh
        self.table = table
        self.edges = connections  # edge id -> its connection
        self.retry_s = retry_s  # how often an edge asks again for what it missed
        self.addresses: dict[str, set[str]] = {}  # edge id -> its consumers' addresses
        # What each edge was told, the seq of the last message to it, addresses whose
        # destinations may have changed since, and edges owed the whole set.
        self.told: dict[str, set[str]] = {}
        self.told_seq: dict[str, int] = {}
        self.changed: set[str] = set()
        self.full_due: set[str] = set()
        self.full_sent_at: dict[str, float] = {}  # a request soon after one is ignored (it retries)
        self.serving: set[str] = set()  # edges with link-route containers (router.core.linkroute)

    def opened(self, edge_id: str) -> None:
        self.told.pop(edge_id, None)
        self.full_due.add(edge_id)  # tell it which addresses have destinations
        self.mesh.dirty = True

    def gone(self, peer: Peer) -> None:
        self.set_addresses(peer, set())
        self.told.pop(peer.id, None)
        self.told_seq.pop(peer.id, None)
        self.full_due.discard(peer.id)
        self.full_sent_at.pop(peer.id, None)

    def on_control(self, peer: Peer, op: str, what: Any, now: float) -> None:
        """A control message from a connected edge, decoded."""
        if op == EDGE_ADDRESSES:
            self.set_addresses(peer, set(what))
        elif op == MESH_REQUEST and now - self.full_sent_at.get(peer.id, -math.inf) >= self.retry_s / 2:
            # (more often, a request is ignored: each costs a walk of every address, and an
            # edge that really lost the answer asks again)
            self.full_due.add(peer.id)
            self.mesh.dirty = True

    def address_changed(self, address: str) -> None:
        """Mobile `address` may have gained or lost destinations (edges are told)."""
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

    def service(self, now: float) -> None:
        """Send each edge the change in the mobile addresses with destinations other than that
        edge (the whole set when it connects or asks)."""
        changed, self.changed = self.changed, set()
        if not self.edges or (not changed and not self.full_due):
            return
        mesh, entries = self.mesh, self.table.entries
        routes = mesh.link_routes
        for edge_id, peer in self.edges.items():
            out = peer.data_out
            told = self.told.get(edge_id)
            seq = self.told_seq.get(edge_id, 0) + 1
            if told is None or edge_id in self.full_due:
                current = {e.key[1:] for e in entries.values() if e.key[0] == "M" and self._elsewhere(e, out)}
                current |= {key for key in routes.route_keys() if routes.served_elsewhere(key, edge_id)}
                payload = encode_mesh_addresses(mesh.me, seq, True, sorted(current), [])
                self.full_sent_at[edge_id] = now
            else:
                add, remove = [], []
                for address in sorted(changed):
                    if address.startswith(MARK):  # a link route (router.core.linkroute)
                        has = routes.served_elsewhere(address, edge_id)
                    else:
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

    def set_addresses(self, peer: Peer, new: set[str]) -> None:
        """The edge's data link consumes exactly `new` (mobile addresses) from now on; the link
        routes among them (router.core.linkroute's keys) have a container on that edge."""
        mesh, table = self.mesh, self.table
        routes = {address for address in new if address.startswith(MARK)}
        if routes or peer.id in self.serving:
            new = new - routes
            mesh.link_routes.edge_served(peer.id, routes)
            (self.serving.add if routes else self.serving.discard)(peer.id)
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
            key = table.consumer_key(address, True)  # (the key get_or_create takes)
            if key is None or key[0][0] != "M":
                continue  # an edge reports mobile addresses only (no entry made for another kind)
            entry = table.get_or_create(address, consumer=True)
            if entry is None:
                continue
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
        """For the read API."""
        return {"edges": {e: sorted(self.addresses.get(e, ())) for e in sorted(self.edges)}}
