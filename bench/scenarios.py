"""Router benchmark scenarios: the router as a real process, the C load generator on both ends.

Every throughput figure is reported with the direct client-to-client ceiling measured in the
same run (loadgen to loadgen, no router), and router and direct runs alternate, because
absolute numbers drift on a shared machine while ratios hold. Both runs of a pair carry the
same number of messages: short runs are slower, direct ones more than routed ones (200,000
against 1,000,000 messages: -6 % direct, -3 % routed), so a short routed run against a long
direct one understated the ratio. Router CPU per message comes from the router process's
utime+stime over the run.

Scenarios: 1. anycast 100 B unsettled; 2. the same presettled; 3. 10 KiB unsettled;
4. request/response ping-pong latency; 5. 10,000 idle connections (router RSS per connection);
6. a slow consumer with a fast producer (router RSS stays bounded: the peak is reported);
7. a chain of 3 routers; 8. multicast 1 -> 2 receivers, 100 B unsettled (ratio to 1 -> 1 direct).
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from .loadgen.build import build
from .loadgen.smoke import parse_result, run_direct, run_direct_pingpong, taskset

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(__file__).resolve().parent / "loadgen" / "build"
LISTENING = re.compile(r"^listening (\S+) amqp://([^:]+):(\d+)$")
TICK = os.sysconf("SC_CLK_TCK")


class Router:
    """A `router run` process for a benchmark; its CPU time and memory are read from /proc."""

    def __init__(self, config: dict[str, Any], prefix: tuple[str, ...] = ()) -> None:
        """`prefix`: a command the router runs under (bench/lone.py: valgrind)."""
        self._dir = tempfile.TemporaryDirectory()
        path = Path(self._dir.name) / "router.yaml"
        path.write_text(yaml.safe_dump(config))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "router.cli.main", "run", "-c", str(path), "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        self.ports: dict[str, int] = {}
        while len(self.ports) < len(config["listeners"]):
            line = self.proc.stdout.readline()
            match = LISTENING.match(line.strip())
            if not match:
                self.stop()
                raise RuntimeError(f"router did not start: {line!r}")
            self.ports[match[1]] = int(match[3])
        self.port = self.ports["amqp"]
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self, wait_s: float = 10) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._dir.cleanup()


@contextmanager
def router(
    addresses: list[dict[str, Any]] | None = None, settings: dict[str, Any] | None = None,
    prefix: tuple[str, ...] = (), **listener: Any,
) -> Iterator[Router]:
    """A `router run` with one listener (`listener` adds to it); `settings` add to its router
    section; `prefix`: a command it runs under (taskset)."""
    config: dict[str, Any] = {
        "router": {"id": "bench", **(settings or {})},
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0, **listener}],
    }
    if addresses:
        config["addresses"] = addresses
    r = Router(config, prefix)
    try:
        yield r
    finally:
        r.stop()


def _loadgen(binary: Path, *args: str, timeout_s: float = 120, cpu: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*taskset(cpu), str(binary), *args, "--timeout", str(timeout_s)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(role: str, proc: subprocess.Popen[str], timeout_s: float = 150) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout_s)
    return parse_result(role, subprocess.CompletedProcess(proc.args, proc.returncode, out, err))


def through_router(binary: Path, r: Router, count: int, size: int, presettled: bool) -> dict[str, Any]:
    """loadgen receive and loadgen send through the router; throughput seen by the receiver."""
    address = f"bench-{size}-{int(presettled)}-{time.monotonic_ns()}"
    common = ["--host", "127.0.0.1", "--port", str(r.port), "--address", address, "--count", str(count)]
    receiver = _loadgen(binary, "receive", *common)
    time.sleep(0.3)  # the receiver's attach must reach the router before the sender asks for credit
    cpu0 = r.cpu_seconds()
    sender = _loadgen(binary, "send", *common, "--size", str(size), *(["--presettled"] if presettled else []))
    sent = _finish("send", sender)
    received = _finish("receive", receiver)
    cpu = r.cpu_seconds() - cpu0
    return {"send": sent, "receive": received, "router_cpu_us_per_msg": cpu / count * 1e6}


def throughput(binary: Path, *, size: int, presettled: bool, count: int, rounds: int) -> dict[str, Any]:
    """Alternate direct and router runs; medians and their ratio."""
    direct, routed, cpu = [], [], []
    with router() as r:
        for _ in range(rounds):
            d = run_direct(count, size, presettled=presettled, binary=binary)
            direct.append(d["listen"]["msgs_per_s"])
            result = through_router(binary, r, count, size, presettled)
            routed.append(result["receive"]["msgs_per_s"])
            cpu.append(result["router_cpu_us_per_msg"])
    direct_rate, router_rate = statistics.median(direct), statistics.median(routed)
    return {
        "size": size, "presettled": presettled, "count": count,
        "direct_msgs_per_s": direct_rate, "router_msgs_per_s": router_rate,
        "ratio": router_rate / direct_rate, "router_cpu_us_per_msg": statistics.median(cpu),
        "runs": {"direct": direct, "router": routed},
    }  # fmt: skip


def through_multicast(binary: Path, r: Router, count: int, size: int, receivers: int) -> dict[str, Any]:
    """One loadgen send to a multicast address, `receivers` loadgen receive on it: each gets
    every message. The rate is the slowest receiver's (messages, not copies, per second)."""
    address = f"mc/bench-{size}-{time.monotonic_ns()}"
    common = ["--host", "127.0.0.1", "--port", str(r.port), "--address", address, "--count", str(count)]
    consumers = [_loadgen(binary, "receive", *common) for _ in range(receivers)]
    time.sleep(0.5)  # every receiver's attach must reach the router before the first message
    cpu0 = r.cpu_seconds()
    sender = _loadgen(binary, "send", *common, "--size", str(size))
    sent = _finish("send", sender)
    received = [_finish("receive", c) for c in consumers]
    cpu = r.cpu_seconds() - cpu0
    rate = min(result["msgs_per_s"] for result in received)
    return {"send": sent, "receive": received, "msgs_per_s": rate, "router_cpu_us_per_msg": cpu / count * 1e6}


