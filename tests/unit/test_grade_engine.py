"""attention_book.grade on one notebook: points, every bad input, every tampering (issue 41).

Each submission is made from the committed chapter 1 student notebook, as a student would make it.
The grader runs its cells in a forked process of its own, so these tests take about 1 s each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.grade import COLUMNS, STATUSES, Limits, grade_file
from attention_book.grade.submission import find_chapter
from tests.unit.grade_support import check_cells, grade_cleanly, solved, student_notebook, with_cell, write

FAST = Limits(timeout=60.0)
CHAPTER_1 = ["1.1", "1.2", "1.3", "1.4", "1.5", "1.6"]


def statuses(rows):
    return {row.exercise: row.status for row in rows}


def points(rows):
    return {row.exercise: row.points for row in rows}


def grade(tmp_path, notebook, name="submission.ipynb", **options):
    return grade_cleanly(write(tmp_path, name, notebook), limits=options.pop("limits", FAST), **options)


@pytest.fixture(scope="module")
def blank_rows(tmp_path_factory):
    return grade(tmp_path_factory.mktemp("blank"), student_notebook())


def test_solved_blank_and_half_done_give_full_zero_and_partial_points(tmp_path, blank_rows):
    full = grade(tmp_path, solved())
    assert points(full) == dict.fromkeys(CHAPTER_1, 1) and statuses(full) == dict.fromkeys(CHAPTER_1, "passed")
    assert points(blank_rows) == dict.fromkeys(CHAPTER_1, 0)
    assert statuses(blank_rows) == dict.fromkeys(CHAPTER_1, "not attempted")
    half = grade(tmp_path, solved(only={0, 2}))
    assert points(half) == {"1.1": 1, "1.2": 0, "1.3": 1, "1.4": 0, "1.5": 0, "1.6": 0}
    for row in full + blank_rows + half:
        assert set(row.as_dict()) == set(COLUMNS) and row.status in STATUSES and row.max_points == 1
        assert row.chapter == "1" and len(row.sha256) == 64 and "\n" not in row.feedback


def test_a_wrong_answer_fails_with_the_checkers_hint(tmp_path):
    notebook = solved()
    wrong = with_cell(notebook, "def scaling_matters(d_k):\n    return None\n", after=2)
    rows = {row.exercise: row for row in grade(tmp_path, wrong)}
    assert rows["1.3"].status == "failed" and rows["1.3"].points == 0
    assert rows["1.3"].feedback and not rows["1.3"].feedback.startswith("✗")
    assert all(rows[exercise].status == "passed" for exercise in CHAPTER_1 if exercise != "1.3")


# ---------------------------------------------------------------------------------
# Tampering scores exactly as if the tampering were not there (on a blank notebook: blank)

PATCH_THE_PACKAGE = """
import attention_book.exercises as E
import attention_book.exercises._core as C
passed = C.Outcome("1.1", "passed", "✓ passed", "passed.")
E.check = C.check = lambda *args, **kwargs: print("✓ passed") or True
E.evaluate = C.evaluate = lambda exercise_id, answer: passed
for exercise in C.REGISTRY.values():
    exercise.checker = lambda answer: None
    exercise.properties.clear()
