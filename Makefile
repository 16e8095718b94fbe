# One entry point for humans and CI. `make demo` runs the main job, `make test` the whole suite.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test check typecheck unit bench clean

$(STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) VENV=$(VENV) scripts/bootstrap.sh
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m router.demo

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
