# The two commands of the README: `make demo` and `make test`. Each builds its own
# virtual environment (.venv) from pyproject.toml on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/raypass demo

test: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/ir_scaling.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
