"""Instructions per lone message: a `router run` process under valgrind's callgrind while Proton C
clients outside it (`loadgen echo` and `loadgen pingpong`, bench/loadgen) exchange requests and
replies one at a time, so that every message is read, routed and written on its own: what a
router at low load (or many independent flows at a low rate each, bench/pairs.py) pays per
message, reads, writes, wake-ups and trio's scheduler included. bench/instructions.py counts the
batched relay without sockets, where those costs are shared by many messages.

Two rounds of ping-pong through the same router (SMALL, then LARGE round trips), each counted
apart (callgrind_control dumps); per message = (LARGE's - SMALL's) / (LARGE - SMALL) / 2, as a
round trip carries two messages (the request and the reply, each unsettled, each accepted). The
router's start-up runs uninstrumented.

    python bench/lone.py [--top N] [--small 100] [--large 500] [--keep DIR] [--stream [--size B] [--multicast N]]

--stream counts scenario 1 of `python -m bench router` instead: `loadgen send` (1,000
unsettled) and `loadgen receive` through the router, so messages come in batches; per message =
(LARGE's - SMALL's) / (LARGE - SMALL), with --small 2000 --large 12000 by default. Unlike
bench/instructions.py (no sockets, clients counted too) it counts only the router process, reads,
writes and trio included: the deterministic figure for that scenario's router CPU, which timed
runs on a shared machine measure only to ~10 %. (Under valgrind the router is the slowest party,
so its batches are larger than in a timed run.) --stream --multicast 2 counts scenario 8: the
same sender to a multicast address with two `loadgen receive`; per message, not per copy.

Needs valgrind (Debian: apt-get install -y valgrind) and the load generator's build dependencies.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    sys.path[0] = str(HERE.parent)  # bench/topology.py would hide the topology package

from bench.instructions import _exclusive  # noqa: E402
from bench.loadgen.build import build  # noqa: E402
from bench.scenarios import BUILD, Router, _finish, _loadgen, through_multicast, through_router  # noqa: E402


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def _pingpong(binary: Path, port: int, count: int) -> None:
    common = ["--host", "127.0.0.1", "--port", str(port)]
    echo = _loadgen(binary, "echo", *common, "--address", "ping", "--count", str(count), timeout_s=600)
    time.sleep(1.0)  # the echo's link attached first (the router is slow under valgrind)
    pp = _loadgen(binary, "pingpong", *common, "--address", "ping", "--reply-address", "pong",
                  "--count", str(count), "--size", "100", timeout_s=600)  # fmt: skip
    _finish("pingpong", pp, timeout_s=900)
    _finish("echo", echo, timeout_s=60)


def _round_trips(binary: Path, r: Router, count: int) -> None:
    _pingpong(binary, r.port, count)


def _streamer(size: int, receivers: int = 0) -> Callable[[Path, Router, int], None]:
    def stream(binary: Path, r: Router, count: int) -> None:
        if receivers:
            through_multicast(binary, r, count, size, receivers)  # scenario 8's own run
        else:
            through_router(binary, r, count, size, False)  # scenario 1's (or 3's) own run

    return stream


def _total(path: Path) -> int:
    text = subprocess.run(["callgrind_annotate", str(path)], capture_output=True, text=True, check=True).stdout
    return next(int(line.split()[0].replace(",", "")) for line in text.splitlines() if "PROGRAM TOTALS" in line)


def measure(
    small: int, large: int, top: int, keep: Path | None = None, stream: bool = False, size: int = 100,
    multicast: int = 0,
) -> None:  # fmt: skip
    binary = build(BUILD)
    run = _streamer(size, multicast) if stream else _round_trips
    messages_per_count = 1 if stream else 2  # a round trip carries two messages
    with tempfile.TemporaryDirectory() as scratch:
        tmp = keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        out = tmp / "cg.out"
        prefix = ("valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}")
        config: dict[str, object] = {"router": {"id": "lone"}, "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0}]}
        if multicast:
            config["addresses"] = [{"prefix": "mc", "distribution": "multicast"}]  # as scenario 8's router
        r = Router(config, prefix=prefix)
        try:
            pid = r.proc.pid
            run(binary, r, 10)  # first links and first messages: uncounted
            _callgrind(pid, "-i", "on")
            _callgrind(pid, "-z")
            run(binary, r, small)
            _callgrind(pid, "-d")
            run(binary, r, large)
            _callgrind(pid, "-d")
        finally:
            r.stop(wait_s=120)
        dumps = sorted(tmp.glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
        first, second = dumps[0], dumps[1]
        per = (_total(second) - _total(first)) / (large - small) / messages_per_count
        fs, fl = _exclusive(first), _exclusive(second)
    what = f"streamed message (router process, {size:,} B, 1,000 unsettled)" if stream else "lone message (router process, request or reply)"
    if multicast:
        what += f", multicast to {multicast} receivers"
    print(f"instructions per {what}: {per:,.0f}")
    diffs = sorted(((fl.get(k, 0) - fs.get(k, 0)) / (large - small) / messages_per_count, k) for k in set(fs) | set(fl))
    for value, name in reversed(diffs[-top:] if top > 0 else []):
        print(f"{value:12,.0f}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, help="messages (or round trips) in the first count (100; --stream 2000)")
    parser.add_argument("--large", type=int, help="in the second (500; --stream 12000)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--keep", type=Path, help="keep the callgrind dumps here (cg.out.1: SMALL, cg.out.2: LARGE)")
    parser.add_argument("--stream", action="store_true", help="count scenario 1 (send and receive, 1,000 unsettled) instead of ping-pong")
    parser.add_argument("--size", type=int, default=100, help="--stream: message size in bytes (10240: scenario 3)")
    parser.add_argument("--multicast", type=int, default=0, metavar="N",
                        help="--stream to a multicast address with N receivers (2: scenario 8)")  # fmt: skip
    args = parser.parse_args()
    if (args.size != 100 or args.multicast) and not args.stream:
        parser.error("--size and --multicast go with --stream (ping-pong messages are 100 B, anycast)")
    small = args.small if args.small is not None else 2000 if args.stream else 100
    large = args.large if args.large is not None else 12000 if args.stream else 500
    measure(small, large, args.top, args.keep, args.stream, args.size, args.multicast)


if __name__ == "__main__":
    main()
