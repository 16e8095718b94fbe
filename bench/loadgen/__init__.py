"""loadgen: the benchmark suite's C load generator (loadgen.c), its build (build.py) and direct
client-to-client runs with no router in between (smoke.py)."""
