# rangetable — two entry points: `make up` (local cluster) and `make test` (the suite).
PYTHON ?= python3.11
# The suite runs in parallel (pytest-xdist): one worker per file, so a module's cluster starts once; files are handed
# out longest first (tests/conftest.py's order: xdist would reorder them by their count of tests).
# Many integration tests wait on timers, so more workers than CI's 2 cores pay. Tests marked `serial`
# (wall-clock bounds) run alone afterwards.
TEST_WORKERS ?= 4
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# System tools some tests need (etcd, Chromium, the Azure CLI, node/npm): tests/tools.lock pins them and
# tests/setup/install.sh installs the missing ones from Debian's archive when run as root, once (the stamp;
# about 5 to 8 minutes and 1.1 GB the first time). Where it cannot, it says why and those tests skip, which the
# end of the run counts. `make test TOOLS=no` leaves the machine as it is.
TOOLS ?= yes
TOOLS_STAMP := $(VENV)/.tools

.PHONY: up test lint bench clean down tools

# Python writes its bytecode caches here even where the environment turns them off (PYTHONDONTWRITEBYTECODE, as
# some CI images do): the suite starts a Python process for every server, frontend and command of about 100
# clusters, and compiling the project's sources in each of them, and pytest rewriting every test module again in
# each worker, cost a tenth of the suite's CPU on a fresh clone and a fifth on the next run (docs/testing.md).
unexport PYTHONDONTWRITEBYTECODE
# pip leaves the compiling to those first imports (--no-compile): its install takes 27 s instead of 37 s.

$(STAMP): requirements.lock pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (set PYTHON=...)"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-compile --disable-pip-version-check -r requirements.lock
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

$(TOOLS_STAMP): tests/tools.lock tests/setup/install.sh | $(STAMP)
	@bash tests/setup/install.sh $@

tools: $(TOOLS_STAMP)

# `rangetable up`'s defaults: 3 partition servers, every range on all three servers' own disks (docs/replication.md)
up: $(STAMP)
	$(BIN)/rangetable up $(ARGS)

down: $(STAMP)
	$(BIN)/rangetable down $(ARGS)

test: $(STAMP) $(if $(filter yes,$(TOOLS)),$(TOOLS_STAMP))
	$(BIN)/ruff check .
	# the few wall-clock tests first, alone; then everything else on $(TEST_WORKERS) workers with mypy beside them
	# (it needs one core for about 12 s; its verdict follows pytest's summary, and either failing fails the run)
	$(BIN)/python -m pytest -m serial $(PYTEST_ARGS)
	$(BIN)/mypy > $(VENV)/mypy.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder -m "not serial" --durations=15 $(PYTEST_ARGS); \
	tests=$$?; wait $$types; typed=$$?; \
	if [ $$typed -eq 0 ]; then echo "mypy: $$(tail -1 $(VENV)/mypy.log)"; else cat $(VENV)/mypy.log; fi; \
	[ $$tests -eq 0 ] && [ $$typed -eq 0 ]

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/rangetable bench store

clean:
	rm -rf $(VENV) rangetable-data
