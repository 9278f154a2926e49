# The two commands a learner needs: `make lab` and `make test` (README.md).
SHELL := /bin/bash
PYTHON ?= python3
# PYTHON=python3.12 make test: an interpreter you name gets a venv of its own (.venv-python3.12), so that
# .venv, made by the default python3, is never run as if it were another Python. VENV=... names one.
ifneq ($(filter environment command,$(firstword $(origin PYTHON))),)
VENV ?= .venv-$(notdir $(PYTHON))
else
VENV ?= .venv
endif
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PORT ?= 8888
NOTEBOOK_DIR ?= notebooks
NB ?= $(wildcard notebooks/[0-9][0-9]_*.ipynb)
# Set to a PyTorch wheel index (README: "CPU-only or CUDA builds") to take torch from there.
TORCH_INDEX_URL ?=
TORCH_PINS := $(shell grep -oE '"torch(vision)?==[^"]+"' pyproject.toml | tr -d '"')
# This machine's pip config names local indexes that do not exist for every package; hide that noise.
PIP_QUIET := 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
# Kernels inherit the environment: MPLBACKEND=agg would drop every stored plot.
unexport MPLBACKEND
# Root may run JupyterLab only with --allow-root (CI and containers run as root).
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_FLAGS := --ServerApp.ip=127.0.0.1 --ServerApp.port=$(PORT) --ServerApp.port_retries=0 \
	--ServerApp.root_dir=$(NOTEBOOK_DIR) --LabApp.news_url=None \
	--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
	--LabApp.extension_manager=readonly $(ROOT_FLAG) \
	--ServerApp.contents_manager_class=nbhelpers._tools.lab_contents.ViewKeepingContentsManager

.PHONY: setup lab test check inductor-cache inductor-cache-dir durations menagerie matrix coverage execute html doctor claims index trace clean
setup: $(STAMP)

# Each phase says what it does and when (seconds since the set-up began). pip runs without -q, so that a
# download shows its progress: a bar on a terminal, each file and its size in a log.
SAY = printf '[$(1) %4ss] %s\n' $$(( $$(date +%s) - start ))
TORCH_SOURCE = $(if $(TORCH_INDEX_URL),from $(TORCH_INDEX_URL),from PyPI: on Linux x86-64 a CUDA build$(,) \
	about 3 GB with NVIDIA's libraries the first time (README: Which torch build))
, := ,
$(STAMP): pyproject.toml
	@start=$$(date +%s); set -e; \
	if test -x $(PY); then $(call SAY,setup) "1/3 $(VENV) exists; pyproject.toml changed since its set-up"; \
	else $(call SAY,setup) "1/3 creating $(VENV) with $$($(PYTHON) --version 2>&1)"; $(PYTHON) -m venv $(VENV); fi; \
	$(call SAY,setup) "2/3 installing $(TORCH_PINS) $(TORCH_SOURCE)"; \
	$(PY) -m pip install $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) $(TORCH_PINS) $(PIP_QUIET); \
	$(call SAY,setup) "3/3 installing the rest of the pinned set (pyproject.toml, with the test and models extras)"; \
	$(PY) -m pip install -e '.[test,models]' $(PIP_QUIET); \
	touch $@; $(call SAY,setup) "$(VENV) is ready"

