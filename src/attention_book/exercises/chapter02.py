"""Exercises of chapter 2, "Attention as a key-value store".

2.1 Count the parameters of the W_Q, W_K, W_V projections (a formula).
2.2 Implement the soft lookup of one query in a key-value store.
2.3 Design keys so that a given query retrieves a chosen blend of two values.

Each checker tests the answer on fresh random inputs against the reference
(:class:`~attention_book.SingleHeadAttention`, :func:`~attention_book.soft_lookup`) and
recognises typical wrong answers by what they compute.
"""

from __future__ import annotations

import math
import numbers

import torch

from ..key_value import SingleHeadAttention
from ..key_value import soft_lookup as reference_soft_lookup
from ._core import ExerciseFailure, Mistake, call, diagnose, random_generator, register, require_tensor_like

# ---------------------------------------------------------------------------------
# 2.1 Count the projection parameters


def _parameter_count_solution(d_model: int, d_k: int, d_v: int, bias: bool) -> int:
    """Parameters of W_Q, W_K (d_model -> d_k) and W_V (d_model -> d_v), with or without biases."""
    weights = d_model * d_k + d_model * d_k + d_model * d_v
    biases = (d_k + d_k + d_v) if bias else 0
    return weights + biases


def _count_without_bias(d_model, d_k, d_v, bias):
    return d_model * (2 * d_k + d_v)


def _count_values_like_keys(d_model, d_k, d_v, bias):
    return 3 * d_model * d_k + (3 * d_k if bias else 0)


def _count_bias_per_input(d_model, d_k, d_v, bias):
    return d_model * (2 * d_k + d_v) + (3 * d_model if bias else 0)


def _count_square_matrices(d_model, d_k, d_v, bias):
    return 3 * d_model * d_model + (3 * d_model if bias else 0)


def _parameter_cases(generator: torch.Generator) -> list[tuple[int, int, int, bool]]:
    """Eight random settings with d_model, d_k and d_v all different; biases on and off."""
    cases = []
    while len(cases) < 8:
        d_model, d_k, d_v = (int(x) for x in torch.randint(1, 65, (3,), generator=generator))
        if len({d_model, d_k, d_v}) == 3:
            cases.append((d_model, d_k, d_v, len(cases) % 2 == 0))
    return cases


def _check_parameter_count(answer) -> None:
    cases = _parameter_cases(random_generator())
    got = []
    for d_model, d_k, d_v, bias in cases:
        result = call(answer, d_model, d_k, d_v, bias)
        if isinstance(result, torch.Tensor) and result.numel() == 1:
            result = result.item()
        if isinstance(result, bool) or not isinstance(result, numbers.Real) or float(result) != int(result):
            raise ExerciseFailure(
                f"for d_model={d_model}, d_k={d_k}, d_v={d_v}, bias={bias} your function returned {result!r}; "
                "it should return a whole number (an int)"
            )
        got.append(float(result))
    expected = []
    for d_model, d_k, d_v, bias in cases:
        layer = SingleHeadAttention(d_model, d_k, d_v, bias=bias)
        expected.append(float(sum(p.numel() for p in layer.parameters())))

    def wrong(mistake):
        return torch.tensor([float(mistake(*case)) for case in cases], dtype=torch.float64)

    d_model, d_k, d_v, bias = cases[0]
    diagnose(
        torch.tensor(got, dtype=torch.float64),
        torch.tensor(expected, dtype=torch.float64),
        f"the list of parameter counts for 8 random settings (the first: d_model={d_model}, d_k={d_k}, d_v={d_v}, bias={bias})",
        known_mistakes={
            "you forgot the biases: with bias=True each projection also has one bias per output feature": wrong(
                _count_without_bias
            ),
            "W_V maps d_model features to d_v (not d_k): the values may have a different size from queries and keys": wrong(
                _count_values_like_keys
            ),
            "a bias has one number per OUTPUT feature (d_k or d_v), not per input feature": wrong(_count_bias_per_input),
            "W_Q and W_K are (d_model x d_k) and W_V is (d_model x d_v), not square (d_model x d_model)": wrong(
                _count_square_matrices
            ),
        },
        atol=0.0,
        rtol=0.0,
    )


register(
    "2.1",
    "Count the projection parameters",
    _check_parameter_count,
    solution=_parameter_count_solution,
    mistakes=[
        Mistake("forgot the biases", _count_without_bias, "you forgot the biases"),
        Mistake("values sized like keys", _count_values_like_keys, "W_V maps d_model features to d_v"),
        Mistake("bias per input feature", _count_bias_per_input, "one number per OUTPUT feature"),
        Mistake("square matrices", _count_square_matrices, "not square"),
    ],
)

# ---------------------------------------------------------------------------------
# 2.2 Soft lookup


