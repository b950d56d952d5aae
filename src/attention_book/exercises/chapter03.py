"""Exercises of chapter 3, "Soft, hard and sparse attention".

3.1 Hardmax: one-hot weights on the largest score, tied maxima sharing equally.
3.2 Sparsemax of one row of scores, with exact zeros and a correct gradient.
3.3 Design: the smallest inverse temperature beta at which the top softmax weight
    reaches a target, or None when no beta can.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.hardmax`, :func:`~attention_book.sparsemax`,
:func:`~attention_book.softmax`) and recognises typical wrong answers by what they compute.
"""

from __future__ import annotations

import math
import numbers
import signal
import threading

import torch

from ..attention import softmax
from ..soft_hard import hardmax, sparsemax
from ._core import (
    ExerciseFailure,
    Inconclusive,
    Mistake,
    Property,
    add_properties,
    call,
    diagnose,
    probe_from_check,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)

# ---------------------------------------------------------------------------------
# 3.1 Hardmax with ties


def _hardmax_solution(scores: torch.Tensor) -> torch.Tensor:
    """One-hot weights on the largest score along the last dim; tied maxima share equally."""
    is_max = (scores == scores.amax(dim=-1, keepdim=True)).to(scores.dtype)  # (..., n): 1 at every maximum
    return is_max / is_max.sum(dim=-1, keepdim=True)  # (..., n): m tied maxima get 1/m each


def _argmax_index(scores):
    return scores.argmax(dim=-1)


def _first_of_ties(scores):
    return torch.nn.functional.one_hot(scores.argmax(dim=-1), scores.shape[-1]).to(scores.dtype)


def _last_of_ties(scores):
    flipped = scores.flip(-1).argmax(dim=-1)
    return torch.nn.functional.one_hot(scores.shape[-1] - 1 - flipped, scores.shape[-1]).to(scores.dtype)


def _ties_not_shared(scores):
    return (scores == scores.amax(dim=-1, keepdim=True)).to(scores.dtype)


def _hardmax_as_softmax(scores):
    return torch.softmax(scores, dim=-1)


def _one_hot_of_smallest(scores):
    return _hardmax_solution(-scores)


def _hardmax_over_first_axis(scores):
    is_max = (scores == scores.amax(dim=0, keepdim=True)).to(scores.dtype)
    return is_max / is_max.sum(dim=0, keepdim=True)


_HARDMAX_MISTAKES = {
    "ties are broken towards the FIRST largest score (what argmax does); tied maxima must share the weight "
    "equally, 1/m each for m ties": _first_of_ties,
    "ties are broken towards the LAST largest score; tied maxima must share the weight equally, 1/m each for m ties": _last_of_ties,
    "each of the m tied maxima got weight 1, so the row sums to m: divide by the number of maxima in the row": _ties_not_shared,
    "these are softmax weights, positive everywhere: hardmax puts all the weight on the largest score(s)": _hardmax_as_softmax,
    "you put the weight on the SMALLEST score; hardmax selects the largest": _one_hot_of_smallest,
    "the maximum was taken over the wrong axis: every row (the last dim, over the keys) gets its own one-hot "
    "weights, so use dim=-1": _hardmax_over_first_axis,
}


def _plant_ties(scores: torch.Tensor, *, row: int, copies: int, generator: torch.Generator) -> None:
    """Give row ``row`` of a (rows, n) tensor ``copies`` extra positions equal to its maximum, in place."""
    n = scores.shape[-1]
    top = int(scores[row].argmax())
    others = [j for j in torch.randperm(n, generator=generator).tolist() if j != top][:copies]
    scores[row, others] = scores[row, top].item()


def _check_hardmax_case(answer, scores: torch.Tensor, what: str, *, mistakes: bool = True) -> None:
    got = call(answer, scores.clone())
    expected = hardmax(scores)
    if isinstance(got, torch.Tensor) and scores.dim() >= 1 and tuple(got.shape) == tuple(scores.shape[:-1]):
        raise ExerciseFailure(
            f"for {what} your function returned a tensor of shape {tuple(got.shape)}, the index of the largest score "
            f"(what argmax gives); return one-hot WEIGHTS of the same shape as the scores, {tuple(scores.shape)}, "
            "e.g. by comparing the scores with their maximum"
        )
    known = {hint: wrong(scores) for hint, wrong in _HARDMAX_MISTAKES.items()} if mistakes else {}
    diagnose(got, expected, f"the weights ({what})", known_mistakes=known, atol=1e-6, rtol=0.0)


