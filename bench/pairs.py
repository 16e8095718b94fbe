"""Many independent flows at a low rate each: latency from send to arrival through one router.

N producer/consumer pairs, pair i on address `pairs-i`, each producer on its own connection
sending one 100-byte unsettled message every 1/RATE seconds (the pairs' phases spread evenly),
each consumer on its own connection (credit 10, accepting every message). The clients are, by
default, one `loadgen pairs` process (bench/loadgen, Proton C: all 2N connections on one
proactor thread, a 1 ms ticker waking the producers that are due), so that the clients are not
what is measured; `--clients python` runs them as two processes of our own trio client instead
(what the first figures used: they could not keep up at 1,000 pairs). A message carries its send time
(CLOCK_MONOTONIC, the same clock in every process); latency is the consumer's arrival time minus
it, over the messages sent in the measured window (after a warm-up). Also reported: the router's
CPU over the window, and the clients' (they share the machine's cores with the router), the
router's garbage collections and the time they held it, per generation, from before the warm-up
to the end of the run, its closes included (with the loadgen clients: an outlier in the
latencies may be one),
and the same with a single pair: the floor the clients and the sockets give on an otherwise
idle path.

    python -m bench.pairs [--pairs 1000] [--rate 10] [--seconds 20] [--warmup 5] [--clients loadgen|python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from .loadgen.build import build
from .scenarios import BUILD, ROOT, TICK, raise_open_files_limit, router

MARK = b"TS:!"  # the 8-byte send time follows it in the body

_CONSUMERS = r"""
import json, sys, time, trio
from router.net.client import connect
MARK = b"TS:!"
pairs = int(sys.argv[2])
arrivals = []  # (send ns, latency ns)
async def consume(port, i, ready):
    async with connect("127.0.0.1", port) as client:
        receiver = await client.open_receiver(f"pairs-{i}", credit=10)
        ready()
        while True:
            delivery = await receiver.receive()
            now = time.monotonic_ns()
            at = delivery.payload.find(MARK)
            sent = int.from_bytes(delivery.payload[at + 4 : at + 12], "little")
            arrivals.append((sent, now - sent))
            receiver.accept(delivery)
async def main(port):
    opened = 0
    done = trio.Event()
    def ready():
        nonlocal opened
        opened += 1
        if opened == pairs:
            done.set()
    async with trio.open_nursery() as nursery:
        for i in range(pairs):
            nursery.start_soon(consume, port, i, ready)
        await done.wait()
        print("ready", flush=True)
        line = await trio.to_thread.run_sync(sys.stdin.readline)  # "window FIRST LAST"
        _, first, last = line.split()
        first, last = int(first), int(last)
        await trio.sleep_until(trio.current_time() + max(0, last - time.monotonic_ns()) / 1e9 + 1.0)
        lat = sorted(l for s, l in arrivals if first <= s < last)
        print(json.dumps({"latencies_ns": lat, "arrived": len(arrivals)}), flush=True)
        nursery.cancel_scope.cancel()
trio.run(main, int(sys.argv[1]))
"""

_PRODUCERS = r"""
import sys, time, trio
from router.amqp.message import Message
from router.net.client import connect
MARK = b"TS:!"
port, pairs, rate, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
PAD = b"p" * (100 - 12)
sent = 0
attached = 0
async def produce(i, all_attached, go, start_ns):
    global sent, attached
    async with connect("127.0.0.1", port) as client:
        sender = await client.open_sender(f"pairs-{i}")
        attached += 1
        if attached == pairs:
            all_attached.set()
        await go.wait()
        period = 1.0 / rate
        offset = period * i / pairs
        t0 = trio.current_time() - (time.monotonic_ns() - start_ns[0]) / 1e9  # trio time of start
        k = 0
        while True:
            await trio.sleep_until(t0 + offset + k * period)
            now = time.monotonic_ns()
            if now >= start_ns[0] + seconds * 1e9:
                return
            await sender.start_send(Message.data(MARK + now.to_bytes(8, "little") + PAD))
            sent += 1
            k += 1
async def main():
    all_attached, go = trio.Event(), trio.Event()
    start_ns = [0]
    async with trio.open_nursery() as nursery:
        for i in range(pairs):
            nursery.start_soon(produce, i, all_attached, go, start_ns)
        await all_attached.wait()
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)  # "go"
        start_ns[0] = time.monotonic_ns()
        print(f"started {start_ns[0]}", flush=True)
        go.set()
    print(f"sent {sent}", flush=True)