def _soft_lookup_solution(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor):
    """Return (value (d_v,), weights (n,)) for one query (d_k,), keys (n, d_k), values (n, d_v)."""
    scores = keys @ query / math.sqrt(keys.shape[-1])  # (n,)
    weights = torch.softmax(scores, dim=0)  # (n,)
    return weights @ values, weights  # (d_v,), (n,)


def _lookup_without_scale(query, keys, values):
    weights = torch.softmax(keys @ query, dim=0)
    return weights @ values, weights


def _lookup_divided_by_d_k(query, keys, values):
    weights = torch.softmax(keys @ query / keys.shape[-1], dim=0)
    return weights @ values, weights


def _hard_lookup(query, keys, values):
    scores = keys @ query / math.sqrt(keys.shape[-1])
    weights = torch.nn.functional.one_hot(scores.argmax(), len(scores)).to(values.dtype)
    return weights @ values, weights


def _lookup_averaging_keys(query, keys, values):
    weights = torch.softmax(keys @ query / math.sqrt(keys.shape[-1]), dim=0)
    return weights @ keys, weights


def _lookup_with_naive_exp(query, keys, values):
    exponentials = torch.exp(keys @ query / math.sqrt(keys.shape[-1]))
    weights = exponentials / exponentials.sum()
    return weights @ values, weights


def _split_lookup_result(result, what: str):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"{what} should return a pair (value, weights), but returned {type(result).__name__}")
    return result


def _check_soft_lookup(answer) -> None:
    generator = random_generator()
    # Case 1: d_k = d_v, so that averaging the keys instead of the values can be recognised.
    n, d = 6, 4
    query = torch.randn(d, generator=generator)
    keys = torch.randn(n, d, generator=generator)
    values = torch.randn(n, d, generator=generator)
    value, weights = _split_lookup_result(call(answer, query.clone(), keys.clone(), values.clone()), "soft_lookup")
    expected_value, expected_weights = reference_soft_lookup(query, keys, values)
    mistakes = {
        "you forgot to divide the scores by sqrt(d_k)": _lookup_without_scale,
        "divide the scores by sqrt(d_k), not by d_k": _lookup_divided_by_d_k,
        "these are one-hot weights (argmax, a hard dict-like lookup); use softmax so every key gets some weight": _hard_lookup,
    }
    diagnose(
        weights,
        expected_weights,
        "the weight vector",
        known_mistakes={hint: wrong(query, keys, values)[1] for hint, wrong in mistakes.items()},
    )
    diagnose(
        value,
        expected_value,
        "the returned value",
        known_mistakes={
            "you averaged the keys; the lookup returns the weighted average of the VALUES": _lookup_averaging_keys(
                query, keys, values
            )[0],
        },
    )
    # Case 2: values of another size than keys (d_v != d_k), keys that tie, and a one-entry store.
    keys = torch.randn(5, 3, generator=generator)
    keys[3] = keys[1]  # two identical keys must get identical weights
    values = torch.randn(5, 7, generator=generator)
    query = torch.randn(3, generator=generator)
    for store_keys, store_values in ((keys, values), (keys[:1], values[:1])):
        value, weights = _split_lookup_result(call(answer, query, store_keys, store_values), "soft_lookup")
        expected_value, expected_weights = reference_soft_lookup(query, store_keys, store_values)
        size = f"with {len(store_keys)} keys of size 3 and values of size 7"
        diagnose(weights, expected_weights, f"the weight vector ({size})")
        diagnose(value, expected_value, f"the returned value ({size})")
    # Case 3: large scores, where exp() overflows unless the largest score is subtracted first.
    query = 100.0 * torch.randn(4, generator=generator)
    keys = 100.0 * torch.randn(6, 4, generator=generator)
    values = torch.randn(6, 2, generator=generator)
    value, weights = _split_lookup_result(call(answer, query, keys, values), "soft_lookup")
    weights = require_tensor_like(weights, torch.zeros(6), "the weight vector")
    if not torch.isfinite(weights).all():
        raise ExerciseFailure(
            "the weights contain nan or inf when the scores are large (around 10,000): exp() overflowed. "
            "Subtract the largest score before exp (softmax does not change), or use torch.softmax"
        )
    expected_value, expected_weights = reference_soft_lookup(query, keys, values)
    diagnose(weights, expected_weights, "the weight vector (with large scores)")
    diagnose(value, expected_value, "the returned value (with large scores)")


register(
    "2.2",
    "Soft lookup",
    _check_soft_lookup,
    solution=_soft_lookup_solution,
    mistakes=[
        Mistake("no sqrt(d_k) scale", _lookup_without_scale, "forgot to divide the scores by sqrt(d_k)"),
        Mistake("divided by d_k", _lookup_divided_by_d_k, "not by d_k"),
        Mistake("hard lookup with argmax", _hard_lookup, "one-hot weights"),
        Mistake("averaged the keys", _lookup_averaging_keys, "you averaged the keys"),
        Mistake("exp without subtracting the maximum", _lookup_with_naive_exp, "exp() overflowed"),
    ],
)

