"""The flow-record pipeline end to end: three `router run` processes in a chain A - B - C, the
B - C link through a WAN relay that delays every byte 20 ms each way; `router collect`
subscribed through A; 30 messages from a producer on A to a consumer on C, which accepts 20,
rejects 6 and releases 4 (as each body says). Once the records covering them are on disk, the
collector stops, the PySpark job runs on its files, and `topology report --json` shows every
delivery once with the outcome its producer learnt, an RTT for B - C larger than A - B's by
about the added delay, and a higher suggested cost for B - C than for A - B.

Skips (saying why) without pyspark or Java, through the session `spark` fixture.
"""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from router.amqp.message import Message
from router.net.client import connect
from router.net.management_client import management_session
from router.testing.processes import RouterProcess, router_command, router_env

# The shared SparkSession's first job takes tens of seconds on a busy machine (the JVM's warm-up).
pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]

DELAY_MS = 20  # one way: a round trip over B - C costs 40 ms more than over A - B
OUTCOMES = ["accept"] * 20 + ["reject"] * 6 + ["release"] * 4
NODE_TYPE = "org.apache.qpid.dispatch.router.node"
TIMERS = {"hello_interval_s": 0.25, "dead_interval_s": 2.0}
FLOW = {"enabled": True, "interval_s": 1, "sample_one_in": 1}


def _config(name: str, *, inter: bool, dial: int | None) -> dict[str, Any]:
    listeners: list[dict[str, Any]] = [{"name": "amqp", "host": "127.0.0.1", "port": 0}]
    if inter:
        listeners.append({"name": "inter", "host": "127.0.0.1", "port": 0, "role": "inter-router"})
    connectors = [] if dial is None else [
        {"name": "up", "host": "127.0.0.1", "port": dial, "role": "inter-router", "reconnect_initial_s": 0.1, "reconnect_max_s": 1.0}
    ]  # fmt: skip
    return {"router": {"id": name, "mode": "interior", **TIMERS}, "listeners": listeners, "connectors": connectors, "flow": FLOW}


def _start_router(stack: ExitStack, directory: Path, config: dict[str, Any]) -> RouterProcess:
    path = directory / f"{config['router']['id']}.yaml"
    path.write_text(yaml.safe_dump(config))
    process = RouterProcess(path, listeners=len(config["listeners"]))
    stack.callback(_stop_router, process)
    process.start()
    return process


def _stop_router(process: RouterProcess) -> None:
    if process.proc is not None and process.proc.poll() is None:
        code = process.stop()
        assert code == 0, f"router exited with {code}:\n{process.output}"
    process.kill()


@contextmanager
def _relay(target_port: int) -> Iterator[int]:
    """router.testing.wanrelay from a free loopback port to `target_port`; yields the port."""
    relay = subprocess.Popen(
        [sys.executable, "-m", "router.testing.wanrelay", "--delay-ms", str(DELAY_MS), "--route", f"127.0.0.1:0=127.0.0.1:{target_port}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=router_env(),
    )  # fmt: skip
    assert relay.stdin is not None and relay.stdout is not None
    try:
        line = relay.stdout.readline()
        assert line.startswith("relaying 127.0.0.1:"), f"the relay did not start: {line!r}"
        yield int(line.split()[1].rpartition(":")[2])
    finally:
        relay.stdin.close()  # it exits when standard input closes
        try:
            relay.wait(10)
        except subprocess.TimeoutExpired:
            relay.kill()
            relay.wait(10)


@contextmanager
def _collector(port: int, directory: Path) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        router_command("collect", "--connect", f"127.0.0.1:{port}", "--dir", str(directory)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=router_env(),
    )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)


