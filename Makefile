# The two commands of the README: `make demo` and `make test`. Each builds its own
# virtual environment (.venv) from pyproject.toml on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-avx2 lint bench clean

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

# the suite as a CPU without AVX-512 runs it, on a machine that has it (tests/avx2_only.py)
test-avx2: $(VENV)/.installed
	$(PY) -m tests.avx2_only $(PY) -m pytest -q

bench: $(VENV)/.installed
	$(PY) bench/ir_scaling.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
