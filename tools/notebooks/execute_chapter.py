"""Execute chapters in place the way their stored outputs must be made (``make chapter NB=...``).

A chapter's committed outputs are what strict nbval compares against, what the drawing test and
the site's offline widgets read, and what the figure test measures. Three things must be true of
them, and a plain ``jupyter nbconvert --execute`` gets only the first:

- every cell ran, top to bottom, in a fresh ``python3`` kernel started in ``notebooks/``;
- each widget's state is stored in the notebook (nbclient's ``store_widget_state``);
- each figure's PNG carries its smallest text size (``tools/site/figure_audit.py`` installs the
  stamp through an IPython startup file; ``tests/book/test_site_figures.py`` fails without it).

Consecutive stream outputs of one name are merged into one (as JupyterLab saves them), so a
re-execution does not split a progress print into a dozen outputs.

Usage::

    python tools/notebooks/execute_chapter.py notebooks/06_encoder_decoder.ipynb ...

Then ``tools/notebooks/format_chapters.py`` and ``tools/notebooks/generate_exercises.py`` (``make
chapter`` runs all three), and strict nbval for the chapter.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "site"))

import figure_audit  # noqa: E402  (a tool beside this one, not a package)

TIMEOUT_S = 1800  # per cell; chapter 1's longest cell takes about 2 minutes on a 2-core CPU


def merge_streams(outputs: list) -> list:
    """Consecutive stream outputs of the same name (stdout, stderr) joined into one."""
    merged = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and output.get("output_type") == "stream"
            and previous.get("output_type") == "stream"
            and previous.get("name") == output.get("name")
        ):
            previous["text"] = previous["text"] + output["text"]
        else:
            merged.append(output)
    return merged


def execute(notebook: Path) -> float:
    """Execute ``notebook`` in place with widget state stored and figures stamped; the seconds it took."""
    import nbformat
    from nbclient import NotebookClient

    notebook = Path(notebook)
    if not notebook.is_file() or notebook.suffix != ".ipynb":
        raise FileNotFoundError(f"expected a chapter notebook (.ipynb), got {str(notebook)!r}")
    nb = nbformat.read(notebook, as_version=4)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ipython-chapter-") as folder:
        environment = {**os.environ, "IPYTHONDIR": str(figure_audit.ipython_dir(Path(folder)))}
        previous = os.environ.copy()
        os.environ.update(environment)
        try:
            client = NotebookClient(
                nb,
                timeout=TIMEOUT_S,
                kernel_name="python3",
                store_widget_state=True,
                resources={"metadata": {"path": str(notebook.parent)}},
            )
            client.execute()
        finally:
            os.environ.clear()
            os.environ.update(previous)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = merge_streams(cell.outputs)
    data = json.loads(nbformat.writes(nb))
    notebook.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    arguments = parser.parse_args(argv)
    for notebook in arguments.notebooks:
        seconds = execute(notebook)
        unstamped = [row["cell"] for row in figure_audit.report(notebook) if row["smallest_px"] is None]
        print(f"{notebook}: executed in {seconds:.0f} s; figures without a size stamp: {unstamped or 'none'}")
        if unstamped:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
