"""Instructions per message through the network layer: a RouterServer over loopback TCP and two
clients (producer, consumer) on the same driver, all in one process, counted by valgrind's
callgrind as bench/instructions.py counts the no-socket relay (two runs, SMALL and LARGE messages;
the difference divided by LARGE - SMALL is the cost per message). Unlike the no-socket relay this
includes the connection drivers (reads, writes, wake-ups), trio's scheduler and the system calls'
user-space side, on both ends of both connections.

    python bench/socketrelay.py [--top N]          # instructions per message, per function
    python bench/socketrelay.py --run N            # just the relay (no valgrind)

Needs valgrind (Debian: apt-get install -y valgrind).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0]).resolve() == HERE:
    sys.path[0] = str(HERE.parent)  # bench/topology.py would hide the topology package

SMALL, LARGE = 1000, 6000
WINDOW = 100  # unsettled messages in flight


def run_relay(count: int) -> None:
    import trio

    from router.amqp.message import Message
    from router.config.models import Listener, RouterConfig, RouterSection
    from router.net.client import connect
    from router.net.server import RouterServer

    async def main() -> None:
        config = RouterConfig(router=RouterSection(id="bench"), listeners=(Listener(host="127.0.0.1", port=0),))
        server = RouterServer(config)
        async with trio.open_nursery() as nursery:
            ((_, _, port),) = await nursery.start(server.run)
            async with connect("127.0.0.1", port, sasl=False) as consumer, connect("127.0.0.1", port, sasl=False) as producer:
                receiver = await consumer.open_receiver("q", credit=WINDOW)
                sender = await producer.open_sender("q")
                message = Message.value(b"x" * 100)
                limit = trio.Semaphore(WINDOW)
                done = trio.Event()

                async def consume() -> None:
                    for _ in range(count):
                        receiver.accept(await receiver.receive())
                    done.set()

                async def await_outcome(tracker: object) -> None:
                    await tracker.wait()  # type: ignore[attr-defined]
                    limit.release()

                async with trio.open_nursery() as inner:
                    inner.start_soon(consume)
                    for _ in range(count):
                        await limit.acquire()
                        inner.start_soon(await_outcome, await sender.start_send(message))
                    await done.wait()
            server.shutdown()

    trio.run(main)


def _count(n: int, out: Path) -> None:
    code = f"import runpy; m = runpy.run_path({str(HERE / 'socketrelay.py')!r}); m['run_relay']({n})"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", code],
                   check=True, capture_output=True, cwd=HERE.parent)  # fmt: skip


def _total_and_functions(path: Path) -> tuple[int, dict[str, int]]:
    sys.path.insert(0, str(HERE))
    from instructions import _exclusive  # noqa: PLC0415

    functions = _exclusive(path)
    text = subprocess.run(["callgrind_annotate", str(path)], capture_output=True, text=True, check=True).stdout
    total = next(int(line.split()[0].replace(",", "")) for line in text.splitlines() if "PROGRAM TOTALS" in line)
    return total, functions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=int, help="run the relay with this many messages, uncounted")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if args.run:
        run_relay(args.run)
        return
    with tempfile.TemporaryDirectory() as tmp:
        small, large = Path(tmp) / "small", Path(tmp) / "large"
        _count(SMALL, small)
        _count(LARGE, large)
        (total_s, fs), (total_l, fl) = _total_and_functions(small), _total_and_functions(large)
    per = (total_l - total_s) / (LARGE - SMALL)
    print(f"instructions per message (whole process): {per:,.0f}")
    diffs = sorted(((fl.get(k, 0) - fs.get(k, 0)) / (LARGE - SMALL), k) for k in set(fs) | set(fl))
    for value, name in reversed(diffs[-args.top:]):
        print(f"{value:12,.0f}  {name}")


if __name__ == "__main__":
    main()
