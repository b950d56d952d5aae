"""Keep the chapters' code within about 88 columns: format every code cell with a longer line with ruff.

Usage::

    python tools/notebooks/format_chapters.py notebooks/04_multi_head.ipynb ...   # in place (hold the chapter's lock)
    python tools/notebooks/format_chapters.py --check notebooks/0*.ipynb          # write nothing; count the long lines

Chapter code is what a reader reads in Colab, Jupyter and on the website, whose 1280 px column holds
88 columns of code (tools/site/site.css). ``ruff format --line-length 88`` rewrites only the cells that
have a line over 88 columns (the others keep their hand layout); cells with IPython syntax (``%``,
``!``) and the setup cell (tools/notebooks/sync_headers.py writes it) are left alone. What ruff cannot shorten (a long comment or string) is reported with its cell,
to be shortened by hand. Formatting changes no output, so the chapter needs no re-execution; ruff
is the one pyproject.toml's dev extra installs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

WIDTH = 88


def long_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if len(line) > WIDTH]


def ruff() -> str:
    found = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if found is None:
        raise SystemExit("ruff is not installed (pip install -e '.[dev]')")
    return found


def format_cell(source: str, executable: str) -> str | None:
    """The cell formatted at WIDTH columns, or None when ruff cannot parse it."""
    completed = subprocess.run(
        [executable, "format", "--isolated", "--line-length", str(WIDTH), "--stdin-filename", "cell.py", "-"],
        input=source,
        capture_output=True,
        text=True,
    )
    return completed.stdout.rstrip("\n") if completed.returncode == 0 else None


def format_notebook(path: Path, check: bool, executable: str) -> tuple[int, list[str]]:
    """(cells changed or to change, the long lines left as 'cell N: line')."""
    notebook = nbformat.read(path, as_version=4)
    changed, left = 0, []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or not long_lines(cell.source):
            continue
        if "colab-setup" in cell.metadata.get("tags", []):  # written by tools/notebooks/sync_headers.py, as it is
            continue
        if any(line.lstrip().startswith(("%", "!")) for line in cell.source.splitlines()):
            left += [f"cell {index}: {line.strip()[:70]}" for line in long_lines(cell.source)]
            continue
        formatted = format_cell(cell.source, executable)
        if formatted is None:
            left += [f"cell {index} (does not parse): {line.strip()[:70]}" for line in long_lines(cell.source)]
            continue
        if formatted != cell.source:
            changed += 1
            if not check:
                cell.source = formatted
        left += [f"cell {index}: {line.strip()[:70]}" for line in long_lines(formatted)]
    if changed and not check:
        nbformat.write(notebook, path)
    return changed, left


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tools/notebooks/format_chapters.py", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a cell would change")
    arguments = parser.parse_args(argv)
    executable = ruff()
    would_change = 0
    for path in arguments.notebooks:
        changed, left = format_notebook(path, arguments.check, executable)
        would_change += changed
        verb = "would format" if arguments.check else "formatted"
        print(f"{path}: {verb} {changed} cell(s); {len(left)} line(s) over {WIDTH} columns left for a hand")
        for line in left:
            print(f"  {line}")
    return 1 if arguments.check and would_change else 0


if __name__ == "__main__":
    sys.exit(main())
