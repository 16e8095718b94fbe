"""rhea (AMQP 1.0 for Node.js) as a third-party client of the router, over a socket: one
connection with a receiver and a sender on an address, messages through and every outcome
back; the receiver asked for a JMS selector, the router's answer names it, and only the messages
it selects arrive (the others are released: no consumer wants them). Skips cleanly when Node.js or the rhea package is missing: `npm install --prefix tests/rhea`
installs it (tests/rhea/package.json)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from .support.management import managed_router

HERE = Path(__file__).resolve().parent / "rhea"
NODE = shutil.which("node")
COUNT = 20

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(NODE is None, reason="Node.js is not installed"),
    pytest.mark.skipif(not (HERE / "node_modules" / "rhea" / "package.json").exists(),
                       reason="rhea is not installed (npm install --prefix tests/rhea)"),
]


async def test_rhea_round_trip_with_a_selector_applied() -> None:
    assert NODE is not None
    async with managed_router() as router:
        with trio.fail_after(20):
            done = await trio.run_process(
                [NODE, str(HERE / "roundtrip.js"), "127.0.0.1", str(router.amqp_port), "rhea.q", str(COUNT)],
                capture_stdout=True, capture_stderr=True, check=False,
            )  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    result = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert result["received"] == [f"m{i}" for i in range(0, COUNT, 2)]  # the red ones
    assert result["accepted"] == COUNT // 2 and result["other_outcomes"] == ["released"] * (COUNT // 2)
    assert result["remote_source"]["address"] == "rhea.q"
    assert "color = 'red'" in result["remote_source"]["filter"]  # the filter it applies, echoed
    assert "AMQP_MGMT_V1_0" in result["offered"] and "APACHE.ORG:SELECTOR" in result["offered"]

