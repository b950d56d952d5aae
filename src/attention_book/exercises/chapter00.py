"""Exercises of the sample chapter 0 (``tests/sample_exercises/00_sample.ipynb``).

Chapter 0 is not part of the book: it is a small worked example of the exercise mechanism
(solution cell, check cell, generated student notebook, nbval), so that the mechanism is
tested even before any chapter exists, and a template for chapter authors.
``summary()`` without a chapter leaves it out; ``summary(0)`` shows it.

0.1 Attention weights of a few queries: A = softmax(Q K^T / sqrt(d_k)) row-wise.
"""

from __future__ import annotations

import math

import torch

from ..attention import attention_scores, softmax
from ._core import (
    SCALED_BY_SQRT_T,
    SCORES_AS_WEIGHTS,
    ExerciseFailure,
    Mistake,
    add_properties,
    attention_variants,
    call,
    diagnose,
    probe_tensor,
    random_generator,
    register,
)
from ._probes import attention_properties

# ---------------------------------------------------------------------------------
# 0.1 Attention weights of a few queries


def _attention_weights_solution(Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """Return A (T_q, T_k): row i holds the weights query i gives to every key."""
    S = Q @ K.T / math.sqrt(Q.shape[-1])  # (T_q, T_k)
    return torch.softmax(S, dim=-1)  # each row sums to 1


def _unscaled(Q, K):
    return torch.softmax(Q @ K.T, dim=-1)


def _divided_by_d_k(Q, K):
    return torch.softmax(Q @ K.T / Q.shape[-1], dim=-1)


def _softmax_over_queries(Q, K):
    return torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=0)


def _normalised_by_sum(Q, K):
    S = Q @ K.T / math.sqrt(Q.shape[-1])
    return S / S.sum(dim=-1, keepdim=True)


def _divided_by_sqrt_T(Q, K):
    return torch.softmax(Q @ K.T / math.sqrt(K.shape[0]), dim=-1)


def _returns_scores(Q, K):
    return Q @ K.T / math.sqrt(Q.shape[-1])


def _naive_exp(Q, K):
    exponentials = torch.exp(Q @ K.T / math.sqrt(Q.shape[-1]))
    return exponentials / exponentials.sum(dim=-1, keepdim=True)


def _keys_times_queries(Q, K):
    return torch.softmax(K @ Q.T / math.sqrt(Q.shape[-1]), dim=-1)


def _check_attention_weights(answer) -> None:
    generator = random_generator()
    # Case 1: random sizes with T_q != T_k, so that a transposed result has the wrong shape.
    d_k = int(torch.randint(3, 17, (), generator=generator))
    T_q = int(torch.randint(2, 5, (), generator=generator))
    T_k = T_q + int(torch.randint(1, 4, (), generator=generator))
    T_k += T_k == d_k  # T_k != d_k, so that dividing by sqrt(T_k) instead of sqrt(d_k) shows
    Q = torch.randn(T_q, d_k, generator=generator)
    K = torch.randn(T_k, d_k, generator=generator)
    got = call(answer, Q.clone(), K.clone())
    expected = softmax(attention_scores(Q, K))  # (T_q, T_k)
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (T_k, T_q):
        raise ExerciseFailure(
            f"A has shape {tuple(got.shape)} but should be (T_q, T_k) = {(T_q, T_k)}: one row per query, "
            "so compute Q @ K.T (not K @ Q.T)"
        )
    what = f"A (T_q={T_q} queries, T_k={T_k} keys, d_k={d_k})"
    family = {hint: A for hint, (_, A) in attention_variants(Q, K, K).items()}
    diagnose(
        got,
        expected,
        what,
        known_mistakes={
            "you forgot to divide the scores by sqrt(d_k)": _unscaled(Q, K),
            "divide the scores by sqrt(d_k), not by d_k": _divided_by_d_k(Q, K),
            "the softmax runs over the wrong axis: each ROW (one query) must sum to 1, "
            "so use softmax(..., dim=-1)": _softmax_over_queries(Q, K),
            "you divided the scores by their sum; weights come from a softmax "
            "(exponentiate, then divide by the sum)": _normalised_by_sum(Q, K),
            **family,
        },
    )
    # Case 2: two identical keys tie and must get equal weights; a single key gets weight 1.
    K = torch.randn(4, d_k, generator=generator)
    K[2] = K[0]
    for keys, case in ((K, "with two identical keys"), (K[:1], "with a single key")):
        got = call(answer, Q, keys)
        family = {hint: A for hint, (_, A) in attention_variants(Q, keys, keys).items()}
        diagnose(got, softmax(attention_scores(Q, keys)), f"A ({case})", known_mistakes=family)
    # Case 3: large scores. Key 0 is the first query times 1000 sqrt(d_k) / |q|^2, so that score is
    # exactly 1000, where exp() overflows unless each row's largest score is subtracted first.
    keys = torch.randn(3, d_k, generator=generator)
    keys[0] = Q[0] * 1000.0 * math.sqrt(d_k) / (Q[0] @ Q[0])
    got = call(answer, Q, keys)
    diagnose(
        got,
        softmax(attention_scores(Q, keys)),
        "A (with a score of 1,000)",
        known_mistakes={hint: A for hint, (_, A) in attention_variants(Q, keys, keys).items()},
        atol=1e-4,
    )


register(
    "0.1",
    "Attention weights of a few queries",
    _check_attention_weights,
    answer="attention_weights",
    solution=_attention_weights_solution,
    mistakes=[
        Mistake("no sqrt(d_k) scale", _unscaled, "forgot to divide the scores by sqrt(d_k)"),
        Mistake("divided by d_k", _divided_by_d_k, "not by d_k"),
        Mistake("softmax over the queries", _softmax_over_queries, "softmax runs over the wrong axis"),
        Mistake("normalised by the sum", _normalised_by_sum, "divided the scores by their sum"),
        Mistake("K @ Q.T", _keys_times_queries, "compute Q @ K.T"),
        Mistake("divided by sqrt(T)", _divided_by_sqrt_T, SCALED_BY_SQRT_T),
        Mistake("returned the scores", _returns_scores, SCORES_AS_WEIGHTS),
        Mistake("exp without subtracting the maximum", _naive_exp, "exp() of large scores overflows"),
    ],
)

# ---------------------------------------------------------------------------------
# Properties of 0.1 (see _core's docstring): the softmax axis, the softmax, the scale.


def _weights_of(answer, Q, K):
    return probe_tensor(answer(Q, K), (Q.shape[0], K.shape[0]))


add_properties("0.1", attention_properties(_weights_of))
