"""Exercises of chapter 1, "Attention as a weighted sum".

1.1 Scores and weights of one query (scaled dot products, then a softmax).
1.2 Attention in matrix form, with an optional boolean mask, for batches.
1.3 Design a query and two keys for which the sqrt(d_k) scale decides between a
    near-hard and a soft choice, or say that none exist for this d_k.
1.4 Bahdanau's additive attention: scores tanh(q_i W_1 + k_j W_2) w, then weights and outputs.
1.5 The influence of every token on a recurrent layer's last state, relative to the last token's.
1.6 The longest sequence for which self-attention (with W_O) does less work than a recurrent layer with g gates.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.attention_scores`, :func:`~attention_book.softmax`,
:func:`~attention_book.scaled_dot_product_attention`) and recognises typical wrong
answers by what they compute.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from ..attention import attention_scores, causal_mask, scaled_dot_product_attention, softmax
from ._core import (
    SCALED_BY_D_K,
    SCALED_BY_SQRT_T,
    SCORES_AS_WEIGHTS,
    ExerciseFailure,
    Inconclusive,
    Mistake,
    Property,
    add_properties,
    attention_variants,
    call,
    diagnose,
    diagnose_weights,
    name_sizes,
    probe_pair,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)
from ._probes import (
    SCALE,
    _describe_divisors,
    _randn,
    attention_properties,
    determinism_probe,
    output_pair_probe,
    values_probe,
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


def _check_scores_and_weights_when_large(answer, generator: torch.Generator, d_k: int) -> None:
    """Case 3 of 1.1: scores large enough to overflow exp() unless the largest is subtracted first."""
    # Large scores, where exp() overflows unless the largest score is subtracted first. Key 2 is
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


def _check_scores_and_weights(answer) -> None:
    generator = random_generator()
    # Case 1: a random query and keys of a random size.
    d_k = int(torch.randint(3, 17, (), generator=generator))
    T = int(torch.randint(4, 9, (), generator=generator))
    T += T == d_k  # T != d_k, so that dividing by sqrt(T) instead of sqrt(d_k) shows
    name_sizes(d_k=d_k, T=T)
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
            "these are one-hot weights (argmax): attention is soft, every key gets some weight": _one_hot(query, keys)[
                1
            ],
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
    _check_scores_and_weights_when_large(answer, generator, d_k)


register(
    "1.1",
    "Scores and weights of one query",
    _check_scores_and_weights,
    answer="scores_and_weights",
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
    return _attention_solution(Q, K, V, mask=None)


def _mask_after_softmax(Q, K, V, mask=None):
    A = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)
    if mask is not None:
        A = A.masked_fill(~mask, 0.0)
    return A @ V, A


def _mask_inverted(Q, K, V, mask=None):
    return _attention_solution(Q, K, V, mask=None if mask is None else ~mask)


def _averaged_keys(Q, K, V, mask=None):
    _, A = _attention_solution(Q, K, V, mask=mask)
    return A @ K, A


def _matrix_divided_by_d_k(Q, K, V, mask=None):
    S = Q @ K.transpose(-2, -1) / Q.shape[-1]
    if mask is not None:
        S = S.masked_fill(~mask, float("-inf"))
    A = torch.softmax(S, dim=-1)
    return A @ V, A


def _matrix_returns_scores(Q, K, V, mask=None):
    H, _ = _attention_solution(Q, K, V, mask=mask)
    S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    return H, (S if mask is None else S.masked_fill(~mask, float("-inf")))


def _matrix_naive_exp(Q, K, V, mask=None):
    E = torch.exp(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]))
    if mask is not None:
        E = E.masked_fill(~mask, 0.0)
    A = E / E.sum(dim=-1, keepdim=True)
    return A @ V, A


def _matrix_swapped_outputs(Q, K, V, mask=None):
    H, A = _attention_solution(Q, K, V, mask=mask)
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


def _check_weights(A, expected, what: str, *, known: dict) -> None:
    A = require_tensor_like(A, expected, what, known_mistakes=known)
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
    diagnose_weights(A, expected, what, known_mistakes=known)


def _check_attention_with_a_mask(answer, generator: torch.Generator, *, Q, K, V) -> None:
    """Case 3 of 1.2: a mask with a True and a False in every row, broadcast over the batch."""
    batch, T_q, T_k, d_v = Q.shape[0], Q.shape[1], K.shape[1], V.shape[-1]
    mask = _random_mask((T_q, T_k), generator)
    H, A = _pair_of_outputs(call(answer, Q, K, V, mask.clone()), (batch, T_q, d_v), (batch, T_q, T_k))
    expected_H, expected_A = scaled_dot_product_attention(Q, K, V, mask=mask)
    family = attention_variants(Q, K, V, mask=mask)
    _check_weights(
        A,
        expected_A,
        f"A (with a ({T_q}, {T_k}) mask)",
        known={
            **{hint: wrong_A for hint, (_, wrong_A) in family.items()},
            "the mask is ignored: set the scores where the mask is False to -inf BEFORE the softmax": _mask_ignored(
                Q, K, V, mask=mask
            )[1],
            "the mask was applied after the softmax: the remaining weights no longer sum to 1. "
            "Fill the scores with -inf before the softmax instead": _mask_after_softmax(Q, K, V, mask=mask)[1],
            "the mask is inverted: True means 'may attend', so fill the scores where the mask is False": _mask_inverted(
                Q, K, V, mask=mask
            )[1],
            "softmax over the wrong axis: each row (one query) must sum to 1 over the keys, so use dim=-1": _softmax_over_queries(
                Q, K, V, mask=mask
            )[1],
        },
    )
    diagnose(
        H,
        expected_H,
        f"H (with a ({T_q}, {T_k}) mask)",
        known_mistakes={hint: wrong_H for hint, (wrong_H, _) in family.items()},
    )


def _check_attention_when_large(answer, generator: torch.Generator, V, *, T_q: int, d_k: int) -> None:
    """Case 5 of 1.2: large and tied scores."""
    batch, T_k, d_v = V.shape
    # Key 0 of every batch is its first query times 1000 sqrt(d_k) / |q|^2
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
    diagnose(
        A,
        expected_A,
        "A (with a score of 1,000 and two tied keys)",
        known_mistakes={h: a for h, (_, a) in family.items()},
        atol=1e-4,
    )
    diagnose(
        H,
        expected_H,
        "H (with a score of 1,000 and two tied keys)",
        known_mistakes={h: o for h, (o, _) in family.items()},
        atol=1e-4,
    )


def _check_attention(answer) -> None:
    generator = random_generator()
    # Case 1: a batch of 2 without a mask; values as wide as the keys (so that averaging the
    # keys instead of the values can be recognised), then values of another width.
    batch, T_q, T_k, d_k, d_v = 2, 4, 6, 5, 3
    name_sizes(batch=batch, T_q=T_q, T_k=T_k, d_k=d_k, d_v=d_v)
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
        known={hint: wrong_A for hint, (_, wrong_A) in family.items()},
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
    _check_attention_with_a_mask(answer, generator, Q=Q, K=K, V=V)
    # Case 4: causal self-attention, and a sequence of one token.
    for T in (5, 1):
        X = torch.randn(3, T, d_k, generator=generator)
        mask = causal_mask(T)
        H, A = _pair_of_outputs(call(answer, X, X, X, mask), (3, T, d_k), (3, T, T))
        expected_H, expected_A = scaled_dot_product_attention(X, X, X, mask=mask)
        family = attention_variants(X, X, X, mask=mask)
        where = f"causal self-attention over {T} token{'s' if T > 1 else ''}"
        _check_weights(A, expected_A, f"A ({where})", known={hint: wrong_A for hint, (_, wrong_A) in family.items()})
        diagnose(H, expected_H, f"H ({where})", known_mistakes={hint: wrong_H for hint, (wrong_H, _) in family.items()})
    _check_attention_when_large(answer, generator, V, T_q=T_q, d_k=d_k)


register(
    "1.2",
    "Attention in matrix form, with a mask",
    _check_attention,
    answer="attention",
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

# Properties of 1.1 and 1.2 (see _core's docstring): what an answer breaks, probed one idea at a time.


def _scores_weights_of(answer, query, keys):
    scores, weights = probe_pair(answer(query, keys))
    return probe_tensor(scores, (keys.shape[0],)), probe_tensor(weights, (keys.shape[0],))


def _pair_order_probe(answer):
    query, keys = _randn(41, 4), _randn(42, 5, 4)
    first, second = (probe_tensor(t, (5,)) for t in probe_pair(answer(query, keys)))
    sums_to_one = lambda t: bool((t >= 0).all() and abs(float(t.sum()) - 1) < 1e-4)
    if sums_to_one(first) and not sums_to_one(second):
        return (
            f"the first tensor you return is positive and sums to 1 ({float(first.sum()):.3f}) and the second does not: "
            "return (scores, weights), the scores first"
        )
    return None


def _scores_scale_probe(answer):
    """Keys e_1, -e_0 and e_0 + e_1 against the query 2 e_0: dot products 0, -2 and 2 (the first key is at right
    angles to the query), at d_k = 4 and 16; the scores must be these divided by sqrt(d_k)."""
    implied = []
    for d in (4, 16):
        query = torch.zeros(d)
        query[0] = 2.0
        keys = torch.zeros(3, d)
        keys[0, 1], keys[1, 0], keys[2, 0], keys[2, 1] = 1.0, -1.0, 1.0, 1.0
        scores = _scores_weights_of(answer, query, keys)[0]
        shown = [round(float(v), 3) for v in scores]
        dots = torch.tensor([0.0, -2.0, 2.0], dtype=torch.float64)
        floored = torch.floor(dots / math.sqrt(d))
        if torch.allclose(scores, floored) and not torch.allclose(floored, dots / math.sqrt(d)):
            return (
                f"keys whose dot products with the query are 0, -2 and 2 got the whole-number scores {shown} at d_k = {d}: "
                "`//` is floor division and rounds down; divide with `/`"
            )
        if (
            abs(float(scores[0])) > 1e-6
            or float(scores[2]) <= 0
            or not torch.allclose(scores[1], -scores[2], atol=1e-5)
        ):
            return (
                f"keys whose dot products with the query are 0 (a key at right angles to it), -2 and 2 got the scores {shown}: "
                "a score is the dot product q.k (keys @ query) divided by sqrt(d_k), so the first must be 0 and the other two opposite"
            )
        implied.append(2.0 / float(scores[2]))
    if all(abs(D - math.sqrt(d)) < 2e-3 * math.sqrt(d) for D, d in zip(implied, (4, 16))):
        return None
    return (
        f"with the dot products q.k = 0, -2, 2, your scores divide them by {implied[0]:.3g} when d_k = 4 and by {implied[1]:.3g} "
        f"when d_k = 16, where the chapter divides by sqrt(d_k) = 2 and 4: "
        + _describe_divisors(4, implied[0], d_large=16, D_large=implied[1], sizes={"T, the number of keys": 3})
    )


def _weights_variant(scores: torch.Tensor, weights: torch.Tensor, d_k: int | None = None) -> str | None:
    """What the weights are, computed from the answer's own scores, when they are a familiar slip."""
    close = lambda other: other.shape == weights.shape and torch.allclose(weights, other, atol=1e-5, rtol=1e-4)
    if close(scores):
        return "your weights are your scores: these are the scores, not the weights; return softmax(scores)"
    if close(torch.log_softmax(scores, dim=-1)):
        return "your weights are log_softmax of the scores (log-probabilities, all negative): use torch.softmax"
    if close(scores / scores.sum()):
        return "you divided the scores by their sum; weights come from a softmax (exponentiate, then divide by the sum)"
    if close(torch.sigmoid(scores)):
        return "your weights are sigmoid(scores), which do not sum to 1: use the softmax over the keys"
    if close(scores.exp()):
        return (
            "your weights are exp(scores) without dividing by their sum: the softmax divides by the sum over the keys"
        )
    if close(torch.softmax(-scores, dim=-1)):
        return "your weights are the softmax of MINUS the scores: the key with the larger score gets the larger weight"
    one_hot = torch.zeros_like(scores)
    one_hot[scores.argmax()] = 1.0
    if close(one_hot):
        return "these are one-hot weights (argmax): attention is soft, every key gets some weight, softmax(scores)"
    if (weights > 0).all():
        logits = torch.log(weights)
        centred_logits, centred_scores = logits - logits.mean(), scores - scores.mean()
        factor = float((centred_logits * centred_scores).sum() / (centred_scores**2).sum())
        if abs(factor - 1) > 1e-3 and torch.allclose(centred_logits, factor * centred_scores, atol=1e-4):
            d = d_k or 0
            if d and abs(factor - math.sqrt(d)) < 1e-3 * math.sqrt(d):
                return (
                    f"your weights are the softmax of the UNSCALED scores (your scores times sqrt(d_k) = {factor:.4g}): "
                    "apply the softmax to the scaled scores you return"
                )
            if d and abs(factor - 1 / math.sqrt(d)) < 1e-3:
                return (
                    f"your weights are the softmax of your scores divided by sqrt(d_k) again (times {factor:.4g}): the "
                    "scores are scaled once; apply the softmax to the scores you return"
                )
            return (
                f"your weights are the softmax of your scores times {factor:.4g}: a scale applied again (or undone) "
                "between the scores and the weights. Apply the softmax to the scaled scores you return, once"
            )
    return None


