# One entry point for humans and CI. `make demo` runs the main job, `make test` the whole suite,
# `make run` a router on the embedded default configuration (127.0.0.1:5672, Ctrl-C stops it).
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo run test check typecheck unit bench clean

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

test: check unit

bench: $(STAMP)
	$(PY) -m bench

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .hypothesis
