"""The chapters' import surface: what a reader sees before the first idea, and what the formatter left.

* ``ruff check --select F401,F811`` over the code cells of every chapter (ruff reads a notebook's
  code cells as one module and skips IPython magics): no import the chapter never uses (F401), no
  name imported or defined again before it was used (F811). The chapters are outside the
  package's lint (pyproject.toml excludes notebooks/), so this is their only such check.
* The opening import cell is short: at most ``OPENING_CELL_LINES`` lines. The rule of the book is
  to import where a section needs a name; the opening cell keeps the few names used throughout
  (torch, matplotlib, ``import attention_book as ab``, seeding). 30 lines, not 25: formatted at 88
  columns, an import of several names takes one line per name, and chapters 1 and 5 open with 27
  and 26 lines of names the whole chapter uses (one figures module, a widget); the rule is there
  to stop the 46- and 63-line cells the third review found (chapters 6 and 7), not to split those.
* No trailing comment left dangling by the formatter: ``ruff format`` at 88 columns turns
  ``x = f(a, b)  # what x is`` into three lines whose last is ``)  # what x is``, a comment on
  a bracket. Write such a comment on the line above.

Findings in chapters that other work is changing are listed in ``KNOWN_*`` as still to fix: the
tests fail on any finding not listed, and warn when a listed one is gone (then delete its entry).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings

import nbformat
import pytest

from tests.helpers import ROOT

CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
OPENING_CELL_LINES = 30
DANGLING = re.compile(r"^\s*[)\]}]+[,:]?\s*#")

# (chapter, rule, name): to be fixed by the work on those chapters (issue 44)
KNOWN_IMPORT_FINDINGS: set[tuple[str, str, str]] = set()
KNOWN_LONG_OPENING_CELLS: dict[str, int] = {}
KNOWN_DANGLING_COMMENTS: set[tuple[str, str]] = set()


def import_findings(paths) -> set[tuple[str, str, str]]:
    """(chapter, rule, name) for every F401/F811 that ruff reports in the notebooks at ``paths``."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--select", "F401,F811"]
        + ["--output-format", "json", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    found = set()
    for finding in json.loads(result.stdout):
        name = re.search(r"`([^`]+)`", finding["message"]).group(1)
        chapter = finding["filename"].rsplit("/", 1)[-1].removesuffix(".ipynb")
        found.add((chapter, finding["code"], name))
    return found


def code_cells(path) -> list:
    notebook = nbformat.read(path, as_version=4)
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def opening_cell(path) -> str:
    """The first code cell after the Colab setup cell (tools/notebooks/sync_headers.py writes that one)."""
    cells = [cell for cell in code_cells(path) if "colab-setup" not in cell.metadata.get("tags", [])]
    return cells[0].source


def settle(found: set, known: set, what: str) -> None:
    """Fail on a finding not in ``known``; warn about a known one that is gone."""
    new = sorted(found - known)
    assert not new, f"{what}:\n" + "\n".join(map(str, new))
    gone = sorted(known - found)
    if gone:
        warnings.warn(f"fixed, so delete from the test's list of known findings: {gone}", stacklevel=2)


def test_every_chapter_is_checked():
    assert [path.name[:2] for path in CHAPTERS] == [f"{n:02d}" for n in range(1, len(CHAPTERS) + 1)]
    assert len(CHAPTERS) >= 7


def test_no_unused_or_redefined_imports():
    settle(import_findings(CHAPTERS), KNOWN_IMPORT_FINDINGS, "unused (F401) or redefined (F811) names")


def test_the_import_check_reads_notebooks_and_skips_magics(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%matplotlib inline\nimport math\nimport torch\nfrom torch import nn"),
        nbformat.v4.new_markdown_cell("Some prose."),
        nbformat.v4.new_code_cell("!echo hello\nprint(nn.Linear)\nimport torch\nprint(torch.ones(1))"),
    ]
    path = tmp_path / "99_sample.ipynb"
    nbformat.write(notebook, path)
    assert import_findings([path]) == {("99_sample", "F401", "math"), ("99_sample", "F811", "torch")}


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_the_opening_cell_is_short(chapter):
    lines = len(opening_cell(chapter).splitlines())
    limit = KNOWN_LONG_OPENING_CELLS.get(chapter.stem, OPENING_CELL_LINES)
    assert lines <= limit, (
        f"{chapter.name} opens with a cell of {lines} lines (at most {limit}): import where a section needs a name"
    )
    if chapter.stem in KNOWN_LONG_OPENING_CELLS and lines <= OPENING_CELL_LINES:
        warnings.warn(f"{chapter.stem} now opens within {OPENING_CELL_LINES} lines: delete its entry", stacklevel=1)


def test_no_trailing_comment_dangles_from_a_bracket():
    found = {
        (chapter.stem, line.strip())
        for chapter in CHAPTERS
        for cell in code_cells(chapter)
        for line in cell.source.splitlines()
        if DANGLING.match(line)
    }
    settle(found, KNOWN_DANGLING_COMMENTS, "comments left on a closing bracket (write them on the line above)")


def test_the_dangling_pattern():
    assert DANGLING.match(")  # (6, 6)") and DANGLING.match("    ],  # larger") and DANGLING.match("):  # parts")
    assert not DANGLING.match("x = f(a)  # (6, 6)") and not DANGLING.match("# a comment (with brackets)")