# JupyterLab's widget manager stores widget state in a notebook it saves only when its saveState setting is
# on (off by default): without it, a notebook run and saved in the lab keeps its views' still pictures but
# not the views. With it on, the manager alone would erase the views of a notebook only opened and saved,
# and pile up every earlier run's models: the contents manager named in LAB_FLAGS (nbhelpers/_tools/
# lab_contents.py) stores exactly the models the outputs show. No news or update prompt (fetchNews "none"
# asks on the first load). This venv's JupyterLab gets these as defaults (overrides.json in its settings
# folder), which a learner can still change in Settings.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.json
LAB_DEFAULTS := {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": true}, \
	"@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": false}}
$(LAB_OVERRIDES): $(STAMP) Makefile
	@mkdir -p $(@D)
	@echo '$(LAB_DEFAULTS)' > $@

# Token authentication is on: the URL with ?token=... is printed (set JUPYTER_TOKEN to choose it).
# The series' notebooks are trusted first (their outputs come from `make execute`): JupyterLab shows an
# untrusted notebook's widgets and SVG pictures as plain text, so the stored graph views would be blank.
lab: $(STAMP) $(LAB_OVERRIDES)
	@start=$$(date +%s); \
	$(call SAY,lab) "trusting the notebooks in $(NOTEBOOK_DIR) (their outputs come from make execute)"; \
	$(VENV)/bin/jupyter trust $(NOTEBOOK_DIR)/*.ipynb > /dev/null; \
	$(call SAY,lab) "starting JupyterLab on 127.0.0.1:$(PORT): open the URL with ?token= that it prints below"; \
	exec $(VENV)/bin/jupyter lab $(LAB_FLAGS) $(LAB_ARGS)

# One Inductor on-disk cache per checkout and torch pin: every kernel and process of a run shares it, the next run
# of this checkout finds it warm (a fresh clone starts cold), and the caches of other torch pins are removed.
TORCH_PIN := $(patsubst torch==%,%,$(firstword $(TORCH_PINS)))
INDUCTOR_CACHE ?= $(CURDIR)/build/inductor-cache
# The matrix shares it too: Inductor's keys include the interpreter's headers and flags, so Pythons do not collide.
test check durations execute matrix: export TORCHINDUCTOR_CACHE_DIR := $(INDUCTOR_CACHE)/torch-$(TORCH_PIN)

# CI's cache step keys and restores this folder (.ci/steps cache-keys).
inductor-cache-dir:
	@echo $(INDUCTOR_CACHE)/torch-$(TORCH_PIN)

inductor-cache:
	@mkdir -p $(INDUCTOR_CACHE)/torch-$(TORCH_PIN)
	@find $(INDUCTOR_CACHE) -mindepth 1 -maxdepth 1 ! -name 'torch-$(TORCH_PIN)' -exec rm -rf {} +

# Two pytest workers (pytest-xdist), one test file or notebook at a time each: a notebook keeps one kernel and a
# file its fixtures. The files start slowest first, as tests/durations.md measured them (conftest.py), so that
# the workers finish together. PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder)

test: $(STAMP) inductor-cache
	$(VENV)/bin/ruff check nbhelpers tests conftest.py claims
	$(PY) -m pytest $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The quick loop while you work (tests/quick_check.py): lint, the tests the last `make durations` measured under
# 2 s, every test file and notebook your change touches (against BASE, default main). Then `make test`.
BASE ?= main
check: $(STAMP) inductor-cache
	$(VENV)/bin/ruff check nbhelpers tests conftest.py claims
	$(PY) -m tests.quick_check --base $(BASE) -- $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# Every instrument against PyTorch's own tool on 200-odd real architectures (torchvision, timm, Hugging Face), one
# process per model, two at a time; menagerie/README.md is the table (tests/menagerie.py). Not part of `make test`
# (hours on 2 cores; tests/test_menagerie.py runs a sample). Resumes: models already in the report are skipped;
# MENAGERIE_ARGS="--again" reruns them, "--only timm/resnet18 ..." picks some.
menagerie: $(STAMP)
	$(PY) -m tests.menagerie $(MENAGERIE_ARGS)

# Where the suite's time goes: make test's pytest run with tests/durations.py, its table in tests/durations.md
# (by notebook, by test file, fixed waits, who executes each notebook how often).
durations: $(STAMP) inductor-cache
	$(PY) -m pytest -p tests.durations --durations-table tests/durations.md $(PYTEST_PARALLEL) $(PYTEST_ARGS)

# The whole suite on every Python 3.10-3.13 this machine has, each in .venv-matrix/<version>; the table is
# printed and written to matrix/README.md. PYTHONS="python3.10 /usr/bin/python3.11" names them instead;
# MATRIX_ARGS="--second --pytest-args notebooks" is CI's run (the oldest interpreter besides $(PYTHON)).
matrix: inductor-cache
	$(PYTHON) tests/matrix.py --default $(PYTHON) $(if $(PYTHONS),--pythons "$(PYTHONS)") $(MATRIX_ARGS)

# Line coverage of nbhelpers from the pytest part of `make test`: the unit tests and every notebook's kernel
# (and the processes those start), combined; the figure is in the README. Not part of `make test` (slower).
# --cov=nbhelpers and an absolute --cov-config are what nbval hands to each kernel's coverage (pyproject.toml,
# [tool.coverage.run]). Data saved after pytest-cov's own combine (a process that outlived the session) is
# added by the last combine, so the table at the end is the figure.
COVERAGE_DIR := build/coverage
coverage: $(STAMP)
	rm -rf $(COVERAGE_DIR) && mkdir -p $(COVERAGE_DIR)
	COVERAGE_FILE=$(CURDIR)/$(COVERAGE_DIR)/.coverage $(PY) -m pytest --cov=nbhelpers \
		--cov-config=$(CURDIR)/pyproject.toml --cov-report= $(PYTEST_ARGS)
	-$(VENV)/bin/coverage combine --append -q --data-file=$(COVERAGE_DIR)/.coverage $(COVERAGE_DIR)
	$(VENV)/bin/coverage report --data-file=$(COVERAGE_DIR)/.coverage

# Re-execute notebooks in place to refresh their stored outputs: make execute [NB=notebooks/00_environment.ipynb]
execute: $(STAMP) inductor-cache
	$(PY) -m nbhelpers execute $(NB)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --ignore-scripts

# A static site under build/site (SITE=... elsewhere) that renders offline, widgets included (needs Node.js
# for npm). A view whose widget state a notebook lacks shows its stored picture, and is named.
SITE ?= build/site
html: $(STAMP) node_modules/.package-lock.json
	$(PY) -m nbhelpers html --out $(SITE) $(NB)

doctor: $(STAMP)
	$(PY) -m nbhelpers doctor

# PyTorch's own report of notebook 05's compiles: TORCH_TRACE logs read by tlparse (a self-contained binary
# from PyPI, pinned with the test extras); open build/trace/report/index.html in a browser.
trace: $(STAMP)
	rm -rf build/trace
	TORCH_TRACE=build/trace/logs $(PY) -m nbhelpers._tools.trace_examples
	$(VENV)/bin/tlparse build/trace/logs/* -o build/trace/report --no-browser --overwrite > /dev/null
	@echo "wrote build/trace/report/index.html"

# The myth index's probes (claims/probes/) on another torch, in a venv of its own (.venv-claims-VERSION); writes
# claims/torch-VERSION.md, then `make index` redraws notebooks/README.md from the committed reports. The probes
# need only torch; torchvision, when a release of it is known to match, settles one row. PyPI's torchvision needs
# PyPI's torch build: a local "+cpu" file of the same release cannot host its operators, so that file is excluded.
# torch 2.1 was built against NumPy 1. It downloads that torch once; not part of `make test`.
CLAIMS_TORCH ?= 2.1.2
TORCHVISION_OF := 2.1.2=0.16.2 2.12.1=0.27.1 2.13.0=0.28.0 2.14.1=0.29.1
CLAIMS_TORCHVISION ?= $(patsubst $(CLAIMS_TORCH)=%,%,$(filter $(CLAIMS_TORCH)=%,$(TORCHVISION_OF)))
CLAIMS_VENV = .venv-claims-$(CLAIMS_TORCH)
claims:
	@test -x $(CLAIMS_VENV)/bin/python || $(PYTHON) -m venv $(CLAIMS_VENV)
	$(CLAIMS_VENV)/bin/python -m pip install -q "torch==$(CLAIMS_TORCH)" "torch!=$(CLAIMS_TORCH)+cpu" \
		$(if $(CLAIMS_TORCHVISION),"torchvision==$(CLAIMS_TORCHVISION)") \
		$(if $(filter 2.1.%,$(CLAIMS_TORCH)),"numpy<2") $(PIP_QUIET)
	$(CLAIMS_VENV)/bin/python -m claims.probes --out claims/torch-$(CLAIMS_TORCH).md

index: $(STAMP)
	$(PY) -m claims.probes --index notebooks/README.md

clean:
	rm -rf build data/cache
