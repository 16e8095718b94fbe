"""Two deploy/k8s sites in network namespaces across a delaying WAN: cross-site latency and
throughput at a given round-trip time (root; see router/testing/multisite.py).

    python bench/multisite.py [--rtt-ms 20 80] [--messages 2000] [--window 250]

For each RTT: the p50/p95 time from sending a message in dc-east to its outcome back in
dc-east, for a consumer in dc-west (one message at a time: one WAN round trip plus the routers'
work on both sides), and the messages per second with `--window` unsettled messages in flight
(the WAN's bandwidth-delay product decides: credit, not the router, is the limit at long RTT).
Figures are reported, not asserted; the routers run the checkout's build (interpreted unless
the checkout is compiled in place).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from router.amqp.message import Message  # noqa: E402
from router.net.client import Client  # noqa: E402
from router.testing.multisite import Sites  # noqa: E402


async def consume(client: Client, address: str, credit: int) -> None:
    receiver = await client.open_receiver(address, credit=credit)
    while True:
        receiver.accept(await receiver.receive())


async def wait_remote(sites: Sites, address: str) -> None:
    with trio.fail_after(15):
        while True:
            rows = [r for r in await sites.query("dc-east", 0, "org.apache.qpid.dispatch.router.address") if r.get("address") == address]
            if rows and "dc-west-router-0" in (rows[0].get("remoteHostRouters") or ()):
                return
            await trio.sleep(0.05)


async def measure(sites: Sites, rtt_ms: float, messages: int, window: int) -> dict[str, float]:
    sites.wan(f"delay {rtt_ms / 2}")
    address = f"bench-{int(rtt_ms)}"
    async with sites.client("dc-west", 0) as consumer, sites.client("dc-east", 0) as producer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume, consumer, address, window)
            await wait_remote(sites, address)
            sender = await producer.open_sender(address)
            latencies = []
            for _ in range(max(20, messages // 20)):
                started = time.perf_counter()
                await (await sender.start_send(Message.value(b"x" * 100))).wait()
                latencies.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            trackers = []
            for _ in range(messages):
                trackers.append(await sender.start_send(Message.value(b"x" * 100)))
                if len(trackers) >= window:
                    await trackers.pop(0).wait()
            for tracker in trackers:
                await tracker.wait()
            rate = messages / (time.perf_counter() - started)
            nursery.cancel_scope.cancel()
    latencies.sort()
    return {
        "rtt_ms": rtt_ms,
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[int(len(latencies) * 0.95) - 1],
        "msg_per_s": rate,
    }


async def main(rtts: list[float], messages: int, window: int) -> None:
    with tempfile.TemporaryDirectory() as directory:
        with Sites(Path(directory), ["dc-east", "dc-west"], interiors=1, delay_ms=rtts[0] / 2) as sites:
            await sites.wait_meshed()
            print(f"{'RTT ms':>7} {'p50 ms':>8} {'p95 ms':>8} {'msg/s (window ' + str(window) + ')':>20}")
            for rtt in rtts:
                row = await measure(sites, rtt, messages, window)
                print(f"{row['rtt_ms']:7.0f} {row['p50_ms']:8.1f} {row['p95_ms']:8.1f} {row['msg_per_s']:20.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rtt-ms", type=float, nargs="+", default=[20.0, 80.0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--window", type=int, default=250)
    args = parser.parse_args()
    trio.run(main, args.rtt_ms, args.messages, args.window)
