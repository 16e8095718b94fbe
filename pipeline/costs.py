"""Suggested inter-router link costs from the measured RTTs, with hysteresis.

Owns: the cost rule. A link's computed cost is its RTT relative to the fastest measured link,
rounded, within 1..max_cost:
    computed = clamp(round(max(rtt, floor) / max(fastest rtt, floor)), 1, max_cost)
RTTs under `rtt_floor_us` count as the floor, so that links differing by microseconds (a
loopback or one rack) are not told apart. Hysteresis: the suggestion keeps the current cost
unless the computed one differs from it by more than `threshold` times the current cost
(default 0.5: 1 -> 2 changes, 4 -> 5 does not, 4 -> 7 does), so jitter does not move traffic
back and forth. The current cost of a link is what its routers last reported in their `router`
records (neighbours[].cost; a link costs the larger of both ends', as the routers compute it);
unknown when neither end reported, and then the computed cost is suggested.
Must not touch: measuring RTT (latency.py), applying costs (the `topology costs` command).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F


@dataclass(frozen=True)
class CostRule:
    max_cost: int = 10
    threshold: float = 0.5
    rtt_floor_us: float = 1000.0
    min_samples: int = 1


def current_costs(records: DataFrame) -> DataFrame:
    """router_a, router_b (a < b), current_cost: the larger of both ends' latest reported costs."""
    latest = Window.partitionBy("router").orderBy(F.col("ts").desc(), F.col("seq").desc())
    reports = (
        records.where(F.col("type") == "router")
        .withColumn("_n", F.row_number().over(latest))
        .where(F.col("_n") == 1)
        .select("router", F.explode("neighbours").alias("nb"))
        .select("router", F.col("nb.router").alias("peer"), F.col("nb.cost").alias("cost"))
    )
    return reports.groupBy(
        F.least("router", "peer").alias("router_a"), F.greatest("router", "peer").alias("router_b")
    ).agg(F.max("cost").alias("current_cost"))


def suggest_costs(rtt: DataFrame, current: DataFrame, rule: CostRule = CostRule()) -> DataFrame:
    """router_a, router_b, samples, rtt_us, current_cost, computed_cost, suggested_cost, changed.

    rtt: router_a, router_b, samples, rtt_p50_us (latency.link_rtt); current: router_a,
    router_b, current_cost (current_costs)."""
    measured = rtt.where(F.col("samples") >= rule.min_samples).select(
        "router_a", "router_b", "samples", F.col("rtt_p50_us").alias("rtt_us")
    )
    floor = F.lit(float(rule.rtt_floor_us))
    fastest = measured.agg(F.min("rtt_us").alias("fastest_us"))
    ratio = F.greatest(F.col("rtt_us"), floor) / F.greatest(F.col("fastest_us"), floor)
    computed = F.least(F.lit(rule.max_cost), F.greatest(F.lit(1), F.round(ratio).cast("long")))
    with_current = measured.crossJoin(fastest).withColumn("computed_cost", computed.cast("long")).join(
        current, ["router_a", "router_b"], "left"
    )
    moves = F.abs(F.col("computed_cost") - F.col("current_cost")) > F.lit(rule.threshold) * F.col("current_cost")
    suggested = F.when(F.col("current_cost").isNull() | moves, F.col("computed_cost")).otherwise(F.col("current_cost"))
    return with_current.select(
        "router_a", "router_b", "samples", "rtt_us", F.col("current_cost").cast("long").alias("current_cost"),
        "computed_cost", suggested.cast("long").alias("suggested_cost"),
        (F.col("current_cost").isNull() | (suggested != F.col("current_cost"))).alias("changed"),
    )  # fmt: skip
