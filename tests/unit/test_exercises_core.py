"""attention_book.exercises (check, summary, the registry), over every registered exercise: its
solution passes, each known mistake gets its own hint, a stub is "not implemented yet", and
check() never raises and always prints exactly one line.

Parametrised over the whole REGISTRY (after load_all()), so a chapter's exercises are tested
as soon as its ``attention_book/exercises/chapterNN.py`` registers them.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from attention_book.exercises import (
    FAIL_MARK,
    NOT_IMPLEMENTED,
    PASS_MARK,
    REGISTRY,
    RESULTS,
    CheckResult,
    Mistake,
    check,
    load_all,
    summary,
)
from attention_book.exercises._core import broken_property

load_all()
IDS = sorted(REGISTRY, key=lambda key: tuple(int(part) for part in key.split(".")))
MISTAKES = [(key, mistake) for key in IDS for mistake in REGISTRY[key].mistakes]


def _label(value):
    return value.name if isinstance(value, Mistake) else str(value)


@pytest.fixture(autouse=True)
def _keep_results():
    """check() records outcomes in RESULTS; leave it as it was for other tests."""
    saved = dict(RESULTS)
    yield
    RESULTS.clear()
    RESULTS.update(saved)


def _one_line(capsys) -> str:
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert len(lines) == 1 and out.endswith("\n"), f"check() must print exactly one line, printed:\n{out}"
    return lines[0]


def test_the_sample_chapter_and_the_chapters_are_registered():
    assert "0.1" in REGISTRY
    for key, exercise in REGISTRY.items():
        chapter, number = key.split(".")
        assert chapter.isdigit() and number.isdigit(), f"exercise ids look like 'N.M', got {key!r}"
        assert exercise.title and exercise.solution is not None


@pytest.mark.parametrize("exercise_id", IDS)
def test_solution_passes_on_fresh_random_inputs(exercise_id, capsys):
    for _ in range(3):  # the checker draws new inputs every time
        assert check(exercise_id, REGISTRY[exercise_id].solution)
        line = _one_line(capsys)
        assert line.startswith(PASS_MARK) and line.endswith("passed.")
    assert RESULTS[exercise_id] is True


@pytest.mark.parametrize("exercise_id", IDS)
def test_every_exercise_knows_at_least_two_mistakes(exercise_id):
    mistakes = REGISTRY[exercise_id].mistakes
    assert len(mistakes) >= 2
    assert all(mistake.hint.strip() and mistake.answer is not None for mistake in mistakes)


@pytest.mark.parametrize("exercise_id, mistake", MISTAKES, ids=_label)
def test_known_mistake_fails_with_its_own_hint(exercise_id, mistake, capsys):
    """A registered mistake fails. Its line names the first property it breaks (issue 32: diagnosis by the
    idea), or, where no probe finds one, its registered hint; and with the probes switched off, the fallback
    (the checker's registered variants) still names it by its registered hint."""
    exercise = REGISTRY[exercise_id]
    for _ in range(2):  # on several fresh random inputs
        assert not check(exercise_id, mistake.answer)
        line = _one_line(capsys)
        assert line.startswith(FAIL_MARK)
        broken = broken_property(exercise, mistake.answer)
        if broken is None:
            assert mistake.hint in line, f"{mistake.name!r} should get the hint {mistake.hint!r}; got: {line}"
        else:
            assert f"{broken[0].name}: {broken[1]}" in line, line
    with mock.patch.object(exercise, "properties", []):
        assert not check(exercise_id, mistake.answer)
    line = _one_line(capsys)
    assert mistake.hint in line, f"the fallback should give {mistake.name!r} the hint {mistake.hint!r}; got: {line}"
    assert RESULTS[exercise_id] is False


def _stub(*args, **kwargs):
    raise NotImplementedError("Exercise N.M: not implemented yet")


class _StubClass:
    """A generated class stub: its __init__ raises, like a stubbed torch.nn.Module."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("Exercise N.M: not implemented yet")


@pytest.mark.parametrize("exercise_id", IDS)
@pytest.mark.parametrize("stub", [_stub, _StubClass], ids=["function", "class"])
def test_a_stub_is_not_implemented_yet(exercise_id, stub, capsys):
    assert not check(exercise_id, stub)
    line = _one_line(capsys)
    assert NOT_IMPLEMENTED in line and line.startswith(FAIL_MARK)


def _raises_zero_division(*args, **kwargs):
    return 1 / 0


def _returns_garbage(*args, **kwargs):
    return "garbage"


def _returns_none(*args, **kwargs):
    return None


def _returns_nan(*args, **kwargs):
    return torch.full((2, 3), float("nan"))


def _raises_multiline(*args, **kwargs):
    raise ValueError("first line\nsecond line\n\nthird")


def _takes_nothing():
    return 0


BAD_ANSWERS = {
    "None": None,
    "a number": 42,
    "raises ZeroDivisionError": _raises_zero_division,
    "returns garbage": _returns_garbage,
    "returns None": _returns_none,
    "returns a nan tensor": _returns_nan,
    "raises a multi-line error": _raises_multiline,
    "takes no arguments": _takes_nothing,
}


@pytest.mark.parametrize("exercise_id", IDS)
@pytest.mark.parametrize("name", list(BAD_ANSWERS))
def test_check_never_raises_and_prints_one_line(exercise_id, name, capsys):
    assert not check(exercise_id, BAD_ANSWERS[name])
    line = _one_line(capsys)
    assert line.startswith(FAIL_MARK) and f"Exercise {exercise_id}" in line


def test_an_unknown_exercise_is_one_line_not_an_exception(capsys):
    assert not check("99.9", _stub)
    line = _one_line(capsys)
    assert "99.9" in line and "0.1" in line  # names the known exercises


@pytest.mark.parametrize("exercise_id", IDS)
def test_check_leaves_the_global_random_state_alone(exercise_id, capsys):
    """A notebook's later cells must not depend on whether a check ran (nbval reproduces outputs)."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check(exercise_id, REGISTRY[exercise_id].solution)
    check(exercise_id, REGISTRY[exercise_id].mistakes[0].answer)
    assert torch.equal(torch.rand(3), expected)
    capsys.readouterr()


def test_summary_lists_a_chapter_with_the_state_of_each_exercise(capsys):
    RESULTS.pop("0.1", None)
    summary(0)
    out = capsys.readouterr().out
    assert "0.1" in out and "not checked yet" in out and "0 of 1 exercises pass." in out
    check("0.1", _stub)
    check("0.1", REGISTRY["0.1"].mistakes[0].answer)
    capsys.readouterr()
    summary(0)
    assert "not yet passing" in capsys.readouterr().out
    check("0.1", REGISTRY["0.1"].solution)
    capsys.readouterr()
    summary("0")
    out = capsys.readouterr().out
    assert "passed" in out and "1 of 1 exercises pass." in out


def test_summary_of_the_whole_book_leaves_out_the_sample_chapter(capsys):
    summary()
    out = capsys.readouterr().out
    assert "Attention weights of a few queries" not in out
    book = [key for key in IDS if not key.startswith("0.")]
    assert all(f"\n{key} " in f"\n{out}" for key in book)
    if not book:
        assert "No exercises" in out


def test_summary_of_a_chapter_without_exercises_says_so(capsys):
    summary(98)
    assert capsys.readouterr().out == "No exercises registered for chapter 98.\n"


def test_check_returns_a_result_that_a_notebook_does_not_display(capsys):
    """check() prints its one line; its result is true or false but shows nothing in a notebook
    (a plain True was displayed under every check line)."""
    result = check("99.9", _stub)
    assert isinstance(result, CheckResult) and not result and result == False  # noqa: E712
    assert result._ipython_display_() is None
    assert "CheckResult(passed=False)" == repr(result)
