"""`make demo` (router.demo) in its fast mode: three `router run` processes form a mesh, traffic
goes A -> B -> C with outcomes, B is killed and traffic moves to the direct link A -> C."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from router.demo import ROUTERS, run_demo
from tests.support.router_process import core_ready

COUNT = 10


@pytest.mark.skipif(not core_ready(), reason="the routing core does not route yet")
@pytest.mark.process
async def test_the_demo_shows_a_mesh_and_a_failover(tmp_path: Path) -> None:
    out = io.StringIO()
    result = await run_demo(COUNT, Console(file=out, width=120), tmp_path)
    text = out.getvalue()
    assert result.hop_before == "B" and result.hop_after == "C", text
    assert result.outcomes["through B"] == {"Accepted": COUNT}, text
    # Every delivery sent while B died has an outcome; those B lost are sent again and accepted.
    killed = result.outcomes["B killed"]
    assert sum(killed.values()) == 2 * (COUNT // 2) and set(killed) <= {"Accepted", "Released", "Modified"}, text
    lost = sum(n for what, n in killed.items() if what != "Accepted")
    assert result.outcomes["resent"] == ({"Accepted": lost} if lost else {}), text
    assert result.outcomes["direct"] == {"Accepted": COUNT}, text
    assert result.exit_codes["A"] == 0 and result.exit_codes["C"] == 0, text
    assert result.elapsed_s < 60
    for name in ROUTERS:  # the topology tables were shown
        assert f"│ {name}" in text
    assert "A -> B -> C" in text and "A -> C" in text
    assert "applied by SIGHUP" in text  # the links were added to running routers
