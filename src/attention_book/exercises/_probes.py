"""Probes shared by the attention exercises (0.1, 1.4, 2.1, 4.3): each builds an input on
which one idea decides the weights, and says in the chapter's words how an answer breaks it.

An exercise adapts its answer to ``weights_of(Q, K) -> A`` (queries (T_q, d), keys (T_k, d); A
(T_q, T_k) as float64, or :class:`~._core.Inconclusive`); :func:`attention_properties` returns the
properties.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from ._core import Inconclusive, Property

SOFTMAX_AXIS = "the softmax axis (each query's weights sum to 1 over the keys)"
SOFTMAX = "the softmax (weights grow with the score, as exp(score) / sum)"
SCALE = "the scale (scores are dot products divided by sqrt(d_k))"
VALUES = "the output H = A V (each output row averages the VALUE rows with that query's weights)"


def _randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).float()


def _fmt(values) -> str:
    return "(" + ", ".join(f"{float(v):.3g}" for v in values) + ")"


def softmax_axis_probe(weights_of: Callable, T_q: int = 3, T_k: int = 5, d: int = 4) -> Callable:
    def probe(answer) -> str | None:
        Q, K = _randn(11, T_q, d), _randn(12, T_k, d)
        A = weights_of(answer, Q, K)
        if not torch.isfinite(A).all():
            raise Inconclusive("nan")  # the checker names overflow and 0/0
        rows = A.sum(dim=-1)
        if torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
            return None
        if (A <= 1e-9).all() and torch.allclose(A.exp().sum(dim=-1), torch.ones_like(rows), atol=1e-4):
            return (
                "your weights are all negative and their exponentials sum to 1 in each row: they are log-probabilities "
                "(log_softmax). Use torch.softmax, whose weights are positive and sum to 1"
            )
        raw = Q.double() @ K.double().T
        for scores, name in ((raw / math.sqrt(d), "q.k / sqrt(d_k)"), (raw, "q.k")):
            if torch.allclose(A, scores, atol=1e-4, rtol=1e-4):
                return (
                    f"your weights are the scores {name} themselves (rows summing to {_fmt(rows)}): these are the scores, "
                    "not the weights; turn them into weights with a softmax over the keys, A = softmax(S, dim=-1)"
                )
        columns = A.sum(dim=-2)
        if torch.allclose(columns, torch.ones_like(columns), atol=1e-4):
            return (
                f"with {T_q} random queries and {T_k} keys your weights sum to 1 down each column (over the queries) "
                f"while row 0 (query 0) sums to {rows[0]:.3f}: each query's row must sum to 1 over the keys, so take "
                "the softmax along the keys (dim=-1)"
            )
        if float(rows.std()) < 1e-4 * max(1.0, float(rows.abs().mean())):
            constant = float(rows.mean())
            for name, value in ((f"1/sqrt(d_k) = 1/sqrt({d})", 1 / math.sqrt(d)), (f"1/d_k = 1/{d}", 1 / d)):
                if abs(constant - value) < 1e-4:
                    return (
                        f"every row of your weights sums to {constant:.3f} = {name}: the scale is applied after the "
                        "softmax. Divide the SCORES by sqrt(d_k), before the softmax, so that each row sums to 1"
                    )
        worst = int((rows - 1).abs().argmax())
        negative = f"; some weights are negative (as low as {float(A.min()):.3f})" if (A < -1e-6).any() else ""
        return (
            f"with {T_q} random queries and {T_k} keys, row {worst} (query {worst}) of your weights sums to "
            f"{rows[worst]:.3f} over the keys, not 1{negative}: the weights are a softmax of the scores along the keys "
            "(exponentiate, then divide by each row's sum), so they are positive and each row sums to 1"
        )

    return probe


def determinism_probe(run: Callable, calls: int = 4) -> Callable:
    """``run(answer)`` calls the answer on fixed inputs: every call must give the same tensors (no dropout left on).
    Several calls, because two dropout masks on a few numbers are the same now and then (1 in 20 for 15 weights and
    p = 0.1)."""

    def probe(answer) -> str | None:
        first = run(answer)
        for _ in range(calls - 1):
            sentence = _differs(first, run(answer))
            if sentence:
                return sentence
        return None

    return probe


def _differs(first, second) -> str | None:
    """The determinism probe's sentence when two results differ, else None."""
    firsts = first if isinstance(first, (tuple, list)) else (first,)
    seconds = second if isinstance(second, (tuple, list)) else (second,)
    for a, b in zip(firsts, seconds):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            continue
        if a.shape == b.shape and torch.allclose(a.double(), b.double(), atol=1e-6, equal_nan=True):
            continue
        how = (
            f"of the shapes {tuple(a.shape)} and {tuple(b.shape)}"
            if a.shape != b.shape
            else f"(by up to {float((a.double() - b.double()).abs().nan_to_num(0).max()):.3g})"
        )
        return (
            f"two calls with the same inputs gave different results {how}: something random is on, such as dropout "
            "(F.dropout and nn.Dropout drop at random unless told otherwise) or sampling (torch.multinomial). The "
            "exercise has neither: take it out"
        )
    return None


