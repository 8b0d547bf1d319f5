# Quick start: `make demo` and `make test` each create .venv if missing and install the
# project with the pinned constraints first.
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test test-zoo test-newest lint clean browser

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml constraints.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[test,lint,viz,docs]"
	touch $(STAMP)

install: $(STAMP)

# Writes the IR, the FlatIR, the weights and demo.hierarchy.png into demo-out/ (git-ignored).
demo: $(STAMP)
	$(VENV)/bin/torch2ir demo --out demo-out

# ruff, then the import layers of pyproject.toml's [tool.importlinter] (docs/architecture.md)
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

# pytest exits 5 when it collects no test; make treats that as a failure, as it should.
# Tests run on every core (pytest-xdist); PYTEST_ARGS="-n0" runs them in one process. --dist loadgroup
# hands out tests one at a time, except that tests marked with the same xdist_group go to one worker together
# (those that share work made once per process: a corpus architecture's conversion, a quantized model).
# --durations=25 lists the slowest tests at the end of every run (where the suite's time goes).
# `make test` is the everyday suite; `make test-zoo` runs what it leaves out (the tests marked `zoo`: real-model
# corpora, quantization stacks, long property and fuzz runs; the list is ZOO in tests/conftest.py). .ci/run runs both.
# The view's tests run in headless Chromium: `browser` installs the distribution's package when it is missing
# (scripts/install_browser.sh; CHROMIUM=<path> names another one).
CHROMIUM ?= /usr/bin/chromium
export CHROMIUM

browser:
	@scripts/install_browser.sh

test: lint browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n auto --dist loadgroup --durations=25 -m "not zoo" $(PYTEST_ARGS)

# The ecosystem packages (torchvision, timm, diffusers) go to their own folder, not into .venv: this torch build
# cannot load torchvision's compiled extension, and transformers imports torchvision whenever it is installed, so
# installing it into .venv would break `import transformers` in every process that has not first defined the
# extension's operator schemas (tests/ecosystems/load.py does that, then adds this folder to sys.path).
ZOO_SITE  := $(VENV)/zoo-site
ZOO_STAMP := $(ZOO_SITE)/.installed

$(ZOO_STAMP): $(STAMP) tests/ecosystems/requirements.txt
	rm -rf $(ZOO_SITE)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --target $(ZOO_SITE) \
		-r tests/ecosystems/requirements.txt
	touch $(ZOO_STAMP)

test-zoo: $(ZOO_STAMP)
	TORCH2IR_ZOO_SITE=$(abspath $(ZOO_SITE)) HF_HUB_OFFLINE=1 $(PY) -m pytest -n auto --dist loadgroup --durations=25 \
		-m zoo $(PYTEST_ARGS)

# `make test-newest` tests the newest releases of transformers, timm, diffusers, torchao and brevitas that install
# with the pinned torch (re-resolved on every run, into their own folder, first on sys.path) on a representative part
# of the ecosystem tests (SELECTION in scripts/newest_selection.py), and prints the versions tested. A newest release that
# requires a newer torch is reported as NOT TESTED (the newest one that installs is tested); an unreachable package
# index skips the check with a message; a failing test fails. NEWEST_ARGS=--strict makes the first two fail too.
NEWEST_SITE ?= $(VENV)/newest-site
NEWEST_ARGS ?=

test-newest: $(ZOO_STAMP)
	$(PY) scripts/newest_site.py --target $(NEWEST_SITE) --after $(ZOO_SITE) $(NEWEST_ARGS) \
		-- -n auto --dist loadgroup $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache
