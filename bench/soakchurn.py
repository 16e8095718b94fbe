"""The churn soak (`python -m bench.soak churn`): a mesh of `router run` processes under clients
that come and go for the whole run, then proof that everything they took was given back.

The mesh (router/testing/meshprocs.py): interior A with the Proton C example broker as route
container for prefix `q` (in and out), interior B linked to A, edge E with an uplink to B. The
load (bench/soakloops.py), concurrently: link-routed visits of clients of E and of B to the
broker (large messages: routed sessions between the routers, streaming inside them), mobile
traffic between E and A both ways (large messages: streaming links), consumers that stop
reading then vanish, bursts of large messages (streaming links grow), management queries.
Every visit ends one of several ways (close, detach then close, the socket dropped mid-stream).

Sampled every interval, per router: RSS, and from its management what must come back once the
load stops (`counts`): connections, links (every connection's, routed ones included), routed
links, sessions of the connections to other routers and the broker, streaming links, bytes held
(buffered, held frames, waiting for a session window), shut windows, unsettled and undelivered
deliveries, addresses, open file descriptors. At the end the load stops and the soak waits (bounded: `--settle`, 90 s
by default, longer than the minute after which idle grown streaming links are given back) for
every count to be back at its baseline, taken before the load began.

Exit status 1 when a count did not come back, when a router's RSS after the settle exceeds its
RSS after warm-up (the first half of the load) by more than RSS_GROWTH_MIB, or when a client saw
an error (messages out of order or missing, a visit timed out, a refusal).
"""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from router.net.client import connect
from router.net.management_client import ManagementSession, management_session
from router.testing.meshprocs import MeshProcesses

from . import soakloops as load
from .cbroker import running_broker

ROUTERS = ("A", "B", "E")
ROUTES = [{"prefix": "q", "direction": "in", "connection": "broker"},
          {"prefix": "q", "direction": "out", "connection": "broker"}]  # fmt: skip
# What a router's RSS may grow by from the end of warm-up (the first half of the load) to the end
# of the settle. Warm-up: by then every bound is reached once (streaming links grown, routed
# sessions, the caches of the last 4,096 addresses) and, mostly, the heap's high-water mark: the
# C allocator keeps the pages of the largest moment of held message bytes (64 KiB frames, below
# its mmap threshold), so RSS steps up when the load reaches a new peak (steps of 2 to 10 MiB
# seen) and is otherwise flat. The second half of 5-minute runs grew by at most 5.1 MiB; a
# leak of what a visit takes would add more with each of its ~7,500 visits (1.5 KiB a visit:
# 11 MiB). Finer: bench/README.md, "Churn", on tracing the routers' allocations.
RSS_GROWTH_MIB = 10.0
SETTLE_S = 90.0
ROUTER_ROLES = ("inter-router", "edge", "route-container")


def mesh(directory: Path, broker_port: int) -> MeshProcesses:
    broker = {"name": "broker", "host": "127.0.0.1", "port": broker_port, "role": "route-container",
              "reconnect_initial_s": 0.1, "reconnect_max_s": 1.0}  # fmt: skip
    return MeshProcesses(directory, "A-B", hello_interval_s=1.0, dead_interval_s=4.0, edge_routers={"E": ["B"]},
                         extra={"A": {"connectors": [broker], "link_routes": ROUTES}})  # fmt: skip


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def counts(mgmt: ManagementSession) -> dict[str, int]:
    """What one router's management says of what clients and pairs take (see the docstring)."""
    conns = await mgmt.query_dicts("connection")
    links = await mgmt.query_dicts("router.link")
    router = (await mgmt.query_dicts("router"))[0]
    routes = await mgmt.query_dicts("router.config.linkRoute")
    memory = (await mgmt.query_dicts("memory"))[0]
    meshy = [c for c in conns if c["role"] in ROUTER_ROLES]
    return {
        "connections": len(conns),
        "links": sum(int(c["linkCount"]) for c in conns),
        "routedLinks": sum(int(r["routedLinkCount"]) for r in routes),
        "routerSessions": sum(int(c["sessionCount"]) for c in meshy),
        "streamingLinks": sum(int(c["streamingLinks"]) for c in meshy),
        "bufferedBytes": int(router["bufferedBytes"]),
        "heldBytes": sum(int(c["heldFrameBytes"]) + int(c["windowHeldBytes"]) for c in conns),
        "shutWindows": sum(int(c["shutWindows"]) + int(c["peerShutWindows"]) for c in meshy),
        "unsettled": sum(int(link["unsettledCount"]) for link in links),
        "undelivered": sum(int(link["undeliveredCount"]) for link in links),
        "addresses": int(router["addrCount"]),
        "openFds": int(memory["openFds"]),
    }


