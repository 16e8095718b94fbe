"""AMQP over WebSocket beside plain TCP: scenario 1 (one router, 100 B unsettled) through a
WebSocket listener and through a plain one of the same router, alternated in one run, so that
the router's cost of WebSocket framing per message reads straight from it (`python -m bench
websocket`).

The load generator speaks TCP only: bench/wsbridge.py, a process of its own, carries its
connections over WebSockets to the router. The bridge caps the rate; the figure that matters is
the router's CPU per message (its utime+stime over the run), which the bridge does not touch.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .loadgen.build import build
from .scenarios import BUILD, ROOT, Router
from .tls import _one


def run(quick: bool = False) -> dict[str, Any]:
    binary = build(BUILD)
    count = int(100_000 * (0.2 if quick else 1.0))
    rounds = 1 if quick else 3
    config = {
        "router": {"id": "bench-ws"},
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0},
                      {"name": "ws", "host": "127.0.0.1", "port": 0, "websocket": True}],
    }  # fmt: skip
    runs: dict[str, list[float]] = {"plain": [], "websocket": [], "plain_cpu": [], "websocket_cpu": []}
    r = Router(config)
    bridge = subprocess.Popen([sys.executable, "-m", "bench.wsbridge", str(r.ports["ws"])], cwd=str(Path(ROOT)),
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    try:
        assert bridge.stdout is not None
        bridge_port = int(bridge.stdout.readline().split()[1])
        for _ in range(rounds):
            for kind, port in (("plain", r.ports["amqp"]), ("websocket", bridge_port)):
                rate, cpu = _one(binary, [r], port, port, count, [])
                runs[kind].append(rate)
                runs[f"{kind}_cpu"].append(cpu[0])
    finally:
        bridge.terminate()
        bridge.wait(10)
        r.stop()
    out: dict[str, Any] = {}
    for kind in ("plain", "websocket"):
        out[f"{kind}_msgs_per_s"] = statistics.median(runs[kind])
        out[f"{kind}_router_cpu_us_per_msg"] = statistics.median(runs[f"{kind}_cpu"])
    out["websocket_extra_cpu_us_per_msg"] = out["websocket_router_cpu_us_per_msg"] - out["plain_router_cpu_us_per_msg"]
    out["runs"] = runs
    return {"1_anycast_100b_unsettled_plain_and_websocket": out}