trio.run(main)
"""


def _python(code: str, *args: Any) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )  # fmt: skip


def _cpu_seconds(pid: int) -> float:
    user, system = _cpu_split(pid)
    return user + system


def _cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of `pid` so far (/proc/PID/stat utime, stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def _router_gc(port: int) -> tuple[list[int], list[float]]:
    """The router's garbage collections so far and the time they held it, per generation (its
    `memory` entity)."""
    from router.net.client import connect
    from router.net.management_client import management_session

    async def ask() -> tuple[list[int], list[float]]:
        async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
            (memory,) = await mgmt.query_dicts("memory", ["gcCollections", "gcPauseSeconds"])
        return memory["gcCollections"], memory["gcPauseSeconds"] or [0.0, 0.0, 0.0]

    return trio.run(ask)


def _gc_between(before: tuple[list[int], list[float]], after: tuple[list[int], list[float]]) -> dict[str, Any]:
    """The collections and their time between two reads (before the warm-up, after the run)."""
    return {"router_gc_collections": [b - a for a, b in zip(before[0], after[0])],
            "router_gc_pause_ms": [round((b - a) * 1e3, 2) for a, b in zip(before[1], after[1])]}  # fmt: skip


def _percentile(values: list[int], q: float) -> float:
    return values[min(len(values) - 1, int(q * len(values)))] / 1000 if values else float("nan")


def run_pairs(pairs: int, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    raise_open_files_limit(2 * pairs + 256)
    with router(idle_timeout_s=0) as r:
        consumers = _python(_CONSUMERS, r.port, pairs)
        producers = _python(_PRODUCERS, r.port, pairs, rate, warmup + seconds)
        try:
            assert consumers.stdout is not None and consumers.stdin is not None
            assert producers.stdout is not None and producers.stdin is not None
            if consumers.stdout.readline().strip() != "ready":
                raise RuntimeError("the consumers did not start")
            if producers.stdout.readline().strip() != "ready":
                raise RuntimeError("the producers did not start")
            producers.stdin.write("go\n")
            producers.stdin.flush()
            start_ns = int(producers.stdout.readline().split()[1])
            first, last = start_ns + int(warmup * 1e9), start_ns + int((warmup + seconds) * 1e9)
            consumers.stdin.write(f"window {first} {last}\n")
            consumers.stdin.flush()
            time.sleep(max(0.0, (first - time.monotonic_ns()) / 1e9))
            cpu0 = [_cpu_seconds(p) for p in (r.proc.pid, consumers.pid, producers.pid)]
            time.sleep(seconds)
            cpu1 = [_cpu_seconds(p) for p in (r.proc.pid, consumers.pid, producers.pid)]
            result = json.loads(consumers.stdout.readline())
            sent = int(producers.stdout.readline().split()[1])
        finally:
            for proc in (consumers, producers):
                proc.kill()
                proc.wait()
    lat = result["latencies_ns"]
    router_cpu, consumers_cpu, producers_cpu = (b - a for a, b in zip(cpu0, cpu1))
    return {
        "pairs": pairs, "rate_per_pair": rate, "seconds": seconds, "sent_total": sent,
        "measured": len(lat), "expected": int(pairs * rate * seconds),
        "p50_us": _percentile(lat, 0.5), "p99_us": _percentile(lat, 0.99), "p999_us": _percentile(lat, 0.999),
        "max_us": lat[-1] / 1000 if lat else float("nan"),
        "router_cpu_percent": 100 * router_cpu / seconds,
        "router_cpu_us_per_msg": router_cpu / max(1, len(lat)) * 1e6,
        "consumers_cpu_percent": 100 * consumers_cpu / seconds, "producers_cpu_percent": 100 * producers_cpu / seconds,
    }  # fmt: skip


def run_pairs_loadgen(pairs: int, rate: float, seconds: float, warmup: float) -> dict[str, Any]:
    """The same measurement with `loadgen pairs` as both ends (one process, Proton C)."""
    binary = build(BUILD)
    raise_open_files_limit(2 * pairs + 256)
    with router(idle_timeout_s=0) as r:
        proc = subprocess.Popen(
            [str(binary), "pairs", "--port", str(r.port), "--pairs", str(pairs), "--rate", str(rate),
             "--seconds", str(seconds), "--warmup", str(warmup), "--timeout", str(warmup + seconds + 120)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            window = proc.stdout.readline().split()  # "window FIRST_NS LAST_NS" once every link is attached
            if len(window) != 3 or window[0] != "window":
                raise RuntimeError(f"loadgen pairs did not start: {proc.stderr.read() if proc.stderr else ''}")
            first, last = int(window[1]), int(window[2])
            # The collections are read before the warm-up and after the run, not in the window: a
            # read is a connection and a management request, which the latencies would count.
            gc0 = _router_gc(r.port)
            time.sleep(max(0.0, (first - time.monotonic_ns()) / 1e9))
            cpu0 = [_cpu_seconds(p) for p in (r.proc.pid, proc.pid)]
            system0 = _cpu_split(r.proc.pid)[1]
            time.sleep(max(0.0, (last - time.monotonic_ns()) / 1e9))
            cpu1 = [_cpu_seconds(p) for p in (r.proc.pid, proc.pid)]
            system1 = _cpu_split(r.proc.pid)[1]
            out, err = proc.communicate(timeout=180)
            gc1 = _router_gc(r.port)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode not in (0, 2) or not out.strip():
        raise RuntimeError(f"loadgen pairs failed ({proc.returncode}): {err.strip()[-500:]}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    router_cpu, clients_cpu = (b - a for a, b in zip(cpu0, cpu1))
    return {
        "clients": "loadgen", "pairs": pairs, "rate_per_pair": rate, "seconds": seconds,
        "sent_total": result["sent"], "measured": result["received_in_window"],
        "sent_in_window": result["sent_in_window"], "expected": int(pairs * rate * seconds),
        "p50_us": result["p50_us"], "p99_us": result["p99_us"], "p999_us": result["p999_us"],
        "max_us": result["max_us"], "accepted": result["accepted"], "timeout": result["timeout"],
        "router_cpu_percent": 100 * router_cpu / seconds,
        "router_cpu_us_per_msg": router_cpu / max(1, result["received_in_window"]) * 1e6,
        # Of the router's CPU, the kernel's (its system calls: reads, writes, epoll).
        "router_system_percent": 100 * (system1 - system0) / seconds,
        "clients_cpu_percent": 100 * clients_cpu / seconds,
        **_gc_between(gc0, gc1),
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=10.0, help="messages per second per pair")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--clients", choices=("loadgen", "python"), default="loadgen")
    args = parser.parse_args()
    run = run_pairs_loadgen if args.clients == "loadgen" else run_pairs
    from router.build_info import build_info

    print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
    for pairs in (1, args.pairs):
        print(json.dumps(run(pairs, args.rate, args.seconds, args.warmup)), flush=True)


if __name__ == "__main__":
    main()
