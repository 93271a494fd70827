# Quick start: `make demo` (the whole loop in the local sandbox) and `make test`.
# Both create .venv with Python 3.11+ and install the pinned dependencies (constraints.txt).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt requirements-dev.txt requirements-workload.txt constraints.txt pyproject.toml | sha256sum | cut -c1-12)

.PHONY: install demo test test-fast bench ui lint clean

$(STAMP):
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=24"
	$(BIN)/python -m pip install -q -r requirements-dev.txt -c constraints.txt
	$(BIN)/python -m pip install -q --no-deps -e .
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

## Run the sim_to_real DAG end to end against the local AWS sandbox (no AWS account needed).
demo: install
	$(BIN)/python -m sim2real.demo $(DEMO_ARGS)

## The whole test suite (unit, operators, workloads, edge, sandbox, DAG integrity, end-to-end).
test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## Everything but the end-to-end DAG runs.
test-fast: install
	$(BIN)/python -m pytest -m "not e2e" $(PYTEST_ARGS)

## Benchmarks: printed as a table, written to bench-results.json.
bench: install
	$(BIN)/python -m sim2real.bench

clean:
	rm -rf $(VENV) .sandbox .pytest_cache
