# The one set of commands README and CI use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test check lint typecheck bench bench-peers clean chromium

# The web app (web/) is built into the package when missing or older than its sources.
WEB_BUNDLE := src/nodeloom/web_dist/index.html
WEB_SOURCES := $(shell find web/src web/public -type f 2>/dev/null) web/index.html web/app.html \
	web/package.json web/package-lock.json web/vite.config.ts web/tsconfig.json \
	$(wildcard src/nodeloom/schemas/*.py src/nodeloom/api/routes/*.py examples/*.json)

install: $(STAMP) $(WEB_BUNDLE) chromium

$(WEB_BUNDLE): $(WEB_SOURCES) | $(STAMP)
	scripts/build_web.sh

chromium:
	@scripts/ensure_chromium.sh

$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' -c requirements.lock
	touch $(STAMP)

# make run PORT=8080 (or HOST=0.0.0.0 to listen beyond this machine)
HOST ?= 127.0.0.1
PORT ?= 8000

run: install
	$(BIN)/nodeloom serve --host $(HOST) --port $(PORT)

# The Python checks and the web app's three run side by side: each is one process that keeps
# one core busy, so on two cores the whole takes about half as long as one after another.
# --output-sync prints each check's output in one piece when it is done.
CHECKS := check-python check-web-lint check-web-types check-web-tests
.PHONY: $(CHECKS)

check: install
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(CHECKS)

check-python:
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

check-web-lint check-web-types check-web-tests: check-web-%:
	scripts/check_web.sh $*

# make test runs most of the suite in four processes (pytest-xdist), then the tests marked
# `serial` (they hold a latency, fairness or count budget that assumes the cores are theirs)
# one at a time. One process left the 2-core machine half idle, waiting on the servers,
# browsers and CLI calls the tests start (ADR 0051); four keep it about 85% busy (ADR 0052).
# --dist loadfile: a module's tests run in one worker, in order, as they were written to run
# (the browser tests' one tab follows a user's session from test to test); modules are
# handed out one at a time, to a free worker, slow ones first (--no-loadscope-reorder keeps
# the order of tests/conftest.py).
# make test TEST_WORKERS=1 runs everything in one process.
TEST_WORKERS ?= 4

ifeq ($(TEST_WORKERS),1)
test: check
	$(BIN)/pytest
else
test: check
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial"
	$(BIN)/pytest -m serial
endif

bench: install
	$(BIN)/python -m bench.run_all

# Side by side with n8n 2.8.4 (installed once into $NODELOOM_PEERS_DIR, default /tmp/nodeloom-peers).
bench-peers: install
	$(BIN)/python -m bench.bench_peers

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache web/node_modules src/nodeloom/web_dist
