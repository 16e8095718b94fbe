"""The mesh's per-message cost without sockets: a chain of routers (2 or 3) wired back to back
as in router/testing/meshharness.py, a producer on the first and a consumer on the last, and each router's
side timed on its own (its engines' receive_data, events and data_to_send, and its core's handle).
CPU time of one process, so other load on the machine hardly moves it: use it for every
before/after of the forwarding path between routers.

The consumer accepts in ranges (one disposition per batch) and grants credit in batches, as in
bench/relay.py; the producer sends in batches of its credit (at most 250).

    python bench/meshrelay.py                        # 1 (a local relay), 2 and 3 routers
    python bench/meshrelay.py --routers 3 --presettled
    python bench/meshrelay.py --routers 3 --profile B  # a cProfile of router B's side only

Reported: µs per message for each router (A = ingress, the last = egress, between = transit)
and for all of them together; a "chain" of 1 is a local relay in the same harness.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

# The checkout (or compiled build) first; and not this directory, whose topology.py (a bench
# suite) would hide the topology package where the build has no copy of it.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from router.amqp.connection import Connection  # noqa: E402
from router.amqp.message import Message, encode_message  # noqa: E402
from router.amqp.messaging import Properties  # noqa: E402
from router.core.router import RouterCore  # noqa: E402
from bench.relay import consume  # noqa: E402
from router.testing.meshharness import MeshHarness  # noqa: E402

NAMES = "ABCDEFGH"


class TimedMesh:
    """A converged chain of routers; `pump` moves bytes like MeshHarness.pump, charging each
    router the CPU time of its own engines and core."""

    def __init__(self, routers: int, profile: str | None = None) -> None:
        self.h = h = MeshHarness()
        self.ids = NAMES[:routers]
        for i, rid in enumerate(self.ids):
            h.router(rid, instance=i + 1)
        for a, b in zip(self.ids, self.ids[1:]):
            h.link(a, b)
        h.converge()
        self.spent: dict[str, float] = dict.fromkeys(self.ids, 0.0)
        self.names = {id(core): rid for rid, core in h.cores.items()}
        self.profiled = h.cores[profile] if profile is not None else None
        self.profiler = cProfile.Profile() if profile is not None else None

    def reset(self) -> None:
        self.spent = dict.fromkeys(self.ids, 0.0)

    def _charge(self, core: RouterCore, started: float) -> None:
        self.spent[self.names[id(core)]] += time.process_time() - started

    def pump(self, on_client: Any) -> None:
        clock = time.process_time
        now = self.h.now
        profiled, profiler = self.profiled, self.profiler
        for _ in range(100_000):
            moved = False
            for wire in self.h.wires:
                for src, dst, dst_core, dst_client in wire.ends():
                    if not src.pending_output:
                        continue  # nothing to take (a router's writer is woken only when there is)
                    src_core = wire.a_core if src is wire.a else wire.b_core
                    if src_core is not None:
                        on = profiler is not None and src_core is profiled
                        started = clock()
                        if on:
                            profiler.enable()  # type: ignore[union-attr]
                        data = src.data_to_send()
                        if on:
                            profiler.disable()  # type: ignore[union-attr]
                        self._charge(src_core, started)
                    else:
                        data = src.data_to_send()
                    if not data:
                        continue
                    moved = True
                    if dst_core is not None:
                        on = profiler is not None and dst_core is profiled
                        started = clock()
                        if on:
                            profiler.enable()  # type: ignore[union-attr]
                        dst.receive_data(data, now)
                        dst_core.handle(dst, dst.events(), now)
                        if on:
                            profiler.disable()  # type: ignore[union-attr]
                        self._charge(dst_core, started)
                    else:
                        dst.receive_data(data, now)
                        assert dst_client is not None
                        on_client(dst_client.engine, dst.events())
            for core in self.h.cores.values():
                core.take_touched()
            if not moved:
                return
        raise AssertionError("the mesh never went quiet")


def run_chain(routers: int, count: int, presettled: bool, profile: str | None = None, size: int = 60,
              batch_max: int = 250) -> dict[str, float]:
    mesh = TimedMesh(routers, profile)
    h = mesh.h
    first, last = mesh.ids[0], mesh.ids[-1]
    consumer = h.client(last, "consumer")
    receiver = consumer.receiver("q")
    h.advance(0.5)  # the address reaches every router
    receiver.flow(1000)
    producer = h.client(first, "producer")
    sender = producer.sender("q")
    h.pump()
    payload = encode_message(Message.value("x" * size, properties=Properties(to="q")))
    received: list[int] = []
    outcomes = [0]

    def on_client(engine: Connection, events: list[Any]) -> None:
        if engine is consumer.engine:
            consume(events, receiver, presettled, received)
        elif not presettled:
            outcomes[0] += sum(e.last - e.first + 1 for e in events if type(e).__name__ == "DispositionReceived")

    mesh.reset()
    sent = 0
    while sent < count:
        batch = min(sender.credit, count - sent, batch_max)
        assert batch > 0, "the producer has no credit"
        for i in range(batch):
            sender.send_transfer(i.to_bytes(4, "big"), payload, settled=presettled)
        sent += batch
        mesh.pump(on_client)
    assert len(received) == count, (len(received), count)
    assert presettled or outcomes[0] == count, (outcomes[0], count)
    if mesh.profiler is not None:
        pstats.Stats(mesh.profiler).sort_stats("tottime").print_stats(30)
    result = {rid: spent / count * 1e6 for rid, spent in mesh.spent.items()}
    result["total"] = sum(mesh.spent.values()) / count * 1e6
    return result


def best_of(runs: int, routers: int, count: int, presettled: bool, size: int = 60, batch_max: int = 250) -> dict[str, float]:
    """Per router, the lowest of `runs` runs (noise only ever adds time), after a short run that
    is not counted (the first run in a process pays for imports, caches and allocator growth)."""
    run_chain(routers, 2000, presettled, size=size, batch_max=batch_max)
    results = [run_chain(routers, count, presettled, size=size, batch_max=batch_max) for _ in range(runs)]
    return {key: min(r[key] for r in results) for key in results[0]}


def run(count: int = 20000, runs: int = 3) -> dict[str, dict[str, float]]:
    out = {}
    for routers in (1, 2, 3):
        for presettled in (False, True):
            name = f"chain{routers}_{'presettled' if presettled else 'unsettled'}_us_per_msg"
            out[name] = best_of(runs, routers, count, presettled)
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routers", type=int, choices=(1, 2, 3, 4, 5), help="only this chain length (1: a local relay, for comparison)")
    parser.add_argument("--presettled", action="store_true", help="only presettled (default: both)")
    parser.add_argument("--unsettled", action="store_true", help="only unsettled")
    parser.add_argument("--count", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the lowest is kept)")
    parser.add_argument("--size", type=int, default=60, help="body size (about 100 bytes per message at 60)")
    parser.add_argument("--batch", type=int, default=250, help="messages the producer sends between pumps")
    parser.add_argument("--profile", metavar="ROUTER", help="print a cProfile of this router's side (one run)")
    args = parser.parse_args(argv)
    if args.profile is not None:
        routers = args.routers or 3
        result = run_chain(routers, args.count, args.presettled, profile=args.profile, size=args.size,
                           batch_max=args.batch)
        print({k: round(v, 2) for k, v in result.items()})
        return
    chains = (args.routers,) if args.routers else (1, 2, 3)
    modes = [False, True]
    if args.presettled != args.unsettled:
        modes = [args.presettled]
    for routers in chains:
        for presettled in modes:
            best = best_of(args.runs, routers, args.count, presettled, args.size, args.batch)
            mode = "presettled" if presettled else "unsettled"
            print(f"{routers} routers, {mode:10}: " + "  ".join(f"{k} {v:5.2f}" for k, v in best.items()) + "  µs/msg")


if __name__ == "__main__":
    main(sys.argv[1:])
