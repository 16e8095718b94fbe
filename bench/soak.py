"""Soaks of the router's resource bounds: a `router run` process under a load that used to grow
its memory without bound, its resident size (RSS) sampled over time. Each must stay flat at the
configured bounds.

1. `hoarder`: a consumer that takes deliveries and never settles (credit topped up forever),
   next to a consumer that settles, and a producer sending 1 KiB messages as fast as credit
   allows. The hoarder is stuck at `max_unsettled_per_link`; the other consumer gets the rest.
2. `blocked`: 40 producers of 64 KiB messages and one slow consumer (credit 1, 5 ms per
   message): the bytes the router holds stay within `limits.buffered_budget_bytes`.

    python -m bench.soak [hoarder|blocked|both] [--seconds 60] [--interval 5]

3. `churn` (bench/soakchurn.py, not in `both`): a mesh of three routers and a broker under
   clients that come and go for the whole run, every count of what they took back at its
   baseline at the end (exit status 1 if not, or if RSS grew past a bound).

    python -m bench.soak churn [--seconds 300] [--interval 10] [--settle 90] [--seed 1]

Prints one line per sample (seconds, RSS MiB, and what the router's management says) and a
JSON summary: RSS at the first sample after warm-up, at the end, and the peak.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from router.amqp.message import Message
from router.net.client import connect
from router.net.management_client import ManagementSession, management_session

from .scenarios import Router

UNSETTLED_PER_LINK = 5000
BUDGET_BYTES = 64 * 1024 * 1024


def _router(limits: dict[str, Any] | None = None, **listener: Any) -> Router:
    return Router({
        "router": {"id": "soak"},
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0, **listener}],
        "limits": limits or {},
    })  # fmt: skip


async def _router_entity(mgmt: ManagementSession) -> dict[str, Any]:
    return (await mgmt.query_dicts("router"))[0]


async def _sample(r: Router, seconds: float, interval: float, describe: Callable[[], Awaitable[str]]) -> dict[str, Any]:
    start = time.monotonic()
    samples: list[tuple[float, float]] = []
    while time.monotonic() - start < seconds:
        await trio.sleep(interval)
        rss = r.rss_bytes() / 2**20
        samples.append((round(time.monotonic() - start, 1), round(rss, 1)))
        print(f"{samples[-1][0]:7.1f} s  RSS {rss:7.1f} MiB  {await describe()}", flush=True)
    warm = samples[min(1, len(samples) - 1)][1]  # after the first interval: bounds reached
    return {"samples": samples, "rss_after_warmup_mib": warm, "rss_end_mib": samples[-1][1],
            "rss_peak_mib": max(rss for _, rss in samples)}  # fmt: skip


def hoarder(seconds: float, interval: float) -> dict[str, Any]:
    """A consumer that never settles next to one that does."""
    r = _router(max_unsettled_per_link=UNSETTLED_PER_LINK)
    delivered = [0, 0]

    async def main() -> dict[str, Any]:
        async with (
            connect("127.0.0.1", r.port) as hoarder_conn,
            connect("127.0.0.1", r.port) as good_conn,
            connect("127.0.0.1", r.port) as producer,
            connect("127.0.0.1", r.port) as observer_conn,
            management_session(observer_conn) as observer,
            trio.open_nursery() as nursery,
        ):
            hoard = await hoarder_conn.open_receiver("soak", credit=1000)
            good = await good_conn.open_receiver("soak", credit=1000)
            sender = await producer.open_sender("soak")
            body = Message.data(b"h" * 1024)

            async def take_forever() -> None:  # receives (so credit is topped up), never settles
                while True:
                    await hoard.receive()
                    delivered[0] += 1

            async def settle() -> None:
                while True:
                    good.accept(await good.receive())
                    delivered[1] += 1

            async def produce() -> None:
                while True:
                    await sender.start_send(body)

            for task in (take_forever, settle, produce):
                nursery.start_soon(task)

            async def describe() -> str:
                links = await observer.query_dicts("router.link")
                stuck = [link for link in links if link.get("stuck")]
                return (f"hoarder holds {delivered[0]:,} (stuck links {len(stuck)}), "
                        f"the other consumer settled {delivered[1]:,}")  # fmt: skip

            result = await _sample(r, seconds, interval, describe)
            nursery.cancel_scope.cancel()
        return result

    try:
        result = trio.run(main)
    finally:
        r.stop()
    return {"scenario": "hoarder", "max_unsettled_per_link": UNSETTLED_PER_LINK,
            "hoarder_holds": delivered[0], "settled_by_the_other": delivered[1], **result}  # fmt: skip


def blocked(seconds: float, interval: float, producers: int = 40) -> dict[str, Any]:
    """Forty producers of 64 KiB messages and a slow consumer."""
    r = _router(limits={"buffered_budget_bytes": BUDGET_BYTES})
    consumed = [0]

    async def main() -> dict[str, Any]:
        async with (
            connect("127.0.0.1", r.port) as consumer,
            connect("127.0.0.1", r.port) as observer_conn,
            management_session(observer_conn) as observer,
            trio.open_nursery() as nursery,
        ):
            receiver = await consumer.open_receiver("blocked", credit=1)
            body = Message.data(b"b" * 65536)

            async def produce() -> None:
                async with connect("127.0.0.1", r.port) as client:
                    sender = await client.open_sender("blocked")
                    while True:
                        await sender.start_send(body)

            async def consume() -> None:
                while True:
                    receiver.accept(await receiver.receive())
                    consumed[0] += 1
                    await trio.sleep(0.005)

            for _ in range(producers):
                nursery.start_soon(produce)
            nursery.start_soon(consume)
            peak_buffered = [0]

            async def describe() -> str:
                router = await _router_entity(observer)
                peak_buffered[0] = max(peak_buffered[0], int(router["bufferedBytes"]))
                return (f"buffered {router['bufferedBytes'] / 2**20:6.1f} of {router['bufferedBudgetBytes'] / 2**20:.0f} MiB, "
                        f"paused {int(router['pausedConnectionCount'])}, released {int(router['releasedOverBudget'])}, "
                        f"consumed {consumed[0]:,}")  # fmt: skip

            result = await _sample(r, seconds, interval, describe)
            router = await _router_entity(observer)
            nursery.cancel_scope.cancel()
        return {**result, "peak_buffered_mib": round(peak_buffered[0] / 2**20, 1),
                "released_over_budget": int(router["releasedOverBudget"])}  # fmt: skip

    try:
        result = trio.run(main)
    finally:
        r.stop()
    return {"scenario": "blocked", "producers": producers, "message_bytes": 65536,
            "budget_mib": BUDGET_BYTES / 2**20, "consumed": consumed[0], **result}  # fmt: skip


def main(argv: list[str]) -> int:
    which = argv[0] if argv and not argv[0].startswith("-") else "both"
    seconds = float(argv[argv.index("--seconds") + 1]) if "--seconds" in argv else 60.0
    interval = float(argv[argv.index("--interval") + 1]) if "--interval" in argv else 5.0
    results = []
    if which == "churn":  # a mesh under clients that come and go (bench/soakchurn.py)
        from .soakchurn import SETTLE_S, churn

        settle = float(argv[argv.index("--settle") + 1]) if "--settle" in argv else SETTLE_S
        seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 1
        result = churn(seconds, interval, settle, seed)
        print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
        return 0 if result["ok"] else 1
    if which in ("hoarder", "both"):
        results.append(hoarder(seconds, interval))
    if which in ("blocked", "both"):
        results.append(blocked(seconds, interval))
    for result in results:
        summary = {k: v for k, v in result.items() if k != "samples"}
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
