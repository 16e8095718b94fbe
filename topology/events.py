"""What the topology engine reports to the routing core, and its counters.

Owns: the typed events `TopologyNode.take_events()` returns (matched with isinstance/match,
architecture rule 3) and `Counters`. Must not touch: protocol state or decisions (node.py).

Events are coalesced: one `RoutesChanged` against the routes last reported, one
`AddressesChanged` with the current router set of every address that changed since the last call,
so a core that polls after each batch of input applies exactly what moved.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .routes import Routes


@dataclass(frozen=True, slots=True, kw_only=True)
class RoutesChanged:
    """New routes. `added`/`removed`: routers that became (un)reachable; `changed`: routers still
    reachable whose next hop or cost moved. Valid origins may change with any new Routes."""

    routes: Routes
    added: frozenset[str]
    removed: frozenset[str]
    changed: frozenset[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressesChanged:
    """address -> the remote routers that now have consumers for it (empty: none any more).
    Only reachable routers are listed; the core keeps its own local consumers."""

    changes: Mapping[str, frozenset[str]]


@dataclass(frozen=True, slots=True, kw_only=True)
class RouterRestarted:
    """`router_id` came back with a new instance: its old link state and addresses were dropped."""

    router_id: str
    old_instance: int
    new_instance: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DuplicateRouterId:
    """Another router advertises my id with a newer instance: a configuration error to log."""

    router_id: str
    instance: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AddressResync:
    """I asked `router_id` for its whole address set: `reason` is 'gap' (a differential update
    was missed) or 'digest' (my copy drifted from the owner's, caught by the digest)."""

    router_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NeighbourSilent:
    """No HELLO from neighbour `router_id` for its dead interval (`silent_s`), or none since its
    connection came up: it has left my link state. Its connection may be up but dead (a frozen
    router, a half-open socket): the core closes it, so what was in flight on it is reported at
    once rather than at the idle time-out."""

    router_id: str
    silent_s: float


TopologyEvent = RoutesChanged | AddressesChanged | RouterRestarted | DuplicateRouterId | AddressResync | NeighbourSilent


@dataclass(slots=True)
class Counters:
    """Running totals for management and tests."""

    received: dict[str, int] = field(default_factory=dict)  # by opcode
    sent: dict[str, int] = field(default_factory=dict)  # by opcode (a flood counts once)
    ignored_version: int = 0  # newer protocol version
    ignored_opcode: int = 0  # unknown opcode
    ignored_stale: int = 0  # an older instance of a router than the one held
    ignored_foreign: int = 0  # from a connection that is not (or no longer) up, or a HELLO
    #                           whose id is not the connection's
    corrupt: int = 0  # a full MAU whose set does not match its own digest
    resync_gap: int = 0
    resync_digest: int = 0
    route_computations: int = 0
