"""Fuzzing a live `router run` process over sockets: hypothesis-generated frames and mutations of
what a real python-qpid-proton client sends (captured through a socket proxy at the start), each
on a connection of its own (to a client listener or an inter-router one), while a well-behaved
Proton client keeps sending on another.

Asserted: the process never exits; its log holds no traceback and no error; what it answers is
well-formed frames, and a close it sends carries a condition the spec defines; once the inputs
stop, its connection count is back to the management query's own connection; its RSS stays
within a bound; the well-behaved client learned the outcome (every one of accepted, rejected,
released, modified) of every message it sent, and its connection was never disturbed.

Bounded for CI: ROUTER_FUZZ_INPUTS (default 300) inputs, a few tens of seconds. bench/fuzz.py
runs 10^6 through the engine and core in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from router.amqp import errors as E
from router.amqp.performatives import Close
from router.testing.enginepair import WireFrame, parse_wire
from router.testing.wire import split_stream

from .support.fuzzing import OUTCOMES, capture_proton_session, hostile_inputs, rss_bytes, throw
from .support.good_client import GoodClient
from .support.router_process import RouterProcess, router_command, router_env

pytestmark = [pytest.mark.interop, pytest.mark.process]

INPUTS = int(os.environ.get("ROUTER_FUZZ_INPUTS", "300"))
RSS_GROWTH_LIMIT = 64 * 1024 * 1024  # what the inputs may add to the router's RSS
SPEC_CONDITIONS = {v for k, v in vars(E).items() if k.isupper() and isinstance(v, str) and v.startswith("amqp:")}
CONFIG = {
    "router": {"id": "fuzzed", "mode": "interior"},
    # default limits (frames up to 64 KiB); a third of the inputs go to the inter-router listener
    "listeners": [
        {"name": "amqp", "host": "127.0.0.1", "port": 0},
        {"name": "mesh", "host": "127.0.0.1", "port": 0, "role": "inter-router"},
    ],
}


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RouterProcess]:
    with RouterProcess.running(tmp_path_factory.mktemp("fuzz"), CONFIG, log_level="warning") as router:
        yield router


def _problems(router: RouterProcess) -> list[str]:
    # A refused login is the router doing its job (hostile inputs name odd mechanisms): its
    # warning is expected; any other failure is a problem.
    return [
        line for line in router.stdout + router.stderr
        if "Traceback" in line or " ERROR " in line or " CRITICAL " in line
        or ("failed" in line and "router.sasl: failed login from " not in line)
    ]  # fmt: skip


def _router_general(port: int) -> dict[str, object]:
    out = subprocess.run(
        router_command("stat", "general", "-b", f"127.0.0.1:{port}", "--json"),
        capture_output=True, text=True, env=router_env(), timeout=30, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _check_answer(answer: bytes) -> None:
    """What the router wrote: frames (a cut-off tail aside, our close may cut it), and any close
    with a condition the spec defines."""
    pieces = split_stream(answer)
    whole = b"".join(p for p in pieces if p[:4] == b"AMQP" or (len(p) >= 8 and int.from_bytes(p[:4], "big") == len(p)))
    for frame in parse_wire(whole):
        if isinstance(frame, WireFrame) and isinstance(frame.body, Close) and frame.body.error is not None:
            assert frame.body.error.condition in SPEC_CONDITIONS, frame.body.error


def test_fuzzing_a_live_router_stops_nothing(fuzzed: RouterProcess) -> None:
    port = fuzzed.ports["amqp"]
    assert fuzzed.proc is not None
    captured = capture_proton_session(port)
    assert captured.startswith(b"AMQP\x03") and len(split_stream(captured)) > 10  # SASL, then AMQP frames
    good = GoodClient(port)
    good.start()
    rss_before = rss_bytes(fuzzed.proc.pid)
    thrown = 0

    @settings(
        max_examples=INPUTS, deadline=None, database=None, derandomize=False,
        suppress_health_check=list(HealthCheck),
    )  # fmt: skip
    @given(
        data=hostile_inputs(captured), half_close=st.booleans(), chunks=st.integers(1, 3),
        listener=st.sampled_from(["amqp", "amqp", "mesh"]),
    )  # fmt: skip
    def throw_one(data: bytes, half_close: bool, chunks: int, listener: str) -> None:
        nonlocal thrown
        thrown += 1
        to = fuzzed.ports[listener]
        answer = throw(to, data, half_close=half_close, chunks=chunks, read_s=0.05 if half_close else 0.02)
        assert fuzzed.proc is not None and fuzzed.proc.poll() is None, f"the router exited on {data!r}\n{fuzzed.output}"
        _check_answer(answer)

    try:
        throw_one()
    finally:
        good.stop()
    assert thrown >= INPUTS // 2
    assert fuzzed.proc.poll() is None, fuzzed.output
    # the well-behaved client: every message's outcome, each kind of outcome seen
    assert not good.errors, good.errors
    assert good.sent > 0 and len(good.learned) == good.sent
    assert all(good.learned[n] == OUTCOMES[n % 4] for n in range(good.sent)), good.learned
    # every fuzzing connection is gone: only the management query's own remains
    deadline = time.monotonic() + 10
    while (count := _router_general(port)["connectionCount"]) != 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert count == 1, f"{count} connections left"
    growth = rss_bytes(fuzzed.proc.pid) - rss_before
    assert growth < RSS_GROWTH_LIMIT, f"RSS grew by {growth / 2**20:.1f} MiB"
    assert not _problems(fuzzed), "\n".join(_problems(fuzzed))
