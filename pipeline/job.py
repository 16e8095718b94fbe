"""The job: new record files -> curated Parquet (each record once) -> aggregate tables.

Owns: the Spark session (embedded `local[*]` unless a master is given or spark-submit set one),
reading the collector's files incrementally, deduplicating and appending to the curated store,
and rewriting the aggregates from it. Must not touch: what an aggregate means (aggregates.py,
latency.py, costs.py), the command line (cli.py).

Incremental: the files are read by a structured-streaming file source with
`trigger(availableNow=True)`: every file not yet read is read once, then the query stops; the
source's checkpoint (<out>/_checkpoint) remembers the files read, so a later run reads only the
new ones. Each micro-batch is deduplicated on (router, boot, seq), and its records whose key is
already in the curated store (only the dates the batch touches are read: a key's `ts`, hence
its date, never changes) are dropped before the append: a record the collector wrote twice, in
one file or two, and a batch run again after a crash between the append and the checkpoint's
commit are all counted once. The aggregates are then computed from the whole curated store
(when there was something new, or the options changed; otherwise they stand).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DateType, StructField, StructType

from . import aggregates, latency
from .costs import CostRule, current_costs, suggest_costs
from .schema import AGGREGATES, CHECKPOINT, CURATED, DEDUPE_KEY, RECORD, TABLES

DEFAULT_WINDOW_S = 60.0
CURATED_SCHEMA = StructType([*RECORD.fields, StructField("date", DateType(), True)])  # (partitioned by date)


class JobError(Exception):
    """A reason the job cannot run (no Java, no records): one line for the operator."""


@dataclass
class Options:
    window_s: float = DEFAULT_WINDOW_S
    cost_rule: CostRule = field(default_factory=CostRule)
    max_files_per_batch: int | None = None  # None: all new files in one micro-batch


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return
    if shutil.which("java") is None:
        raise JobError("no Java found (set JAVA_HOME or install one: apt-get install -y openjdk-17-jre-headless)")


def record_files(records: Path) -> list[Path]:
    return sorted(records.rglob("*.json.gz")) if records.is_dir() else []


def session(master: str | None = None, *, app_name: str = "flow-records", conf: dict[str, str] | None = None) -> SparkSession:
    """The job's Spark session: `master` when given; else the one spark-submit set; else local[*]."""
    check_java()
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        builder = builder.master("local[*]")  # not under spark-submit (which sets the master): embedded
        master = "local[*]"
    if master and master.startswith("local"):
        # Spark's 200 shuffle partitions are sized for clusters: on one machine every shuffle
        # would run 200 tiny tasks (a few per core are enough; a conf given below still wins).
        builder = builder.config("spark.sql.shuffle.partitions", str(4 * (os.cpu_count() or 1)))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # e.g. a Java older than 17: the gateway exits at once
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise JobError(f"Spark did not start (PySpark 4 needs Java 17 or later: check `java -version`): {first}") from None


def _curate(spark: SparkSession, batch: DataFrame, curated: Path) -> int:
    """Append the batch's records not in the curated store yet, each once; how many.

    Duplicates are rare (a file or a batch written twice), so a first pass reads the keys alone
    (the JSON reader then skips every other field, and only three columns are shuffled,
    combined before the shuffle): how many distinct records, whether a key comes twice, which
    dates. Whole rows are shuffled to drop duplicates only when there are some, and joined with
    the curated store's keys only when some of those are in the batch; in the usual case the
    batch is read once more and written, never cached (a batch of millions of records would not
    fit in memory)."""
    key = list(DEDUPE_KEY)
    records = batch.where(F.col("router").isNotNull() & F.col("boot").isNotNull() & F.col("seq").isNotNull()).withColumn(
        "date", F.to_date(F.timestamp_seconds(F.col("ts")))
    )
    per_key = records.groupBy(*key).agg(F.count(F.lit(1)).alias("n"), F.collect_set("date").alias("dates"))
    summary = per_key.agg(
        F.count(F.lit(1)).alias("keys"), F.max("n").alias("most"),
        F.array_distinct(F.flatten(F.collect_set("dates"))).alias("dates"),
    ).first()  # fmt: skip
    if summary is None or not summary["keys"]:
        return 0
    new: int = summary["keys"]
    fresh, cached = records, []
    try:
        if summary["most"] > 1:
            fresh = records.dropDuplicates(key).persist()
            cached.append(fresh)
        dates = list(summary["dates"])
        if dates and ((curated / "_SUCCESS").exists() or any(curated.glob("date=*"))):
            seen = spark.read.parquet(str(curated)).where(F.col("date").isin(dates)).select(*key)
            if records.select(*key).join(seen, key, "left_semi").take(1):
                fresh = fresh.join(seen, key, "left_anti").persist()
                cached.append(fresh)
                new = fresh.count()
        if new:
            fresh.write.mode("append").partitionBy("date").parquet(str(curated))
        return new
    finally:
        for frame in cached:
            frame.unpersist()


