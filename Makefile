# One command runs the whole test suite on a fresh machine: `make test`.
# The spark extra (pyspark is a ~450 MB sdist, built once into pip's cache) is part of it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_DEPS ?= $(STAMP)
DEMO_ARGS ?=

.PHONY: test lint install bench clean demo

$(STAMP): pyproject.toml
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
