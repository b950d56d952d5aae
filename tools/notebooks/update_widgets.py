"""Rewrite the widgets' JavaScript saved in the notebooks: ``python tools/notebooks/update_widgets.py`` (``make widgets``).

Every saved widget carries the module it is drawn with (``_esm`` in the notebook's widget state,
``attention_book.widgets._base.widget_module_source()``), so a saved chapter draws without a kernel
in JupyterLab and on the book's website. After an edit of ``src/attention_book/widgets/js/``, this
replaces that saved text in every chapter, Colab edition and student notebook with the current
module, without executing anything: the file's other bytes (outputs, execution counts, figures,
the rest of the widget state) stay as they were. The result is checked by parsing the rewritten
file: it must equal the old notebook with only ``_esm`` replaced.

``--check`` only reports the notebooks whose saved module is stale (exit status 1 if any).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("notebooks", "notebooks/colab", "notebooks/exercises")
STATE_KEY = "application/vnd.jupyter.widget-state+json"


def saved_modules(notebook: dict) -> list[dict]:
    """The saved states of the notebook's widgets that carry a module (``_esm``)."""
    states = notebook.get("metadata", {}).get("widgets", {}).get(STATE_KEY, {}).get("state", {})
    return [model["state"] for model in states.values() if "_esm" in model.get("state", {})]


def _encodings(text: str) -> list[str]:
    """How a JSON writer may have written ``text`` (nbformat writes non-ASCII characters as they are)."""
    return [json.dumps(text, ensure_ascii=False), json.dumps(text)]


def refreshed(raw: str, source: str) -> str:
    """The notebook text ``raw`` with every saved module replaced by ``source``; the rest byte for byte."""
    notebook = json.loads(raw)
    old = {state["_esm"] for state in saved_modules(notebook) if state["_esm"] != source}
    text = raw
    for module in old:
        for encoded in _encodings(module):
            text = text.replace(f'"_esm": {encoded}', f'"_esm": {json.dumps(source, ensure_ascii=False)}')
    expected = json.loads(raw)
    for state in saved_modules(expected):
        state["_esm"] = source
    if json.loads(text) != expected:
        raise ValueError("the saved modules could not be replaced in place (an unexpected JSON layout)")
    return text


def notebooks(root: Path) -> list[Path]:
    return [path for folder in FOLDERS for path in sorted((root / folder).glob("*.ipynb"))]


def update(paths: list[Path], source: str, *, check: bool = False) -> list[Path]:
    """The notebooks whose saved module differs from ``source``; rewritten unless ``check``."""
    stale = []
    for path in paths:
        raw = path.read_text(encoding="utf-8")
        if all(state["_esm"] == source for state in saved_modules(json.loads(raw))):
            continue
        stale.append(path)
        if not check:
            path.write_text(refreshed(raw, source), encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report the notebooks holding an older module")
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (its notebooks/ folders)")
    arguments = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from attention_book.widgets._base import widget_module_source

    stale = update(notebooks(arguments.root), widget_module_source(), check=arguments.check)
    verb = "hold an older widget module" if arguments.check else "rewritten"
    for path in stale:
        print(f"{path.relative_to(arguments.root)}: {verb}")
    print(f"update_widgets: {len(stale)} notebook(s) {verb}")
    return 1 if arguments.check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
