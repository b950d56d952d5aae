"""Exercises of chapter 3, "Soft, hard and sparse attention".

3.1 Hardmax: one-hot weights on the largest score, tied maxima sharing equally.
3.2 Sparsemax of one row of scores, with exact zeros and a correct gradient.
3.3 Design: the smallest inverse temperature beta at which the top softmax weight
    reaches a target, or None when no beta can (the answer runs under a time limit: an
    alarm on Unix, a daemon thread that is waited for elsewhere).
3.4 Design: straight-through top-m, whose value is the top-m weights and whose gradient is
    the softmax's over all the keys; then the chapter's circle, where it must escape the
    trap from every start.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.hardmax`, :func:`~attention_book.sparsemax`,
:func:`~attention_book.softmax`, :func:`~attention_book.top_k_weights`) and recognises
typical wrong answers by what they compute.
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


def _too_long(scores: torch.Tensor) -> str:
    return (
        f"your function did not return within {SEARCH_TIME_LIMIT_S:.0f} s, for scores {_short(scores)}: does a loop "
        "never end? When the top score is tied, no beta reaches the target, so a search for one runs forever"
    )


def _call_with_time_limit(answer, *args):
    """Call the answer and stop waiting after SEARCH_TIME_LIMIT_S seconds: with an alarm where the platform has one
    (Unix, on the main thread), which also stops the answer; elsewhere (Windows, a thread of a server) in a daemon
    thread that is waited for, and left running if it hangs (a thread cannot be stopped from outside)."""
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        return _call_with_alarm(answer, *args)
    return _call_in_thread(answer, *args)


def _call_with_alarm(answer, *args):
    def on_alarm(signum, frame):
        raise _TookTooLong

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, SEARCH_TIME_LIMIT_S)
    try:
        return call(answer, *args)
    except _TookTooLong:
        raise ExerciseFailure(_too_long(args[0])) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _call_in_thread(answer, *args):
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = call(answer, *args)
        except BaseException as error:  # handed to the caller's thread, which reports it
            outcome["error"] = error

    worker = threading.Thread(target=run, name="exercise 3.3: the answer", daemon=True)
    worker.start()
    worker.join(SEARCH_TIME_LIMIT_S)
    if worker.is_alive():
        raise ExerciseFailure(
            _too_long(args[0]) + " (on this platform it cannot be stopped: it runs on until the kernel restarts)"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


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


# ---------------------------------------------------------------------------------
# 3.4 Design: straight-through top-m (the top-m weights forward, the softmax's gradient backward)

CIRCLE_STEPS = 8  # the hard choice must reach key 3 within this many steps of gradient descent
CIRCLE_LEARNING_RATE = 0.5  # the chapter's train_query


def _straight_through_solution(scores: torch.Tensor, m: int = 1) -> torch.Tensor:
    """The top-m weights of each row (..., T_k) as the value; the softmax's gradient over all the keys."""
    kth_largest = scores.topk(m, dim=-1).values[..., -1:]  # (..., 1): the m-th largest score of each row
    kept = scores >= kth_largest  # (..., T_k): the top m, and any score tied with the m-th
    top_m = torch.softmax(scores.masked_fill(~kept, float("-inf")), dim=-1)  # (..., T_k)
    soft = torch.softmax(scores, dim=-1)  # (..., T_k): every key
    # top_m has a gradient of its own inside the top m: detached, only the softmax's is left
    return top_m.detach() + (soft - soft.detach())  # (soft - soft) is exactly 0: the value is exactly top_m


def _top_m_weights(scores: torch.Tensor, m: int, dim: int = -1) -> torch.Tensor:
    kth_largest = scores.topk(m, dim=dim).values.narrow(dim, m - 1, 1)
    return torch.softmax(scores.masked_fill(scores < kth_largest, float("-inf")), dim=dim)


