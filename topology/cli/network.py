"""The network as the `topology` CLI sees it, and the answers it derives: pure data, no I/O.

Owns: `Network` (routers, their links with each end's cost, each router's own routes, where
addresses have consumers) built from management entities (`router`, `router.node`,
`router.address`), and the pure questions asked of it: which links there are and what they cost
(the max of both ends', as the routers compute it), the least-cost tree from a router, and which
destinations a message to an address would go to from a router, and by which path, and why;
whether a router passes attaches to an address on to a route container instead (its link routes,
`router.linkRouteReach`).
Must not touch: management sessions (gather.py), rendering (render.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from router.config.patterns import pattern_matches, prefix_matches, words

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


def link_routed(rows: list[dict[str, Any]], address: str) -> str | None:
    """What a router's link routes (its `router.linkRouteReach` rows) say of a message to
    `address`: None when no `in` route matches it (a sender's attach to it is a mobile address's);
    else the matching routes and where each is served from (matched as the routers match them:
    router.config.patterns)."""
    matching = []
    for row in rows:
        prefix, pattern = row.get("prefix"), row.get("pattern")
        if row.get("direction") != "in":
            continue
        if isinstance(prefix, str) and prefix:
            hit = prefix_matches(prefix, address)
        else:
            hit = isinstance(pattern, str) and pattern_matches(words(pattern), words(address))
        if hit:
            matching.append(row)
    if not matching:
        return None
    return "; ".join(
        f"{row.get('prefix') or row.get('pattern')}: served by {row.get('servedBy')} ({row.get('kind')}"
        + (f", next hop {row['nextHop']}" if row.get("nextHop") else "")
        + (", reachable)" if row.get("reachable") else ", not reachable now)")
        for row in matching
    )  # fmt: skip


def as_json(value: Any) -> Any:
    """Dataclasses of this module as plain JSON values."""
    if isinstance(value, (RouterInfo, AddressInfo, Choice)):
        return {k: as_json(v) for k, v in value.__dict__.items()}
    if isinstance(value, Link):
        return {"a": value.a, "b": value.b, "cost_a": value.cost_a, "cost_b": value.cost_b, "cost": value.cost,
                "two_way": value.two_way}  # fmt: skip
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(v) for v in value]
    return value
