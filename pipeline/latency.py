"""Latency from the records: percentiles of the log2 histograms, per-hop latency and per-link RTT.

Owns: the percentile estimate (below), the per-router latency of sampled hop records and the RTT
estimate of each inter-router link. Must not touch: reading files, throughput, costs.

The percentile estimate. A histogram counts durations in 32 buckets of microseconds: bucket 0 is
[0, 1), bucket i (1..31) is [2^(i-1), 2^i) (bucket 31 also holds everything longer; its upper
edge is taken as 2^31). For quantile q of N samples the rank is q * N; the answer lies in the
first bucket whose cumulative count reaches the rank, and inside it we interpolate linearly,
assuming the bucket's samples are spread evenly over [lo, hi):
    value = lo + (hi - lo) * (rank - count below the bucket) / count in the bucket
So one sample of 5 us (bucket 3, [4, 8)) has p50 = 6 us, and p99 = 7.96 us. The error is at most
the bucket's width (a factor of two), as for any log2 histogram; histograms of several records
(or routers) are merged by adding the counts bucket by bucket before the estimate.

The RTT of the link X -> Y, from one delivery sampled on both routers (the same trace_id, X's
hop has next = Y and Y's has prev = X): X's settle_us runs from X sending the delivery on until
X knows its outcome, which includes Y's own residence (Y's arrival to Y sending on) and Y's
settle_us (Y's sending on until Y knows the outcome); what remains is the time on the link, both
ways:
    rtt = settle_us(X) - settle_us(Y) - residence_us(Y)
Each term is measured on one router's clock (no clocks are compared). A pair's RTT is the median
of its samples in either direction (one link, one cost).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

QUANTILES = ((0.5, "p50_us"), (0.95, "p95_us"), (0.99, "p99_us"))
HIST_BUCKETS = 32  # (pipeline.schema: a histogram is 32 counts; a longer one's extra buckets are not read)


def bucket_bounds(bucket: Column) -> tuple[Column, Column]:
    lo = F.when(bucket == 0, F.lit(0.0)).otherwise(F.pow(F.lit(2.0), bucket - 1))
    hi = F.pow(F.lit(2.0), bucket)
    return lo, hi


def bucket_sums(records: DataFrame, keys: Sequence[str], hists: Sequence[str]) -> DataFrame:
    """keys..., <hist>_b0 .. <hist>_b31 for each of `hists`: the histograms merged per key, in one
    pass (one row per key, combined before the shuffle). Summing first and making a row per
    bucket afterwards spares the 32 rows per record that exploding every histogram would make.
    A null histogram, or a missing bucket, counts 0."""
    return records.groupBy(*keys).agg(*(
        F.sum(F.coalesce(F.get(F.col(hist), i), F.lit(0))).alias(f"{hist}_b{i}") for hist in hists for i in range(HIST_BUCKETS)
    ))  # fmt: skip


def histogram_percentiles(records: DataFrame, keys: Sequence[str], hist: str) -> DataFrame:
    """keys..., samples, p50_us, p95_us, p99_us: the merged histogram `hist` of each key."""
    return percentiles_of_sums(bucket_sums(records, keys, [hist]), keys, hist)


def percentiles_of_sums(sums: DataFrame, keys: Sequence[str], hist: str) -> DataFrame:
    """keys..., samples, p50_us, p95_us, p99_us from bucket_sums' columns of `hist` (keys with no
    sample are left out)."""
    keys = list(keys)
    merged = F.array(*(F.coalesce(F.col(f"{hist}_b{i}"), F.lit(0)).cast("long") for i in range(HIST_BUCKETS)))
    buckets = sums.select(*keys, F.posexplode(merged).alias("bucket", "n"))
    upto = Window.partitionBy(*keys).orderBy("bucket").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    buckets = buckets.withColumn("cum", F.sum("n").over(upto)).withColumn("total", F.sum("n").over(Window.partitionBy(*keys)))
    lo, hi = bucket_bounds(F.col("bucket"))
    picks = []
    for q, name in QUANTILES:
        rank = F.col("total") * F.lit(q)
        value = lo + (hi - lo) * (rank - (F.col("cum") - F.col("n"))) / F.col("n")
        # the first bucket (lowest index) whose cumulative count reaches the rank
        reached = (F.col("n") > 0) & (F.col("cum") >= rank)
        picks.append(F.min(F.when(reached, F.struct(F.col("bucket"), value.alias("v")))).getField("v").alias(name))
    return (
        buckets.groupBy(*keys)
        .agg(F.max("total").alias("samples"), *picks)
        .where(F.col("samples") > 0)
    )


def latency_table(records: DataFrame) -> DataFrame:
    """kind (address | link), key, metric (residence | settle), samples, p50_us, p95_us, p99_us.

    address: an address's interval histograms, merged over every router. link: a router's
    inter-router links to one peer, sending side ("A->B")."""
    addresses = records.where(F.col("type") == "address_interval").select(
        F.lit("address").alias("kind"), F.col("address").alias("key"), "residence_hist", "settle_hist"
    )
    links = records.where(
        (F.col("type") == "link_interval") & (F.col("role") == "inter-router") & (F.col("direction") == "out")
    ).select(F.lit("link").alias("kind"), F.concat_ws("->", "router", "peer").alias("key"), "residence_hist", "settle_hist")
    both = addresses.unionByName(links)
    hists = (("residence_hist", "residence"), ("settle_hist", "settle"))
    sums = bucket_sums(both, ["kind", "key"], [hist for hist, _ in hists])  # (both metrics in one pass)
    parts = [
        percentiles_of_sums(sums, ["kind", "key"], hist).select(
            "kind", "key", F.lit(metric).alias("metric"), "samples", *(name for _, name in QUANTILES)
        )
        for hist, metric in hists
    ]
    return parts[0].unionByName(parts[1])


def _exact_percentiles(column: str, prefix: str) -> Column:
    # exact, interpolated between the two nearest samples (Spark's `percentile`): the three in
    # one aggregate, which holds the group's values once
    return F.percentile(F.col(column), F.array(*(F.lit(q) for q, _ in QUANTILES))).alias(prefix)


def hop_latency(records: DataFrame) -> DataFrame:
    """router, samples, residence_p50_us.., settle_p50_us..: sampled hop records per router."""
    hops = records.where(F.col("type") == "hop")
    grouped = hops.groupBy("router").agg(
        F.count(F.lit(1)).alias("samples"), _exact_percentiles("residence_us", "residence"),
        _exact_percentiles("settle_us", "settle"),
    )  # fmt: skip
    return grouped.select(
        "router", "samples",
        *(F.col(prefix)[i].alias(f"{prefix}_{name}") for prefix in ("residence", "settle") for i, (_, name) in enumerate(QUANTILES)),
    )  # fmt: skip


def rtt_samples(records: DataFrame) -> DataFrame:
    """router, peer, rtt_us: one row per delivery sampled on both ends of a link."""
    hops = records.where(F.col("type") == "hop").select("trace_id", "router", "prev", "next", "residence_us", "settle_us")
    x, y = hops.alias("x"), hops.alias("y")
    joined = x.join(
        y,
        (F.col("x.trace_id") == F.col("y.trace_id"))
        & (F.col("x.next") == F.col("y.router"))
        & (F.col("y.prev") == F.col("x.router")),
    )
    return joined.where(F.col("x.settle_us").isNotNull() & F.col("y.settle_us").isNotNull()).select(
        F.col("x.router").alias("router"),
        F.col("y.router").alias("peer"),
        (F.col("x.settle_us") - F.col("y.settle_us") - F.coalesce(F.col("y.residence_us"), F.lit(0))).alias("rtt_us"),
    )


def link_rtt(records: DataFrame) -> DataFrame:
    """router_a, router_b (a < b), samples, rtt_p50_us, rtt_mean_us: per link, both directions."""
    samples = rtt_samples(records).select(
        F.least("router", "peer").alias("router_a"), F.greatest("router", "peer").alias("router_b"), "rtt_us"
    )
    return samples.groupBy("router_a", "router_b").agg(
        F.count(F.lit(1)).alias("samples"),
        F.percentile(F.col("rtt_us"), F.lit(0.5)).alias("rtt_p50_us"),
        F.avg("rtt_us").alias("rtt_mean_us"),
    )
