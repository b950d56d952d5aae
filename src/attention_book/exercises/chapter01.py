"""Exercises of chapter 1, "Attention as a weighted sum".

1.1 Scores and weights of one query (scaled dot products, then a softmax).
1.2 Attention in matrix form, with an optional boolean mask, for batches.
1.3 Design a query and two keys for which the sqrt(d_k) scale decides between a
    near-hard and a soft choice, or say that none exist for this d_k.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.attention_scores`, :func:`~attention_book.softmax`,
:func:`~attention_book.scaled_dot_product_attention`) and recognises typical wrong
answers by what they compute.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention_scores, causal_mask, scaled_dot_product_attention, softmax
from ._core import (
    SCALED_BY_D_K,
    SCALED_BY_SQRT_T,
    SCORES_AS_WEIGHTS,
    ExerciseFailure,
    Mistake,
    attention_variants,
    call,
    diagnose,
    diagnose_weights,
    random_generator,
    register,
    require_tensor_like,
)

# ---------------------------------------------------------------------------------
# 1.1 Scores and weights of one query


def _scores_and_weights_solution(query: torch.Tensor, keys: torch.Tensor):
    """Return (scores (T,), weights (T,)) for one query (d_k,) and keys (T, d_k)."""
    scores = keys @ query / math.sqrt(query.shape[-1])  # (T,)
    weights = torch.softmax(scores, dim=-1)  # (T,)
    return scores, weights


def _unscaled(query, keys):
    scores = keys @ query
    return scores, torch.softmax(scores, dim=-1)


def _divided_by_d_k(query, keys):
    scores = keys @ query / query.shape[-1]
    return scores, torch.softmax(scores, dim=-1)


def _normalised_by_sum(query, keys):
    scores = keys @ query / math.sqrt(query.shape[-1])
    return scores, scores / scores.sum()


def _one_hot(query, keys):
    scores = keys @ query / math.sqrt(query.shape[-1])
    return scores, torch.nn.functional.one_hot(scores.argmax(), len(scores)).to(scores.dtype)


def _naive_exp(query, keys):
    scores = keys @ query / math.sqrt(query.shape[-1])
    exponentials = torch.exp(scores)
    return scores, exponentials / exponentials.sum()


def _divided_by_sqrt_T(query, keys):
    scores = keys @ query / math.sqrt(keys.shape[0])
    return scores, torch.softmax(scores, dim=-1)


def _scores_as_weights(query, keys):
    scores = keys @ query / math.sqrt(query.shape[-1])
    return scores, scores


def _weights_of_unscaled_scores(query, keys):
    scores = keys @ query / math.sqrt(query.shape[-1])
    return scores, torch.softmax(keys @ query, dim=-1)


def _pair(result, what: str):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"{what} should return a pair (scores, weights), but returned {type(result).__name__}")
    return result


def _check_scores_and_weights(answer) -> None:
    generator = random_generator()
    # Case 1: a random query and keys of a random size.
    d_k = int(torch.randint(3, 17, (), generator=generator))
    T = int(torch.randint(4, 9, (), generator=generator))
    T += T == d_k  # T != d_k, so that dividing by sqrt(T) instead of sqrt(d_k) shows
    query = torch.randn(d_k, generator=generator)
    keys = torch.randn(T, d_k, generator=generator)
    scores, weights = _pair(call(answer, query.clone(), keys.clone()), "scores_and_weights")
    expected_scores = attention_scores(query[None, :], keys)[0]  # (T,)
    expected_weights = softmax(expected_scores)  # (T,)
    diagnose(
        scores,
        expected_scores,
        f"the scores (query of size d_k={d_k}, {T} keys)",
        known_mistakes={
            "you forgot to divide the scores by sqrt(d_k)": _unscaled(query, keys)[0],
            "divide the scores by sqrt(d_k), not by d_k": _divided_by_d_k(query, keys)[0],
            SCALED_BY_SQRT_T: _divided_by_sqrt_T(query, keys)[0],
        },
    )
    diagnose(
        weights,
        expected_weights,
        "the weight vector",
        known_mistakes={
            SCORES_AS_WEIGHTS: expected_scores,
            "you divided the scores by their sum; weights come from a softmax (exponentiate, then divide by the sum), "
            "which also keeps every weight positive": _normalised_by_sum(query, keys)[1],
            "these are one-hot weights (argmax): attention is soft, every key gets some weight": _one_hot(query, keys)[1],
            "your weights are the softmax of the UNSCALED scores: apply the softmax to the scaled scores": _weights_of_unscaled_scores(
                query, keys
            )[1],
        },
    )
    # Case 2: two identical keys tie and must get the same weight; then a single key gets weight 1.
    keys = torch.randn(5, d_k, generator=generator)
    keys[3] = keys[1]
    for case_keys, what in ((keys, "with two identical keys"), (keys[:1], "with a single key")):
        scores, weights = _pair(call(answer, query, case_keys), "scores_and_weights")
        expected_scores = attention_scores(query[None, :], case_keys)[0]
        diagnose(
            scores,
            expected_scores,
            f"the scores ({what})",
            known_mistakes={
                "you forgot to divide the scores by sqrt(d_k)": _unscaled(query, case_keys)[0],
                "divide the scores by sqrt(d_k), not by d_k": _divided_by_d_k(query, case_keys)[0],
                SCALED_BY_SQRT_T: _divided_by_sqrt_T(query, case_keys)[0],
            },
        )
        diagnose(weights, softmax(expected_scores), f"the weight vector ({what})")
    # Case 3: large scores, where exp() overflows unless the largest score is subtracted first. Key 2 is
    # built so that its scaled score is exactly 1,000 (exp overflows float32 from about 88); the others
    # are large too (about +-400), and keys 4 and 5 tie.
    query = 20.0 * torch.randn(d_k, generator=generator)
    keys = 20.0 * torch.randn(6, d_k, generator=generator)
    keys[2] = query * 1000.0 * math.sqrt(d_k) / (query @ query)
    keys[5] = keys[4]
    scores, weights = _pair(call(answer, query, keys), "scores_and_weights")
    weights = require_tensor_like(weights, torch.zeros(6), "the weight vector (with large scores)")
    if not torch.isfinite(weights).all():
        raise ExerciseFailure(
            "the weights contain nan or inf when the scores are large (around 1,000): exp() overflowed. "
            "Subtract the largest score before exp (the softmax does not change), or use torch.softmax"
        )
    expected_scores = attention_scores(query[None, :], keys)[0]
    diagnose(scores, expected_scores, "the scores (with large scores)", rtol=1e-4, atol=1e-3)
    diagnose(weights, softmax(expected_scores), "the weight vector (with large scores)")


register(
    "1.1",
    "Scores and weights of one query",
    _check_scores_and_weights,
    solution=_scores_and_weights_solution,
    mistakes=[
        Mistake("no sqrt(d_k) scale", _unscaled, "forgot to divide the scores by sqrt(d_k)"),
        Mistake("divided by d_k", _divided_by_d_k, "not by d_k"),
        Mistake("normalised by the sum", _normalised_by_sum, "divided the scores by their sum"),
        Mistake("argmax", _one_hot, "one-hot weights"),
        Mistake("softmax of unscaled scores", _weights_of_unscaled_scores, "softmax of the UNSCALED scores"),
        Mistake("exp without subtracting the maximum", _naive_exp, "exp() overflowed"),
        Mistake("divided by sqrt(T)", _divided_by_sqrt_T, SCALED_BY_SQRT_T),
        Mistake("returned the scores as weights", _scores_as_weights, SCORES_AS_WEIGHTS),
    ],
)

# ---------------------------------------------------------------------------------
# 1.2 Attention in matrix form, with a mask


def _attention_solution(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None):
    """Return (H (..., T_q, d_v), A (..., T_q, T_k)); mask is boolean, True = may attend."""
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., T_q, T_k)
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)  # (..., T_q, T_k)
    return A @ V, A  # (..., T_q, d_v), (..., T_q, T_k)


def _softmax_over_queries(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-2)
    return A @ V, A


def _matrix_unscaled(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1)
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A


def _mask_ignored(Q, K, V, mask=None):
    return _attention_solution(Q, K, V, None)


def _mask_after_softmax(Q, K, V, mask=None):
    A = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)
    if mask is not None:
        A = A.masked_fill(~mask, 0.0)
    return A @ V, A


def _mask_inverted(Q, K, V, mask=None):
    return _attention_solution(Q, K, V, None if mask is None else ~mask)


def _averaged_keys(Q, K, V, mask=None):
    _, A = _attention_solution(Q, K, V, mask)
    return A @ K, A


def _matrix_divided_by_d_k(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / Q.shape[-1]
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A


def _matrix_returns_scores(Q, K, V, mask=None):
    H, _ = _attention_solution(Q, K, V, mask)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return H, (S if mask is None else S.masked_fill(~mask, float("-inf")))


def _matrix_naive_exp(Q, K, V, mask=None):
    E = torch.exp(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]))
    if mask is not None:
        E = E.masked_fill(~mask, 0.0)
    A = E / E.sum(dim=-1, keepdim=True)
    return A @ V, A


def _matrix_swapped_outputs(Q, K, V, mask=None):
    H, A = _attention_solution(Q, K, V, mask)
    return A, H


def _random_mask(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """A boolean mask in which every row has at least one True and at least one False."""
    mask = torch.rand(shape, generator=generator) < 0.5
    columns = shape[-1]
    first = torch.randint(0, columns, shape[:-1], generator=generator)
    second = (first + 1 + torch.randint(0, columns - 1, shape[:-1], generator=generator)) % columns
    mask.scatter_(-1, first[..., None], True)
    mask.scatter_(-1, second[..., None], False)
    return mask


def _pair_of_outputs(result, H_shape: tuple[int, ...] | None = None, A_shape: tuple[int, ...] | None = None):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"attention should return a pair (H, A), but returned {type(result).__name__}")
    first, second = result
    if (
        H_shape != A_shape
        and all(isinstance(t, torch.Tensor) for t in result)
        and (tuple(first.shape), tuple(second.shape)) == (A_shape, H_shape)
    ):
        raise ExerciseFailure(
            f"you returned (A, H): the first tensor has the weights' shape {A_shape} and the second the output's "
            f"{H_shape}; return (H, A), the output first"
        )
    return result


def _check_weights(A, expected, what: str, known: dict) -> None:
    A = require_tensor_like(A, expected, what, known)
    if torch.allclose(A, expected, atol=1e-5, rtol=1e-4):
        return
    for hint, wrong in known.items():
        if wrong.shape == A.shape and torch.allclose(A, wrong.to(A.dtype), atol=1e-5, rtol=1e-4, equal_nan=True):
            raise ExerciseFailure(f"{what} is wrong: {hint}")
    if torch.isnan(A).any() and torch.isfinite(expected).all() and (expected.abs().amax(dim=-1) > 0).all():
        raise ExerciseFailure(
            f"{what} contains nan: a query whose every score is -inf gets 0/0 from the softmax. "
            "Is your mask inverted? True means 'may attend', so fill the scores where the mask is False"
        )
    diagnose_weights(A, expected, what, known)


def _check_attention(answer) -> None:
    generator = random_generator()
    # Case 1: a batch of 2 without a mask; values as wide as the keys (so that averaging the
    # keys instead of the values can be recognised), then values of another width.
    batch, T_q, T_k, d_k, d_v = 2, 4, 6, 5, 3
    Q = torch.randn(batch, T_q, d_k, generator=generator)
    K = torch.randn(batch, T_k, d_k, generator=generator)
    V_square = torch.randn(batch, T_k, d_k, generator=generator)
    H, A = _pair_of_outputs(call(answer, Q.clone(), K.clone(), V_square.clone()), (batch, T_q, d_k), (batch, T_q, T_k))
    expected_H, expected_A = scaled_dot_product_attention(Q, K, V_square)
    family = attention_variants(Q, K, V_square)
    _check_weights(
        A,
        expected_A,
        f"A (batch {batch}, {T_q} queries, {T_k} keys, d_k={d_k}, no mask)",
        {hint: wrong_A for hint, (_, wrong_A) in family.items()},
    )
    diagnose(
        H,
        expected_H,
        f"H (batch {batch}, {T_q} queries, d_v={d_k}, no mask)",
        known_mistakes={hint: wrong_H for hint, (wrong_H, _) in family.items()},
    )
    V = torch.randn(batch, T_k, d_v, generator=generator)
    H, A = _pair_of_outputs(call(answer, Q, K, V), (batch, T_q, d_v), (batch, T_q, T_k))
    expected_H, expected_A = scaled_dot_product_attention(Q, K, V)
    diagnose(H, expected_H, f"H (batch {batch}, {T_q} queries, values of size d_v={d_v} while d_k={d_k})")
    # Case 3: a mask with a True and a False in every row, broadcast over the batch.
    mask = _random_mask((T_q, T_k), generator)
    H, A = _pair_of_outputs(call(answer, Q, K, V, mask.clone()), (batch, T_q, d_v), (batch, T_q, T_k))
    expected_H, expected_A = scaled_dot_product_attention(Q, K, V, mask=mask)
    family = attention_variants(Q, K, V, mask)
    _check_weights(
        A,
        expected_A,
        f"A (with a ({T_q}, {T_k}) mask)",
        {
            **{hint: wrong_A for hint, (_, wrong_A) in family.items()},
            "the mask is ignored: set the scores where the mask is False to -inf BEFORE the softmax": _mask_ignored(Q, K, V, mask)[1],
            "the mask was applied after the softmax: the remaining weights no longer sum to 1. "
            "Fill the scores with -inf before the softmax instead": _mask_after_softmax(Q, K, V, mask)[1],
            "the mask is inverted: True means 'may attend', so fill the scores where the mask is False": _mask_inverted(Q, K, V, mask)[1],
            "softmax over the wrong axis: each row (one query) must sum to 1 over the keys, so use dim=-1": _softmax_over_queries(Q, K, V, mask)[1],
        },
    )
    diagnose(H, expected_H, f"H (with a ({T_q}, {T_k}) mask)", known_mistakes={hint: wrong_H for hint, (wrong_H, _) in family.items()})
    # Case 4: causal self-attention, and a sequence of one token.
    for T in (5, 1):
        X = torch.randn(3, T, d_k, generator=generator)
        mask = causal_mask(T)
        H, A = _pair_of_outputs(call(answer, X, X, X, mask), (3, T, d_k), (3, T, T))
        expected_H, expected_A = scaled_dot_product_attention(X, X, X, mask=mask)
        family = attention_variants(X, X, X, mask)
        where = f"causal self-attention over {T} token{'s' if T > 1 else ''}"
        _check_weights(A, expected_A, f"A ({where})", {hint: wrong_A for hint, (_, wrong_A) in family.items()})
        diagnose(H, expected_H, f"H ({where})", known_mistakes={hint: wrong_H for hint, (wrong_H, _) in family.items()})
    # Case 5: large and tied scores. Key 0 of every batch is its first query times 1000 sqrt(d_k) / |q|^2
    # (a scaled score of exactly 1,000: exp() overflows unless each row's maximum is subtracted first),
    # and keys 3 and 4 are equal (a tie).
    Q = torch.randn(batch, T_q, d_k, generator=generator)
    K = 10.0 * torch.randn(batch, T_k, d_k, generator=generator)
    K[:, 0] = Q[:, 0] * 1000.0 * math.sqrt(d_k) / (Q[:, 0] * Q[:, 0]).sum(dim=-1, keepdim=True)
    K[:, 4] = K[:, 3]
    H, A = _pair_of_outputs(call(answer, Q, K, V), (batch, T_q, d_v), (batch, T_q, T_k))
    expected_H, expected_A = scaled_dot_product_attention(Q, K, V)
    family = attention_variants(Q, K, V)
    A = require_tensor_like(A, expected_A, "A (with a score of 1,000)")
    if not torch.isfinite(A).all():
        raise ExerciseFailure(
            "A contains nan or inf when a score is large (1,000): exp() overflowed. Subtract each row's largest "
            "score before exp (the softmax does not change), or use torch.softmax"
        )
    diagnose(A, expected_A, "A (with a score of 1,000 and two tied keys)", known_mistakes={h: a for h, (_, a) in family.items()}, atol=1e-4)
    diagnose(H, expected_H, "H (with a score of 1,000 and two tied keys)", known_mistakes={h: o for h, (o, _) in family.items()}, atol=1e-4)


register(
    "1.2",
    "Attention in matrix form, with a mask",
    _check_attention,
    solution=_attention_solution,
    mistakes=[
        Mistake("softmax over the queries", _softmax_over_queries, "softmax over the wrong axis"),
        Mistake("no sqrt(d_k) scale", _matrix_unscaled, "forgot to divide the scores by sqrt(d_k)"),
        Mistake("mask ignored", _mask_ignored, "the mask is ignored"),
        Mistake("mask after the softmax", _mask_after_softmax, "applied after the softmax"),
        Mistake("mask inverted", _mask_inverted, "the mask is inverted"),
        Mistake("averaged the keys", _averaged_keys, "you averaged the keys"),
        Mistake("divided by d_k", _matrix_divided_by_d_k, SCALED_BY_D_K),
        Mistake("returned the scores as A", _matrix_returns_scores, SCORES_AS_WEIGHTS),
        Mistake("exp without subtracting the maximum", _matrix_naive_exp, "exp() overflowed"),
        Mistake("returned (A, H)", _matrix_swapped_outputs, "you returned (A, H)"),
    ],
)

# ---------------------------------------------------------------------------------
# 1.3 When does the scale decide?

UNSCALED_TOP = 0.99  # without the scale, the top weight must exceed this
SCALED_TOP = 0.6  # with the scale, the top weight must stay below this


def _feasible(d_k: int) -> bool:
    """Two keys, score gap g: sigmoid(g) > 0.99 needs g > ln 99; sigmoid(g / sqrt(d_k)) < 0.6 needs g < sqrt(d_k) ln 1.5."""
    return math.sqrt(d_k) * math.log(SCALED_TOP / (1 - SCALED_TOP)) > math.log(UNSCALED_TOP / (1 - UNSCALED_TOP))


def _scaling_matters_solution(d_k: int):
    """A query (d_k,) and two keys (2, d_k) for which the sqrt(d_k) scale matters, or None."""
    low = math.log(0.99 / 0.01)  # the unscaled gap must exceed this
    high = math.sqrt(d_k) * math.log(0.6 / 0.4)  # the unscaled gap must stay below this
    if high <= low:
        return None
    gap = math.sqrt(low * high)  # strictly between the two bounds
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[0, 0] = gap  # scores: gap and 0
    return query, keys


def _always_none(d_k):
    return None


def _threshold_with_d_k(d_k):
    """Believes the scores are divided by d_k: thinks d_k >= 12 suffices."""
    low, high = math.log(99), d_k * math.log(1.5)
    if high <= low:
        return None
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[0, 0] = math.sqrt(low * high)
    return query, keys


def _never_none(d_k):
    """The right construction, but never admits that small d_k make it impossible."""
    low, high = math.log(99), math.sqrt(d_k) * math.log(1.5)
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[0, 0] = math.sqrt(low * high)
    return query, keys


def _gap_too_small(d_k):
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[0, 0] = 1.0
    return None if not _feasible(d_k) else (query, keys)


def _gap_too_large(d_k):
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[0, 0] = 3.0 * math.sqrt(d_k)
    return None if not _feasible(d_k) else (query, keys)


def _top_weights(query: torch.Tensor, keys: torch.Tensor) -> tuple[float, float]:
    """(top weight without the scale, top weight with the scale), computed in float64."""
    query, keys = query.double(), keys.double()
    unscaled = softmax(keys @ query)
    scaled = softmax(attention_scores(query[None, :], keys)[0])
    return float(unscaled.max()), float(scaled.max())


def _check_scaling_matters(answer) -> None:
    generator = random_generator()
    feasible = [512, 256, int(torch.randint(140, 2049, (), generator=generator)), 130]
    infeasible = [1, 16, 64, int(torch.randint(2, 128, (), generator=generator)), 128]
    for d_k in feasible:
        result = call(answer, d_k)
        if result is None:
            raise ExerciseFailure(
                f"you returned None for d_k={d_k}, but for this d_k a query and two keys with this behaviour exist. "
                "Write both conditions as bounds on the score gap g = q.k1 - q.k2 and see when they can hold together"
            )
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ExerciseFailure(f"return a pair (query, keys) or None, but for d_k={d_k} a {type(result).__name__} came back")
        query, keys = result
        query = require_tensor_like(query, torch.zeros(d_k), f"the query (for d_k={d_k})")
        keys = require_tensor_like(keys, torch.zeros(2, d_k), f"the keys (for d_k={d_k}; exactly two keys, one per row)")
        if not (torch.isfinite(query).all() and torch.isfinite(keys).all()):
            raise ExerciseFailure(f"the query or keys for d_k={d_k} contain nan or inf: keep every number finite")
        unscaled, scaled = _top_weights(query, keys)
        if unscaled <= UNSCALED_TOP:
            raise ExerciseFailure(
                f"for d_k={d_k}, without the scale the top weight is only {unscaled:.3f}; it must exceed {UNSCALED_TOP}. "
                "Widen the gap between the two scores"
            )
        if scaled >= SCALED_TOP:
            raise ExerciseFailure(
                f"for d_k={d_k}, with the scale the top weight is still {scaled:.3f}; it must stay below {SCALED_TOP}. "
                "The scaled scores are the unscaled ones divided by sqrt(d_k): narrow the gap"
            )
    for d_k in infeasible:
        result = call(answer, d_k)
        if result is not None:
            raise ExerciseFailure(
                f"for d_k={d_k} no query and two keys can do this (the scale sqrt(d_k)={math.sqrt(d_k):.2f} is too small "
                "to turn a gap that the plain softmax finds decisive into one it finds close), so return None. "
                "Write both conditions as bounds on the score gap g = q.k1 - q.k2"
            )


register(
    "1.3",
    "When does the scale decide?",
    _check_scaling_matters,
    solution=_scaling_matters_solution,
    mistakes=[
        Mistake("always None", _always_none, "you returned None for d_k=512"),
        Mistake("scale taken as d_k", _threshold_with_d_k, "divided by sqrt(d_k): narrow the gap"),
        Mistake("never None", _never_none, "no query and two keys can do this"),
        Mistake("gap too small", _gap_too_small, "without the scale the top weight is only"),
        Mistake("gap too large", _gap_too_large, "with the scale the top weight is still"),
    ],
)