def _weights_follow_scores_probe(answer):
    query, keys = _randn(43, 6), _randn(44, 5, 6)
    scores, weights = _scores_weights_of(answer, query, keys)
    expected = torch.softmax(scores, dim=-1)
    if torch.allclose(weights, expected, atol=1e-5):
        return None
    variant = _weights_variant(scores, weights, d_k=query.shape[0])
    if variant:
        return variant
    total = float(weights.sum())
    if abs(total - 1) > 1e-4:
        negative = f" and some are negative (as low as {float(weights.min()):.3f})" if (weights < -1e-9).any() else ""
        return (
            f"your weights sum to {total:.3f}, not 1{negative}: a softmax exponentiates the scores and divides by the sum of "
            "the exponentials over the keys, so the weights are positive and sum to 1"
        )
    return (
        f"your weights {[round(float(v), 3) for v in weights]} are not the softmax of your scores "
        f"{[round(float(v), 3) for v in scores]} (that is {[round(float(v), 3) for v in expected]}): apply the softmax "
        "to the scaled scores you return, once"
    )


add_properties(
    "1.1",
    [
        Property("the pair (scores, weights)", _pair_order_probe),
        Property("the scores " + SCALE[len("the scale ") :], _scores_scale_probe),
        # With the scores right and the weights the softmax of the scores, the weights are right: the softmax axis,
        # the softmax and the scale of the weights need no probes of their own here.
        Property("the weights are the softmax of the scores", _weights_follow_scores_probe),
    ],
)


