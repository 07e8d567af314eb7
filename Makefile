# The README's commands. Every target creates .venv on first use, so a fresh clone needs only
# Python 3.10+ and make. torch is pinned to the CPU wheel this kind of machine carries; a GPU user
# installs a CUDA build first (see README), and `make` then leaves it alone.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8888
NBVAL := --nbval-lax --nbval-sanitize-with tests/nbval_sanitize.cfg

.PHONY: install lab lab-headless test test-fast bench bench-versions gpu-check report reproduce clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip show torch >/dev/null 2>&1 || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[lab,hf,dev]'
	@touch $(STAMP)

install: $(STAMP)

## JupyterLab on notebooks/ (NO_BROWSER=1 for a server without a browser: it prints the URL to open).
## Jupyter refuses to run as root unless told; containers and cloud VMs often run as root, so say it for them.
## With no display on Linux there is no browser to open: the URL is printed instead.
## No news popup over the figures on first start: tools/lab_settings/overrides.json answers JupyterLab's
## "get notified about official Jupyter news?" with no (and no update checks); news_url=None fetches none.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)
HEADLESS := $(or $(NO_BROWSER),$(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,1))
lab: install
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ALLOW_ROOT) --LabApp.news_url=None \
		--LabApp.app_settings_dir=$(CURDIR)/tools/lab_settings $(if $(HEADLESS),--no-browser --ip=127.0.0.1 --port=$(PORT),)

lab-headless:
	$(MAKE) lab NO_BROWSER=1

## ruff, the docs check (make docs CHECK=1: stale pages, dead links), then every tier (tests/unit, invariants,
## specimens, e2e with the browser) and the notebooks under nbval,
## in one worker per core (pytest-xdist; WORKERS=1 for one process). A notebook's cells stay on one worker.
## The 30 slowest tests are listed at the end, so a CI log shows where the suite's time goes.
WORKERS ?= auto
test: install
	$(VENV)/bin/ruff check workbench tests tools notebooks/exercises
	$(PY) tools/docs.py --check
	$(PY) -m pytest tests $(if $(wildcard notebooks/*.ipynb),notebooks $(NBVAL),) -n $(WORKERS) --dist loadfile --no-loadscope-reorder --durations=30

## the quick loop while coding: unit + invariant tests without the costly marks (under 5 minutes on 2 cores)
test-fast: install
	$(PY) -m pytest tests/unit tests/invariants -m "not slow and not compiles and not subprocess" -n $(WORKERS)

## screenshots of every notebook in JupyterLab after using its widgets (headless Chromium): reports/screens/
screens: install
	$(PY) tools/screens.py

## the benchmark table; NANOGPT=path/to/nanoGPT/model.py and NANOCHAT=path/to/nanochat (its repository) add
## rows timing their training steps beside ours, in the same rounds
bench: install
	$(if $(NANOGPT),WORKBENCH_NANOGPT=$(NANOGPT) ,)$(if $(NANOCHAT),WORKBENCH_NANOCHAT=$(NANOCHAT) ,)$(PY) tools/bench.py

## every bench row of revision BEFORE beside the working tree's, in one process, alternating (BEFORE=<git rev>)
bench-versions: install
	$(PY) tools/bench_versions.py $(BEFORE)

## on a CUDA machine: float32 invariants, a bf16 step per mechanism and schedule, compiled decode, d12 MFU
gpu-check: install
	$(PY) tools/gpu_check.py

## every notebook executed headless into HTML under reports/
report: install
	@mkdir -p reports
	$(VENV)/bin/jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=600 \
		--ExecutePreprocessor.store_widget_state=False --output-dir reports notebooks/*.ipynb

## retrain every recipe whose checkpoints are stale, then rewrite RESULTS.md
reproduce: install
	$(PY) -m workbench reproduce all

## docs/API.md and docs/api/ (the API reference, a page per area, from the package's names and docstrings), docs/README.md,
## docs/SPECIMENS.md and RESULTS.md (from the shipped checkpoints' stored summaries: nothing is trained); CHECK=1
## writes nothing and fails if any of them is out of date (the reference, not committed, only where a build left it).
## Warnings are errors: both fail on a relative link in README.md, RESULTS.md or docs/ that names no file, or a
## page of docs/ the index does not list
.PHONY: docs
docs: install
	$(PY) tools/docs.py $(if $(CHECK),--check,)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache reports
