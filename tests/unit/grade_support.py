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
