"""Chapter 1 as a reader outside the website sees it, in headless Chromium.

* JupyterLab as ``make lab`` starts it (the target itself, on a free port): it opens on the Colab
  edition's folder, and in ``colab/01_attention_math.ipynb`` no markdown cell shows a raw MyST
  role or directive, and the first quiz's answer is hidden until its "Answer" is clicked.
* The same notebook as Colab shows it: each markdown cell rendered as CommonMark with HTML (what
  Colab's renderer accepts), the page opened from a file: the same two checks.

Screenshots before and after the click go to tests/artifacts/.
"""

from __future__ import annotations

import html
import json
import os
import re
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from tests.book.lab_support import chromium, free_port, open_notebook, stop_server
from tests.book.site_support import ARTIFACTS, _browser_paths
from tests.helpers import ROOT

CHAPTER = ROOT / "notebooks" / "colab" / "01_attention_math.ipynb"
RAW_MYST = re.compile(r"\{(cite|cite:t|cite:p|term|dropdown|note|admonition|glossary)\}")

pytestmark = pytest.mark.skipif(_browser_paths() is None, reason="needs chromium and chromedriver (make browser)")


# In the page: the markdown cells' rendered text (each brought into view, as JupyterLab renders
# only the cells near the viewport), and the index of the first cell holding a <details>.
_LAB_TEXTS = r"""
const done = arguments[arguments.length - 1];
const notebook = window.jupyterapp.shell.currentWidget.content;
const texts = [];
let first = -1;
(async () => {
  for (let i = 0; i < notebook.widgets.length; i += 1) {
    const cell = notebook.widgets[i];
    if (cell.model.type !== "markdown") continue;
    await notebook.scrollToItem(i);
    await new Promise((resolve) => setTimeout(resolve, 40));
    texts.push(cell.node.innerText);
    if (first < 0 && cell.node.querySelector("details")) first = i;
  }
  done({ texts, first });
})().catch((error) => done({ error: String(error) }));
"""

# In the page: is the first <details> block's answer visible? (a closed block renders only its summary)
_ANSWER_STATE = r"""
const root = arguments[0] === null ? document : window.jupyterapp.shell.currentWidget.content.widgets[arguments[0]].node;
const details = root.querySelector("details");
const answer = [...details.children].find((node) => node.tagName !== "SUMMARY");
details.scrollIntoView({ block: "center" });
// checkVisibility(): false inside a closed <details> (its content is display: none or content-visibility: hidden)
return { open: details.open, answerShown: answer.checkVisibility() && answer.offsetHeight > 0,
         summary: details.querySelector("summary").innerText, answer: answer.textContent.slice(0, 80) };
"""


def _click_summary(driver, cell_index) -> None:
    driver.execute_script(
        "const root = arguments[0] === null ? document : window.jupyterapp.shell.currentWidget.content.widgets[arguments[0]].node;"
        "root.querySelector('details > summary').click();",
        cell_index,
    )
    time.sleep(0.3)


def _check_answer_hidden_until_clicked(driver, cell_index, name: str) -> list[str]:
    problems = []
    before = driver.execute_script(_ANSWER_STATE, cell_index)
    driver.save_screenshot(str(ARTIFACTS / f"{name}_answer_closed.png"))
    if before["summary"].strip() != "Answer":
        problems.append(f"the first fold is labelled {before['summary']!r}, not 'Answer'")
    if before["open"] or before["answerShown"]:
        problems.append(f"the first answer is shown before a click: {before}")
    _click_summary(driver, cell_index)
    after = driver.execute_script(_ANSWER_STATE, cell_index)
    driver.save_screenshot(str(ARTIFACTS / f"{name}_answer_open.png"))
    if not (after["open"] and after["answerShown"]):
        problems.append(f"a click on 'Answer' did not show the answer: {after}")
    return problems


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, OSError):
        return 0  # not listening yet


@pytest.mark.skipif(
    shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "jupyter-lab").exists(),
    reason="needs make and the lab extra",
)
def test_make_lab_shows_the_colab_edition_with_folded_answers_and_no_raw_myst(tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    config = tmp_path / "config"
    config.mkdir()
    # window.jupyterapp, to reach the notebook's cells; everything else as `make lab` sets it
    (config / "jupyter_lab_config.json").write_text(json.dumps({"LabApp": {"expose_app_in_browser": True}}))
    env = dict(
        os.environ,
        JUPYTER_PORT=str(port),
        JUPYTER_TOKEN=token,
        JUPYTER_PORT_RETRIES="0",
        BROWSER="true",
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
    )
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        ["make", "lab"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and server.poll() is None and _get(f"{base}/api/status?token={token}") != 200:
            time.sleep(0.5)
        assert _get(f"{base}/api/status?token={token}") == 200, (tmp_path / "lab.log").read_text()[-3000:]
        with chromium(1280, 1200) as driver:
            driver.get(f"{base}/?token={token}")
            wait_until = time.monotonic() + 60
            while "/lab/tree/colab" not in driver.current_url and time.monotonic() < wait_until:
                time.sleep(0.25)
            assert "/lab/tree/colab" in driver.current_url, (
                f"make lab opened {driver.current_url}, not the Colab edition's folder"
            )
            open_notebook(driver, base, token, "colab/01_attention_math.ipynb", kernel=False)
            driver.set_script_timeout(120)
            rendered = driver.execute_async_script(_LAB_TEXTS)
            assert "error" not in rendered, rendered
            raw = [text[:120] for text in rendered["texts"] if RAW_MYST.search(text)]
            assert not raw, f"markdown cells show raw MyST in JupyterLab: {raw[:3]}"
            assert rendered["first"] >= 0, "no <details> answer rendered in JupyterLab"
            problems = _check_answer_hidden_until_clicked(driver, rendered["first"], "lab_01")
            assert not problems, "\n".join(problems)
    finally:
        stop_server(server, log)


def colab_like_page(notebook_path: Path, target: Path) -> Path:
    """An HTML page of a notebook as Colab shows it: markdown cells as CommonMark with HTML, code as text."""
    notebook = nbformat.read(notebook_path, as_version=4)
    parser = MarkdownIt("commonmark")  # html allowed, as in Colab and Jupyter front ends
    parts = []
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            parts.append(f'<div class="markdown">{parser.render(cell.source)}</div>')
        elif cell.cell_type == "code":
            parts.append(f'<pre class="code">{html.escape(cell.source)}</pre>')
    target.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Colab-like view</title>"
        "<style>body{font-family:sans-serif;max-width:900px;margin:auto} pre.code{background:#f5f5f5}</style></head>"
        f"<body>{''.join(parts)}</body></html>",
        encoding="utf-8",
    )
    return target


def test_the_colab_edition_as_colab_shows_it_folds_answers_and_shows_no_raw_myst(browser, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = colab_like_page(CHAPTER, tmp_path / "colab_01.html")
    browser.get(page.as_uri())
    texts = browser.execute_script("return [...document.querySelectorAll('.markdown')].map((node) => node.innerText)")
    raw = [text[:120] for text in texts if RAW_MYST.search(text)]
    assert not raw, f"markdown cells show raw MyST: {raw[:3]}"
    problems = _check_answer_hidden_until_clicked(browser, None, "colab_01")
    assert not problems, "\n".join(problems)
