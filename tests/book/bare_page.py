"""A bare page that draws saved widgets as the website does, without building the site (issue 46).

``write_bare_page(folder, states)`` writes ``folder/page.html`` with one widget per saved state (as a chapter
saves it: the traits the page reads, without ``_esm``), the widgets' module inlined, and ``folder/vendor/``
holding what the site serves beside its pages: tools/site/widgets_offline.js (which tells the widgets they
are on the website and where the scripts below are), onnxruntime-web as build_book writes it, and the models
the pages load on demand (chapter 7's MiniLM, attention_book.widgets.pretrained_page). Opened from file://,
it is what a chapter's page is to its widgets, in a second: no jupyter-book, no widget manager, no MathJax.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from tests.helpers import ROOT

SITE_TOOLS = ROOT / "tools" / "site"


def _build_book():
    """tools/site/build_book.py as a module (its vendor helpers)."""
    spec = importlib.util.spec_from_file_location("build_book", SITE_TOOLS / "build_book.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_vendor(folder: Path, *, page_models: Path | None = None) -> Path:
    """``folder/vendor/``: widgets_offline.js, onnxruntime-web and the page models (copied from ``page_models``,
    a folder written by tools/site/page_models.py, or written now). Returns the vendor folder."""
    build_book = _build_book()
    vendor = folder / "vendor"
    vendor.mkdir(parents=True, exist_ok=True)
    shutil.copy2(SITE_TOOLS / "widgets_offline.js", vendor / "widgets_offline.js")
    build_book._copy_onnxruntime(vendor / "onnxruntime-web")
    if page_models is None:
        build_book._write_page_models(vendor / build_book.PAGE_MODELS)
    else:
        shutil.copytree(page_models, vendor / build_book.PAGE_MODELS, dirs_exist_ok=True)
    return vendor


# Draws each saved state into its own box with anywidget's render({ model, el }), the model a stand-in that
# reads the saved traits (the page has no kernel to tell anything).
RENDER = """
const states = JSON.parse(document.getElementById("states").textContent);
for (const state of states) {
  const values = { ...state };
  const model = { get: (name) => values[name], set: (name, value) => { values[name] = value; },
    save_changes() {}, on() {}, off() {} };
  const el = document.createElement("div");
  document.getElementById("widgets").appendChild(el);
  render({ model, el });
}
"""


def write_bare_page(folder: Path, states: list[dict]) -> Path:
    """``folder/page.html`` drawing ``states`` (the vendor folder must be there: :func:`write_vendor`)."""
    from attention_book.widgets._base import widget_module_source

    module = (widget_module_source() + "\n" + RENDER).replace("</script", "<\\/script")
    text = json.dumps(states).replace("</", "<\\/")
    page = folder / "page.html"
    page.write_text(
        "<!doctype html>\n<html><head><meta charset='utf-8'><title>widgets</title>\n"
        "<script src='vendor/widgets_offline.js'></script></head>\n"
        "<body style='width: 760px'><div id='widgets'></div>\n"
        f"<script type='application/json' id='states'>{text}</script>\n"
        f"<script type='module'>\n{module}\n</script>\n</body></html>\n",
        encoding="utf-8",
    )
    return page


def saved_state(widget) -> dict:
    """What a chapter saves of ``widget`` for the page: its synced traits, without the module."""
    state = widget.get_state()
    state.pop("_esm", None)
    return json.loads(json.dumps(state))
