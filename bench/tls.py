"""TLS beside plain TCP: scenario 1 (one router, 100 B unsettled) and scenario 7 (a chain of 3
interior routers) with every hop encrypted, alternated with the same runs in plain TCP on the same
routers, so that the cost of TLS per message reads straight from one run (`python -m bench tls`).

The load generator speaks direct TLS (Proton C's OpenSSL, `--ssl-ca`); the routers present one
self-signed P-256 certificate for 127.0.0.1 made with the openssl command at start, and in the
chain their inter-router links are mutual TLS with SASL EXTERNAL (what docs/security.md sets up
between two sites). Router CPU per message is the router process's utime+stime over the run.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .loadgen.build import build
from .loadgen.smoke import run_direct
from .scenarios import BUILD, Router, _finish, _loadgen


def make_certificate(directory: Path) -> tuple[str, str]:
    """A self-signed P-256 certificate for 127.0.0.1 (it is its own CA): (cert file, key file)."""
    cert, key = directory / "bench.crt", directory / "bench.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return str(cert), str(key)


def _profile(cert: str, key: str) -> dict[str, Any]:
    return {"name": "bench", "cert_file": cert, "key_file": key, "ca_file": cert}


def single(binary: Path, cert: str, key: str, *, count: int, rounds: int) -> dict[str, Any]:
    """Scenario 1 through one router with a plain and a TLS listener, alternating with direct runs."""
    config = {
        "router": {"id": "bench-tls"},
        "ssl_profiles": [_profile(cert, key)],
        "listeners": [{"name": "amqp", "host": "127.0.0.1", "port": 0},
                      {"name": "amqps", "host": "127.0.0.1", "port": 0, "ssl_profile": "bench"}],
    }  # fmt: skip
    runs: dict[str, list[Any]] = {"direct": [], "plain": [], "tls": [], "plain_cpu": [], "tls_cpu": []}
    r = Router(config)
    try:
        for _ in range(rounds):
            runs["direct"].append(run_direct(count, 100, binary=binary)["listen"]["msgs_per_s"])
            for kind, port, tls in (("plain", r.ports["amqp"], []), ("tls", r.ports["amqps"], ["--ssl-ca", cert])):
                rate, cpu = _one(binary, [r], port, port, count, tls)
                runs[kind].append(rate)
                runs[f"{kind}_cpu"].append(cpu[0])
    finally:
        r.stop()
    return _summary(runs)


def _one(binary: Path, routers: list[Router], send_port: int, receive_port: int, count: int, tls: list[str]) -> tuple[float, list[float]]:
    """One run: loadgen receive, then loadgen send; (receiver's msg/s, router CPU µs per message each)."""
    address = f"tls-{time.monotonic_ns()}"
    common = ["--host", "127.0.0.1", "--address", address, "--count", str(count), *tls]
    receiver = _loadgen(binary, "receive", *common, "--port", str(receive_port))
    time.sleep(0.3 if len(routers) == 1 else 1.0)  # the address must reach the first router
    cpu0 = [r.cpu_seconds() for r in routers]
    sender = _loadgen(binary, "send", *common, "--port", str(send_port), "--size", "100")
    _finish("send", sender)
    rate = _finish("receive", receiver)["msgs_per_s"]
    return rate, [(r.cpu_seconds() - c) / count * 1e6 for r, c in zip(routers, cpu0)]


@contextmanager
def chain(length: int, cert: str, key: str, tls: bool) -> Iterator[list[Router]]:
    """Interior routers in a line, each dialling the one before; with `tls` the inter-router
    links are mutual TLS + EXTERNAL and the clients' listeners TLS."""
    routers: list[Router] = []
    secure: dict[str, Any] = {"ssl_profile": "bench"} if tls else {}
    inter: dict[str, Any] = dict(secure, authenticate_peer=True, sasl_mechanisms=["EXTERNAL"]) if tls else {}
    try:
        for i in range(1, length + 1):
            listeners: list[dict[str, Any]] = [{"name": "amqp", "host": "127.0.0.1", "port": 0, **secure}]
            if i < length:
                listeners.append({"name": "inter", "host": "127.0.0.1", "port": 0, "role": "inter-router", **inter})
            connectors = [] if i == 1 else [{"name": "up", "host": "127.0.0.1", "port": routers[-1].ports["inter"], **secure}]
            routers.append(Router({
                "router": {"id": f"R{i}", "mode": "interior"}, "ssl_profiles": [_profile(cert, key)],
                "listeners": listeners, "connectors": connectors,
            }))  # fmt: skip
        yield routers
    finally:
        for r in routers:
            r.stop()


def through_chains(binary: Path, cert: str, key: str, *, count: int, rounds: int) -> dict[str, Any]:
    """Scenario 7 in plain TCP and over TLS (two chains up at once), alternating with direct runs."""
    runs: dict[str, list[Any]] = {"direct": [], "plain": [], "tls": [], "plain_cpu": [], "tls_cpu": []}
    with chain(3, cert, key, tls=False) as plain, chain(3, cert, key, tls=True) as secured:
        time.sleep(2.0)  # the routers find each other
        for _ in range(rounds):
            runs["direct"].append(run_direct(count, 100, binary=binary)["listen"]["msgs_per_s"])
            for kind, routers, tls in (("plain", plain, []), ("tls", secured, ["--ssl-ca", cert])):
                rate, cpu = _one(binary, routers, routers[0].port, routers[-1].port, count, tls)
                runs[kind].append(rate)
                runs[f"{kind}_cpu"].append(cpu)
    summary = _summary({k: v for k, v in runs.items() if not k.endswith("_cpu")})
    for kind in ("plain", "tls"):
        summary[f"{kind}_cpu_us_per_msg_each_router"] = [statistics.median(c[i] for c in runs[f"{kind}_cpu"]) for i in range(3)]
    return summary


def _summary(runs: dict[str, list[Any]]) -> dict[str, Any]:
    direct = statistics.median(runs["direct"])
    out: dict[str, Any] = {"direct_msgs_per_s": direct}
    for kind in ("plain", "tls"):
        rate = statistics.median(runs[kind])
        out[f"{kind}_msgs_per_s"], out[f"{kind}_ratio"] = rate, rate / direct
        if f"{kind}_cpu" in runs and runs[f"{kind}_cpu"] and not isinstance(runs[f"{kind}_cpu"][0], list):
            out[f"{kind}_router_cpu_us_per_msg"] = statistics.median(runs[f"{kind}_cpu"])
    if "plain_router_cpu_us_per_msg" in out:
        out["tls_extra_cpu_us_per_msg"] = out["tls_router_cpu_us_per_msg"] - out["plain_router_cpu_us_per_msg"]
    out["runs"] = {k: v for k, v in runs.items()}
    return out


def run(quick: bool = False) -> dict[str, Any]:
    binary = build(BUILD)
    n = int(200_000 * (0.2 if quick else 1.0))
    rounds = 1 if quick else 3
    with tempfile.TemporaryDirectory() as directory:
        cert, key = make_certificate(Path(directory))
        return {
            "1_anycast_100b_unsettled_plain_and_tls": single(binary, cert, key, count=5 * n, rounds=rounds),
            "7_chain_of_3_plain_and_tls": through_chains(binary, cert, key, count=5 * n, rounds=rounds),
        }
