"""The sans-IO protocol state machine of one interior router.

Owns: `TopologyNode`, which turns inputs (neighbour up/down, a received control message, the
passing of time, local address changes) into outputs (messages for neighbours, deadlines, events,
routes, the mobile address table). Must not touch: sockets, tasks or the clock (time is always a
parameter), the AMQP envelope of control messages, the routing core's tables; it delegates HELLO
state to neighbours.py, link states to linkstate.py, addresses to mobile.py, request
bookkeeping to requests.py and routes to routes.compute_routes.

Driving it (docs/mesh-protocol.md, "Driving a node"): call the inputs, then `tick(now)` whenever
`now >= next_deadline()` (also right after inputs: changes are acted on in `tick`, so one batch of
input gives one RA and one route computation), then send `take_outgoing()`: (neighbour, message)
for one neighbour, (None, message) for every neighbour whose connection is up. Poll `take_events()`
for what the core must apply.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .config import TopologyConfig
from .events import AddressesChanged, AddressResync, Counters, DuplicateRouterId, RoutesChanged
from .events import NeighbourSilent, RouterRestarted, TopologyEvent
from .graph import LinkState
from .linkstate import LinkStateDb, Seen
from .messages import PROTOCOL_VERSION, ControlMessage, Hello, LinkStateRequest, LinkStateUpdate
from .messages import MobileAddressRequest, MobileAddressUpdate, RouterAdvert, Unsupported
from .mobile import MobileDb
from .neighbours import NeighbourTable
from .protocol import TopologyProtocol
from .protocolstate import NEVER, Outgoing
from .routes import Routes



@dataclass(frozen=True, slots=True, kw_only=True)
class RouterInfo:
    """What this router knows of another (management, tests)."""

    instance: int | None
    ls_seq: int
    mobile_seq: int
    reachable: bool
    last_heard: float


class TopologyNode(TopologyProtocol):
    """One router's side of the inter-router protocol."""

    def __init__(self, router_id: str, instance: int, config: TopologyConfig | None = None) -> None:
        super().__init__(router_id, instance, config)
        self._published = self._routes  # what take_events last reported

    # --- inputs --------------------------------------------------------------------------------

    def neighbour_up(self, neighbour_id: str, cost: int = 1, *, now: float | None = None) -> None:
        """An inter-router connection is up. `cost` is this end's configured cost (the link's
        cost is the max of both ends'). Calling it again changes the cost."""
        self._clock(now)
        self._neighbours.up(neighbour_id, cost, self._now)
        self._send(neighbour_id, self._hello())
        self._refresh_own()

    def neighbour_down(self, neighbour_id: str, *, now: float | None = None) -> None:
        """The connection to a neighbour dropped: it is lost at once, without waiting for HELLOs."""
        self._clock(now)
        if self._neighbours.down(neighbour_id):
            self._ls_requests.forget_neighbour(neighbour_id)
            self._mobile_requests.forget_neighbour(neighbour_id)
            self._refresh_own()

    def hold_neighbour(self, neighbour_id: str, now: float) -> None:
        """The owner does not read `neighbour_id`'s connection now: its silence is not its own
        (neighbours.NeighbourTable.hold). Called before tick() while that lasts."""
        self._neighbours.hold(neighbour_id, now)

    def set_local_addresses(self, added: Iterable[str] = (), removed: Iterable[str] = ()) -> None:
        """Mobile addresses that gained their first / lost their last local consumer. Changes are
        merged until the next tick, which floods one differential MAU (ValueError on misuse)."""
        self._mobile.stage(added, removed)

    def receive(self, from_neighbour: str, message: ControlMessage | Unsupported, now: float) -> None:
        """A control message arrived on the connection to `from_neighbour`."""
        self._clock(now)
        if isinstance(message, Unsupported) or message.version > PROTOCOL_VERSION:
            if isinstance(message, Unsupported) and message.reason == "unknown opcode":
                self.counters.ignored_opcode += 1
            else:
                self.counters.ignored_version += 1
            return
        if from_neighbour not in self._neighbours.connected:
            self.counters.ignored_foreign += 1
            return
        received = self.counters.received
        received[message.OPCODE] = received.get(message.OPCODE, 0) + 1
        match message:
            case Hello():
                self._on_hello(from_neighbour, message)
            case RouterAdvert():
                self._on_ra(from_neighbour, message)
            case LinkStateRequest():
                self._on_lsr(from_neighbour, message)
            case LinkStateUpdate():
                self._on_lsu(from_neighbour, message)
            case MobileAddressRequest():
                self._on_mar(from_neighbour, message)
            case MobileAddressUpdate():
                self._on_mau(from_neighbour, message)

    def tick(self, now: float) -> None:
        """Run every timer due at `now`."""
        self._clock(now)
        cfg = self.config
        if self._neighbours.expire(now):
            self._refresh_own()
        for neighbour_id, silent_s in self._neighbours.silent(now):
            self._events.append(NeighbourSilent(router_id=neighbour_id, silent_s=silent_s))
        if now >= self._next_hello:
            self._send(None, self._hello())
            self._next_hello = now + cfg.hello_interval_s
        if self._mobile.has_staged:
            update = self._mobile.flush(self.router_id, self.instance)
            if update is not None:
                self._send(None, update)
                self._changed()
        if now >= self._next_ra:
            self._ra_seq += 1
            self._send(None, self._advert())
            flux = now < self._flux_until
            self._next_ra = now + (cfg.ra_interval_flux_s if flux else cfg.ra_interval_s)
        if self._routes_due is not None and now >= self._routes_due:
            self._recompute()
        if now >= self._next_sweep:
            self._sweep()
            self._next_sweep = now + cfg.hello_interval_s
        if now >= self._next_request:
            self._next_request = NEVER
            for target in sorted(self._ls_requests.wanted):
                self._request_ls(target)
            for target in sorted(self._mobile_requests.wanted):
                self._request_mobile(target, None)

    # --- outputs -------------------------------------------------------------------------------

    def take_outgoing(self) -> list[Outgoing]:
        """Messages to send, in order: (neighbour id, message), or (None, message) for all."""
        out, self._out = self._out, []
        return out

    def next_deadline(self) -> float:
        """When `tick` must next run (a time <= now means at once)."""
        deadlines = [self._next_hello, self._next_ra, self._next_sweep, self._next_request]
        if self._routes_due is not None:
            deadlines.append(self._routes_due)
        if self._mobile.has_staged:
            deadlines.append(self._now)
        expiry = self._neighbours.next_expiry()
        if expiry is not None:
            deadlines.append(expiry)
        return min(deadlines)

    def take_events(self) -> list[TopologyEvent]:
        """Events since the last call: restarts and duplicate ids as they happened, then one
        RoutesChanged and one AddressesChanged summarising everything since the last call."""
        events, self._events = self._events, []
        old, new = self._published, self._routes
        if new is not old and not new.same_as(old):
            added = new.reachable - old.reachable
            removed = old.reachable - new.reachable
            changed = frozenset(
                d for d in new.reachable & old.reachable
                if new.next_hops[d] != old.next_hops[d] or new.costs[d] != old.costs[d]
            )  # fmt: skip
            events.append(RoutesChanged(routes=new, added=added, removed=removed, changed=changed))
        self._published = new  # an equal value needs no event, nor another comparison
        changes = self._mobile.take_dirty() if self._mobile.has_dirty else None
        if changes:
            events.append(AddressesChanged(changes=changes))
        return events

    # --- read API ------------------------------------------------------------------------------

    @property
    def routes(self) -> Routes:
        """The current routes (recomputed route_delay_s after a change, in `tick`)."""
        return self._routes

    def address_table(self) -> dict[str, frozenset[str]]:
        """address -> remote routers with consumers for it (reachable ones only)."""
        return self._mobile.table()

    def routers_for(self, address: str) -> frozenset[str]:
        return self._mobile.routers_for(address)

    @property
    def local_addresses(self) -> frozenset[str]:
        return frozenset(self._mobile.local)

    @property
    def link_state(self) -> LinkState:
        """My own link state: two-way neighbours and my cost for each."""
        return self._ls.own

    @property
    def mobile_seq(self) -> int:
        return self._mobile.local_seq

    def link_states(self) -> dict[str, LinkState]:
        """Every real link state held, mine included (no provisional ones)."""
        states = {rid: r.link_state for rid, r in self._ls.routers.items() if r.link_state is not None}
        return {self.router_id: self._ls.own, **states}

    def routers(self) -> dict[str, RouterInfo]:
        """Every other router known, with its instance and seqs."""
        reachable = self._routes.reachable
        return {
            rid: RouterInfo(
                instance=r.instance, ls_seq=r.ls_seq, mobile_seq=self._mobile.held_seq(rid),
                reachable=rid in reachable, last_heard=r.last_heard,
            )
            for rid, r in sorted(self._ls.routers.items())
        }  # fmt: skip

    @property
    def neighbours(self) -> Mapping[str, int]:
        """Two-way neighbours and my cost for each (my link state's peers)."""
        return self._ls.own.peers

    def neighbour_heard(self, neighbour_id: str) -> bool:
        """True while `neighbour_id`'s connection is up and its HELLOs arrive (within its dead
        interval): that connection is alive."""
        neighbour = self._neighbours.connected.get(neighbour_id)
        return neighbour is not None and neighbour.alive()

    @property
    def routes_pending(self) -> bool:
        """True while a change waits for the next route computation."""
        return self._routes_due is not None
