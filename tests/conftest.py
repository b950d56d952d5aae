"""Shared test set-up.

`make test` runs the tests in parallel with pytest-xdist (one worker per CPU core). Each
worker and every notebook kernel it starts then gets one PyTorch thread: with as many
busy processes as cores, more threads per process only wait for each other (we measured
tiny models running several times slower that way). Results do not depend on it: the
chapters' checked outputs are the same with one thread or two.

The tests are grouped in folders: ``unit/`` (one file per library module),
``widgets/`` (one file per widget) and ``book/`` (notebooks, site, headers, packaging,
the exercise generator, the layout of the package). Every folder is a package
(``__init__.py``), so two folders may hold test files of the same name; paths come from
:mod:`tests.helpers` (``ROOT``), never from a test file's own location.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # read by torch at import, here and in every kernel

import pytest


@pytest.fixture
def one_thread():
    """Train on one CPU thread, as the chapters do: the sums then add up in the same order on
    every machine, so a run (and whether it reaches its target) does not depend on the core count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def page_models():
    """Widgets save a copy of their model for the website, as they do in the site build
    (``ATTENTION_BOOK_PAGE_MODELS=1``, set by tools/site/build_book.py)."""
    from attention_book.widgets._base import PAGE_MODELS_VARIABLE

    before = os.environ.get(PAGE_MODELS_VARIABLE)
    os.environ[PAGE_MODELS_VARIABLE] = "1"
    yield
    if before is None:
        os.environ.pop(PAGE_MODELS_VARIABLE, None)
    else:
        os.environ[PAGE_MODELS_VARIABLE] = before


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 in the book's Encoder (loaded once per worker; ``load_minilm`` caches it)."""
    from attention_book.pretrained import load_minilm

    return load_minilm()


# ---------------------------------------------------------------------------------------
# Scheduling (`make test` runs `pytest -n auto --dist worksteal`): the long tests first, longest
# first, so that no worker is left alone with a long test at the end (an idle worker steals
# pending tests from a busy one); the site tests last, by which time the site that the run's
# controller started building at once (tests/book/site_support.start_background_build) is ready.

# A guess for a test never timed here (a fresh clone): executing a notebook, a minute; starting a
# JupyterLab or building a Colab-like environment, half a minute. Once a run has finished, the
# durations it measured (kept in pytest's cache folder) order the next run instead.
SLOW_MODULES = {"test_lab_widgets.py", "test_colab_setup.py", "test_colab_chromium.py", "test_lab.py"}
DURATIONS_KEY = "attention_book/durations"


def first_guess(item) -> float:
    if item.get_closest_marker("nbval"):
        return 60.0
    return 30.0 if item.path.name in SLOW_MODULES else 0.0


def pytest_collection_modifyitems(config, items):
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    measured = cache.get(DURATIONS_KEY, {}) if cache else {}

    def order(item):
        if "site" in getattr(item, "fixturenames", ()):  # a notebook cell (nbval) has none
            return (1, 0.0)
        return (0, -measured.get(item.nodeid, first_guess(item)))

    items.sort(key=order)  # stable: ties keep the collection's order


def pytest_runtest_logreport(report):
    if report.when == "call":
        DURATIONS[report.nodeid] = round(report.duration, 2)


DURATIONS: dict[str, float] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """In the controller of an xdist run that includes the site tests: fix the run's id and start
    building the site now, beside the workers."""
    import uuid
    from pathlib import Path

    from tests.helpers import ROOT

    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    if config.option.collectonly or config.option.keyword or config.option.markexpr:
        return
    site_tests = ROOT / "tests" / "book"
    paths = [Path(argument.split("::")[0]).resolve() for argument in config.args]
    if not any(path == site_tests or path in site_tests.parents for path in paths):
        return
    config.option.testrunuid = config.option.testrunuid or uuid.uuid4().hex
    from tests.book.site_support import start_background_build

    config._site_build = start_background_build(config.option.testrunuid)


def pytest_sessionfinish(session):
    config = session.config
    if DURATIONS and getattr(config, "cache", None) and not hasattr(config, "workerinput"):
        config.cache.set(DURATIONS_KEY, {**config.cache.get(DURATIONS_KEY, {}), **DURATIONS})
    build = getattr(config, "_site_build", None)
    if build is not None and build.poll() is None:
        build.terminate()  # no site test ran (interrupted, or deselected): a later run builds again
        build.wait()
