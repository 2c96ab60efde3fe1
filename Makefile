# Everything Parley needs is installed by these targets into .venv.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test lint fixtures clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the project metadata changes.
$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed-run

run: $(VENV)/.installed-run
	$(BIN)/parley serve --host $(HOST) --port $(PORT)

test: $(VENV)/.installed-dev
	$(BIN)/python -m pytest

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check server engine models tests
	$(BIN)/ruff format --check server engine models tests
	$(BIN)/mypy

# Regenerates the committed speech fixtures (needs Debian's espeak-ng and sox).
fixtures:
	tests/fixtures/make_fixtures.sh

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