def _stop_collector(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    return err


def _read_records(root: Path) -> list[dict[str, Any]]:
    """Every record the collector has written so far, in its files in progress too; a member it
    is still writing is skipped (the next poll reads it whole)."""
    records: list[dict[str, Any]] = []
    for path in sorted(root.glob("date=*/hour=*/router=*/*part-*.json.gz*")):
        try:
            with gzip.open(path, "rt") as f:
                lines = f.read().splitlines()
        except (EOFError, OSError, zlib.error):
            continue
        for line in lines:
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
    return records


def _wait_for(predicate: Callable[[], bool], what: Callable[[], str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what()}"
        time.sleep(0.2)  # polling files another process writes: no event crosses the boundary


def _coverage(root: Path) -> tuple[int, dict[str, int]]:
    """The outcomes the ingress link's interval records count, and each router's hop records."""
    records = _read_records(root)
    ingress = [r for r in records if r["type"] == "link_interval" and r["router"] == "A" and r["direction"] == "in"
               and r["role"] == "normal" and r["address"] == "orders"]  # fmt: skip
    settled = sum(r["accepted"] + r["rejected"] + r["released"] + r["modified"] for r in ingress)
    hops = {rid: sum(1 for r in records if r["type"] == "hop" and r["router"] == rid and r["address"] == "orders") for rid in "ABC"}
    return settled, hops


def _covered(root: Path) -> bool:
    """The ingress link's interval records count all 30 deliveries and their outcomes, and each
    router has written a hop record for every one of them."""
    settled, hops = _coverage(root)
    return settled >= len(OUTCOMES) and all(n >= len(OUTCOMES) for n in hops.values())


async def _wait_converged(ports: dict[str, int], timeout_s: float = 20.0) -> None:
    with trio.fail_after(timeout_s):
        while True:
            done = True
            for name, port in ports.items():
                async with connect("127.0.0.1", port) as client, management_session(client) as mgmt:
                    known = {row["id"] for row in await mgmt.query_dicts(NODE_TYPE) if row.get("nextHop")}
                if not set(ports) - {name} <= known:
                    done = False
                    break
            if done:
                return
            await trio.sleep(0.1)  # polling management: there is no event to wait for across processes


async def _traffic(producer_port: int, consumer_port: int) -> list[str]:
    """Send one message per entry of OUTCOMES (its body) from A to a consumer on C that settles
    each as its body says; the outcomes the producer learnt, in order."""
    async with connect("127.0.0.1", consumer_port) as consumer_client, connect("127.0.0.1", producer_port) as producer_client:
        receiver = await consumer_client.open_receiver("orders", credit=len(OUTCOMES))

        async def consume() -> None:
            for _ in OUTCOMES:
                delivery = await receiver.receive()
                action = delivery.message.body_value
                if action == "accept":
                    receiver.accept(delivery)
                elif action == "reject":
                    receiver.reject(delivery, "app:refused", "the body says so")
                else:
                    receiver.release(delivery)

        with trio.fail_after(30):
            # The consumer's address reaches A through the mesh: until then A has no route for it.
            while True:
                async with management_session(producer_client) as mgmt:
                    rows = await mgmt.query_dicts("org.apache.qpid.dispatch.router.address")
                if any(r.get("address") == "orders" and (r.get("remoteCount") or 0) > 0 for r in rows):
                    break
                await trio.sleep(0.1)  # polling management: no event crosses the processes
            sender = await producer_client.open_sender("orders")
            told: list[str] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                for action in OUTCOMES:
                    outcome = await sender.send(Message.value(action))
                    told.append(type(outcome).__name__)
        return told


def test_known_traffic_through_collector_job_and_report(spark: Any, tmp_path: Path) -> None:
    from pipeline.job import run

    records, out = tmp_path / "records", tmp_path / "out"
    with ExitStack() as stack:
        a = _start_router(stack, tmp_path, _config("A", inter=True, dial=None))
        b = _start_router(stack, tmp_path, _config("B", inter=True, dial=a.ports["inter"]))
        relay_port = stack.enter_context(_relay(b.ports["inter"]))
        c = _start_router(stack, tmp_path, _config("C", inter=False, dial=relay_port))
        ports = {"A": a.ports["amqp"], "B": b.ports["amqp"], "C": c.ports["amqp"]}
        trio.run(_wait_converged, ports)
        collector = stack.enter_context(_collector(ports["A"], records))
        told = trio.run(_traffic, ports["A"], ports["C"])
        assert told == ["Accepted"] * 20 + ["Rejected"] * 6 + ["Released"] * 4
        _wait_for(lambda: _covered(records), lambda: f"the records covering the traffic (so far {_coverage(records)})")
        summary = _stop_collector(collector)
        assert " 0 message(s) refused" in summary, summary

    result = run(records, out, spark=spark)
    assert result["new_records"] > 0
    shown = subprocess.run(
        [sys.executable, "-m", "topology.cli.main", "report", "--data", str(out), "--json"],
        capture_output=True, text=True, env=router_env(), timeout=60,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)

    # Every delivery once, with the outcome its producer learnt
    (orders,) = [r for r in report["outcomes"] if r["address"] == "orders"]
    assert (orders["deliveries"], orders["accepted"], orders["rejected"], orders["released"]) == (30, 20, 6, 4)
    assert (orders["modified"], orders["dropped"]) == (0, 0)
    pairs = {(r["router"], r["peer"]): 0 for r in report["pair_throughput"]}
    for r in report["pair_throughput"]:
        pairs[(r["router"], r["peer"])] += r["deliveries"]
    assert pairs.get(("A", "B")) == 30 and pairs.get(("B", "C")) == 30, pairs

    # The slowed link: its RTT is larger by about the added delay (both ways), its cost higher
    rtt = {(r["router_a"], r["router_b"]): r for r in report["link_rtt"]}
    fast, slow = rtt[("A", "B")]["rtt_p50_us"], rtt[("B", "C")]["rtt_p50_us"]
    assert rtt[("A", "B")]["samples"] >= 30 and rtt[("B", "C")]["samples"] >= 30
    assert 0.8 * 2 * DELAY_MS * 1000 <= slow - fast <= 3 * 2 * DELAY_MS * 1000, (fast, slow)
    costs = {(r["router_a"], r["router_b"]): r for r in report["suggested_costs"]}
    assert costs[("A", "B")]["current_cost"] == 1 and costs[("A", "B")]["suggested_cost"] == 1
    assert not costs[("A", "B")]["changed"]
    assert costs[("B", "C")]["suggested_cost"] > costs[("A", "B")]["suggested_cost"] and costs[("B", "C")]["changed"]
