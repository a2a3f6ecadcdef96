# Two commands a new user needs: `make demo` and `make test`. Each creates .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Node 22 (the npm package `node@22`, not the system's node), the MCP conformance suite and the
# reference server `@modelcontextprotocol/server-everything`, pinned in conformance/package.json,
# installed into conformance/node_modules by npm (the system npm only runs the install).
NODE_DIR := conformance
NODE_BIN := $(NODE_DIR)/node_modules/.bin
NODE_STAMP := $(NODE_DIR)/node_modules/.installed

.PHONY: bfcl fastmcp demo test test-slow lint typecheck pytest bench soak clean node conformance docs dist wheel-check

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The Ray placement's tests run against a local Ray: the ray extra is part of the test set-up.
RAY_STAMP := $(VENV)/.ray-installed

$(RAY_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[ray]'
	touch $(RAY_STAMP)

# runtime.code (code mode) runs programs in pydantic-monty's sandbox: the code extra is part of the
# test set-up (and of lint: mypy reads its types).
CODE_STAMP := $(VENV)/.code-installed

$(CODE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[code]'
	touch $(CODE_STAMP)

# BFCL's data and executable API classes (the bfcl-eval wheel, pinned in tests/bfcl_data.py),
# unpacked into .cache/bfcl/ for tests/test_code_bfcl.py (which fetches it itself when missing).
BFCL_STAMP := .cache/bfcl/.fetched

$(BFCL_STAMP): tests/bfcl_data.py | $(STAMP)
	$(BIN)/python tests/bfcl_data.py
	touch $(BFCL_STAMP)

bfcl: $(BFCL_STAMP)

# FastMCP 4 and its tasks (fastmcp-tasks, pinned in tests/fastmcp_venv.py) in a venv of their own,
# .venv-fastmcp/ (fastmcp-tasks pins a fastmcp older than the newest): tests/test_fastmcp_interop.py
# runs FastMCP's server and client from it as processes against ours.
FASTMCP_STAMP := .venv-fastmcp/.installed

$(FASTMCP_STAMP): tests/fastmcp_venv.py | $(STAMP)
	$(BIN)/python tests/fastmcp_venv.py
	touch $(FASTMCP_STAMP)

fastmcp: $(FASTMCP_STAMP)

# runtime.integrations is tested under each framework's own agent: the integrations extra is part of
# the test set-up too (and of lint: mypy reads the frameworks' types).
INTEGRATIONS_STAMP := $(VENV)/.integrations-installed

$(INTEGRATIONS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[integrations]'
	touch $(INTEGRATIONS_STAMP)

demo: $(STAMP)
	$(BIN)/python -m runtime demo

lint: $(STAMP) $(RAY_STAMP) $(INTEGRATIONS_STAMP) $(CODE_STAMP)
	$(BIN)/ruff check runtime tests benchmarks examples conformance
	$(BIN)/ruff format --check runtime tests benchmarks examples conformance
	$(BIN)/mypy
	$(BIN)/python tools/check_layers.py .

typecheck: $(STAMP) $(RAY_STAMP) $(INTEGRATIONS_STAMP) $(CODE_STAMP)
	$(BIN)/mypy

# The shared stores' tests (tests/test_stores.py, tests/test_resilience_shared.py) run against a real
# redis-server, Debian's package; tests/redis_server.py starts and stops one per test session on a
# free loopback port. Installed only where there is none.
REDIS_STAMP := $(VENV)/.redis-installed

$(REDIS_STAMP): | $(STAMP)
	command -v redis-server >/dev/null || (export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q redis-server || (apt-get update -q && apt-get install -y -q redis-server))
	command -v redis-server >/dev/null
	touch $(REDIS_STAMP)

# tests/test_docs_site.py opens the built site from disk in a real headless browser: Debian's
# Chromium, installed where there is none (without one, that test checks the built links only).
CHROMIUM_STAMP := $(VENV)/.chromium-installed
# The docs extra (mkdocs): defined before `pytest` names it (a prerequisite is expanded where the
# rule stands: defined later, it was empty, and a clean clone skipped the docs site's tests).
DOCS_STAMP := $(VENV)/.docs-installed

$(CHROMIUM_STAMP): | $(STAMP)
	command -v chromium >/dev/null || (export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -q chromium || (apt-get update -q && apt-get install -y -q chromium)) || \
	  echo "could not install chromium: the docs site's search is checked by its links only"
	touch $(CHROMIUM_STAMP)

# Two workers (pytest-xdist): independent tests run in parallel; the tests of the session's Ray
# cluster all go to one of them (--dist loadgroup). PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2

pytest: $(STAMP) $(RAY_STAMP) $(INTEGRATIONS_STAMP) $(CODE_STAMP) $(BFCL_STAMP) $(FASTMCP_STAMP) $(NODE_STAMP) $(REDIS_STAMP) $(DOCS_STAMP) $(CHROMIUM_STAMP)
	PATH="$(CURDIR)/$(NODE_BIN):$$PATH" $(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

test: lint pytest

# The tests marked `slow` (left out of `make test`): more batches through Subprocess, Ray from every caller.
test-slow: $(STAMP) $(RAY_STAMP)
	$(BIN)/pytest -m slow


$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	command -v npm >/dev/null || (apt-get update -q && apt-get install -y -q npm)  # only to run the install
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	$(NODE_BIN)/node --version | grep -q '^v22\.'
	touch $(NODE_STAMP)

node: $(NODE_STAMP)

# The official MCP conformance suite against `python -m runtime serve --http` and our client
# (conformance/run.py); what is not claimed is listed with its reason in conformance/not-claimed.yaml.
conformance: $(STAMP) $(NODE_STAMP)
	PATH="$(CURDIR)/$(NODE_BIN):$$PATH" $(BIN)/python -m conformance.run --jobs 2

# The peers compared in benchmarks/bench_peers.py (pydantic-ai, openai-agents, ...): the bench extra.
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $(BENCH_STAMP)

# W5 drives the agent server with wrk (C, epoll): a Python client cannot saturate it. The
# resilience figures start their own redis-server (REDIS_STAMP, as the tests), and count W1's
# instructions with valgrind.
WRK := $(shell command -v wrk 2>/dev/null)
VALGRIND := $(shell command -v valgrind 2>/dev/null)

bench: $(BENCH_STAMP) $(RAY_STAMP) $(CODE_STAMP) $(REDIS_STAMP)
ifeq ($(WRK),)
	(apt-get install -y wrk || (apt-get update && apt-get install -y wrk)) >/dev/null || \
	  echo "could not install wrk: W5 is skipped"
endif
ifeq ($(VALGRIND),)
	(apt-get install -y valgrind || (apt-get update && apt-get install -y valgrind)) >/dev/null || \
	  echo "could not install valgrind: W1's instructions are not counted"
endif
	$(BIN)/python -m benchmarks

# 100,000 mixed calls (20% timeouts, 10% caller cancellations); fails if tasks or RSS do not come back.
# Not part of `make test`.
soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak

# The docs site (mkdocs-material + mkdocstrings, mkdocs.yml), built strictly into site/: a warning,
# a broken link or anchor fails it. Its Python blocks run in tests/test_docs_blocks.py. The build
# reads the sources statically (mkdocstrings' griffe): it needs the `docs` extra's packages only,
# not the runtime's dependencies nor the dev extra.

$(DOCS_STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))" > $(VENV)/docs-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/docs-requirements.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The sdist and the wheel built from it, into dist/ (`build`, the release extra).
RELEASE_STAMP := $(VENV)/.release-installed

$(RELEASE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[release]'
	touch $(RELEASE_STAMP)

dist: $(RELEASE_STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

# What a user gets: the built wheel alone in a fresh venv (no checkout on its path), which
# must say its version and run the README's program, printing what the README shows.
WHEEL_VENV := .venv-wheel

wheel-check: dist
	rm -rf $(WHEEL_VENV)
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet dist/*.whl
	cd / && $(CURDIR)/$(WHEEL_VENV)/bin/tool-runtime --version
	$(BIN)/python tools/doc_blocks.py README.md --python $(CURDIR)/$(WHEEL_VENV)/bin/python
	rm -rf $(WHEEL_VENV)

clean:
	rm -rf $(VENV) $(WHEEL_VENV) .venv-fastmcp .venv-fastmcp.lock .pytest_cache .mypy_cache .ruff_cache $(NODE_DIR)/node_modules $(NODE_DIR)/results site dist .cache