"""
PATCH_TORCH = """
import torch
torch.testing.assert_close = lambda *args, **kwargs: None
torch.allclose = lambda *args, **kwargs: True
torch.Tensor.__eq__ = lambda self, other: torch.ones((), dtype=torch.bool)
"""


def _edited_check_cells(notebook):
    for cell in check_cells(notebook):
        cell["source"] = 'print("✓ Exercise passed.")'
    return notebook


def _deleted_check_cells(notebook):
    doomed = {id(cell) for cell in check_cells(notebook)}
    notebook["cells"] = [cell for cell in notebook["cells"] if id(cell) not in doomed]
    return notebook


def _not_implemented_caught(notebook):
    """Answers that catch their own NotImplementedError cannot pass either: the checker calls them."""
    return with_cell(notebook, "def check(*args):\n    print('✓ passed')\n    return True\n", after=0)


TAMPERING = {
    "check cells edited to print a pass": _edited_check_cells,
    "check cells deleted": _deleted_check_cells,
    "check redefined": _not_implemented_caught,
    "attention_book.exercises patched": lambda notebook: with_cell(notebook, PATCH_THE_PACKAGE, after=0),
    "torch's comparisons patched": lambda notebook: with_cell(notebook, PATCH_TORCH, after=0),
    "the summary cell replaced": lambda notebook: with_cell(notebook, "print('5 of 5 exercises pass')"),
}


@pytest.mark.parametrize("tampering", sorted(TAMPERING))
def test_tampering_scores_as_if_it_were_not_there(tmp_path, tampering, blank_rows):
    rows = grade(tmp_path, TAMPERING[tampering](student_notebook()))
    assert statuses(rows) == statuses(blank_rows) and points(rows) == points(blank_rows)


def test_tampering_beside_real_answers_takes_nothing_from_them(tmp_path):
    notebook = with_cell(with_cell(solved(only={0}), PATCH_THE_PACKAGE, after=1), PATCH_TORCH, after=3)
    assert points(grade(tmp_path, notebook)) == {"1.1": 1, "1.2": 0, "1.3": 0, "1.4": 0, "1.5": 0, "1.6": 0}


# ---------------------------------------------------------------------------------
# Bad input: one clear status on its rows, never an exception


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"\x89PNG\r\n\x1a\n not a notebook", "not valid JSON"),
        (b"", "the file is empty"),
        (b'{"cells": 3}', "not a Jupyter notebook"),
        (b"[1, 2, 3]", "not a Jupyter notebook"),
        (json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(), "no exercises"),
        (
            json.dumps(
                {"cells": [{"cell_type": "code", "source": "print(1)", "metadata": {}, "outputs": []}]}
            ).encode(),
            "no exercises",
        ),
    ],
    ids=["binary", "empty file", "cells not a list", "a JSON list", "empty notebook", "a notebook of no chapter"],
)
def test_a_file_that_is_not_a_chapters_notebook_gets_one_error_row(tmp_path, content, expected):
    rows = grade(tmp_path, content)
    assert len(rows) == 1 and rows[0].status == "error" and rows[0].exercise == "" and rows[0].points == 0
    assert expected in rows[0].feedback


def test_a_notebook_of_another_chapter_is_named_as_such(tmp_path):
    rows = grade(tmp_path, student_notebook("03_soft_vs_hard.ipynb"), chapter="1")
    assert len(rows) == 1 and rows[0].status == "error"
    assert "chapter 3" in rows[0].feedback and "chapter 1" in rows[0].feedback
    alone = grade(tmp_path, student_notebook("03_soft_vs_hard.ipynb"))  # without --chapter: graded as chapter 3
    assert [row.exercise for row in alone] == ["3.1", "3.2", "3.3", "3.4"]


def test_the_chapter_is_found_from_the_notebook_not_its_file_name(tmp_path):
    rows = grade(tmp_path, solved(), name="05_positional_encoding.ipynb")
    assert {row.chapter for row in rows} == {"1"} and statuses(rows) == dict.fromkeys(CHAPTER_1, "passed")
    notebook = student_notebook()
    notebook["metadata"]["attention_book"] = {"chapter": 3}
    assert find_chapter(notebook) == "3"  # the student notebooks' metadata wins over the headings


def test_a_cell_that_never_ends_times_out_and_keeps_what_came_before(tmp_path):
    notebook = with_cell(solved(), "while True:\n    pass\n", after=1)
    rows = grade(tmp_path, notebook, limits=Limits(timeout=4.0))
    assert statuses(rows) == {
        "1.1": "passed",
        "1.2": "passed",
        "1.3": "timeout",
        "1.4": "timeout",
        "1.5": "timeout",
        "1.6": "timeout",
    }
    assert "did not finish in 4 s" in rows[2].feedback and "while True" in rows[2].feedback


def test_an_answer_that_never_returns_times_out_alone(tmp_path):
    notebook = with_cell(
        solved(), "def hardly(d_k):\n    while True:\n        pass\nscaling_matters = hardly\n", after=2
    )
    rows = grade(tmp_path, notebook, limits=Limits(timeout=4.0))
    assert statuses(rows) == {
        "1.1": "passed",
        "1.2": "passed",
        "1.3": "timeout",
        "1.4": "passed",
        "1.5": "passed",
        "1.6": "passed",
    }


@pytest.mark.parametrize(
    "cell",
    ["import os\nos._exit(3)", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"],
    ids=["exits", "kills its kernel"],
)
def test_a_cell_that_ends_its_process_is_an_error_on_every_row(tmp_path, cell):
    rows = grade(tmp_path, with_cell(solved(), cell, after=1))
    assert statuses(rows) == dict.fromkeys(CHAPTER_1, "error") and points(rows) == dict.fromkeys(CHAPTER_1, 0)
    assert "ended in cell" in rows[0].feedback and (
        "exit status 3" in rows[0].feedback or "signal 9" in rows[0].feedback
    )


def test_sys_exit_and_exit_are_only_errors_of_their_cell(tmp_path):
    notebook = with_cell(with_cell(solved(), "import sys\nsys.exit(1)", after=0), "exit()", after=3)
    assert statuses(grade(tmp_path, notebook)) == dict.fromkeys(CHAPTER_1, "passed")


def test_megabytes_of_output_cost_nothing(tmp_path):
    notebook = with_cell(solved(), "for _ in range(200):\n    print('x' * 100_000)\n", after=0)
    assert statuses(grade(tmp_path, notebook)) == dict.fromkeys(CHAPTER_1, "passed")


def test_memory_and_disk_have_limits(tmp_path):
    """Each hog cell would redefine an answer wrongly after its hog: under the limits the hog raises
    first, so the answer defined before it stands (without the limits both would fail)."""
    memory = "import torch\nhog = torch.empty(2**31, dtype=torch.uint8)\nhog.fill_(1)\n"
    disk = "with open('big.bin', 'wb') as handle:\n    for _ in range(4):\n        handle.write(bytes(2**20))\n"
    wrong_values = "def values_for_outputs(Q, K, H):\n    return H\n"
    wrong_scaling = "def scaling_matters(d_k):\n    return None\n"
    notebook = with_cell(with_cell(solved(), memory + wrong_values, after=1), disk + wrong_scaling, after=2)
    rows = grade(tmp_path, notebook, limits=Limits(timeout=60.0, memory_bytes=2**30, file_bytes=2**20))
    assert statuses(rows) == dict.fromkeys(CHAPTER_1, "passed")
    unlimited = grade(tmp_path, notebook, limits=Limits(timeout=60.0, memory_bytes=2**33, file_bytes=2**23))
    assert statuses(unlimited) == {
        "1.1": "passed",
        "1.2": "failed",
        "1.3": "failed",
        "1.4": "passed",
        "1.5": "passed",
        "1.6": "passed",
    }


def test_files_written_by_cells_land_in_a_folder_that_is_removed(tmp_path):
    notebook = with_cell(
        solved(), "open('stray.txt', 'w').write('hello')\nimport os\nos.makedirs('out', exist_ok=True)"
    )
    before = sorted(path.name for path in tmp_path.iterdir())
    rows = grade(tmp_path, notebook)
    assert statuses(rows) == dict.fromkeys(CHAPTER_1, "passed")
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([*before, "submission.ipynb"])


def test_an_answer_that_cannot_be_pickled_is_an_error_that_says_so(tmp_path):
    cell = "import threading\n_lock = threading.Lock()\ndef scaling_matters(d_k, lock=_lock):\n    return None\n"
    rows = {row.exercise: row for row in grade(tmp_path, with_cell(solved(), cell, after=2))}
    assert rows["1.3"].status == "error" and "could not be handed to the grader" in rows["1.3"].feedback


def test_a_name_left_undefined_by_a_failing_cell_is_an_error_naming_that_cell(tmp_path):
    notebook = solved()
    first = [cell for cell in notebook["cells"] if "def query_for_weight" in "".join(cell["source"])][0]
    first["source"] = "import numpy_that_does_not_exist\n" + "".join(first["source"])
    rows = {row.exercise: row for row in grade(tmp_path, notebook)}
    assert rows["1.1"].status == "error" and "ModuleNotFoundError" in rows["1.1"].feedback
    assert "`query_for_weight` is not defined" in rows["1.1"].feedback
    assert rows["1.2"].status == "passed"


def test_the_same_notebook_gets_the_same_rows_on_every_run(tmp_path):
    notebook = with_cell(solved(only={0, 1, 3}), "import torch\ntorch.manual_seed(1234)\ndef scaling_matters(d_k):\n    return None\n", after=2)  # fmt: skip
    first, second = grade(tmp_path, notebook), grade(tmp_path, notebook, name="again.ipynb")
    assert [(row.exercise, row.status, row.feedback) for row in first] == [
        (row.exercise, row.status, row.feedback) for row in second
    ]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
cells = st.lists(
    st.fixed_dictionaries(
        {"cell_type": st.sampled_from(["code", "markdown", 3, None]), "source": json_values | st.just("## Exercises")},
        optional={"metadata": json_values},
    ),
    max_size=5,
)


@settings(max_examples=150, deadline=None)
@given(notebook=st.fixed_dictionaries({"cells": cells}, optional={"metadata": json_values}))
def test_reading_any_json_shaped_like_a_notebook_never_raises_anything_but_a_submission_error(notebook):
    from attention_book.grade.submission import SubmissionError, read_submission

    try:
        read_submission(Path("x.ipynb"), json.dumps(notebook).encode())
    except SubmissionError:
        pass


def test_a_grader_that_cannot_fork_autograd_says_so_instead_of_failing_the_answer(tmp_path, monkeypatch):
    """On a machine with CUDA, a process that has run a backward pass cannot fork a check that runs
    autograd: each check reports the grader's error and the command that works, never 'failed'."""
    from attention_book.grade import sandbox

    message = "Unable to handle autograd's threading in combination with fork-based multiprocessing."
    assert sandbox.autograd_problem() is None, "this process can run autograd in a forked check"
    monkeypatch.setattr(sandbox, "autograd_problem", lambda: message)
    rows = grade_file(write(tmp_path, "submission.ipynb", solved()), limits=FAST)
    assert set(statuses(rows).values()) == {"error"}, statuses(rows)
    assert all("python -m attention_book.grade" in row.feedback and message in row.feedback for row in rows)
