"""`router-pipeline` (and `python -m pipeline`, and spark-submit's script pipeline/submit.py):
run the job over a records directory. Errors are one line on stderr, exit 1.

    router-pipeline --records DIR --out DIR [--master URL] [--window-s S] [--max-cost N]
                    [--cost-threshold F] [--rtt-floor-us US]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .costs import CostRule
from .job import DEFAULT_WINDOW_S, JobError, Options


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="router-pipeline", description="Flow records -> curated Parquet and aggregates.")
    p.add_argument("--records", type=Path, required=True, help="the collector's directory (date=/hour=/router=/*.json.gz)")
    p.add_argument("--out", type=Path, required=True, help="where curated/, aggregates/ and _checkpoint/ go")
    p.add_argument("--master", default=None, help="Spark master URL (default: the one spark-submit set, else local[*])")
    p.add_argument("--window-s", type=float, default=DEFAULT_WINDOW_S, help="throughput window, seconds")
    p.add_argument("--max-cost", type=int, default=CostRule.max_cost, help="highest suggested link cost")
    p.add_argument("--cost-threshold", type=float, default=CostRule.threshold,
                   help="hysteresis: change a cost only when the new one differs by more than this share of it")  # fmt: skip
    p.add_argument("--rtt-floor-us", type=float, default=CostRule.rtt_floor_us, help="RTTs below this count as this")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.window_s <= 0 or args.max_cost < 1 or args.cost_threshold < 0:
        print("error: --window-s must be > 0, --max-cost >= 1, --cost-threshold >= 0", file=sys.stderr)
        return 1
    rule = CostRule(max_cost=args.max_cost, threshold=args.cost_threshold, rtt_floor_us=args.rtt_floor_us)
    from .job import run  # pyspark: only once the arguments are known good

    try:
        summary = run(args.records, args.out, master=args.master, options=Options(window_s=args.window_s, cost_rule=rule))
    except JobError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"curated records: {summary['curated_records']} ({summary['new_records']} new)")
    for name, rows in summary["tables"].items():
        print(f"{name}: {rows} rows -> {args.out / 'aggregates' / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