def _batched(answer, *, Q, K, V, mask=None):
    args = (Q[None], K[None], V[None]) + (() if mask is None else (mask,))
    H, A = probe_pair(answer(*args))
    return probe_tensor(H, (1, Q.shape[0], V.shape[-1]))[0], probe_tensor(A, (1, Q.shape[0], K.shape[0]))[0]


def _matrix_weights_of(answer, Q, K):
    return _batched(answer, Q=Q, K=K, V=_randn(45, K.shape[0], 7))[1]  # d_v = 7: no other size of the probes


def _matrix_masked_weights_of(answer, Q, K, mask):
    return _batched(answer, Q=Q, K=K, V=_randn(45, K.shape[0], 7), mask=mask)[1]


def _matrix_pair(answer):
    """A batch of 1 with 3 queries, 5 keys and values of width 2, and the values."""
    V = _randn(53, 1, 5, 2)
    return answer(_randn(51, 1, 3, 4), _randn(52, 1, 5, 4), V), V


def _matrix_output(answer, Q, K, V):
    H, A = _batched(answer, Q=Q, K=K, V=V)
    return H, A, V.double()


def _batch_probe(answer):
    """Each sequence of a batch is attended on its own: the batch gives what each element gives alone."""
    Q, K, V = _randn(46, 2, 3, 4), _randn(47, 2, 5, 4), _randn(48, 2, 5, 2)
    H, A = probe_pair(answer(Q, K, V))
    H, A = probe_tensor(H, (2, 3, 2)), probe_tensor(A, (2, 3, 5))
    for b in range(2):
        H_b, A_b = _batched(answer, Q=Q[b], K=K[b], V=V[b])
        if not (torch.allclose(H[b], H_b, atol=1e-5) and torch.allclose(A[b], A_b, atol=1e-5)):
            return (
                f"sequence {b} of a batch of 2 gets other weights (by up to {float((A[b] - A_b).abs().max()):.3g}) than the "
                "same sequence alone: every sequence attends only within itself, so work on the last two axes "
                "(K.transpose(-2, -1), softmax over dim=-1) and leave the batch axes alone"
            )
    return None