def _check_hardmax(answer) -> None:
    generator = random_generator()
    # Case 1: a batch of 5 rows of 7 scores; row 1 has a two-way tie at the top, row 3 a three-way tie.
    scores = torch.randn(5, 7, generator=generator)
    _plant_ties(scores, row=1, copies=1, generator=generator)
    _plant_ties(scores, row=3, copies=2, generator=generator)
    _check_hardmax_case(answer, scores, "a (5, 7) batch of scores, two rows with tied maxima")
    # Case 2: one row without a batch, all scores negative.
    n = int(torch.randint(3, 10, (), generator=generator))
    _check_hardmax_case(answer, -1.0 - torch.rand(n, generator=generator), f"one row of {n} negative scores")
    # Case 3: three leading dimensions, large scores, ties in some rows.
    scores = (100 * torch.randn(2, 3, 6, generator=generator)).round()
    flat = scores.view(6, 6)
    _plant_ties(flat, row=0, copies=1, generator=generator)
    _plant_ties(flat, row=4, copies=5, generator=generator)  # every score of this row is the maximum: uniform weights
    _check_hardmax_case(answer, scores, "scores of shape (2, 3, 6) with ties, one row entirely tied")
    # Case 4: a single key takes all the weight.
    _check_hardmax_case(answer, torch.tensor([[0.3], [-2.0]]), "two rows of a single key", mistakes=False)


register(
    "3.1",
    "Hardmax with ties",
    _check_hardmax,
    answer="hardmax",
    solution=_hardmax_solution,
    mistakes=[
        Mistake("returned the argmax index", _argmax_index, "the index of the largest score"),
        Mistake("ties to the first maximum", _first_of_ties, "towards the FIRST largest score"),
        Mistake("ties to the last maximum", _last_of_ties, "towards the LAST largest score"),
        Mistake("ties each get 1", _ties_not_shared, "the row sums to m"),
        Mistake("softmax instead of hardmax", _hardmax_as_softmax, "these are softmax weights"),
        Mistake("one-hot on the smallest score", _one_hot_of_smallest, "SMALLEST score"),
        Mistake("maximum over the wrong axis", _hardmax_over_first_axis, "over the wrong axis"),
    ],
)

# ---------------------------------------------------------------------------------
# 3.2 Sparsemax


def _sparsemax_solution(scores: torch.Tensor) -> torch.Tensor:
    """Sparsemax of one row of scores (n,): weights that sum to 1 with exact zeros."""
    z_sorted, _ = torch.sort(scores, descending=True)  # (n,): z_(1) >= z_(2) >= ...
    k = torch.arange(1, len(scores) + 1, dtype=scores.dtype)  # (n,): 1, 2, ..., n
    cumulative = z_sorted.cumsum(dim=0)  # (n,): sum of the k largest scores
    support = int((1 + k * z_sorted > cumulative).sum())  # how many scores get weight
    theta = (cumulative[support - 1] - 1) / support  # the threshold (a tensor: gradients flow)
    return torch.clamp(scores - theta, min=0)  # (n,)


def _sparsemax_parts(scores: torch.Tensor, *, descending: bool = True, first_k: int = 1, minus_one: bool = True):
    """The sparsemax recipe with switches for typical slips; returns (scores - theta, support)."""
    z_sorted, _ = torch.sort(scores, descending=descending)
    n = len(scores)
    k = torch.arange(first_k, first_k + n, dtype=scores.dtype)
    cumulative = z_sorted.cumsum(dim=0)
    support = max(int((1 + k * z_sorted > cumulative).sum()), 1)
    theta = (cumulative[support - 1] - (1 if minus_one else 0)) / support
    return scores - theta, theta


def _sparsemax_as_softmax(scores):
    return torch.softmax(scores, dim=-1)


def _sparsemax_sorted_ascending(scores):
    shifted, _ = _sparsemax_parts(scores, descending=False)
    return torch.clamp(shifted, min=0)


def _sparsemax_without_clamp(scores):
    shifted, _ = _sparsemax_parts(scores)
    return shifted


def _sparsemax_counting_from_zero(scores):
    shifted, _ = _sparsemax_parts(scores, first_k=0)
    return torch.clamp(shifted, min=0)


def _sparsemax_without_minus_one(scores):
    shifted, _ = _sparsemax_parts(scores, minus_one=False)
    return torch.clamp(shifted, min=0)


def _sparsemax_with_detached_threshold(scores):
    _, theta = _sparsemax_parts(scores)
    return torch.clamp(scores - theta.detach(), min=0)


_SPARSEMAX_MISTAKES = {
    "these are softmax weights, positive everywhere; sparsemax subtracts a threshold theta from the scores and clamps "
    "at 0, so low scores get EXACTLY zero": _sparsemax_as_softmax,
    "sort the scores in DECREASING order: the support is made of the k LARGEST scores": _sparsemax_sorted_ascending,
    "some weights are negative: clamp the shifted scores at zero, max(z - theta, 0)": _sparsemax_without_clamp,
    "off by one in the support test: the k-th largest score (index k - 1 when counting from 0) is tested with "
    "1 + k z_(k) > z_(1) + ... + z_(k), where k runs 1, 2, ..., n": _sparsemax_counting_from_zero,
    "the threshold is theta = (z_(1) + ... + z_(k) - 1) / k: without the - 1 the weights cannot sum to 1": _sparsemax_without_minus_one,
}


