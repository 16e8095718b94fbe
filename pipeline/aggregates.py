"""Throughput, outcomes, top talkers and link utilisation from the curated records.

Owns: which records each figure counts, so that every delivery is counted once, and only the
users' traffic:
- per address (throughput, outcomes, top addresses): the interval counters of ingress links,
  those a delivery enters the mesh by (a link into a router, direction "in", that is not
  inter-router). A delivery crosses several routers but enters the mesh once; the outcome
  counted is the one its producer learnt. An anonymous link's deliveries count under
  "(anonymous)". The router's own addresses are not users' traffic and are left out
  (`SYSTEM_ADDRESS`: the flow records' `_flow/...`, management's `$management` and its
  `_topo/0/<router>/$management`).
- per router pair (A -> B): the counters of A's inter-router data links sending to B
  (direction "out"), so a delivery crossing A -> B -> C counts once on A -> B and once on
  B -> C. The control links (named `A>B/control`: the routers' own protocol) are left
  out, and so are the flow records' own messages on the data links (`records_deliveries`,
  `records_bytes`), which are reported beside in columns of their own.
- per link (top links, utilisation): everything the link carried (its use), with the flow
  records' own part beside in utilisation's `records_deliveries` and `records_bytes`.
- a window is `window_s` seconds of wall clock (the record's `ts`, UTC); rates are the window's
  counts divided by its length.
Must not touch: histograms and RTT (latency.py), costs (costs.py), files (job.py).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

OUTCOMES = ("accepted", "rejected", "released", "modified", "dropped")
ANONYMOUS = "(anonymous)"
# Addresses of the routers themselves, not of their users (Java regex, matched from the start).
SYSTEM_ADDRESS = r"^(_flow/|(_topo/0/[^/]+/)?\$management(/|$))"
CONTROL_LINK = r"/control$"  # the name of a control link between routers (router.core.interrouter)


def window_start(window_s: float) -> Column:
    return F.timestamp_seconds(F.floor(F.col("ts") / F.lit(window_s)) * F.lit(window_s)).alias("window_start")


def link_intervals(records: DataFrame) -> DataFrame:
    return records.where(F.col("type") == "link_interval")


def ingress(records: DataFrame) -> DataFrame:
    """Interval counters of the links deliveries enter the mesh by, with the address filled."""
    return link_intervals(records).where(
        (F.col("direction") == "in") & (F.coalesce(F.col("role"), F.lit("normal")) != "inter-router")
        & ~F.coalesce(F.col("address"), F.lit("")).rlike(SYSTEM_ADDRESS)
    ).withColumn("address", F.coalesce(F.col("address"), F.lit(ANONYMOUS)))


def _rates(frame: DataFrame, window_s: float) -> DataFrame:
    return frame.withColumn("deliveries_per_s", F.col("deliveries") / F.lit(float(window_s))).withColumn(
        "bytes_per_s", F.col("bytes") / F.lit(float(window_s))
    )


def _sums(*names: str) -> list[Column]:
    return [F.sum(F.coalesce(F.col(n), F.lit(0))).cast("long").alias(n) for n in names]


def address_throughput(records: DataFrame, window_s: float) -> DataFrame:
    """address, window_start, deliveries, bytes, deliveries_per_s, bytes_per_s"""
    grouped = ingress(records).groupBy("address", window_start(window_s)).agg(*_sums("deliveries", "bytes"))
    return _rates(grouped, window_s)


def control_links(records: DataFrame) -> DataFrame:
    """router, boot, link_id of the control links between routers (from the link snapshots)."""
    return (
        records.where((F.col("type") == "link") & (F.col("role") == "inter-router") & F.col("name").rlike(CONTROL_LINK))
        .select("router", "boot", "link_id")
        .distinct()
    )


def pair_throughput(records: DataFrame, window_s: float) -> DataFrame:
    """router, peer, window_start, deliveries, bytes, deliveries_per_s, bytes_per_s (router ->
    peer: the users' traffic), records_deliveries, records_bytes (the flow records' own)."""
    sending = link_intervals(records).where((F.col("role") == "inter-router") & (F.col("direction") == "out"))
    data = sending.join(F.broadcast(control_links(records)), ["router", "boot", "link_id"], "left_anti")
    own = {name: F.coalesce(F.col(f"records_{name}"), F.lit(0)) for name in ("deliveries", "bytes")}
    users = data.select(
        "router", "peer", "ts", (F.col("deliveries") - own["deliveries"]).alias("deliveries"),
        (F.col("bytes") - own["bytes"]).alias("bytes"), own["deliveries"].alias("records_deliveries"),
        own["bytes"].alias("records_bytes"),
    )  # fmt: skip
    grouped = users.groupBy("router", "peer", window_start(window_s)).agg(
        *_sums("deliveries", "bytes", "records_deliveries", "records_bytes")
    )
    return _rates(grouped, window_s).select(
        "router", "peer", "window_start", "deliveries", "bytes", "deliveries_per_s", "bytes_per_s",
        "records_deliveries", "records_bytes",
    )  # fmt: skip


def outcomes(records: DataFrame) -> DataFrame:
    """address, deliveries, accepted.., dropped, accepted_rate.. (share of the deliveries)"""
    totals = ingress(records).groupBy("address").agg(*_sums("deliveries", "bytes", *OUTCOMES))
    for name in OUTCOMES:
        rate = F.when(F.col("deliveries") > 0, F.col(name) / F.col("deliveries"))
        totals = totals.withColumn(f"{name}_rate", rate)
    return totals


def top_addresses(records: DataFrame) -> DataFrame:
    """rank, address, deliveries, bytes: every address, busiest first."""
    totals = ingress(records).groupBy("address").agg(*_sums("deliveries", "bytes"))
    order = Window.orderBy(F.col("deliveries").desc(), F.col("bytes").desc(), F.col("address"))
    return totals.withColumn("rank", F.row_number().over(order)).select("rank", "address", "deliveries", "bytes")


def top_links(records: DataFrame) -> DataFrame:
    """rank, router, link_id, peer, role, direction, address, deliveries, bytes: busiest first."""
    keys = ("router", "link_id")
    totals = link_intervals(records).groupBy(*keys).agg(
        *(F.last(c, ignorenulls=True).alias(c) for c in ("peer", "role", "direction", "address")),
        *_sums("deliveries", "bytes"),
    )
    order = Window.orderBy(F.col("deliveries").desc(), F.col("bytes").desc(), *keys)
    return totals.withColumn("rank", F.row_number().over(order)).select(
        "rank", *keys, "peer", "role", "direction", "address", "deliveries", "bytes"
    )


def link_utilisation(records: DataFrame, window_s: float) -> DataFrame:
    """router, link_id, peer, role, direction, window_start, deliveries, bytes, bytes_per_s,
    credit_starved_share, records_deliveries, records_bytes (of deliveries and bytes, the flow
    records' own): the share of the link's reported time it had deliveries waiting and
    no credit (0: never held back by its consumer; 1: always)."""
    grouped = link_intervals(records).groupBy("router", "link_id", window_start(window_s)).agg(
        *(F.last(c, ignorenulls=True).alias(c) for c in ("peer", "role", "direction")),
        *_sums("deliveries", "bytes"),
        F.sum("interval_s").alias("reported_s"),
        F.sum(F.coalesce(F.col("credit_starved_s"), F.lit(0.0))).alias("starved_s"),
        *_sums("records_deliveries", "records_bytes"),
    )
    share = F.when(F.col("reported_s") > 0, F.least(F.lit(1.0), F.col("starved_s") / F.col("reported_s")))
    return grouped.select(
        "router", "link_id", "peer", "role", "direction", "window_start", "deliveries", "bytes",
        (F.col("bytes") / F.lit(float(window_s))).alias("bytes_per_s"), share.alias("credit_starved_share"),
        "records_deliveries", "records_bytes",
    )  # fmt: skip
