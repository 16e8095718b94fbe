# One entry point for humans and CI. `make demo` runs the main job, `make test` the whole suite,
# `make run` a router on the embedded default configuration (127.0.0.1:5672, Ctrl-C stops it).
# .venv is the development install (editable, interpreted: edits need no rebuild); `make run`,
# `make demo` and the process-level tests use the build a user installs: the wheel (hot path
# compiled with mypyc, see setup.py) installed in .venv-wheel.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo run test check typecheck unit bench clean wheel demo-dev run-dev image java

$(STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/bootstrap.sh
	touch $(STAMP)

# The wheel (dist/) and a venv with it installed; rebuilt when a source file changes.
# ROUTER_PURE_PYTHON=1 make wheel builds it interpreted. Console scripts, not `python -m`: the
# latter would put the checkout's router/ first on the path.
WHEEL_VENV    ?= .venv-wheel
WHEEL_STAMP   := $(WHEEL_VENV)/.installed
WHEEL_SOURCES := $(shell find router topology pipeline -name '*.py') setup.py pyproject.toml mypyc-modules.txt MANIFEST.in

# setuptools packages what build/lib.* holds: a module compiled by an earlier build and no longer
# listed in mypyc-modules.txt would otherwise ship (and shadow its .py) in the next wheel.
STALE_BUILD := build/lib.* build/bdist.*

$(WHEEL_STAMP): $(STAMP) $(WHEEL_SOURCES)
	rm -rf dist $(STALE_BUILD) && $(PY) -m pip wheel -q --no-deps -w dist .
	[ -x $(WHEEL_VENV)/bin/python ] || $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q --force-reinstall --no-deps dist/*.whl
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls dist/*.whl)[test]"
	cd / && $(abspath $(WHEEL_VENV))/bin/python -c '$(BUILD_LINE)'
	touch $@

wheel: $(WHEEL_STAMP)

BUILD_LINE := from router.build_info import build_info; print("router: hot path", build_info().describe())

demo: $(WHEEL_STAMP)  ## three routers as processes, traffic, a router killed, traffic moves
	@cd / && $(abspath $(WHEEL_VENV))/bin/python -c '$(BUILD_LINE)'
	$(WHEEL_VENV)/bin/amqp-demo

run: $(WHEEL_STAMP)
	$(WHEEL_VENV)/bin/router run

demo-dev: $(STAMP)
	$(PY) -m router.demo

run-dev: $(STAMP)
	$(VENV)/bin/router run

typecheck: $(STAMP)
	$(PY) -m mypy router topology

check: typecheck

# Java for PySpark (the flow-record pipeline's tests): Debian's openjdk-17-jre-headless when no java
# is on the PATH and we may install it; otherwise those tests skip and say why.
java:
	@command -v java >/dev/null 2>&1 || { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	  else echo "no java: the pipeline's Spark tests will skip (apt-get install openjdk-17-jre-headless)" >&2; fi; }

unit: $(STAMP) java
	$(PY) -m pytest

# The hot path and process-level tests again on the installed wheel, run from a copy of tests/
# and bench/ (build/wheel-tests) so that the installed router, not the checkout's, is imported.
# ROUTER_WHEEL tells tests/test_packaging.py which wheel to inspect and that it must be compiled.
COMPILED_TESTS := tests/test_core_routing.py tests/test_core_settlement.py \
	tests/test_core_streaming.py tests/test_core_local.py $(wildcard tests/test_engine_pair_*.py) \
	tests/test_engine_violations.py tests/test_engine_fuzz.py tests/test_server.py \
	$(wildcard tests/test_router_proton_*.py) \
	tests/test_peek.py tests/test_mesh_forwarding.py tests/test_mesh_multicast.py \
	tests/test_mesh_failure.py tests/test_mesh_edge.py tests/test_mesh_process.py \
	tests/test_fastpath.py tests/test_core_dispositions.py tests/test_core_deliverymap.py \
	tests/test_packaging.py tests/test_tls_proton.py tests/test_interop_rhea.py tests/test_interop_azure_amqp.py tests/test_interop_amqp10.py tests/test_interop_uamqp.py \
	tests/test_core_linkroute.py tests/test_mesh_linkroute.py tests/test_mesh_edge_linkroute.py tests/test_mesh_linkroute_window.py tests/test_mesh_linkroute_sessions.py tests/test_fallback.py tests/test_engine_cut_frames.py \
	tests/test_handshake.py tests/test_core_fifo.py tests/test_core_multicast.py tests/test_net_poller.py \
	tests/test_engine_window_shut.py tests/test_mesh_stalled_consumer.py tests/test_mesh_band_stall_process.py \
	tests/test_link_routes_stall_process.py tests/test_link_routes_edge.py \
	tests/test_mesh_streaming_links.py tests/test_engine_held_frames.py tests/test_core_bandwindow.py \
	tests/test_net_driver.py tests/test_mesh_priority_writer.py tests/test_policy_proton.py tests/test_policy_anchor_settings.py tests/test_fallback_proton.py \
	tests/test_fuzz_mesh_peer.py tests/test_mesh_linkroute_sessions.py tests/test_core_stolen_links.py tests/test_core_max_message_size.py tests/test_mesh_max_message_size.py \
	tests/test_core_ttl.py tests/test_mesh_ttl.py tests/test_core_reads.py tests/test_metrics_scrape.py

# build/compiled: the same modules compiled in place in a copy of router/ (scripts/build_compiled.py),
# for profiling and quick experiments; nothing in `make test` or `make bench` uses it.
compiled: $(STAMP)
	$(PY) scripts/build_compiled.py

test-compiled: $(WHEEL_STAMP)
	rm -rf build/wheel-tests && mkdir -p build/wheel-tests
	tar -c --exclude=__pycache__ --exclude=results tests bench pyproject.toml mypyc-modules.txt | tar -x -C build/wheel-tests
	cd build/wheel-tests && ROUTER_WHEEL=$$(ls $(abspath dist)/*.whl) $(abspath $(WHEEL_VENV))/bin/python -m pytest $(COMPILED_TESTS)

test: check unit test-compiled

# Benchmarks run on the distribution's Python when there is one (/usr/bin/python3): Debian builds
# it with PGO and LTO, ~20 % less CPU per message than a plain source build, and it is what a
# router image runs. Their own venv, with the wheel a user installs (built by that interpreter)
# in place of the development install; BENCH_PYTHON=... picks another interpreter. Every result
# names the interpreter and the build (compiled or interpreted) it came from.
BENCH_PYTHON ?= $(firstword $(wildcard /usr/bin/python3) $(PYTHON))
BENCH_VENV   ?= .venv-bench
BENCH_BUILD  := build/bench-run

$(BENCH_VENV)/.installed: pyproject.toml scripts/bootstrap.sh
	PYTHON=$(BENCH_PYTHON) VENV=$(BENCH_VENV) scripts/bootstrap.sh
	touch $@

$(BENCH_VENV)/.wheel: $(BENCH_VENV)/.installed $(WHEEL_SOURCES)
	rm -rf build/bench-dist $(STALE_BUILD) && $(BENCH_VENV)/bin/python -m pip wheel -q --no-deps -w build/bench-dist .
	$(BENCH_VENV)/bin/python -m pip install -q --force-reinstall --no-deps build/bench-dist/*.whl
	touch $@

bench: $(BENCH_VENV)/.wheel
	rm -rf $(BENCH_BUILD) && mkdir -p $(BENCH_BUILD)
	tar -c --exclude=__pycache__ --exclude=results tests bench pyproject.toml | tar -x -C $(BENCH_BUILD)
	cd $(BENCH_BUILD) && BENCH_RESULTS_DIR=$(abspath bench/results) $(abspath $(BENCH_VENV))/bin/python -m bench

bench-interpreted: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) $(WHEEL_VENV) $(BENCH_VENV) build dist *.egg-info .mypy_cache .hypothesis

# The router image (deploy/Containerfile) on base images made from Debian packages with
# debootstrap, built with podman (or docker): no image registry needed. Needs root.
image: $(STAMP)
	PYTHON=$(abspath $(PY)) deploy/image/build.sh
