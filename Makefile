# The README's commands. `make up`: the embedded stack (SQLite + filesystem broker) on
# loopback; `make test` (what CI runs): the import-layering contracts (lint-imports), ruff's format
# and lint checks, then the whole suite, with PostgreSQL and Redis started by scripts/services.sh;
# `make test-fast`: every test not marked slow or stack, on SQLite and the filesystem broker, no
# servers started (tests that need PostgreSQL or Redis are marked stack by tests/conftest.py).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
STAMP := $(VENV)/.ntklab-installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install up test test-fast bench demo clean

install: $(STAMP)

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[all,dev]'
	touch $@

up: $(STAMP)
	$(VENV)/bin/ntklab up --host $(HOST) --port $(PORT)

test: $(STAMP)
	@set -euo pipefail; env_lines="$$(scripts/services.sh)"; export $$env_lines; \
	$(VENV)/bin/lint-imports; \
	$(VENV)/bin/ruff format --check .; \
	$(VENV)/bin/ruff check .; \
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(VENV)/bin/pytest -q -m "not slow and not stack" $(PYTEST_ARGS)

bench: $(STAMP)
	@set -euo pipefail; env_lines="$$(scripts/services.sh)"; export $$env_lines; \
	$(PY) -m bench.bench_kernels $(BENCH_ARGS); \
	$(PY) -m bench.bench_graph_kernels $(BENCH_ARGS); \
	$(PY) -m bench.bench_zoo $(BENCH_ARGS); \
	$(PY) -m bench.bench_onnx_conversion; \
	$(PY) -m bench.bench_hessian_spectrum $(BENCH_ARGS); \
	$(PY) -m bench.bench_hessian; \
	$(PY) -m bench.bench_infinite_width $(BENCH_ARGS); \
	$(PY) -m bench.bench_time_estimate $(BENCH_ARGS); \
	$(PY) -m bench.bench_service

demo: $(STAMP)
	$(PY) -m ntklab.demo $(DEMO_ARGS)

clean:
	rm -rf var/ntklab.db var/ntklab.db-wal var/ntklab.db-shm var/broker .pytest_cache