def multicast(binary: Path, *, size: int, count: int, rounds: int, receivers: int = 2) -> dict[str, Any]:
    """Multicast 1 -> `receivers`, unsettled (each copy accepted; the producer hears once all
    are), its ratio to the 1 -> 1 direct ceiling of the same run."""
    direct, routed, cpu = [], [], []
    with router(addresses=[{"prefix": "mc", "distribution": "multicast"}]) as r:
        for _ in range(rounds):
            d = run_direct(count, size, presettled=False, binary=binary)
            direct.append(d["listen"]["msgs_per_s"])
            result = through_multicast(binary, r, count, size, receivers)
            routed.append(result["msgs_per_s"])
            cpu.append(result["router_cpu_us_per_msg"])
    direct_rate, router_rate = statistics.median(direct), statistics.median(routed)
    return {
        "size": size, "receivers": receivers, "count": count,
        "direct_msgs_per_s": direct_rate, "router_msgs_per_s": router_rate,
        "ratio": router_rate / direct_rate, "router_cpu_us_per_msg": statistics.median(cpu),
        "runs": {"direct": direct, "router": routed},
    }  # fmt: skip


@contextmanager
def chain(length: int) -> Iterator[list[Router]]:
    """Interior routers in a line, R1 - R2 - ... ; each dials the one before it."""
    routers: list[Router] = []
    try:
        for i in range(1, length + 1):
            listeners: list[dict[str, Any]] = [{"name": "amqp", "host": "127.0.0.1", "port": 0}]
            if i < length:
                listeners.append({"name": "inter", "host": "127.0.0.1", "port": 0, "role": "inter-router"})
            connectors = [] if i == 1 else [{"name": "up", "host": "127.0.0.1", "port": routers[-1].ports["inter"]}]
            routers.append(Router({
                "router": {"id": f"R{i}", "mode": "interior"}, "listeners": listeners, "connectors": connectors,
            }))  # fmt: skip
        yield routers
    finally:
        for r in routers:
            r.stop()


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of the whole machine so far, in clock ticks (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def through_chain(binary: Path, *, size: int, count: int, rounds: int, length: int = 3) -> dict[str, Any]:
    """Send into the first router of a chain, receive from the last; alternate with direct runs.
    The sender gets credit once the receiver's address has reached the first router. Also: how
    busy the whole machine was during the routed runs (whether the chain had CPU to spare)."""
    direct, routed, cpu, busy = [], [], [], []
    with chain(length) as routers:
        first, last = routers[0], routers[-1]
        for _ in range(rounds):
            direct.append(run_direct(count, size, presettled=False, binary=binary)["listen"]["msgs_per_s"])
            address = f"chain-{time.monotonic_ns()}"
            common = ["--host", "127.0.0.1", "--address", address, "--count", str(count)]
            receiver = _loadgen(binary, "receive", *common, "--port", str(last.port))
            time.sleep(0.3)
            cpu0 = [r.cpu_seconds() for r in routers]
            busy0, total0 = machine_jiffies()
            sender = _loadgen(binary, "send", *common, "--port", str(first.port), "--size", str(size))
            _finish("send", sender)
            routed.append(_finish("receive", receiver)["msgs_per_s"])
            cpu.append([(r.cpu_seconds() - c) / count * 1e6 for r, c in zip(routers, cpu0)])
            busy1, total1 = machine_jiffies()
            busy.append(100 * (busy1 - busy0) / max(1, total1 - total0))
    direct_rate, router_rate = statistics.median(direct), statistics.median(routed)
    return {
        "routers": length, "size": size, "count": count,
        "direct_msgs_per_s": direct_rate, "router_msgs_per_s": router_rate, "ratio": router_rate / direct_rate,
        "cpu_us_per_msg_each_router": [statistics.median(c[i] for c in cpu) for i in range(length)],
        "machine_busy_percent": statistics.median(busy),  # of all cores, during the routed runs
        "runs": {"direct": direct, "router": routed},
    }  # fmt: skip


BUSY_POLL_US = 50  # the busy-polling router of scenario 4 (router.busy_poll_us)


def _pingpong_through(binary: Path, r: Router, count: int, clients_cpu: int | None = None) -> dict[str, Any]:
    common = ["--host", "127.0.0.1", "--port", str(r.port)]
    echo = _loadgen(binary, "echo", *common, "--address", "ping", "--count", str(count), cpu=clients_cpu)
    time.sleep(0.3)
    pp = _loadgen(binary, "pingpong", *common, "--address", "ping", "--reply-address", "pong",
                  "--count", str(count), "--size", "100", cpu=clients_cpu)  # fmt: skip
    result = _finish("pingpong", pp)
    echo.terminate()
    echo.communicate(timeout=10)
    return result


# Scenario 4 as the target words it ("client and router on different cores"): the router alone
# on one CPU, both clients on another; the direct pair across the same two CPUs.
PINNED_ROUTER_CPU, PINNED_CLIENTS_CPU = 1, 0


def _can_pin() -> bool:
    return shutil.which("taskset") is not None and {PINNED_ROUTER_CPU, PINNED_CLIENTS_CPU} <= os.sched_getaffinity(0)


def pingpong(binary: Path, *, count: int, rounds: int) -> dict[str, Any]:
    """Request/response round trips: direct, through a router as configured by default, and
    through one that busy-polls (router.busy_poll_us; the two routers alternate in each round);
    then, where two CPUs can be pinned, the same placement the target names: the direct pair
    across two CPUs, and a router with the default configuration pinned to a CPU of its own
    (which it sees, and polls: router.net.busypoll) with both clients on the other."""
    direct: list[dict[str, Any]] = []
    routed: list[dict[str, Any]] = []
    busy: list[dict[str, Any]] = []
    pinned_direct: list[dict[str, Any]] = []
    pinned: list[dict[str, Any]] = []
    with router() as plain, router(settings={"busy_poll_us": BUSY_POLL_US}) as polling:
        for i in range(rounds):
            direct.append(run_direct_pingpong(count, 100, binary=binary)["pingpong"])
            for r, results in ((plain, routed), (polling, busy))[:: 1 if i % 2 == 0 else -1]:
                results.append(_pingpong_through(binary, r, count))
    if _can_pin():
        with router(prefix=tuple(taskset(PINNED_ROUTER_CPU))) as own_cpu:
            for _ in range(rounds):
                cpus = (PINNED_ROUTER_CPU, PINNED_CLIENTS_CPU)
                pinned_direct.append(run_direct_pingpong(count, 100, binary=binary, cpus=cpus)["pingpong"])
                pinned.append(_pingpong_through(binary, own_cpu, count, clients_cpu=PINNED_CLIENTS_CPU))
    p50_direct = statistics.median(x["p50_us"] for x in direct)
    p50_router = statistics.median(x["p50_us"] for x in routed)
    p50_busy = statistics.median(x["p50_us"] for x in busy)
    placed: dict[str, Any] = {}
    if pinned:
        p50_pinned_direct = statistics.median(x["p50_us"] for x in pinned_direct)
        p50_pinned = statistics.median(x["p50_us"] for x in pinned)
        placed = {"pinned_direct_p50_us": p50_pinned_direct, "pinned_router_p50_us": p50_pinned,
                  "pinned_p50_ratio": p50_pinned / p50_pinned_direct,
                  "pinned_router_p99_us": statistics.median(x["p99_us"] for x in pinned)}  # fmt: skip
    return {**placed,
        "direct_p50_us": p50_direct, "router_p50_us": p50_router, "p50_ratio": p50_router / p50_direct,
        "router_p99_us": statistics.median(x["p99_us"] for x in routed),
        "router_p999_us": statistics.median(x["p999_us"] for x in routed),
        "direct_p99_us": statistics.median(x["p99_us"] for x in direct),
        "busy_poll_us": BUSY_POLL_US, "busy_poll_p50_us": p50_busy, "busy_poll_p50_ratio": p50_busy / p50_direct,
        "busy_poll_p99_us": statistics.median(x["p99_us"] for x in busy),
    }  # fmt: skip


# How many idle connections the benchmark opens at once (SASL, open and begin each): enough to
# keep the router busy, few enough that none waits so long in the accept queue that it fails.
IDLE_OPENING_AT_ONCE = 200
# The router's handshake time-out (the listener default): RSS is read once it has passed after
# the last connection, so that nothing held only during a handshake is counted.
IDLE_HANDSHAKE_TIMEOUT_S = 10.0


def raise_open_files_limit(needed: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards its hard limit (the router raises its own);
    returns the soft limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = hard if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def idle_connections(count: int) -> dict[str, Any]:
    """Router RSS growth per idle AMQP connection (each opened with SASL, open and a session),
    read after the handshake time-out of the last one has passed. The clients (our own client
    on trio) run in this process, at most IDLE_OPENING_AT_ONCE opening at a time."""
    import trio

    from router.net.client import connect

    limit = raise_open_files_limit(count + 256)
    if limit < count + 64:
        raise RuntimeError(f"{count} idle connections need {count + 64} descriptors; RLIMIT_NOFILE allows {limit}")
    with router(idle_timeout_s=0, handshake_timeout_s=IDLE_HANDSHAKE_TIMEOUT_S) as r:
        time.sleep(0.5)
        before = r.rss_bytes()
        result: dict[str, float] = {}

        async def hold() -> None:
            opened = trio.Event()
            opening = trio.Semaphore(IDLE_OPENING_AT_ONCE)
            held = 0

            async def one() -> None:
                nonlocal held
                await opening.acquire()
                releasing = True
                try:
                    async with connect("127.0.0.1", r.port):
                        opening.release()
                        releasing = False
                        held += 1
                        if held == count:
                            opened.set()
                        await trio.sleep_forever()  # cancelled at the end
                finally:
                    if releasing:  # it failed (or was cancelled) while opening
                        opening.release()

            async with trio.open_nursery() as nursery:
                started = trio.current_time()
                for _ in range(count):
                    nursery.start_soon(one)
                with trio.fail_after(600):
                    await opened.wait()
                result["open_s"] = trio.current_time() - started
                await trio.sleep(IDLE_HANDSHAKE_TIMEOUT_S + 0.5)
                result["rss"] = r.rss_bytes()
                nursery.cancel_scope.cancel()

        trio.run(hold)
        after = result["rss"]
    return {"connections": count, "rss_before_mib": before / 2**20, "rss_after_mib": after / 2**20,
            "rss_per_connection_kib": (after - before) / count / 1024, "open_s": result["open_s"]}  # fmt: skip


def slow_consumer(binary: Path, *, count: int, size: int) -> dict[str, Any]:
    """A fast presettled producer and a consumer reading slowly: the router's memory must stay
    bounded (credit windows and write back-pressure), whatever the producer does."""
    with router() as r:
        peak = baseline = r.rss_bytes()
        common = ["--host", "127.0.0.1", "--port", str(r.port), "--address", "slow"]
        consumer = subprocess.Popen(
            [sys.executable, "-c", _SLOW_CONSUMER, str(r.port)], stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
        )  # fmt: skip
        time.sleep(0.5)
        sender = _loadgen(binary, "send", *common, "--count", str(count), "--size", str(size), "--presettled")
        while sender.poll() is None:
            peak = max(peak, r.rss_bytes())
            time.sleep(0.05)
        consumer.terminate()
        consumer.communicate(timeout=10)
        sender.communicate(timeout=10)
    return {"messages": count, "size": size, "rss_baseline_mib": baseline / 2**20,
            "rss_peak_mib": peak / 2**20, "rss_growth_mib": (peak - baseline) / 2**20}  # fmt: skip


_SLOW_CONSUMER = """
import sys, trio
from router.net.client import connect
async def main():
    async with connect("127.0.0.1", int(sys.argv[1])) as client:
        receiver = await client.open_receiver("slow", credit=10)
        while True:
            receiver.accept(await receiver.receive())
            await trio.sleep(0.001)
trio.run(main)
"""


def run_chain(quick: bool = False) -> dict[str, Any]:
    """Scenario 7 alone (`python -m bench chain`)."""
    n = int(200_000 * (0.2 if quick else 1.0))
    rounds = 1 if quick else 3
    return {"7_chain_of_3_100b_unsettled": through_chain(build(BUILD), size=100, count=5 * n, rounds=rounds)}


def run(quick: bool = False) -> dict[str, Any]:
    binary = build(BUILD)
    scale = 0.2 if quick else 1.0
    rounds = 1 if quick else 3
    n = int(200_000 * scale)
    return {
        "1_anycast_100b_unsettled": throughput(binary, size=100, presettled=False, count=5 * n, rounds=rounds),
        "2_anycast_100b_presettled": throughput(binary, size=100, presettled=True, count=5 * n, rounds=rounds),
        "3_anycast_10kib_unsettled": throughput(binary, size=10240, presettled=False, count=n, rounds=rounds),
        "4_pingpong_latency": pingpong(binary, count=int(5000 * scale), rounds=rounds),
        "5_idle_connections": idle_connections(int(10_000 * scale)),
        "6_slow_consumer": slow_consumer(binary, count=int(100_000 * scale), size=1024),
        "7_chain_of_3_100b_unsettled": through_chain(binary, size=100, count=5 * n, rounds=rounds),
        "8_multicast_1_to_2_100b_unsettled": multicast(binary, size=100, count=5 * n, rounds=rounds),
    }


def run_multicast(quick: bool = False) -> dict[str, Any]:
    """Scenario 8 alone (`python -m bench.scenarios multicast [--quick]`)."""
    n = int(200_000 * (0.2 if quick else 1.0))
    rounds = 1 if quick else 3
    return {"8_multicast_1_to_2_100b_unsettled": multicast(build(BUILD), size=100, count=5 * n,
                                                           rounds=rounds)}  # fmt: skip


if __name__ == "__main__":  # python -m bench.scenarios idle [COUNT] | multicast | pingpong
    import json

    if len(sys.argv) >= 2 and sys.argv[1] == "idle":
        from router.build_info import build_info

        print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
        print(json.dumps(idle_connections(int(sys.argv[2]) if len(sys.argv) > 2 else 10_000), indent=2))
    elif len(sys.argv) >= 2 and sys.argv[1] in ("multicast", "pingpong"):
        from router.build_info import build_info

        print(f"router build: hot path {build_info().describe()}; python {sys.version.split()[0]}")
        quick = "--quick" in sys.argv
        if sys.argv[1] == "multicast":
            print(json.dumps(run_multicast(quick), indent=2))
        else:  # scenario 4 alone
            print(json.dumps(pingpong(build(BUILD), count=1000 if quick else 5000, rounds=1 if quick else 3), indent=2))
    else:
        raise SystemExit("usage: python -m bench.scenarios idle [COUNT] | multicast [--quick] | pingpong [--quick]")
