"""The flow-record pipeline on a small record set with known answers (tests/support/flowdata.py):
percentiles from histograms, outcome rates, throughput, dedupe, RTT and cost suggestions with
hysteresis, and the incremental run. One local SparkSession for all (tests/support/sparkfixtures.py);
the job runs once and its ingest once more (the `flow_job` fixture), the rest are small DataFrames.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.synthetic import bucket_of, histogram
from tests.support.flowdata import T0

# Starting the JVM and the first job on the shared session takes tens of seconds on a busy
# machine; the default 120 s bound would fail a slow start rather than a hang.
pytestmark = pytest.mark.timeout(300)

WINDOW0 = dt.datetime.fromtimestamp(T0, tz=dt.timezone.utc).replace(tzinfo=None)
WINDOW1 = WINDOW0 + dt.timedelta(seconds=60)


def _table(spark: Any, out: Path, name: str) -> Any:
    return spark.read.parquet(str(out / "aggregates" / name))


def test_buckets_follow_the_format() -> None:
    # bucket 0: under 1 us; i: 2^(i-1) <= d < 2^i; 31 takes the rest
    assert [bucket_of(d) for d in (0, 0.9, 1, 2, 3, 4, 7, 8, 2**30, 2**40)] == [0, 0, 1, 2, 2, 3, 3, 4, 31, 31]
    assert sum(histogram([1, 5, 5])) == 3


def test_percentiles_interpolate_inside_the_bucket(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    from pipeline.latency import histogram_percentiles

    def hist(**counts: int) -> list[int]:
        h = [0] * 32
        for bucket, n in counts.items():
            h[int(bucket[1:])] = n
        return h

    rows = [
        ("one", hist(b3=1)),  # one sample in [4, 8): p50 = 4 + 4 * 0.5
        ("merged", hist(b3=3)),  # 3 in [4, 8) ...
        ("merged", hist(b7=1)),  # ... and 1 in [64, 128), from another router
        ("tiny", hist(b0=2)),  # under a microsecond: [0, 1)
        ("empty", hist()),
    ]
    frame = spark.createDataFrame(rows, "key string, h array<long>")
    expected = spark.createDataFrame(
        [
            ("one", 1, 6.0, 7.8, 7.96),
            # p50: rank 2 of 4, in bucket 3 (3 samples): 4 + 4 * 2/3; p95: rank 3.8, bucket 7: 64 + 64 * 0.8
            ("merged", 4, 4 + 4 * 2 / 3, 115.2, 125.44),
            ("tiny", 2, 0.5, 0.95, 0.99),
        ],
        "key string, samples long, p50_us double, p95_us double, p99_us double",
    )
    assertDataFrameEqual(histogram_percentiles(frame, ["key"], "h"), expected, rtol=1e-9)


def test_cost_suggestion_keeps_a_cost_within_the_threshold(spark: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    from pipeline.costs import CostRule, suggest_costs

    rtt = spark.createDataFrame(
        [("A", "B", 5, 2000.0), ("B", "C", 5, 6100.0), ("C", "D", 5, 6000.0), ("D", "E", 5, 14000.0), ("E", "F", 1, 9e9)],
        "router_a string, router_b string, samples long, rtt_p50_us double",
    )
    current = spark.createDataFrame(
        [("A", "B", 1), ("B", "C", 4), ("C", "D", 1), ("D", "E", 5)], "router_a string, router_b string, current_cost long"
    )
    # fastest 2000 us; B-C, C-D compute 3; D-E 7. Threshold 0.5 of the current cost:
    # B-C 4 -> 3 is within 2: kept; C-D 1 -> 3 moves; D-E 5 -> 7 is within 2.5: kept.
    # E-F has too few samples to count (and would otherwise be the slowest).
    rule = CostRule(max_cost=10, threshold=0.5, rtt_floor_us=1000.0, min_samples=2)
    expected = spark.createDataFrame(
        [
            ("A", "B", 5, 2000.0, 1, 1, 1, False),
            ("B", "C", 5, 6100.0, 4, 3, 4, False),
            ("C", "D", 5, 6000.0, 1, 3, 3, True),
            ("D", "E", 5, 14000.0, 5, 7, 5, False),
        ],
        "router_a string, router_b string, samples long, rtt_us double, current_cost long, computed_cost long, "
        "suggested_cost long, changed boolean",
    )
    assertDataFrameEqual(suggest_costs(rtt, current, rule), expected)
    # With no current cost known, the computed one is suggested; max_cost caps it.
    capped = suggest_costs(rtt, current.limit(0), CostRule(max_cost=5, min_samples=2))
    assert {(r.router_a, r.suggested_cost, r.changed) for r in capped.collect()} == {
        ("A", 1, True), ("B", 3, True), ("C", 3, True), ("D", 5, True)
    }


def test_every_delivery_is_counted_once_and_the_second_run_adds_only_the_new(spark: Any, flow_job: Any) -> None:
    # 11 + 6 hop records in the first files; the second adds 1 new and 1 written again
    assert flow_job.first_curated == 17
    assert flow_job.second["curated_records"] == 18 and flow_job.second["new_records"] == 1
    curated = spark.read.parquet(str(flow_job.out / "curated"))
    assert curated.groupBy("router", "boot", "seq").count().where("count > 1").count() == 0
    assert sorted(str(p.name) for p in (flow_job.out / "curated").glob("date=*")) == ["date=2025-11-24"]
    # a run with no new file reads nothing and leaves the aggregates as they were
    from pipeline.job import run

    before = sorted(p.stat().st_mtime_ns for p in (flow_job.out / "aggregates").rglob("*.parquet"))
    again = run(flow_job.records, flow_job.out, spark=spark)
    assert (again["curated_records"], again["new_records"]) == (18, 0)
    assert again["tables"] == flow_job.second["tables"]
    assert sorted(p.stat().st_mtime_ns for p in (flow_job.out / "aggregates").rglob("*.parquet")) == before


def test_throughput_per_address_and_pair(spark: Any, flow_job: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    # orders: 100 + 50 in the first minute (entered at A once; B and C do not count it again)
    expected = spark.createDataFrame(
        [("orders", WINDOW0, 150, 15_000, 2.5, 250.0), ("events", WINDOW1, 30, 600, 0.5, 10.0)],
        "address string, window_start timestamp, deliveries long, bytes long, deliveries_per_s double, bytes_per_s double",
    )
    assertDataFrameEqual(_table(spark, flow_job.out, "address_throughput"), expected)
    pairs = _table(spark, flow_job.out, "pair_throughput").select("router", "peer", "deliveries", "bytes")
    expected_pairs = spark.createDataFrame([("A", "B", 150, 18_000), ("B", "C", 150, 18_000)], pairs.schema)
    assertDataFrameEqual(pairs, expected_pairs)


def test_the_routers_own_traffic_is_not_the_users(spark: Any) -> None:
    """Per address and per pair, only the users' traffic: management and the flow records'
    own address are left out of the addresses, the control link and the records' messages out
    of the pairs (reported beside)."""
    import json

    from pyspark.testing import assertDataFrameEqual

    from pipeline.aggregates import address_throughput, link_utilisation, pair_throughput
    from pipeline.schema import RECORD
    from pipeline.synthetic import Emitter

    a = Emitter("A")
    records = [
        a.link(T0, "1", role="inter-router", peer="B", direction="out", address=None, name="A>B/control"),
        a.link(T0, "2", role="inter-router", peer="B", direction="out", address=None, name="A>B/data"),
        # 40 HELLOs and the like on the control link; 107 on the data link, 7 of them the
        # records' own batches (21,000 of its 33,000 bytes)
        a.link_interval(T0 + 10, "1", role="inter-router", peer="B", direction="out", address=None,
                        deliveries=40, bytes=4_000),
        a.link_interval(T0 + 10, "2", role="inter-router", peer="B", direction="out", address=None,
                        deliveries=107, bytes=33_000, records_deliveries=7, records_bytes=21_000),
        a.link_interval(T0 + 20, "2", role="inter-router", peer="B", direction="out", address=None,
                        deliveries=3, bytes=3_000, records_deliveries=3, records_bytes=3_000),
        # into A: the users' orders, management requests (local and through the mesh), records
        a.link_interval(T0 + 10, "3", role="normal", peer="p", direction="in", address="orders",
                        deliveries=100, bytes=12_000),
        a.link_interval(T0 + 10, "4", role="normal", peer="m", direction="in", address="$management",
                        deliveries=5, bytes=500),
        a.link_interval(T0 + 10, "5", role="normal", peer="m", direction="in", address="_topo/0/B/$management",
                        deliveries=2, bytes=200),
        a.link_interval(T0 + 10, "6", role="normal", peer="x", direction="in", address="_flow/records",
                        deliveries=9, bytes=900),
        a.link_interval(T0 + 10, "7", role="normal", peer="q", direction="in", address="$managementx",
                        deliveries=1, bytes=10),  # not management: a user's name
    ]
    lines = spark.sparkContext.parallelize([json.dumps(r) for r in records])
    frame = spark.read.schema(RECORD).json(lines)
    expected = spark.createDataFrame(
        [("orders", WINDOW0, 100, 12_000), ("$managementx", WINDOW0, 1, 10)],
        "address string, window_start timestamp, deliveries long, bytes long",
    )
    assertDataFrameEqual(address_throughput(frame, 60.0).select("address", "window_start", "deliveries", "bytes"), expected)
    expected_pairs = spark.createDataFrame(
        [("A", "B", WINDOW0, 100, 12_000, 10, 24_000)],
        "router string, peer string, window_start timestamp, deliveries long, bytes long, records_deliveries long, "
        "records_bytes long",
    )
    got = pair_throughput(frame, 60.0).select(*expected_pairs.columns)
    assertDataFrameEqual(got, expected_pairs)
    use = {r["link_id"]: r for r in link_utilisation(frame, 60.0).where("router = 'A'").collect()}
    assert (use["2"]["deliveries"], use["2"]["records_deliveries"], use["2"]["records_bytes"]) == (110, 10, 24_000)
    assert use["1"]["deliveries"] == 40 and use["1"]["records_deliveries"] == 0  # the link's whole use


def test_a_curated_store_written_before_the_records_columns_still_aggregates(spark: Any, tmp_path: Path) -> None:
    import json

    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    from pipeline.job import write_aggregates
    from pipeline.schema import RECORD
    from pipeline.synthetic import Emitter

    record = Emitter("A").link_interval(T0 + 10, "2", role="inter-router", peer="B", direction="out", address=None,
                                        deliveries=5, bytes=50)  # fmt: skip
    old = StructType([f for f in RECORD.fields if not f.name.startswith("records_")])
    frame = spark.read.schema(old).json(spark.sparkContext.parallelize([json.dumps(record)]))
    frame.withColumn("date", F.to_date(F.timestamp_seconds("ts"))).write.partitionBy("date").parquet(str(tmp_path / "curated"))
    assert write_aggregates(spark, tmp_path)["pair_throughput"] == 1
    (pair,) = _table(spark, tmp_path, "pair_throughput").collect()
    assert (pair["deliveries"], pair["bytes"], pair["records_deliveries"], pair["records_bytes"]) == (5, 50, 0, 0)


def test_outcome_rates(spark: Any, flow_job: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    got = _table(spark, flow_job.out, "outcomes").select(
        "address", "deliveries", "accepted", "rejected", "released", "accepted_rate", "rejected_rate", "released_rate"
    )
    expected = spark.createDataFrame(
        [("orders", 150, 142, 5, 3, 142 / 150, 5 / 150, 3 / 150), ("events", 30, 30, 0, 0, 1.0, 0.0, 0.0)], got.schema
    )
    assertDataFrameEqual(got, expected, rtol=1e-9)


def test_latency_from_histograms_and_hops(spark: Any, flow_job: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    residence = _table(spark, flow_job.out, "latency").where("kind = 'address' and metric = 'residence'")
    expected = spark.createDataFrame(
        [("address", "orders", "residence", 4, 4 + 4 * 2 / 3, 115.2, 125.44)], residence.schema
    )
    assertDataFrameEqual(residence, expected, rtol=1e-9)
    hops = _table(spark, flow_job.out, "hop_latency").select("router", "samples", "residence_p50_us", "settle_p50_us")
    expected_hops = spark.createDataFrame(
        [("A", 2, 10.0, 6500.0), ("B", 2, 20.0, 5000.0), ("C", 2, 30.0, 485.0)], hops.schema
    )
    assertDataFrameEqual(hops, expected_hops)


def test_rtt_and_the_slow_link_costs_more(spark: Any, flow_job: Any) -> None:
    from pyspark.testing import assertDataFrameEqual

    # A-B: 7000 - 5500 - 20 and 6000 - 4500 - 20 = 1480; B-C: 5500 - 500 - 30 = 4970 and
    # 4500 - 470 - 30 = 4000, median 4485: 3.03 times the fastest -> cost 3 (the mesh has 1)
    rtt = _table(spark, flow_job.out, "link_rtt")
    assertDataFrameEqual(
        rtt, spark.createDataFrame([("A", "B", 2, 1480.0, 1480.0), ("B", "C", 2, 4485.0, 4485.0)], rtt.schema)
    )
    costs = _table(spark, flow_job.out, "suggested_costs").select(
        "router_a", "router_b", "current_cost", "computed_cost", "suggested_cost", "changed"
    )
    assertDataFrameEqual(
        costs, spark.createDataFrame([("A", "B", 1, 1, 1, False), ("B", "C", 1, 3, 3, True)], costs.schema)
    )


def test_talkers_and_utilisation(spark: Any, flow_job: Any) -> None:
    top = _table(spark, flow_job.out, "top_addresses").orderBy("rank").collect()
    assert [(r.rank, r.address, r.deliveries) for r in top] == [(1, "orders", 150), (2, "events", 30)]
    links = _table(spark, flow_job.out, "top_links").orderBy("rank").collect()
    assert links[0].deliveries == 150 and len(links) == 6
    use = _table(spark, flow_job.out, "link_utilisation").where("router = 'A' and link_id = 'ir-B'").collect()
    assert [(u.deliveries, u.bytes_per_s, u.credit_starved_share) for u in use] == [(150, 300.0, 0.25)]


def test_the_command_says_in_one_line_when_there_are_no_records(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[analytics]')")
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "--records", str(tmp_path / "none"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [f"error: no records: {tmp_path / 'none'} is not a directory"]
    (tmp_path / "empty").mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "--records", str(tmp_path / "empty"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stderr.strip() == f"error: no records: no *.json.gz files under {tmp_path / 'empty'}"


def test_the_command_says_in_one_line_when_there_is_no_java(tmp_path: Path) -> None:
    pytest.importorskip("pyspark", reason="pyspark is not installed (pip install '.[analytics]')")
    from pipeline.synthetic import Emitter, write_records

    write_records(tmp_path / "rec", [Emitter("A").router_record(T0, {})])
    env = {"PATH": "/nonexistent", "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "--records", str(tmp_path / "rec"), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().startswith("error: no Java found")
    assert len(done.stderr.strip().splitlines()) == 1


def _reference_percentile(hist: list[int], q: float) -> float | None:
    """The estimate docs/analytics.md defines, written plainly."""
    total = sum(hist)
    if total == 0:
        return None
    rank, below = q * total, 0
    for bucket, n in enumerate(hist):
        if n and below + n >= rank:
            lo, hi = (0.0, 1.0) if bucket == 0 else (2.0 ** (bucket - 1), 2.0**bucket)
            return lo + (hi - lo) * (rank - below) / n
        below += n
    raise AssertionError("unreachable")


def test_spark_percentiles_match_the_definition_on_any_histograms(spark: Any) -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from pipeline.latency import histogram_percentiles

    counts = st.lists(st.integers(0, 1000) | st.just(0), min_size=32, max_size=32)

    @settings(max_examples=4, deadline=None)
    @given(st.lists(counts, min_size=1, max_size=25))
    def check(histograms: list[list[int]]) -> None:
        frame = spark.createDataFrame([(i, h) for i, h in enumerate(histograms)], "key int, h array<long>")
        got = {r.key: r for r in histogram_percentiles(frame, ["key"], "h").collect()}
        for i, h in enumerate(histograms):
            if sum(h) == 0:
                assert i not in got
                continue
            row = got[i]
            assert row.samples == sum(h)
            for q, name in ((0.5, "p50_us"), (0.95, "p95_us"), (0.99, "p99_us")):
                assert getattr(row, name) == pytest.approx(_reference_percentile(h, q), rel=1e-9)
            assert row.p50_us <= row.p95_us <= row.p99_us

    check()
