"""Chapter 1's exercises: solutions pass, known mistakes get their hints, 1.3's threshold is right, 1.4 matches the package's additive score and 1.5 the chapter's influence measurement."""

import math

import pytest

from attention_book.exercises import NOT_IMPLEMENTED, chapter01, check, get, load_all
from tests.helpers import expected_hint

load_all()
IDS = ["1.1", "1.2", "1.3", "1.4", "1.5"]


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
    assert expected_hint(exercise_id, mistake.answer, mistake.hint) in capsys.readouterr().out


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


def test_additive_attention_solution_equals_the_package_score():
    """1.4's reference computes what ``ab.AdditiveScore`` computes, so the chapter and the exercise agree."""
    import torch

    import attention_book as ab

    torch.manual_seed(0)
    score = ab.AdditiveScore(d_query=3, d_key=5, d_hidden=4)
    queries, keys, values = torch.randn(2, 3), torch.randn(6, 5), torch.randn(6, 2)
    W_1, W_2, w = score.W_1.weight.T, score.W_2.weight.T, score.w.weight[0]
    H, A = chapter01._additive_attention_solution(queries, keys, values, W_1, W_2, w)
    expected_A = torch.softmax(score(queries[None], keys[None])[0], dim=-1)
    torch.testing.assert_close(A, expected_A)
    torch.testing.assert_close(H, expected_A @ values)


def test_influence_solution_vanishes_for_a_shrinking_recurrence_and_is_exact_without_one():
    """1.5's reference: the last entry is 1, the first falls by orders of magnitude over 60 tokens
    with recurrent weights of largest singular value 0.9, and with W_h = 0 only the last token counts."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(60, 3, generator=generator, dtype=torch.float64)
    W_x = torch.randn(3, 8, generator=generator, dtype=torch.float64)
    W_h = 0.9 * torch.linalg.qr(torch.randn(8, 8, generator=generator, dtype=torch.float64))[0]
    influence = chapter01._influence_solution(x, W_x, W_h)
    assert influence.shape == (60,) and influence[-1] == 1
    assert influence[0] < 1e-3
    alone = chapter01._influence_solution(x, W_x, torch.zeros(8, 8, dtype=torch.float64))
    assert alone[:-1].abs().max() == 0 and alone[-1] == 1
