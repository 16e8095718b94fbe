"""The flow-record schema as Spark sees it, and the names of what the job writes.

Owns: the explicit StructType of one record (every record type in one row shape: the fields a
type does not have are null), fixed by the record format shared with the routers (type, router,
boot, seq, ts, then per type; histograms are 32 log2 buckets of microseconds), and the layout of
the output directory. Must not touch: reading, aggregating.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

HIST_BUCKETS = 32
RECORD_TYPES = ("router", "link", "link_interval", "address_interval", "hop")
DEDUPE_KEY = ("router", "boot", "seq")


def _s(name: str) -> StructField:
    return StructField(name, StringType(), True)


def _l(name: str) -> StructField:
    return StructField(name, LongType(), True)


def _d(name: str) -> StructField:
    return StructField(name, DoubleType(), True)


def _hist(name: str) -> StructField:
    return StructField(name, ArrayType(LongType(), True), True)


NEIGHBOUR = StructType([_s("router"), _l("cost")])

RECORD = StructType(
    [
        # every record
        _s("type"), _s("router"), _s("boot"), _l("seq"), _d("ts"),
        # router
        _s("mode"), _s("version"), StructField("compiled", BooleanType(), True),
        StructField("neighbours", ArrayType(NEIGHBOUR, True), True),
        # link and link_interval
        _s("link_id"), _s("connection_id"), _s("role"), _s("peer"), _s("direction"), _s("address"),
        _s("name"), _s("state"),
        # link_interval and address_interval
        _d("interval_s"), _l("deliveries"), _l("bytes"), _l("accepted"), _l("rejected"), _l("released"),
        _l("modified"), _l("dropped"), _d("credit_starved_s"), _hist("residence_hist"), _hist("settle_hist"),
        # link_interval: of deliveries and bytes, the flow records' own messages (null from routers
        # that did not count them apart)
        _l("records_deliveries"), _l("records_bytes"),
        # hop
        _s("trace_id"), _s("ingress"), _s("prev"), _s("next"), _l("residence_us"), _l("settle_us"), _s("outcome"),
    ]
)  # fmt: skip

# Under the job's --out directory:
CURATED = "curated"  # every record once, Parquet partitioned by date (UTC, from ts)
CHECKPOINT = "_checkpoint"  # the streaming source's record of the files already read
AGGREGATES = "aggregates"  # one Parquet directory per table below, rewritten on every run
TABLES = (
    "address_throughput",  # address, window_start, deliveries, bytes, deliveries_per_s, bytes_per_s
    "pair_throughput",  # router, peer, window_start, deliveries, bytes, deliveries_per_s, bytes_per_s, records_*
    "outcomes",  # address, deliveries, accepted..dropped, *_rate
    "latency",  # kind (address|link), key, metric (residence|settle), samples, p50_us, p95_us, p99_us
    "hop_latency",  # router, samples, residence p50/p95/p99, settle p50/p95/p99 (from hop records)
    "top_addresses",  # rank, address, deliveries, bytes
    "top_links",  # rank, router, link_id, peer, role, direction, address, deliveries, bytes
    "link_utilisation",  # router, link_id, ..., window_start, deliveries, bytes, bytes_per_s, credit_starved_share
    "link_rtt",  # router, peer, samples, rtt_p50_us, rtt_mean_us
    "suggested_costs",  # router_a, router_b, rtt_us, current_cost, computed_cost, suggested_cost, changed
)
