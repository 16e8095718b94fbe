"""The `topology report --plot DIR` drawings: matplotlib PNGs of the pipeline's aggregates.

Owns: throughput.png (deliveries/s per address and per router pair over time), latency.png
(residence and settle p50/p95/p99 per router, from sampled hops) and outcomes.png (each
address's deliveries by outcome). Must not touch: reading Parquet (analytics.py), tables.
"""

from __future__ import annotations

from pathlib import Path

from .analytics import OUTCOMES, Aggregates, address_totals, series

TOP_SERIES = 8  # lines per throughput panel: the busiest addresses and pairs


def write_plots(agg: Aggregates, directory: Path) -> list[Path]:
    """Write the three PNGs into `directory`; their paths. ImportError without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = []

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    busiest = [str(r["address"]) for r in address_totals(agg)[:TOP_SERIES]]
    by_address = series(agg, "address_throughput", "address", "deliveries_per_s")
    for address in busiest:
        points = by_address.get(address, [])
        top.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=address)
    top.set_ylabel("deliveries/s")
    top.set_title("Throughput per address (entering the mesh)")
    pairs: dict[str, list[tuple[object, float]]] = {}
    for row in agg.table("pair_throughput"):
        pairs.setdefault(f"{row['router']} -> {row['peer']}", []).append((row["window_start"], float(row["deliveries_per_s"] or 0)))
    for name, points in sorted(pairs.items())[:TOP_SERIES]:
        points.sort(key=lambda p: str(p[0]))
        bottom.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    bottom.set_ylabel("deliveries/s")
    bottom.set_title("Throughput per router pair")
    import datetime as dt

    import matplotlib.dates as mdates

    times = [x for axis in (top, bottom) for line in axis.lines for x in line.get_xdata()]
    for axis in (top, bottom):
        axis.set_ylim(bottom=0)
        axis.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M:%S"))  # type: ignore[no-untyped-call]
        if axis.lines:
            axis.legend(fontsize="small")
    if times and min(times) == max(times):  # one window: a minute either side, not years
        top.set_xlim(min(times) - dt.timedelta(minutes=1), max(times) + dt.timedelta(minutes=1))
    fig.autofmt_xdate()
    fig.tight_layout()
    written.append(_save(fig, directory / "throughput.png", plt))

    hops = sorted(agg.table("hop_latency"), key=lambda r: str(r["router"]))
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    names = [str(r["router"]) for r in hops]
    for axis, metric in zip(axes, ("residence", "settle")):
        width = 0.25
        for i, q in enumerate(("p50", "p95", "p99")):
            values = [float(r[f"{metric}_{q}_us"] or 0) for r in hops]
            axis.bar([x + (i - 1) * width for x in range(len(names))], values, width, label=q)
        axis.set_xticks(range(len(names)), names)
        axis.set_ylabel("microseconds")
        axis.set_title(f"{metric} per hop (sampled deliveries)")
        axis.legend(fontsize="small")
    fig.tight_layout()
    written.append(_save(fig, directory / "latency.png", plt))

    rows = address_totals(agg)[:TOP_SERIES * 2]
    fig, axis = plt.subplots(figsize=(10, 4))
    bottoms = [0.0] * len(rows)
    labels = [str(r["address"]) for r in rows]
    for outcome in OUTCOMES:
        values = [float(r[outcome] or 0) for r in rows]
        axis.bar(labels, values, bottom=bottoms, label=outcome)
        bottoms = [b + v for b, v in zip(bottoms, values)]
    axis.set_ylabel("deliveries")
    axis.set_title("Outcomes per address")
    axis.legend(fontsize="small")
    fig.tight_layout()
    written.append(_save(fig, directory / "outcomes.png", plt))
    return written


def _save(fig: object, path: Path, plt: object) -> Path:
    fig.savefig(path, dpi=90)  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[attr-defined]
    return path
