"""The flow-record pipeline: a PySpark job from the collector's gzip JSON lines to curated
Parquet and aggregates (docs/analytics.md). Nothing under router/ or topology/ imports it; the
`topology` CLI reads what it writes with pyarrow alone.
"""
