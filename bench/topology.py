"""Topology benchmarks: route computation at scale, and a large network converging after a link
failure, all in process (no sockets). `python -m bench topology [--quick]`.

- routes: random geometric graphs (routers on a unit square, linked within the radius that gives
  about 8 neighbours each, costs 1-10) and rings of rings (about sqrt(n) rings of sqrt(n)
  routers, cost 1 within a ring, two links of cost 5 from each ring to the next), with 100,
  1,000 and 5,000 interior routers. For a few sample routers: `compute_routes` (one Dijkstra:
  next hops, costs, hops, radius); the valid origins of one destination on first use (one
  bounded Dijkstra, what a router pays the first time multicast goes to that destination); and
  the valid origins of every destination at one router (what the anchors compute on every
  change). CPU time (time.process_time), medians over the sample routers.
- convergence: 1,000 routers (random geometric) on the simulator of router/testing/topology_sim.py
  with every control message encoded and decoded; the network is brought to its converged state,
  then one link on a long path fails, and later comes back. Reported: protocol rounds (the
  longest chain of control messages, each sent in reaction to the one before), virtual seconds
  with a 5 ms one-way delay per link, wall seconds of the simulation (every router's work, one
  after the other, in this one process) and the messages sent.

`--quick` leaves out the valid origins of all destinations at 5,000 routers (about a minute).
"""

from __future__ import annotations

import math
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from router.testing.topology_sim import Network
from topology.config import TopologyConfig
from topology.messages import Hello, LinkStateUpdate
from topology.mobile import EMPTY_DIGEST
from topology.routes import LinkState, compute_routes

SIZES = (100, 1000, 5000)
SIM_ROUTERS = 1000
SIM_DELAY_S = 0.005


# --- graphs ----------------------------------------------------------------------------------------


def _names(n: int) -> list[str]:
    return [f"R{i:0{len(str(n - 1))}d}" for i in range(n)]


def _states(names: list[str], links: dict[tuple[int, int], int]) -> dict[str, LinkState]:
    peers: dict[str, dict[str, int]] = {name: {} for name in names}
    for (i, j), cost in links.items():
        peers[names[i]][names[j]] = peers[names[j]][names[i]] = cost
    return {name: LinkState(seq=1, peers=p) for name, p in peers.items()}


def geometric(n: int, degree: float = 8.0, seed: int = 1) -> dict[str, LinkState]:
    """Random geometric graph, its components joined into one by a link between each pair of
    consecutive components."""
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
    """About sqrt(n) rings; ring k's routers 0 and size/2 link to the same routers of ring k+1."""
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


# --- route computation ---------------------------------------------------------------------------


