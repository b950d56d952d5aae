"""Chapter 3's exercises beyond the registry-wide tests: other correct answers pass, other
plausible wrong answers get the right hint, a search that never ends is stopped (with an alarm, and
where the platform has none), and 3.4's circle tells straight-through from plain hard choices."""

import math
import signal
import threading

import numpy as np
import pytest
import torch

import attention_book as ab
from attention_book.exercises import ExerciseFailure, chapter03, check, load_all

load_all()


def _line(capsys) -> str:
    return capsys.readouterr().out.strip()


# -- 3.1 hardmax ----------------------------------------------------------------------------


def _hardmax_with_where(scores):
    top = scores.max(dim=-1, keepdim=True).values
    hits = torch.where(scores == top, 1.0, 0.0)
    return hits / hits.sum(dim=-1, keepdim=True)


def _hardmax_as_bool(scores):
    return scores == scores.amax(dim=-1, keepdim=True)


def test_another_correct_hardmax_passes(capsys):
    assert check("3.1", _hardmax_with_where), _line(capsys)


def test_a_boolean_hardmax_is_told_that_ties_make_rows_sum_to_m(capsys):
    assert not check("3.1", _hardmax_as_bool)
    assert "the row sums to m" in _line(capsys)


# -- 3.2 sparsemax --------------------------------------------------------------------------


def _sparsemax_with_a_loop(scores):
    """Correct: a Python loop finds the support, the threshold stays a tensor."""
    z_sorted = torch.sort(scores, descending=True).values
    support, total = 0, 0.0
    for k in range(1, len(scores) + 1):
        if 1 + k * z_sorted[k - 1] > z_sorted[:k].sum():
            support = k
    total = z_sorted[:support].sum()
    return torch.relu(scores - (total - 1) / support)


def _sparsemax_with_item(scores):
    """Right weights, but the threshold is a Python float: autograd cannot see it move."""
    z_sorted = torch.sort(scores, descending=True).values
    k = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    cumulative = z_sorted.cumsum(0)
    support = int((1 + k * z_sorted > cumulative).sum())
    theta = (cumulative[support - 1].item() - 1) / support
    return torch.clamp(scores - theta, min=0)


def _sparsemax_in_numpy(scores):
    z = scores.detach().numpy()
    z_sorted = np.sort(z)[::-1]
    k = np.arange(1, len(z) + 1)
    cumulative = np.cumsum(z_sorted)
    support = int((1 + k * z_sorted > cumulative).sum())
    return torch.tensor(np.maximum(z - (cumulative[support - 1] - 1) / support, 0))


def _sparsemax_with_tiny_weights(scores):
    return chapter03._sparsemax_solution(scores) + 1e-9


def test_a_loop_based_sparsemax_passes(capsys):
    assert check("3.2", _sparsemax_with_a_loop), _line(capsys)


def test_a_threshold_made_with_item_gets_the_gradient_hint(capsys):
    assert not check("3.2", _sparsemax_with_item)
    assert "autograd does not see that" in _line(capsys)


def test_a_numpy_sparsemax_is_told_it_is_not_differentiable(capsys):
    assert not check("3.2", _sparsemax_in_numpy)
    assert "not differentiable" in _line(capsys)


def test_tiny_weights_instead_of_exact_zeros_are_named(capsys):
    assert not check("3.2", _sparsemax_with_tiny_weights)
    assert "must be exactly zero" in _line(capsys)


# -- 3.3 the inverse temperature ------------------------------------------------------------


def _beta_by_newton(scores, target=0.9):
    """Correct by another route: Newton's method on log(top weight), then a safety step up."""
    scores = scores.double()
    top = int(scores.argmax())
    if (scores == scores[top]).sum() > 1:
        return None
    beta = 1.0
    for _ in range(100):
        weights = torch.softmax(beta * scores, dim=0)
        value = math.log(weights[top].item()) - math.log(target)
        slope = (scores[top] - (weights * scores).sum()).item()  # d log a_top / d beta
        beta = max(beta - value / slope, beta / 10)
    return beta * (1 + 1e-9)


def test_a_different_correct_search_passes(capsys):
    assert check("3.3", _beta_by_newton), _line(capsys)


def test_the_chapter_example_needs_beta_about_5_58_and_a_tie_has_no_answer():
    scores = torch.tensor([0.2, 1.9, 1.5, -0.4, 0.9], dtype=torch.float64)
    beta = chapter03._beta_for_top_weight_solution(scores, 0.9)
    assert beta == pytest.approx(5.581, abs=1e-3)
    assert torch.softmax(beta * scores, dim=0).max() >= 0.9 > torch.softmax(0.999 * beta * scores, dim=0).max()
    assert chapter03._beta_for_top_weight_solution(torch.tensor([1.0, 3.0, 3.0], dtype=torch.float64)) is None


