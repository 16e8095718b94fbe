"""The pipeline's aggregate tables as the `topology` CLI reads them: Parquet through pyarrow,
no JVM and no pyspark, into plain rows; and the summaries the report shows.

Owns: finding the tables under the job's --out directory (docs/analytics.md), reading them, and
the sums and orderings of the report (totals per address and per router pair, peaks).
Must not touch: running the job (pipeline/), drawing (analytics_render.py, plots.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

AGGREGATES = "aggregates"
OUTCOMES = ("accepted", "rejected", "released", "modified", "dropped")
Row = dict[str, Any]


class AnalyticsError(Exception):
    """Aggregates that are missing or unreadable: one line for the operator."""


@dataclass
class Aggregates:
    root: Path  # the directory holding one Parquet directory per table

    @classmethod
    def at(cls, directory: Path) -> Aggregates:
        """The aggregates of the job whose --out was `directory` (or its aggregates/ itself)."""
        for root in (directory / AGGREGATES, directory):
            if (root / "outcomes").is_dir():
                return cls(root)
        raise AnalyticsError(f"no aggregates under {directory} (run `topology analyse --records DIR --out {directory}` first)")

    def table(self, name: str) -> list[Row]:
        path = self.root / name
        if not path.is_dir():
            raise AnalyticsError(f"no table {name!r} under {self.root} (written by an older job? run it again)")
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise AnalyticsError("reading the aggregates needs pyarrow: pip install 'amqp-mesh-router[analytics]'") from None
        try:
            rows: list[Row] = pq.read_table(path).to_pylist()
        except Exception as exc:  # a damaged file: say which table
            raise AnalyticsError(f"cannot read {path}: {exc}") from None
        return rows


def address_totals(agg: Aggregates) -> list[Row]:
    """Per address: deliveries, bytes, each outcome and its share, and the busiest window's rate;
    busiest first."""
    peaks: dict[str, float] = defaultdict(float)
    for row in agg.table("address_throughput"):
        peaks[row["address"]] = max(peaks[row["address"]], float(row["deliveries_per_s"] or 0.0))
    rows = []
    for row in agg.table("outcomes"):
        rows.append({**row, "peak_deliveries_per_s": peaks.get(row["address"], 0.0)})
    return sorted(rows, key=lambda r: (-(r["deliveries"] or 0), str(r["address"])))


def grand_total(rows: list[Row]) -> Row:
    total: Row = {"address": "total"}
    for key in ("deliveries", "bytes", *OUTCOMES):
        total[key] = sum(int(r.get(key) or 0) for r in rows)
    return total


def pair_totals(agg: Aggregates) -> list[Row]:
    """Per router pair (sender -> receiver): deliveries, bytes, peak deliveries/s and bytes/s (the
    users' traffic), and the flow records' own messages (records_deliveries)."""
    pairs: dict[tuple[str, str], Row] = {}
    for row in agg.table("pair_throughput"):
        key = (row["router"], row["peer"])
        total = pairs.setdefault(key, {"router": key[0], "peer": key[1], "deliveries": 0, "bytes": 0,
                                       "peak_deliveries_per_s": 0.0, "peak_bytes_per_s": 0.0,
                                       "records_deliveries": 0})  # fmt: skip
        total["deliveries"] += int(row["deliveries"] or 0)
        total["records_deliveries"] += int(row.get("records_deliveries") or 0)  # (absent from older aggregates)
        total["bytes"] += int(row["bytes"] or 0)
        total["peak_deliveries_per_s"] = max(total["peak_deliveries_per_s"], float(row["deliveries_per_s"] or 0.0))
        total["peak_bytes_per_s"] = max(total["peak_bytes_per_s"], float(row["bytes_per_s"] or 0.0))
    return [pairs[key] for key in sorted(pairs)]


def link_use(agg: Aggregates) -> list[Row]:
    """Per link: deliveries, bytes, peak bytes/s and the worst credit-starved share of a window;
    busiest first."""
    links: dict[tuple[str, str], Row] = {}
    for row in agg.table("link_utilisation"):
        key = (row["router"], row["link_id"])
        use = links.setdefault(key, {k: row[k] for k in ("router", "link_id", "peer", "role", "direction")}
                               | {"deliveries": 0, "bytes": 0, "peak_bytes_per_s": 0.0, "worst_starved_share": 0.0})  # fmt: skip
        use["deliveries"] += int(row["deliveries"] or 0)
        use["bytes"] += int(row["bytes"] or 0)
        use["peak_bytes_per_s"] = max(use["peak_bytes_per_s"], float(row["bytes_per_s"] or 0.0))
        use["worst_starved_share"] = max(use["worst_starved_share"], float(row["credit_starved_share"] or 0.0))
    return sorted(links.values(), key=lambda r: (-r["bytes"], r["router"], r["link_id"]))


def ranked(agg: Aggregates, name: str, top: int) -> list[Row]:
    return sorted(agg.table(name), key=lambda r: int(r["rank"]))[:top]


def series(agg: Aggregates, name: str, key: str, value: str) -> dict[str, list[tuple[Any, float]]]:
    """A table's rows as one time series per key value: key -> [(window_start, value)], in time order."""
    out: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for row in agg.table(name):
        out[str(row[key])].append((row["window_start"], float(row[value] or 0.0)))
    return {k: sorted(v, key=lambda p: p[0]) for k, v in sorted(out.items())}