def ingest(spark: SparkSession, records: Path, out: Path, options: Options = Options()) -> int:
    """Append the records of every file not read before to the curated store; how many were new."""
    curated = out / CURATED
    reader = spark.readStream.schema(RECORD).option("recursiveFileLookup", "true").option("pathGlobFilter", "*.json.gz")
    if options.max_files_per_batch:
        reader = reader.option("maxFilesPerTrigger", options.max_files_per_batch)
    stream = reader.json(str(records))

    appended = [0]

    def each(batch: DataFrame, batch_id: int) -> None:
        appended[0] += _curate(spark, batch, curated)

    query = (
        stream.writeStream.foreachBatch(each)
        .option("checkpointLocation", str(out / CHECKPOINT))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:  # pragma: no cover - awaitTermination raises it
        raise JobError(str(query.exception()))
    return appended[0]


def tables(records: DataFrame, options: Options = Options()) -> dict[str, DataFrame]:
    """Every aggregate table (schema.TABLES) of a set of curated records."""
    w = options.window_s
    rtt = latency.link_rtt(records)
    return {
        "address_throughput": aggregates.address_throughput(records, w),
        "pair_throughput": aggregates.pair_throughput(records, w),
        "outcomes": aggregates.outcomes(records),
        "latency": latency.latency_table(records),
        "hop_latency": latency.hop_latency(records),
        "top_addresses": aggregates.top_addresses(records),
        "top_links": aggregates.top_links(records),
        "link_utilisation": aggregates.link_utilisation(records, w),
        "link_rtt": rtt,
        "suggested_costs": suggest_costs(rtt, current_costs(records), options.cost_rule),
    }


def read_curated(spark: SparkSession, out: Path) -> DataFrame:
    """The curated store, in the record schema: a column that files written before it existed
    lack (e.g. records_deliveries) reads as null there."""
    return spark.read.schema(CURATED_SCHEMA).parquet(str(out / CURATED))


def write_aggregates(spark: SparkSession, out: Path, options: Options = Options()) -> dict[str, int]:
    """Rewrite every aggregate table from the curated store; rows per table."""
    curated = read_curated(spark, out).persist()
    try:
        counts = {}
        for name, frame in tables(curated, options).items():
            frame.coalesce(1).write.mode("overwrite").parquet(str(out / AGGREGATES / name))
            counts[name] = _rows(out / AGGREGATES / name)
        return counts
    finally:
        curated.unpersist()


OPTIONS_FILE = "_options"  # the options the aggregates were computed with


def _options_changed(out: Path, options: Options) -> bool:
    saved = out / AGGREGATES / OPTIONS_FILE
    return not saved.exists() or saved.read_text() != repr(options)


def _rows(table: Path) -> int:
    import pyarrow.parquet as pq  # the footers only: no Spark job to count what was just written

    return sum(pq.read_metadata(part).num_rows for part in table.glob("*.parquet"))


def run(records: Path, out: Path, *, master: str | None = None, options: Options = Options(),
        spark: SparkSession | None = None, conf: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    """The whole job: ingest the new files, then rewrite the aggregates. Returns a summary."""
    if not records.is_dir():
        raise JobError(f"no records: {records} is not a directory")
    if not record_files(records):
        raise JobError(f"no records: no *.json.gz files under {records}")
    own = spark is None
    spark = spark or session(master, conf=conf)
    try:
        new = ingest(spark, records, out, options)
        if not (out / CURATED).exists():
            raise JobError(f"no records: the files under {records} held no record with router, boot and seq")
        written = all((out / AGGREGATES / name).is_dir() for name in TABLES)
        if new or not written or _options_changed(out, options):
            counts = write_aggregates(spark, out, options)
            (out / AGGREGATES / OPTIONS_FILE).write_text(repr(options))
        else:  # nothing new: the aggregates stand
            counts = {name: _rows(out / AGGREGATES / name) for name in TABLES}
        total = spark.read.parquet(str(out / CURATED)).count()
        return {"curated_records": total, "new_records": new, "tables": counts}
    finally:
        if own:
            spark.stop()
