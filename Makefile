# The two commands of the README: `make demo` and `make test`. Each builds its own
# virtual environment (.venv) from pyproject.toml on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

# the test run's processes (pytest-xdist): on 2 cores two of them use the machine the
# Ray- and compiler-bound tests leave idle; more only where there are more cores
TEST_PROCESSES ?= 2
# byte-compile the sources once per change: an editable install leaves them without .pyc,
# and every raypass process, Ray worker and test process would compile them again, all the
# more where PYTHONDONTWRITEBYTECODE keeps Python from caching what it compiled
PRECOMPILE := $(PY) -m compileall -q -j 0 passinfra scheduler workers raypass_cli bench tests

.PHONY: demo test test-avx2 lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $@

demo: $(VENV)/.installed
	$(PRECOMPILE)
	$(VENV)/bin/raypass demo

test: $(VENV)/.installed
	$(PY) -m ruff check .
	$(PRECOMPILE)
	$(PY) -m pytest -q -n $(TEST_PROCESSES)

# the suite as a CPU without AVX-512 runs it, on a machine that has it (tests/avx2_only.py)
test-avx2: $(VENV)/.installed
	$(PRECOMPILE)
	$(PY) -m tests.avx2_only $(PY) -m pytest -q -n $(TEST_PROCESSES)

bench: $(VENV)/.installed
	$(PY) -m bench.ir_scaling

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
