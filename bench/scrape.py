"""How long reading the router's figures holds it, per number of connections: a Prometheus
scrape of /metrics, the `memory` entity and the `router` entity, a page of 50 connections,
links and addresses, and every link, each over the HTTP face.

A RouterServer runs in this process (with an HTTP listener); the clients (each: SASL, open, one
session and one receiving link on an address of its own, then idle) run in another process
(bench/idlemem.py's clients_held), so every connection adds a connection, a link and an address
to what a read covers. Each read is made five times; for each: how long the request took (the
answer's last byte, from a thread of this process), and how late a timer inside the router
fired meanwhile (a task asking to wake every millisecond: its worst lateness is the longest
stretch the read kept every connection waiting, which is what a monitor's poll costs the
router's clients).

    python bench/scrape.py [--connections 1000,10000] [--reads 5]

Run it from a copy of bench/ in a venv with the wheel installed for the compiled router (as
bench/README.md's figures are), or from the checkout for the interpreted one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)  # (as bench/idlemem.py: bench/topology.py would hide the package)

from bench.idlemem import clients_held  # noqa: E402
from router.build_info import build_info  # noqa: E402
from router.config.models import HttpListener, Listener, RouterConfig, RouterSection  # noqa: E402
from router.net.server import RouterServer  # noqa: E402

READS = {
    "metrics": "/metrics",
    "memory": "/management/memory/memory",
    "router": "/management/router/scrape",
    # An operator's or a console's pages, and whole lists (`router stat links` reads them all).
    "connections_page": "/management/connection?$top=50",
    "links_page": "/management/router.link?$top=50",
    "addresses_page": "/management/router.address?$top=50",
    "links_all": "/management/router.link",
}
TICK_S = 0.001


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return len(answer.read())


class Ticker:
    """A task that asks to wake every TICK_S: how late it wakes is how long the loop was held."""

    def __init__(self) -> None:
        self.worst_s = 0.0

    async def run(self) -> None:
        while True:
            asked = trio.current_time() + TICK_S
            await trio.sleep_until(asked)
            self.worst_s = max(self.worst_s, trio.current_time() - asked)


async def measure(count: int, reads: int) -> dict[str, object]:
    config = RouterConfig(
        router=RouterSection(id="scrape"),
        listeners=(Listener(name="amqp", host="127.0.0.1", port=0, idle_timeout_s=0),),
        http=(HttpListener(name="http", host="127.0.0.1", port=0),),
    )
    server = RouterServer(config)
    result: dict[str, object] = {"connections": count}
    async with trio.open_nursery() as nursery:
        amqp_port = (await nursery.start(server.run))[0][2]
        base = f"http://127.0.0.1:{server.http_addresses[0][2]}"
        async with clients_held(server, amqp_port, count, link=True):
            await trio.sleep(1.0)
            ticker = Ticker()
            nursery.start_soon(ticker.run)
            for name, path in READS.items():
                took, held = [], []
                size = 0
                for _ in range(reads):
                    await trio.sleep(0.05)
                    ticker.worst_s = 0.0
                    started = time.perf_counter()
                    size = await trio.to_thread.run_sync(_get, base + path)
                    took.append(round((time.perf_counter() - started) * 1e3, 1))
                    held.append(round(ticker.worst_s * 1e3, 1))
                result[name] = {"request_ms": took, "held_ms": held, "bytes": size}
        server.shutdown()
        nursery.cancel_scope.cancel()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", default="1000,10000")
    parser.add_argument("--reads", type=int, default=5)
    args = parser.parse_args()
    counts = [int(n) for n in args.connections.split(",")]
    from bench.scenarios import raise_open_files_limit

    raise_open_files_limit(max(counts) + 256)
    print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
    for count in counts:
        print(json.dumps(trio.run(measure, count, args.reads)), flush=True)


if __name__ == "__main__":
    main()
