"""How small is the smallest text of each figure the book shows? Measured as it is drawn.

Every chapter's figures reach the page as PNGs that the theme shrinks to the text column
(660 px wide at the 1280 px layout). A figure is legible when its smallest text, after that
shrinking, is still at least 8 px tall. Two numbers decide it: the smallest text in the PNG
(known only to matplotlib, while it draws) and the shrink factor (known only to the browser).
This module supplies the first; tests/book/test_site_figures.py measures the second in
Chromium and multiplies them.

How the first number gets to the test: ``tools/site/build_book.py`` (and
``make chapter``, tools/notebooks/execute_chapter.py) run the chapters' kernels with
``IPYTHONDIR`` pointing at a folder made by :func:`ipython_dir`. Its startup file calls
:func:`install`, which wraps IPython's ``print_figure`` so that every PNG a figure turns into
carries a text chunk ``attention-book:smallest-text-px`` (the smallest font drawn, in pixels
of that PNG). The chunk travels with the notebook's output, through jupyter-book's execution
cache, into ``_build/html/_images``. Nothing in the chapters changes and readers see nothing.

Usage::

    python tools/site/figure_audit.py notebooks/03_soft_vs_hard.ipynb      # report stored figures
    python tools/site/figure_audit.py --execute notebooks/03_soft_vs_hard.ipynb  # execute in place first
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import re
import sys
from pathlib import Path

KEY = "attention-book:smallest-text-px"
COLUMN_PX = 660  # the page column at the 1280 px layout (measured in Chromium)
MIN_PX = 8.0  # the smallest text we accept on the page, in CSS pixels
PHONE_COLUMN_PX = 342  # the page column on a 390 px phone (measured in Chromium, issue 29)
PHONE_MIN_PX = 7.0  # the smallest figure text we accept on that phone, in CSS pixels

STARTUP = """\
# Written by tools/site/figure_audit.py: stamps each figure's PNG with its smallest text size.
def _attention_book_figure_audit():
    import importlib.util

    spec = importlib.util.spec_from_file_location("attention_book_figure_audit", {path!r})
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


_attention_book_figure_audit()
del _attention_book_figure_audit
"""


def smallest_text_px(figure) -> float | None:
    """The smallest font size, in pixels at the figure's dpi, of the text a draw really draws.

    Text that is empty, hidden, or never drawn (a tick outside the view limits) does not count.
    """
    from matplotlib.text import Text

    sizes: list[float] = []
    original = Text.draw

    def recording(text, renderer):
        if text.get_visible() and text.get_text().strip():
            sizes.append(float(text.get_fontsize()))
        return original(text, renderer)

    Text.draw = recording
    try:
        figure.draw_without_rendering()
    finally:
        Text.draw = original
    return min(sizes) * figure.dpi / 72.0 if sizes else None


def install() -> None:
    """Wrap IPython's ``print_figure`` so PNGs carry :data:`KEY` (before the inline backend
    registers its formatters, which capture ``print_figure`` when matplotlib is first used)."""
    from IPython.core import pylabtools

    original = pylabtools.print_figure
    if getattr(original, "_stamps_smallest_text", False):
        return

    def print_figure(fig, fmt="png", bbox_inches="tight", base64=False, **kwargs):
        if fmt == "png":
            size = smallest_text_px(fig)
            metadata = dict(kwargs.pop("metadata", None) or {})
            metadata[KEY] = "none" if size is None else f"{size:.2f}"
            kwargs["metadata"] = metadata
        return original(fig, fmt, bbox_inches, base64, **kwargs)

    print_figure._stamps_smallest_text = True
    pylabtools.print_figure = print_figure


def ipython_dir(folder: Path) -> Path:
    """Make ``folder`` an IPython directory whose startup file calls :func:`install`."""
    startup = Path(folder) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-figure-audit.py").write_text(STARTUP.format(path=str(Path(__file__).resolve())))
    return Path(folder)


def read_png(data: bytes) -> tuple[int, float | None]:
    """A PNG's width in pixels and its stamped smallest text size (None if not stamped or no text)."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        value = image.text.get(KEY) if hasattr(image, "text") else None
        width = image.width
    return width, (None if value in (None, "none") else float(value))


SVG_FONT_SIZE = re.compile(r"""font-size\s*[:=]\s*["']?\s*([0-9.]+)\s*(px|pt|em|rem|%)?""")
SVG_UNITS = {None: 1.0, "px": 1.0, "pt": 4 / 3, "em": 16.0, "rem": 16.0, "%": 0.16}


def read_svg(data: bytes) -> float:
    """The smallest font size an SVG figure declares, in its own pixels (an <img> renders it
    alone, so relative sizes are taken against the browser's default 16 px; with no size
    declared, text is 16 px). Nested relative sizes are not compounded."""
    sizes = [
        float(value) * SVG_UNITS[unit or None] for value, unit in SVG_FONT_SIZE.findall(data.decode("utf-8", "replace"))
    ]
    return min(sizes, default=16.0)


def shown_px(smallest_px: float, width: int, column: int = COLUMN_PX) -> float:
    """The smallest text's height on the page when a ``width``-pixel PNG is fitted to the column."""
    return smallest_px * min(1.0, column / width)


def report(notebook: Path) -> list[dict]:
    """One row per PNG output of a notebook: cell index, width, smallest text in the PNG and on the page."""
    cells = json.loads(Path(notebook).read_text(encoding="utf-8"))["cells"]
    rows = []
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png is None:
                continue
            width, smallest = read_png(base64.b64decode("".join(png) if isinstance(png, list) else png))
            rows.append(
                {
                    "cell": index,
                    "width": width,
                    "smallest_px": smallest,
                    "shown_px": None if smallest is None else round(shown_px(smallest, width), 2),
                    "phone_px": None if smallest is None else round(shown_px(smallest, width, PHONE_COLUMN_PX), 2),
                }
            )
    return rows


def execute(notebook: Path) -> None:
    """Execute a notebook in place as ``make chapter`` does (tools/notebooks/execute_chapter.py: figures
    stamped, widget state stored, streams merged): one executor, so a chapter is never left without either."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "notebooks"))
    import execute_chapter  # tools/notebooks/execute_chapter.py (it imports this module)

    execute_chapter.execute(notebook)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--execute", action="store_true", help="execute each notebook in place first")
    arguments = parser.parse_args(argv)
    failing = 0
    for notebook in arguments.notebooks:
        if arguments.execute:
            execute(notebook)
        for row in report(notebook):
            if row["shown_px"] is None:
                verdict = "?"
            elif row["shown_px"] < MIN_PX:
                verdict = "TOO SMALL"
            elif row["phone_px"] < PHONE_MIN_PX:
                verdict = "TOO SMALL ON A PHONE"
            else:
                verdict = "ok"
            failing += verdict != "ok"
            print(
                f"{notebook.name} cell {row['cell']:3d}: {row['width']:5d} px wide, smallest text "
                f"{row['smallest_px']} px -> {row['shown_px']} px on the page, {row['phone_px']} px on a "
                f"390 px phone  {verdict}"
            )
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
