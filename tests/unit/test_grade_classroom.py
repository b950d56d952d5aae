"""``python -m attention_book.grade.classroom passed GRADEBOOK N.M``: an exercise's row as an exit status.

GitHub Classroom's command grader awards an exercise's points on exit status 0, so 0 must mean exactly
"this exercise's row says passed"; everything else a student can cause is 1, and a question the
gradebook cannot answer is 2. The gradebooks here are written by hand in the grader's columns;
tests/book/test_classroom.py runs the command on a gradebook the grader wrote.
"""

from __future__ import annotations

import csv

import pytest

from attention_book.exercises import get
from attention_book.grade.classroom import NO_ANSWER, NOT_PASSED, PASSED, NoAnswer, main, read_rows, verdict
from attention_book.grade.engine import COLUMNS


def row(exercise: str, status: str, *, submission="01_attention_math.ipynb", feedback="", points=None) -> dict:
    earned = (1 if status == "passed" else 0) if points is None else points
    chapter = exercise.split(".")[0] if exercise else "1"
    return {
        "submission": submission, "chapter": chapter, "exercise": exercise, "points": str(earned),
        "max_points": "1" if exercise else "0", "status": status, "feedback": feedback, "sha256": "ab" * 32,
    }  # fmt: skip


def write(path, rows, columns=COLUMNS):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


CHAPTER_1 = [
    row("1.1", "passed"),
    row("1.2", "failed", feedback="causality: changing tokens 3-4 moved the outputs at 0-2 by 0.5"),
    row("1.3", "not attempted", feedback="not implemented yet."),
    row("1.4", "error", feedback="cell 85: NameError: name 'torhc' is not defined"),
    row("1.5", "timeout", feedback="the check did not finish in 120 s"),
]


def test_a_passed_row_exits_0_and_names_the_exercise_and_its_points():
    status, line = verdict(CHAPTER_1, "1.1")
    assert status == PASSED == 0
    assert line == f"Exercise 1.1 ({get('1.1').title}): passed, 1 of 1 point(s)."


@pytest.mark.parametrize("exercise, status", [("1.2", "failed"), ("1.3", "not attempted"), ("1.4", "error"), ("1.5", "timeout")])  # fmt: skip
def test_every_other_status_exits_1_with_the_graders_feedback(exercise, status):
    code, line = verdict(CHAPTER_1, exercise)
    assert code == NOT_PASSED == 1
    assert line.startswith(f"Exercise {exercise} ({get(exercise).title}): {status}, 0 of 1 point(s).")
    feedback = next(r["feedback"] for r in CHAPTER_1 if r["exercise"] == exercise)
    assert line.endswith(feedback)


def test_only_the_status_counts_not_the_points_column():
    """A row with points but not ``passed`` (a hand-edited gradebook) does not pass."""
    assert verdict([row("1.1", "failed", points=1)], "1.1")[0] == NOT_PASSED
    assert verdict([row("1.1", "passed", points=0)], "1.1")[0] == PASSED


def test_a_notebook_that_could_not_be_graded_fails_every_exercise_with_the_reason():
    whole = [row("", "error", feedback="this is a notebook of chapter 2, but this assignment is chapter 1")]
    for exercise in ("1.1", "1.5"):
        code, line = verdict(whole, exercise)
        assert code == NOT_PASSED
        assert "could not be graded" in line and "this assignment is chapter 1" in line


def test_a_gradebook_without_the_exercise_fails_it_and_says_which_were_graded():
    code, line = verdict(
        [row("2.1", "passed", submission="x.ipynb"), row("2.2", "failed", submission="x.ipynb")], "1.1"
    )
    assert code == NOT_PASSED
    assert "no row for it" in line and "2.1, 2.2" in line and "chapter 1" in line


def test_several_submissions_need_submission_to_say_which():
    rows = CHAPTER_1 + [row("1.1", "failed", submission="other.ipynb")]
    with pytest.raises(NoAnswer, match="2 submissions"):
        verdict(rows, "1.1")
    assert verdict(rows, "1.1", submission="01_attention_math.ipynb")[0] == PASSED
    assert verdict(rows, "1.1", submission="other.ipynb")[0] == NOT_PASSED
    with pytest.raises(NoAnswer, match="no rows of 'absent.ipynb'"):
        verdict(rows, "1.1", submission="absent.ipynb")


def test_an_unknown_exercise_is_a_key_error():
    with pytest.raises(KeyError, match="no exercise '9.9'"):
        verdict(CHAPTER_1, "9.9")


def test_read_rows_refuses_what_is_not_a_gradebook(tmp_path):
    with pytest.raises(NoAnswer, match="does not exist: did the grading step"):
        read_rows(tmp_path / "gradebook.csv")
    wrong = write(tmp_path / "wrong.csv", [{"name": "a"}], columns=["name", "score"])
    with pytest.raises(NoAnswer, match="is not a gradebook: it has no column submission"):
        read_rows(wrong)
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(NoAnswer, match="cannot be read|not a gradebook"):
        read_rows(binary)
    assert read_rows(write(tmp_path / "good.csv", CHAPTER_1))[1]["status"] == "failed"


def test_main_prints_the_line_and_returns_the_exit_status(tmp_path, capsys):
    gradebook = write(tmp_path / "gradebook.csv", CHAPTER_1)
    assert main(["passed", str(gradebook), "1.1"]) == 0
    assert "passed, 1 of 1 point(s)" in capsys.readouterr().out
    assert main(["passed", str(gradebook), "1.2"]) == 1
    assert "failed, 0 of 1 point(s). causality" in capsys.readouterr().out


@pytest.mark.parametrize(
    "arguments, message",
    [
        (["passed", "{missing}", "1.1"], "does not exist"),
        (["passed", "{empty}", "1.1"], "has no rows: was a notebook graded?"),
        (["passed", "{gradebook}", "9.9"], "no exercise '9.9'"),
        (["passed", "{gradebook}", "1.1", "--submission", "nobody.ipynb"], "no rows of 'nobody.ipynb'"),
    ],
)
def test_main_exits_2_when_the_gradebook_cannot_answer(tmp_path, capsys, arguments, message):
    paths = {
        "missing": tmp_path / "missing.csv",
        "empty": write(tmp_path / "empty.csv", []),
        "gradebook": write(tmp_path / "gradebook.csv", CHAPTER_1),
    }
    assert main([argument.format(**paths) for argument in arguments]) == NO_ANSWER == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("error: ") and message in captured.err


def test_main_needs_the_passed_command_and_its_arguments(capsys):
    with pytest.raises(SystemExit) as raised:
        main([])
    assert raised.value.code == 2
    with pytest.raises(SystemExit) as raised:
        main(["passed", "gradebook.csv"])
    assert raised.value.code == 2
    assert "exercise" in capsys.readouterr().err
