"""How long an exercise's check takes (issue 45's aim: under 1 s per check), measured rather than asserted in a test.

For every exercise of the chapters, the check is timed (``attention_book.exercises.evaluate``, which runs on one
torch thread, as ``check()`` in a student's notebook and the grader do) on the registered solution, on every
registered mistake and on every answer of the issue-45 catalogue (``tests/unit/test_exercises_catalogue.py``: its
wrong answers and its correct variants), each answer three times. Reported per exercise: the answers timed, the
median and the slowest time, and whether the slowest is under the aim.

A check runs the student's own code. Exercise 7.3's answer takes ``fit`` and ``score`` (the chapter's probe functions
by default), and its checker passes a closed-form probe through them; an answer written in the older form, with four
parameters, trains its own logistic probes (8 + 4 probes of 200 Adam steps), so its time is mostly the answer's, not
the checker's. 7.3 is reported in two rows, one per form.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AIM_SECONDS = 1.0
REPEATS = 3


def _answers() -> dict[str, list]:
    """Every answer to time, per exercise: the solution, the registered mistakes, the catalogue's answers."""
    from attention_book.exercises import REGISTRY, load_all
    from tests.unit.test_exercises_catalogue import CORRECT, WRONG

    load_all()
    answers: dict[str, list] = {key: [] for key in REGISTRY if not key.startswith("0.")}
    for key, exercise in REGISTRY.items():
        if key in answers:
            answers[key] += [exercise.solution, *(mistake.answer for mistake in exercise.mistakes)]
    for exercise_id, _name, answer, *_rest in [*WRONG, *CORRECT]:
        answers[exercise_id].append(answer)
    return answers


def _forms(exercise_id: str, answers: list) -> dict[str, list]:
    """The answers of one row each: 7.3's split by form (with fit and score, or the four-parameter form)."""
    if exercise_id != "7.3":
        return {exercise_id: answers}
    from attention_book.exercises.chapter07 import _probe_parameters

    with_probes = [answer for answer in answers if _probe_parameters(answer) is not None]
    four = [answer for answer in answers if _probe_parameters(answer) is None]
    return {"7.3 (fit, score)": with_probes, "7.3 (four parameters)": four}


def bench_checks(repeats: int = REPEATS) -> list[dict]:
    """One row per exercise (7.3: per form): answers timed, median and slowest seconds of one check."""
    from attention_book.exercises import evaluate

    rows = []
    for exercise_id, answers in sorted(_answers().items(), key=lambda item: [int(part) for part in item[0].split(".")]):
        for label, chosen in _forms(exercise_id, answers).items():
            times = []
            for answer in chosen:
                for _ in range(repeats):
                    start = time.perf_counter()
                    evaluate(exercise_id, answer)
                    times.append(time.perf_counter() - start)
            rows.append(
                {
                    "exercise": label,
                    "answers": len(chosen),
                    "median_s": statistics.median(times),
                    "max_s": max(times),
                }
            )
    return rows


def checks_lines(results: dict) -> list[str]:
    rows = results["checks"]
    slow = [row["exercise"] for row in rows if row["max_s"] >= AIM_SECONDS]
    lines = [
        "## Exercise checks: seconds per check (issue 45's aim: under 1 s)",
        "",
        f"`evaluate()` on one torch thread, each answer {REPEATS} times: the registered solution and mistakes and "
        "the issue-45 catalogue's wrong answers and correct variants. A check runs the answer's own code: 7.3's answer "
        "with fit and score gets the checker's closed-form probe through them; one in the older four-parameter form "
        "trains its own 12 logistic probes (the row '7.3 (four parameters)').",
        "",
        "| exercise | answers | median s | slowest s | slowest under 1 s |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [
        f"| {row['exercise']} | {row['answers']} | {row['median_s']:.3f} | {row['max_s']:.3f} | "
        f"{'yes' if row['max_s'] < AIM_SECONDS else 'no'} |"
        for row in rows
    ]
    lines += ["", f"Exercises whose slowest check took 1 s or more: {', '.join(slow) or 'none'}.", ""]
    return lines


if __name__ == "__main__":
    for line in checks_lines({"checks": bench_checks()}):
        print(line)
