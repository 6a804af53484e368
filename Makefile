# `make demo` and `make test` set everything up themselves on a fresh machine
# with Python >= 3.11: a virtualenv in .venv, then an editable install.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-test
BENCH_INSTALLED := $(VENV)/.installed-bench

.PHONY: test test-fast demo demo-service bench clean

$(INSTALLED): pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: jdata needs Python >= 3.11 on PATH"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(BENCH_INSTALLED): $(INSTALLED)
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

test: $(INSTALLED)
	$(BIN)/python -m pytest -q

# The edit loop: everything but the tests marked slow (make test runs them all).
test-fast: $(INSTALLED)
	$(BIN)/python -m pytest -q -m "not slow"

# The demo trains on 8 CPU devices (a data-parallel mesh), forced before JAX starts.
demo: $(INSTALLED)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(BIN)/python -m jdata.demo

# The same training fed by a jdata.service (2 workers on a local Ray), one worker killed mid-run.
demo-service: $(INSTALLED)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(BIN)/python -m jdata.demo --service

bench: $(BENCH_INSTALLED)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
