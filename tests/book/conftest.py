"""Fixtures of the site tests: the built site (once per run, shared by xdist workers) and a
headless Chromium with the network off. Their helpers are in tests/book/site_support.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.book.site_support import BROWSER_MISSING, _browser_paths, build_site_once, headless_chromium


@pytest.fixture(scope="session")
def site() -> Path:
    """The site, built once per test run even when pytest-xdist workers share the tests
    (site_support.build_site_once: a lock, and the run's id beside the build)."""
    return build_site_once(os.environ.get("PYTEST_XDIST_TESTRUNUID"))


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium for the built site: no network and no name resolves, its console kept."""
    if _browser_paths() is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(BROWSER_MISSING + "; under CI=true the browser test must run")
        pytest.skip(BROWSER_MISSING)
    with headless_chromium(names_resolve=False, console_log=True, timeout_s=60) as driver:
        yield driver
