"""Chapter 1's exercises: solutions pass, known mistakes get their hints, and 1.3's threshold is right."""

import math

import pytest

from attention_book.exercises import NOT_IMPLEMENTED, check, get, load_all
from attention_book.exercises import chapter01

load_all()
IDS = ["1.1", "1.2", "1.3"]


def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("exercise_id", IDS)
def test_solution_passes_on_fresh_random_inputs(exercise_id, capsys):
    for _ in range(3):
        assert check(exercise_id, get(exercise_id).solution)
    assert capsys.readouterr().out.count("passed") == 3


@pytest.mark.parametrize(
    "exercise_id, mistake",
    [(key, mistake) for key in IDS for mistake in get(key).mistakes],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_known_mistake_fails_with_its_hint(exercise_id, mistake, capsys):
    assert not check(exercise_id, mistake.answer)
    assert mistake.hint in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id", IDS)
def test_a_stub_is_reported_as_not_implemented(exercise_id, capsys):
    assert not check(exercise_id, _stub)
    assert NOT_IMPLEMENTED in capsys.readouterr().out


def test_the_scale_can_decide_exactly_from_d_k_129():
    # two keys with score gap g: sigmoid(g) > 0.99 and sigmoid(g / sqrt(d_k)) < 0.6
    threshold = (math.log(99) / math.log(1.5)) ** 2
    assert 128 < threshold < 129
    assert not chapter01._feasible(128) and chapter01._feasible(129)
    assert chapter01._scaling_matters_solution(128) is None
    query, keys = chapter01._scaling_matters_solution(129)
    unscaled, scaled = chapter01._top_weights(query, keys)
    assert unscaled > 0.99 and scaled < 0.6
