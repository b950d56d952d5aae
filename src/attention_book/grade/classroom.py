"""One exercise's row of a gradebook as an exit status, for GitHub Classroom's command grader.

    python -m attention_book.grade.classroom passed gradebook.csv 1.1 [--submission NAME]

GitHub Classroom's ``classroom-resources/autograding-command-grader`` awards a test's points when
its command exits with status 0. The assignment template of each chapter (1-7), written by
``tools/notebooks/classroom_template.py``, grades the student's notebook once
(``python -m attention_book.grade ... --out gradebook.csv``) and then asks this command, once per
exercise, whether that exercise's row says ``passed``. It prints one line, the exercise, its
result and the grader's feedback, and exits with

* 0: the row says ``passed``;
* 1: it does not (failed, not attempted, error, timeout, or the notebook could not be graded at all);
* 2: there is no answer to give (no gradebook, an unknown exercise, or several submissions in the
  gradebook and no ``--submission`` to say which).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from ..exercises import get
from .engine import COLUMNS

PASSED, NOT_PASSED, NO_ANSWER = 0, 1, 2


class NoAnswer(Exception):
    """The gradebook cannot say whether the exercise passed; the message says why."""


def read_rows(path: Path) -> list[dict[str, str]]:
    """The gradebook's rows as dicts of its columns; :class:`NoAnswer` if it is missing or not a gradebook."""
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [column for column in COLUMNS if column not in (reader.fieldnames or [])]
            if missing:
                raise NoAnswer(f"{path} is not a gradebook: it has no column {', '.join(missing)}")
            return list(reader)
    except FileNotFoundError:
        raise NoAnswer(f"{path} does not exist: did the grading step (python -m attention_book.grade) run?") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise NoAnswer(f"{path} cannot be read: {error}") from None


def _submission_rows(rows: list[dict[str, str]], submission: str | None, path: Path) -> list[dict[str, str]]:
    names = list(dict.fromkeys(row["submission"] for row in rows))
    if submission is not None:
        if submission not in names:
            raise NoAnswer(f"{path} has no rows of {submission!r} (it has: {', '.join(names) or 'none'})")
        return [row for row in rows if row["submission"] == submission]
    if not names:
        raise NoAnswer(f"{path} has no rows: was a notebook graded?")
    if len(names) > 1:
        raise NoAnswer(f"{path} holds {len(names)} submissions ({', '.join(names)}): name one with --submission")
    return rows


def verdict(rows: list[dict[str, str]], exercise_id: str, *, submission: str | None = None, path=Path("gradebook")):
    """(exit status, the line to print) for one exercise of one submission's rows."""
    exercise = get(exercise_id)  # KeyError for an exercise the registry does not know
    mine = _submission_rows(rows, submission, Path(path))
    name = f"Exercise {exercise_id} ({exercise.title})"
    for row in mine:
        if row["exercise"] == exercise_id:
            points = f"{row['points']} of {row['max_points']} point(s)"
            if row["status"] == "passed":
                return PASSED, f"{name}: passed, {points}."
            return NOT_PASSED, f"{name}: {row['status']}, {points}. {row['feedback']}".rstrip()
    whole_file = [row for row in mine if not row["exercise"]]
    if whole_file:
        row = whole_file[0]
        return (
            NOT_PASSED,
            f"{name}: 0 of {exercise.points} point(s): the notebook could not be graded: {row['feedback']}",
        )
    graded = ", ".join(row["exercise"] for row in mine)
    return NOT_PASSED, (
        f"{name}: 0 of {exercise.points} point(s): the gradebook has no row for it (it graded {graded}): "
        f"was the notebook of chapter {exercise.chapter} graded?"
    )


def parser() -> argparse.ArgumentParser:
    described = argparse.ArgumentParser(
        prog="python -m attention_book.grade.classroom",
        description="Exit 0 if an exercise's row in a gradebook says passed, 1 if not, 2 if it cannot tell "
        "(GitHub Classroom's command grader awards the points on exit status 0).",
    )
    commands = described.add_subparsers(dest="command", required=True)
    passed = commands.add_parser("passed", help="did this exercise pass?")
    passed.add_argument("gradebook", type=Path, help="the CSV written by python -m attention_book.grade --out")
    passed.add_argument("exercise", help="the exercise's id, e.g. 1.1")
    passed.add_argument("--submission", help="the submission's name in the gradebook, if it holds several")
    return described


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    try:
        rows = read_rows(arguments.gradebook)
        status, line = verdict(rows, arguments.exercise, submission=arguments.submission, path=arguments.gradebook)
    except KeyError as error:
        print(f"error: {error.args[0]}", file=sys.stderr)
        return NO_ANSWER
    except NoAnswer as error:
        print(f"error: {error}", file=sys.stderr)
        return NO_ANSWER
    print(line)
    return status


if __name__ == "__main__":
    sys.exit(main())
