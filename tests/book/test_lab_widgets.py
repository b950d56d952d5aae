"""Chapter 1 in a real JupyterLab (issue 20): JupyterLab started from the project's environment
with `make lab`'s settings, the chapter run in headless Chromium, the widget's sentence changed
(a round trip to the kernel) and the drawing seen to change; then the notebook saved, its kernel
shut down, reopened, and the widget seen drawing the last picture (never "model not found")."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.book.lab_support import (
    JUPYTER,
    ROOT,
    chromium,
    jupyter_lab,
    open_notebook,
    run_all,
    save,
    shut_down_and_close,
    widgets_drawn,
)

CHAPTER = ROOT / "notebooks" / "01_attention_math.ipynb"

pytestmark = pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "jupyter-lab").exists() or not JUPYTER.exists(),
    reason="needs the lab extra (make test installs it)",
)

# Types a new sentence into the widget (Enter = a change event), then waits for the kernel's
# numbers to come back and the picture to change.
_CHANGE_SENTENCE = r"""
const done = arguments[arguments.length - 1];
const widget = document.querySelector('.ab-widget[data-kind="attention"]');
const box = widget.querySelector('input[name="sentence"]');
const before = widget.querySelector(".ab-picture svg").innerHTML;
const frames = Number(widget.dataset.frames);
const words = box.value.split(" ");
const sentence = words.slice().reverse().join(" ");
box.value = sentence;
box.dispatchEvent(new Event("change", { bubbles: true }));
const start = performance.now();
(function poll() {
  if (Number(widget.dataset.frames) > frames) {
    return done({ sentence, changed: widget.querySelector(".ab-picture svg").innerHTML !== before,
                  ms: performance.now() - start, error: widget.querySelector(".ab-error:not(:empty)") ? "shown" : "" });
  }
  if (performance.now() - start > 20000) return done({ sentence, timeout: true });
  setTimeout(poll, 5);
})();
"""

_SENTENCE_SHOWN = r"""
const widget = document.querySelector('.ab-widget[data-kind="attention"]');
return widget ? widget.querySelector('input[name="sentence"]').value : null;
"""


@pytest.fixture(scope="module")
def browser():
    try:
        with chromium() as driver:
            yield driver
    except RuntimeError as error:
        pytest.skip(str(error))


def test_chapter_1_runs_in_jupyterlab_its_widget_edits_a_sentence_and_reopens_with_its_picture(browser, tmp_path):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    shutil.copy2(CHAPTER, folder / CHAPTER.name)
    shutil.copytree(ROOT / "img", tmp_path / "img")  # the badge the chapter links to
    with jupyter_lab(folder, tmp_path) as (base, token):
        open_notebook(browser, base, token, CHAPTER.name)
        run_all(browser)
        drawn = widgets_drawn(browser, ["attention"])
        assert not drawn["missing"] and not drawn["broken"], drawn

        edit = browser.execute_async_script(_CHANGE_SENTENCE)
        assert edit.get("changed") and not edit.get("error"), edit

        save(browser)
        saved = json.loads((folder / CHAPTER.name).read_text())
        states = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        sentences = [
            model["state"]["inputs"]["sentence"]
            for model in states.values()
            if model["state"].get("kind") == "attention"
        ]
        assert sentences == [edit["sentence"]], "the saved widget state must hold the edited sentence"
        shut_down_and_close(browser)

        open_notebook(browser, base, token, CHAPTER.name, kernel=False)
        reopened = widgets_drawn(browser, ["attention"])
        assert not reopened["missing"] and not reopened["broken"], reopened
        assert browser.execute_script(_SENTENCE_SHOWN) == edit["sentence"]