def _check_sparsemax_case(answer, scores: torch.Tensor, what: str) -> None:
    got = call(answer, scores.clone())
    expected = sparsemax(scores)
    known = {hint: wrong(scores) for hint, wrong in _SPARSEMAX_MISTAKES.items()}
    diagnose(got, expected, f"the weights ({what})", known_mistakes=known, atol=1e-5, rtol=0.0)
    got = got.detach()
    should_be_zero = expected == 0
    if (got[should_be_zero] != 0).any():
        smallest = got[should_be_zero].abs().max().item()
        raise ExerciseFailure(
            f"the weights ({what}) are close, but where sparsemax gives exactly 0 yours give up to {smallest:.1e}: "
            "sparsemax is sparse, so those must be exactly zero (clamp z - theta at 0)"
        )


def _check_sparsemax(answer) -> None:
    generator = random_generator()
    # Case 1: the chapter's example, then random rows whose support is a few keys.
    _check_sparsemax_case(
        answer, torch.tensor([0.2, 1.9, 1.5, -0.4, 0.9]), "the chapter's scores [0.2, 1.9, 1.5, -0.4, 0.9]"
    )
    for _ in range(3):
        n = int(torch.randint(5, 12, (), generator=generator))
        scores = 1.5 * torch.randn(n, generator=generator)
        _check_sparsemax_case(answer, scores, f"{n} random scores")
    # Case 2: scores close together (every key in the support) and far apart (one-hot).
    _check_sparsemax_case(answer, 0.05 * torch.randn(6, generator=generator), "6 scores close together")
    far = torch.randn(6, generator=generator)
    far[int(torch.randint(0, 6, (), generator=generator))] += 5.0
    _check_sparsemax_case(answer, far, "6 scores, one far above the others")
    # Case 3: tied top scores, and a single score.
    tied = torch.randn(7, generator=generator)
    # +0.25, not +0.5: with +0.5 the threshold lands exactly on the old maximum, whose weight is then 0
    # only in exact arithmetic, and rounding (1e-7) would fail a correct answer on "exact zeros".
    tied[2] = tied[5] = tied.max() + 0.25
    _check_sparsemax_case(answer, tied, "7 scores whose two largest are tied")
    _check_sparsemax_case(answer, torch.tensor([-3.0]), "a single score")
    # Case 4: the gradient. Sparsemax is differentiable almost everywhere; autograd must see that.
    n = 8
    scores = (1.5 * torch.randn(n, generator=generator)).requires_grad_(True)
    upstream = torch.randn(n, generator=generator)  # a random gradient arriving from later layers
    result = call(answer, scores)
    require_tensor_like(result, torch.zeros(n), f"the weights ({n} random scores that require grad)")
    if result.grad_fn is None:
        raise ExerciseFailure(
            "your sparsemax is not differentiable: autograd cannot follow it back to the scores. Compute it with "
            "torch operations on the scores tensor (no .item(), .tolist(), numpy or torch.no_grad())"
        )
    (gradient,) = torch.autograd.grad((result * upstream).sum(), scores, allow_unused=True)
    if gradient is None:
        raise ExerciseFailure("your sparsemax's output does not depend on the scores as far as autograd can see")
    reference = sparsemax(scores)
    (expected,) = torch.autograd.grad((reference * upstream).sum(), scores)
    detached = _sparsemax_with_detached_threshold(scores)
    (detached_gradient,) = torch.autograd.grad((detached * upstream).sum(), scores)
    diagnose(
        gradient,
        expected,
        "the gradient of your sparsemax",
        known_mistakes={
            "the threshold theta depends on the scores, but autograd does not see that: compute theta from the scores "
            "tensor (e.g. cumulative[k - 1]), not with .item(), float(...) or .detach()": detached_gradient,
        },
        atol=1e-5,
        rtol=0.0,
    )


register(
    "3.2",
    "Sparsemax",
    _check_sparsemax,
    answer="sparsemax",
    solution=_sparsemax_solution,
    mistakes=[
        Mistake("softmax instead of sparsemax", _sparsemax_as_softmax, "these are softmax weights"),
        Mistake("sorted in increasing order", _sparsemax_sorted_ascending, "sort the scores in DECREASING order"),
        Mistake("no clamp at zero", _sparsemax_without_clamp, "some weights are negative"),
        Mistake("support test counts from 0", _sparsemax_counting_from_zero, "off by one in the support test"),
        Mistake("threshold without the - 1", _sparsemax_without_minus_one, "without the - 1"),
        Mistake("threshold detached from the graph", _sparsemax_with_detached_threshold, "autograd does not see that"),
    ],
)

