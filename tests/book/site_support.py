"""What the site tests share: where the build goes, building it, and a browser's page helpers.

The fixtures ``site`` (the built site, once per run) and ``browser`` (headless Chromium,
offline) are in tests/book/conftest.py; the functions they and the tests use are here, with
``headless_chromium``, the one builder of the tests' browsers (the JupyterLab tests' too).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import ROOT

BUILD = ROOT / "_build"
HTML = BUILD / "html"
ARTIFACTS = ROOT / "tests" / "artifacts"

# Console messages at level SEVERE that the browser test tolerates, each with its reason.
# Keep this list short: every entry is a known, understood, harmless message.
ALLOWED_BROWSER_ERRORS: list[tuple[str, str]] = [
    # (regular expression, reason)
]


def _build_site() -> None:
    """Build the site from a clean tree (keeping only the execution cache) into _build/html."""
    for stale in (HTML, BUILD / ".doctrees", BUILD / "jupyter_execute", ROOT / "vendor"):
        shutil.rmtree(stale, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / "build.log"
    start = time.perf_counter()
    with log.open("w") as handle:
        completed = subprocess.run(
            # Executed as on another machine, where a reader trains every seed of chapters 4 and 6
            # (ATTENTION_BOOK_SEEDS=train): every statement of theirs must hold for such a reader.
            # nbval runs the chapters in this machine's configuration, with the stored seeds.
            [
                sys.executable,
                str(ROOT / "tools" / "site" / "build_book.py"),
                str(BUILD),
                "--other-machine",
                "--train-seeds",
            ],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    seconds = time.perf_counter() - start
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert completed.returncode == 0, f"the site did not build (log: {log}):\n{tail}"
    print(f"site built in {seconds:.0f} s")


def build_site_once(run: str | None) -> Path:
    """Build the site once per test run, whichever process asks first.

    The builder holds a lock on ``_build/.site.lock`` and leaves the run's id beside it
    (``_build/.site-built-for-run``); a process of the same run that finds that id reuses the
    build. With pytest-xdist, the run's controller starts building before the workers start
    (tests/conftest.py, :func:`start_background_build`), so the site is ready by the time the
    site tests, which run last, need it; a run without xdist builds when a test first asks.
    """
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


def start_background_build(run: str) -> subprocess.Popen:
    """Start :func:`build_site_once` for ``run`` in a process of its own (its output: the build log)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.book.site_support", run],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(ARTIFACTS / "background-build.log").open("w"),
    )


def _pages(site: Path) -> list[Path]:
    return sorted(path for path in site.rglob("*.html") if "_static" not in path.parts)


def _browser_paths() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    return (chromium, driver) if chromium and driver else None


BROWSER_MISSING = "Chromium and chromedriver are needed (Debian packages chromium, chromium-driver; `make browser`)"