async def figures(mgmt: ManagementSession) -> dict[str, int]:
    """Shown, not checked: objects the router's garbage collector tracks (bounded caches fill),
    and deliveries released because holding them would pass a byte bound (their producers send
    them again)."""
    memory = (await mgmt.query_dicts("memory"))[0]
    router = (await mgmt.query_dicts("router"))[0]
    return {"objects": int(memory["pythonObjects"]), "releasedOverBudget": int(router["releasedOverBudget"])}


def not_back(now: dict[str, dict[str, int]], baseline: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per router, the counts above their baseline."""
    out = {r: {k: v for k, v in now[r].items() if v > baseline[r][k]} for r in now}
    return {r: over for r, over in out.items() if over}


async def probe_route(port: int, container_router: ManagementSession) -> None:
    """Until a link-routed attach from `port` reaches the broker: the routers on the way have
    learnt the route (before, the attach is that of a consumer of the mobile address q.probe)."""
    with trio.fail_after(30):
        while True:
            try:
                async with connect("127.0.0.1", port) as c:
                    receiver = await c.open_receiver("q.probe", credit=0)
                    routes = await container_router.query_dicts("router.config.linkRoute")
                    await receiver.close()
                    if sum(int(r["routedLinkCount"]) for r in routes):
                        return
            except load.ClientError:  # (refused on the way: a router that knows no container yet)
                pass
            await trio.sleep(0.2)


class Churn:
    def __init__(self, seconds: float, interval: float, settle_s: float, seed: int) -> None:
        self.seconds, self.interval, self.settle_s, self.seed = seconds, interval, settle_s, seed
        self.tally = load.Tally()
        self.samples: list[dict[str, Any]] = []

    def loops(self, m: MeshProcesses) -> list[tuple[str, load.Visit]]:
        a, b, e = (m.port(r) for r in ROUTERS)
        return [
            *[(f"routed.E{n}", partial(load.routed_visit, e, f"E{n}")) for n in range(3)],
            *[(f"routed.B{n}", partial(load.routed_visit, b, f"B{n}")) for n in range(2)],
            *[(f"mobile.EA{n}", partial(load.mobile_visit, e, a, f"EA{n}")) for n in range(2)],
            ("mobile.AE", partial(load.mobile_visit, a, e, "AE")),
            ("stalled.AE", partial(load.stalled_visit, a, e, "stAE")),
            ("stalled.EA", partial(load.stalled_visit, e, a, "stEA")),
            ("burst.EA", partial(load.burst_visit, e, a, "buEA")),
            ("burst.AE", partial(load.burst_visit, a, e, "buAE")),
            *[(f"management.{r}", partial(load.management_visit, m.port(r), f"mg{r}")) for r in ROUTERS],
        ]

    async def sample(self, m: MeshProcesses, observers: dict[str, ManagementSession], start: float, phase: str) -> dict[str, Any]:
        row: dict[str, Any] = {"t": round(time.monotonic() - start, 1), "phase": phase, "rss": {}, "counts": {}}
        for r in ROUTERS:
            proc = m.processes[r].proc
            assert proc is not None
            row["rss"][r] = rss_mib(proc.pid)
            row["counts"][r] = await counts(observers[r])
            row.setdefault("figures", {})[r] = await figures(observers[r])
        self.samples.append(row)
        visits = sum(v for k, v in self.tally.items() if not k.startswith(("error", "messages", "bytes", "management.rows")))
        errors = sum(v for k, v in self.tally.items() if k.startswith("error"))
        brief = "  ".join(f"{r}: {row['rss'][r]:.1f} MiB {row['figures'][r]['objects'] // 1000}k obj {_short(row['counts'][r])}"
                          for r in ROUTERS)  # fmt: skip
        print(f"{row['t']:7.1f} s {phase:6} visits {visits:5} errors {errors:3}  {brief}", flush=True)
        return row

    async def run(self, m: MeshProcesses) -> dict[str, Any]:
        await m.wait_converged(timeout_s=30)
        async with (
            connect("127.0.0.1", m.port("A")) as ca, management_session(ca) as ma,
            connect("127.0.0.1", m.port("B")) as cb, management_session(cb) as mb,
            connect("127.0.0.1", m.port("E")) as ce, management_session(ce) as me,
        ):  # fmt: skip
            observers = {"A": ma, "B": mb, "E": me}
            await probe_route(m.port("E"), ma)
            start = time.monotonic()
            baseline = await self._steady(m, observers, start)
            async with trio.open_nursery() as nursery:
                for n, (kind, visit) in enumerate(self.loops(m)):
                    nursery.start_soon(load.loop, kind.split(".")[0], visit, self.seed + n, self.tally)
                churn_start = time.monotonic()
                while time.monotonic() - churn_start < self.seconds:
                    await trio.sleep(self.interval)
                    await self.sample(m, observers, start, "churn")
                nursery.cancel_scope.cancel()
            churn_end = time.monotonic()
            while True:  # the load stopped: until every count is back (bounded)
                await trio.sleep(min(self.interval, 5.0))
                row = await self.sample(m, observers, start, "settle")
                over = not_back(row["counts"], baseline)
                if not over or time.monotonic() - churn_end > self.settle_s:
                    break
            return self.summary(baseline, row, over, start, churn_start, round(time.monotonic() - churn_end, 1))

    async def _steady(self, m: MeshProcesses, observers: dict[str, ManagementSession], start: float) -> dict[str, dict[str, int]]:
        """The baseline: counts two samples in a row agree on (the probe's pair gone)."""
        previous = None
        with trio.fail_after(30):
            while True:
                row = await self.sample(m, observers, start, "base")
                if row["counts"] == previous:
                    return dict(row["counts"])
                previous = row["counts"]
                await trio.sleep(1.0)

    def summary(self, baseline: dict[str, dict[str, int]], end: dict[str, Any], over: dict[str, dict[str, int]],
                start: float, churn_start: float, settled_s: float) -> dict[str, Any]:  # fmt: skip
        churn = [s for s in self.samples if s["phase"] == "churn"]
        warm_t = churn_start - start + self.seconds / 2
        warm = next((s for s in churn if s["t"] >= warm_t), churn[-1])
        rss = {r: {"after_warmup_mib": warm["rss"][r], "end_mib": end["rss"][r],
                   "peak_mib": max(s["rss"][r] for s in self.samples),
                   "growth_mib": round(end["rss"][r] - warm["rss"][r], 1)} for r in ROUTERS}  # fmt: skip
        grown = {r: v["growth_mib"] for r, v in rss.items() if v["growth_mib"] > RSS_GROWTH_MIB}
        peaks = {r: {k: max(s["counts"][r][k] for s in churn) for k in baseline[r]} for r in ROUTERS}
        errors = sum(v for k, v in self.tally.items() if k.startswith("error."))
        return {
            "scenario": "churn", "seconds": self.seconds, "settled_after_s": settled_s, "seed": self.seed,
            "operations": dict(sorted(self.tally.items())), "rss": rss, "rss_growth_bound_mib": RSS_GROWTH_MIB,
            "baseline": baseline, "end": end["counts"], "peak_during_churn": peaks, "end_figures": end["figures"],
            "not_back": over, "rss_grown": grown, "client_errors": errors, "ok": not over and not grown and not errors,
        }  # fmt: skip


def _short(c: dict[str, int]) -> str:
    return (f"c{c['connections']} l{c['links']} r{c['routedLinks']} s{c['routerSessions']} st{c['streamingLinks']} "
            f"u{c['unsettled']} h{(c['bufferedBytes'] + c['heldBytes']) // 1024}K w{c['shutWindows']} a{c['addresses']}")  # fmt: skip


def churn(seconds: float, interval: float, settle_s: float = SETTLE_S, seed: int = 1) -> dict[str, Any]:
    soak = Churn(seconds, interval, settle_s, seed)
    with tempfile.TemporaryDirectory() as directory:
        with running_broker(Path(directory)) as broker_port, mesh(Path(directory), broker_port) as m:
            return trio.run(soak.run, m)
