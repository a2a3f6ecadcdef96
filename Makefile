# Two commands a new user needs: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest bench soak clean

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m runtime demo

lint: $(STAMP)
	$(BIN)/ruff check runtime tests benchmarks examples
	$(BIN)/ruff format --check runtime tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/python tools/check_layers.py .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest

test: lint pytest

# The peers compared in benchmarks/bench_peers.py (pydantic-ai, openai-agents, ...): the bench extra.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

# W5 drives the agent server with wrk (C, epoll): a Python client cannot saturate it.
WRK := $(shell command -v wrk 2>/dev/null)

bench: $(BENCH_STAMP)
ifeq ($(WRK),)
	(apt-get install -y wrk || (apt-get update && apt-get install -y wrk)) >/dev/null || \
	  echo "could not install wrk: W5 is skipped"
endif
	$(BIN)/python -m benchmarks

# 100,000 mixed calls (20% timeouts, 10% caller cancellations); fails if tasks or RSS do not come back.
# Not part of `make test`.
soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
