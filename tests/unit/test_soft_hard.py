"""attention_book.soft_hard (chapter 3): hardmax, sparsemax, entropy and top-k, as specifications.

The first checks of each, then what chapter 3 relies on: the limits of the inverse
temperature, sparsemax as a projection, gradients, masked entries and bad input.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab

SCORES = torch.tensor([0.2, 1.9, 1.5, -0.4, 0.9])  # the chapter's query "bank"


def test_hardmax_is_one_hot():
    weights = ab.hardmax(torch.tensor([[0.1, 2.0, -1.0], [5.0, 1.0, 4.0]]))
    assert weights.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_hardmax_ties_share_the_weight_equally():
    assert ab.hardmax(torch.tensor([1.0, 3.0, 3.0, 0.0])).tolist() == [0.0, 0.5, 0.5, 0.0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=1, max_size=16))
def test_sparsemax_sums_to_one_and_is_non_negative(scores):
    weights = ab.sparsemax(torch.tensor(scores))
    assert (weights >= 0).all()
    assert math.isclose(weights.sum().item(), 1.0, rel_tol=1e-5, abs_tol=1e-5)


def test_sparsemax_gives_exact_zeros_to_low_scores():
    weights = ab.sparsemax(torch.tensor([2.0, 1.8, -1.0, 0.0]))
    torch.testing.assert_close(weights, torch.tensor([0.6, 0.4, 0.0, 0.0]))
    assert (weights[2:] == 0).all()


def _projection_by_bisection(scores: torch.Tensor) -> torch.Tensor:
    """Sparsemax the slow way: the threshold theta with sum(max(s - theta, 0)) = 1, by bisection."""
    scores = scores.double()
    low, high = scores.min().item() - 1.0, scores.max().item()
    for _ in range(200):
        theta = (low + high) / 2
        if torch.clamp(scores - theta, min=0).sum() > 1:
            low = theta
        else:
            high = theta
    return torch.clamp(scores - (low + high) / 2, min=0)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=1, max_size=12))
def test_sparsemax_is_the_threshold_projection_onto_the_simplex(scores):
    scores = torch.tensor(scores, dtype=torch.float64)
    torch.testing.assert_close(ab.sparsemax(scores), _projection_by_bisection(scores), atol=1e-9, rtol=0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=2, max_size=12))
def test_sparsemax_is_closer_to_the_scores_than_softmax_and_hardmax(scores):
    scores = torch.tensor(scores, dtype=torch.float64)
    distance = {
        name: (fn(scores) - scores).norm().item()
        for name, fn in [("sparsemax", ab.sparsemax), ("softmax", ab.softmax), ("hardmax", ab.hardmax)]
    }
    assert distance["sparsemax"] <= distance["softmax"] + 1e-9
    assert distance["sparsemax"] <= distance["hardmax"] + 1e-9


def test_the_chapter_example_has_threshold_1_2_and_weights_0_7_and_0_3():
    torch.testing.assert_close(ab.sparsemax(SCORES), torch.tensor([0.0, 0.7, 0.3, 0.0, 0.0]))


def test_sparsemax_ignores_a_constant_added_to_every_score():
    torch.testing.assert_close(ab.sparsemax(SCORES + 10.0), ab.sparsemax(SCORES))


def test_small_beta_makes_sparsemax_uniform_plus_beta_times_the_centred_scores():
    beta = 0.01
    expected = 1 / 5 + beta * (SCORES.double() - SCORES.double().mean())
    torch.testing.assert_close(ab.sparsemax(beta * SCORES.double()), expected)


def test_sparsemax_is_one_hot_once_beta_times_the_top_gap_reaches_1():
    gap = 1.9 - 1.5
    assert (ab.sparsemax(0.99 / gap * SCORES.double()) > 0).sum() == 2
    torch.testing.assert_close(ab.sparsemax(1.01 / gap * SCORES.double()), ab.hardmax(SCORES.double()))


def test_softmax_goes_from_uniform_to_hardmax_as_beta_grows():
    scores = SCORES.double()
    assert (ab.softmax(1e-6 * scores) - 0.2).abs().max() < 1e-6
    assert (ab.softmax(100.0 * scores) - ab.hardmax(scores)).abs().max() < 1e-15
    tied = torch.tensor([1.0, 3.0, 0.5, 3.0], dtype=torch.float64)
    torch.testing.assert_close(ab.softmax(100.0 * tied), ab.hardmax(tied))  # the limit shares ties


def test_entropy_falls_as_beta_grows():
    betas = torch.logspace(-2, 2, 50, dtype=torch.float64)
    entropies = ab.entropy(ab.softmax(betas[:, None] * SCORES.double()[None, :]))  # (50,)
    assert (entropies[1:] <= entropies[:-1] + 1e-12).all()
    assert math.isclose(entropies[0].item(), math.log(5), rel_tol=1e-3)
    assert entropies[-1].item() < 1e-10


def test_entropy_of_m_equal_weights_is_log_m_and_is_never_negative_zero():
    weights = torch.tensor([[0.25, 0.25, 0.25, 0.25, 0.0], [0.0, 0.0, 1.0, 0.0, 0.0]])
    torch.testing.assert_close(ab.entropy(weights), torch.tensor([math.log(4), 0.0]))
    assert math.copysign(1.0, ab.entropy(weights)[1].item()) == 1.0  # prints as 0.00, not -0.00
    torch.testing.assert_close(ab.entropy(weights.T, dim=0), ab.entropy(weights))


def test_sparsemax_gradient_is_the_projection_jacobian_on_the_support():
    scores = SCORES.double().requires_grad_(True)
    upstream = torch.tensor([1.0, 2.0, -1.0, 0.5, 3.0], dtype=torch.float64)
    (gradient,) = torch.autograd.grad((ab.sparsemax(scores) * upstream).sum(), scores)
    support = torch.tensor([False, True, True, False, False])
    expected = torch.where(support, upstream - upstream[support].mean(), torch.zeros_like(upstream))
    torch.testing.assert_close(gradient, expected)


def test_hardmax_passes_no_gradient_and_softmax_always_does():
    scores = SCORES.clone().requires_grad_(True)
    assert ab.hardmax(scores).grad_fn is None
    (gradient,) = torch.autograd.grad(ab.softmax(scores)[2], scores)
    assert (gradient != 0).all()


def test_top_k_with_k_1_is_hardmax_and_with_k_n_is_softmax_even_with_ties():
    tied = torch.tensor([[1.0, 3.0, 0.5, 3.0], [0.1, 0.2, 0.3, 0.4]])
    torch.testing.assert_close(ab.top_k_weights(tied, 1), ab.hardmax(tied))
    torch.testing.assert_close(ab.top_k_weights(tied, 4), ab.softmax(tied))
    weights = ab.top_k_weights(SCORES, 2)
    torch.testing.assert_close(
        weights, torch.tensor([0.0, 1 / (1 + math.exp(-0.4)), 1 / (1 + math.exp(0.4)), 0.0, 0.0])
    )


def test_top_k_gradient_reaches_only_the_kept_scores():
    scores = SCORES.clone().requires_grad_(True)
    (gradient,) = torch.autograd.grad((ab.top_k_weights(scores, 2) * torch.arange(5.0)).sum(), scores)
    assert gradient[1] != 0 and gradient[2] != 0
    assert gradient[[0, 3, 4]].abs().sum() == 0


def test_masked_entries_get_zero_weight_and_a_fully_masked_row_gets_zeros():
    inf = float("inf")
    scores = torch.tensor([[1.0, -inf, 0.5], [-inf, -inf, -inf]])
    torch.testing.assert_close(ab.sparsemax(scores), torch.tensor([[0.75, 0.0, 0.25], [0.0, 0.0, 0.0]]))
    torch.testing.assert_close(ab.softmax(scores)[1], torch.zeros(3))


def test_sparsemax_propagates_nan_instead_of_hiding_it():
    assert torch.isnan(ab.sparsemax(torch.tensor([1.0, float("nan")]))).all()


def test_every_function_works_along_any_dimension():
    scores = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    for function in (ab.hardmax, ab.sparsemax, lambda s, dim: ab.top_k_weights(s, 2, dim=dim)):
        torch.testing.assert_close(function(scores, dim=1), function(scores.transpose(1, 2), dim=2).transpose(1, 2))


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ab.hardmax(torch.zeros(0)), r"at least one entry along dim=-1, but have shape \(0\)"),
        (lambda: ab.sparsemax(torch.zeros(2, 0)), r"at least one entry along dim=-1, but have shape \(2, 0\)"),
        (lambda: ab.sparsemax(torch.zeros(3), dim=1), r"dim=1 is out of range for scores of shape \(3\)"),
        (lambda: ab.sparsemax(torch.tensor([1, 2])), r"scores must hold floating-point numbers"),
        (lambda: ab.hardmax(torch.tensor([1, 2])), r"scores must hold floating-point numbers"),
        (lambda: ab.sparsemax(torch.tensor(1.0)), r"scalar was given"),
        (lambda: ab.entropy(torch.zeros(3), dim=2), r"dim=2 is out of range for weights of shape \(3\)"),
        (lambda: ab.entropy(torch.tensor(0.5)), r"scalar was given"),
        (lambda: ab.top_k_weights(torch.zeros(3), True), r"k must be an integer from 1 to 3"),
        (lambda: ab.top_k_weights(torch.zeros(3), 4), r"k must be an integer from 1 to 3.* but 4 was given"),
        (lambda: ab.hardmax([1.0, 2.0]), r"scores must be a torch.Tensor, but a list was given"),
    ],
)
def test_bad_input_says_what_was_expected_and_what_was_given(call, message):
    with pytest.raises(ValueError, match=message):
        call()
