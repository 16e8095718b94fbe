"""Direct client-to-client runs of loadgen, with no router in between: the ceiling the router's
figures are compared with. Used by the benchmark runner and the tests.

    run_direct(count, size)           `loadgen listen --count N` + `loadgen send`
    run_direct_pingpong(count, size)  `loadgen listen --echo --count N` + `loadgen pingpong`

`python -m bench.loadgen.smoke [--count N]` measures the usual four figures and prints them.
"""

from __future__ import annotations

import argparse
import json
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .build import DEFAULT_BUILD_DIR, build

HOST = "127.0.0.1"
LISTENING = "listening on "  # the first stderr line of `loadgen listen`: "... listening on H:P"


class LoadgenFailed(RuntimeError):
    """A loadgen process exited non-zero (error, or 2 = its --timeout passed)."""


def parse_result(role: str, proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The JSON line a loadgen process printed; LoadgenFailed when it failed."""
    if proc.returncode != 0:
        raise LoadgenFailed(
            f"loadgen {role} exited {proc.returncode}: {proc.stderr.strip()} {proc.stdout.strip()}"
        )
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise LoadgenFailed(f"loadgen {role} printed nothing: {proc.stderr.strip()}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _read_port(proc: subprocess.Popen[str], timeout_s: float) -> int:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stderr, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not sel.select(left):
                break
            line = proc.stderr.readline()
            if not line:
                break
            if LISTENING in line:
                return int(line.rsplit(":", 1)[1])
    raise LoadgenFailed(f"loadgen listen did not start listening (exit code {proc.poll()})")


@contextmanager
def listening(
    binary: Path, args: list[str], timeout_s: float, prefix: list[str] | None = None
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """Run `loadgen listen ARGS` on an ephemeral 127.0.0.1 port (under the command `prefix`, e.g.
    taskset); yield the process and the port. The process is killed on the way out if it is still
    running."""
    cmd = [*(prefix or []), str(binary), "listen", "--host", HOST, "--port", "0", "--timeout", str(timeout_s), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield proc, _read_port(proc, timeout_s=10.0)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10.0)


def taskset(cpu: int | None) -> list[str]:
    """The command prefix that runs a process on CPU `cpu` only (None: anywhere)."""
    return [] if cpu is None else ["taskset", "-c", str(cpu)]


def _pair(
    binary: Path, listen_args: list[str], client: list[str], role: str, timeout_s: float,
    cpus: tuple[int, int] | None = None,
) -> dict[str, dict[str, Any]]:
    """`cpus`: (the listener's, the client's), each pinned there."""
    listen_cpu, client_cpu = cpus if cpus is not None else (None, None)
    with listening(binary, listen_args, timeout_s, taskset(listen_cpu)) as (server, port):
        done = subprocess.run(
            [*taskset(client_cpu), str(binary), *client, "--host", HOST, "--port", str(port), "--timeout", str(timeout_s)],
            capture_output=True, text=True, timeout=timeout_s + 10.0,
        )  # fmt: skip
        out, err = server.communicate(timeout=timeout_s + 10.0)
        served = subprocess.CompletedProcess(server.args, server.returncode, out, err)
    return {role: parse_result(role, done), "listen": parse_result("listen", served)}


def run_direct(
    count: int,
    size: int,
    *,
    presettled: bool = False,
    window: int | None = None,
    timeout_s: float = 60.0,
    binary: Path | None = None,
) -> dict[str, dict[str, Any]]:
    """Send `count` messages of `size` bytes straight to `loadgen listen --count`;
    return {"send": <send's JSON>, "listen": <listen's JSON (throughput, latency)>}."""
    binary = binary or build(DEFAULT_BUILD_DIR)
    client = ["send", "--address", "direct", "--count", str(count), "--size", str(size)]
    if presettled:
        client.append("--presettled")
    if window is not None:
        client += ["--window", str(window)]
    return _pair(binary, ["--count", str(count)], client, "send", timeout_s)


def run_direct_pingpong(
    count: int, size: int, *, timeout_s: float = 60.0, binary: Path | None = None, cpus: tuple[int, int] | None = None
) -> dict[str, dict[str, Any]]:
    """`count` request/reply round trips between `loadgen pingpong` and `loadgen listen --echo`
    (`cpus`: the echo's CPU and the client's, each pinned there); return {"pingpong": <round-trip
    JSON>, "listen": <echo count>}."""
    binary = binary or build(DEFAULT_BUILD_DIR)
    client = ["pingpong", "--address", "requests", "--reply-address", "replies"]
    client += ["--count", str(count), "--size", str(size)]
    return _pair(binary, ["--echo", "--count", str(count)], client, "pingpong", timeout_s, cpus)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen.smoke", description=__doc__)
    parser.add_argument("--count", type=int, default=1_000_000, help="messages per throughput run")
    parser.add_argument("--round-trips", type=int, default=20_000)
    args = parser.parse_args(argv)
    runs: dict[str, dict[str, dict[str, Any]]] = {
        "unsettled_100B": run_direct(args.count, 100),
        "presettled_100B": run_direct(args.count, 100, presettled=True),
        "unsettled_10KiB": run_direct(max(1, args.count // 10), 10 * 1024),
        "pingpong_100B": run_direct_pingpong(args.round_trips, 100),
    }
    for name, run in runs.items():
        print(name, json.dumps(run))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
