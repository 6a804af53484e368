# `make demo` and `make test` set everything up themselves on a fresh machine
# with Python >= 3.11: a virtualenv in .venv, then an editable install.

PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
	&& echo $$p && break; done)
VENV := .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-test
BENCH_INSTALLED := $(VENV)/.installed-bench

.PHONY: test test-fast test-wheel docs demo demo-service bench clean

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

# What a user installs: builds the sdist and the wheel, installs the wheel with its test extra
# into a fresh virtualenv, and runs the fast tier from the unpacked sdist against it. The
# sdist's own jdata/ stays (the doc checks read it) but cannot shadow the wheel: Python is run
# with PYTHONSAFEPATH (no current directory on sys.path) and pytest appends the sdist's root
# after site-packages. The demos are not in the wheel: their tests run in `make test`.
WHEEL_VENV := .venv-wheel
WHEEL_CHECK := build/wheel-check
test-wheel: $(INSTALLED)
	rm -rf dist $(WHEEL_VENV) $(WHEEL_CHECK)
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip install --quiet "$$(ls dist/*.whl)[test]"
	mkdir -p $(WHEEL_CHECK)
	tar xzf dist/*.tar.gz -C $(WHEEL_CHECK) --strip-components=1
	cd $(WHEEL_CHECK) && PYTHONSAFEPATH=1 ../../$(WHEEL_VENV)/bin/python -c \
		"import jdata, sys; sys.exit(0 if '/site-packages/' in jdata.__file__ else jdata.__file__)"
	cd $(WHEEL_CHECK) && PYTHONSAFEPATH=1 ../../$(WHEEL_VENV)/bin/python -m pytest -q \
		-p no:cacheprovider --import-mode=append -m "not slow" \
		--ignore=tests/test_demo.py --ignore=tests/test_demo_service.py tests

# The docs site (mkdocs, API reference from the docstrings), warnings as errors.
docs: $(INSTALLED)
	$(BIN)/python -m mkdocs build --strict --site-dir build/site

# The demo trains on 8 CPU devices (a data-parallel mesh), forced before JAX starts.
demo: $(INSTALLED)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(BIN)/python -m jdata.demos.train

# The same training fed by a jdata.service (2 workers on a local Ray), one worker killed mid-run.
demo-service: $(INSTALLED)
	XLA_FLAGS=--xla_force_host_platform_device_count=8 $(BIN)/python -m jdata.demos.train --service

bench: $(BENCH_INSTALLED)
	$(BIN)/python -m benchmarks.run

clean:
	rm -rf $(VENV) $(WHEEL_VENV) build dist .pytest_cache .hypothesis
