"""The neighbours of an interior router: which inter-router connection is the one to each
neighbour router (docs/mesh.md, "Connection roles and properties").

    peering = Peering(router_id, paths, closer)
    peer = peering.opened(state, cost, node, priority_bands, now)   # None: refused or replaced
    peering.gone(peer)                   # True when it was the neighbour's connection

Owns: one active connection per neighbour router (`peers`) and our data link to each (`links`,
the default priority's; every band's in `paths.bands`); the choice when a second connection
claims a neighbour's id (refused while the neighbour is alive, whichever side opened it;
otherwise a deterministic choice both routers make alike), attaching the links of the one kept,
forgetting a lost one, and clearing the path choices whenever a neighbour's links change; the
counters of connections refused and replaced.
Collaborators (given by the mesh): the router id, the mesh's Paths, and the core as a
ports.ConnectionCloser; the topology node is handed to `opened` (the mesh creates it late).
Must not touch: the topology protocol (the mesh tells the node that a neighbour came or went),
edge connections (edge.py), control messages (meshcontrol.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp import errors as E
from ..amqp.performatives import Error
from .connections import ConnState
from .interrouter import Peer, attach_links
from .links import OutLink

if TYPE_CHECKING:
    from topology.node import TopologyNode

    from .paths import Paths
    from .ports import ConnectionCloser


class Peering:
    """See the module docstring; one per Mesh."""

    def __init__(self, router_id: str, paths: Paths, closer: ConnectionCloser) -> None:
        """`closer`: the core, which closes the connection that loses."""
        self.me = router_id
        self.paths = paths
        self.closer = closer
        self.peers: dict[str, Peer] = {}  # neighbour id -> its active connection
        self.links: dict[str, OutLink] = {}  # neighbour id -> our data link to it (default priority)
        self.replaced = 0  # connections closed because another to the same router was kept
        self.refused_duplicates = 0  # connections claiming the id of a connected, live router

    def opened(
        self, state: ConnState, cost: int, node: TopologyNode, bands: int, now: float, streams: int = 0
    ) -> Peer | None:
        """Both opens of an inter-router connection are exchanged and checked: the neighbour's
        Peer with its links attached, or None when this connection is not the one kept."""
        remote = state.engine.remote_open
        assert remote is not None
        peer_id = remote.container_id
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
            return None
        if existing is not None and existing.conn is not state:
            # Two connections to one router before either is established (both routers connect
            # to each other at once, or a reconnect while the old connection is not heard).
            # Same direction: the newer wins; otherwise both routers keep the one the smaller
            # router id opened.
            keep_new = existing.conn.outgoing == state.outgoing or state.outgoing == (self.me < peer_id)
            error = Error(condition=E.CONNECTION_FORCED,
                          description=f"another connection to router {peer_id} is in use")  # fmt: skip
            self.replaced += 1
            if not keep_new:
                self.closer.close_connection(state, error, now)
                return None
            del self.peers[peer_id]
            self._forget_links(existing)
            self.paths.clear()
            self.closer.close_connection(existing.conn, error, now)
        peer = Peer(peer_id, state, cost)
        state.peer = peer
        self.peers[peer_id] = peer
        attach_links(self.me, peer, now, bands, streams)
        assert peer.data_out is not None
        self.links[peer_id] = peer.data_out
        if peer.bands is not None:
            self.paths.bands[peer.data_out] = peer.data_out.bands = peer.bands
        self.paths.clear()
        return peer

    def gone(self, peer: Peer) -> bool:
        """`peer`'s connection closed or failed: True when it was the neighbour's active one
        (the neighbour is lost at once)."""
        if self.peers.get(peer.id) is not peer:
            return False
        del self.peers[peer.id]
        self._forget_links(peer)
        self.paths.clear()
        return True

    def _forget_links(self, peer: Peer) -> None:
        self.links.pop(peer.id, None)
        if peer.data_out is not None:
            self.paths.bands.pop(peer.data_out, None)
            peer.data_out.bands = None
