"""Grade one submission of any chapter: read it, run its cells, check every exercise, and say so row by row."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..exercises import get
from .sandbox import Limits, StudentRun, run_cells, run_check
from .submission import SubmissionError, content_hash, read_submission

STATUSES = ("passed", "failed", "not attempted", "error", "timeout")
COLUMNS = ("submission", "chapter", "exercise", "points", "max_points", "status", "feedback", "sha256")


@dataclass
class Row:
    """One line of the gradebook: one exercise of one submission (or the whole file, when it could
    not be read, with ``exercise`` empty)."""

    submission: str
    chapter: str
    exercise: str
    points: int
    max_points: int
    status: str
    feedback: str
    sha256: str

    def as_dict(self) -> dict[str, str]:
        return {key: str(value) for key, value in asdict(self).items()}


def prepare_worker() -> None:
    """Import what every check needs, once per worker process, before any fork.

    One torch thread: the class is graded in parallel processes, and a worker that never ran a
    multi-threaded operation forks safely (no thread pool to lose in the child).
    """
    import matplotlib

    matplotlib.use("Agg")
    import cloudpickle  # noqa: F401
    import IPython.core.interactiveshell  # noqa: F401
    import torch

    torch.set_num_threads(1)
    from ..exercises import load_all

    load_all()
    import attention_book  # noqa: F401 - what nearly every notebook imports first


def _file_rows(path: str, sha: str, chapter: str, message: str, status: str = "error") -> list[Row]:
    return [Row(path, chapter, "", points=0, max_points=0, status=status, feedback=message, sha256=sha)]


def grade_file(
    path: Path, *, name: str | None = None, chapter: str | None = None, limits: Limits = Limits()
) -> list[Row]:
    """The gradebook rows of one submitted file. Never raises for anything the file holds."""
    name = name or str(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        return _file_rows(name, "", chapter or "", message=f"the file cannot be read: {error.strerror or error}")
    sha = content_hash(data)
    try:
        submission = read_submission(path, data, chapter=chapter)
    except SubmissionError as error:
        return _file_rows(name, sha, chapter or "", message=str(error))
    except Exception as error:  # a notebook shaped in a way no rule above foresaw: one row, never a crash
        return _file_rows(name, sha, chapter or "", message=f"the grader could not read this notebook ({type(error).__name__}: {error})")  # fmt: skip
    if not submission.cells:
        return [_row(name, sha, exercise_id, status="not attempted", feedback="the notebook has no code cells") for exercise_id in submission.exercises]  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="attention-book-grade-"))
    try:
        names = {exercise_id: get(exercise_id).answer_names for exercise_id in submission.exercises}
        run = run_cells(submission.cells, submission.exercises, names, limits=limits, folder=folder)
        return [
            _grade_exercise(name, sha, exercise_id, run=run, limits=limits, folder=folder)
            for exercise_id in submission.exercises
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _row(name: str, sha: str, exercise_id: str, status: str, feedback: str) -> Row:
    exercise = get(exercise_id)
    points = exercise.points if status == "passed" else 0
    return Row(
        name,
        exercise.chapter,
        exercise_id,
        points=points,
        max_points=exercise.points,
        status=status,
        feedback=feedback,
        sha256=sha,
    )


def _grade_exercise(name: str, sha: str, exercise_id: str, run: StudentRun, limits: Limits, folder: Path) -> Row:
    if exercise_id in run.answers:
        status, hint = run_check(exercise_id, run.answers[exercise_id], limits, folder=folder)
        return _row(name, sha, exercise_id, status=status, feedback=hint)
    if run.stopped is not None and exercise_id not in run.missing:
        return _row(name, sha, exercise_id, status="timeout" if run.timed_out else "error", feedback=run.stopped)
    why = run.missing.get(exercise_id, "undefined:")
    expression = get(exercise_id).answer_expression
    kind, _, detail = why.partition(":")
    if kind == "undefined":
        return _undefined(name, sha, exercise_id, run=run, absent=detail.split(","))
    if kind == "unpicklable":
        message = f"`{expression}` could not be handed to the grader ({detail}): keep open files, generators and the like out of your answer"  # fmt: skip
    else:
        message = f"`{expression}` is {detail} once saved for the grader: an answer should be code and small tensors"
    return _row(name, sha, exercise_id, status="error", feedback=message)


def _undefined(name: str, sha: str, exercise_id: str, run: StudentRun, absent: list[str]) -> Row:
    listed = ", ".join(f"`{item}`" for item in absent if item)
    if run.timed_out:
        return _row(name, sha, exercise_id, status="timeout", feedback=f"{run.stopped}, so {listed} was never defined")
    if run.stopped is not None:
        return _row(name, sha, exercise_id, status="error", feedback=f"{run.stopped}; {listed} was never defined")
    if run.cell_errors:
        first = run.cell_errors[0]
        return _row(name, sha, exercise_id, status="error", feedback=f"{listed} is not defined: {first}")
    return _row(name, sha, exercise_id, status="not attempted", feedback=f"the notebook defines no {listed}: write it in the exercise's cell")  # fmt: skip