add_properties(
    "1.2",
    [
        Property("the pair (H, A): the output first, then the weights", output_pair_probe(_matrix_pair)),
        Property(
            "no randomness (the same inputs give the same H and A)", determinism_probe(lambda a: _matrix_pair(a)[0])
        ),
        *attention_properties(_matrix_weights_of, _matrix_masked_weights_of, sizes=lambda d: {"d_v": 7}),
        Property(
            "the output H = A V (each output row averages the VALUE rows with that query's weights)",
            values_probe(_matrix_output),
        ),
        Property("batches (every sequence of a batch attends only within itself)", _batch_probe),
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
    feasible = [512, 256, int(torch.randint(140, 2049, (), generator=generator)), 130, 129]
    infeasible = [1, 16, 64, int(torch.randint(2, 128, (), generator=generator)), 128]
    for d_k in feasible:
        result = call(answer, d_k)
        if result is None:
            raise ExerciseFailure(
                f"you returned None for d_k={d_k}, but for this d_k a query and two keys with this behaviour exist. "
                "Write both conditions as bounds on the score gap g = q.k1 - q.k2 and see when they can hold together"
            )
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ExerciseFailure(
                f"return a pair (query, keys) or None, but for d_k={d_k} a {type(result).__name__} came back"
            )
        query, keys = result
        if (
            isinstance(query, torch.Tensor)
            and isinstance(keys, torch.Tensor)
            and tuple(query.shape) == (2, d_k)
            and tuple(keys.shape) == (d_k,)
        ):
            raise ExerciseFailure(
                f"for d_k={d_k} the first tensor you return has the keys' shape (2, {d_k}) and the second the query's "
                f"({d_k},): you returned (keys, query); return (query, keys)"
            )
        query = require_tensor_like(query, torch.zeros(d_k), f"the query (for d_k={d_k})")
        keys = require_tensor_like(
            keys, torch.zeros(2, d_k), f"the keys (for d_k={d_k}; exactly two keys, one per row)"
        )
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
    answer="scaling_matters",
    solution=_scaling_matters_solution,
    mistakes=[
        Mistake("always None", _always_none, "you returned None for d_k=512"),
        Mistake("scale taken as d_k", _threshold_with_d_k, "divided by sqrt(d_k): narrow the gap"),
        Mistake("never None", _never_none, "no query and two keys can do this"),
        Mistake("gap too small", _gap_too_small, "without the scale the top weight is only"),
        Mistake("gap too large", _gap_too_large, "with the scale the top weight is still"),
    ],
)


# Properties of 1.3: None exactly when no pair exists; decisive without the scale; close with it.


def _pair_for(answer, d_k):
    result = answer(d_k)
    if result is None:
        return None
    query, keys = probe_pair(result)
    return probe_tensor(query, (d_k,)), probe_tensor(keys, (2, d_k))


def _smallest_d_k_with_a_pair(answer) -> int | None:
    """The smallest d_k from 1 to 140 for which the answer returns something other than None."""
    return next((d_k for d_k in range(1, 141) if answer(d_k) is not None), None)


def _none_exactly_when_impossible(answer):
    for d_k in (512, 140, 16, 128, 129):
        result = answer(d_k)
        if (result is None) == _feasible(d_k) and not (result is None and d_k >= 129):
            smallest = _smallest_d_k_with_a_pair(answer)
            if smallest == 12:
                return (
                    "you return a pair from d_k = 12 on, where d_k ln 1.5 first exceeds ln 99: the scores are divided "
                    "by sqrt(d_k), not d_k, so a pair exists exactly when sqrt(d_k) ln 1.5 > ln 99, from d_k = 129"
                )
            if smallest == 1:
                return (
                    "you return a pair for every d_k, even d_k = 1: when sqrt(d_k) ln 1.5 <= ln 99 (d_k up to 128) the gap "
                    "cannot be decisive without the scale and close with it, so return None"
                )
        if (result is None) == _feasible(d_k):
            bound = math.sqrt(d_k) * math.log(SCALED_TOP / (1 - SCALED_TOP))
            return (
                f"for d_k = {d_k} you returned {'None' if result is None else 'a query and keys'}, but the score gap g must "
                f"exceed ln 99 = {math.log(99):.2f} (decisive without the scale) and stay below sqrt(d_k) ln 1.5 = {bound:.2f} "
                f"(close with it), so {'such a pair exists' if _feasible(d_k) else 'no pair exists: return None'}"
            )
    return None


def _decisive_without_scale(answer):
    pair = _pair_for(answer, 512)
    if pair is None:
        raise Inconclusive("None")
    unscaled, _ = _top_weights(*pair)
    if unscaled > UNSCALED_TOP:
        return None
    return f"for d_k = 512, without the scale the top weight is only {unscaled:.3f}; it must exceed {UNSCALED_TOP}: widen the score gap"


def _close_with_scale(answer):
    pair = _pair_for(answer, 512)
    if pair is None:
        raise Inconclusive("None")
    _, scaled = _top_weights(*pair)
    if scaled < SCALED_TOP:
        return None
    return (
        f"for d_k = 512, with the scale the top weight is still {scaled:.3f}; it must stay below {SCALED_TOP}: the scaled "
        "scores are the dot products divided by sqrt(d_k), so narrow the gap"
    )


add_properties(
    "1.3",
    [
        Property("when a pair exists (None exactly when sqrt(d_k) ln 1.5 <= ln 99)", _none_exactly_when_impossible),
        Property("the unscaled softmax decides (top weight above 0.99 without the scale)", _decisive_without_scale),
        Property("the scale keeps it close (top weight below 0.6 with the scale)", _close_with_scale),
    ],
)

# ---------------------------------------------------------------------------------
# 1.4 Bahdanau's additive attention


def _additive_attention_solution(queries, keys, values, W_1, W_2, w):
    """Return (H (T_q, d_v), A (T_q, T_k)) with the additive score tanh(q_i W_1 + k_j W_2) w."""
    # (T_q, 1, d_a) + (1, T_k, d_a) -> (T_q, T_k, d_a), then @ (d_a,) -> (T_q, T_k)
    scores = torch.tanh((queries @ W_1)[:, None, :] + (keys @ W_2)[None, :, :]) @ w
    weights = torch.softmax(scores, dim=-1)  # over the keys
    return weights @ values, weights


def _additive_without_tanh(queries, keys, values, W_1, W_2, w):
    scores = ((queries @ W_1)[:, None, :] + (keys @ W_2)[None, :, :]) @ w
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _additive_product(queries, keys, values, W_1, W_2, w):
    scores = torch.tanh((queries @ W_1)[:, None, :] * (keys @ W_2)[None, :, :]) @ w
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _additive_swapped(queries, keys, values, W_1, W_2, w):
    scores = torch.tanh((queries @ W_2)[:, None, :] + (keys @ W_1)[None, :, :]) @ w
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _additive_softmax_over_queries(queries, keys, values, W_1, W_2, w):
    scores = torch.tanh((queries @ W_1)[:, None, :] + (keys @ W_2)[None, :, :]) @ w
    weights = torch.softmax(scores, dim=0)
    return weights @ values, weights


def _additive_scaled(queries, keys, values, W_1, W_2, w):
    scores = torch.tanh((queries @ W_1)[:, None, :] + (keys @ W_2)[None, :, :]) @ w / math.sqrt(w.shape[0])
    weights = torch.softmax(scores, dim=-1)
    return weights @ values, weights


def _additive_scores_as_weights(queries, keys, values, W_1, W_2, w):
    scores = torch.tanh((queries @ W_1)[:, None, :] + (keys @ W_2)[None, :, :]) @ w
    return scores @ values, scores


def _check_additive_attention(answer) -> None:
    generator = random_generator()
    # Case 1: queries and keys of the same size (so that swapping W_1 and W_2 runs); case 2: of
    # different sizes, which the additive score allows and the dot product does not.
    for d_q, d_k in ((5, 5), (3, 6)):
        T_q, T_k, d_v, d_a = 4, 7, 2, 8
        name_sizes(T_q=T_q, T_k=T_k, d_v=d_v, d_a=d_a, d_q=d_q, d_k=d_k)
        queries = torch.randn(T_q, d_q, generator=generator)
        keys = torch.randn(T_k, d_k, generator=generator)
        values = torch.randn(T_k, d_v, generator=generator)
        W_1 = torch.randn(d_q, d_a, generator=generator)
        W_2 = torch.randn(d_k, d_a, generator=generator)
        w = torch.randn(d_a, generator=generator)
        inputs = (queries, keys, values, W_1, W_2, w)
        result = call(answer, *(tensor.clone() for tensor in inputs))
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise ExerciseFailure(
                f"additive_attention should return a pair (H, A), but returned {type(result).__name__}"
            )
        H, A = result
        expected_H, expected_A = _additive_attention_solution(*inputs)
        where = f"(queries of size {d_q}, keys of size {d_k}, d_a={d_a})"
        mistakes = {
            "without the tanh the score splits into a query part and a key part, and the query part cancels in "
            "the softmax, so every query gets the same weights: put tanh around q_i W_1 + k_j W_2": _additive_without_tanh,
            "the additive score ADDS the two projections, q_i W_1 + k_j W_2, before the tanh; you multiplied them": _additive_product,
            "W_1 belongs to the queries and W_2 to the keys: you swapped them": _additive_swapped
            if d_q == d_k
            else None,
            "each query's weights must sum to 1 over the keys: take the softmax over the last axis (dim=-1)": _additive_softmax_over_queries,
            "the additive score has no sqrt scale: its size is set by the learned w, not by a width": _additive_scaled,
            "your A holds the scores: turn them into weights with a softmax over the keys": _additive_scores_as_weights,
        }
        known = {hint: variant(*inputs)[1] for hint, variant in mistakes.items() if variant is not None}
        diagnose(A, expected_A, f"the weight matrix A {where}", known_mistakes=known)
        diagnose(H, expected_H, f"the output matrix H {where}")


register(
    "1.4",
    "Bahdanau's additive attention",
    _check_additive_attention,
    answer="additive_attention",
    solution=_additive_attention_solution,
    mistakes=[
        Mistake("no tanh", _additive_without_tanh, "put tanh around"),
        Mistake("product instead of sum", _additive_product, "you multiplied them"),
        Mistake("W_1 and W_2 swapped", _additive_swapped, "you swapped them"),
        Mistake("softmax over the queries", _additive_softmax_over_queries, "over the last axis"),
        Mistake("scaled by sqrt(d_a)", _additive_scaled, "has no sqrt scale"),
        Mistake("scores as weights", _additive_scores_as_weights, "your A holds the scores"),
    ],
)

# ---------------------------------------------------------------------------------
# 1.5 How much does the first token still count?


def _influence_solution(x, W_x, W_h):
    """Return (T,): |d sum(h_(T-1)) / d x_t| for every t, divided by the value at t = T - 1."""
    x = x.detach().clone().requires_grad_(True)  # (T, d_in)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype)  # (d,)
    for t in range(x.shape[0]):
        state = torch.tanh(x[t] @ W_x + state @ W_h)  # (d,)
    (gradient,) = torch.autograd.grad(state.sum(), x)  # (T, d_in)
    norms = gradient.norm(dim=-1)  # (T,)
    return norms / norms[-1]


def _influence_raw(x, W_x, W_h):
    x = x.detach().clone().requires_grad_(True)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype)
    for t in range(x.shape[0]):
        state = torch.tanh(x[t] @ W_x + state @ W_h)
    (gradient,) = torch.autograd.grad(state.sum(), x)
    return gradient.norm(dim=-1)


