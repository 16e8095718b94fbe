"""Priorities on inter-router links: latency of small urgent messages through a chain of 3
router processes while large low-priority messages stream on the same path.

    python bench/priority.py [--bands 1,4,10] [--size-mib 10] [--samples 300] [--interval-ms 10] [--socket-buffer N]

For each band count (router.priority_bands on all three routers; 1 = one data link per
direction, "without priorities") it starts routers A - B - C (router/testing/meshprocs.py),
then
- a bulk process: a sender on A streaming `--size-mib` messages (header priority 0, two in
  flight) to a receiver on C, for as long as the measurement lasts;
- here: a sender on A and a receiver on C of small messages (100 B, header priority 9), one
  every `--interval-ms`, each timed from the send to its arrival (the same clock).
It reports p50 / p99 / max of the small messages' latency, and the bulk stream's MiB/s over the
same time (the cost of the urgent traffic to it shows there). The routers run the build this
file's `router` package belongs to: run it from build/compiled for the compiled build.
Figures are reported, not asserted (bench/README.md, "Priorities").
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
# The checkout (or build/compiled) first; not this directory, whose topology.py would hide the
# topology package.
sys.path[:] = [str(HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != HERE]

from router.amqp.message import Message  # noqa: E402
from router.amqp.messaging import Header  # noqa: E402
from router.build_info import build_info  # noqa: E402
from router.net.client import connect  # noqa: E402
from router.testing.meshprocs import MeshProcesses  # noqa: E402
from router.testing.processes import router_env  # noqa: E402

WARMUP_S = 1.0  # the bulk stream runs this long before the first sample


async def bulk(port_a: int, port_c: int, size: int, stop_file: Path) -> None:
    """Stream large priority-0 messages A -> C until `stop_file` exists; print MiB/s."""
    payload = b"b" * size
    async with connect("127.0.0.1", port_c) as rx_client, connect("127.0.0.1", port_a) as tx_client:
        receiver = await rx_client.open_receiver("bulk", credit=4)
        sender = await tx_client.open_sender("bulk")
        received = 0
        start = 0.0

        async def consume() -> None:
            nonlocal received, start
            while True:
                delivery = await receiver.receive()
                receiver.accept(delivery)
                if not start:
                    start = time.perf_counter()  # counted from the first arrival
                else:
                    received += len(delivery.payload)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            trackers = []
            while not stop_file.exists():
                trackers.append(await sender.start_send(Message.value(payload, header=Header(priority=0))))
                if len(trackers) >= 2:  # two in flight: the path is never idle
                    await trackers.pop(0).wait()
            elapsed = time.perf_counter() - start if start else 0.0
            print(json.dumps({"bulk_mib_s": received / (1 << 20) / elapsed if elapsed else 0.0}), flush=True)
            nursery.cancel_scope.cancel()


async def urgent(port_a: int, port_c: int, samples: int, interval_s: float) -> list[float]:
    """Latencies (s) of `samples` small priority-9 messages A -> C, one per `interval_s`."""
    latencies: list[float] = []
    async with connect("127.0.0.1", port_c) as rx_client, connect("127.0.0.1", port_a) as tx_client:
        receiver = await rx_client.open_receiver("urgent", credit=100)
        sender = await tx_client.open_sender("urgent")
        sent_at: dict[int, float] = {}

        async def consume() -> None:
            while len(latencies) < samples:
                delivery = await receiver.receive()
                arrived = time.perf_counter()
                receiver.accept(delivery)
                index = delivery.message.body_value["i"]
                latencies.append(arrived - sent_at.pop(index))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await trio.sleep(WARMUP_S)
            for i in range(samples):
                message = Message.value({"i": i, "pad": b"u" * 80}, header=Header(priority=9))
                sent_at[i] = time.perf_counter()
                await sender.start_send(message)
                await trio.sleep(interval_s)
            with trio.fail_after(60):
                while len(latencies) < samples:
                    await trio.sleep(0.05)
    return latencies


def run(bands: int, size: int, samples: int, interval_s: float, socket_buffer: int = 0) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as directory:
        router = {"mode": "interior", "priority_bands": bands}
        extra = {name: {"router": {"id": name, **router, "hello_interval_s": 1.0, "dead_interval_s": 3.0}}
                 for name in "ABC"}  # fmt: skip
        inter_router = {"socket_buffer_bytes": socket_buffer} if socket_buffer else {}
        with MeshProcesses(Path(directory), "A-B B-C", hello_interval_s=1.0, dead_interval_s=3.0, extra=extra,
                           inter_router=inter_router) as mesh:  # fmt: skip
            trio.run(mesh.wait_converged)
            stop_file = Path(directory) / "stop"
            bulk_process = subprocess.Popen(
                [sys.executable, __file__, "--bulk", str(mesh.port("A")), str(mesh.port("C")), str(size), str(stop_file)],
                stdout=subprocess.PIPE, env=router_env(), text=True,
            )  # fmt: skip
            try:
                latencies = trio.run(urgent, mesh.port("A"), mesh.port("C"), samples, interval_s)
            finally:
                stop_file.touch()
                out, _ = bulk_process.communicate(timeout=120)
            bulk_rate = json.loads(out.strip().splitlines()[-1])["bulk_mib_s"]
    ms = sorted(x * 1000 for x in latencies)
    return {
        "bands": bands,
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "max_ms": round(ms[-1], 2),
        "bulk_mib_s": round(bulk_rate, 1),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--bulk":
        port_a, port_c, size, stop_file = sys.argv[2:6]
        trio.run(bulk, int(port_a), int(port_c), int(size), Path(stop_file))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bands", default="1,4,10", help="band counts to compare (1: without priorities)")
    parser.add_argument("--size-mib", type=float, default=10.0)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--interval-ms", type=float, default=10.0)
    parser.add_argument("--socket-buffer", type=int, default=512 * 1024,
                        help="socket_buffer_bytes of the inter-router listeners and connectors (0: the kernel's "
                        "autotuning, the router's default)")  # fmt: skip
    args = parser.parse_args()
    info = build_info()
    print(f"build: {info.describe()}; inter-router socket buffers: {args.socket_buffer or 'autotuned'}")
    print(f"{'bands':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'bulk MiB/s':>11}")
    for bands in (int(b) for b in args.bands.split(",")):
        result = run(bands, int(args.size_mib * (1 << 20)), args.samples, args.interval_ms / 1000, args.socket_buffer)
        print(f"{result['bands']:>5} {result['p50_ms']:>8} {result['p99_ms']:>8} {result['max_ms']:>8} {result['bulk_mib_s']:>11}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
