"""The network as the `topology` CLI sees it, and the answers it derives: pure data, no I/O.

Owns: `Network` (routers, their links with each end's cost, each router's own routes, where
addresses have consumers) built from management entities (`router`, `router.node`,
`router.address`), and the pure questions asked of it: which links there are and what they cost
(the max of both ends', as the routers compute it), the least-cost tree from a router, and which
destinations a message to an address would go to from a router, and by which path, and why;
whether a router passes attaches to an address on to a route container instead (its link routes,
`router.linkRouteReach`, read as `RouteReach`), and where to, or refuses them, as the router's
own choice goes (router.core.linkroute; matched with router.config.patterns, the CLI may not
import the core): one reading for `topology path` and `topology address`.
Must not touch: management sessions (gather.py), rendering (render.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from router.config.patterns import pattern_matches, prefix_matches, specificity, words

from ..graph import LinkState
from ..routes import compute_routes


@dataclass
class RouterInfo:
    """One router: what it says of itself, merged with what the bus router says of it."""

    id: str
    reachable: bool = True  # from the bus router
    next_hop: str | None = None  # from the bus router (None: the bus router itself)
    cost: int | None = None  # from the bus router
    instance: int | None = None
    link_costs: dict[str, int | None] = field(default_factory=dict)  # neighbour -> this end's cost
    routes: dict[str, tuple[str, int]] | None = None  # its own view: destination -> (next hop, cost)
    valid_origins: dict[str, list[str]] = field(default_factory=dict)
    error: str | None = None  # why its own view could not be read


@dataclass(frozen=True)
class Link:
    a: str
    b: str
    cost_a: int | None  # a's configured cost
    cost_b: int | None

    @property
    def cost(self) -> int | None:
        """The link's cost: the max of both ends' (None while an end's cost is unknown)."""
        if self.cost_a is None or self.cost_b is None:
            return self.cost_a if self.cost_b is None else self.cost_b
        return max(self.cost_a, self.cost_b)

    @property
    def two_way(self) -> bool:
        """Both ends list each other (a one-way claim carries no traffic)."""
        return self.cost_a is not None and self.cost_b is not None


@dataclass
class AddressInfo:
    """An address as one router sees it."""

    address: str
    distribution: str
    local_consumers: int
    remote_routers: list[str]


@dataclass
class Network:
    bus: str  # the router we asked
    routers: dict[str, RouterInfo]

    def links(self) -> list[Link]:
        """Every link some router advertises, once, sorted; one-way claims included (two_way)."""
        seen: dict[tuple[str, str], Link] = {}
        for rid, info in self.routers.items():
            for peer, cost in info.link_costs.items():
                a, b = sorted((rid, peer))
                old = seen.get((a, b), Link(a, b, None, None))
                seen[(a, b)] = Link(a, b, cost if rid == a else old.cost_a, cost if rid == b else old.cost_b)
        return [seen[key] for key in sorted(seen)]

    def link_states(self) -> dict[str, LinkState]:
        """Link states as the routers would compute routes from them (unknown costs count as 1)."""
        return {
            rid: LinkState(seq=0, peers={p: (c if c is not None else 1) for p, c in info.link_costs.items()})
            for rid, info in self.routers.items()
        }

    def routes_of(self, router: str) -> dict[str, tuple[str, int]]:
        """Router `router`'s routes: its own answer when we have it, else computed from the link
        states with the routers' rules (identical when the network has converged)."""
        info = self.routers.get(router)
        if info is not None and info.routes is not None:
            return info.routes
        routes = compute_routes(self.link_states(), router)
        return {d: (routes.next_hops[d], routes.costs[d]) for d in routes.next_hops}

    def path(self, source: str, destination: str) -> list[str]:
        """The routers a message from `source` to router `destination` crosses, both included,
        following each router's own next hop (as forwarding does). Raises LookupError when
        some router on the way has no route."""
        path = [source]
        while path[-1] != destination:
            hop = self.routes_of(path[-1]).get(destination)
            if hop is None:
                raise LookupError(f"{path[-1]} has no route to {destination}")
            if hop[0] in path:
                raise LookupError(f"routing loop: {' -> '.join([*path, hop[0]])}")
            path.append(hop[0])
        return path


@dataclass
class Choice:
    """Where a message to an address goes from one router, and why."""

    address: str
    source: str
    distribution: str
    candidates: dict[str, int]  # router with consumers -> cost from source (0: source itself)
    chosen: list[str]
    reason: str
    paths: dict[str, list[str]]
    # Set when an `in` link route matches the address at `source` (link_routed): a sender's
    # attach to it goes to a route container; the paths are those of messages sent on an
    # anonymous link with `to` set to it, which the address table routes.
    link_routed: str | None = None


def choose(network: Network, source: str, info: AddressInfo) -> Choice:
    """The destinations of a message to `info.address` entering at `source` (the routers' rules:
    closest = least cost, round robin among equals; balanced = least cost plus outstanding work,
    which only the router knows at the time; multicast = every router with consumers)."""
    routes = network.routes_of(source)
    candidates: dict[str, int] = {}
    if info.local_consumers:
        candidates[source] = 0
    for rid in info.remote_routers:
        if rid in routes:
            candidates[rid] = routes[rid][1]
    if not candidates:
        raise LookupError(f"no consumers for {info.address!r} reachable from {source}")
    best = min(candidates.values())
    if info.distribution == "multicast":
        chosen, reason = sorted(candidates), "multicast: one copy to every router with consumers (one per next hop)"
    elif info.distribution == "closest":
        chosen = sorted(r for r, c in candidates.items() if c == best)
        reason = f"closest: least cost {best}" + (f", round robin among {len(chosen)}" if len(chosen) > 1 else "")
    else:
        chosen = sorted(r for r, c in candidates.items() if c == best)
        reason = (
            f"balanced: cost plus outstanding deliveries; with none outstanding the least cost ({best}) wins"
            + (f" among {len(chosen)}" if len(chosen) > 1 else "")
        )
    paths = {r: network.path(source, r) for r in chosen}
    return Choice(info.address, source, info.distribution, candidates, chosen, reason, paths)


@dataclass(frozen=True)
class RouteReach:
    """One place a link route is served from, as one router sees it: a `router.linkRouteReach`
    row (router/management/link_reach.py), listed in the order an attach tries them."""

    direction: str  # in: a sender's attach (its target); out: a receiver's (its source)
    prefix: str | None
    pattern: str | None
    kind: str  # local (a container connected here) | edge | interior | uplink
    served_by: str  # "local", an edge router's or an interior router's id, or "uplink"
    route: str | None  # local: the configured route's name
    containers: int | None  # local: route containers connected here now
    next_hop: str | None
    cost: int | None
    reachable: bool  # an attach can go this way now

    @property
    def match(self) -> str:
        """The route as configured: `prefix queue` or `pattern *.eu.#`."""
        return f"prefix {self.prefix}" if self.prefix is not None else f"pattern {self.pattern}"

    def describe(self) -> str:
        """`queue: served by C (interior, next hop B, reachable)`."""
        return (f"{self.prefix or self.pattern}: served by {self.served_by} ({self.kind}"
                + (f", next hop {self.next_hop}" if self.next_hop else "")
                + (", reachable)" if self.reachable else ", not reachable now)"))  # fmt: skip


def _count(value: Any) -> int | None:
    # int(): AMQP longs arrive as an int subclass that prints as Long(1).
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str) and value else None