def _influence_relative_to_first(x, W_x, W_h):
    norms = _influence_raw(x, W_x, W_h)
    return norms / norms[0]


def _influence_without_tanh(x, W_x, W_h):
    x = x.detach().clone().requires_grad_(True)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype)
    for t in range(x.shape[0]):
        state = x[t] @ W_x + state @ W_h
    (gradient,) = torch.autograd.grad(state.sum(), x)
    norms = gradient.norm(dim=-1)
    return norms / norms[-1]


def _influence_transposed(x, W_x, W_h):
    return _influence_solution(x, W_x, W_h.T)


def _influence_reversed(x, W_x, W_h):
    return _influence_solution(x, W_x, W_h).flip(0)


def _influence_summed_gradient(x, W_x, W_h):
    x = x.detach().clone().requires_grad_(True)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype)
    for t in range(x.shape[0]):
        state = torch.tanh(x[t] @ W_x + state @ W_h)
    (gradient,) = torch.autograd.grad(state.sum(), x)
    sums = gradient.sum(dim=-1)
    return sums / sums[-1]


def _check_influence(answer) -> None:
    generator = random_generator()
    T, d_in, d = 12, 3, 6
    x = torch.randn(T, d_in, generator=generator, dtype=torch.float64)
    W_x = torch.randn(d_in, d, generator=generator, dtype=torch.float64)
    # Recurrent weights that are not symmetric, so that W_h and its transpose give different answers.
    W_h = 0.9 * torch.linalg.qr(torch.randn(d, d, generator=generator, dtype=torch.float64))[0]
    where = f"(T={T} tokens of {d_in} features, a state of {d})"
    got = call(answer, x.clone(), W_x.clone(), W_h.clone())
    expected = _influence_solution(x, W_x, W_h)
    known = {
        "divide every gradient norm by the LAST token's, so that the last entry is 1": _influence_raw(x, W_x, W_h),
        "the influence is relative to the last token (the entry at t = T - 1 is 1), not the first": _influence_relative_to_first(
            x, W_x, W_h
        ),
        "the state update is z_t = tanh(x_t W_x + z_(t-1) W_h): you left out the tanh": _influence_without_tanh(
            x, W_x, W_h
        ),
        "the state is a row vector multiplied on the right, z_(t-1) @ W_h; you used W_h transposed": _influence_transposed(
            x, W_x, W_h
        ),
        "entry t belongs to token t: the first token first, the last one (value 1) at the end": _influence_reversed(
            x, W_x, W_h
        ),
        "measure each token's gradient by its norm (length), gradient[t].norm(), not by the sum of its entries": _influence_summed_gradient(
            x, W_x, W_h
        ),
    }
    diagnose(got, expected, f"the influence of each token {where}", known_mistakes=known, rtol=1e-3, atol=1e-8)
    # Without recurrent weights, only the last token reaches the last state.
    got = call(answer, x.clone(), W_x.clone(), torch.zeros(d, d, dtype=torch.float64))
    diagnose(
        got,
        _influence_solution(x, W_x, torch.zeros(d, d, dtype=torch.float64)),
        "the influence with W_h = 0 (only the last token reaches the last state)",
        rtol=1e-3,
        atol=1e-8,
    )


register(
    "1.5",
    "How much does the first token still count?",
    _check_influence,
    answer="influence_by_position",
    solution=_influence_solution,
    mistakes=[
        Mistake("not relative", _influence_raw, "by the LAST token's"),
        Mistake("relative to the first token", _influence_relative_to_first, "not the first"),
        Mistake("no tanh", _influence_without_tanh, "you left out the tanh"),
        Mistake("W_h transposed", _influence_transposed, "W_h transposed"),
        Mistake("reversed", _influence_reversed, "the first token first"),
        Mistake("summed gradient", _influence_summed_gradient, "not by the sum of its entries"),
    ],
)


# Properties of 1.4 and 1.5 (see _core's docstring).


def _additive_weights_of(answer, Q, K):
    """1.4's weights with random projections (the softmax axis depends on no particular score)."""
    generator = torch.Generator().manual_seed(47)
    d_a = 5
    W_1, W_2 = torch.randn(Q.shape[1], d_a, generator=generator), torch.randn(K.shape[1], d_a, generator=generator)
    H, A = probe_pair(answer(Q, K, _randn(48, K.shape[0], 2), W_1, W_2, torch.randn(d_a, generator=generator)))
    return probe_tensor(A, (Q.shape[0], K.shape[0]))


def _additive_output(answer, Q, K, V):
    generator = torch.Generator().manual_seed(52)
    W_1, W_2, w = (
        torch.randn(Q.shape[1], 5, generator=generator),
        torch.randn(K.shape[1], 5, generator=generator),
        torch.randn(5, generator=generator),
    )
    H, A = probe_pair(answer(Q, K, V, W_1, W_2, w))
    A = probe_tensor(A, (Q.shape[0], K.shape[0]))
    return probe_tensor(H, (Q.shape[0], V.shape[1])), A, V.double()


def _additive_pair(answer):
    generator = torch.Generator().manual_seed(54)
    V = _randn(55, 5, 2)
    W_1, W_2, w = (
        torch.randn(4, 6, generator=generator),
        torch.randn(3, 6, generator=generator),
        torch.randn(6, generator=generator),
    )
    return answer(_randn(56, 3, 4), _randn(57, 5, 3), V, W_1, W_2, w), V


