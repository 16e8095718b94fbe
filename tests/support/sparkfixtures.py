"""The one local SparkSession of the test run, and the job run once on the known record set.

`spark` skips (saying why) when pyspark or Java is missing. `flow_job` reads a growing records
directory twice (tests/support/flowdata.py: the first files, then the later ones with a record
written again), as the collector and a scheduled job would: the first time only the ingest (the
curated store is what the incremental test checks), the second the whole job; its aggregates are
what the pipeline's and the analytics CLI's tests read.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pipeline.synthetic import write_records

from .flowdata import first_files, second_files


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    if importlib.util.find_spec("pyspark") is None:
        pytest.skip("pyspark is not installed (pip install '.[analytics]')")
    if shutil.which("java") is None:
        pytest.skip("no Java for Spark (apt-get install -y openjdk-17-jre-headless)")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@dataclass
class JobRuns:
    records: Path
    out: Path
    first_curated: int  # records in the curated store after the first files
    second: dict[str, Any]  # the whole job's summary after the later ones


@pytest.fixture(scope="session")
def flow_job(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> JobRuns:
    from pipeline.job import ingest, run
    from pipeline.schema import CURATED

    base = tmp_path_factory.mktemp("flow")
    records, out = base / "records", base / "out"
    first = first_files()
    write_records(records, first, part=0)
    ingest(spark, records, out)
    first_curated = spark.read.parquet(str(out / CURATED)).count()
    write_records(records, second_files(first), part=1)
    return JobRuns(records, out, first_curated, run(records, out, spark=spark))
