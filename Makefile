# longctx — two commands on a fresh machine (Python 3.11 and the package registries):
#   make        install, build the data, run every notebook headless at the `cpu` size into build/
#   make test   install, build the data, run the test suite (every notebook at the `ci` size included)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: all lessons data test test-all test-fast slurm-check lab lab-smoke site site-check figures clean
all: lessons

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[test]'
	# Ulysses SP (notebook 04): DeepSpeed builds against the venv's torch; on CPUs it needs no compiled ops
	DS_BUILD_OPS=0 $(BIN)/pip install --quiet --disable-pip-version-check --no-build-isolation -e '.[deepspeed]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (longctx)" >/dev/null
	touch $@

data: $(STAMP)
	$(BIN)/longctx data

lessons: data
	$(BIN)/longctx all --size cpu

# two workers on two cores (pytest-xdist, one torch thread each: tests/conftest.py), each lesson run once at `ci`;
# the SLURM module is `make slurm-check` (.ci/run runs both)
test: data
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not slurm and not exhaustive"

# `make test` and every case of the comparisons it holds on a representative few (`exhaustive`)
test-all: data
	$(BIN)/pytest -q -n 2 --dist loadfile -m "not slurm"

# the inner loop: everything but the tests that start notebook kernels or process launches (under 3 minutes)
test-fast: data
	$(BIN)/pytest -q -m "not slow and not exhaustive"

# Sweeps on a real one-node SLURM that tests/slurm/start.sh installs and starts here, and stops afterwards (root,
# Debian's packages: slurm-wlm, munge, slurmdbd on MariaDB)
slurm-check: data
	$(BIN)/pytest -q -m slurm tests/test_slurm.py

lab: data
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[lab]'
	$(BIN)/longctx lab

# A real browser opens a notebook in JupyterLab and runs every cell (needs Debian's chromium package).
lab-smoke: data
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[lab]'
	@test -x "$${CHROMIUM:-/usr/bin/chromium}" || { echo "lab-smoke needs Chromium: apt-get install chromium"; exit 1; }
	LONGCTX_LAB_SMOKE=1 LAB_SMOKE_SHOTS=build/lab-smoke $(BIN)/pytest -q tests/browser

# A static site of the lessons as `make` ran them (build/site/cpu/index.html); nothing is executed.
site: $(STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[site]'
	$(BIN)/longctx site --size cpu

# The site in a real browser: every page, image and figure rendered (needs Debian's chromium package).
site-check: site
	$(BIN)/pip install --quiet --disable-pip-version-check -e '.[lab]'
	@test -x "$${CHROMIUM:-/usr/bin/chromium}" || { echo "site-check needs Chromium: apt-get install chromium"; exit 1; }
	LONGCTX_SITE_CHECK=build/site/cpu SITE_SHOTS=build/site-check $(BIN)/pytest -q tests/browser/test_site_browser.py

figures: data
	$(BIN)/longctx figures --size cpu

clean:
	rm -rf build
