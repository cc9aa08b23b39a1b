# The README's commands. `make up`: the embedded stack (SQLite + filesystem broker) on
# loopback; `make test` (what CI runs): the import-layering contracts (lint-imports), ruff's format
# and lint checks, then the whole suite, with PostgreSQL and Redis started by scripts/services.sh;
# `make test-fast`: every test not marked slow or stack, on SQLite and the filesystem broker, no
# servers started (tests that need PostgreSQL or Redis are marked stack by tests/conftest.py).
# Each runs its tests in two pytest invocations: everything but SERIAL_TESTS in pytest-xdist worker
# processes (--dist loadfile: a file's tests stay in one process, so its module fixtures start once;
# FAST_WORKERS for test-fast, TEST_WORKERS for test, 0 = no xdist), then SERIAL_TESTS in one process:
# the live stacks whose tests race processes against each other by the clock (docs/testing.md).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION := 2.13.0
STAMP := $(VENV)/.ntklab-installed
HOST ?= 127.0.0.1
FAST_WORKERS ?= 2
# torch's intra-op threads per test process in test-fast: two xdist workers with torch's default two threads each
# on two cores made every engine test ~3x slower (docs/testing.md); empty = torch's default
FAST_THREADS ?= 1
# the same for both parts of `make test`: in the serial part a live stack's worker inherits it (workers/threads.py),
# and torch's two threads there, beside the API and pytest on two cores, made tiny jobs ~10x slower (docs/testing.md)
TEST_WORKERS ?= 2
TEST_THREADS ?= 1
SERIAL_TESTS := tests/integration tests/faults
NOT_SERIAL := --dist loadfile $(addprefix --ignore=,$(SERIAL_TESTS))
PORT ?= 8000

.PHONY: install up test test-fast bench bench-peers .venv-bench .venv-jax demo clean

# The bench-only environments of `make bench-peers` (never the product's dependencies):
# .venv-bench: the pinned torch, ntklab's worker extra and the peers, the peers with --no-deps
# so that none of them pulls another torch (nngeometry declares torchvision, backpack unfoldNd
# and torchvision: unused by what the bench calls); .venv-jax: neural-tangents on jax 0.4.23
# with numpy < 2 (jaxlib 0.4.23 is built against numpy 1), --no-deps as it declares tensorflow
# (bench/peers/nt_worker.py does not import its TensorFlow part). A failed JAX install leaves
# no stamp and the neural-tangents rows print why they are skipped.
BENCH_VENV ?= .venv-bench
BENCH_PY := $(BENCH_VENV)/bin/python
BENCH_STAMP := $(BENCH_VENV)/.peers-installed
JAX_VENV ?= .venv-jax
JAX_STAMP := $(JAX_VENV)/.neural-tangents-installed
PEERS := nngeometry==0.4 curvlinops-for-pytorch==3.0.1 PyHessian==0.1 hessian-eigenthings==1.0.0a5 \
	backpack-for-pytorch==1.7.1 unfoldNd==0.2.3
PEER_DEPENDENCIES := tqdm einops einconv linear_operator opt-einsum

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
	$(VENV)/bin/mypy; \
	$(VENV)/bin/ruff format --check .; \
	$(VENV)/bin/ruff check .; \
	mkdir -p var; status=0; \
	$(if $(TEST_THREADS),export OMP_NUM_THREADS=$(TEST_THREADS);) \
	$(VENV)/bin/pytest -q -n $(TEST_WORKERS) $(NOT_SERIAL) --junitxml=var/test-report.xml $(PYTEST_ARGS) || status=$$?; \
	$(VENV)/bin/pytest -q --junitxml=var/test-report-serial.xml $(PYTEST_ARGS) $(SERIAL_TESTS) || status=$$?; \
	$(PY) scripts/test_times.py var/test-report.xml var/test-report-serial.xml || true; exit $$status

test-fast: $(STAMP)
	@set -uo pipefail; mkdir -p var; status=0; fast='not slow and not stack'; \
	$(if $(FAST_THREADS),export OMP_NUM_THREADS=$(FAST_THREADS);) \
	$(VENV)/bin/pytest -q -m "$$fast" -n $(FAST_WORKERS) $(NOT_SERIAL) --junitxml=var/test-fast-report.xml $(PYTEST_ARGS) || status=$$?; \
	$(VENV)/bin/pytest -q -m "$$fast" --junitxml=var/test-fast-report-serial.xml $(PYTEST_ARGS) $(SERIAL_TESTS) \
		|| status=$$?; \
	$(PY) scripts/test_times.py var/test-fast-report.xml var/test-fast-report-serial.xml || true; exit $$status

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
	$(MAKE) bench-peers

bench-peers: $(BENCH_STAMP)
	-$(MAKE) $(JAX_STAMP)
	$(BENCH_PY) -m bench.bench_peers $(PEERS_ARGS)

.venv-bench: $(BENCH_STAMP)

$(BENCH_STAMP): pyproject.toml
	python3 -m venv $(BENCH_VENV)
	$(BENCH_PY) -m pip install -q torch==$(TORCH_VERSION)
	$(BENCH_PY) -m pip install -q -e '.[worker]'
	$(BENCH_PY) -m pip install -q --no-deps $(PEERS)
	$(BENCH_PY) -m pip install -q $(PEER_DEPENDENCIES)
	touch $@

.venv-jax: $(JAX_STAMP)

$(JAX_STAMP):
	python3 -m venv $(JAX_VENV)
	$(JAX_VENV)/bin/python -m pip install -q jax==0.4.23 jaxlib==0.4.23 'numpy<2' 'scipy<1.14' frozendict
	$(JAX_VENV)/bin/python -m pip install -q --no-deps neural-tangents==0.6.5
	touch $@

demo: $(STAMP)
	$(PY) -m ntklab.demo $(DEMO_ARGS)

clean:
	rm -rf var/ntklab.db var/ntklab.db-wal var/ntklab.db-shm var/broker .pytest_cache
