"""Submissions for the grader's tests, made from the committed student notebooks as a student would
make them: solutions filled in from the chapter, cells edited, added or deleted."""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.helpers import ROOT, tool

generate = tool("generate_exercises")

STUDENT = ROOT / "notebooks" / "exercises"
CHAPTERS = ROOT / "notebooks"


def student_notebook(name: str = "01_attention_math.ipynb") -> dict:
    return json.loads((STUDENT / name).read_text(encoding="utf-8"))


def _source(cell: dict) -> str:
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else source


def solution_cells(notebook: dict) -> list[dict]:
    return [cell for cell in notebook["cells"] if cell["cell_type"] == "code" and generate.has_solution(_source(cell))]


def solved(name: str = "01_attention_math.ipynb", only: set[int] | None = None) -> dict:
    """The student notebook with the chapter's solutions filled in (``only``: those exercises, by
    position counted from 0)."""
    notebook = student_notebook(name)
    chapter = json.loads((CHAPTERS / name).read_text(encoding="utf-8"))
    for index, (cell, source) in enumerate(zip(solution_cells(notebook), solution_cells(chapter))):
        if only is None or index in only:
            cell["source"] = generate.fill_source(_source(cell), _source(source))
    return notebook


def check_cells(notebook: dict) -> list[dict]:
    return [cell for cell in notebook["cells"] if generate.is_check_cell(_dict_cell(cell))]


def _dict_cell(cell: dict):
    import nbformat

    return nbformat.from_dict(cell)


def with_cell(notebook: dict, source: str, *, after: int | None = None) -> dict:
    """A copy with one more code cell: after the ``after``-th solution cell, else at the end."""
    notebook = copy.deepcopy(notebook)
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}
    if after is None:
        notebook["cells"].append(cell)
    else:
        anchor = solution_cells(notebook)[after]
        notebook["cells"].insert(notebook["cells"].index(anchor) + 1, cell)
    return notebook


def write(folder: Path, name: str, notebook: dict | str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(notebook, bytes):
        path.write_bytes(notebook)
    else:
        path.write_text(notebook if isinstance(notebook, str) else json.dumps(notebook), encoding="utf-8")
    return path


_CLEAN_GRADER = []


def grade_cleanly(path: Path, **options):
    """``grade_file(path, **options)`` in a process started afresh (spawn), kept for the session.

    On a machine with CUDA, a pytest worker that ran other tests' backward passes cannot fork a check
    that runs autograd (PyTorch refuses it; the grader then reports an error row instead of grading).
    The grading command starts clean processes; so does this, where it matters: with CUDA, or with
    ATTENTION_BOOK_CLEAN_GRADER=1 to try the path on a CPU."""
    import atexit
    import multiprocessing
    import os

    import torch

    from attention_book.grade import grade_file
    from attention_book.grade.engine import prepare_worker

    if not (torch.cuda.is_available() or os.environ.get("ATTENTION_BOOK_CLEAN_GRADER") == "1"):
        return grade_file(path, **options)
    if not _CLEAN_GRADER:
        pool = multiprocessing.get_context("spawn").Pool(1, initializer=prepare_worker)
        atexit.register(pool.terminate)
        _CLEAN_GRADER.append(pool)
    return _CLEAN_GRADER[0].apply(grade_file, (path,), options)