def output_pair_probe(run: Callable) -> Callable:
    """``run(answer) -> (returned, values)``: the answer's return value on inputs with T_q, T_k and d_v all different,
    and the values V (T_k, d_v) it was given. The pair must be (H, A): the output (T_q, d_v), then the weights
    (T_q, T_k)."""

    def probe(answer) -> str | None:
        returned, V = run(answer)
        if not isinstance(returned, (tuple, list)) or len(returned) != 2:
            raise Inconclusive("not a pair")
        first, second = returned
        if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
            raise Inconclusive("not tensors")
        T_k, d_v = V.shape[-2], V.shape[-1]
        T_q = second.shape[-2] if second.dim() >= 2 else None
        H_shape = (*second.shape[:-1], d_v)
        A_like = lambda t: t.dim() >= 2 and t.shape[-1] == T_k
        if A_like(first) and first.shape[:-1] == second.shape[:-1] and second.shape[-1] == d_v:
            return (
                f"the first tensor you return has the weights' shape {tuple(first.shape)} and the second the output's "
                f"{tuple(second.shape)}: you returned (A, H); return (H, A), the output first"
            )
        if (
            A_like(first)
            and A_like(second)
            and first.shape == second.shape
            and torch.allclose(first.double(), second.double(), atol=1e-6)
        ):
            return (
                f"you returned the weights A (shape {tuple(first.shape)}) where the output H belongs: multiply them by the "
                f"values, H = A @ V (shape {H_shape})"
            )
        if T_q is not None and first.dim() >= 2 and first.shape[-2:] == (d_v, T_q) and d_v != T_q:
            H = second.double() @ V.double()
            if torch.allclose(first.double(), H.transpose(-2, -1), atol=1e-4):
                return (
                    f"your output has shape {tuple(first.shape)}: it is A V with its last two axes swapped (V^T A^T). "
                    "Multiply with the weights on the left, H = A @ V"
                )
        return None

    return probe