def _softmax_pullback(weights: torch.Tensor, upstream: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The gradient that a softmax with these weights passes back for the upstream gradient: a (u - sum a u)."""
    return weights * (upstream - (weights * upstream).sum(dim=dim, keepdim=True))


# The hints, shared by the probes, the checker and the registered mistakes (each fragment names one mistake).
ST_SOFT_VALUE = "the forward value is the softmax's"
ST_WRONG_AXIS = "the top m were chosen over the wrong axis"
ST_INDEX = "the index of the largest score"
ST_M_IGNORED = "m is ignored"
ST_TIES_SUM = "the row sums to"
ST_NO_GRADIENT = "no gradient reaches the scores"
ST_SIGN = "the softmax's gradient with the opposite sign"
ST_BOTH = "plus the softmax's"
ST_OUTSIDE = "keys outside the top m get no gradient"
ST_IN_PLACE = "an in-place operation"
# The probes' scores: three rows of five distinct scores, whose largest lie in different columns.
_ST_PROBE_SCORES = torch.tensor([[0.5, -1.0, 2.0, 0.0, 1.2], [-0.3, 1.5, 0.2, 1.45, -2.0], [0.9, 0.4, -0.6, 2.2, 1.7]])
# A square batch (5 rows of 5 keys), on which an argmax down the columns still fits the shape.
_ST_SQUARE_SCORES = torch.tensor(
    [
        [0.1, 2.0, -0.5, 0.7, 1.1],
        [1.3, -0.2, 0.4, 2.5, 0.0],
        [-1.0, 0.3, 1.9, 0.2, 0.8],
        [0.6, 1.2, -0.7, -0.1, 2.1],
        [2.4, 0.5, 1.0, -0.3, -0.9],
    ]
)


def _st_value_variants(scores: torch.Tensor, m: int) -> dict[str, torch.Tensor]:
    """What the usual slips return as the value on these scores (float64): hint -> weights."""
    z = scores.double()
    variants = {
        f"{ST_SOFT_VALUE} (every key gets some weight): the forward pass must be the hard choice, the top-m weights "
        "with exactly 0 outside the top m; only the gradient is borrowed from the softmax": torch.softmax(z, dim=-1),
    }
    if z.dim() >= 2 and m <= z.shape[0]:
        variants[
            f"{ST_WRONG_AXIS} (down the columns, dim=0): each row holds one query's scores over the keys, so take "
            "the largest along the last axis (dim=-1)"
        ] = _top_m_weights(z, m, dim=0)
    kept_fewer = (
        "you kept m - 1 keys (for m = 1 none, and a softmax over nothing is nan): the m-th largest score is kept too "
        "(compare with >=, not >)"
    )
    if m == 1:
        variants[kept_fewer] = torch.full_like(z, float("nan"))
    if m > 1:
        kept = z >= z.topk(m, dim=-1).values[..., -1:]
        variants[
            f"{ST_M_IGNORED}: with m = {m} your weights are one-hot; keep the m largest scores of each row and "
            "take the softmax over them (the top-m attention above)"
        ] = hardmax(z)
        variants[
            f"inside the top m each key got 1/m = {1 / m:.3g}: the top-m weights are the softmax over the m kept "
            "scores, so a larger score keeps a larger weight"
        ] = kept.double() / m
        variants[kept_fewer] = _top_m_weights(z, m - 1)
    return variants


def _st_value_case(answer, scores: torch.Tensor, m: int, *, what: str) -> None:
    """The forward value on scores without ties: exactly the top-m weights along the last axis."""
    got = call(answer, scores.clone(), m)
    what = f"the value ({what}, m = {m})"
    if isinstance(got, torch.Tensor) and not got.is_floating_point() and got.shape != scores.shape:
        raise ExerciseFailure(
            f"{what} has shape {tuple(got.shape)}: whole numbers, {ST_INDEX} (what argmax or topk gives). Return "
            f"WEIGHTS of the scores' shape {tuple(scores.shape)}: for m = 1 a one-hot row, 1 on the largest score"
        )
    if isinstance(got, torch.Tensor) and got.shape == (*scores.shape[:-1], m) and m < scores.shape[-1]:
        raise ExerciseFailure(
            f"{what} has shape {tuple(got.shape)}, m numbers a row: the m largest scores themselves (what topk's "
            f"values give). Return WEIGHTS of the scores' shape {tuple(scores.shape)}, 0 outside the top m (scatter "
            "the kept keys' softmax into a tensor of zeros, or mask the other scores before a softmax)"
        )
    known = _st_value_variants(scores, m)
    if scores.dim() == 2 and m == 1:  # one_hot(argmax(dim=0)): one row per key, (T_k, T_k)
        by_column = torch.nn.functional.one_hot(scores.argmax(dim=0), scores.shape[-1]).double()
        axis = next(hint for hint in known if hint.startswith(ST_WRONG_AXIS))
        known[
            f"{axis}; argmax(dim=0) gives one index per key, hence a ({len(by_column)}, {len(by_column)}) one-hot"
        ] = by_column
    expected = _top_m_weights(scores.double(), m).to(scores.dtype)
    if isinstance(got, torch.Tensor) and got.shape == scores.shape and got.is_floating_point():
        outside = got.detach().double().masked_fill(expected > 0, 0.0)
        close = (got.detach().double() - expected.double()).abs().max() < 0.5
        if close and outside.abs().max() > 1e-6 and not _close_to_any(got, known):
            raise ExerciseFailure(
                f"{what} is nearly the top-m weights but not exactly: a key outside the top m gets "
                f"{float(outside.abs().max()):.2g}. The forward value must be exactly hard, 0 outside the top m (a "
                "softmax, however sharp, is never exactly 0)"
            )
    diagnose(got, expected, what, known_mistakes=known, atol=1e-6, rtol=1e-5)


def _close_to_any(got: torch.Tensor, known: dict[str, torch.Tensor]) -> bool:
    got = got.detach().double()
    return any(
        wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-6, equal_nan=True) for wrong in known.values()
    )


def _st_value_probe(answer) -> str | None:
    """The value on the probe's scores for m = 1 and 2, then on a square batch; a case the answer crashes on is
    left to the others (a crash on the (3, 5) batch is often an axis mistake that the square batch names)."""
    for scores, m, what in (
        (_ST_PROBE_SCORES, 1, "the probe's (3, 5) scores"),
        (_ST_PROBE_SCORES, 2, "the probe's (3, 5) scores"),
        (_ST_SQUARE_SCORES, 1, "a (5, 5) batch of scores"),
    ):
        try:
            _st_value_case(answer, scores, m, what=what)
        except ExerciseFailure as failure:
            return str(failure)
        except Exception:  # inconclusive here: the checker reports the crash
            continue
    return None


# Ties: row 0 has two tied maxima (m = 1), row 1 a tie for the second place (m = 2).
_ST_TIED = (torch.tensor([[1.0, 3.0, 0.0, 3.0, 2.0]]), torch.tensor([[3.0, 1.0, 2.0, 2.0, 0.0]]))


def _st_ties_case(answer) -> None:
    """Tied scores may all be kept (as ab.top_k_weights does) or only as many as m needs; either way the weights
    are the softmax over the kept scores, so each row sums to 1."""
    for scores, m in zip(_ST_TIED, (1, 2)):
        got = call(answer, scores.clone(), m)
        got = require_tensor_like(got, scores, f"the weights (scores {_short(scores[0])}, m = {m})").double()[0]
        z = scores.double()[0]
        kth = float(z.topk(m).values[-1])
        kept = got > 0
        total = float(got.sum())
        if abs(total - 1.0) > 1e-5:
            raise ExerciseFailure(
                f"for the scores {_short(z)} with m = {m}, whose scores {_short(z[z == kth])} tie for place {m}, your "
                f"weights {_short(got)} mean {ST_TIES_SUM} {total:.3g}: tied keys may share the kept weight (as "
                "ab.top_k_weights does) or you may keep just enough of them, but the weights are a softmax over the "
                "kept scores, so they sum to 1"
            )
        valid = bool((kept | (z <= kth)).all() and (~kept | (z >= kth)).all()) and int(kept.sum()) >= m
        share = torch.softmax(z.masked_fill(~kept, float("-inf")), dim=0)
        if not valid or not torch.allclose(got, share, atol=1e-6):
            raise ExerciseFailure(
                f"for the scores {_short(z)} with m = {m}, whose scores {_short(z[z == kth])} tie for place {m}, your "
                f"weights are {_short(got)}: keep every score above the tie and at least enough of the tied ones to "
                "make m, and give the kept keys the softmax of their scores"
            )


def _st_gradient_variants(scores: torch.Tensor, m: int, upstream: torch.Tensor) -> dict[str, torch.Tensor]:
    """What the usual slips pass back to the scores for this upstream gradient (float64): hint -> gradient."""
    z, u = scores.double(), upstream.double()
    soft = _softmax_pullback(torch.softmax(z, dim=-1), u)
    top = _softmax_pullback(_top_m_weights(z, m), u)
    variants = {
        f"your gradient is {ST_SIGN}: the term that carries it enters with a minus, its detached copy with a plus; "
        "swap the signs, so that raising a score the loss wants raised lowers the loss": -soft,
    }
    if m > 1:
        variants[
            f"your gradient is the top-m weights' own {ST_BOTH}: for m > 1 the top-m weights have a gradient of "
            "their own inside the top m (hardmax had none), so detach them; only the softmax's may reach the scores"
        ] = top + soft
        variants[
            f"your gradient is the top-m weights' own: {ST_OUTSIDE}, the trap of top-m attention; the gradient must be "
            "the softmax's over ALL the keys"
        ] = top
    if z.dim() >= 2:
        variants[
            "your gradient is that of a softmax over the wrong axis (dim=0, down the columns): the borrowed softmax "
            "runs over each row's keys, dim=-1"
        ] = _softmax_pullback(torch.softmax(z, dim=0), u, dim=0)
    return variants


def _st_gradient_case(answer, scores: torch.Tensor, m: int, *, what: str) -> None:
    """The gradient that the weights pass back to the scores: the softmax's over all the keys, and nothing else."""
    leaf = scores.clone().requires_grad_(True)
    upstream = torch.linspace(-1.0, 1.0, scores.numel(), dtype=scores.dtype).reshape(scores.shape).flip(-1) ** 3
    what = f"{what}, m = {m}"
    try:
        result = call(answer, leaf, m)
        if not isinstance(result, torch.Tensor) or result.shape != scores.shape:
            raise Inconclusive("the value case names the type or shape")
        gradient = None
        if result.requires_grad:
            (gradient,) = torch.autograd.grad((result * upstream).sum(), leaf, allow_unused=True)
    except RuntimeError as error:
        if "inplace" not in str(error).replace("-", "").lower():
            raise
        raise ExerciseFailure(
            f"autograd stopped ({what}): {ST_IN_PLACE} (masked_fill_, -=, x[...] = ...) changed a tensor that "
            "autograd needs (the scores themselves, or a softmax it must differentiate later). Write the out-of-place "
            "form (masked_fill, x = x - ...), which makes a new tensor"
        ) from None
    if gradient is None or not gradient.abs().any():
        raise ExerciseFailure(
            f"{ST_NO_GRADIENT} ({what}: {'autograd sees no path back' if gradient is None else 'it is 0 everywhere'}"
            "): with hard weights alone the query never moves, as on the circle. The value must stay the top-m "
            "weights, so the softmax's gradient has to come from a term that adds 0 to the value"
        )
    expected = _softmax_pullback(torch.softmax(scores.double(), dim=-1), upstream.double())
    diagnose(
        gradient,
        expected.to(scores.dtype),
        f"the gradient your weights pass back ({what})",
        known_mistakes={hint: g.to(scores.dtype) for hint, g in _st_gradient_variants(scores, m, upstream).items()},
        atol=1e-6,
        rtol=1e-4,
    )


def _st_gradient_probe(answer) -> str | None:
    """The gradient on the probe's scores, for m = 1, then m = 2 (where the top-m weights have one of their own)."""
    for m in (1, 2):
        try:
            _st_gradient_case(answer, _ST_PROBE_SCORES, m, what="the probe's (3, 5) scores")
        except ExerciseFailure as failure:
            return str(failure)
    return None


def _circle() -> tuple[torch.Tensor, torch.Tensor]:
    """The chapter's circle: five keys (5, 2) of length 2 and their one-hot values (5, 5)."""
    angles = torch.arange(5, dtype=torch.float64) * 2 * math.pi / 5
    return 2.0 * torch.stack([angles.cos(), angles.sin()], dim=1), torch.eye(5, dtype=torch.float64)


def _circle_case(answer, m: int, turn: float) -> None:
    """Gradient descent on the query with the answer's weights, from a start pointing at each key (turned by
    ``turn`` radians): the hard choice must reach key 3 within CIRCLE_STEPS steps."""
    keys, values = _circle()
    for start_key in range(5):
        angle = torch.tensor(start_key * 2 * math.pi / 5 + turn, dtype=torch.float64)
        query = torch.stack([angle.cos(), angle.sin()]).requires_grad_(True)  # (2,)
        start = query.detach().clone()
        for _ in range(CIRCLE_STEPS + 1):
            weights = call(answer, keys @ query, m)  # (5,)
            if not isinstance(weights, torch.Tensor) or weights.shape != (5,):
                raise ExerciseFailure(f"on the circle your function returned {weights!r} for 5 scores and m = {m}")
            if int(weights.detach().argmax()) == 2:
                break
            loss = ((weights.double() @ values - values[2]) ** 2).sum()
            if not loss.requires_grad:
                break
            (gradient,) = torch.autograd.grad(loss, query)
            with torch.no_grad():
                query -= CIRCLE_LEARNING_RATE * gradient
        if int(weights.detach().argmax()) != 2:
            moved = float((query.detach() - start).norm())
            raise ExerciseFailure(
                f"on the chapter's circle with m = {m}, from the start pointing at key {start_key + 1}, the hard choice "
                f"is still key {int(weights.detach().argmax()) + 1} after {CIRCLE_STEPS} steps of gradient descent "
                f"(the query moved by {moved:.3g}): the softmax's gradient raises key 3's score however wrong the hard "
                "choice is; check that your weights pass back exactly that gradient"
            )


def _st_scores(generator: torch.Generator, *shape: int, dtype=torch.float32) -> torch.Tensor:
    """Random scores without ties (rounded to 3 decimals, redrawn until each row's values are distinct)."""
    while True:
        scores = (1.5 * torch.randn(*shape, generator=generator, dtype=torch.float64)).round(decimals=3)
        rows = scores.reshape(-1, shape[-1])
        if all(len(set(row.tolist())) == shape[-1] for row in rows):
            return scores.to(dtype)


def _check_straight_through(answer) -> None:
    generator = random_generator()
    cases = [
        (_st_scores(generator, 4, 6), 1, "a (4, 6) batch of scores"),
        (_st_scores(generator, 2, 3, 7, dtype=torch.float64), 3, "float64 scores of shape (2, 3, 7)"),
        (_st_scores(generator, 5), 2, "one row of 5 scores"),
        (_st_scores(generator, 3, 4), 4, "a (3, 4) batch, every key kept"),
    ]
    for scores, m, what in cases:
        _st_value_case(answer, scores, m, what=what)
    _st_ties_case(answer)
    for scores, m, what in cases:
        _st_gradient_case(answer, scores, m, what=what)
    _circle_case(answer, 1, 0.0)
    _circle_case(answer, 2, 0.3)


def _st_softmax_only(scores, m=1):
    return torch.softmax(scores, dim=-1)


def _st_without_soft_term(scores, m=1):
    return _top_m_weights(scores, m)


def _st_sign_error(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    return _top_m_weights(scores, m).detach() - soft + soft.detach()


def _st_hard_not_detached(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    return _top_m_weights(scores, m) + soft - soft.detach()


def _st_over_first_axis(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    return _top_m_weights(scores, m, dim=0).detach() + soft - soft.detach()


def _st_index(scores, m=1):
    return scores.topk(m, dim=-1).indices.squeeze(-1)


def _st_ties_each_one(scores, m=1):
    """For m = 1 the one-hot written as a comparison with the maximum: tied maxima each get 1."""
    soft = torch.softmax(scores, dim=-1)
    if m == 1:
        hard = (scores == scores.amax(dim=-1, keepdim=True)).to(scores.dtype)
    else:
        hard = _top_m_weights(scores, m)
    return hard.detach() + soft - soft.detach()


def _st_in_place(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    hard = _top_m_weights(scores.detach(), m)
    soft -= soft.detach()
    return hard + soft


register(
    "3.4",
    "Straight-through top-m",
    _check_straight_through,
    answer="straight_through_top_m",
    solution=_straight_through_solution,
    mistakes=[
        Mistake("value is the softmax", _st_softmax_only, ST_SOFT_VALUE),
        Mistake("no softmax term", _st_without_soft_term, ST_NO_GRADIENT),
        Mistake("sign error", _st_sign_error, ST_SIGN),
        Mistake("top-m part not detached", _st_hard_not_detached, ST_BOTH),
        Mistake("top m over the wrong axis", _st_over_first_axis, ST_WRONG_AXIS),
        Mistake("returned the index", _st_index, ST_INDEX),
        Mistake("tied keys each get 1", _st_ties_each_one, ST_TIES_SUM),
        Mistake("in-place subtraction", _st_in_place, ST_IN_PLACE),
    ],
    properties=[
        Property(
            "the forward value (exactly the top-m weights: one-hot for m = 1, 0 outside the top m)", _st_value_probe
        ),
        Property("ties (each row still sums to 1)", probe_from_check(_st_ties_case)),
        Property("the gradient (the softmax's over all the keys, and nothing else)", _st_gradient_probe),
    ],
)
