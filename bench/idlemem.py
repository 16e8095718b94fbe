"""Python allocations per idle connection, by where they were made (tracemalloc).

A RouterServer runs in this process; the clients (each: SASL, open, one session, then idle) run
in another one, so that only the router's allocations are counted. The snapshot is taken once
every connection is open and the handshake time-out has passed (so that nothing left from the
handshake is counted), and compared with one taken before the first connection.

    python bench/idlemem.py [--connections 500] [--top 25]

Run it from the checkout for the interpreted router, or from a copy of bench/ in a venv with the
wheel installed for the compiled one (tracemalloc sees the allocations of compiled modules too:
they go through the same allocator).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parent.parent
# `python bench/idlemem.py`: bench/ (whose topology.py would hide the topology package) gives its
# place to the checkout (a copy of bench/ beside an installed wheel has no router/ there).
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(ROOT)

from router.build_info import build_info  # noqa: E402
from router.config.models import Listener, RouterConfig, RouterSection  # noqa: E402
from router.net.server import RouterServer  # noqa: E402

HANDSHAKE_TIMEOUT_S = 2.0

# argv: port, count, and "link" for a receiving link on an address of its own on each
_CLIENTS = """
import sys, trio
from router.net.client import connect
async def main(port, count, link):
    limit = trio.Semaphore(200)
    opened = 0
    async def one(i):
        nonlocal opened
        await limit.acquire()
        async with connect("127.0.0.1", port) as client:
            if link:
                await client.open_receiver(f"idle-{i}", credit=10)
            limit.release()
            opened += 1
            if opened == count:
                print("open", flush=True)
            await trio.sleep_forever()
    async with trio.open_nursery() as nursery:
        for i in range(count):
            nursery.start_soon(one, i)
trio.run(main, int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["link"])
"""


@asynccontextmanager
async def clients_held(server: RouterServer, port: int, count: int, *, link: bool = False, timeout_s: float = 600) -> AsyncIterator[None]:
    """`count` idle connections (each with a receiving link on an address of its own if `link`)
    from another process, held from when `server` has them all until the block ends."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, "-c", _CLIENTS, str(port), str(count), *(["link"] if link else [])]
    clients = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, env=env)
    try:
        with trio.fail_after(timeout_s):
            while server.stats()["connections"] < count:
                await trio.sleep(0.05)
        yield
    finally:
        clients.kill()
        await clients.wait()


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def measure(count: int, top: int) -> None:
    config = RouterConfig(
        router=RouterSection(id="idlemem"),
        listeners=(Listener(host="127.0.0.1", port=0, idle_timeout_s=0, handshake_timeout_s=HANDSHAKE_TIMEOUT_S),),
    )
    server = RouterServer(config)
    async with trio.open_nursery() as nursery:
        port = (await nursery.start(server.run))[0][2]
        await trio.sleep(0.2)
        tracemalloc.start(1)
        rss0 = rss_bytes()
        before = tracemalloc.take_snapshot()
        async with clients_held(server, port, count):
            await trio.sleep(HANDSHAKE_TIMEOUT_S + 0.5)
            after = tracemalloc.take_snapshot()
            rss1 = rss_bytes()
        stats = after.compare_to(before, "lineno")
        total = sum(s.size_diff for s in stats)
        print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
        print(f"{count} idle connections: {total / count / 1024:.2f} KiB of Python allocations each, "
              f"RSS {(rss1 - rss0) / count / 1024:.2f} KiB each (this process, clients elsewhere)")  # fmt: skip
        for s in stats[:top]:
            frame = s.traceback[0]
            print(f"{s.size_diff / count:9.1f} B {s.count_diff / count:6.2f} objs  {frame.filename}:{frame.lineno}")
        server.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    start = time.monotonic()
    trio.run(measure, args.connections, args.top)
    print(f"({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
