# Tether: `make run` shows the demo, `make test` runs every check. Both set up .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast install lint bench clean help

help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*##/\t/'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Tether installs as one package, `tether`, whose subpackages are the folders here. The
# install links each module into build/ (setuptools' strict editable mode, a tree mypy can
# read), so a module added or removed means installing again: a folder's time changes
# exactly then.
PACKAGE_DIRS := $(shell find actors events projections adapters -type d -not -name __pycache__)

$(STAMP): pyproject.toml $(PACKAGE_DIRS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]' --config-settings editable_mode=strict
	touch $(STAMP)

install: $(STAMP)  ## create .venv and install Tether with the test tools

run: install  ## the demo: embedded NATS, SQLite, the bundled model script
	$(BIN)/tether demo

lint: install  ## ruff and mypy
	$(BIN)/ruff check actors events projections adapters tests bench
	$(BIN)/mypy

# The suite's processes: most tests wait on servers, engines and processes, so two halve
# its time on two cores (each worker its own NATS namespaces, schemas and folders).
WORKERS ?= 2

test: lint  ## lint, type-check and run the whole suite (in WORKERS processes, 2 by default)
	$(BIN)/pytest -q -n $(WORKERS)

test-fast: install  ## the edit-test loop: the tests that start no server, engine or process
	$(BIN)/pytest -q -m "not slow"

bench: install  ## the benchmarks (figures and ratios, no assertions)
	$(BIN)/python -m bench

clean:  ## remove the virtual environment and the install's link tree
	rm -rf $(VENV) build/__editable__.*
