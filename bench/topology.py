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
  (graphs and the warm start in router/testing/topology_scale.py)
  with every control message encoded and decoded; the network is brought to its converged state,
  then one link on a long path fails, and later comes back. Reported: protocol rounds (the
  longest chain of control messages, each sent in reaction to the one before), virtual seconds
  with a 5 ms one-way delay per link, wall seconds of the simulation (every router's work, one
  after the other, in this one process) and the messages sent.

`--quick` leaves out the valid origins of all destinations at 5,000 routers (about a minute).
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from router.testing.topology_scale import SIM_DELAY_S, converge, failing_link, geometric, ring_of_rings, warm_network
from topology.config import TopologyConfig
from topology.graph import LinkState
from topology.routes import compute_routes

SIZES = (100, 1000, 5000)
SIM_ROUTERS = 1000


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


def bench_convergence(n: int) -> dict[str, Any]:
    states = geometric(n)
    config = TopologyConfig(ra_interval_s=600.0, remote_ls_max_age_s=1200.0)  # no periodic RA floods
    started = time.perf_counter()
    net = warm_network(states, config)
    setup_s = time.perf_counter() - started
    a, b = failing_link(states)
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
        result[phase] = {"routers_whose_routes_change": moved, **converge(net, expected)}
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