# ---------------------------------------------------------------------------------
# 3.3 Design: the inverse temperature for a target top weight

SEARCH_TIME_LIMIT_S = 20.0
SMALLEST_TOLERANCE = 1e-3  # the answer may exceed the smallest beta by this fraction
WEIGHT_TOLERANCE = 1e-6  # the top weight at the answer may fall short of the target by this much (rounding)


def _beta_for_top_weight_solution(scores: torch.Tensor, target: float = 0.9) -> float | None:
    """The smallest beta >= 0 with max(softmax(beta * scores)) >= target, or None if none exists."""
    scores = scores.double()
    top = int(scores.argmax())
    if (scores == scores[top]).sum() > 1:
        return None  # m tied maxima: the top weight never exceeds 1/m, however large beta gets

    def top_weight(beta: float) -> float:
        return torch.softmax(beta * scores, dim=0)[top].item()

    # The top weight grows with beta (its derivative is a_top (s_top - sum_j a_j s_j) >= 0),
    # so find a beta that is large enough, then halve the interval until it is tiny.
    low, high = 0.0, 1.0
    while top_weight(high) < target:
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        if top_weight(middle) >= target:
            high = middle
        else:
            low = middle
    return high  # the upper end: its top weight is at least the target


def _beta_as_temperature(scores, target=0.9):
    beta = _beta_for_top_weight_solution(scores, target)
    return None if beta is None else 1.0 / beta


def _beta_from_two_keys(scores, target=0.9):
    top_two = scores.double().topk(2).values
    gap = float(top_two[0] - top_two[1])
    return None if gap == 0 else math.log(target / (1 - target)) / gap


def _beta_lower_end(scores, target=0.9):
    """Bisection, but returns the lower end of a coarse final interval: just below the target."""
    beta = _beta_for_top_weight_solution(scores, target)
    return None if beta is None else beta * (1 - 2e-3)


def _beta_on_a_grid(scores, target=0.9):
    """The first beta of a grid 0.25, 0.5, 0.75, ... that reaches the target."""
    scores = scores.double()
    if (scores == scores.max()).sum() > 1:
        return None
    beta = 0.25
    while torch.softmax(beta * scores, dim=0).max().item() < target:
        beta += 0.25
    return beta


def _beta_ignoring_ties(scores, target=0.9):
    """The right search, except that a tie at the top is not noticed: it stops at a cap instead."""
    scores = scores.double()

    def top_weight(beta: float) -> float:
        return torch.softmax(beta * scores, dim=0).max().item()

    low, high = 0.0, 1.0
    while top_weight(high) < target and high < 2.0**40:
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        low, high = (low, middle) if top_weight(middle) >= target else (middle, high)
    return high


class _TookTooLong(BaseException):
    """Raised by the alarm inside a student's function that runs too long (BaseException: not swallowed)."""


