"""The routing core's units, built once and wired to each other: the base of RouterCore.

Owns: construction (each unit built with only what it uses; ports.py names what units know of
each other), the few links made after the fact between units that call each other (the
forwarder and the bounds, the forwarder and the mesh, the link routes), the attributes
management reads straight off the core (counters of links gone, refusals by listener, what our
open offers) and the two calls the mesh and Admission make on the core as their
ports.ConnectionCloser. Runs once per core; nothing here is on the path of a message.
Must not touch: events, deliveries, timers, the network layer's surface (router.py).
"""

from __future__ import annotations

from typing import Any

from ..amqp import events as ev
from ..amqp.connection import Connection
from ..amqp.performatives import Error
from ..config.models import RouterConfig
from .admission import Admission
from .attach import Links
from .autolinks import AutoLinks
from .bounds import Bounds
from .connections import ConnState, login_throttle
from .coreread import CoreReadApi
from .forwarding import Forwarder
from .lifecycle import Lifecycle
from .linkroute import LinkRoutes
from .mesh import Mesh
from .policy import PolicyUnit
from .release import ConnectionEnd
from .stop import GracefulStop
from .table import AddressTable
from .touched import Touched


class CoreUnits(ev.TransferSink):
    def __init__(self, config: RouterConfig, *, instance: int | None = None, wall_offset: float = 0.0) -> None:
        """`instance`: the router's boot instance in the inter-router protocol (it must grow
        when the router restarts); by default the wall time of the first `now`, in milliseconds.
        `wall_offset`: wall-clock seconds minus `now` (router.py's module docstring)."""
        self.config = config
        self.wall_offset = wall_offset
        self.router_id = config.router.id
        self.connections: dict[Connection, ConnState] = {}
        self.table = AddressTable(config)
        self.logins = login_throttle(config.failed_logins)  # failed SASL logins, per peer host
        self.touched = Touched()
        limits = config.limits
        # Unsettled and byte bounds, credit by bytes (router.core.bounds).
        self.bounds = Bounds(limits.buffered_budget_bytes, self.connections)
        self.mesh = Mesh(config, self.table, self.touched, self, wall_offset=wall_offset, instance=instance)
        # Fixed by the configuration; read once (the mesh is interpreted: each attribute read
        # from here is a dictionary search, and next_deadline asks after every batch).
        self.meshed: bool = self.mesh.enabled
        self.forwarder = Forwarder(self.table, self.bounds, self.mesh, self.touched, router_id=self.router_id,
                                   wall_offset=wall_offset, max_message_size=limits.max_message_size)  # fmt: skip
        # The forwarder and the bounds, the forwarder and the mesh call each other: the second
        # of each pair learns of the forwarder once it is built.
        self.bounds.credit = self.forwarder
        self.mesh.routing = self.forwarder
        # Engines whose band links hold frames until their output drains (router.core.holding):
        # the network layer empties it after each call (router.net.corepump).
        self.held_output = self.forwarder.held_output
        # Streaming links grown for bursts, given back once idle (router.core.streamreclaim):
        # RouterCore's tick and next_deadline.
        self.idle_streams = self.forwarder.idle_streams
        self.links = Links(self.table, self.forwarder, self.bounds, self.mesh, router_id=self.router_id,
                           max_message_size=limits.max_message_size)  # fmt: skip
        # Links the router attaches itself to brokers' queues (router.core.autolinks).
        self.autolinks = AutoLinks(self.connections, self.links, self.touched, router_id=self.router_id)
        for auto_link in config.auto_links:
            self.autolinks.add(auto_link, 0.0)
        # Link routes (router.core.linkroute): attaches passed on to route containers.
        self.link_routes = LinkRoutes(config.link_routes, self.mesh, self.touched, router_id=self.router_id)
        # (compiled, held here: next_deadline reads its deadline after every call into the core)
        self.idle_routed = self.link_routes.link_pairs.idle_sessions
        self.links.link_routes = self.link_routes
        self.forwarder.relay = self.link_routes.relay
        self.mesh.link_routes = self.link_routes
        # Counters of links that are gone (management's router-wide totals): producers' links
        # and inter-router links we receive on, consumers' links, inter-router links we send on.
        self.gone_in = self.links.gone_in
        self.gone_out = self.links.gone_out
        self.gone_transit = self.links.gone_transit
        # Vhosts for client connections (router.core.policy); management and a reload replace its rules.
        self.policy = PolicyUnit(config.policy)
        # Frozen snapshots for management (router.core.coreread; the mesh's half is core.mesh).
        self.read = CoreReadApi(self.connections, self.table, self.links, self.forwarder, self.bounds, self.logins)
        # A connection's end, however it came (router.core.release): after a failure in the
        # middle of its input too.
        self.ending = ConnectionEnd(self.connections, self.links, self.forwarder, self.table, self.bounds, self.mesh,
                                    self.autolinks, self.link_routes, self.policy, self.touched)  # fmt: skip
        # What may come in and what our open offers; the life cycles; the graceful stop.
        self.admission = Admission(config, self.connections, self.logins, self.links, self.autolinks,
                                   self.link_routes, self.mesh, self.policy, self.touched, self)  # fmt: skip
        self.lifecycle = Lifecycle(self.connections, self.logins, self.admission, self.links, self.autolinks,
                                   self.link_routes, self.ending, self.touched)  # fmt: skip
        self.graceful_stop = GracefulStop(self.connections, self.table, self.forwarder, self.links, self.link_routes,
                                 self.admission, self.lifecycle, self.touched)  # fmt: skip
        # By listener name, for management's listener connectionsRefused and routersRefused.
        self.refused_connections = self.admission.refused_connections
        self.refused_routers = self.admission.refused_routers

    @property
    def offered_capabilities(self) -> tuple[str, ...]:
        """What our open offers (router.core.admission); the management node adds its capability."""
        return self.admission.offered_capabilities

    @offered_capabilities.setter
    def offered_capabilities(self, capabilities: tuple[str, ...]) -> None:
        self.admission.offered_capabilities = capabilities

    @property
    def open_properties(self) -> dict[str, Any]:
        """The properties of our open; the management node adds its address."""
        return self.admission.open_properties

    # --- the core as the mesh's and Admission's ports.ConnectionCloser ----------------------------

    def close_connection(self, state: ConnState, error: Error, now: float) -> None:
        """Close a connection ourselves: what is in flight on it is reported first
        (router.core.lifecycle)."""
        self.lifecycle.close_connection(state, error, now)

    def read_paused(self, engine: Connection) -> bool:
        """Whether the network layer should stop reading `engine`'s socket for now: it holds
        more than its bound, or the router is near its budget and it holds the most
        (router.core.bounds)."""
        state = self.connections.get(engine)
        return state is not None and self.bounds.read_paused(state)
