"""Large router graphs on the topology simulator: the graphs (random geometric, rings of rings),
a network brought to its converged state without paying for N floods, the link whose loss moves
the most paths, and a run until every router holds the expected routes. Shared by
bench/topology.py (figures) and tests/test_topology_scale.py (bounds).

Owns: building and measuring large simulated networks. Must not touch: the protocol (topology/),
which it drives only through router.testing.topology_sim, except `preload`, which writes into
each router's link-state and mobile databases exactly what a cold start's LSUs would leave
there (tests/test_topology_scale.py checks that it does).
"""

from __future__ import annotations

import gc
import math
import random
import time
from typing import Any

from topology.config import TopologyConfig
from topology.graph import LinkState
from topology.messages import Hello
from topology.mobile import EMPTY_DIGEST
from topology.routes import Routes, compute_routes

from .topology_sim import Network

SIM_DELAY_S = 0.005  # one-way delay of every simulated link


def _names(n: int) -> list[str]:
    return [f"R{i:0{len(str(n - 1))}d}" for i in range(n)]


def _states(names: list[str], links: dict[tuple[int, int], int]) -> dict[str, LinkState]:
    peers: dict[str, dict[str, int]] = {name: {} for name in names}
    for (i, j), cost in links.items():
        peers[names[i]][names[j]] = peers[names[j]][names[i]] = cost
    return {name: LinkState(seq=1, peers=p) for name, p in peers.items()}


def geometric(n: int, degree: float = 8.0, seed: int = 1) -> dict[str, LinkState]:
    """Random geometric graph (routers on a unit square, linked within the radius that gives
    about `degree` neighbours each, costs 1-10), its components joined into one by a link
    between each pair of consecutive components."""
    rnd = random.Random(seed)
    points = [(rnd.random(), rnd.random()) for _ in range(n)]
    radius = math.sqrt(degree / (math.pi * n))
    cells: dict[tuple[int, int], list[int]] = {}
    for i, (x, y) in enumerate(points):
        cells.setdefault((int(x / radius), int(y / radius)), []).append(i)
    links: dict[tuple[int, int], int] = {}
    for (cx, cy), members in sorted(cells.items()):
        for dx in (-1, 0, 1):
            for dy in (-1, 0, 1):
                for j in cells.get((cx + dx, cy + dy), ()):
                    for i in members:
                        if i < j and math.dist(points[i], points[j]) <= radius:
                            links[(i, j)] = rnd.randint(1, 10)
    parent = list(range(n))

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for i, j in links:
        parent[find(i)] = find(j)
    roots = sorted({find(i) for i in range(n)})
    for a, b in zip(roots, roots[1:]):
        links[(min(a, b), max(a, b))] = rnd.randint(1, 10)
    return _states(_names(n), links)