def _additive_score_variants(keys: torch.Tensor, w: torch.Tensor) -> dict[str, torch.Tensor]:
    """Key j's score under the formula and its usual slips, for a zero query and W_1 = W_2 = I."""
    tanh = torch.tanh(keys)
    return {
        "": tanh @ w,
        "yours are the sums themselves: put tanh around q_i W_1 + k_j W_2": keys @ w,
        "you applied w before the tanh, tanh((q_i W_1 + k_j W_2) w): apply the tanh to the sum first, then take the "
        "product with w, tanh(q_i W_1 + k_j W_2) @ w": torch.tanh(keys @ w),
        "you summed the tanh's features instead of taking the product with w: the score is tanh(q_i W_1 + k_j W_2) @ w, "
        "which weighs each feature by w": tanh.sum(dim=-1),
        "you applied tanh again after the product with w: the score is tanh(q_i W_1 + k_j W_2) @ w, with no tanh "
        "outside": torch.tanh(tanh @ w),
        f"yours are divided by sqrt(d_a) = sqrt({w.shape[0]}): the additive score has no sqrt scale, its size is set by the "
        "learned w": tanh @ w / math.sqrt(w.shape[0]),
    }


def _additive_score_probe(answer):
    """W_1 = W_2 = I, a zero query and w = (1, -0.5, 0.25): key j's score is tanh(k_j) @ w exactly, so the weights'
    log-ratios to key 0 (k_0 = 0) must be those scores; the usual slips (no tanh, w before the tanh, a sum instead
    of w, tanh twice, a sqrt scale) give other log-ratios, each named."""
    keys = torch.tensor([[0.0, 0.0, 0.0], [0.5, 1.0, 0.0], [1.0, -2.0, 0.5], [3.0, 0.5, -1.0]])
    queries = torch.zeros(2, 3)
    queries[1, 1] = 1.0
    w = torch.tensor([1.0, -0.5, 0.25])
    H, A = probe_pair(answer(queries, keys, _randn(49, 4, 2), torch.eye(3), torch.eye(3), w))
    A = probe_tensor(A, (2, 4))
    raw = _additive_score_variants(keys, w)[""].double()
    if torch.allclose(A[0], raw, atol=1e-5):
        return (
            f"with W_1 = W_2 = I, w = (1, -0.5, 0.25) and a zero query, your weights {[round(float(v), 3) for v in A[0]]} "
            "are the scores tanh(k_j) @ w themselves: your A holds the scores; turn them into weights with a softmax over "
            "the keys"
        )
    if (
        not torch.isfinite(A).all()
        or (A[0] <= 0).any()
        or not torch.allclose(A.sum(-1), torch.ones(2, dtype=A.dtype), atol=1e-4)
    ):
        raise Inconclusive("the softmax probes say more")
    seen = torch.log(A[0, 1:] / A[0, 0])
    variants = {cause: (scores[1:] - scores[0]).double() for cause, scores in _additive_score_variants(keys, w).items()}
    if torch.allclose(seen, variants[""], atol=1e-5):
        return None
    cause = next(
        (cause for cause, ratios in variants.items() if cause and torch.allclose(seen, ratios, atol=1e-5)),
        "the score is tanh(q_i W_1 + k_j W_2) w: add the two projections, then tanh, then the product with w",
    )
    if cause.startswith("the score is") and torch.allclose(seen, torch.zeros_like(seen), atol=1e-6):
        cause = (
            "every key gets the same weight when the query is 0, as with a product q_i W_1 * k_j W_2: the additive score "
            "ADDS the two projections, tanh(q_i W_1 + k_j W_2) w"
        )
    return (
        f"with W_1 = W_2 = I, w = (1, -0.5, 0.25) and a zero query, key j must score tanh(k_j) @ w, so its weight over key "
        f"0's (k_0 = 0) has the log-ratio {[round(float(v), 3) for v in variants['']]}, but yours are "
        f"{[round(float(v), 3) for v in seen]}: {cause}"
    )


add_properties(
    "1.4",
    [
        Property("the pair (H, A): the output first, then the weights", output_pair_probe(_additive_pair)),
        Property("the additive score (tanh(q W_1 + k W_2) w, then a softmax over the keys)", _additive_score_probe),
        Property(
            "the softmax axis (each query's weights sum to 1 over the keys)",
            attention_properties(_additive_weights_of)[0].probe,
        ),
        Property(
            "the output H = A V (each output row averages the VALUE rows with that query's weights)",
            values_probe(_additive_output),
        ),
    ],
)


def _relative_to_last_probe(answer):
    """A last token so large that tanh saturates there: its own influence is small, smaller than earlier tokens',
    so dividing by the largest influence (or by any other token's) differs from dividing by the last one."""
    generator = torch.Generator().manual_seed(50)
    x = torch.randn(6, 2, generator=generator, dtype=torch.float64)
    x[-1] = torch.tensor([6.0, -6.0], dtype=torch.float64)
    W_x = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    W_h = 0.5 * torch.randn(3, 3, generator=generator, dtype=torch.float64)
    got = probe_tensor(answer(x, W_x, W_h), (6,))
    if abs(float(got[-1]) - 1.0) < 1e-6:
        return None
    first = " (yours has 1 at the FIRST token)" if abs(float(got[0]) - 1.0) < 1e-6 else ""
    return (
        f"the last entry of your influences is {float(got[-1]):.4g}{first}: each token's influence is measured relative to "
        "the last token's, so divide every gradient norm by the last one and the entry at t = T - 1 is 1"
    )


def _chain_through_tanh_probe(answer):
    """One feature, W_x = 1, W_h = 0.8, x_t = 1: the influence of token t is (1 - z_t^2) times the product over the
    later steps s of 0.8 (1 - h_s^2) (tanh's slope at each state), relative to the last token's (1 - h_(T-1)^2)."""
    T = 5
    x = torch.ones(T, 1, dtype=torch.float64)
    W_x, W_h = torch.ones(1, 1, dtype=torch.float64), torch.full((1, 1), 0.8, dtype=torch.float64)
    got = probe_tensor(answer(x, W_x, W_h), (T,))
    states, state = [], torch.zeros(1, dtype=torch.float64)
    for t in range(T):
        state = torch.tanh(x[t] @ W_x + state @ W_h)
        states.append(float(state))
    slopes = [1 - h**2 for h in states]
    wanted = [slopes[t] * math.prod(0.8 * slopes[s] for s in range(t + 1, T)) / slopes[-1] for t in range(T)]
    if torch.allclose(got, torch.tensor(wanted, dtype=torch.float64), rtol=1e-4, atol=1e-8):
        return None
    if float(got[:-1].abs().max()) == 0.0 and float(got[-1]) == 1.0:
        return (
            f"only the last token has an influence in yours ({[round(float(v), 4) for v in got]}): the gradient does not "
            "flow back through the previous state. Keep z_(t-1) attached (no .detach(), .data or .item() inside the "
            "loop) and in the update, z_t = tanh(x_t W_x + z_(t-1) W_h), so the chain rule runs through every step"
        )
    plain = [0.8 ** (T - 1 - t) for t in range(T)]
    cause = (
        "yours are 0.8^(T - 1 - t), as if the state were not squashed: the update is z_t = tanh(x_t W_x + z_(t-1) W_h), and "
        "every step multiplies the gradient by tanh's slope too"
        if torch.allclose(got, torch.tensor(plain, dtype=torch.float64), rtol=1e-4)
        else "backpropagate from the sum of the last state through every step z_t = tanh(x_t W_x + z_(t-1) W_h)"
    )
    return (
        f"with one feature, W_x = 1, W_h = 0.8 and x_t = 1 for {T} tokens, token t's influence is tanh's slope 1 - z_t^2 times "
        f"0.8 (1 - h_s^2) for every later step s (relative to the last token's), {[round(v, 4) for v in wanted]}; yours are "
        f"{[round(float(v), 4) for v in got]}: {cause}"
    )


