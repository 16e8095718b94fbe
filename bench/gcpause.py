"""How long a full garbage collection holds a router with N connections, and whether relaying
messages runs the collector at all.

A RouterServer runs in this process with `router run`'s collector settings (tune_gc); the clients
(each: SASL, open, one session and one receiving link on an address of its own, then idle) run in
another process, so that only the router's objects are counted. Once every connection is open:
the objects the collector tracks (per connection), three full collections timed (gc.collect(),
the work of the collection CPython runs itself when the survivors of younger collections reach
a quarter of the rest), and, with --messages M, M 100-byte messages relayed between two C
loadgen clients while the collections of each generation are counted (router.management.gcpauses),
and with --churn K, K more connections (each with a link) opened and closed, 50 at a time: the
collections meanwhile, and how many objects each connection left counted towards the next young
collection (CPython counts tracked objects made less those freed; `router run` collects the
young every 10,000 of them, the middle generation every 50 young collections and all of them
every 100 middle ones at most, when a quarter of the old ones are new: 50,000,000 counted).

    python bench/gcpause.py [--connections 500,1000,2000,5000] [--messages 1000000] [--churn 5000]

Run it from a copy of bench/ in a venv with the wheel installed for the compiled router (as
bench/README.md's figures are), or from the checkout for the interpreted one.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)  # (as bench/idlemem.py: bench/topology.py would hide the package)

from bench.idlemem import clients_held  # noqa: E402
from router.build_info import build_info  # noqa: E402
from router.cli.run import tune_gc  # noqa: E402
from router.config.models import Listener, RouterConfig, RouterSection  # noqa: E402
from router.management.gcpauses import GcPauses  # noqa: E402
from router.net.server import RouterServer  # noqa: E402


_CHURN = """
import sys, trio
from router.net.client import connect
async def main(port, count):
    limit = trio.Semaphore(50)
    async def one(i):
        async with limit:
            async with connect("127.0.0.1", port) as client:
                await client.open_receiver(f"churn-{i}", credit=10)
    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
trio.run(main, int(sys.argv[1]), int(sys.argv[2]))
"""


async def _churn(port: int, count: int) -> dict[str, object]:
    """`count` connections opened (each with a receiving link) and closed, 50 at a time: the
    collections meanwhile and the objects the collector counted towards them per connection."""
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    threshold = gc.get_threshold()[0]
    young_before, count_before = gc.get_stats()[0]["collections"], gc.get_count()[0]
    try:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        await trio.run_process([sys.executable, "-c", _CHURN, str(port), str(count)], env=env)
        await trio.sleep(1.0)  # the router's side of the last closes
    finally:
        gc.callbacks.remove(pauses)
    young = gc.get_stats()[0]["collections"] - young_before
    counted = young * threshold + gc.get_count()[0] - count_before  # (approximately: a collection starts past the threshold)
    return {"connections": count, "collections": pauses.counts, "longest_ms": [round(s * 1e3, 2) for s in pauses.longest],
            "counted_per_connection": round(counted / count, 1)}  # fmt: skip


async def _relay(port: int, messages: int) -> dict[str, object]:
    """`messages` relayed by the C loadgen; the collections of each generation meanwhile."""
    from bench.loadgen.build import build
    from bench.scenarios import BUILD

    binary = str(build(BUILD))
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    common = ["--host", "127.0.0.1", "--port", str(port), "--timeout", "300", "--address", "gcpause", "--count", str(messages)]
    try:
        receiver = await trio.lowlevel.open_process([binary, "receive", *common], stdout=subprocess.DEVNULL)
        await trio.sleep(0.3)
        started = time.perf_counter()
        sender = await trio.lowlevel.open_process([binary, "send", *common, "--size", "100"], stdout=subprocess.DEVNULL)
        await sender.wait()
        await receiver.wait()
        seconds = time.perf_counter() - started
    finally:
        gc.callbacks.remove(pauses)
    return {"messages": messages, "seconds": round(seconds, 2), "collections": pauses.counts,
            "longest_ms": [round(s * 1e3, 2) for s in pauses.longest]}  # fmt: skip


async def measure(count: int, messages: int, churn: int) -> dict[str, object]:
    config = RouterConfig(router=RouterSection(id="gcpause"), listeners=(Listener(host="127.0.0.1", port=0, idle_timeout_s=0),))
    server = RouterServer(config)
    async with trio.open_nursery() as nursery:
        port = (await nursery.start(server.run))[0][2]
        tune_gc()
        base = len(gc.get_objects())
        async with clients_held(server, port, count, link=True):
            await trio.sleep(1.0)
            tracked = len(gc.get_objects())
            full = []
            for _ in range(3):
                started = time.perf_counter()
                gc.collect()
                full.append(round((time.perf_counter() - started) * 1e3, 1))
            per_connection = round((tracked - base) / count, 1)
            result: dict[str, object] = {"connections": count, "tracked": tracked, "tracked_per_connection": per_connection,
                                         "full_ms": full}  # fmt: skip
            if messages:
                result["relay"] = await _relay(port, messages)
            if churn:
                result["churn"] = await _churn(port, churn)
        server.shutdown()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", default="500,1000,2000,5000")
    parser.add_argument("--messages", type=int, default=0)
    parser.add_argument("--churn", type=int, default=0, help="connections opened and closed beside the idle ones")
    args = parser.parse_args()
    counts = [int(n) for n in args.connections.split(",")]
    from bench.scenarios import raise_open_files_limit

    raise_open_files_limit(max(counts) + 256)
    print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
    for count in counts:
        print(json.dumps(trio.run(measure, count, args.messages, args.churn)), flush=True)


if __name__ == "__main__":
    main()
