"""Throughput, outcomes, top talkers and link utilisation from the curated records.

Owns: which records each figure counts, so that every delivery is counted once:
- per address (throughput, outcomes, top addresses): the interval counters of ingress links,
  those a delivery enters the mesh by (a link into a router, direction "in", that is not
  inter-router). A delivery crosses several routers but enters the mesh once; the outcome
  counted is the one its producer learnt. An anonymous link's deliveries count under
  "(anonymous)".
- per router pair (A -> B): the counters of A's inter-router links sending to B (direction
  "out"), so a delivery crossing A -> B -> C counts once on A -> B and once on B -> C.
- a window is `window_s` seconds of wall clock (the record's `ts`, UTC); rates are the window's
  counts divided by its length.
Must not touch: histograms and RTT (latency.py), costs (costs.py), files (job.py).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

OUTCOMES = ("accepted", "rejected", "released", "modified", "dropped")
ANONYMOUS = "(anonymous)"


def window_start(window_s: float) -> Column:
    return F.timestamp_seconds(F.floor(F.col("ts") / F.lit(window_s)) * F.lit(window_s)).alias("window_start")


def link_intervals(records: DataFrame) -> DataFrame:
    return records.where(F.col("type") == "link_interval")


def ingress(records: DataFrame) -> DataFrame:
    """Interval counters of the links deliveries enter the mesh by, with the address filled."""
    return link_intervals(records).where(
        (F.col("direction") == "in") & (F.coalesce(F.col("role"), F.lit("normal")) != "inter-router")
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


def pair_throughput(records: DataFrame, window_s: float) -> DataFrame:
    """router, peer, window_start, deliveries, bytes, deliveries_per_s, bytes_per_s (router -> peer)"""
    sending = link_intervals(records).where((F.col("role") == "inter-router") & (F.col("direction") == "out"))
    grouped = sending.groupBy("router", "peer", window_start(window_s)).agg(*_sums("deliveries", "bytes"))
    return _rates(grouped, window_s)


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
    credit_starved_share: the share of the link's reported time it had deliveries waiting and
    no credit (0: never held back by its consumer; 1: always)."""
    grouped = link_intervals(records).groupBy("router", "link_id", window_start(window_s)).agg(
        *(F.last(c, ignorenulls=True).alias(c) for c in ("peer", "role", "direction")),
        *_sums("deliveries", "bytes"),
        F.sum("interval_s").alias("reported_s"),
        F.sum(F.coalesce(F.col("credit_starved_s"), F.lit(0.0))).alias("starved_s"),
    )
    share = F.when(F.col("reported_s") > 0, F.least(F.lit(1.0), F.col("starved_s") / F.col("reported_s")))
    return grouped.select(
        "router", "link_id", "peer", "role", "direction", "window_start", "deliveries", "bytes",
        (F.col("bytes") / F.lit(float(window_s))).alias("bytes_per_s"), share.alias("credit_starved_share"),
    )  # fmt: skip
