"""The `topology` commands over the pipeline's output: `report` on the Parquet the job wrote for
the known record set (the totals are the known ones; no JVM in the CLI's process), the PNGs,
and `costs`: the diff against a live mesh and --apply through management (connector UPDATE).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from topology.cli.costs import CostChange, diff
from topology.cli.network import Network, RouterInfo

from router.testing.meshprocs import MeshProcesses
from .support.router_process import router_env

# Starting the JVM and the first job on the shared session takes tens of seconds on a busy
# machine; the default 120 s bound would fail a slow start rather than a hang.
pytestmark = pytest.mark.timeout(300)

PNG = b"\x89PNG\r\n\x1a\n"


def _topology(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topology.cli.main", *args], capture_output=True, text=True, env=router_env(), timeout=60
    )


def _row(text: str, first: str, after: str = "") -> list[str]:
    """The cells of the table row whose first cell is `first` (the first such row after `after`)."""
    for line in text[text.index(after):].splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{text}")


def test_report_shows_the_known_totals_and_writes_plots(flow_job: Any, tmp_path: Path) -> None:
    shown = _topology("report", "--data", str(flow_job.out), "--plot", str(tmp_path / "plots"))
    assert shown.returncode == 0, shown.stderr
    # every delivery once: 150 orders (92 + 50 accepted, 5 rejected, 3 released) + 30 events
    assert _row(shown.stdout, "orders")[:8] == ["orders", "150", "15,000", "142", "5", "3", "0", "0"]
    assert _row(shown.stdout, "events")[:3] == ["events", "30", "600"]
    assert _row(shown.stdout, "total")[:5] == ["total", "180", "15,600", "172", "5"]
    assert _row(shown.stdout, "A -> B")[:3] == ["A -> B", "150", "18,000"]
    assert _row(shown.stdout, "B - C", after="Suggested link costs")[2:] == ["4.49 ms", "1", "3", "3", "yes"]  # the slow link
    assert _row(shown.stdout, "address orders")[1:6] == ["residence", "4", "6.7 us", "115.2 us", "125.4 us"]
    for name in ("throughput", "latency", "outcomes"):
        data = (tmp_path / "plots" / f"{name}.png").read_bytes()
        assert data[:8] == PNG and len(data) > 5000


def test_report_sections_and_json(flow_job: Any) -> None:
    shown = _topology("report", "--data", str(flow_job.out / "aggregates"), "--section", "talkers", "--top", "1")
    assert shown.returncode == 0, shown.stderr
    assert "Top 1 addresses" in shown.stdout and "Latency" not in shown.stdout and "events" not in shown.stdout
    data = json.loads(_topology("report", "--data", str(flow_job.out), "-s", "flows", "--json").stdout)
    assert sum(r["deliveries"] for r in data["outcomes"]) == 180
    assert set(data) == {"outcomes", "pair_throughput"}


def test_report_errors_are_one_line(tmp_path: Path) -> None:
    missing = _topology("report", "--data", str(tmp_path))
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.strip().splitlines() == [
        f"error: no aggregates under {tmp_path} (run `topology analyse --records DIR --out {tmp_path}` first)"
    ]
    wrong = _topology("report", "--data", str(tmp_path), "--section", "nope")
    assert wrong.returncode == 1 and "unknown section 'nope'" in wrong.stderr


def test_the_report_process_never_loads_the_jvm_side(flow_job: Any) -> None:
    probe = (
        "import sys, runpy; sys.argv = ['topology', 'report', '--data', sys.argv[1]];\n"
        "try:\n    runpy.run_module('topology.cli.main', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print('PYSPARK' if 'pyspark' in sys.modules else 'NO-PYSPARK', file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", probe, str(flow_job.out)], capture_output=True, text=True,
                          env=router_env(), timeout=60)  # fmt: skip
    assert done.stderr.strip().splitlines()[-1] == "NO-PYSPARK"


def test_cost_diff_uses_the_larger_end_and_skips_links_not_in_the_mesh() -> None:
    network = Network(bus="A", routers={
        "A": RouterInfo("A", link_costs={"B": 1}), "B": RouterInfo("B", link_costs={"A": 2, "C": 1}),
        "C": RouterInfo("C", link_costs={"B": 1}),
    })  # fmt: skip
    rows = [
        {"router_a": "A", "router_b": "B", "suggested_cost": 2, "rtt_us": 900.0},
        {"router_a": "B", "router_b": "C", "suggested_cost": 3, "rtt_us": 3000.0},
        {"router_a": "C", "router_b": "D", "suggested_cost": 1, "rtt_us": 800.0},
    ]
    changes = diff(network, rows)
    assert changes == [
        CostChange("A", "B", 2, 2, 900.0), CostChange("B", "C", 1, 3, 3000.0), CostChange("C", "D", None, 1, 800.0)
    ]  # fmt: skip
    assert [c.applies for c in changes] == [False, True, False]
    assert changes[2].action.startswith("skip")


def _suggestion(directory: Path, rows: list[dict[str, Any]]) -> Path:
    pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install '.[analytics]')")
    import pyarrow.parquet as pq

    table = directory / "aggregates" / "suggested_costs"
    table.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), table / "part-0.parquet")
    # the report needs the job's other tables only for its other sections
    (directory / "aggregates" / "outcomes").mkdir()
    return directory


async def _link_cost(mesh: MeshProcesses, a: str, b: str, want: int) -> None:
    with trio.fail_after(15):
        while True:  # the new cost travels in link-state updates: no event to await across processes
            rows = await mesh.nodes(a)
            costs = next((r.get("linkCosts") or {}) for r in rows if r.get("id") == a)
            if costs.get(b) == want:
                return
            await trio.sleep(0.1)


@pytest.mark.process
def test_costs_shows_the_diff_then_applies_it(tmp_path: Path) -> None:
    data = _suggestion(tmp_path / "job", [
        {"router_a": "A", "router_b": "B", "samples": 9, "rtt_us": 800.0, "current_cost": 1, "computed_cost": 1,
         "suggested_cost": 1, "changed": False},
        {"router_a": "B", "router_b": "C", "samples": 9, "rtt_us": 4000.0, "current_cost": 1, "computed_cost": 4,
         "suggested_cost": 4, "changed": True},
    ])  # fmt: skip
    with MeshProcesses(tmp_path, "A-B B-C") as mesh:
        trio.run(mesh.wait_converged)
        bus = f"127.0.0.1:{mesh.port('A')}"
        shown = _topology("costs", "--suggested", str(data), "-b", bus)
        assert shown.returncode == 0, shown.stderr
        assert "1 -> 4" in shown.stdout and "run again with --apply" in shown.stdout
        assert _row(shown.stdout, "A - B")[-1] == "keep"
        # C dialled B: its connector changes, and C takes management writes only directly
        refused = _topology("costs", "--suggested", str(data), "-b", bus, "--apply")
        assert refused.returncode == 1
        assert "add --connect C=HOST:PORT" in refused.stderr and "Traceback" not in refused.stderr
        applied = _topology("costs", "--suggested", str(data), "-b", bus, "--apply", "--connect", f"C=127.0.0.1:{mesh.port('C')}")
        assert applied.returncode == 0, applied.stderr
        assert "connector 'to-B' on C now has cost 4" in applied.stdout
        trio.run(_link_cost, mesh, "C", "B", 4)
        again = _topology("costs", "--suggested", str(data), "-b", bus, "--apply", "--json")
        assert json.loads(again.stdout)["applied"] == []  # B - C now costs 4 as the listener end says 1


def test_analyse_runs_the_job_and_passes_its_one_line_error_on(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[analytics]')")
    done = _topology("analyse", "--records", str(tmp_path / "nothing"), "--out", str(tmp_path / "out"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"error: no records: {tmp_path / 'nothing'} is not a directory"]