# ---------------------------------------------------------------------------------
# 2.3 Design keys for a blend


def _design_keys_solution(query: torch.Tensor, share: float) -> torch.Tensor:
    """Keys (3, d_k) so that ``query`` gives weights (share, 1 - share, ~0)."""
    d_k = query.shape[0]
    # A key c * sqrt(d_k) * q / |q|^2 has scaled score exactly c. Softmax turns scores into
    # weights proportional to exp(score), so scores log(share) and log(1 - share) give the
    # blend; a third score 30 below both makes the third weight about e^-30.
    direction = math.sqrt(d_k) * query / (query @ query)  # (d_k,)
    first, second = math.log(share), math.log(1.0 - share)
    scores = torch.tensor([first, second, min(first, second) - 30.0], dtype=query.dtype)
    return scores[:, None] * direction[None, :]  # (3, d_k)


def _keys_with_scores_equal_to_shares(query, share):
    direction = math.sqrt(query.shape[0]) * query / (query @ query)
    return torch.tensor([share, 1.0 - share, 0.0], dtype=query.dtype)[:, None] * direction[None, :]


def _keys_without_sqrt(query, share):
    direction = query / (query @ query)  # forgets that the scores are divided by sqrt(d_k)
    first, second = math.log(share), math.log(1.0 - share)
    return torch.tensor([first, second, min(first, second) - 30.0], dtype=query.dtype)[:, None] * direction[None, :]


def _keys_with_zero_third_key(query, share):
    direction = math.sqrt(query.shape[0]) * query / (query @ query)
    first, second = math.log(share), math.log(1.0 - share)
    return torch.tensor([first, second, 0.0], dtype=query.dtype)[:, None] * direction[None, :]


def _weights_of(keys: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    values = torch.eye(3, dtype=query.dtype)  # the returned value is then the weights themselves
    return reference_soft_lookup(query, keys, values)[1]


def _check_design_keys(answer) -> None:
    generator = random_generator()
    shares = [0.25, 0.5] + [0.05 + 0.9 * float(torch.rand((), generator=generator)) for _ in range(3)]
    for share in shares:
        d_k = int(torch.randint(2, 9, (), generator=generator))
        direction = torch.randn(d_k, generator=generator)
        query = direction / direction.norm() * (1.0 + 4.0 * float(torch.rand((), generator=generator)))  # |q| in [1, 5]
        keys = call(answer, query.clone(), share)
        keys = require_tensor_like(keys, torch.zeros(3, d_k), f"your keys (for a query of size d_k={d_k})")
        if not torch.isfinite(keys).all():
            raise ExerciseFailure("your keys contain nan or inf: keep every number finite")
        what = f"the weight vector your keys give the query (for share={share:.2f}, d_k={d_k})"
        expected = torch.tensor([share, 1.0 - share, 0.0])
        mistakes = {
            "softmax exponentiates the scores, so scores equal to the shares do not give those weights; "
            "make the two scores differ by log(share / (1 - share))": _keys_with_scores_equal_to_shares,
            "the scores are divided by sqrt(d_k) before the softmax: your keys ignore that scale": _keys_without_sqrt,
            "the third key still gets weight: give it a score far below the other two": _keys_with_zero_third_key,
        }
        diagnose(
            _weights_of(keys, query),
            expected,
            what,
            known_mistakes={hint: _weights_of(wrong(query, share), query) for hint, wrong in mistakes.items()},
            atol=1e-3,
            rtol=0.0,
        )
        # Behaviour: with any values, the lookup returns share * v1 + (1 - share) * v2.
        values = torch.randn(3, 5, generator=generator)
        value, _ = reference_soft_lookup(query, keys, values)
        blend = share * values[0] + (1.0 - share) * values[1]
        if not torch.allclose(value, blend, atol=5e-3):
            raise ExerciseFailure(
                f"the lookup returns {value.tolist()} instead of the blend {blend.tolist()} "
                f"(share={share:.2f}); check the weights of all three keys"
            )


register(
    "2.3",
    "Design keys for a chosen blend",
    _check_design_keys,
    solution=_design_keys_solution,
    mistakes=[
        Mistake("scores equal to the shares", _keys_with_scores_equal_to_shares, "softmax exponentiates the scores"),
        Mistake("forgot the sqrt(d_k) scale", _keys_without_sqrt, "divided by sqrt(d_k) before the softmax"),
        Mistake("third key not suppressed", _keys_with_zero_third_key, "the third key still gets weight"),
    ],
)
