# One entry point for humans and CI. `make demo` runs the main job, `make test` the whole suite,
# `make run` a router on the embedded default configuration (127.0.0.1:5672, Ctrl-C stops it).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo run test check typecheck unit bench clean image

$(STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/bootstrap.sh
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m router.demo

run: $(STAMP)
	$(VENV)/bin/router run

typecheck: $(STAMP)
	$(PY) -m mypy router topology

check: typecheck

unit: $(STAMP)
	$(PY) -m pytest

# The production build compiles the hot path with mypyc (ROUTER_COMPILE=1 pip install .);
# build/compiled/ is that build for tests and benchmarks, run from its own directory.
COMPILED_TESTS := tests/test_core_routing.py tests/test_core_settlement.py \
	tests/test_core_streaming.py tests/test_core_local.py tests/test_engine_pair.py \
	tests/test_engine_violations.py tests/test_engine_fuzz.py tests/test_server.py \
	tests/test_router_proton.py tests/test_router_proton_c.py \
	tests/test_peek.py tests/test_mesh_forwarding.py tests/test_mesh_multicast.py \
	tests/test_mesh_failure.py tests/test_mesh_edge.py tests/test_mesh_process.py \
	tests/test_fastpath.py tests/test_core_dispositions.py tests/test_core_deliverymap.py

compiled: $(STAMP)
	$(PY) scripts/build_compiled.py

test-compiled: compiled
	cd build/compiled && $(abspath $(PY)) -m pytest $(COMPILED_TESTS)

test: check unit test-compiled

# Benchmarks run on the distribution's Python when there is one (/usr/bin/python3): Debian builds
# it with PGO and LTO, ~20 % less CPU per message than a plain source build, and it is what a
# router image runs. Their own venv and compiled build; BENCH_PYTHON=... picks another
# interpreter. Every result names the interpreter it came from.
BENCH_PYTHON ?= $(firstword $(wildcard /usr/bin/python3) $(PYTHON))
BENCH_VENV   ?= .venv-bench
BENCH_BUILD  := build/compiled-bench

$(BENCH_VENV)/.installed: pyproject.toml scripts/bootstrap.sh
	PYTHON=$(BENCH_PYTHON) VENV=$(BENCH_VENV) scripts/bootstrap.sh
	touch $@

bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python scripts/build_compiled.py --out $(BENCH_BUILD)
	cd $(BENCH_BUILD) && BENCH_RESULTS_DIR=$(abspath bench/results) $(abspath $(BENCH_VENV))/bin/python -m bench

bench-interpreted: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(BENCH_VENV) build *.egg-info .mypy_cache .hypothesis

# The router image (deploy/Containerfile) on base images made from Debian packages with
# debootstrap, built with podman (or docker): no image registry needed. Needs root.
image: $(STAMP)
	PYTHON=$(abspath $(PY)) deploy/image/build.sh
