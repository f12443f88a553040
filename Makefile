# Two entry points (see README): `make analyze` and `make test`. Each builds its own virtualenv.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
# torch is pinned: this version's CPU build is what the tests capture with; never let pip pick a CUDA one.
TORCH  := torch==2.13.0
SAMPLE ?= sample_traces/dlrm-8xV100-nccl
PYTEST_ARGS ?=

.PHONY: analyze test test-fast bench lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip setuptools wheel

$(VENV)/.core: pyproject.toml | $(PY)
	$(PIP) install -e .
	touch $@

$(VENV)/.test: pyproject.toml | $(PY)
	$(PIP) install $(TORCH)
	$(PIP) install -e '.[test,torch,dash]'
	touch $@

analyze: $(VENV)/.core  ## install the core and analyse the bundled real traces
	$(VENV)/bin/ddprof analyze $(SAMPLE)

test: $(VENV)/.test  ## install everything the tests need and run them all (pytest exit 5 = failure)
	$(PY) -m pytest -m "not gpu" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing" >&2; exit 1; fi; exit $$rc

test-fast: $(VENV)/.test
	$(PY) -m pytest -m "not gpu and not slow" $(PYTEST_ARGS)

bench: $(VENV)/.test
	$(PY) benchmarks/ingest_vs_hta.py

lint: $(VENV)/.test
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
