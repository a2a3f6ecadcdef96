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

# The Ray placement's tests run against a local Ray: the ray extra is part of the test set-up.
RAY_STAMP := $(VENV)/.ray-installed

$(RAY_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[ray]'
	touch $(RAY_STAMP)

pytest: $(RAY_STAMP)
	$(BIN)/pytest

test: lint pytest

# The peers compared in benchmarks/bench_peers.py (pydantic-ai, openai-agents, ...): the bench extra.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) $(RAY_STAMP)
	$(BIN)/python -m benchmarks

# 100,000 mixed calls (20% timeouts, 10% caller cancellations); fails if tasks or RSS do not come back.
# Not part of `make test`.
soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
