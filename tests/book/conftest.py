"""Fixtures of the site tests: the built site (once per run, shared by xdist workers) and a
headless Chromium with the network off. Their helpers are in tests/book/site_support.py."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests.book.site_support import BROWSER_MISSING, BUILD, HTML, _browser_paths, _build_site, headless_chromium


@pytest.fixture(scope="session")
def site() -> Path:
    """Build the site once per test run, even when pytest-xdist workers share the tests.

    The first worker to get here builds while holding a lock on _build/.site.lock and
    leaves the run's id (PYTEST_XDIST_TESTRUNUID) beside it; a worker that finds that id
    reuses the build. (xdist's ``--dist loadgroup``, which would keep these tests on one
    worker, does not group them under pytest 9.)
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    BUILD.mkdir(parents=True, exist_ok=True)
    marker = BUILD / ".site-built-for-run"
    with (BUILD / ".site.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if run and marker.is_file() and marker.read_text() == run and (HTML / "index.html").is_file():
            return HTML
        marker.unlink(missing_ok=True)
        _build_site()
        if run:
            marker.write_text(run)
    return HTML


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for the built site: no network and no name resolves, its console kept."""
    if _browser_paths() is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(BROWSER_MISSING + "; under CI=true the browser test must run")
        pytest.skip(BROWSER_MISSING)
    with headless_chromium(names_resolve=False, console_log=True, timeout_s=60) as driver:
        yield driver
