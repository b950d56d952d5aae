"""Fixtures of the site tests: the built site (once per run, shared by xdist workers) and a
headless Chromium with the network off. Their helpers are in tests/book/site_support.py."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.book.site_support import BUILD, HTML, _browser_paths, _build_site


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
    paths = _browser_paths()
    if paths is None:
        message = "Chromium and chromedriver are needed (Debian packages chromium, chromium-driver; `make browser`)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message + "; under CI=true the browser test must run")
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager fetch anything
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = Options()
    options.binary_location = paths[0]
    for argument in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        # No network: every connection goes to a closed local port, every name fails.
        "--proxy-server=127.0.0.1:9",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        "--window-size=1280,1500",
        "--hide-scrollbars",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(paths[1]), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