@contextlib.contextmanager
def headless_chromium(
    *,
    width: int = 1280,
    height: int = 1500,
    names_resolve: bool = True,
    console_log: bool = False,
    timeout_s: float = 60,
    profile_prefix: str = "chromium-profile-",
    extra_arguments: tuple[str, ...] = (),
):
    """Headless Chromium driven by selenium, with no network: the one builder of the tests' browsers.

    Every connection goes through a proxy on a closed local port; loopback bypasses proxies, so
    127.0.0.1 (a JupyterLab the test started) is reachable and nothing else is. What differs
    between the two users, the site's ``browser`` fixture (tests/book/conftest.py) and
    JupyterLab's ``chromium`` (tests/book/lab_support.py), is a parameter:

    * ``names_resolve=False`` also makes every host name fail to resolve (the built site is
      read from ``file://`` and must not even look a name up);
    * ``console_log=True`` keeps the page's console messages for ``driver.get_log("browser")``;
    * ``timeout_s`` bounds a page load and an asynchronous script (a JupyterLab page takes longer);
    * ``profile_prefix`` names the throw-away profile folder (removed on exit);
    * ``extra_arguments``: more command-line switches (e.g. ``--js-flags=--jitless``, a
      browser without WebAssembly).

    Raises RuntimeError when Chromium or chromedriver is not installed (see ``_browser_paths``).
    """
    import tempfile

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    paths = _browser_paths()
    if paths is None:
        raise RuntimeError(BROWSER_MISSING)
    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager fetch anything
    profile = tempfile.mkdtemp(prefix=profile_prefix)
    options = Options()
    options.binary_location = paths[0]
    arguments = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--proxy-server=127.0.0.1:9",  # every connection but loopback goes to a closed port
        f"--window-size={width},{height}",
        "--hide-scrollbars",
    ]
    if not names_resolve:
        arguments.append("--host-resolver-rules=MAP * ~NOTFOUND")  # and every name fails
    arguments += list(extra_arguments)
    for argument in arguments:
        options.add_argument(argument)
    if console_log:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(service=Service(paths[1]), options=options)
    except BaseException:
        shutil.rmtree(profile, ignore_errors=True)
        raise
    driver.set_page_load_timeout(timeout_s)
    driver.set_script_timeout(timeout_s)
    # chromedriver enforces those two itself; this is how long Python waits for its answer, which
    # must outlast the longest script timeout a test sets (lab_support.run_all: up to 330 s), or a
    # slow run on a loaded machine fails with selenium's default 120 s read timeout instead.
    driver.command_executor.client_config.timeout = max(600, timeout_s + 60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


WAIT_FOR_PAGE = """
const done = arguments[arguments.length - 1];
const start = Date.now();
const widgetViews = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
function waitForWidgets() {
  // The widget manager renders after RequireJS has loaded it; give it up to 20 s.
  if (!widgetViews || document.querySelector(".jupyter-widgets") || Date.now() - start > 20000) {
    const mj = window.MathJax;
    // Widget labels are typeset after MathJax's first pass (tools/site/widgets_offline.js).
    const settle = mj && mj.startup && mj.startup.promise ? mj.startup.promise : Promise.resolve();
    settle.then(() => setTimeout(() => done("ready"), 500), (e) => done("error: " + e));
  } else {
    setTimeout(waitForWidgets, 100);
  }
}
(function poll() {
  const mj = window.MathJax;
  if (mj && mj.startup && mj.startup.promise) {
    mj.startup.promise.then(waitForWidgets, (e) => done("error: " + e));
  } else if (Date.now() - start > 30000) {
    done(document.querySelector(".math") ? "MathJax never started" : "no math");
  } else {
    setTimeout(poll, 100);
  }
})();
"""

PAGE_REPORT = """
const article = document.querySelector("article") || document.body;
const text = (() => {
  const copy = article.cloneNode(true);
  copy.querySelectorAll("pre, code, script, style").forEach((e) => e.remove());
  return copy.textContent;
})();
const visible = (e) => {
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden" && !e.closest("details:not([open])");
};
const images = Array.from(article.querySelectorAll("img")).filter(visible);
return {
  mathElements: document.querySelectorAll(".math").length,
  mathUntypeset: Array.from(document.querySelectorAll(".math")).filter((e) => !e.querySelector("mjx-container")).length,
  mjxContainers: document.querySelectorAll("mjx-container").length,
  rawDelimiters: (text.match(/\\\\\\(|\\\\\\[/g) || []).length,
  images: images.map((i) => ({src: i.currentSrc, complete: i.complete, naturalWidth: i.naturalWidth, width: i.getBoundingClientRect().width})),
  outputFigures: Array.from(article.querySelectorAll(".cell_output img, .cell_output svg")).filter(visible).length,
  widgetViews: document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length,
  renderedWidgets: document.querySelectorAll(".jupyter-widgets").length,
  networkResources: performance.getEntriesByType("resource").map((r) => r.name).filter((n) => /^https?:/.test(n)),
};
"""


def _load(driver, url: str) -> dict:
    driver.get(url)
    state = driver.execute_async_script(WAIT_FOR_PAGE)
    assert state in {"ready", "no math"}, f"{url}: {state}"
    return driver.execute_script(PAGE_REPORT)


def _severe_messages(driver) -> list[str]:
    messages = []
    for entry in driver.get_log("browser"):
        if entry["level"] != "SEVERE":
            continue
        if any(re.search(pattern, entry["message"]) for pattern, _reason in ALLOWED_BROWSER_ERRORS):
            continue
        messages.append(entry["message"])
    return messages


def _check_page(driver, url: str, *, expect_figure: bool) -> dict:
    report = _load(driver, url)
    errors = _severe_messages(driver)
    assert not errors, f"{url}: JavaScript errors or failed loads:\n" + "\n".join(errors)
    assert not report["networkResources"], f"{url} requested {report['networkResources']}"
    assert report["mathElements"] > 0, f"{url} has no maths to check"
    assert report["mjxContainers"] > 0 and report["mathUntypeset"] == 0, f"{url}: math not typeset: {report}"
    assert report["rawDelimiters"] == 0, f"{url}: raw \\( or \\[ left in the text"
    broken = [image for image in report["images"] if not image["complete"] or image["naturalWidth"] == 0]
    assert not broken, f"{url}: images that did not load: {broken}"
    if expect_figure:
        assert report["outputFigures"] > 0, f"{url}: no figure visible in the cell outputs"
    if report["widgetViews"]:
        assert report["renderedWidgets"] > 0, f"{url}: {report['widgetViews']} widget views, none rendered"
    return report


if __name__ == "__main__":  # python -m tests.book.site_support RUN_ID: what start_background_build runs
    build_site_once(sys.argv[1])