def _cpu(fn: Callable[[], Any]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def bench_routes(kind: str, states: dict[str, LinkState], all_origins: bool, samples: int = 5) -> dict[str, Any]:
    rnd = random.Random(7)
    names = sorted(states)
    routers = rnd.sample(names, min(samples, len(names)))
    route_s, one_s, all_s = [], [], []
    radius = 0
    for me in routers:
        route_s.append(min(_cpu(lambda: compute_routes(states, me)) for _ in range(3)))
        routes = compute_routes(states, me)
        radius = max(radius, routes.radius)
        for dest in rnd.sample(sorted(routes.next_hops), min(20, len(routes.next_hops))):
            one_s.append(_cpu(lambda: routes.valid_origins(dest)))
    if all_origins:
        for me in routers[: 3 if len(names) <= 1000 else 2]:
            routes = compute_routes(states, me)
            all_s.append(_cpu(routes.all_valid_origins))
    links = sum(len(s.peers) for s in states.values()) // 2
    result: dict[str, Any] = {
        "graph": kind, "routers": len(states), "links": links, "radius_max": radius,
        "compute_routes_cpu_ms": statistics.median(route_s) * 1000,
        "valid_origins_one_dest_cpu_ms": statistics.median(one_s) * 1000,
    }  # fmt: skip
    if all_s:
        result["valid_origins_all_dests_cpu_s"] = statistics.median(all_s)
        result["valid_origins_all_dests_cpu_s_max"] = max(all_s)
    return result


# --- convergence ---------------------------------------------------------------------------------


def warm_network(states: dict[str, LinkState], config: TopologyConfig) -> Network:
    """A network whose routers already hold every link state, as after a cold start, without
    paying for N floods in the simulator: HELLOs only until every link is two-way and the
    start-up adverts are over, then each router is handed every link state by a neighbour."""
    net = Network(config, delay=SIM_DELAY_S, codec=False)
    for name in sorted(states):
        net.add(name)
    for a, state in sorted(states.items()):
        for b, cost in state.peers.items():
            if a < b:
                net.link(a, b, cost)
    for link in net.links.values():
        link.drop = lambda sender, receiver, message: not isinstance(message, Hello)
    net.run_for(config.flux_period_s + 2 * config.ra_interval_flux_s)
    truth = net.truth()
    for name, node in sorted(net.nodes.items()):
        neighbour = next(iter(node.neighbours))
        for rid, state in truth.items():
            if rid != node.router_id:
                update = LinkStateUpdate(router_id=rid, instance=net.nodes[rid].instance, link_state=state,
                                         mobile_seq=0, digest=EMPTY_DIGEST)  # fmt: skip
                node.receive(neighbour, update, net.now)
        node.take_outgoing()  # requests for what it now holds: nothing to send
    net.run_for(1.0)
    for link in net.links.values():
        link.drop = None
    net.codec = True
    return net


def _converge(net: Network, expected: dict[str, Any], limit_s: float = 60.0) -> dict[str, Any]:
    """Run until every router's routes are the expected ones (checked every virtual ms)."""
    net.reset_rounds()
    sent = dict(net.stats.by_opcode)
    computations = sum(node.counters.route_computations for node in net.nodes.values())
    checked: dict[str, tuple[Any, bool]] = {}  # name -> (routes, equal to the expected ones)
    checking = [0.0]  # seconds spent checking, not simulating

    def done(name: str) -> bool:
        node = net.nodes[name]
        hit = checked.get(name)
        if hit is None or hit[0] is not node.routes:
            hit = checked[name] = (node.routes, node.routes.same_as(expected[name]))
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


def _failing_link(states: dict[str, LinkState]) -> tuple[str, str]:
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


def bench_convergence(n: int) -> dict[str, Any]:
    states = geometric(n)
    config = TopologyConfig(ra_interval_s=600.0, remote_ls_max_age_s=1200.0)  # no periodic RA floods
    started = time.perf_counter()
    net = warm_network(states, config)
    setup_s = time.perf_counter() - started
    a, b = _failing_link(states)
    whole = {name: node.routes for name, node in net.nodes.items()}
    result: dict[str, Any] = {"routers": n, "links": len(net.links), "link_delay_ms": SIM_DELAY_S * 1000,
                              "failed_link": f"{a}-{b}", "setup_wall_s": setup_s}  # fmt: skip
    before = whole
    for phase, action in (("link_down", net.cut), ("link_up", net.restore)):
        action(a, b)
        if phase == "link_down":  # both ends know at once: the truth is already the new one
            truth = net.truth()
            expected = {name: compute_routes(truth, node.router_id) for name, node in net.nodes.items()}
        else:  # two-way again after a HELLO exchange: the routes of the whole network
            expected = whole
        moved = sum(
            1 for name in net.nodes
            if expected[name].next_hops != before[name].next_hops or expected[name].costs != before[name].costs
        )  # fmt: skip
        result[phase] = {"routers_whose_routes_change": moved, **_converge(net, expected)}
        before = expected
    return result


# --- entry point ---------------------------------------------------------------------------------


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1000:.2f} ms"


def run() -> dict[str, Any]:
    quick = "--quick" in sys.argv[1:]
    console = Console(width=max(100, Console().width))
    graphs: dict[str, Any] = {}
    for n in SIZES:
        for kind, make in (("geometric", geometric), ("ring-of-rings", ring_of_rings)):
            console.print(f"routes: {kind} {n} ...")
            graphs[f"{kind}-{n}"] = bench_routes(kind, make(n), all_origins=not (quick and n > 1000))
    table = Table("graph", "routers", "links", "radius", "routes", "VO 1 dest", "VO all dests",
                  title="route computation, CPU (VO: valid origins)")  # fmt: skip
    for row in graphs.values():
        every = row.get("valid_origins_all_dests_cpu_s")
        table.add_row(
            row["graph"], f"{row['routers']:,}", f"{row['links']:,}", str(row["radius_max"]),
            _duration(row["compute_routes_cpu_ms"] / 1000), _duration(row["valid_origins_one_dest_cpu_ms"] / 1000),
            "-" if every is None else _duration(every),
        )  # fmt: skip
    console.print(table)
    console.print(f"convergence: {SIM_ROUTERS} routers ...")
    convergence = bench_convergence(SIM_ROUTERS)
    table = Table("link", "routes move", "rounds", "virtual", "wall", "RA / LSR / LSU",
                  title=f"{SIM_ROUTERS} routers, {convergence['links']:,} links: {convergence['failed_link']}")  # fmt: skip
    for phase in ("link_down", "link_up"):
        row = convergence[phase]
        sent = " / ".join(f"{row['messages'].get(op, 0):,}" for op in ("RA", "LSR", "LSU"))
        table.add_row(phase.removeprefix("link_"), f"{row['routers_whose_routes_change']:,}", str(row["rounds"]),
                      _duration(row["virtual_s"]), _duration(row["wall_s"]), sent)  # fmt: skip
    console.print(table)
    return {"routes": graphs, "convergence": convergence}
