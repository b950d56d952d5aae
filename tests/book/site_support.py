"""What the site tests share: where the build goes, building it, and a browser's page helpers.

The fixtures ``site`` (the built site, once per run) and ``browser`` (headless Chromium,
offline) are in tests/book/conftest.py; the functions they and the tests use are here.
"""

from __future__ import annotations

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
            # executed as on another machine: nbval runs the chapters in the native configuration
            [sys.executable, str(ROOT / "tools" / "build_book.py"), str(BUILD), "--other-machine"],
            cwd=ROOT,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    seconds = time.perf_counter() - start
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert completed.returncode == 0, f"the site did not build (log: {log}):\n{tail}"
    print(f"site built in {seconds:.0f} s")


def _pages(site: Path) -> list[Path]:
    return sorted(path for path in site.rglob("*.html") if "_static" not in path.parts)


def _browser_paths() -> tuple[str, str] | None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists() else None
    )
    return (chromium, driver) if chromium and driver else None


WAIT_FOR_PAGE = """
const done = arguments[arguments.length - 1];
const start = Date.now();
const widgetViews = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
function waitForWidgets() {
  // The widget manager renders after RequireJS has loaded it; give it up to 20 s.
  if (!widgetViews || document.querySelector(".jupyter-widgets") || Date.now() - start > 20000) {
    const mj = window.MathJax;
    // Widget labels are typeset after MathJax's first pass (tools/widgets_offline.js).
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