def _gradient_norm_probe(answer):
    """Two input features whose gradients point different ways: the influence is each gradient's length."""
    generator = torch.Generator().manual_seed(51)
    x = torch.randn(5, 2, generator=generator, dtype=torch.float64)
    W_x = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    W_h = 0.5 * torch.randn(3, 3, generator=generator, dtype=torch.float64)
    got = probe_tensor(answer(x, W_x, W_h), (5,))
    if torch.allclose(got, _influence_solution(x, W_x, W_h), rtol=1e-4, atol=1e-10):
        return None
    gradient = _influence_raw(x, W_x, W_h)  # norms, for the shape of the message only
    x_ = x.detach().clone().requires_grad_(True)
    state = torch.zeros(3, dtype=torch.float64)
    for t in range(5):
        state = torch.tanh(x_[t] @ W_x + state @ W_h)
    (g,) = torch.autograd.grad(state.sum(), x_)
    for name, sizes in (
        ("the sum of the absolute values (an L1 size)", g.abs().sum(-1)),
        ("the sum of the entries", g.sum(-1)),
        ("its squared length, the sum of the squares (take the square root: the norm)", (g**2).sum(-1)),
    ):
        if torch.allclose(got, sizes / sizes[-1], rtol=1e-4, atol=1e-10):
            return (
                f"with two input features your influences are {[round(float(v), 4) for v in got]}: you measured each token's "
                f"gradient by {name}; the chapter measures its length, gradient[t].norm() (the norms are "
                f"{[round(float(v), 4) for v in gradient / gradient[-1]]} relative to the last)"
            )
    raise Inconclusive("the checker compares with the reference")


def _influence_variant(
    x, W_x, W_h, *, start=0.0, first=0, step="tanh", swap=False, out="sum", detach=False, size="norm"
):
    """1.5's influence computed with one of the usual slips (the defaults give the right answer)."""
    if step == "W_h.T":
        step, W_h = "tanh", W_h.T
    x = x.detach().clone().requires_grad_(True)
    state = torch.full((W_h.shape[0],), start, dtype=x.dtype)
    squash = {"tanh": torch.tanh, "relu": torch.relu, "sigmoid": torch.sigmoid, "none": lambda v: v}[step]
    total = 0.0
    for t in range(first, x.shape[0]):
        previous = state.detach() if detach else state
        state = squash(previous @ W_x + x[t] @ W_h) if swap else squash(x[t] @ W_x + previous @ W_h)
        total = total + state.sum()
    target = {"sum": state.sum(), "norm": state.norm(), "every step": total}[out]
    (gradient,) = torch.autograd.grad(target, x)
    sizes = {"norm": gradient.norm(dim=-1), "squared": (gradient**2).sum(dim=-1)}[size]
    return sizes / sizes[-1]


_RECURRENCE_SLIPS = {
    "your state starts at 1 before the first token: start from h = 0 (torch.zeros)": {"start": 1.0},
    "token 0 has no influence in yours: the loop must run over every token, t = 0 to T - 1 (range(T), not range(1, T))": {
        "first": 1
    },
    "x_t goes with W_x and the state with W_h: the update is tanh(x_t W_x + z_(t-1) W_h), you swapped the matrices": {
        "swap": True
    },
    "you left out the tanh: the update is z_t = tanh(x_t W_x + z_(t-1) W_h)": {"step": "none"},
    "the state is a row vector multiplied on the right, z_(t-1) @ W_h; you used W_h transposed": {"step": "W_h.T"},
    "you used relu where the update has tanh: z_t = tanh(x_t W_x + z_(t-1) W_h)": {"step": "relu"},
    "you used sigmoid where the update has tanh: z_t = tanh(x_t W_x + z_(t-1) W_h)": {"step": "sigmoid"},
}
_TARGET_SLIPS = {
    "you backpropagated from the last state's norm: backpropagate from its sum, state.sum()": {"out": "norm"},
    "you summed the states of every step: differentiate only the LAST state h_(T-1) (its sum)": {"out": "every step"},
}


def _slips_probe(slips: dict[str, dict]):
    """Three tokens of three features with W_x and W_h of the same size (so that swapping them runs): the answer must
    not equal any of the named slips."""

    def probe(answer):
        generator = torch.Generator().manual_seed(58)
        x = torch.randn(5, 3, generator=generator, dtype=torch.float64)
        W_x = torch.randn(3, 3, generator=generator, dtype=torch.float64)
        W_h = 0.6 * torch.randn(3, 3, generator=generator, dtype=torch.float64)
        got = probe_tensor(answer(x, W_x, W_h), (5,))
        if torch.allclose(got, _influence_variant(x, W_x, W_h), rtol=1e-4, atol=1e-10):
            return None
        for cause, flags in slips.items():
            if torch.allclose(got, _influence_variant(x, W_x, W_h, **flags), rtol=1e-4, atol=1e-10):
                return f"your influences are {[round(float(v), 4) for v in got]}: {cause}"
        return None

    return probe


def _order_probe(answer):
    """Entry t belongs to token t: an answer in reverse order has the right numbers backwards."""
    generator = torch.Generator().manual_seed(59)
    x = torch.randn(5, 2, generator=generator, dtype=torch.float64)
    W_x = torch.randn(2, 3, generator=generator, dtype=torch.float64)
    W_h = 0.5 * torch.randn(3, 3, generator=generator, dtype=torch.float64)
    got = probe_tensor(answer(x, W_x, W_h), (5,))
    expected = _influence_solution(x, W_x, W_h)
    if not torch.allclose(got, expected, rtol=1e-4) and torch.allclose(got, expected.flip(0), rtol=1e-4):
        return (
            f"your influences {[round(float(v), 4) for v in got]} are the right ones in reverse order: entry t belongs to "
            "token t, the first token first and the last one (value 1) at the end"
        )
    return None


