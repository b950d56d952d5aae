"""The exercise registry: every exercise has an id, a title, a checker and known mistakes.

Chapters 1-7 call :func:`check` and :func:`summary` from here; the checkers live in
``exercises/chapterNN.py``, one module per chapter.

A *checker* is a function ``checker(answer) -> None`` that tests the student's answer
(usually a function or class) on fresh seeded random inputs against the reference
implementation and raises :class:`ExerciseFailure` with a message that names the
mistake and gives a hint. :func:`check` turns that into exactly one printed line.

Each exercise also registers a correct ``solution`` and a list of :class:`Mistake`
objects (typical wrong answers together with the text their hint must contain);
the test suite runs every one of them through :func:`check`.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

PASS_MARK = "✅"
FAIL_MARK = "❌"
NOT_IMPLEMENTED = "not implemented yet"


class ExerciseFailure(Exception):
    """Raised by a checker: the message says what is wrong and how to fix it."""


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer and a fragment of the hint it must receive."""

    name: str
    answer: Any
    hint: str


@dataclass
class Exercise:
    id: str
    title: str
    checker: Callable[[Any], None]
    solution: Any = None
    mistakes: list[Mistake] = field(default_factory=list)

    @property
    def chapter(self) -> str:
        return self.id.split(".")[0]


REGISTRY: dict[str, Exercise] = {}
# Outcome of the latest check of each exercise in this kernel: True (passed) or False.
RESULTS: dict[str, bool] = {}


def register(exercise_id: str, title: str, checker: Callable[[Any], None], solution: Any, mistakes: list[Mistake]) -> Exercise:
    """Add an exercise; ids look like ``"1.2"`` (chapter.number)."""
    if exercise_id in REGISTRY:
        raise ValueError(f"exercise {exercise_id!r} is registered twice")
    if len(mistakes) < 2:
        raise ValueError(f"exercise {exercise_id!r} needs at least two known mistakes, got {len(mistakes)}")
    exercise = Exercise(exercise_id, title, checker, solution, list(mistakes))
    REGISTRY[exercise_id] = exercise
    return exercise


_loaded = False


def load_all() -> None:
    """Import every ``chapterNN`` module of this package, registering its exercises (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    package = __name__.rsplit(".", 1)[0]  # attention_book.exercises
    for module in sorted(pkgutil.iter_modules(importlib.import_module(package).__path__), key=lambda m: m.name):
        if module.name.startswith("chapter") or module.name.startswith("sample"):
            importlib.import_module(f"{package}.{module.name}")


def get(exercise_id: str) -> Exercise:
    load_all()
    key = str(exercise_id)
    if key not in REGISTRY:
        raise KeyError(f"no exercise {key!r}; known exercises: {', '.join(sorted(REGISTRY, key=_sort_key))}")
    return REGISTRY[key]


def _sort_key(exercise_id: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in exercise_id.split("."))


def _raised_not_implemented(error: BaseException) -> bool:
    return isinstance(error, NotImplementedError)


class CheckResult:
    """What :func:`check` returns: true when the exercise passed, and invisible in a notebook.

    A plain ``True`` would be displayed under the check line as the cell's result.
    """

    __slots__ = ("passed",)

    def __init__(self, passed: bool):
        self.passed = bool(passed)

    def __bool__(self) -> bool:
        return self.passed

    def __eq__(self, other: object) -> bool:
        return bool(self) == other if isinstance(other, bool) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.passed)

    def __repr__(self) -> str:
        return f"CheckResult(passed={self.passed})"

    def _ipython_display_(self) -> None:
        """Display nothing: check() has printed its line."""


def check(exercise_id: str, answer: Any) -> CheckResult:
    """Check ``answer`` for an exercise; print one line saying whether it passed and why not.

    Never raises: an answer that crashes gets a line naming the error and where it happened.
    Returns a :class:`CheckResult`, true when the answer passed; a notebook shows nothing
    for it (the printed line says it all), so a check cell shows exactly one line.
    """
    try:
        exercise = get(exercise_id)
    except KeyError as error:
        print(f"{FAIL_MARK} {error.args[0]}")
        return CheckResult(False)
    label = f"Exercise {exercise.id} ({exercise.title})"
    try:
        with torch.random.fork_rng(devices=[]):
            exercise.checker(answer)
    except ExerciseFailure as failure:
        RESULTS[exercise.id] = False
        print(f"{FAIL_MARK} {label}: {_one_line(str(failure))}")
        return CheckResult(False)
    except NotImplementedError:
        RESULTS[exercise.id] = False
        print(f"{FAIL_MARK} {label}: {NOT_IMPLEMENTED}. Replace the `raise NotImplementedError` with your code.")
        return CheckResult(False)
    except Exception as error:  # the student's code crashed: name it, never raise
        RESULTS[exercise.id] = False
        frame = traceback.extract_tb(error.__traceback__)[-1]
        where = f"line {frame.lineno} of {frame.name}()" if frame else "your code"
        message = _one_line(str(error).strip().splitlines()[0]) if str(error).strip() else ""
        print(_one_line(f"{FAIL_MARK} {label}: your code raised {type(error).__name__} at {where}: {message}")[:400])
        return CheckResult(False)
    RESULTS[exercise.id] = True
    print(f"{PASS_MARK} {label}: passed.")
    return CheckResult(True)


def _one_line(text: str) -> str:
    """``text`` on one line: check() promises exactly one printed line."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def summary(chapter: int | str | None = None) -> None:
    """Print a table of exercises (of one chapter, or all) and whether they pass in this session.

    Without a chapter, every chapter of the book is listed except the sample chapter 0
    (``tests/sample_exercises``), which only demonstrates the mechanism; ``summary(0)``
    lists it.
    """
    load_all()
    wanted = None if chapter is None else (str(int(chapter)) if str(chapter).isdigit() else str(chapter))
    chosen = [
        exercise
        for key, exercise in sorted(REGISTRY.items(), key=lambda item: _sort_key(item[0]))
        if (exercise.chapter != "0" if wanted is None else exercise.chapter == wanted)
    ]
    if not chosen:
        print(f"No exercises registered for chapter {chapter}.")
        return
    width = max(len(exercise.title) for exercise in chosen)
    print(f"{'exercise':<9} {'title':<{width}}  status")
    for exercise in chosen:
        state = RESULTS.get(exercise.id)
        status = "passed" if state else ("not yet passing" if state is False else "not checked yet")
        print(f"{exercise.id:<9} {exercise.title:<{width}}  {status}")
    passed = sum(1 for exercise in chosen if RESULTS.get(exercise.id))
    print(f"{passed} of {len(chosen)} exercises pass.")