def ring_of_rings(n: int) -> dict[str, LinkState]:
    """About sqrt(n) rings; ring k's routers 0 and size/2 link to the same routers of ring k+1
    (cost 1 within a ring, 5 between rings)."""
    rings = max(3, round(math.sqrt(n)))
    sizes = [n // rings + (1 if k < n % rings else 0) for k in range(rings)]
    starts = [sum(sizes[:k]) for k in range(rings)]
    links: dict[tuple[int, int], int] = {}
    for k, (start, size) in enumerate(zip(starts, sizes)):
        for i in range(size):
            a, b = start + i, start + (i + 1) % size
            if a != b:
                links[(min(a, b), max(a, b))] = 1
        nxt = (k + 1) % rings
        for offset in (0, size // 2):
            a, b = start + offset % size, starts[nxt] + offset % sizes[nxt]
            links[(min(a, b), max(a, b))] = 5
    return _states(_names(n), links)


def preload(net: Network) -> None:
    """Hand every router the current link state of every other one, as the LSUs of a cold
    start would (observe the origin, offer its link state, note its advertised mobile seq 0),
    without sending N * N messages through the simulator. Each router recomputes its routes at
    its next tick."""
    truth = net.truth()
    instances = {node.router_id: node.instance for node in net.nodes.values()}
    # N * N records, none of them garbage: the cyclic collector would walk all of them again
    # and again as they are made (about two thirds of the time at 1,000 routers).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for name, node in net.nodes.items():
            ls, mobile, now = node._ls, node._mobile, net.now
            for rid, state in truth.items():
                if rid != node.router_id:
                    ls.observe(rid, instances[rid], now)
                    ls.offer(rid, state)
                    mobile.advertised(rid, instances[rid], 0, EMPTY_DIGEST)
            node._routes_dirty()
            net._after(name)  # re-arm its timer for the route computation
    finally:
        if collecting:
            gc.enable()


def build_network(states: dict[str, LinkState], config: TopologyConfig, *, delay: float = SIM_DELAY_S) -> Network:
    """A router per link state and a link per two-way pair, at the first router's cost; nothing
    has run yet. Messages travel as objects (`codec=False`)."""
    net = Network(config, delay=delay, codec=False)
    for name in sorted(states):
        net.add(name)
    for a, state in sorted(states.items()):
        for b, cost in state.peers.items():
            if a < b:
                net.link(a, b, cost)
    return net


def warm_network(states: dict[str, LinkState], config: TopologyConfig, *, delay: float = SIM_DELAY_S) -> Network:
    """A network whose routers already hold every link state, as after a cold start: HELLOs
    only until every link is two-way and the start-up adverts are over, then `preload`, then
    one second for every router to compute its routes. Control messages are encoded from then
    on."""
    net = build_network(states, config, delay=delay)
    for link in net.links.values():
        link.drop = lambda sender, receiver, message: not isinstance(message, Hello)
    net.run_for(config.flux_period_s + 2 * config.ra_interval_flux_s)
    preload(net)
    net.run_for(1.0)
    for link in net.links.values():
        link.drop = None
    net.codec = True
    return net


def failing_link(states: dict[str, LinkState]) -> tuple[str, str]:
    """The middle link of the least-cost path between a router and the one farthest from it,
    chosen among links whose loss keeps the network connected."""
    names = sorted(states)
    routes = compute_routes(states, names[0])
    far = max(routes.costs, key=lambda d: (routes.costs[d], d))
    path = [names[0]]
    while path[-1] != far:
        path.append(compute_routes(states, path[-1]).next_hops[far])
    middle = len(path) // 2
    for i in sorted(range(len(path) - 1), key=lambda i: abs(i - middle)):
        a, b = path[i], path[i + 1]
        cut = dict(states)
        cut[a] = LinkState(seq=2, peers={p: c for p, c in states[a].peers.items() if p != b})
        if len(compute_routes(cut, a).reachable) == len(states) - 1:
            return a, b
    raise RuntimeError("no link can fail without a partition")


def converge(net: Network, expected: dict[str, Routes] | None = None, limit_s: float = 60.0) -> dict[str, Any]:
    """Run until every router's routes are the expected ones (checked every virtual ms), and
    return what it took: protocol rounds, virtual and wall seconds, messages by opcode, route
    computations. Without `expected`, a router has converged when it holds every router's
    current link state and has no computation pending (its routes are then those of the
    truth: compute_routes is a pure function of the link states)."""
    net.reset_rounds()
    sent = dict(net.stats.by_opcode)
    computations = sum(node.counters.route_computations for node in net.nodes.values())
    checked: dict[str, tuple[Any, bool]] = {}  # name -> (routes, converged with them)
    checking = [0.0]  # seconds spent checking, not simulating
    truth = net.truth()

    def holds_truth(name: str) -> bool:
        held = net.nodes[name].link_states()
        return all(held.get(rid) == state for rid, state in truth.items())

    def done(name: str) -> bool:
        node = net.nodes[name]
        hit = checked.get(name)
        if hit is None or hit[0] is not node.routes:
            ok = node.routes.same_as(expected[name]) if expected is not None else holds_truth(name)
            hit = checked[name] = (node.routes, ok)
        return hit[1] and not node.routes_pending

    def converged() -> bool:
        started = time.perf_counter()
        result = all(done(name) for name in net.nodes)
        checking[0] += time.perf_counter() - started
        return result

    start_virtual, started = net.now, time.perf_counter()
    net.run_until(converged, limit_s, check_every=0.001)
    wall = time.perf_counter() - started - checking[0]
    messages = {op: count - sent.get(op, 0) for op, count in net.stats.by_opcode.items()}
    return {
        "rounds": net.rounds, "virtual_s": net.now - start_virtual, "wall_s": wall,
        "messages": {op: count for op, count in sorted(messages.items()) if count and op != "HELLO"},
        "route_computations": sum(n.counters.route_computations for n in net.nodes.values()) - computations,
    }  # fmt: skip