add_properties(
    "1.5",
    [
        Property("the order of the entries (entry t is token t's influence)", _order_probe),
        Property("relative to the last token (its entry is 1)", _relative_to_last_probe),
        Property(
            "the recurrence (z starts at 0, z_t = tanh(x_t W_x + z_(t-1) W_h) for every token)",
            _slips_probe(_RECURRENCE_SLIPS),
        ),
        Property("what is differentiated (the sum of the last state, through every step)", _slips_probe(_TARGET_SLIPS)),
        Property("the size of a gradient is its length (norm)", _gradient_norm_probe),
        Property("the chain rule through the recurrence (tanh's slope at every later step)", _chain_through_tanh_probe),
    ],
)


# ---------------------------------------------------------------------------------
# 1.6 The longest sequence for which attention is cheaper than a recurrent layer
#
# Self-attention with its output projection W_O does 4 T d^2 + 2 T^2 d multiply-adds, a recurrent layer with g
# gates 2 g T d^2 (each gate multiplies the token and the previous state by a d x d matrix). Dividing by 2 T d,
# attention is cheaper exactly while T < (g - 2) d. A wrong answer is recognised by the count it used: the family
# below varies every part of the count and of the question one at a time (and in combination), and the hint names
# each part that differs from the right one.


def _cheaper_solution(d: int, gates: int) -> int:
    """The largest length T >= 1 at which self-attention with W_O does fewer multiply-adds than a recurrent layer of
    width d with ``gates`` gates, or 0 if there is none."""
    # attention 4 T d^2 + 2 T^2 d < recurrent 2 gates T d^2  <=>  (divided by 2 T d)  T < (gates - 2) d
    return max(0, (gates - 2) * d - 1)


@dataclass(frozen=True)
class _Count:
    """One way of counting: attention a T d^2 + b T^2 d against c g T d^2 (g fixed to ``fixed_gates`` if set), then
    the question answered: ``"last"`` (largest T where attention is strictly cheaper), ``"last or equal"`` (where it
    is not dearer) or ``"first dearer"`` (the first T where it no longer is); ``floor``: 0 when no T >= 1 qualifies."""

    a: int = 4
    b: int = 2
    c: int = 2
    fixed_gates: int | None = None
    question: str = "last"
    floor: bool = True

    def __call__(self, d: int, gates: int) -> int:
        g = gates if self.fixed_gates is None else self.fixed_gates
        bound = Fraction((self.c * g - self.a) * d, self.b)  # attention is cheaper exactly while T < bound
        if self.question == "first dearer":
            return max(1, math.ceil(bound))
        value = math.floor(bound) if self.question == "last or equal" else math.ceil(bound) - 1
        return max(0, value) if self.floor else value


_RIGHT_COUNT = _Count()
_COUNT_HINTS = {
    ("a", 3): "attention with W_O does 4 T d^2 for its projections (queries, keys, values and the output), not 3 T d^2",
    ("b", 1): "the T x T part is two products, the scores Q K^T and the mixing A V: 2 T^2 d, not T^2 d",
    ("c", 1): "each gate multiplies both the token and the previous state by a d x d matrix: 2 T d^2 per gate, "
    "not T d^2",
    ("fixed_gates", 4): "the recurrent layer's work depends on gates (2 gates T d^2); you counted 4 gates whatever "
    "gates is",
    ("question", "last or equal"): "where the two counts are equal attention is not cheaper: return the largest T "
    "at which its count is strictly smaller",
    ("question", "first dearer"): "you returned the first length at which attention is no longer cheaper; return "
    "the last one at which it still is (one less), or 0 if there is none",
    ("floor", False): "when attention is cheaper at no length T >= 1 (gates <= 2, say), return 0, not a negative "
    "number",
}


def _count_family() -> list[_Count]:
    """Every way of counting the family knows, the fewest departures from the right count first."""
    options = {"a": (4, 3), "b": (2, 1), "c": (2, 1), "fixed_gates": (None, 4)}
    questions = [
        ("last", True),
        ("last", False),
        ("last or equal", True),
        ("last or equal", False),
        ("first dearer", True),
    ]
    counts = [
        _Count(a=a, b=b, c=c, fixed_gates=fixed, question=question, floor=floor)
        for a, b, c, fixed in itertools.product(*options.values())
        for question, floor in questions
    ]
    return sorted(counts, key=lambda count: len(_departures(count)))


def _departures(count: _Count) -> list[str]:
    """The hints for each part in which ``count`` differs from the right one."""
    return [
        hint
        for (name, value), hint in _COUNT_HINTS.items()
        if getattr(count, name) == value and getattr(_RIGHT_COUNT, name) != value
    ]


def _whole_number(value, where: str) -> int:
    """A length returned as int (or an integral float, NumPy or one-element tensor); anything else fails."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not hasattr(value, "__float__"):
        raise ExerciseFailure(f"{where} you returned {value!r} ({type(value).__name__}); return a length, an int")
    if not float(value).is_integer():
        raise ExerciseFailure(f"{where} you returned {float(value):g}; a length is a whole number of tokens")
    return int(value)


def _check_cheaper_lengths(answer) -> None:
    generator = random_generator()
    drawn = [int(w) for w in torch.randint(4, 1025, (3,), generator=generator)]
    cases = [(d, gates) for d in (1, 2, 3, 64, 512, *drawn) for gates in range(1, 7)]
    got = {case: _whole_number(call(answer, *case), f"for d = {case[0]}, gates = {case[1]}") for case in cases}
    wrong = [case for case in cases if got[case] != _cheaper_solution(*case)]
    if not wrong:
        return
    for count in _count_family()[1:]:
        if all(got[case] == count(*case) for case in cases):
            raise ExerciseFailure("; ".join(_departures(count)))
    d, gates = wrong[0]
    raise ExerciseFailure(
        f"for d = {d} and gates = {gates} you returned {got[d, gates]}, but attention (4 T d^2 + 2 T^2 d "
        f"multiply-adds) stays below the recurrent layer (2 gates T d^2) up to T = {_cheaper_solution(d, gates)}: "
        "write both counts for one T, divide by 2 T d and solve for T"
    )


register(
    "1.6",
    "The longest sequence for which attention is cheaper",
    _check_cheaper_lengths,
    answer="longest_cheaper_length",
    solution=_cheaper_solution,
    mistakes=[
        Mistake("without W_O", _Count(a=3), "not 3 T d^2"),
        Mistake("scores only", _Count(b=1), "2 T^2 d, not T^2 d"),
        Mistake("one product per gate", _Count(c=1), "2 T d^2 per gate"),
        Mistake("gates ignored", _Count(fixed_gates=4), "whatever gates is"),
        Mistake("equal counts included", _Count(question="last or equal"), "strictly smaller"),
        Mistake("first dearer length", _Count(question="first dearer"), "no longer cheaper"),
        Mistake("negative when never cheaper", _Count(floor=False), "not a negative number"),
    ],
)
