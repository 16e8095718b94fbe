"""The `topology` commands over the flow-record pipeline (docs/analytics.md):

    topology analyse --records DIR --out DIR [--master URL]   run the PySpark job (python -m pipeline)
    topology report --data DIR [--section S]... [--top N] [--plot DIR] [--json]
    topology costs --suggested DIR [-b HOST:PORT] [--apply [--connect ID=HOST:PORT]...] [--json]

`report` and `costs` read the job's Parquet with pyarrow: no JVM, no pyspark in this process;
`analyse` runs the job in a child process. Failures are one line on stderr, exit 1.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from router.cli.common import parse_bus, run_async, stderr
from router.cli.login import with_login
from router.cli.mgmt import DEFAULT_BUS, DEFAULT_TIMEOUT_S, AsJson, Bus, Timeout, session, to_json

from . import analytics_render
from .analytics import AnalyticsError, Aggregates, Row
from router.net.management_client import ManagementSession

from .costs import CostChange, applied_line, diff, diff_table, locate, set_cost
from .gather import gather
from .network import Network

Data = Annotated[Path, typer.Option("--data", "-d", help="the job's --out directory (or its aggregates/)")]


def _aggregates(directory: Path) -> Aggregates:
    try:
        return Aggregates.at(directory)
    except AnalyticsError as exc:
        stderr.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None


def register(app: typer.Typer, stdout: Any) -> None:
    @app.command()
    def analyse(
        records: Annotated[Path, typer.Option("--records", help="the collector's directory (date=/hour=/router=)")],
        out: Annotated[Path, typer.Option("--out", help="where curated/, aggregates/ and _checkpoint/ go")],
        master: Annotated[str | None, typer.Option("--master", help="Spark master URL (default: local[*])")] = None,
        window_s: Annotated[float, typer.Option("--window-s", help="throughput window, seconds")] = 60.0,
    ) -> None:
        """Run the PySpark job over the flow records: curated Parquet and aggregates (new files only)."""
        command = [sys.executable, "-m", "pipeline", "--records", str(records), "--out", str(out), "--window-s", str(window_s)]
        if master:
            command += ["--master", master]
        raise typer.Exit(subprocess.call(command))

    @app.command()
    def report(
        data: Data,
        section: Annotated[list[str] | None, typer.Option("--section", "-s",
                           help="flows, latency, talkers or costs (repeat; default: all)")] = None,  # fmt: skip
        top: Annotated[int, typer.Option("--top", min=1, help="rows of the top-talker tables")] = 10,
        plot: Annotated[Path | None, typer.Option("--plot", help="also write throughput, latency and outcome PNGs here")] = None,
        json: AsJson = False,
    ) -> None:
        """The pipeline's analytics: deliveries and outcomes, latency, top talkers, link costs."""
        sections = section or list(analytics_render.SECTIONS)
        unknown = [s for s in sections if s not in analytics_render.SECTIONS]
        if unknown:
            stderr.print(f"error: unknown section {unknown[0]!r}; choose from {', '.join(analytics_render.SECTIONS)}", markup=False)
            raise typer.Exit(1)
        agg = _aggregates(data)
        try:
            if json:
                names = {"flows": ("outcomes", "pair_throughput"), "latency": ("latency", "hop_latency", "link_rtt"),
                         "talkers": ("top_addresses", "top_links"), "costs": ("suggested_costs",)}  # fmt: skip
                stdout.print(to_json({t: agg.table(t) for s in sections for t in names[s]}), markup=False, highlight=False)
            else:
                for name in sections:
                    for table in analytics_render.section(agg, name, top):
                        stdout.print(table)
            if plot is not None:
                try:
                    from .plots import write_plots

                    written = write_plots(agg, plot)
                except ImportError:
                    raise AnalyticsError("plots need matplotlib: pip install matplotlib") from None
                if not json:
                    stdout.print("wrote " + ", ".join(str(p) for p in written))
        except AnalyticsError as exc:
            stderr.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None

    @app.command()
    @with_login
    def costs(
        suggested: Annotated[Path, typer.Option("--suggested", help="the job's --out directory (or its aggregates/)")],
        bus: Bus = DEFAULT_BUS,
        do_apply: Annotated[bool, typer.Option("--apply", help="after showing the diff, set the suggested costs")] = False,
        connect: Annotated[list[str] | None, typer.Option("--connect", help="ID=HOST:PORT: reach router ID directly to "
                           "change its connector (routers refuse writes relayed by another router); repeat")] = None,  # fmt: skip
        json: AsJson = False,
        timeout: Timeout = DEFAULT_TIMEOUT_S,
    ) -> None:
        """The suggested link costs against the mesh's current ones; --apply sets them (connector UPDATE)."""
        agg = _aggregates(suggested)
        try:
            rows: list[Row] = agg.table("suggested_costs")
        except AnalyticsError as exc:
            stderr.print(f"error: {exc}", markup=False)
            raise typer.Exit(1) from None
        host, port = parse_bus(bus)
        direct: dict[str, tuple[str, int]] = {}
        for item in connect or []:
            rid, sep, where = item.partition("=")
            if not sep or not rid:
                stderr.print(f"error: --connect {item!r}: expected ID=HOST:PORT", markup=False)
                raise typer.Exit(2)
            direct[rid] = parse_bus(where)
        missed: list[str] = []

        async def apply_all(mgmt: ManagementSession, network: Network, changes: list[CostChange]) -> list[str]:
            done = []
            for change in (c for c in changes if c.applies):
                found = await locate(mgmt, network, change)
                if found is None:
                    missed.append(f"{change.a} - {change.b}: no connector of either router dials the other: not applied")
                    continue
                router, connector = found
                if router == network.bus:
                    await set_cost(mgmt, connector, change.suggested)
                elif router in direct:
                    async with session(*direct[router], timeout) as own:
                        await set_cost(own, connector, change.suggested)
                else:
                    missed.append(f"{change.a} - {change.b}: not applied: its connector {connector!r} is on {router}, "
                                  f"which takes management writes only directly: add --connect {router}=HOST:PORT")  # fmt: skip
                    continue
                done.append(applied_line(network, change, router, connector))
            return done

        async def go() -> int:
            async with session(host, port, timeout) as mgmt:
                network = await gather(mgmt)
                changes = diff(network, rows)
                done = await apply_all(mgmt, network, changes) if do_apply else []
            if json:
                data = [{"a": c.a, "b": c.b, "current": c.current, "suggested": c.suggested, "rtt_us": c.rtt_us,
                         "change": c.applies} for c in changes]  # fmt: skip
                stdout.print(to_json({"links": data, "applied": done, "not_applied": missed}), markup=False, highlight=False)
                return 1 if missed else 0
            stdout.print(diff_table(changes, network.bus))
            for line in done:
                stdout.print(line, markup=False)
            if not do_apply and any(c.applies for c in changes):
                stdout.print("not applied: run again with --apply to set these costs", markup=False)
            elif do_apply and not done and not missed:
                stdout.print("nothing to apply: every link already has its suggested cost", markup=False)
            for line in missed:
                stderr.print(f"error: {line}", markup=False)
            return 1 if missed else 0

        raise typer.Exit(run_async(f"{host}:{port}", go))
