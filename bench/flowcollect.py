"""The flow records collector's throughput (docs/flow-records.md, "The collector").

    python bench/flowcollect.py [--records N] [--batch N]

1. the writer alone: batches of synthetic records (JSON lines as a router sends them) decoded
   and written by PartitionWriter (gzip member, fsync of every part file, the dedupe state
   replaced), as `router collect` does for each message: records per second;
2. end to end: a `router run` process, `router collect` as a process subscribed through it, and
   a publisher sending the same batches to the flow address, presettled (all at once, as a
   router with files sends them), then one at a time, each unsettled until the collector
   accepted it (as a router sends its own without files): records per second as the collector
   reports them (from its first record to the stop), and the wall time until the last record
   is on disk.
"""

from __future__ import annotations

import gzip
import json
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import trio  # noqa: E402

from router.cli.collect_files import PartitionWriter  # noqa: E402
from router.flow.publish import batch_message  # noqa: E402
from router.flow.records import Emitter, decode_lines, encode_lines  # noqa: E402
from router.net.client import connect  # noqa: E402


def synthetic(count: int, routers: int = 3) -> list[list[dict]]:
    """Batches of 1000 records of the schema's types in realistic proportions."""
    rnd = random.Random(7)
    emitters = [Emitter(f"R{i}", capacity=count + 1, boot=f"boot{i}") for i in range(routers)]
    ts = time.time()
    for n in range(count):
        e = emitters[n % routers]
        kind = rnd.choice(("hop", "hop", "link_interval", "address_interval"))
        hist = [rnd.randrange(100) if i < 12 else 0 for i in range(32)]
        if kind == "hop":
            fields = {"trace_id": f"t{n}", "ingress": "R0", "address": "orders", "prev": None, "next": "R1",
                      "residence_us": rnd.randrange(200), "settle_us": rnd.randrange(5000), "outcome": "accepted"}
        else:
            fields = {"address": f"a{n % 50}", "interval_s": 10.0, "deliveries": 1000, "bytes": 100_000, "accepted": 990,
                      "rejected": 5, "released": 5, "modified": 0, "dropped": 0, "residence_hist": hist, "settle_hist": hist}
        e.emit(kind, ts + n / 1000, fields)
    batches = []
    for e in emitters:
        while records := e.take(1000):
            batches.append(records)
    return batches


def writer_rate(batches: list[list[dict]]) -> float:
    lines = [encode_lines(b) for b in batches]
    total = sum(len(b) for b in batches)
    with tempfile.TemporaryDirectory() as tmp:
        writer = PartitionWriter(tmp)
        started = time.perf_counter()
        for data in lines:
            writer.write(decode_lines(data))
        elapsed = time.perf_counter() - started
        writer.close()
        assert writer.written == total
    return total / elapsed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_to_end(batches: list[list[dict]], acknowledged: bool = False) -> tuple[float, float, str]:
    total = sum(len(b) for b in batches)
    env = {"PYTHONPATH": str(_HERE.parent), "PATH": "/usr/bin:/bin"}
    with tempfile.TemporaryDirectory() as tmp:
        port = _free_port()
        config = Path(tmp) / "r.yaml"
        config.write_text(f"router: {{id: bench}}\nlisteners: [{{name: amqp, host: 127.0.0.1, port: {port}}}]\n")
        router = subprocess.Popen([sys.executable, "-m", "router.cli.main", "run", "-c", str(config)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        time.sleep(1.5)
        out = Path(tmp) / "out"
        collector = subprocess.Popen([sys.executable, "-m", "router.cli.main", "collect", "--connect",
                                      f"127.0.0.1:{port}", "--dir", str(out)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        time.sleep(1.5)
        payloads = [batch_message(b, "_flow/records") for b in batches]

        async def publish() -> None:
            async with connect("127.0.0.1", port) as client:
                sender = await client.open_sender("_flow/records")
                for payload in payloads:
                    if acknowledged:  # as a router sends its own: the next once the collector accepted
                        tracker = await sender.start_send(payload)
                        await tracker.wait()
                    else:
                        await sender.start_send(payload, presettled=True)

        started = time.perf_counter()
        trio.run(publish)
        seen = 0
        while seen < total and time.perf_counter() - started < 120:
            time.sleep(0.2)
            state = out / "_collector" / "seen.json"
            if state.exists():
                try:
                    data = json.loads(state.read_text())
                    seen = sum((data["seen"] if "seen" in data else data).values())
                except ValueError:
                    pass
        wall = time.perf_counter() - started
        collector.send_signal(signal.SIGINT)
        _, err = collector.communicate(timeout=30)
        router.send_signal(signal.SIGTERM)
        router.wait(30)
        written = sum(1 for p in out.glob("date=*/hour=*/router=*/*.json.gz") for _ in gzip.open(p, "rt"))
        assert written == total, (written, total, err)
    return total / wall, wall, err.strip().splitlines()[-1]


def main(argv: list[str]) -> None:
    count = int(argv[argv.index("--records") + 1]) if "--records" in argv else 200_000
    batches = synthetic(count)
    print(f"{count:,} records in {len(batches)} batches of up to 1000")
    print(f"writer alone (decode, gzip, fsync, dedupe state): {writer_rate(batches):,.0f} records/s")
    for acknowledged in (False, True):
        rate, wall, summary = end_to_end(batches, acknowledged)
        how = "one batch at a time, each acknowledged" if acknowledged else "presettled"
        print(f"end to end through a router process, {how}: {rate:,.0f} records/s ({wall:.1f} s until all were on disk)")
        print(f"collector: {summary}")


if __name__ == "__main__":
    main(sys.argv[1:])
