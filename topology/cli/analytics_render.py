"""How the `topology report` sections look: rich tables of the pipeline's aggregates.

Owns: columns, units and labels of the flows, latency, talkers and costs sections. Must not
touch: reading Parquet (analytics.py), plots (plots.py), management (costs.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.table import Table

from .analytics import OUTCOMES, Aggregates, Row, address_totals, grand_total, link_use, pair_totals, ranked

SECTIONS = ("flows", "latency", "talkers", "costs")


def _n(value: Any) -> str:
    return "-" if value is None else f"{int(value):,}"


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{float(value):,.{digits}f}"


def _pct(value: Any) -> str:
    return "-" if value is None else f"{100 * float(value):.1f} %"


def _us(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v / 1000:,.2f} ms" if v >= 1000 else f"{v:,.1f} us"


def _table(title: str, columns: Iterable[str], rows: Iterable[Iterable[str]]) -> Table:
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    return table


def flows(agg: Aggregates) -> list[Table]:
    addresses = address_totals(agg)
    total = grand_total(addresses)
    rows = [
        [str(r["address"]), _n(r["deliveries"]), _n(r["bytes"]), *(_n(r[o]) for o in OUTCOMES),
         _pct(r.get("rejected_rate")), _pct(r.get("released_rate")), _f(r["peak_deliveries_per_s"])]
        for r in addresses
    ]  # fmt: skip
    rows.append(["total", _n(total["deliveries"]), _n(total["bytes"]), *(_n(total[o]) for o in OUTCOMES), "", "", ""])
    by_address = _table(
        "Deliveries per address (counted once, where they entered the mesh)",
        ("address", "deliveries", "bytes", *OUTCOMES, "rejected", "released", "peak/s"), rows,
    )  # fmt: skip
    pairs = _table(
        "Between routers (sender -> receiver; the flow records' own messages apart)",
        ("link", "deliveries", "bytes", "peak deliveries/s", "peak bytes/s", "records' msgs"),
        ([f"{p['router']} -> {p['peer']}", _n(p["deliveries"]), _n(p["bytes"]), _f(p["peak_deliveries_per_s"]),
          _f(p["peak_bytes_per_s"]), _n(p["records_deliveries"])] for p in pair_totals(agg)),
    )  # fmt: skip
    return [by_address, pairs]


def latency(agg: Aggregates) -> list[Table]:
    order = {"address": 0, "link": 1}
    rows = sorted(agg.table("latency"), key=lambda r: (order.get(r["kind"], 9), str(r["key"]), str(r["metric"])))
    histograms = _table(
        "Latency from the routers' histograms (residence: arrival to sent on; settle: sent on to outcome)",
        ("what", "metric", "samples", "p50", "p95", "p99"),
        ([f"{r['kind']} {r['key']}", str(r["metric"]), _n(r["samples"]), _us(r["p50_us"]), _us(r["p95_us"]),
          _us(r["p99_us"])] for r in rows),
    )  # fmt: skip
    hops = _table(
        "Per hop, sampled deliveries",
        ("router", "samples", "residence p50", "p95", "p99", "settle p50", "p95", "p99"),
        ([str(r["router"]), _n(r["samples"]), *(_us(r[f"residence_{p}_us"]) for p in ("p50", "p95", "p99")),
          *(_us(r[f"settle_{p}_us"]) for p in ("p50", "p95", "p99"))]
         for r in sorted(agg.table("hop_latency"), key=lambda r: str(r["router"]))),
    )  # fmt: skip
    rtt = _table(
        "Round trip per inter-router link (from deliveries sampled on both ends)",
        ("link", "samples", "median RTT", "mean RTT"),
        ([f"{r['router_a']} - {r['router_b']}", _n(r["samples"]), _us(r["rtt_p50_us"]), _us(r["rtt_mean_us"])]
         for r in sorted(agg.table("link_rtt"), key=lambda r: (str(r["router_a"]), str(r["router_b"])))),
    )  # fmt: skip
    return [histograms, hops, rtt]


def talkers(agg: Aggregates, top: int = 10) -> list[Table]:
    addresses = _table(
        f"Top {top} addresses", ("rank", "address", "deliveries", "bytes"),
        ([str(r["rank"]), str(r["address"]), _n(r["deliveries"]), _n(r["bytes"])] for r in ranked(agg, "top_addresses", top)),
    )  # fmt: skip
    links = _table(
        f"Top {top} links", ("rank", "router", "link", "peer", "role", "dir", "address", "deliveries", "bytes"),
        ([str(r["rank"]), str(r["router"]), str(r["link_id"]), str(r["peer"] or "-"), str(r["role"] or "-"),
          str(r["direction"] or "-"), str(r["address"] or "-"), _n(r["deliveries"]), _n(r["bytes"])]
         for r in ranked(agg, "top_links", top)),
    )  # fmt: skip
    use = _table(
        "Link use (credit-starved: share of the time deliveries waited for the consumer's credit)",
        ("router", "link", "peer", "role", "dir", "deliveries", "bytes", "peak bytes/s", "credit-starved"),
        ([str(r["router"]), str(r["link_id"]), str(r["peer"] or "-"), str(r["role"] or "-"), str(r["direction"] or "-"),
          _n(r["deliveries"]), _n(r["bytes"]), _f(r["peak_bytes_per_s"]), _pct(r["worst_starved_share"])]
         for r in link_use(agg)[:top]),
    )  # fmt: skip
    return [addresses, links, use]


def suggested_costs(rows: list[Row]) -> Table:
    return _table(
        "Suggested link costs (RTT relative to the fastest link; kept within the hysteresis threshold)",
        ("link", "samples", "median RTT", "reported cost", "computed", "suggested", "change"),
        ([f"{r['router_a']} - {r['router_b']}", _n(r["samples"]), _us(r["rtt_us"]), _n(r["current_cost"]),
          _n(r["computed_cost"]), _n(r["suggested_cost"]), "yes" if r["changed"] else "no"]
         for r in sorted(rows, key=lambda r: (str(r["router_a"]), str(r["router_b"])))),
    )  # fmt: skip


def section(agg: Aggregates, name: str, top: int) -> list[Table]:
    if name == "flows":
        return flows(agg)
    if name == "latency":
        return latency(agg)
    if name == "talkers":
        return talkers(agg, top)
    return [suggested_costs(agg.table("suggested_costs"))]