# ---------------------------------------------------------------------------------
# Helpers for writing checkers


def diagnose_weights(weights, expected, what: str, known_mistakes: dict) -> None:
    """:func:`diagnose` for attention weights: a generic difference whose rows do not sum to 1
    is reported as that, the clearer hint (chapters 1 and 2)."""
    try:
        diagnose(weights, expected, what, known_mistakes=known_mistakes)
    except ExerciseFailure as failure:
        if "differs from the reference" in str(failure):
            sums = weights.sum(dim=-1)
            if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
                raise ExerciseFailure(
                    f"{what} is wrong: its rows should each sum to 1 (a softmax over the last axis, the keys), "
                    f"but one sums to {sums.flatten()[(sums - 1).abs().flatten().argmax()]:.3f}"
                ) from None
        raise


def random_generator(seed: int | None = None) -> torch.Generator:
    """A fresh generator; without a seed, a new one each call so answers cannot be memorised."""
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def call(answer: Callable, *args, what: str = "your function", **kwargs):
    """Call the student's answer; a NotImplementedError passes through, other errors become failures."""
    if not callable(answer):
        raise ExerciseFailure(f"expected a function or class, but got {type(answer).__name__}")
    return answer(*args, **kwargs)


def require_tensor_like(got: Any, expected: torch.Tensor, what: str) -> torch.Tensor:
    """Check ``got`` is a tensor with the expected shape; returns it as float tensor."""
    if not isinstance(got, torch.Tensor):
        raise ExerciseFailure(f"{what} should be a torch.Tensor of shape {tuple(expected.shape)}, but is a {type(got).__name__}")
    if tuple(got.shape) != tuple(expected.shape):
        raise ExerciseFailure(f"{what} has shape {tuple(got.shape)} but should have shape {tuple(expected.shape)}")
    return got.detach().to(expected.dtype)


def diagnose(
    got: torch.Tensor,
    expected: torch.Tensor,
    what: str,
    known_mistakes: dict[str, torch.Tensor] | None = None,
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Pass if ``got`` matches ``expected``; otherwise name the first known mistake it matches.

    ``known_mistakes`` maps a hint (e.g. "you forgot to divide the scores by sqrt(d_k)")
    to what that mistake would have produced on the same inputs.
    """
    got = require_tensor_like(got, expected, what)
    if torch.allclose(got, expected, atol=atol, rtol=rtol):
        return
    for hint, wrong in (known_mistakes or {}).items():
        if wrong is not None and wrong.shape == got.shape and torch.allclose(got, wrong.to(got.dtype), atol=atol, rtol=rtol):
            raise ExerciseFailure(f"{what} is wrong: {hint}")
    difference = (got - expected).abs().max().item()
    raise ExerciseFailure(
        f"{what} differs from the reference by up to {difference:.3g} on random inputs; "
        "compare your steps with the equations above the exercise"
    )