def test_two_keys_have_a_closed_form():
    scores = torch.tensor([0.5, -0.25], dtype=torch.float64)
    expected = math.log(0.9 / 0.1) / 0.75
    assert chapter03._beta_for_top_weight_solution(scores, 0.9) == pytest.approx(expected, rel=1e-8)


def _search_forever(scores, target=0.9):
    """Right whenever the top score is unique; when it is tied, searches for ever."""
    if (scores == scores.max()).sum() > 1:
        beta = 1.0
        while torch.softmax(beta * scores, dim=0).max() < target:  # the top weight stays at 1/2
            beta = beta * 2 if beta < 1e300 else 1.0
    return chapter03._beta_for_top_weight_solution(scores, target)


def test_a_search_that_never_ends_is_stopped_with_a_hint(capsys, monkeypatch):
    monkeypatch.setattr(chapter03, "SEARCH_TIME_LIMIT_S", 0.5)
    before = signal.getsignal(signal.SIGALRM)
    assert not check("3.3", _search_forever)
    line = _line(capsys)
    assert "did not return within" in line and "tied" in line
    assert signal.getsignal(signal.SIGALRM) is before  # the alarm handler is put back
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_without_setitimer_a_search_that_never_ends_is_reported_and_the_check_returns(capsys, monkeypatch):
    """Windows has no signal.setitimer: the answer runs in a daemon thread that the check stops waiting for."""
    monkeypatch.delattr(signal, "setitimer")
    monkeypatch.setattr(chapter03, "SEARCH_TIME_LIMIT_S", 0.5)
    stop = threading.Event()

    def search_until_stopped(scores, target=0.9):
        if (scores == scores.max()).sum() > 1:
            while not stop.wait(0.01):  # a loop that never ends by itself (and frees the CPU while it waits)
                pass
        return chapter03._beta_for_top_weight_solution(scores, target)

    try:
        assert not check("3.3", search_until_stopped)
    finally:
        stop.set()
    line = _line(capsys)
    assert "did not return within" in line and "tied" in line and "cannot be stopped" in line


def test_without_setitimer_a_right_answer_passes_and_a_crash_names_its_line(capsys, monkeypatch):
    monkeypatch.delattr(signal, "setitimer")
    assert check("3.3", _beta_by_newton), _line(capsys)

    def crashes(scores, target=0.9):
        return scores[len(scores)].item()  # one past the end

    assert not check("3.3", crashes)
    line = _line(capsys)
    assert "IndexError" in line and "in crashes()" in line


# -- 3.4 straight-through top-m -----------------------------------------------------------


def test_on_the_circle_plain_hard_choices_stay_stuck_and_straight_through_escapes():
    for m, turn, plain in ((1, 0.0, lambda s, m: ab.hardmax(s)), (2, 0.3, ab.top_k_weights)):
        with pytest.raises(ExerciseFailure, match=r"from the start pointing at key 1, the hard choice is still key 1"):
            chapter03._circle_case(plain, m, turn)
        chapter03._circle_case(chapter03._straight_through_solution, m, turn)


def test_the_chapters_straight_through_for_m_1_is_told_that_m_is_ignored(capsys):
    def straight_through(scores, m=1):  # the chapter's cell, with the m it does not use
        soft = ab.softmax(scores)
        return ab.hardmax(scores) + soft - soft.detach()

    assert not check("3.4", straight_through)
    assert "m is ignored" in _line(capsys)


def test_straight_through_keeps_the_value_exactly_and_passes_back_the_softmax_gradient():
    scores = torch.tensor([[0.3, 2.0, -1.0, 1.1], [0.0, -0.5, 0.8, 0.7]], requires_grad=True)
    weights = chapter03._straight_through_solution(scores, 2)
    assert torch.equal(weights.detach(), chapter03._top_m_weights(scores.detach(), 2))  # exactly
    torch.testing.assert_close(weights.detach(), ab.top_k_weights(scores.detach(), 2))
    upstream = torch.tensor([[1.0, -2.0, 0.5, 3.0], [0.2, 0.1, -1.0, 2.0]])
    (gradient,) = torch.autograd.grad((weights * upstream).sum(), scores)
    (expected,) = torch.autograd.grad((torch.softmax(scores, dim=-1) * upstream).sum(), scores)
    torch.testing.assert_close(gradient, expected)
