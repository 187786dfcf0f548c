# One command runs the whole test suite on a fresh machine: `make test`.
# The spark extra (pyspark is a ~450 MB sdist, built once into pip's cache) is part of it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The stamp names the interpreter's version, so that `make test PYTHON=python3.13` after a run
# on another Python rebuilds the venv on python3.13 instead of testing the old one again.
PY_VERSION_CODE := import sys; print(".".join(map(str, sys.version_info[:3])))
PY_VERSION := $(shell $(PYTHON) -c '$(PY_VERSION_CODE)' 2>/dev/null)
STAMP := $(VENV)/.installed-$(PY_VERSION)
DEMO_DEPS ?= $(STAMP)
DEMO_ARGS ?=

.PHONY: test lint install bench clean demo wheel test-compiled

$(STAMP): pyproject.toml
	@test -n "$(PY_VERSION)" || { echo "$(PYTHON) does not run: pass PYTHON=<a Python 3.11+>"; exit 1; }
	@if [ -x $(BIN)/python ] && [ "$$($(BIN)/python -c '$(PY_VERSION_CODE)')" != "$(PY_VERSION)" ]; then \
		echo "$(VENV) is not on Python $(PY_VERSION): recreating it"; \
		$(PYTHON) -m venv --clear $(VENV); \
	fi
	rm -f $(VENV)/.installed*
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,spark]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest
	$(MAKE) test-compiled

# The compiled build: an sdist, then from it a wheel whose hot path is compiled with mypyc (the
# hook and its module list are in pyproject.toml). Built from the sdist, in a temporary
# directory, so that no .so lands in this tree, where it would shadow the .py you edit.
wheel: $(STAMP)
	rm -rf dist
	HATCH_BUILD_HOOK_ENABLE_MYPYC=1 $(BIN)/python -m build --outdir dist .

# The tests of the compiled modules, run against the compiled wheel: it is installed into
# $(CBUILD)/site and the tests run from the unpacked sdist with no sources beside them, so every
# import of minimq (and every process a test starts) loads the compiled build. The suite's
# conftest stops at once unless exactly the hook's modules are compiled.
CBUILD := build/compiled
# Of the client's tests, those of the compiled producer path (sending, validation,
# transactions, the blocking producer); the consumers' tests would add minutes.
COMPILED_CLIENT_TESTS := $(addprefix tests/client/test_,$(addsuffix .py,producer_inputs \
	producer_queue_lists producer_closed_mid_send producer_fault_tolerance validation \
	transaction transaction_blocking send_errors aio_client compression route_refresh_churn \
	deleted_topic_route call_budget_scope close_and_cancel blocking_client blocking_cluster \
	push_orderly_handover))
COMPILED_TESTS ?= tests/remoting tests/store tests/common tests/broker $(COMPILED_CLIENT_TESTS)
test-compiled: wheel
	rm -rf $(CBUILD)
	mkdir -p $(CBUILD)/src
	$(BIN)/python -m pip install --quiet --no-deps --target $(CBUILD)/site dist/*.whl
	tar -xzf dist/minimq-*.tar.gz -C $(CBUILD)/src --strip-components=1
	cd $(CBUILD)/src && rm -rf broker client common namesrv remoting store \
		&& MINIMQ_EXPECT_COMPILED=1 PYTHONPATH=$(CURDIR)/$(CBUILD)/site \
		$(CURDIR)/$(BIN)/python -m pytest -p no:cacheprovider $(COMPILED_TESTS)

# Name server + broker (store under ./data), topic, produce, push-consume, Spark, clean stop.
# Without Java the demo skips its Spark step and says so.
demo: $(DEMO_DEPS)
	$(BIN)/python examples/demo.py $(DEMO_ARGS)

bench: $(STAMP)
	$(BIN)/mqbench store all

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis build dist