def _call_with_time_limit(answer, *args):
    """Call the answer; where the platform allows it, stop it after SEARCH_TIME_LIMIT_S seconds."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return call(answer, *args)

    def on_alarm(signum, frame):
        raise _TookTooLong

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, SEARCH_TIME_LIMIT_S)
    try:
        return call(answer, *args)
    except _TookTooLong:
        raise ExerciseFailure(
            f"your function did not return within {SEARCH_TIME_LIMIT_S:.0f} s, for scores {_short(args[0])}: does a loop "
            "never end? When the top score is tied, no beta reaches the target, so a search for one runs forever"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _short(scores: torch.Tensor) -> str:
    return "[" + ", ".join(f"{value:.3g}" for value in scores.tolist()) + "]"


def _top_weight(scores: torch.Tensor, beta: float) -> float:
    return softmax(beta * scores.double()).max().item()


def _as_number(result, scores: torch.Tensor, target: float) -> float | None:
    if result is None:
        return None
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise ExerciseFailure(
            f"for scores {_short(scores)} and target {target} your function returned {result!r}; return a number "
            "(the inverse temperature beta) or None"
        )
    result = float(result)
    if not math.isfinite(result) or result < 0:
        raise ExerciseFailure(
            f"for scores {_short(scores)} your function returned beta = {result}; beta must be a finite number >= 0, "
            "or None when no beta reaches the target"
        )
    return result


def _check_beta_case(answer, scores: torch.Tensor, target: float) -> None:
    where = f"for scores {_short(scores)} and target {target:.3g}"
    result = _as_number(_call_with_time_limit(answer, scores.clone(), target), scores, target)
    expected = _beta_for_top_weight_solution(scores, target)
    if expected is None:
        if result is not None:
            raise ExerciseFailure(
                f"{where} you returned beta = {result:.4g}, but the two largest scores are tied: the top weight never "
                "exceeds 1/2 (1/m for m tied maxima), however large beta gets, so return None"
            )
        return
    if result is None:
        raise ExerciseFailure(
            f"{where} you returned None, but beta = {expected:.4g} reaches the target; return None only when the largest "
            "score is tied"
        )

    def close(a: float, b: float) -> bool:
        return abs(a - b) <= 1e-3 * abs(b) + 1e-12

    if close(result, 1.0 / expected) and not close(result, expected):
        raise ExerciseFailure(
            f"{where} you returned {result:.4g}, which is 1/beta (a temperature); the answer is the inverse "
            f"temperature beta that multiplies the scores"
        )
    two_keys = _beta_from_two_keys(scores, target)
    weight = _top_weight(scores, result)
    if weight < target - WEIGHT_TOLERANCE:
        if two_keys is not None and close(result, two_keys):
            raise ExerciseFailure(
                f"{where} your beta = {result:.4g} solves the problem for the two largest scores alone, ln(t / (1 - t)) "
                f"/ gap; but the other keys take weight too, so the top weight is only {weight:.4f}. Search for beta "
                "with all the scores"
            )
        if weight > target - 0.01:
            raise ExerciseFailure(
                f"{where} at your beta = {result:.6g} the top weight is {weight:.6f}, just below the target: return "
                "the upper end of your search interval, whose top weight is at least the target"
            )
        raise ExerciseFailure(
            f"{where} at your beta = {result:.4g} the top weight is only {weight:.4f}, below the target: a larger beta is "
            f"needed ({expected:.4g} reaches it). Search for it with all the scores, letting the upper end of the search "
            "grow (double it) until the top weight reaches the target"
        )
    if result > 10 * expected + 1e-9:
        raise ExerciseFailure(
            f"{where} your beta = {result:.4g} is far larger than needed: {expected:.4g} already gives a top weight of "
            f"{_top_weight(scores, expected):.4f}. Stop at the first beta at which the TOP weight (the largest score's) "
            "reaches the target"
        )
    if result > expected * (1 + SMALLEST_TOLERANCE) + 1e-9:
        raise ExerciseFailure(
            f"{where} your beta = {result:.4g} reaches the target, but it is not the smallest that does: "
            f"{expected:.4g} already gives a top weight of {_top_weight(scores, expected):.4f}. Search more finely "
            f"(e.g. by bisection) until you are within {SMALLEST_TOLERANCE:.1%} of the smallest beta"
        )


def _random_scores(generator: torch.Generator, n: int) -> torch.Tensor:
    return (2.0 * torch.randn(n, generator=generator, dtype=torch.float64)).round(decimals=2)


def _check_beta_for_top_weight(answer) -> None:
    generator = random_generator()
    cases = [(torch.tensor([0.2, 1.9, 1.5, -0.4, 0.9], dtype=torch.float64), 0.9)]
    for _ in range(3):
        cases.append((_random_scores(generator, int(torch.randint(3, 9, (), generator=generator))), 0.9))
    cases.append((_random_scores(generator, 2), 0.9))
    for _ in range(2):
        target = round(0.6 + 0.39 * float(torch.rand((), generator=generator)), 3)
        cases.append((_random_scores(generator, int(torch.randint(2, 9, (), generator=generator))), target))
    # Distinct top scores everywhere above (re-draw ties), then one case with a tie at the top.
    for index, (scores, target) in enumerate(cases):
        while (scores == scores.max()).sum() > 1:
            scores = _random_scores(generator, len(scores))
        cases[index] = (scores, target)
    cases.append((torch.tensor([1.0, 0.95, 0.0, -0.5], dtype=torch.float64), 0.99))  # a beta near 100
    tied = _random_scores(generator, 5)
    tied[int(tied.argmin())] = tied.max()
    cases.append((tied, 0.9))
    for scores, target in cases:
        _check_beta_case(answer, scores, target)


register(
    "3.3",
    "The inverse temperature for a confident choice",
    _check_beta_for_top_weight,
    answer="beta_for_top_weight",
    solution=_beta_for_top_weight_solution,
    mistakes=[
        Mistake("returned the temperature", _beta_as_temperature, "which is 1/beta"),
        Mistake("formula for two keys", _beta_from_two_keys, "the two largest scores alone"),
        Mistake("lower end of the interval", _beta_lower_end, "just below the target"),
        Mistake("a coarse grid of betas", _beta_on_a_grid, "not the smallest that does"),
        Mistake("ties not handled", _beta_ignoring_ties, "the two largest scores are tied"),
    ],
)


# ---------------------------------------------------------------------------------
# Properties (see _core's docstring): what an answer breaks, probed one idea at a time.

# Four rows at different levels, each with one largest score (row 3's maximum is the largest overall).
_HARDMAX_ROWS = torch.tensor(
    [
        [0.5, -1.0, 2.0, 0.0, 1.0, -0.5],
        [-3.0, -2.5, -4.0, -2.0, -3.5, -5.0],
        [1.0, 0.0, 0.2, 0.4, 0.1, 0.3],
        [9.0, 3.0, 8.5, 1.0, 2.0, 4.0],
    ]
)


def _hardmax_one_hot(answer):
    scores = _HARDMAX_ROWS.clone()
    got = probe_tensor(answer(scores.clone()), tuple(scores.shape))
    if torch.allclose(got, torch.softmax(scores.double(), dim=-1), atol=1e-6):
        return "these are softmax weights, positive everywhere: hardmax puts all the weight on the largest score(s)"
    if torch.allclose(got, _hardmax_solution(-scores).double()):
        return "you put the weight on the SMALLEST score of each row; hardmax selects the largest"
    if torch.allclose(got, _hardmax_over_first_axis(scores).double()):
        return (
            "the maximum was taken over the wrong axis (down the columns, dim=0): every row (the last dim, over the keys) "
            "gets its own one-hot weights, so use dim=-1"
        )
    for row in range(scores.shape[0]):
        top = int(scores[row].argmax())
        weights = got[row]
        if float(weights.abs().sum()) == 0.0:
            return (
                f"row {row} (scores {scores[row].tolist()}) got no weight at all: every row has its own maximum, so take "
                "the maximum along the last axis (amax(dim=-1, keepdim=True)), not of the whole tensor"
            )
        others = torch.cat([weights[:top], weights[top + 1 :]])
        if (others != 0).any():
            j = int((weights != 0).logical_and(torch.arange(len(weights)) != top).nonzero()[0])
            return (
                f"row {row} gives weight {float(weights[j]):.3g} to its score {float(scores[row, j]):g}, which is not the "
                f"row's maximum {float(scores[row, top]):g}: hardmax gives exactly 0 to every other key (a softmax, "
                "however sharp, does not)"
            )
        if abs(float(weights[top]) - 1.0) > 1e-6:
            if abs(float(weights[top]) - float(scores[row, top])) < 1e-6:
                return (
                    f"the maximum of row {row} got weight {float(weights[top]):.3g}, its score: your weights are the scores "
                    "themselves at the maxima; hardmax gives the maximum the weight 1"
                )
            count = int((scores == scores.amax(dim=-1, keepdim=True)).sum())
            if abs(float(weights[top]) - 1.0 / count) < 1e-6:
                return (
                    f"the maximum of row {row} got weight {float(weights[top]):.3g} = 1/{count}, one over the number of "
                    f"maxima in the WHOLE tensor: divide by each row's own count, sum(dim=-1, keepdim=True)"
                )
            return (
                f"the maximum of row {row} got weight {float(weights[top]):.3g}, not 1: with one largest score, all the "
                "weight goes to it: each row's weights sum to 1"
            )
    return None


def _hardmax_ties(answer):
    scores = torch.tensor([[1.0, 3.0, 0.0, 3.0, 2.0], [2.0, 2.0, -1.0, 2.0, 0.5]])
    got = probe_tensor(answer(scores.clone()), (2, 5))
    for row, m in ((0, 2), (1, 3)):
        tied = scores[row] == scores[row].max()
        if not torch.allclose(got[row][tied], torch.full((m,), 1.0 / m, dtype=torch.float64), atol=1e-6):
            if torch.allclose(got[row][tied], torch.ones(m, dtype=torch.float64)):
                return (
                    f"row {row} has m = {m} tied maxima (scores {scores[row].tolist()}) and each got 1, so the row sums to m = {m}: "
                    f"they must share the weight equally, 1/m = {1 / m:.3g} each (divide by the number of maxima in the row)"
                )
            shares = got[row][tied]
            which = ""
            if float(shares[0]) == 1.0 and float(shares[1:].abs().sum()) == 0.0:
                which = ": all of it went to the FIRST of them (argmax's tie-breaking)"
            elif float(shares[-1]) == 1.0 and float(shares[:-1].abs().sum()) == 0.0:
                which = ": all of it went to the LAST of them"
            return (
                f"row {row} has m = {m} tied maxima (scores {scores[row].tolist()}); they got {[round(float(w), 3) for w in shares]}"
                f"{which}, but they must share the weight equally, 1/m = {1 / m:.3g} each (so the row still sums to 1)"
            )
    return None


add_properties(
    "3.1",
    [
        Property("one-hot on each row's maximum (exactly 0 elsewhere, 1 on the maximum)", _hardmax_one_hot),
        Property("ties share (m tied maxima get 1/m each)", _hardmax_ties),
    ],
)

_CHAPTER_SCORES = torch.tensor([0.2, 1.9, 1.5, -0.4, 0.9])


def _sparsemax_sums_to_one(answer):
    for scores in (_CHAPTER_SCORES, torch.tensor([0.3, 0.1, 0.2, 0.25, -0.1, 0.15])):
        got = probe_tensor(answer(scores.clone()), tuple(scores.shape))
        if abs(float(got.sum()) - 1.0) > 1e-5:
            return (
                f"for the scores {_short(scores)} your weights {[round(float(w), 3) for w in got]} sum to {float(got.sum()):.4g}, "
                "not 1: the threshold theta is chosen so that the weights max(z - theta, 0) sum to 1"
            )
    return None


def _sparsemax_one_threshold(answer):
    for scores in (_CHAPTER_SCORES, torch.tensor([0.3, 0.1, 0.2, 0.25, -0.1, 0.15])):
        got = probe_tensor(answer(scores.clone()), tuple(scores.shape))
        z = scores.double()
        if (got < 0).any():
            return f"for the scores {_short(scores)} a weight is negative ({float(got.min()):.3g}): sparsemax clamps z - theta at 0"
        support = got > 0
        if not support.any():
            raise Inconclusive("all zero")
        tiny = support & (got < 1e-4)
        if tiny.any() and (support & ~tiny).any():
            rest = z[support & ~tiny] - got[support & ~tiny]
            if float(rest.max() - rest.min()) <= 1e-5:
                return (
                    f"for the scores {_short(scores)} your weights are right where they are large, but where sparsemax gives "
                    f"exactly 0 yours give up to {float(got[tiny].max()):.1e}: sparsemax is sparse, so those must be exactly zero "
                    "(clamp z - theta at 0)"
                )
        thetas = z[support] - got[support]
        theta = float(thetas.mean())
        if float(thetas.max() - thetas.min()) > 1e-5:
            return (
                f"for the scores {_short(scores)} your nonzero weights are not the scores minus ONE threshold: z - w gives "
                f"{[round(float(t), 3) for t in thetas]}; sparsemax subtracts the same theta from every score and clamps at 0"
            )
        above = (~support) & (z > theta + 1e-6)
        if above.any():
            j = int(above.nonzero()[0])
            return (
                f"for the scores {_short(scores)} the score {float(z[j]):g} is above your threshold theta = {theta:.3g} "
                "but got weight 0: every score above theta gets z - theta (find the support with the test 1 + k z_(k) > z_(1) + ... + z_(k))"
            )
    return None


def _sparsemax_gradient(answer):
    scores = _CHAPTER_SCORES.clone().requires_grad_(True)
    got = answer(scores)
    if not isinstance(got, torch.Tensor) or got.shape != scores.shape or got.grad_fn is None:
        raise Inconclusive("the checker names a missing graph")
    upstream = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0])
    (gradient,) = torch.autograd.grad((got * upstream).sum(), scores, allow_unused=True)
    reference = sparsemax(scores)
    (expected,) = torch.autograd.grad((reference * upstream).sum(), scores)
    if gradient is not None and torch.allclose(gradient, expected, atol=1e-5):
        return None
    return (
        f"for the chapter's scores and an upstream gradient {upstream.tolist()}, autograd gives {None if gradient is None else [round(float(g), 3) for g in gradient]} "
        f"where sparsemax's gradient is {[round(float(g), 3) for g in expected]}: the threshold theta depends on the scores, but "
        "autograd does not see that unless you compute it from the scores tensor itself (no .item(), float(), .detach() "
        "or a detached sorted copy)"
    )


def _sparsemax_variant(
    scores: torch.Tensor,
    *,
    descending=True,
    values=True,
    shift=0,
    one=1.0,
    by_n=False,
    unsorted=False,
    subtract=True,
    first_k=1,
    minus=1.0,
    clamp=True,
):
    """Sparsemax with one of the usual slips (the defaults give sparsemax): the sort's direction, sorting the
    indices, the index of the threshold's sum, the 1 of the support test, dividing by n, the cumulative sum of the
    unsorted scores, clamping at theta instead of subtracting it."""
    order = torch.sort(scores, descending=descending)
    z = order.values if values else order.indices.to(scores.dtype)
    n = len(scores)
    k = torch.arange(first_k, first_k + n, dtype=scores.dtype)
    cumulative = (scores if unsorted else z).cumsum(dim=0)
    support = max(int((one + k * z > cumulative).sum()), 1)
    theta = (cumulative[min(support - 1 + shift, n - 1)] - minus) / (n if by_n else support)
    if not subtract:
        return torch.clamp(scores, min=float(theta))
    return torch.clamp(scores - theta, min=0) if clamp else scores - theta


_SPARSEMAX_SLIPS = {
    "you sorted in increasing order: sort the scores in DECREASING order (descending=True), so that the support is "
    "made of the k LARGEST scores": {"descending": False},
    "you used the indices that torch.sort returns: sort the score VALUES (torch.sort(...).values)": {"values": False},
    "your threshold uses the sum of k + 1 scores: theta = (z_(1) + ... + z_(k) - 1) / k is cumulative[k - 1] (the "
    "sum of the k largest), counting from 0": {"shift": 1},
    "your support test has no 1 +: a score z_(k) is in the support when 1 + k z_(k) > z_(1) + ... + z_(k)": {
        "one": 0.0
    },
    "you divided by n, the number of scores: theta = (z_(1) + ... + z_(k) - 1) / k, divided by k, the size of the "
    "support": {"by_n": True},
    "your cumulative sums are of the unsorted scores: take cumsum of the SORTED scores": {"unsorted": True},
    "you clamped the scores at theta instead of subtracting it: the weights are max(z - theta, 0), so subtract theta, "
    "then clamp at 0": {"subtract": False},
    "some weights are negative: clamp the shifted scores at zero, max(z - theta, 0)": {"clamp": False},
    "off by one in the support test: k runs 1, 2, ..., n (the k-th largest score is z_(k), index k - 1 when counting "
    "from 0), so the test is 1 + k z_(k) > z_(1) + ... + z_(k)": {"first_k": 0},
    "the threshold is theta = (z_(1) + ... + z_(k) - 1) / k: without the - 1 the weights cannot sum to 1": {
        "minus": 0.0
    },
}


def _sparsemax_slips(answer):
    """The usual slips of the recipe, each named when the answer computes exactly it on two rows of scores."""
    rows = (_CHAPTER_SCORES, torch.tensor([0.3, 0.1, 0.2, 0.25, -0.1, 0.15]), torch.tensor([2.0, -1.0, 0.5, 1.8, 0.0]))
    outputs = [probe_tensor(answer(scores.clone()), tuple(scores.shape)) for scores in rows]
    if all(torch.allclose(got, sparsemax(scores).double(), atol=1e-6) for got, scores in zip(outputs, rows)):
        return None
    if all(
        torch.allclose(got, torch.softmax(scores.double(), dim=-1), atol=1e-6) for got, scores in zip(outputs, rows)
    ):
        return (
            "these are softmax weights, positive everywhere: sparsemax subtracts a threshold theta from the scores and "
            "clamps at 0, so low scores get EXACTLY zero"
        )
    for cause, flags in _SPARSEMAX_SLIPS.items():
        if all(
            torch.allclose(got, _sparsemax_variant(scores.double(), **flags), atol=1e-6)
            for got, scores in zip(outputs, rows)
        ):
            return (
                f"for the scores {_short(rows[0])} your weights are {[round(float(w), 3) for w in outputs[0]]}: {cause}"
            )
    return None


add_properties(
    "3.2",
    [
        Property("the recipe's steps (sort, support test, threshold, clamp)", _sparsemax_slips),
        Property("the weights sum to 1", _sparsemax_sums_to_one),
        Property("one threshold (w = max(z - theta, 0) with the same theta for every score)", _sparsemax_one_threshold),
        Property("the gradient (theta depends on the scores, and autograd must see it)", _sparsemax_gradient),
    ],
)

_BETA_SCORES = torch.tensor([0.2, 1.9, 1.5, -0.4, 0.9], dtype=torch.float64)


def _beta_target_is_used(answer):
    betas = [
        _as_number(_call_with_time_limit(answer, _BETA_SCORES.clone(), target), _BETA_SCORES, target)
        for target in (0.75, 0.97)
    ]
    if (
        None not in betas
        and abs(betas[0] - betas[1]) <= 1e-9 * max(abs(betas[1]), 1.0)
        and _top_weight(_BETA_SCORES, betas[0]) < 0.97
    ):
        return (
            f"for the scores {_short(_BETA_SCORES)} you return beta = {betas[0]:.4g} both for target 0.75 and for target 0.97: "
            "a higher target needs a larger beta, so search with the target you are given"
        )
    return None


def _beta_smallest(answer):
    for scores, target in (
        (_BETA_SCORES, 0.9),
        (_BETA_SCORES, 0.75),
        (_BETA_SCORES, 0.97),
        (torch.tensor([1.0, 0.95, 0.0, -0.5], dtype=torch.float64), 0.99),  # a beta near 100
    ):
        sentence = probe_from_check(_check_beta_case, scores, target)(answer)
        if sentence:
            return sentence
    return None


add_properties(
    "3.3",
    [
        Property("the target is an argument (a higher target needs a larger beta)", _beta_target_is_used),
        Property("the smallest beta that reaches the target (within 0.1%)", _beta_smallest),
        Property(
            "ties at the maximum (None: the top weight never passes 1/m), and only there",
            lambda answer: (
                probe_from_check(_check_beta_case, torch.tensor([2.0, 0.5, 2.0, 1.0], dtype=torch.float64), 0.9)(answer)
                or probe_from_check(_check_beta_case, torch.tensor([3.0, 1.0, 1.0, 0.0], dtype=torch.float64), 0.9)(
                    answer
                )
            ),
        ),
    ],
)