def matching_routes(rows: list[dict[str, Any]], address: str, direction: str | None = None) -> list[RouteReach]:
    """The rows of a router's `router.linkRouteReach` whose route matches `address` (in
    `direction`, or either), in the router's order; matched as the routers match them
    (router.config.patterns)."""
    matching = []
    for row in rows:
        prefix, pattern = _text(row.get("prefix")), _text(row.get("pattern"))
        row_direction = row.get("direction")
        if row_direction not in ("in", "out") or (direction is not None and row_direction != direction):
            continue
        if prefix is not None:
            hit = prefix_matches(prefix, address)
        else:
            hit = pattern is not None and pattern_matches(words(pattern), words(address))
        if hit:
            matching.append(RouteReach(
                direction=str(row_direction), prefix=prefix, pattern=None if prefix is not None else pattern,
                kind=str(row.get("kind")), served_by=str(row.get("servedBy")), route=_text(row.get("route")),
                containers=_count(row.get("containerCount")), next_hop=_text(row.get("nextHop")),
                cost=_count(row.get("cost")), reachable=row.get("reachable") is True,
            ))  # fmt: skip
    return matching


def link_routed(rows: list[dict[str, Any]], address: str) -> str | None:
    """What a router's link routes (its `router.linkRouteReach` rows) say of a message to
    `address`: None when no `in` route matches it (a sender's attach to it is a mobile address's);
    else the matching routes and where each is served from."""
    return "; ".join(r.describe() for r in matching_routes(rows, address, "in")) or None


