"""A small Sphinx extension that keeps the built site self-contained (loaded from _config.yml).

On every HTML page it

* drops sphinx-thebe's script and its inline configuration: live code via Thebe is
  switched off in _config.yml (it would need Binder, so a network), yet jupyter-book
  loads the extension anyway, and it writes its inline configuration twice, which
  throws "Identifier 'THEBE_JS_URL' has already been declared" in the browser;
* removes inline scripts that appear twice;
* warns (an error, as the build runs with warnings as errors) if a page would load a
  script or stylesheet from another host;
* loads ``sidebar_toggles.js`` (tools/, copied to vendor/ by build_book.py), which makes
  the themes' duplicate sidebar toggles work on phones, ``figure_links.js``, which lets a
  reader open any figure at full size, and ``site.css`` (one search box);
* points the rocket's Colab and Binder buttons at a chapter's Colab edition (notebooks/colab/);
* names what a folded code cell holds on its toggle ("Show the Colab setup cell", "Show the checks
  of the text", "Show the solution") instead of myst-nb's "Show code cell source" on all of them;
* removes the exercise generator's ``# BEGIN SOLUTION`` / ``# END SOLUTION`` lines from
  the code a reader sees. The chapters keep them (tools/notebooks/generate_exercises.py reads them);
  the website does not show them. (nbval's instructions are cell tags, so no code line
  carries them; tests/book/test_notebooks.py keeps it that way.)
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms.post_transforms import SphinxPostTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)


def _is_thebe(script: Any) -> bool:
    filename = getattr(script, "filename", None) or ""
    body = getattr(script, "attributes", {}).get("body", "") or ""
    return "sphinx-thebe" in filename or "THEBE_JS_URL" in body


def _is_remote(filename: str | None) -> bool:
    return bool(filename) and ("://" in filename or filename.startswith("//"))


def clean_page_assets(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = list(context.get("script_files", []))
    kept: list[Any] = []
    seen_bodies: set[str] = set()
    for script in scripts:
        if _is_thebe(script):
            continue
        body = getattr(script, "attributes", {}).get("body")
        if getattr(script, "filename", None) is None and body:
            if body in seen_bodies:
                continue
            seen_bodies.add(body)
        kept.append(script)

    for script in kept:
        if _is_remote(getattr(script, "filename", None)):
            logger.warning("page %s would load a script from another host: %s", pagename, script.filename)
    for stylesheet in context.get("css_files", []):
        if _is_remote(getattr(stylesheet, "filename", None)):
            logger.warning("page %s would load a stylesheet from another host: %s", pagename, stylesheet.filename)
    context["script_files"] = kept


SCAFFOLDING = re.compile(r"^\s*# (BEGIN SOLUTION|END SOLUTION)\s*$")


def strip_scaffolding(source: str) -> str:
    """The code without the exercise generator's solution markers (and no leading blank lines)."""
    kept = [line for line in source.split("\n") if not SCAFFOLDING.match(line)]
    while kept and not kept[0].strip():
        kept.pop(0)
    return "\n".join(kept)


def hide_scaffolding(app: Sphinx, doctree: Any, docname: str) -> None:
    for block in doctree.findall(nodes.literal_block):
        parent = block.parent
        if parent is None or "cell_input" not in parent.get("classes", []):
            continue
        text = block.astext()
        cleaned = strip_scaffolding(text)
        if cleaned != text:
            block.children = [nodes.Text(cleaned)]
            block.rawsource = cleaned


# What a folded code cell's toggle says, by what the cell is (myst-nb's default is "Show code cell
# source" on every one of them: the Colab setup, the checks of the prose and the solutions alike).
TOGGLE_LABELS = [
    # (test on the cell's tags and source, shown, hidden)
    (lambda tags, source: "colab-setup" in tags, "Show the Colab setup cell", "Hide the Colab setup cell"),
    (lambda tags, source: source.lstrip().startswith("# Checks"), "Show the checks of the text", "Hide the checks"),
    (lambda tags, source: "# BEGIN SOLUTION" in source, "Show the solution", "Hide the solution"),
    (lambda tags, source: source.lstrip().startswith("# Provenance"), "Show the provenance", "Hide the provenance"),
]


def toggle_label(tags: list[str], source: str) -> tuple[str, str] | None:
    """(shown, hidden) for a folded cell's toggle, or None to keep myst-nb's own."""
    for test, shown, hidden in TOGGLE_LABELS:
        if test(tags, source):
            return shown, hidden
    return None


class LabelToggles(SphinxPostTransform):
    """Name what a folded code cell holds on its toggle (before myst-nb's HideInputCells, priority 199)."""

    default_priority = 150
    formats = ("html",)

    def run(self, **kwargs: Any) -> None:
        for node in self.document.findall(nodes.container):
            if node.get("nb_element") != "cell_code" or not node.get("hide_mode"):
                continue
            tags = list((node.get("cell_metadata") or {}).get("tags", []))
            blocks = list(node.findall(nodes.literal_block))
            label = toggle_label(tags, blocks[0].astext() if blocks else "")
            if label:
                node["prompt_show"], node["prompt_hide"] = label


CHAPTER_PATH = re.compile(r"notebooks/(\d\d_[\w-]+\.ipynb)")


def launch_the_colab_edition(app: Sphinx, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    """The rocket's Colab and Binder buttons open a chapter's Colab edition (notebooks/colab/, portable
    markdown that Colab and JupyterLab render), as the chapter's badge does, not its MyST source."""
    for group in context.get("header_buttons", []) or []:
        if group.get("label") != "launch-buttons":
            continue
        for button in group.get("buttons", []):
            if button.get("text") in ("Colab", "Binder") and button.get("url"):
                button["url"] = CHAPTER_PATH.sub(r"notebooks/colab/\1", button["url"])


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_post_transform(LabelToggles)
    # After sphinx-book-theme adds the launch buttons (priority 501).
    app.connect("html-page-context", launch_the_colab_edition, priority=800)
    app.connect("doctree-resolved", hide_scaffolding)
    # Our fix for the themes' sidebar toggles (tools/site/sidebar_toggles.js, copied to vendor/).
    app.add_js_file("sidebar_toggles.js", loading_method="defer")
    # Figures open at full size on a click; one search box (tools/site/figure_links.js, tools/site/site.css).
    app.add_js_file("figure_links.js", loading_method="defer")
    app.add_css_file("site.css")
    # After every other handler (myst-nb adds the widget scripts at the default 500).
    app.connect("html-page-context", clean_page_assets, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
