"""A graceful stop of the routing core: first no new work comes in and what is in flight
finishes, then every connection is closed.

    stop = GracefulStop(connections, table, forwarder, links, link_routes, admission, lifecycle, touched)
    stop.quiesce(now)      # RouterCore.quiesce: no new credit, no new connections or links
    stop.in_flight()       # deliveries still unsettled for their senders (the network layer waits)
    stop.shutdown(now)     # release what is left and close every connection (forced)

Owns: the order of the stop: the flags that tell Admission to let nothing new in (`quiescing`,
then `shutting_down`), producers' credit taken back (ProducerCredit.quiesce) and the link routes'
(LinkRoutes.quiesce), what counts as in flight, and the order of the closes (links first, their
outcomes written while every connection is still open, the closes last).
Compiled: the network layer asks in_flight() after every call into the core while it drains.
Collaborators (given by RouterCore): the core's connections, the address table, the forwarder,
Links, LinkRoutes, Admission (its flags), Lifecycle (a connection's links gone), Touched.
Must not touch: when the stop begins or how long it waits (the network layer: router.net.corepump
and router.net.server), what each close releases (lifecycle.py, release.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..amqp import errors as E
from ..amqp.connection import Connection
from ..amqp.endpoints import CLOSED
from ..amqp.performatives import Error
from .connections import ConnState

if TYPE_CHECKING:
    from .admission import Admission
    from .attach import Links
    from .forwarding import Forwarder
    from .lifecycle import Lifecycle
    from .linkroute import LinkRoutes
    from .table import AddressTable
    from .touched import Touched


class GracefulStop:
    """See the module docstring."""

    def __init__(
        self, connections: dict[Connection, ConnState], table: AddressTable, forwarder: Forwarder, links: Links,
        link_routes: LinkRoutes, admission: Admission, lifecycle: Lifecycle, touched: Touched,
    ) -> None:  # fmt: skip
        self.connections = connections
        self.table = table
        self.forwarder = forwarder
        self.links = links
        self.link_routes = link_routes
        self.admission = admission
        self.lifecycle = lifecycle
        self.touched = touched

    def quiesce(self, now: float) -> None:
        """The first step of a graceful stop: deliveries already in flight keep flowing to
        consumers and their outcomes back to senders, but nothing new comes in. Every link we
        receive on (producers', and other routers' links to us) has its credit set to 0 and never
        gets more (ProducerCredit.quiesce); new connections are refused with
        amqp:connection:forced and new links on existing ones with amqp:link:detach-forced (see
        Admission.refuse_while_quiescing). The network layer waits until in_flight() is 0 or its
        drain deadline, then calls shutdown(). Control links between routers keep their credit:
        the mesh keeps working until this router's connections close."""
        if self.admission.stopping:
            return
        self.admission.quiescing = True
        self.forwarder.now = now
        in_links = [inl for state in self.connections.values() if not state.closed for inl in state.in_links]
        self.forwarder.quiesce(in_links)
        self.link_routes.quiesce(s for s in self.connections.values() if not s.closed)
        self.forwarder.flush()

    def in_flight(self) -> int:
        """Deliveries taken from a sender (a client or another router) that went on to a
        consumer or another router and have no final outcome yet: what a graceful stop waits
        for before closing. Deliveries still waiting for a consumer's credit are not waited for:
        the close releases them at once, so their producers can send them elsewhere instead of
        waiting out the grace period for a consumer that may never ask. Link-routed deliveries
        not yet settled count too (router.core.linkroute)."""
        taken = sum(
            inl.inflight
            for state in self.connections.values()
            if not state.closed
            for inl in state.in_links
            if not inl.gone
        )
        waiting = sum(
            1
            for entry in self.table.entries.values()
            for fwd in entry.pending
            if fwd.in_link is not None and not fwd.in_link.gone and not fwd.in_link.conn.closed
        )
        routed = self.link_routes.in_flight(s for s in self.connections.values() if not s.closed)
        return taken - waiting + routed

    def shutdown(self, now: float) -> None:
        """Release what is in flight and close every connection (forced)."""
        self.admission.shutting_down = True
        error = Error(condition=E.CONNECTION_FORCED, description="router shutting down")
        states = list(self.connections.values())
        # First every link goes (outcomes for what is in flight are batched), then those
        # outcomes are written while every connection is still open, and only then does each
        # connection get its close: nothing may follow a close (transport §2.4.3).
        for state in states:
            state.output_blocked = True  # no new deliveries go anywhere
        # Consumers first: what they hold becomes released/modified for producers that are
        # still linked to hear it; then everything else.
        for state in states:
            for out in list(state.out_links):
                self.links.link_gone(out.link, now)
        for state in states:
            self.lifecycle.connection_gone(state, now)
        self.forwarder.flush()
        for state in states:
            engine = state.engine
            if engine.state.local is not CLOSED:
                engine.close(error)
            self.touched.touch(engine)