_KINDS = (("local",), ("edge",), ("interior", "uplink"))  # the order an attach tries them


def attach_goes(routes: list[RouteReach], direction: str) -> RouteReach | None:
    """Where a client's attach in `direction` goes from the router whose matching rows these
    are, as the router chooses (router.core.linkroute, `_find`): a container connected here,
    then an edge router, then another router (or, on an edge, the uplink); within each, the most
    specific matching route only (router.config.patterns.specificity; among equally specific
    ones the router's configuration order, here the first listed), and in it the first row that
    is reachable (rows come in the order the router tries them). None: no reachable way (the
    attach is refused with amqp:not-found when some route matched)."""
    for kinds in _KINDS:
        rows = [r for r in routes if r.direction == direction and r.kind in kinds]
        if not rows:
            continue
        best = max(specificity(r.prefix, r.pattern) for r in rows)
        chosen = next(r for r in rows if specificity(r.prefix, r.pattern) == best)
        if kinds == ("local",):  # one configured route is tried (each of its containers)
            if chosen.reachable:
                return chosen
            continue
        for row in rows:  # a learnt route: its routers in turn
            if (row.prefix, row.pattern) == (chosen.prefix, chosen.pattern) and row.reachable:
                return row
    return None


LINK_ROUTED, REFUSED, MOBILE = "link-routed", "refused", "mobile"


@dataclass
class AddressAt:
    """An address as one router sees it: its entry in the address table (None: none) and the
    link routes matching it there (its `router.linkRouteReach` rows), or why it did not answer."""

    router: str
    info: AddressInfo | None = None
    routes: list[RouteReach] = field(default_factory=list)
    error: str | None = None

    def attach(self, direction: str) -> str | None:
        """What this router does with a client's attach to the address in `direction` (in: a
        sender's, out: a receiver's): LINK_ROUTED (passed on towards a route container; the
        link's messages are not routed by the address table), REFUSED (a route matches, no
        container is reachable: amqp:not-found) or MOBILE (attached here, its messages routed by
        the address table); None when the router did not answer. Link routes come first
        (router.core.attach: `link_routes.attach` before a producer or consumer is made)."""
        if self.error is not None:
            return None
        if not any(r.direction == direction for r in self.routes):
            return MOBILE
        return LINK_ROUTED if attach_goes(self.routes, direction) is not None else REFUSED


def route_containers(seen: list[AddressAt]) -> list[str]:
    """Where route containers for the address's link routes are connected, from every view:
    `A (route in:q, 1 container)` for containers on an interior router, `edge router E (through
    B, in)` for one behind an edge router."""
    local: dict[str, list[str]] = {}
    edges: dict[str, None] = {}
    for at in seen:
        for r in at.routes:
            if r.kind == "local" and r.containers:
                plural = "s" if r.containers != 1 else ""
                local.setdefault(at.router, []).append(f"route {r.route}, {r.containers} container{plural}")
            elif r.kind == "edge":
                edges[f"edge router {r.served_by} (through {at.router}, {r.direction})"] = None
    return [f"{rid} ({'; '.join(routes)})" for rid, routes in local.items()] + list(edges)


def as_json(value: Any) -> Any:
    """Dataclasses of this module as plain JSON values."""
    if isinstance(value, (RouterInfo, AddressInfo, Choice, RouteReach)):
        return {k: as_json(v) for k, v in value.__dict__.items()}
    if isinstance(value, AddressAt):
        return {"router": value.router, "address": as_json(value.info), "error": value.error,
                "senders": value.attach("in"), "receivers": value.attach("out"), "link_routes": as_json(value.routes)}  # fmt: skip
    if isinstance(value, Link):
        return {"a": value.a, "b": value.b, "cost_a": value.cost_a, "cost_b": value.cost_b, "cost": value.cost,
                "two_way": value.two_way}  # fmt: skip
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value
