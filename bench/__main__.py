"""`python -m bench [micro]`: run benchmarks, print a table, save bench/results/<date>-<suite>.json."""

from __future__ import annotations

import datetime
import os
import json
import platform
import sys
import sysconfig
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from . import micro, scenarios, targets, tls, topology, websocket

SUITES = {"micro": micro.run, "router": scenarios.run, "chain": scenarios.run_chain, "topology": topology.run, "tls": tls.run, "websocket": websocket.run}


def python_build() -> str:
    """Which interpreter produced the figures: version, and whether it was built with PGO/LTO."""
    flags = sysconfig.get_config_var("CONFIG_ARGS") or ""
    opt = " ".join(f for f in ("--enable-optimizations", "--with-lto") if f in flags)
    if not opt and Path(sys.base_prefix).resolve() == Path("/usr"):
        # Debian's build runs PGO and LTO from its own rules, so CONFIG_ARGS does not show them.
        opt = "distribution build: Debian's is PGO+LTO"
    return f"{platform.python_implementation()} {platform.python_version()} ({sys.executable}; {opt or 'no PGO/LTO flags'})"


def router_build() -> str:
    """Which router produced the figures: the hot path compiled (the wheel a user installs) or
    interpreted, and from where it was imported."""
    import router
    from router.build_info import build_info

    return f"hot path {build_info().describe()}, {Path(router.__file__).parent}"


def _flatten(results: dict[str, Any], prefix: str = "") -> dict[str, float]:
    flat: dict[str, float] = {}
    for key, value in results.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if key != "runs":
                flat.update(_flatten(value, name + "."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = value
    return flat


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    names = [a for a in argv if not a.startswith("--")] or [s for s in SUITES if s not in ("chain", "tls", "websocket")]  # chain: in router
    console = Console()
    out_dir = Path(os.environ.get("BENCH_RESULTS_DIR") or Path(__file__).parent / "results")
    out_dir.mkdir(exist_ok=True)
    for name in names:
        if name not in SUITES:
            console.print(f"unknown suite {name!r}; choose from {', '.join(SUITES)}")
            return 2
        results = SUITES[name](quick) if name in ("router", "chain", "tls", "websocket") else SUITES[name]()
        table = Table("metric", "value", title=f"bench: {name}")
        for key, value in _flatten(results).items():
            table.add_row(key, f"{value:,.3f}" if abs(value) < 10 else f"{value:,.0f}")
        console.print(table)
        reached = targets.verdicts(results) if name == "router" else []
        if reached:
            summary = Table("target", "value", "bound", "met", title="targets")
            for row in reached:
                summary.add_row(row["target"], f"{row['value']:,.3f}", row["bound"], "yes" if row["met"] else "[bold red]no[/]")
            console.print(summary)
        console.print(f"python: {python_build()}")
        console.print(f"router build: {router_build()}")
        stamp = datetime.datetime.now().strftime("%Y-%m-%dT%H%M%S")
        path = out_dir / f"{stamp}-{name}.json"
        path.write_text(json.dumps({"suite": name, "python": python_build(), "router_build": router_build(), "results": results, "targets": reached}, indent=2))
        console.print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
