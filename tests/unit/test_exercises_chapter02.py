"""Chapter 2's exercises: the solutions pass on every seed, each known mistake gets its own
hint on every seed, a stub is "not implemented yet", and other correct answers pass."""

import math

import pytest
import torch

import attention_book as ab
from attention_book.exercises import NOT_IMPLEMENTED, ExerciseFailure, _core, chapter02, check, get, load_all
from tests.helpers import expected_hint

load_all()
IDS = ["2.1", "2.2", "2.3"]
MISTAKES = [(key, mistake) for key in IDS for mistake in get(key).mistakes]


def _line(capsys) -> str:
    return capsys.readouterr().out.strip()


@pytest.fixture
def seeded(monkeypatch):
    """``seeded(s)`` makes the checkers draw their random inputs from seed ``s``."""

    def use(seed: int) -> None:
        monkeypatch.setattr(chapter02, "random_generator", lambda _=None: _core.random_generator(seed))

    return use


def _stub(*args, **kwargs):
    raise NotImplementedError("Exercise 2.N: not implemented yet")


@pytest.mark.parametrize("exercise_id", IDS)
def test_the_solution_passes_on_200_seeds(exercise_id, seeded, capsys):
    for seed in range(200):
        seeded(seed)
        assert check(exercise_id, get(exercise_id).solution), f"seed {seed}: {_line(capsys)}"
    capsys.readouterr()


@pytest.mark.parametrize(
    "exercise_id, mistake", MISTAKES, ids=lambda value: value if isinstance(value, str) else value.name
)
def test_each_known_mistake_gets_its_own_hint_on_20_seeds(exercise_id, mistake, seeded, capsys):
    for seed in range(20):
        seeded(seed)
        assert not check(exercise_id, mistake.answer)
        line = _line(capsys)
        wanted = expected_hint(exercise_id, mistake.answer, mistake.hint)
        assert wanted in line, f"seed {seed}: {mistake.name!r} should get {wanted!r}; got: {line}"
        assert "differs from the reference" not in line


@pytest.mark.parametrize("exercise_id", IDS)
def test_a_stub_is_reported_as_not_implemented(exercise_id, capsys):
    assert not check(exercise_id, _stub)
    assert NOT_IMPLEMENTED in _line(capsys)


# -- 2.1 one head -----------------------------------------------------------------------------


def test_the_reference_is_the_package_single_head_attention():
    generator = torch.Generator().manual_seed(0)
    x_query, x_memory, W_Q, W_K, W_V = chapter02._head_case(generator, 3, 7, 5, 4, 2)
    H, A = chapter02._reference_attend(x_query, x_memory, W_Q, W_K, W_V)
    expected_H, expected_A = ab.scaled_dot_product_attention(x_query @ W_Q, x_memory @ W_K, x_memory @ W_V)
    torch.testing.assert_close(H, expected_H)
    torch.testing.assert_close(A, expected_A)
    assert A.shape == (3, 7) and H.shape == (3, 2)


def _attend_with_the_package(x_query, x_memory, W_Q, W_K, W_V):
    return ab.scaled_dot_product_attention(x_query @ W_Q, x_memory @ W_K, x_memory @ W_V)


def _attend_batched(x_query, x_memory, W_Q, W_K, W_V):
    """Correct for any leading batch dimensions, with a scale taken from W_K and an explicit exp."""
    S = (x_query @ W_Q) @ (x_memory @ W_K).transpose(-2, -1) * W_K.shape[1] ** -0.5
    E = torch.exp(S - S.amax(dim=-1, keepdim=True))
    A = E / E.sum(dim=-1, keepdim=True)
    return A @ (x_memory @ W_V), A


@pytest.mark.parametrize("answer", [_attend_with_the_package, _attend_batched])
def test_other_correct_heads_pass(answer, capsys):
    assert check("2.1", answer), _line(capsys)


def test_weights_with_one_column_per_query_are_told_to_use_x_memory():
    generator = torch.Generator().manual_seed(1)
    args = chapter02._head_case(generator, 2, 6, 4, 3, 5)
    H, A = chapter02._attend_memory_from_query(*args)  # (2, 5) and (2, 2) instead of (2, 6)
    with pytest.raises(ExerciseFailure, match="must come from x_memory"):
        chapter02._check_shapes(H, A, args, "(test)")


def test_weights_with_one_row_per_key_are_told_to_compute_q_k_transpose():
    generator = torch.Generator().manual_seed(2)
    args = chapter02._head_case(generator, 2, 6, 4, 3, 5)
    H, A = chapter02._attend_solution(*args)
    with pytest.raises(ExerciseFailure, match=r"compute S = Q K\^T"):
        chapter02._check_shapes(H, A.T, args, "(test)")


def test_values_as_wide_as_the_keys_are_told_to_use_W_V():
    generator = torch.Generator().manual_seed(3)
    args = chapter02._head_case(generator, 2, 6, 4, 3, 5)
    H, A = chapter02._attend_values_with_W_K(*args)  # (2, 3) instead of (2, 5)
    with pytest.raises(ExerciseFailure, match="projected with W_V, not W_K"):
        chapter02._check_shapes(H, A, args, "(test)")


# -- 2.3 a previous-token head ----------------------------------------------------------------


def test_the_solution_puts_over_99_percent_on_the_previous_token_whatever_the_content():
    generator = torch.Generator().manual_seed(0)
    for T in (2, 3, 17, 64):
        W_Q, W_K = (W.double() for W in chapter02._previous_token_solution(T, 3))
        X = chapter02._tokens(T, 10 * torch.randn(T, 3, generator=generator, dtype=torch.float64))  # (T, T + 3)
        assert chapter02._previous_weight(chapter02._head_weights(X, W_Q, W_K)).min() > 0.99


def _rotating_previous_token_head(T, d_content):
    """Correct by another route: d_k = 2, position t as an angle; t's query is t - 1's key, scaled up."""
    angle = 2 * math.pi / (T + 1)  # every position gets its own direction, none wraps round to another
    W_Q = torch.zeros(T + d_content, 2)
    W_K = torch.zeros(T + d_content, 2)
    for t in range(T):
        W_K[t] = torch.tensor([math.cos(angle * t), math.sin(angle * t)])
        W_Q[t] = torch.tensor([math.cos(angle * (t - 1)), math.sin(angle * (t - 1))])
    # neighbours' scores differ by strength (1 - cos(angle)) / sqrt(2): make that at least ln(100 T)
    strength = math.sqrt(2) * math.log(100 * T) / (1 - math.cos(angle))
    return strength * W_Q, W_K


def _previous_token_head_with_position_0_on_itself(T, d_content):
    W_Q, W_K = chapter02._previous_token_solution(T, d_content)
    W_Q[0, 0] = W_Q[1, 0]  # position 0 asks for its own key: allowed, its weights are not checked
    return W_Q, W_K


@pytest.mark.parametrize("answer", [_rotating_previous_token_head, _previous_token_head_with_position_0_on_itself])
def test_other_correct_previous_token_heads_pass(answer, capsys):
    assert check("2.3", answer), _line(capsys)


def test_a_head_two_tokens_back_is_told_where_it_looks(capsys):
    assert not check("2.3", lambda T, d_content: chapter02._shift_projections(T, d_content, -2))
    assert "not on" in _line(capsys)


def test_matrices_with_different_d_k_are_refused(capsys):
    def mismatched(T, d_content):
        W_Q, W_K = chapter02._previous_token_solution(T, d_content)
        return W_Q, W_K[:, :-1]

    assert not check("2.3", mismatched)
    assert "the same d_k columns" in _line(capsys)
