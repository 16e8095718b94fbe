"""Several router processes on one host as one interior mesh, against one process: many
independent flows, and what a flow costs when its producer and consumer landed in different
processes (see docs/multicore.md).

K flows at once, each a `loadgen send` and a `loadgen receive` on an address of its own (100 B
unsettled, N messages each). Layouts:
- one:      one router process, every client on it;
- local:    two router processes meshed on loopback (interior, one inter-router connection), each
            flow's two ends on the same process, flows alternating between them: the best a
            shared port (SO_REUSEPORT) could do, when the kernel happens to put both ends of
            every flow together;
- crossing: the same two processes, every flow's producer on one and its consumer on the other
            (alternating directions): the worst.
A kernel spreading clients over P processes by their source port puts both ends of a flow in the
same one with probability 1/P: with two, half the flows are local and half cross. Reported per
layout: the aggregate rate (all messages / wall time from the first send to the last arrival), the
routers' CPU per message (all router processes together), each router's CPU share.

    python -m bench.multicore [--flows 4] [--count 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .loadgen.build import build
from .scenarios import BUILD, Router, _finish, _loadgen, chain, router


def _run_flows(binary: Path, placements: list[tuple[Router, Router]], routers: list[Router], count: int) -> dict[str, Any]:
    """Each placement is (the sender's router, the receiver's router) of one flow."""
    tag = time.monotonic_ns()
    receivers = [
        _loadgen(binary, "receive", "--host", "127.0.0.1", "--port", str(rx.port), "--address", f"mc-{tag}-{i}",
                 "--count", str(count))
        for i, (_, rx) in enumerate(placements)
    ]  # fmt: skip
    time.sleep(0.5)  # every receiver's address must have reached every router before its sender asks for credit
    cpu0 = [r.cpu_seconds() for r in routers]
    start = time.monotonic()
    senders = [
        _loadgen(binary, "send", "--host", "127.0.0.1", "--port", str(tx.port), "--address", f"mc-{tag}-{i}",
                 "--count", str(count), "--size", "100")
        for i, (tx, _) in enumerate(placements)
    ]  # fmt: skip
    for s in senders:
        _finish("send", s)
    got = [_finish("receive", r) for r in receivers]
    wall = time.monotonic() - start
    cpu = [r.cpu_seconds() - c for r, c in zip(routers, cpu0)]
    total = count * len(placements)
    if any(g.get("count", 0) < count for g in got):
        raise RuntimeError(f"a receiver got fewer than {count} messages: {got}")
    return {"msgs_per_s": total / wall, "router_cpu_us_per_msg": sum(cpu) / total * 1e6,
            "router_cpu_share": [c / wall for c in cpu]}  # fmt: skip


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "msgs_per_s": statistics.median(r["msgs_per_s"] for r in runs),
        "router_cpu_us_per_msg": statistics.median(r["router_cpu_us_per_msg"] for r in runs),
        "router_cpu_share": [statistics.median(r["router_cpu_share"][i] for r in runs) for i in range(len(runs[0]["router_cpu_share"]))],
        "runs": [round(r["msgs_per_s"]) for r in runs],
    }  # fmt: skip


def run(flows: int, count: int, rounds: int) -> dict[str, Any]:
    binary = build(BUILD)
    results: dict[str, Any] = {"flows": flows, "count_per_flow": count}
    one: list[dict[str, Any]] = []
    local: list[dict[str, Any]] = []
    crossing: list[dict[str, Any]] = []
    with router() as r, chain(2) as (r1, r2):
        time.sleep(1.0)  # the two routers see each other
        for _ in range(rounds):
            one.append(_run_flows(binary, [(r, r)] * flows, [r], count))
            local.append(_run_flows(binary, [(r1, r1) if i % 2 == 0 else (r2, r2) for i in range(flows)], [r1, r2], count))
            crossing.append(_run_flows(binary, [(r1, r2) if i % 2 == 0 else (r2, r1) for i in range(flows)], [r1, r2], count))
    results["one"], results["local"], results["crossing"] = _median(one), _median(local), _median(crossing)
    # What a kernel spreading the clients over two processes gives on average: half the flows
    # local, half crossing (CPU per message is the mean of the two; so is the time per message).
    half = 0.5 * (1 / results["local"]["msgs_per_s"] + 1 / results["crossing"]["msgs_per_s"])
    results["two_processes_spread_by_kernel_estimate"] = {
        "msgs_per_s": 1 / half,
        "router_cpu_us_per_msg": 0.5 * (results["local"]["router_cpu_us_per_msg"] + results["crossing"]["router_cpu_us_per_msg"]),
    }  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", type=int, default=4)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from router.build_info import build_info

    print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
    print(json.dumps(run(args.flows, args.count, args.rounds), indent=2))


if __name__ == "__main__":
    main()
