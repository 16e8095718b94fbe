"""The flow-record pipeline on synthetic records: wall time, peak memory and records/s.

    python bench/pipeline.py [--records 10000000] [--per-file 250000] [--master local[*]] [--keep DIR] [--copies K]

Writes N records of a busy 3-router mesh (pipeline/synthetic.py: mostly interval counters, 1 in
10 hop records) in the collector's layout, then runs the whole job once (ingest, dedupe, curated
Parquet, every aggregate) in a fresh output directory, then once more with nothing new (the
incremental run's fixed cost). Reports the job's wall time, records/s, the JVM's CPU time (and
records per CPU second: steadier than wall time on a shared machine), the peak resident memory
of the JVM (VmHWM) and of this Python process, and saves bench/results/<date>-pipeline.json.
Generating the files is timed apart and not counted. Needs pyspark and Java (the analytics extra).
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.synthetic import mesh_traffic, write_records  # noqa: E402


def copy_records(records: Path, copies: int) -> None:
    """Copies 1..copies-1 of every file under `records`, each under other boots and trace ids
    (so that every copy's records are distinct: (router, boot, seq) and the hops' trace ids)."""
    originals = sorted(records.rglob("part-*.json.gz"))
    for k in range(1, copies):
        for path in originals:
            data = gzip.decompress(path.read_bytes())
            data = data.replace(b'-boot","seq"', f'-boot{k}","seq"'.encode()).replace(b'"trace_id":"t', f'"trace_id":"c{k}t'.encode())
            path.with_name(f"copy{k}-{path.name}").write_bytes(gzip.compress(data, compresslevel=1))


def _cpu_s(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--per-file", type=int, default=250_000)
    p.add_argument("--master", default="local[*]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--keep", type=Path, default=None, help="generate into (and keep) this directory")
    p.add_argument("--copies", type=int, default=1,
                   help="generate records/copies records, then copies of their files under other boots and "
                        "trace ids (a mesh whose routers restarted): the same records at a fraction of the time")  # fmt: skip
    args = p.parse_args()

    base = args.keep or Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    records, out = base / "records", base / "out"
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    if not records.exists():
        stream = mesh_traffic(args.records // args.copies)
        part = 0
        while chunk := list(islice(stream, args.per_file)):
            write_records(records, chunk, part=part)
            part += 1
        copy_records(records, args.copies)
    generated_s = time.perf_counter() - started
    size = sum(f.stat().st_size for f in records.rglob("*.json.gz"))
    print(f"records: {args.records:,} in {len(list(records.rglob('*.json.gz')))} files, {size / 2**20:.0f} MiB gzip "
          f"(generated in {generated_s:.0f} s)")

    from pipeline.job import run, session

    spark = session(args.master, conf={"spark.driver.memory": args.driver_memory})
    spark.sparkContext.setLogLevel("ERROR")
    jvm_pid = int(spark.sparkContext._jvm.ProcessHandle.current().pid())  # type: ignore[union-attr]
    try:
        started, cpu_before = time.perf_counter(), _cpu_s(jvm_pid)
        summary = run(records, out, spark=spark)
        wall_s = time.perf_counter() - started
        jvm_cpu_s = _cpu_s(jvm_pid) - cpu_before
        started = time.perf_counter()
        run(records, out, spark=spark)
        again_s = time.perf_counter() - started
        jvm_peak_mib = _vm_hwm_kib(jvm_pid) / 1024
    finally:
        spark.stop()
    python_peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "suite": "pipeline",
        "records": args.records,
        "curated_records": summary["curated_records"],
        "wall_s": round(wall_s, 1),
        "records_per_s": round(args.records / wall_s),
        # CPU time moves less than wall time with other load on a shared machine
        "jvm_cpu_s": round(jvm_cpu_s, 1),
        "records_per_jvm_cpu_s": round(args.records / jvm_cpu_s) if jvm_cpu_s else None,
        "incremental_nothing_new_s": round(again_s, 1),
        "jvm_peak_rss_mib": round(jvm_peak_mib),
        "python_peak_rss_mib": round(python_peak_mib),
        "master": args.master,
        "driver_memory": args.driver_memory,
        "cores": os.cpu_count(),
        "load_average_1m": round(os.getloadavg()[0], 1),
    }
    for key, value in result.items():
        print(f"{key}: {value}")
    results = Path(os.environ.get("BENCH_RESULTS_DIR", Path(__file__).resolve().parent / "results"))
    results.mkdir(parents=True, exist_ok=True)
    target = results / f"{datetime.date.today().isoformat()}-pipeline.json"
    target.write_text(json.dumps(result, indent=2) + "\n")
    print(f"saved {target}")
    if args.keep is None:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
