"""A submitted notebook read as data: its chapter, and the code the grader runs from it.

Nothing here executes the student's code. The grader trusts none of the notebook's check cells:
it runs the student's import lines and the chapter's Exercises section (every code cell from the
"Exercises" heading on), then checks each exercise's answer, found by the name the exercise
registry gives (``Exercise.answer``), in a process of its own (:mod:`attention_book.grade.sandbox`).
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ..exercises import REGISTRY, load_all

# What a notebook says of its chapter, strongest first: the student notebooks' metadata, then the
# exercise headings and check calls of its cells.
EXERCISE_HEADING = re.compile(r"^#+\s*Exercise\s+(\d+)\.(\d+)\b", re.MULTILINE)
CHECK_CALL = re.compile(r"""\bcheck\(\s*['"](\d+)\.(\d+)['"]""")
SECTION_HEADING = re.compile(r"^##\s+Exercises\s*$", re.MULTILINE)
SETUP_TAG = "colab-setup"
# A notebook larger than this is not read (a class's notebooks are a few hundred KB).
MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024


class SubmissionError(ValueError):
    """The file cannot be graded as a notebook; the message says why, for the student's row."""


@dataclass
class Submission:
    """What the grader needs of one notebook: its chapter, the exercises and the code to run."""

    path: str
    sha256: str
    chapter: str
    exercises: list[str]
    # (cell number in the notebook, source): the student's import lines first (cell number -1).
    cells: list[tuple[int, str]] = field(default_factory=list)


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chapter_exercises(chapter: str) -> list[str]:
    """The registered exercises of a chapter, in order."""
    load_all()
    ids = [exercise_id for exercise_id in REGISTRY if exercise_id.split(".")[0] == str(chapter)]
    return sorted(ids, key=lambda exercise_id: tuple(int(part) for part in exercise_id.split(".")))


def known_chapters() -> list[str]:
    load_all()
    return sorted({exercise_id.split(".")[0] for exercise_id in REGISTRY}, key=int)


def read_notebook(data: bytes) -> dict:
    """The notebook's JSON, or :class:`SubmissionError` saying what the file is instead."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise SubmissionError(
            f"the file is {len(data) / 2**20:.0f} MB, over the {MAX_NOTEBOOK_BYTES // 2**20} MB a notebook may be"
        )
    if not data.strip():
        raise SubmissionError("the file is empty: expected a Jupyter notebook (.ipynb)")
    try:
        notebook = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SubmissionError(f"the file is not a Jupyter notebook: it is not valid JSON ({error})") from None
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise SubmissionError("the file is JSON but not a Jupyter notebook: it has no list of cells")
    return notebook


def cell_source(cell: object) -> str:
    if not isinstance(cell, dict):
        return ""
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(part for part in source if isinstance(part, str))
    return source if isinstance(source, str) else ""


def _cells(notebook: dict) -> list[dict]:
    return [cell for cell in notebook["cells"] if isinstance(cell, dict)]


def find_chapter(notebook: dict) -> str | None:
    """The chapter the notebook is of: its metadata (``attention_book.chapter``, which the student
    notebooks carry), else the chapter most of its exercise headings and check calls name."""
    chapters = known_chapters()
    metadata = notebook.get("metadata")
    ours = metadata.get("attention_book") if isinstance(metadata, dict) else None
    declared = ours.get("chapter") if isinstance(ours, dict) else None
    if declared is not None and str(declared) in chapters:
        return str(declared)
    votes: Counter[str] = Counter()
    for cell in _cells(notebook):
        source = cell_source(cell)
        pattern = EXERCISE_HEADING if cell.get("cell_type") == "markdown" else CHECK_CALL
        votes.update(match.group(1) for match in pattern.finditer(source) if match.group(1) in chapters)
    if not votes:
        return None
    return votes.most_common(1)[0][0]


def _import_lines(source: str) -> list[str]:
    """The top-level import statements of a cell's code (none if it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [
        ast.get_source_segment(source, node) or ""
        for node in tree.body
        if isinstance(node, ast.Import | ast.ImportFrom)
    ]


CHECK_CALLS = {"check", "summary", "assert_passes"}


def _a_check(node: ast.stmt) -> bool:
    """A statement of a check cell: a call of check, summary or assert_passes (the nbgrader course's
    test cells), or the import of assert_passes that such a test cell starts with."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return isinstance(node.value.func, ast.Name) and node.value.func.id in CHECK_CALLS
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").startswith("attention_book.grade") and all(
            alias.name == "assert_passes" for alias in node.names
        )
    return False


def only_checks(source: str) -> bool:
    """Whether a cell only checks answers (``check``, ``summary``, or an nbgrader test cell's
    ``assert_passes``): the grader skips such cells, as it checks every answer itself, so an answer
    that never returns costs its check's time once."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return False
    return bool(tree.body) and all(_a_check(node) for node in tree.body)


def _section_start(cells: list[dict]) -> int | None:
    """The index of the Exercises heading, else of the first exercise heading, else None."""
    for pattern in (SECTION_HEADING, EXERCISE_HEADING):
        for index, cell in enumerate(cells):
            if cell.get("cell_type") == "markdown" and pattern.search(cell_source(cell)):
                return index
    return None


def code_to_run(notebook: dict) -> list[tuple[int, str]]:
    """(cell number, source) of what the grader runs: the import lines of the code cells before the
    Exercises section (the setup cell excepted) as one cell, then every code cell of the section
    but those that only call ``check`` or ``summary``."""
    cells = _cells(notebook)
    start = _section_start(cells)
    if start is None:
        start = len(cells)
    imports: list[str] = []
    for cell in cells[:start]:
        tags = cell.get("metadata", {}).get("tags", []) if isinstance(cell.get("metadata"), dict) else []
        if cell.get("cell_type") == "code" and SETUP_TAG not in tags:
            imports.extend(line for line in _import_lines(cell_source(cell)) if line not in imports)
    run = [(-1, "\n".join(imports))] if imports else []
    for index, cell in enumerate(cells[start:], start=start):
        if cell.get("cell_type") == "code" and cell_source(cell).strip() and not only_checks(cell_source(cell)):
            run.append((index, cell_source(cell)))
    return run


def read_submission(path: Path, data: bytes, *, chapter: str | None = None) -> Submission:
    """Read a submitted notebook; ``chapter`` (optional) is the chapter the assignment expects.

    Raises :class:`SubmissionError` for a file that is not a notebook, a notebook of no chapter,
    or (with ``chapter``) a notebook of another chapter.
    """
    notebook = read_notebook(data)
    found = find_chapter(notebook)
    if found is None:
        expected = f"chapter {chapter}'s" if chapter else "a chapter's"
        raise SubmissionError(
            f"no exercises of any chapter found in this notebook: expected {expected} student notebook "
            "(notebooks/exercises/NN_name.ipynb), whose exercises are headed 'Exercise N.M'"
        )
    if chapter is not None and found != str(chapter):
        raise SubmissionError(
            f"this is a notebook of chapter {found}, but this assignment is chapter {chapter}: "
            "was the wrong file handed in?"
        )
    return Submission(
        str(path), content_hash(data), found, exercises=chapter_exercises(found), cells=code_to_run(notebook)
    )
