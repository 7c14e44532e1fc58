# sweeplab: `make demo` runs the main job; `make test` runs the whole test suite. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch's CPU wheel first, so that the extras that need torch do not pull a multi-GB CUDA build
TORCH  := torch==2.13.0

.PHONY: demo test test-fast venv dev-install demo-install bytecode browser bench lint clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.demo-installed: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q -e '.[xgboost]'
	touch $@

$(VENV)/.dev-installed: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q $(TORCH)
	$(PIP) install -q -e '.[dev]'
	touch $@ $(VENV)/.demo-installed

demo-install: $(VENV)/.demo-installed
dev-install: $(VENV)/.dev-installed

# sweeplab's bytecode, written here as pip writes a wheel's when it installs it: an editable install run with
# PYTHONDONTWRITEBYTECODE set would compile every module again in every process it starts (the driver and
# each worker, ~0.1 s of CPU each). A no-op when nothing changed.
bytecode:
	$(PY) -m compileall -q src > /dev/null

demo: demo-install bytecode
	$(VENV)/bin/sweeplab sweep examples/xgboost_diabetes/sweep.yaml --workers 2

browser:
	bash .ci/install-browser.sh

# The suite on TEST_WORKERS processes (pytest-xdist), each test module on one of them (--dist loadscope: a
# module's shared fixtures, such as a Ray cluster or a browser, are made once). Much of it waits on real
# processes (sleeps, Ray and browser start-ups), so three keep two cores busy: 18:07 against 19:07 with two on
# a loaded machine, the same 3363 tests passing. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3

test: dev-install browser bytecode
	$(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadscope
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy src

test-fast: dev-install bytecode
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "not slow and not ray and not browser"

bench: dev-install
	$(PIP) install -q -e '.[bench]'
	$(PY) benchmarks/overhead.py
	$(PY) benchmarks/ray_overhead.py

lint: dev-install
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy src

clean:
	rm -rf $(VENV) .sweeplab build *.egg-info src/*.egg-info
