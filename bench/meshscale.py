"""A mesh of many real router processes on this machine: convergence, control traffic, memory.

    python bench/meshscale.py [--routers 50] [--graph ring-chords|random] [--stable-s 10]

Starts `--routers` `router run` processes on loopback (router/testing/meshprocs.py: each
router dials its lower-numbered neighbours), then reports
- the time from the last router's start until every router has a next hop to every other;
- control traffic when stable: bytes each router writes per second (from /proc/PID/io, which
  counts socket writes; logging is at warning level so almost nothing else is written);
- memory: each router's resident set (VmRSS);
- after one router is killed (SIGKILL: its neighbours see the sockets drop), the time until
  every other router has dropped it and has routes to all the rest.
The graph: a ring with chords (each router linked to the next and to the one 7 ahead), or a
connected random graph with the same number of links (networkx, fixed seed). Figures are
reported, not asserted; the routers run the checkout's build.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from router.build_info import build_info  # noqa: E402
from router.testing.meshprocs import MeshProcesses  # noqa: E402


def edges(n: int, graph: str) -> str:
    names = [f"R{i:02d}" for i in range(n)]
    ring = {(i, (i + 1) % n) for i in range(n)} | {(i, (i + 7) % n) for i in range(n)}
    if graph == "ring-chords":
        pairs = ring
    else:
        g = nx.gnm_random_graph(n, len(ring), seed=7)
        while not nx.is_connected(g):
            components = list(nx.connected_components(g))
            g.add_edge(min(components[0]), min(components[1]))
        pairs = set(g.edges())
    return " ".join(f"{names[a]}-{names[b]}" for a, b in sorted({tuple(sorted(p)) for p in pairs}))


def proc_value(pid: int, path: str, key: str) -> int:
    for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    raise KeyError(key)


async def converged(mesh: MeshProcesses, names: list[str], gone: str | None = None) -> float:
    """Seconds until each of `names` has a next hop to every other (and none to `gone`)."""
    started = time.perf_counter()
    with trio.fail_after(600):
        for name in names:
            while True:
                hops = {row["id"] for row in await mesh.nodes(name) if row.get("nextHop")}
                if set(names) - {name} <= hops and gone not in hops:
                    break
                await trio.sleep(0.1)
    return time.perf_counter() - started


async def main(n: int, graph: str, stable_s: float) -> None:
    spec = edges(n, graph)
    with tempfile.TemporaryDirectory() as directory:
        mesh = MeshProcesses(Path(directory), spec, hello_interval_s=1.0, dead_interval_s=3.0)
        started = time.perf_counter()
        with mesh:
            start_s = time.perf_counter() - started
            names = list(mesh.processes)
            after_start = await converged(mesh, names)
            pids = {name: p.proc.pid for name, p in mesh.processes.items() if p.proc is not None}
            written = {name: proc_value(pid, "io", "wchar") for name, pid in pids.items()}
            await trio.sleep(stable_s)  # the stable mesh: HELLOs and periodic advertisements only
            rates = [(proc_value(pid, "io", "wchar") - written[name]) / stable_s for name, pid in pids.items()]
            rss = [proc_value(pid, "status", "VmRSS") for pid in pids.values()]
            victim = names[len(names) // 2]
            mesh.kill(victim)
            after_kill = await converged(mesh, [m for m in names if m != victim], victim)
    print(f"{n} router processes ({graph}, {len(spec.split())} links), hot path {build_info().describe()}")
    print(f"  start of all processes:          {start_s:8.1f} s")
    print(f"  converged after the last start:  {after_start:8.1f} s")
    print(f"  control traffic when stable:     {statistics.median(rates):8.0f} B/s per router (median; max {max(rates):.0f})")
    print(f"  resident memory:                 {statistics.median(rss) / 1024:8.1f} MiB per router (median; max {max(rss) / 1024:.1f})")
    print(f"  converged after killing {victim}:  {after_kill:8.1f} s (dead interval 3 s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--routers", type=int, default=50)
    parser.add_argument("--graph", choices=["ring-chords", "random"], default="ring-chords")
    parser.add_argument("--stable-s", type=float, default=10.0)
    args = parser.parse_args()
    trio.run(main, args.routers, args.graph, args.stable_s)
