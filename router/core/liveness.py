"""Neighbours that stop talking: when a silent neighbour's connection is closed.

Owns: the neighbours the topology node reported silent (no HELLO for their dead interval:
topology.events.NeighbourSilent; they have left the routes already), and the decision to close
such a neighbour's connection: only when nothing at all has come from it for its dead interval
(a router frozen with SIGSTOP, a half-open socket) and the silence cannot be this router's own
(reading that connection paused; this router itself just woke from a stop, with input still
unread). Closing reports what was in flight on the connection at once (modified / released), where
the idle time-out would hold it for 16 s. docs/mesh.md, "Failure behaviour".
Must not touch: the HELLO protocol (topology/), what closing a connection does (lifecycle.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

from ..amqp import errors as E
from ..amqp.performatives import Error

if TYPE_CHECKING:
    from topology.config import TopologyConfig
    from topology.node import TopologyNode

    from .interrouter import Peer
    from .ports import ConnectionCloser


class LivenessMesh(Protocol):
    """The mesh (router.core.mesh), as liveness sees it."""

    topology_config: TopologyConfig
    node: TopologyNode | None
    peers: dict[str, Peer]


class Liveness:
    """See the module docstring; one per Mesh."""

    def __init__(self, mesh: LivenessMesh, closer: ConnectionCloser) -> None:
        """`closer`: the core, which closes connections and knows whether one is read now."""
        self.mesh = mesh
        self.closer = closer
        self.hello_interval_s = mesh.topology_config.hello_interval_s
        self.dead_interval_s = mesh.topology_config.dead_interval_s
        self.silent: dict[str, float] = {}  # neighbours reported silent -> their dead interval
        self.deadline = math.inf  # when to look at them again
        self.last_service = -math.inf  # the node is serviced at least every hello interval
        self.awake_from = -math.inf  # after a pause of this router: silence is not judged before
        self.closed = 0  # connections closed because the neighbour fell silent

    def serviced(self, now: float) -> None:
        """The node is about to be serviced (at least once a hello interval while running)."""
        if now - self.last_service > 1.5 * self.hello_interval_s:
            # This router was not running for a while (stopped, starved: its HELLO timer runs
            # each hello interval): what its neighbours sent meanwhile may not be read yet. Give
            # the network layer a hello interval to read it before judging anyone.
            self.awake_from = now + self.hello_interval_s
        self.last_service = now

    def reported(self, router_id: str, dead_s: float, now: float) -> None:
        """The node says `router_id` sent no HELLO for its dead interval `dead_s`."""
        if router_id in self.mesh.peers:
            self.silent[router_id] = dead_s
            self.check(now)

    def check(self, now: float) -> None:
        """Close the connection of each silent neighbour that has sent nothing for its dead
        interval, unless the silence may be ours (see the module docstring). A neighbour whose
        HELLOs are only late (queued behind its data) keeps its connection: it is out of the
        routes until one arrives."""
        mesh, node = self.mesh, self.mesh.node
        self.deadline = math.inf
        if node is None:
            return
        for peer_id, dead_s in list(self.silent.items()):
            peer = mesh.peers.get(peer_id)
            if peer is None or node.neighbour_heard(peer_id):
                del self.silent[peer_id]
                continue
            engine = peer.conn.engine
            due = max(engine.last_received + dead_s, self.awake_from)
            if now < due or self.closer.read_paused(engine):
                self.deadline = min(self.deadline, max(due, now + self.hello_interval_s))
                continue
            del self.silent[peer_id]
            self.closed += 1
            error = Error(condition=E.CONNECTION_FORCED,
                          description=f"no HELLO from router {peer_id} for {dead_s:.1f} s (dead interval)")  # fmt: skip
            self.closer.close_connection(peer.conn, error, now)
