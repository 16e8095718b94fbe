"""An edge router's side of its edge connections: its uplinks to interior routers (docs/mesh.md,
"Edge routers").

    uplinks = Uplinks(mesh, table, connections, retry_s)   # `connections`: Edges' uplinks
    uplinks.changed(uplink_id, now)        # an uplink's connection came, went or was replaced
    uplinks.local_changed()                # an address gained its first or lost its last consumer here
    uplinks.service(now)                   # our address set to the uplink in use; requests again
    uplinks.on_mesh_addresses(peer, message, now)

Owns: the uplink in use (the oldest that is up; the next takes over when it drops, counted in
`failovers`) and routing everything that has no local consumer to it (the mesh's routes and
links become that uplink's, the table's uplink entry leads to it); telling it which mobile
addresses have consumers here (EDGE-ADDRESSES, the whole set, when it changes and when an uplink
becomes the one in use; with them the link routes that have a container here); what each uplink
says has destinations in the mesh (MESH-ADDRESSES), by which this edge's producers get credit,
and the link routes it says the mesh serves, given to our link routes as served through it;
asking again for an uplink's whole set when a change was missed, each `retry_s` until it comes.
Collaborators (given by Edges): the mesh as a ports.EdgeMesh (its routes, links, path choices,
destinations and control messages), the address table, Edges' map of uplink connections (read
only here: Edges adds and removes them), the retry interval.
Must not touch: an interior's side of edge connections (edgehost.py), the connections themselves
(edge.py), the messages' encoding (edgemsg.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from topology.graph import LinkState
from topology.routes import compute_routes

from .addressentry import AddressEntry
from .edgemsg import MeshAddresses, encode_addresses, encode_request
from .interrouter import Peer
from .linkmatch import MARK
from .table import FALLBACK, AddressTable

if TYPE_CHECKING:
    from .ports import EdgeMesh


class Uplinks:
    """See the module docstring; one per Edges, used on an edge router only."""

    def __init__(self, mesh: EdgeMesh, table: AddressTable, connections: dict[str, Peer], retry_s: float) -> None:
        self.mesh = mesh
        self.table = table
        self.uplinks = connections  # interior id -> connection, oldest first
        self.active: str | None = None  # the uplink in use
        self.seq = 0  # EDGE-ADDRESSES sent
        self.dirty = False  # the address set must be sent
        self.failovers = 0
        # What each uplink says has destinations in the mesh besides this edge (MESH-ADDRESSES),
        # the seq of its last message, uplinks asked for the whole set again.
        self.mesh_addresses: dict[str, set[str]] = {}
        self.mesh_seq: dict[str, int] = {}
        self.awaiting_full: dict[str, float] = {}  # uplink -> when its whole set was asked for
        self.retry_s = retry_s  # asked again this often until it comes
        self.deadline = math.inf  # the next such retry
        # The link routes the uplink in use says the mesh serves (its MESH-ADDRESSES keys of
        # router.core.linkmatch's form), as given to our link routes, and through which uplink.
        self.route_keys: set[str] = set()
        self.routes_via: str | None = None

    def changed(self, uplink: str, now: float) -> None:
        """`uplink`'s connection came, went or was replaced: what it said is forgotten (none
        until it says again) and the uplink in use is chosen again."""
        self.mesh_addresses.pop(uplink, None)
        self.mesh_seq.pop(uplink, None)
        if self.awaiting_full.pop(uplink, None) is not None:
            self._rearm()
        self._choose(now)
        self._sync_routes()

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
            table.uplink = None
        else:
            out = self.uplinks[active].data_out
            assert out is not None
            states = {me: LinkState(seq=1, peers={active: 1}), active: LinkState(seq=1, peers={me: 1})}
            mesh.routes, mesh.links = compute_routes(states, me), {active: out}
            uplink = AddressEntry("U", f"<uplink {active}>", "closest")
            uplink.remote = frozenset((active,))
            table.uplink = uplink
            self.dirty = mesh.dirty = True  # tell the new uplink our addresses
        mesh.last_change = now
        mesh.paths.clear()  # new routes and links
        for entry in list(table.entries.values()):
            entry.remembered = None  # (a choice through the uplink that was in use: mesh._forget_choices)
            if entry.key[0] != "L":
                mesh.set_remote(entry, mesh.remote_for(entry.key))
            if entry.fallback_enabled:  # its fallback destinations in the mesh: the new uplink's
                mesh.routing.fallback_changed("M" + FALLBACK + entry.key[1:])

    def local_changed(self) -> None:
        self.dirty = self.mesh.dirty = True

    def service(self, now: float) -> None:
        """Send the address set to the active uplink if it changed; ask again for an uplink's
        whole set of addresses with destinations if it has not come."""
        if self.awaiting_full and now >= self.deadline:
            self._ask_again(now)
        if not self.dirty or self.active is None:
            return
        self.dirty = False
        entries = self.table.entries.values()
        addresses = sorted(e.key[1:] for e in entries if e.key[0] == "M" and e.consumers)
        addresses += self.mesh.link_routes.advertised_keys()  # routes with a container here
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

    def _rearm(self) -> None:
        """The next retry of the uplinks still asked (none: no deadline; one left in the past
        would be the router's next deadline for ever, its timer ticking without pause)."""
        self.deadline = min((asked + self.retry_s for asked in self.awaiting_full.values()), default=math.inf)

    def on_mesh_addresses(self, peer: Peer, message: MeshAddresses, now: float) -> None:
        """An uplink says which addresses have destinations in the mesh: producers of those get
        credit (while that uplink is the active one), the others are drained, as on an
        interior router."""
        uplink = peer.id
        current = self.mesh_addresses.get(uplink)
        if message.full:
            new = set(message.add)
            if self.awaiting_full.pop(uplink, None) is not None:
                self._rearm()
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
        whole = message.full or current is None
        if whole:  # the link routes it serves: all of them (a change of uplink left some known)
            self._sync_routes()
        routers = frozenset((uplink,))
        for address in sorted(new ^ (current or set())):
            if address.startswith(MARK):  # a link route the mesh serves (router.core.linkroute)
                if not whole:
                    served = address in new
                    mesh.link_routes.remote_changed(address, routers if served else frozenset())
                    (self.route_keys.add if served else self.route_keys.discard)(address)
                continue
            entry = table.entries.get("M" + address)
            if entry is not None:
                mesh.set_remote(entry, mesh.remote_for(entry.key))
            if address.startswith(FALLBACK):  # (maybe with no entry here: router.core.fallback)
                mesh.routing.fallback_changed("M" + address)

    def _sync_routes(self) -> None:
        """Our link routes learn the routes the mesh serves from the uplink in use (after a
        change of uplink: all of them again, through the new one). Without an uplink they stay
        known, through the lost one (an attach is refused: no container reachable, where
        forgetting them would make it a mobile address's link), and through a new uplink until
        it says which it serves."""
        active = self.active
        if active is None:
            return
        said = self.mesh_addresses.get(active)
        keys = self.route_keys if said is None else {address for address in said if address.startswith(MARK)}
        changed = keys | self.route_keys if self.routes_via != active else keys ^ self.route_keys
        routers = frozenset((active,))
        for key in sorted(changed):
            self.mesh.link_routes.remote_changed(key, routers if key in keys else frozenset())
        self.route_keys, self.routes_via = keys, active

    def read(self) -> dict[str, Any]:
        """For the read API."""
        return {"uplinks": list(self.uplinks), "active": self.active, "failovers": self.failovers}
