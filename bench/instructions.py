"""Instructions per message of the no-socket relay (bench/relay.py), counted by valgrind's
callgrind: deterministic, so unlike CPU time it does not move with other load on the machine,
and per function, so a change shows where it saved or cost.

The relay runs twice, with SMALL and LARGE messages; the difference divided by LARGE - SMALL is
the cost per message, free of start-up and import costs. The count covers the whole relay: the
router's engines and core, and the producer and consumer engines around it (which share the
engine code). Functions compiled by mypyc appear as CPyDef_<module>___<function>.

    python bench/instructions.py [--presettled] [--flow] [--routers N] [--multicast N] [--top N] [--callees FUNCTION_SUBSTRING] [--default-gc]

The relay runs with the cyclic collector set as `router run` sets it (tune_gc: start-up objects
frozen, young collections every 10,000 allocations); --default-gc keeps CPython's defaults
(young collections every 700), as the figures before 2026-11-28 were counted.

--multicast N counts the relay to a multicast address with N consumers (each gets every message).

--flow counts the relay with flow records on (bench/relay.py's --flow), the hot path alone: the
records are flushed once at the end of each run (a flush is `relay.flush_cost()`).

--routers N counts a chain of N routers in the mesh harness instead (bench/meshrelay.py): every
router of the chain together.

Needs valgrind (Debian: apt-get install -y valgrind). About a minute on the compiled build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

K = TypeVar("K")
HERE = Path(__file__).resolve().parent
SMALL, LARGE = 2000, 12000
_RUN = "import sys; sys.argv = ['relay']; import runpy; m = runpy.run_path({path!r}); {gc}{call}"
# The cyclic collector as `router run` sets it (router.cli.run.tune_gc), unless --default-gc: the
# harness then counts what a running router pays, not CPython's default young collections.
_ROUTER_GC = "from router.cli.run import tune_gc; tune_gc(); "
_GC = {"router": _ROUTER_GC, "default": ""}
_ROW = re.compile(r"\s*([\d,]+) \([^)]*\)\s+([*>]?)\s*(\S+)(?: \((\d+)x\))?")


def _record(
    n: int, presettled: bool, routers: int, out: Path, flow: bool = False, receivers: int = 0, gc: str = "router"
) -> None:  # fmt: skip
    fill = {"gc": _GC[gc]}
    if receivers:  # a multicast address with that many consumers
        code = _RUN.format(path=str(HERE / "relay.py"), call=f"m['run_relay']({n}, {presettled}, receivers={receivers})", **fill)
    elif flow:
        # The records are flushed once, at the end: the difference of the two runs is the hot path's.
        code = _RUN.format(path=str(HERE / "relay.py"), call=f"m['run_relay']({n}, {presettled}, flow=True, flush_every=0)", **fill)
    elif routers:  # a chain in the mesh harness (bench/meshrelay.py)
        call = f"m['run_chain']({routers}, {n}, {presettled})"
        code = _RUN.format(path=str(HERE / "meshrelay.py"), call=call, **fill)
    else:
        code = _RUN.format(path=str(HERE / "relay.py"), call=f"m['run_relay']({n}, {presettled})", **fill)
    subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", code],
        check=True, capture_output=True, cwd=HERE.parent,
    )  # fmt: skip


def _name(raw: str) -> str:
    return re.sub(r"'\d+$", "", raw.split(":", 1)[-1])


def _exclusive(path: Path) -> dict[str, int]:
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", str(path)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    costs: dict[str, int] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if match and ":" in match[3]:
            costs[_name(match[3])] = costs.get(_name(match[3]), 0) + int(match[1].replace(",", ""))
    return costs


def _callees(path: Path, pattern: str) -> dict[tuple[str, str], int]:
    text = subprocess.run(["callgrind_annotate", "--tree=calling", "--inclusive=yes", "--threshold=100", str(path)],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    costs: dict[tuple[str, str], int] = {}
    current = None
    for line in text.splitlines():
        match = _ROW.match(line)
        if not match or not match[2]:
            continue
        name, cost = _name(match[3]), int(match[1].replace(",", ""))
        if match[2] == "*":
            current = name if pattern in name else None
            if current is None:
                continue
            key = (name, "(inclusive)")
        elif current is not None:
            key = (current, name)
        else:
            continue
        costs[key] = costs.get(key, 0) + cost
    return costs


def _per_message(small: Mapping[K, int], large: Mapping[K, int]) -> dict[K, float]:
    return {k: (large.get(k, 0) - small.get(k, 0)) / (LARGE - SMALL) for k in set(small) | set(large)}


def main(argv: list[str]) -> int:
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        print("bench/instructions.py needs valgrind (apt-get install -y valgrind)", file=sys.stderr)
        return 2
    presettled = "--presettled" in argv
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 30
    pattern = argv[argv.index("--callees") + 1] if "--callees" in argv else None
    routers = int(argv[argv.index("--routers") + 1]) if "--routers" in argv else 0
    flow = "--flow" in argv
    receivers = int(argv[argv.index("--multicast") + 1]) if "--multicast" in argv else 0
    gc = "default" if "--default-gc" in argv else "router"
    with tempfile.TemporaryDirectory() as tmp:
        paths = [Path(tmp) / "small.out", Path(tmp) / "large.out"]
        with ThreadPoolExecutor(2) as pool:  # the two runs are independent: one per core
            runs = [(n, presettled, routers, path, flow, receivers, gc) for n, path in zip((SMALL, LARGE), paths)]
            list(pool.map(lambda args: _record(*args), runs))
        costs = _per_message(_exclusive(paths[0]), _exclusive(paths[1]))
        kind = "presettled" if presettled else "unsettled"
        what = f"chain of {routers} routers" if routers else "relay with flow records on" if flow else "relay"
        if receivers:
            what = f"multicast relay to {receivers} consumers"
        collector = "CPython's default collector" if gc == "default" else "the router's collector settings"
        print(f"{what}, 100-byte {kind} messages, {collector}: {sum(costs.values()):,.0f} instructions per message")
        for name, cost in sorted(costs.items(), key=lambda kv: -kv[1])[:top]:
            print(f"{cost:10,.0f}  {name}")
        if pattern:
            calls = _per_message(_callees(paths[0], pattern), _callees(paths[1], pattern))
            for function in sorted({f for f, _ in calls}):
                print(f"\n{function}: {calls[(function, '(inclusive)')]:,.0f} inclusive")
                rows = [(callee, c) for (f, callee), c in calls.items() if f == function and callee != "(inclusive)"]
                for callee, cost in sorted(rows, key=lambda r: -r[1])[:15]:
                    if cost >= 10:
                        print(f"{cost:10,.0f}  {callee}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
