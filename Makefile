# Every target builds .venv first, from nothing, so a fresh clone needs only `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv test soak demo phoenix-demo bench serve clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# The CPU build of torch lies on this machine's disk; take it first so nothing pulls a CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0 || $(PY) -m pip install --quiet torch
	$(PY) -m pip install --quiet -e ".[all,test,phoenix]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# The server load test at soak size (minutes; not in CI): prints its counts.
soak: $(STAMP)
	KVWISE_SOAK=1 $(PY) -m pytest -q tests/local_backend/test_server_load.py -k soak

demo: $(STAMP)
	$(PY) -m examples.demo

phoenix-demo: $(STAMP)
	$(PY) -m examples.demo --phoenix

bench: $(STAMP)
	$(PY) -m pip install --quiet -e ".[bench]"
	$(PY) -m tests.benchmarks

serve: $(STAMP)
	$(PY) -m local_backend serve --model default --host 127.0.0.1 --port 8000

clean:
	rm -rf $(VENV)
