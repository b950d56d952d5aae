"""One check in a fresh Python process, for a check cell that runs inside the student's kernel
(the nbgrader course of every chapter).

nbgrader's autograder runs a notebook's test cells in the same kernel as the student's cells, so a
cell that redefined ``check`` or patched ``attention_book.exercises`` there would change its verdict.
:func:`assert_passes`, called by the course's locked test cells (``make nbgrader``), hands the answer
by value (cloudpickle) to a new interpreter, where none of the student's cells ran, and raises
``AssertionError`` with the hint when the answer does not pass, which nbgrader scores as 0 points.

Run as ``python -m attention_book.grade.isolated EXERCISE_ID`` it reads the pickled answer on
standard input and prints one line of JSON: ``{"status": ..., "line": ...}``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

RESULT_PREFIX = "attention-book-result: "


def outcome_in_fresh_process(exercise_id: str, answer: Any, *, timeout: float = 120.0) -> dict[str, str]:
    """``{"status": ..., "line": ...}`` of one exercise, judged by a new Python process."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(answer)
    except Exception as error:
        line = (
            f"✗ Exercise {exercise_id}: the answer could not be handed to the grader ({type(error).__name__}: {error})"
        )
        return {"status": "error", "line": line}
    command = [sys.executable, "-m", "attention_book.grade.isolated", str(exercise_id)]
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "line": f"✗ Exercise {exercise_id}: the check did not finish in {timeout:g} s"}
    for line in reversed(done.stdout.decode("utf-8", "replace").splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
    return {"status": "error", "line": f"✗ Exercise {exercise_id}: the check's process failed ({tail[0][:200]})"}


def assert_passes(exercise_id: str, answer: Any, *, timeout: float = 120.0) -> None:
    """Print the exercise's one line; raise ``AssertionError`` (the line) unless the answer passes."""
    outcome = outcome_in_fresh_process(exercise_id, answer, timeout=timeout)
    from ..exercises import RESULTS

    RESULTS[str(exercise_id)] = outcome["status"] == "passed"  # what summary(N) reports in this kernel
    print(outcome["line"])
    if outcome["status"] != "passed":
        raise AssertionError(outcome["line"])


def _main(argv: list[str]) -> int:
    import pickle

    import torch

    from ..exercises import evaluate

    torch.set_num_threads(1)
    if len(argv) != 1:
        print("usage: python -m attention_book.grade.isolated EXERCISE_ID < answer.pickle", file=sys.stderr)
        return 2
    try:
        answer = pickle.loads(sys.stdin.buffer.read())
        outcome = evaluate(argv[0], answer)
        result = {"status": outcome.status, "line": outcome.line}
    except KeyError as error:
        result = {"status": "error", "line": f"✗ {error.args[0]}"}
    except Exception as error:
        result = {"status": "error", "line": f"✗ Exercise {argv[0]}: the grader could not load the answer ({error})"}
    print(RESULT_PREFIX + json.dumps(result, ensure_ascii=False), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