def _graded_keys(d: int, gap_raw: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Query 0 = gap_raw e_0 and three keys 0, e_0, 2 e_0: dot products 0, gap_raw, 2 gap_raw.

    Two queries and three keys, so that no shape is square by accident and sqrt(T) is not sqrt(d_k)."""
    Q = torch.zeros(2, d)
    Q[0, 0] = gap_raw
    Q[1, 1] = 1.0
    K = torch.zeros(3, d)
    K[1, 0], K[2, 0] = 1.0, 2.0
    return Q, K


def softmax_probe(weights_of: Callable, d: int = 4) -> Callable:
    def probe(answer) -> str | None:
        Q, K = _graded_keys(d, gap_raw=math.sqrt(d))  # scaled scores 0, 1, 2
        A = weights_of(answer, Q, K)[0]
        if not torch.isfinite(A).all():
            raise Inconclusive("nan")
        if (A <= 0).any():
            return (
                f"keys whose scaled scores are 0, 1 and 2 got weights {_fmt(A)}: a softmax gives every key a positive "
                "weight (exp(score) > 0, divided by the sum of the exponentials); an argmax (one-hot) or dividing the "
                "scores by their sum does not"
            )
        if not (A[0] < A[1] < A[2]):
            return (
                f"keys whose scaled scores are 0, 1 and 2 got weights {_fmt(A)}: the key with the larger score must get "
                "the larger weight, exp(score) divided by the sum over the keys (check the scores you give the softmax: "
                "q.k for this query and key, nothing else applied)"
            )
        first, second = math.log(A[1] / A[0]), math.log(A[2] / A[1])
        if abs(first - second) > 1e-3 * max(abs(first), abs(second)):
            return (
                f"keys whose scaled scores are 0, 1 and 2 (evenly spaced) got weights {_fmt(A)}, which grow by x{math.exp(first):.3g} "
                f"then x{math.exp(second):.3g}: a softmax multiplies the weight by the same factor for each equal step in the "
                "score (exp(score) divided by the sum over the keys)"
            )
        return None

    return probe


def _describe_divisors(
    d_small: int,
    D_small: float,
    d_large: int,
    *,
    D_large: float,
    sizes: dict[str, float],
    sizes_large: dict[str, float] | None = None,
) -> str:
    close = lambda a, b: abs(a - b) < 2e-3 * max(abs(b), 1e-9)
    for name, value in sizes.items():  # another size of the inputs that grows with d_k (d_model, say)
        large = (sizes_large or {}).get(name)
        if (
            large is not None
            and large != value
            and close(D_small, math.sqrt(value))
            and close(D_large, math.sqrt(large))
        ):
            return f"that is sqrt({name}) = sqrt({value:g}) and sqrt({large:g}): divide by sqrt(d_k), the size of a query and key"
    if close(D_small, d_small * math.sqrt(d_small)) and close(D_large, d_large * math.sqrt(d_large)):
        return (
            "that is d_k sqrt(d_k): a mean over the features already divides by d_k. The score is the dot product "
            "(the SUM of q_i k_i), divided by sqrt(d_k)"
        )
    if close(D_small, 1.0) and close(D_large, 1.0):
        return "the scores are not scaled at all: divide them by sqrt(d_k)"
    if close(D_small, float(d_small)) and close(D_large, float(d_large)):
        return "that is d_k: divide by sqrt(d_k), not by d_k"
    if close(D_small, 1 / math.sqrt(d_small)) and close(D_large, 1 / math.sqrt(d_large)):
        return "you multiply by sqrt(d_k): divide by it"
    if close(D_small, D_large):
        for name, value in sizes.items():
            if close(D_small, math.sqrt(value)):
                return f"that is sqrt({name}) = sqrt({value:g}), which does not change with d_k: divide by sqrt(d_k)"
            if close(D_small, value):
                return f"that is {name} = {value:g}, which does not change with d_k: divide by sqrt(d_k)"
        return "a divisor that does not change with d_k: divide by sqrt(d_k)"
    return "divide by sqrt(d_k), once"


def scale_probe(
    weights_of: Callable, sizes: Callable[[int], dict[str, float]] | None = None, dims: tuple[int, int] = (4, 16)
) -> Callable:
    """Same dot products at two d_k: the divisor the weights imply must be sqrt(d_k) at both."""

    def probe(answer) -> str | None:
        implied = []
        for d in dims:
            Q, K = _graded_keys(d, gap_raw=2.0)  # dot products 0, 2, 4
            A = weights_of(answer, Q, K)[0]
            if not torch.isfinite(A).all() or (A <= 0).any() or A[1] <= A[0]:
                raise Inconclusive("not a softmax")
            implied.append(2.0 / math.log(A[1] / A[0]))
        (d_small, d_large), (D_small, D_large) = dims, implied
        if abs(D_small - math.sqrt(d_small)) < 2e-3 * math.sqrt(d_small) and abs(
            D_large - math.sqrt(d_large)
        ) < 2e-3 * math.sqrt(d_large):
            return None
        known = {**(sizes(d_small) if sizes else {}), "T, the number of keys": 3, "the number of queries": 2}
        known_large = {**(sizes(d_large) if sizes else {}), "T, the number of keys": 3, "the number of queries": 2}
        named = _describe_divisors(d_small, D_small, d_large, D_large=D_large, sizes=known, sizes_large=known_large)
        return (
            f"with the same dot products q.k = 0, 2, 4, your weights divide them by {D_small:.3g} when d_k = {d_small} "
            f"and by {D_large:.3g} when d_k = {d_large}, where the chapter divides by sqrt(d_k) = {math.sqrt(d_small):g} "
            f"and {math.sqrt(d_large):g}: {named}"
        )

    return probe


def attention_properties(
    weights_of: Callable,
    sizes: Callable[[int], dict[str, float]] | None = None,
    axis_sizes: tuple[int, int] = (3, 5),
) -> list[Property]:
    """The softmax axis, the softmax and the scale."""
    return [
        Property(SOFTMAX_AXIS, softmax_axis_probe(weights_of, *axis_sizes)),
        Property(SOFTMAX, softmax_probe(weights_of)),
        Property(SCALE, scale_probe(weights_of, sizes)),
    ]


def values_probe(output_and_weights: Callable, keys_like_values: bool = True) -> Callable:
    """``output_and_weights(answer, Q, K, V) -> (H, A, V_used)``: H must be A times the values."""

    def probe(answer) -> str | None:
        Q, K, V = _randn(31, 3, 4), _randn(32, 5, 4), _randn(33, 5, 4)
        H, A, values = output_and_weights(answer, Q, K, V)
        expected = A @ values
        if torch.allclose(H, expected, atol=1e-4, rtol=1e-4):
            return None
        if keys_like_values and torch.allclose(H, A @ K.double(), atol=1e-4, rtol=1e-4):
            return "your H is your weights times the KEYS: the output averages the values, H = A V"
        difference = float((H - expected).abs().max())
        return (
            f"your H differs from your own weights times the values by up to {difference:.3g}: each output row is the "
            "average of the value rows weighted by that query's weights, H = A V (no other factor or product)"
        )

    return probe
