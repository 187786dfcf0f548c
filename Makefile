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

.PHONY: test lint install bench clean demo

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

# Name server + broker (store under ./data), topic, produce, push-consume, Spark, clean stop.
# Without Java the demo skips its Spark step and says so.
demo: $(DEMO_DEPS)
	$(BIN)/python examples/demo.py $(DEMO_ARGS)

bench: $(STAMP)
	$(BIN)/mqbench store all

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
