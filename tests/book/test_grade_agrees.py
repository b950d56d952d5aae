"""The student's own path and the instructor's grader agree on the same notebook (issue 41).

A chapter 1 notebook with two answers solved, one wrong and two left blank is run as a student
runs it, with ``pytest --nbval-lax`` (in a Jupyter kernel, check cells and ``summary(1)`` included),
and graded by ``attention_book.grade``: the exercises whose check cell passes under nbval are exactly
those the grader gives their points. The chapter's experiments before its Exercises section are left
out of the notebook (its import cell stays): the grader does not run them, and under nbval they
would add a minute of training to the suite (the student notebooks run whole in test_notebooks.py).
"""

from __future__ import annotations

import json
import re

import pytest

from attention_book.grade import Limits, grade_file
from tests.book.test_notebooks import run_nbval
from tests.unit.grade_support import solved, with_cell, write

WRONG_1_4 = "def additive_attention(queries, keys, values, W_1, W_2, w):\n    return values[:1].expand(len(queries), -1), None\n"


def without_experiments(notebook):
    """The notebook from its Exercises heading on, after its header, setup and import cells."""
    cells = notebook["cells"]
    start = next(i for i, cell in enumerate(cells) if "".join(cell["source"]).startswith("## Exercises"))
    imports = next(i for i, cell in enumerate(cells) if "import attention_book as ab" in "".join(cell["source"]))
    notebook["cells"] = cells[:2] + [cells[imports]] + cells[start:]
    return notebook


@pytest.mark.nbval
def test_nbval_and_the_grader_agree_on_a_half_done_notebook(tmp_path):
    notebook = without_experiments(with_cell(solved(only={0, 2, 3}), WRONG_1_4, after=3))
    path = write(tmp_path, "01_attention_math.ipynb", notebook)
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    exercise_of_cell = {
        number: re.search(r'check\("(\d+\.\d+)"', "".join(cell["source"])).group(1)
        for number, cell in enumerate(code)
        if "nbval-check-output" in cell["metadata"].get("tags", [])
    }
    run = run_nbval(path, "nbval-lax", tmp_path)
    assert set(run.failures) <= set(exercise_of_cell), run.report()
    failing_under_nbval = {exercise_of_cell[number] for number in run.failures}
    rows = grade_file(path, limits=Limits(timeout=120))
    not_passed_by_grader = {row.exercise for row in rows if row.status != "passed"}
    assert failing_under_nbval == not_passed_by_grader == {"1.2", "1.4", "1.5", "1.6"}
    statuses = {row.exercise: row.status for row in rows}
    assert statuses == {
        "1.1": "passed",
        "1.2": "not attempted",
        "1.3": "passed",
        "1.4": "failed",
        "1.5": "not attempted",
        "1.6": "not attempted",
    }
    assert json.loads(path.read_text()) == notebook  # the grader never writes to a submission
