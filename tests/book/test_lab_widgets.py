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


# -- the head viewer's menu of sentences (chapter 7's), with a kernel: choosing one runs the model ----
MENU_NOTEBOOK_CODE = """\
import torch
import attention_book as ab
from attention_book.data.tasks import word_encoder
from attention_book.widgets import HeadViewer

words = "the cat sat on a mat while dog ran to park and it was sunny".split()
encode = word_encoder(["<pad>", *words], max_len=12)
torch.manual_seed(0)
model = ab.Encoder(len(words) + 1, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=12).eval()
HeadViewer(model, encode, "the cat sat on a mat", examples=["the dog ran to the park", "it was sunny"])
"""

# Chooses `sentence` in the menu and waits for the kernel's picture; reads the menu, the box and the grid's labels.
_CHOOSE = r"""
const done = arguments[arguments.length - 1];
const sentence = arguments[0];
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const menu = widget.querySelector('select[name="example"]');
const frames = Number(widget.dataset.frames);
menu.value = JSON.stringify(sentence);
menu.dispatchEvent(new Event("change", { bubbles: true }));
const start = performance.now();
(function poll() {
  if (Number(widget.dataset.frames) > frames) {
    const grid = widget.querySelector(".ab-picture svg > g");
    return done({
      rows: Array.from(grid.querySelectorAll("text.ab-row-label"), (t) => t.textContent).slice(0, 12),
      box: widget.querySelector('input[name="sentence"]').value, disabled: widget.querySelector('input[name="sentence"]').disabled,
      menu: JSON.parse(menu.value), options: Array.from(menu.options, (o) => JSON.parse(o.value)),
      note: widget.querySelector(".ab-note").textContent, ms: performance.now() - start,
    });
  }
  if (performance.now() - start > 20000) return done({ timeout: true });
  setTimeout(poll, 5);
})();
"""


def test_in_jupyterlab_the_head_viewers_menu_runs_the_model_on_the_chosen_sentence(browser, tmp_path):
    import nbformat

    folder = tmp_path / "notebooks"
    folder.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(MENU_NOTEBOOK_CODE)]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, folder / "menu.ipynb")
    with jupyter_lab(folder, tmp_path) as (base, token):
        open_notebook(browser, base, token, "menu.ipynb")
        run_all(browser)
        drawn = widgets_drawn(browser, ["heads"])
        assert not drawn["missing"] and not drawn["broken"], drawn
        chosen = browser.execute_async_script(_CHOOSE, "the dog ran to the park")
        assert not chosen.get("timeout"), chosen
        assert chosen["options"] == [None, "the cat sat on a mat", "the dog ran to the park", "it was sunny"]
        assert chosen["rows"] == "the dog ran to the park".split(), chosen  # the kernel's answer, drawn
        assert chosen["box"] == chosen["menu"] == "the dog ran to the park" and not chosen["disabled"]
        assert chosen["note"] == "", chosen  # with a kernel, nothing is fixed
        save(browser)
        saved = json.loads((folder / "menu.ipynb").read_text())
        states = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
        (state,) = [model["state"] for model in states.values() if model["state"].get("kind") == "heads"]
        assert state["inputs"]["sentence"] == "the dog ran to the park"
        assert json.loads(state["payload"])["labels"] == "the dog ran to the park".split()
        shut_down_and_close(browser)
