"""The narrow interfaces the units of the routing core know each other by.

RouterCore (router.py) builds every unit with what it uses: the address table, the Touched set,
configuration values, and the other units it calls. Where a unit calls one that also calls it
back (the forwarder and the mesh, the forwarder and the bounds), or calls the core itself (to
close a connection), it knows the other through one of these Protocols, so that no unit imports
RouterCore or the unit that calls it.

Owns: the Protocols. Must not touch: any state (these are types only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from topology.config import TopologyConfig
    from topology.routes import Routes

    from ..amqp.connection import Connection
    from ..amqp.performatives import Error
    from .addressentry import AddressEntry
    from .connections import ConnState
    from .interrouter import Peer
    from .links import InLink, OutLink
    from .paths import Paths


class ConnectionCloser(Protocol):
    """The core, as the mesh and Admission see it: it closes a connection after reporting what is
    in flight (router.core.lifecycle)."""

    def close_connection(self, state: ConnState, error: Error, now: float) -> None: ...

    def read_paused(self, engine: Connection) -> bool: ...


class Credit(Protocol):
    """The forwarder, as the bounds and inter-router links see it: producers' credit."""

    def credit_dirty(self, inl: InLink) -> None: ...

    def consumer_ready(self, out: OutLink, now: float = ...) -> None: ...


class Routing(Credit, Protocol):
    """The forwarder, as the mesh and edges see it: credit, and routing again what waits for an
    address whose destinations (or fallback destinations: table key `key`) changed."""

    def reroute(self, entry: AddressEntry) -> None: ...

    def fallback_changed(self, key: str) -> None: ...


class LinkRouteAdverts(Protocol):
    """The link routes (router.core.linkroute), as the mesh and edge connections see them: which
    routers advertise a container for a route; on an edge router the routes it serves (told to
    its uplink), on an interior those its edge routers serve and what each edge is told."""

    def remote_changed(self, key: str, routers: frozenset[str]) -> None: ...

    def advertised_keys(self) -> list[str]: ...

    def edge_served(self, edge_id: str, keys: set[str]) -> None: ...

    def route_keys(self) -> set[str]: ...

    def served_elsewhere(self, key: str, edge_id: str) -> bool: ...


class MeshPaths(Protocol):
    """The mesh, as path choices see it (router.core.remote): its routes, data links and the
    choices remembered under them."""

    me: str
    edge: bool
    routes: Routes
    links: dict[str, OutLink]
    paths: Paths


class EdgeMesh(Protocol):
    """The mesh (router.core.mesh), as Edges and its two sides see it: its routes and data links
    (an edge router's are its uplink's), control messages, counters, and the forwarder as
    `routing`."""

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
    streaming_links: int  # (router.core.streamlinks)
    link_routes: LinkRouteAdverts

    def send_control(self, peer: Peer, payload: bytes) -> None: ...

    def remote_for(self, key: str) -> frozenset[str]: ...

    def set_remote(self, entry: AddressEntry, routers: frozenset[str]) -> None: ...

    def local_consumers(self, entry: AddressEntry, present: bool) -> None: ...
