"""Exercises of chapter 2, "Attention as a key-value store".

2.1 One attention head with projections, ``attend(x_query, x_memory, W_Q, W_K, W_V)``,
    for self-attention and cross-attention alike.
2.2 Design keys so that a given query retrieves a chosen blend of two values.
2.3 Design a previous-token head: W_Q and W_K with which every position i >= 1 puts
    at least 0.9 of its weight on position i - 1, whatever the tokens' content.

Each checker tests the answer on fresh random inputs against the reference
(:class:`~attention_book.SingleHeadAttention`, :func:`~attention_book.soft_lookup`,
:func:`~attention_book.scaled_dot_product_attention`) and recognises typical wrong
answers by what they compute.
"""

from __future__ import annotations

import math

import torch

from ..attention import scaled_dot_product_attention
from ..key_value import SingleHeadAttention
from ..key_value import soft_lookup as reference_soft_lookup
from ._core import (
    SCALED_BY_D_K,
    SCALED_BY_SQRT_T,
    ExerciseFailure,
    Mistake,
    Property,
    add_properties,
    call,
    crash_probe,
    diagnose,
    diagnose_weights,
    name_sizes,
    probe_from_check,
    probe_pair,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)
from ._probes import _randn, attention_properties, determinism_probe, output_pair_probe, values_probe

# ---------------------------------------------------------------------------------
# 2.1 One attention head, for self- and cross-attention


def _attend_solution(x_query, x_memory, W_Q, W_K, W_V):
    """Return (H (T_q, d_v), A (T_q, T_k)) for x_query (T_q, d_model) and x_memory (T_k, d_model)."""
    Q = x_query @ W_Q  # (T_q, d_k): the tokens that ask
    K = x_memory @ W_K  # (T_k, d_k): the tokens that answer ...
    V = x_memory @ W_V  # (T_k, d_v): ... and what they hand over
    S = Q @ K.T / math.sqrt(K.shape[-1])  # (T_q, T_k)
    A = torch.softmax(S, dim=-1)  # (T_q, T_k): each row sums to 1
    return A @ V, A  # (T_q, d_v), (T_q, T_k)


def _reference_attend(x_query, x_memory, W_Q, W_K, W_V):
    """The package's SingleHeadAttention with the given matrices (nn.Linear stores W^T)."""
    (d_model, d_k), d_v = W_Q.shape, W_V.shape[1]
    head = SingleHeadAttention(d_model, d_k, d_v)
    with torch.no_grad():
        for projection, W in ((head.q_proj, W_Q), (head.k_proj, W_K), (head.v_proj, W_V)):
            projection.weight.copy_(W.T)
        H, A = head(x_query[None], x_memory[None])  # (1, T_q, d_v), (1, T_q, T_k)
    return H[0], A[0]


def _head_parts(x_query, x_memory, *, W_Q, W_K, W_V, scale=True):
    """Scores S (T_q, T_k), scaled or not, and values V (T_k, d_v): the start of a wrong answer."""
    Q, K = x_query @ W_Q, x_memory @ W_K
    S = Q @ K.T / (math.sqrt(K.shape[-1]) if scale else 1.0)
    return S, x_memory @ W_V


def _attend_unscaled(x_query, x_memory, W_Q, W_K, W_V):
    S, V = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V, scale=False)
    A = torch.softmax(S, dim=-1)
    return A @ V, A


def _attend_divided_by_d_k(x_query, x_memory, W_Q, W_K, W_V):
    S, V = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V, scale=False)
    A = torch.softmax(S / W_K.shape[1], dim=-1)
    return A @ V, A


def _attend_divided_by_sqrt_T(x_query, x_memory, W_Q, W_K, W_V):
    S, V = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V, scale=False)
    A = torch.softmax(S / math.sqrt(x_memory.shape[0]), dim=-1)
    return A @ V, A


def _attend_naive_exp(x_query, x_memory, W_Q, W_K, W_V):
    S, V = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V)
    E = torch.exp(S)
    A = E / E.sum(dim=-1, keepdim=True)
    return A @ V, A


def _attend_softmax_over_queries(x_query, x_memory, W_Q, W_K, W_V):
    S, V = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V)
    A = torch.softmax(S, dim=0)
    return A @ V, A


def _attend_keys_with_W_Q(x_query, x_memory, W_Q, W_K, W_V):
    return _attend_solution(x_query, x_memory, W_Q=W_Q, W_K=W_Q, W_V=W_V)


def _attend_values_with_W_K(x_query, x_memory, W_Q, W_K, W_V):
    return _attend_solution(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_K)


def _attend_memory_from_query(x_query, x_memory, W_Q, W_K, W_V):
    return _attend_solution(x_query, x_query, W_Q=W_Q, W_K=W_K, W_V=W_V)


def _attend_returns_scores(x_query, x_memory, W_Q, W_K, W_V):
    S, V = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V)
    return torch.softmax(S, dim=-1) @ V, S


def _attend_linear_convention(x_query, x_memory, W_Q, W_K, W_V):
    return _attend_solution(x_query, x_memory, W_Q=W_Q.T, W_K=W_K.T, W_V=W_V.T)


def _attend_values_not_projected(x_query, x_memory, W_Q, W_K, W_V):
    S, _ = _head_parts(x_query, x_memory, W_Q=W_Q, W_K=W_K, W_V=W_V)
    A = torch.softmax(S, dim=-1)
    return A @ x_memory, A


_WRONG_AXIS = "softmax over the wrong axis: each row (one query) must sum to 1 over the keys, so use dim=-1"
_UNSCALED = "you forgot to divide the scores by sqrt(d_k)"
_KEYS_WITH_W_Q = "the keys must be projected with W_K, not W_Q (K = x_memory W_K)"
_VALUES_WITH_W_K = "the values must be projected with W_V, not W_K (V = x_memory W_V)"
_FROM_QUERY = (
    "keys and values must come from x_memory, the tokens that answer; you made them from x_query, "
    "which only works in self-attention, where the two are the same tokens"
)
_SCORES = "these are the scores, not the weights: return A = softmax(S) (each row sums to 1)"
_LINEAR_CONVENTION = (
    "you multiplied by the transposed matrices (x W^T, nn.Linear's convention); this exercise uses the book's "
    "Q = x W_Q with W_Q of shape (d_model, d_k)"
)
_NOT_PROJECTED = "you averaged the raw tokens x_memory: the output averages the projected VALUES, V = x_memory W_V"


def _head_mistakes(args) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """What each known mistake gives on ``args``: (hint -> weights, hint -> output), where shapes allow."""
    x_query, x_memory, W_Q, W_K, W_V = args
    wrong = {
        _WRONG_AXIS: _attend_softmax_over_queries,
        _UNSCALED: _attend_unscaled,
        _FROM_QUERY: _attend_memory_from_query,
        _SCORES: _attend_returns_scores,
        SCALED_BY_D_K: _attend_divided_by_d_k,
        SCALED_BY_SQRT_T: _attend_divided_by_sqrt_T,
    }
    if W_Q.shape[0] == W_Q.shape[1] == W_V.shape[1]:  # square matrices: the transposes fit too
        wrong[_LINEAR_CONVENTION] = _attend_linear_convention
    wrong[_KEYS_WITH_W_Q] = _attend_keys_with_W_Q
    weights, outputs = {}, {}
    for hint, mistake in wrong.items():
        if hint == _FROM_QUERY and (x_query is x_memory or x_query.shape[0] != x_memory.shape[0]):
            continue  # the same as the right answer in self-attention; the wrong shape otherwise
        outputs[hint], weights[hint] = mistake(*args)
    if W_K.shape[1] == W_V.shape[1]:
        outputs[_VALUES_WITH_W_K] = _attend_values_with_W_K(*args)[0]
    if x_memory.shape[1] == W_V.shape[1]:
        outputs[_NOT_PROJECTED] = _attend_values_not_projected(*args)[0]
    return weights, outputs


def _pair_of_outputs(result):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"attend should return a pair (H, A), but returned {type(result).__name__}")
    return result


def _check_shapes(H, A, args, where: str) -> None:
    """Name the mistakes that show in the shapes alone (cross-attention with T_q != T_k, d_v != d_k)."""
    x_query, x_memory, _, W_K, W_V = args
    T_q, T_k, d_model = x_query.shape[0], x_memory.shape[0], x_query.shape[1]
    d_k, d_v = W_K.shape[1], W_V.shape[1]
    if isinstance(A, torch.Tensor) and tuple(A.shape) != (T_q, T_k):
        if T_q != T_k and tuple(A.shape) == (T_q, T_q):
            raise ExerciseFailure(f"A {where} has shape {tuple(A.shape)}, one column per QUERY token: {_FROM_QUERY}")
        if T_q != T_k and tuple(A.shape) == (T_k, T_q):
            raise ExerciseFailure(
                f"A {where} has shape {tuple(A.shape)}, but should have one row per query and one column per key, "
                f"({T_q}, {T_k}): compute S = Q K^T, not K Q^T"
            )
    if isinstance(H, torch.Tensor) and tuple(H.shape) != (T_q, d_v):
        if d_k not in (d_v, d_model) and tuple(H.shape) == (T_q, d_k):
            raise ExerciseFailure(
                f"H {where} has shape {tuple(H.shape)}, d_k columns instead of d_v={d_v}: {_VALUES_WITH_W_K}"
            )
        if d_model not in (d_v, d_k) and tuple(H.shape) == (T_q, d_model):
            raise ExerciseFailure(
                f"H {where} has shape {tuple(H.shape)}, d_model columns instead of d_v={d_v}: {_NOT_PROJECTED}"
            )


def _check_head_weights(A, expected, what: str, *, known: dict) -> None:
    A = require_tensor_like(A, expected, what)
    diagnose_weights(A, expected, what, known_mistakes=known)


def _head_case(generator, T_q, T_k, d_model, d_k, d_v, self_attention=False):
    """Random tokens and matrices; W's scaled by 1/sqrt(d_model) so the weights are neither flat nor one-hot."""
    x_query = torch.randn(T_q, d_model, generator=generator)
    x_memory = x_query if self_attention else torch.randn(T_k, d_model, generator=generator)
    W_Q, W_K, W_V = (torch.randn(d_model, d, generator=generator) / math.sqrt(d_model) for d in (d_k, d_k, d_v))
    return x_query, x_memory, W_Q, W_K, W_V


def _run_head_case(answer, args, where: str, *, atol: float = 1e-5, rtol: float = 1e-4) -> None:
    """Judge one case; ``atol``/``rtol``: how far a right answer computed in float32 may land from the reference (wider
    for scores in the hundreds, where float32's rounding of a score moves a weight by up to a few times 1e-5)."""
    x_query, x_memory, *matrices = args
    name_sizes(
        T_q=x_query.shape[0],
        T_k=x_memory.shape[0],
        d_model=x_query.shape[1],
        d_k=matrices[1].shape[1],
        d_v=matrices[2].shape[1],
    )
    if x_query is x_memory:
        shared = x_query.clone()
        given = (shared, shared, *(W.clone() for W in matrices))  # self-attention: one tensor in both roles
    else:
        given = tuple(t.clone() for t in args)
    H, A = _pair_of_outputs(call(answer, *given))
    _check_shapes(H, A, args, where=where)
    expected_H, expected_A = _reference_attend(*args)
    A = require_tensor_like(A, expected_A, f"A {where}")
    H = require_tensor_like(H, expected_H, f"H {where}")
    if torch.allclose(A, expected_A, atol=atol, rtol=rtol) and torch.allclose(H, expected_H, atol=atol, rtol=rtol):
        return  # right: no need to work out what the known mistakes would give
    known_weights, known_outputs = _head_mistakes(args)
    _check_head_weights(A, expected_A, f"A {where}", known=known_weights)
    diagnose(H, expected_H, f"H {where}", known_mistakes=known_outputs)


def _check_attend(answer) -> None:
    generator = random_generator()
    # Case 1: self-attention with square matrices (every known mistake still has the right shape).
    args = _head_case(generator, T_q=5, T_k=5, d_model=4, d_k=4, d_v=4, self_attention=True)
    _run_head_case(answer, args, "(self-attention, T=5, d_model=d_k=d_v=4)")
    # Case 2: cross-attention between two different sequences of the same length.
    args = _head_case(generator, T_q=4, T_k=4, d_model=5, d_k=3, d_v=3)
    _run_head_case(answer, args, "(cross-attention, T_q=T_k=4, d_model=5, d_k=d_v=3)")
    # Case 3: cross-attention with T_q != T_k and d_v != d_k, at random sizes; then one query.
    for _ in range(3):
        T_q, T_k = (int(n) for n in torch.randint(1, 9, (2,), generator=generator))
        while T_k == T_q:
            T_k = int(torch.randint(1, 9, (), generator=generator))
        d_model, d_k = (int(n) for n in torch.randint(2, 9, (2,), generator=generator))
        d_v = d_k + 1 + int(torch.randint(0, 4, (), generator=generator))
        args = _head_case(generator, T_q, T_k, d_model=d_model, d_k=d_k, d_v=d_v)
        _run_head_case(
            answer, args, f"(cross-attention, T_q={T_q}, T_k={T_k}, d_model={d_model}, d_k={d_k}, d_v={d_v})"
        )
    args = _head_case(generator, T_q=1, T_k=6, d_model=3, d_k=2, d_v=5)
    _run_head_case(answer, args, "(cross-attention, one query, T_k=6, d_model=3, d_k=2, d_v=5)")
    # Case 4: large scores. With W_Q = 1000 W_K every token's score with itself is
    # 1000 |x W_K|^2 / sqrt(d_k), hundreds or more: exp() overflows unless each row's maximum is
    # subtracted first. Tokens 1 and 3 are equal, so their scores tie.
    x_query, _, _, W_K, W_V = _head_case(generator, T_q=5, T_k=5, d_model=4, d_k=3, d_v=3, self_attention=True)
    x_query[3] = x_query[1]
    args = (x_query, x_query, 1000.0 * W_K, W_K, W_V)
    H, A = _pair_of_outputs(call(answer, x_query.clone(), x_query.clone(), *(W.clone() for W in args[2:])))
    A = require_tensor_like(A, _reference_attend(*args)[1], "A (self-attention with scores in the hundreds)")
    if not torch.isfinite(A).all():
        raise ExerciseFailure(
            "A contains nan or inf when the scores are large (hundreds): exp() overflowed. Subtract each row's "
            "largest score before exp (the softmax does not change), or use torch.softmax"
        )
    # A right answer's weight moved by 2.35e-5 here (1 run in 400): float32 rounds scores in the hundreds.
    _run_head_case(
        answer, args, "(self-attention with scores in the hundreds and two equal tokens)", atol=1e-4, rtol=1e-3
    )


register(
    "2.1",
    "One attention head with projections",
    _check_attend,
    answer="attend",
    solution=_attend_solution,
    mistakes=[
        Mistake("no sqrt(d_k) scale", _attend_unscaled, "forgot to divide the scores by sqrt(d_k)"),
        Mistake("softmax over the queries", _attend_softmax_over_queries, "softmax over the wrong axis"),
        Mistake("keys projected with W_Q", _attend_keys_with_W_Q, "projected with W_K, not W_Q"),
        Mistake("values projected with W_K", _attend_values_with_W_K, "projected with W_V, not W_K"),
        Mistake("keys and values from x_query", _attend_memory_from_query, "must come from x_memory"),
        Mistake("returned the scores", _attend_returns_scores, "these are the scores, not the weights"),
        Mistake("nn.Linear's transposed convention", _attend_linear_convention, "transposed matrices"),
        Mistake("values not projected", _attend_values_not_projected, "you averaged the raw tokens"),
        Mistake("divided by d_k", _attend_divided_by_d_k, SCALED_BY_D_K),
        Mistake("divided by sqrt(T)", _attend_divided_by_sqrt_T, SCALED_BY_SQRT_T),
        Mistake("exp without subtracting the maximum", _attend_naive_exp, "exp() overflowed"),
    ],
)

# ---------------------------------------------------------------------------------
# 2.2 Design keys for a blend


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
        d_k += d_k == 3  # never 3 keys of 3 features: keys given as columns would have the right shape
        direction = torch.randn(d_k, generator=generator)
        query = direction / direction.norm() * (1.0 + 4.0 * float(torch.rand((), generator=generator)))  # |q| in [1, 5]
        keys = call(answer, query.clone(), share)
        keys = require_tensor_like(
            keys, torch.zeros(3, d_k), f"your keys (for a query of size d_k={d_k})", axes=("key", "feature")
        )
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
    "2.2",
    "Design keys for a chosen blend",
    _check_design_keys,
    answer="design_keys",
    solution=_design_keys_solution,
    mistakes=[
        Mistake("scores equal to the shares", _keys_with_scores_equal_to_shares, "softmax exponentiates the scores"),
        Mistake("forgot the sqrt(d_k) scale", _keys_without_sqrt, "divided by sqrt(d_k) before the softmax"),
        Mistake("third key not suppressed", _keys_with_zero_third_key, "the third key still gets weight"),
    ],
)

# ---------------------------------------------------------------------------------
# 2.3 Design a previous-token head

PREVIOUS_TOKEN_WEIGHT = 0.9  # every position i >= 1 must put at least this much weight on i - 1


def _previous_token_solution(T: int, d_content: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W_Q, W_K of shape (T + d_content, d_k) with which every position i >= 1 attends to i - 1.

    Token t is x_t = [e_t, c_t]: a one-hot position (T entries), then d_content features of content.
    """
    d_k = T  # one query/key feature per position
    W_Q = torch.zeros(T + d_content, d_k)
    W_K = torch.zeros(T + d_content, d_k)
    W_K[:T, :] = torch.eye(T)  # the key of position j is e_j; content rows stay 0
    W_Q[1:T, : T - 1] = torch.eye(T - 1)  # the query of position i is e_(i-1); position 0 asks for nothing
    # Scores are then s on (i, i - 1) and 0 elsewhere. Softmax gives i - 1 the weight
    # e^s / (e^s + T - 1), so s = ln(100 T) gives over 0.99; the factor sqrt(d_k) undoes the scale.
    W_Q *= math.sqrt(d_k) * math.log(100 * T)
    return W_Q, W_K


def _shift_projections(T: int, d_content: int, offset: int, *, strength: float | None = None):
    """Position i asks for position i + offset (offset -1: the previous token); no content."""
    W_Q = torch.zeros(T + d_content, T)
    W_K = torch.zeros(T + d_content, T)
    W_K[:T, :] = torch.eye(T)
    for i in range(T):
        if 0 <= i + offset < T:
            W_Q[i, i + offset] = 1.0
    W_Q *= math.sqrt(T) * math.log(100 * T) if strength is None else strength
    return W_Q, W_K


def _previous_token_attends_to_itself(T, d_content):
    return _shift_projections(T, d_content, 0)


def _previous_token_attends_to_next(T, d_content):
    W_Q, W_K = _previous_token_solution(T, d_content)
    return W_K * W_Q.abs().max(), W_Q / W_Q.abs().max()  # the two matrices swapped: the transpose of the shift


def _previous_token_unscaled(T, d_content):
    return _shift_projections(T, d_content, -1, strength=1.0)


def _previous_token_fixed_strength(T, d_content):
    """Right direction, but a scale that does not grow with T: fine for short sequences only."""
    return _shift_projections(T, d_content, -1, strength=5.0 * math.sqrt(T))  # enough up to T = 17


def _previous_token_content_leaks(T, d_content):
    """Right for positions, but the content features take part in the scores too."""
    W_Q, W_K = _shift_projections(T, d_content, -1)
    d = T + d_content
    padded_Q, padded_K = torch.zeros(d, d), torch.zeros(d, d)
    padded_Q[:, :T], padded_K[:, :T] = W_Q, W_K
    padded_Q[T:, T:] = torch.eye(d_content) * W_Q.abs().max()
    padded_K[T:, T:] = torch.eye(d_content)
    return padded_Q, padded_K


def _tokens(T: int, content: torch.Tensor) -> torch.Tensor:
    """(T, T + d_content): row t is [one-hot position t, content of token t], in float64."""
    return torch.cat([torch.eye(T, dtype=torch.float64), content.to(torch.float64)], dim=1)


def _head_weights(X: torch.Tensor, W_Q: torch.Tensor, W_K: torch.Tensor) -> torch.Tensor:
    """(T, T) weights of the head, softmax(X W_Q (X W_K)^T / sqrt(d_k)) row by row."""
    Q, K = X @ W_Q, X @ W_K  # (T, d_k), (T, d_k)
    return scaled_dot_product_attention(Q, K, K)[1]  # (T, T)


def _previous_weight(A: torch.Tensor) -> torch.Tensor:
    """(T - 1,): the weight each position i >= 1 puts on i - 1."""
    return A.diagonal(offset=-1)


def _passes(A: torch.Tensor) -> bool:
    return bool((_previous_weight(A) >= PREVIOUS_TOKEN_WEIGHT).all())


def _explain_position_failure(A: torch.Tensor, T: int, where: str) -> ExerciseFailure:
    """Say what the head does with positions alone (content zero), and how to fix it."""
    if torch.isnan(A).any():
        return ExerciseFailure(f"{where} the weights contain nan: your scores overflow to inf. Use a smaller factor")
    positions = torch.arange(1, T)
    top = A[1:].argmax(dim=1)  # (T - 1,): where each position i >= 1 puts its largest weight
    if (top == positions).all():
        return ExerciseFailure(
            f"{where} every position puts its largest weight on ITSELF (the diagonal): the query of position i "
            "must match the key of position i - 1, not its own key"
        )
    previous = _previous_weight(A)
    others = A[1:].clone()
    others[torch.arange(T - 1), torch.arange(T - 1)] = float("inf")  # leave out i - 1 itself
    if T > 2 and (previous < others.min(dim=1).values - 1e-9).all():
        return ExerciseFailure(
            f"{where} every position i >= 1 gives i - 1 its SMALLEST weight: the score of i - 1 is below the others, "
            "so your factor has the wrong sign. Make it positive"
        )
    inner = positions[:-1]  # positions that have a next one
    if T > 2 and (top[:-1] == inner + 1).all():
        return ExerciseFailure(
            f"{where} position i looks at the NEXT position i + 1: your shift runs the wrong way. Transpose it "
            "(or swap W_Q and W_K)"
        )
    if (top == positions - 1).all():
        weights = _previous_weight(A)
        worst = int(weights.argmin())
        return ExerciseFailure(
            f"{where} every position i >= 1 prefers i - 1, but position {worst + 1} gives it only "
            f"{weights[worst]:.2f} (it needs {PREVIOUS_TOKEN_WEIGHT}): the weights are too flat, scale your scores "
            "up. The other T - 1 keys share what i - 1 does not take, so the gap between the scores must grow "
            f"with T (here T = {T}), and the scores are divided by sqrt(d_k) before the softmax"
        )
    wrong = int((top != positions - 1).nonzero()[0])
    return ExerciseFailure(
        f"{where} position {wrong + 1} puts its largest weight on position {int(top[wrong])}, not on "
        f"{wrong}; position i's query must match the key of position i - 1"
    )


def _previous_token_case(answer, T: int, d_content: int, generator: torch.Generator) -> None:
    where = f"for T={T} and d_content={d_content}:"
    result = call(answer, T, d_content)
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"return a pair (W_Q, W_K), but {where} a {type(result).__name__} came back")
    W_Q, W_K = result
    for name, W in (("W_Q", W_Q), ("W_K", W_K)):
        if not isinstance(W, torch.Tensor) or W.dim() != 2 or W.shape[0] != T + d_content:
            shape = tuple(W.shape) if isinstance(W, torch.Tensor) else type(W).__name__
            raise ExerciseFailure(
                f"{where} {name} should have shape (T + d_content, d_k) = ({T + d_content}, d_k), one row per "
                f"feature of a token, but is {shape}"
            )
    if W_Q.shape != W_K.shape:
        raise ExerciseFailure(
            f"{where} W_Q has shape {tuple(W_Q.shape)} and W_K {tuple(W_K.shape)}: queries and keys meet in a dot "
            "product, so both need the same d_k columns"
        )
    W_Q, W_K = W_Q.detach().to(torch.float64), W_K.detach().to(torch.float64)
    if not (torch.isfinite(W_Q).all() and torch.isfinite(W_K).all()):
        raise ExerciseFailure(f"{where} W_Q or W_K contains nan or inf: keep every number finite")
    # Positions alone first (content all zero), then with random content of several sizes.
    positions_only = _tokens(T, torch.zeros(T, d_content))
    A = _head_weights(positions_only, W_Q, W_K)
    if not _passes(A):
        raise _explain_position_failure(A, T, where)
    for size in (1.0, 3.0):
        X = _tokens(T, size * torch.randn(T, d_content, generator=generator, dtype=torch.float64))
        A = _head_weights(X, W_Q, W_K)
        if torch.isnan(A).any() or not _passes(A):
            weights = _previous_weight(A)
            worst = int(weights.nan_to_num(0.0).argmin())
            raise ExerciseFailure(
                f"{where} with positions alone your head works, but once the tokens carry content (random numbers) "
                f"position {worst + 1} gives i - 1 only {weights[worst]:.2f}: the content changes where it looks. Make "
                f"the rows of W_Q and W_K that multiply the content features (rows {T} to {T + d_content - 1}) zero"
            )


def _check_previous_token(answer) -> None:
    generator = random_generator()
    # T = 8 first: there the self, next and flat patterns are all unambiguous.
    lengths = [8, 3, int(torch.randint(4, 33, (), generator=generator)), 64, 2]
    for T in lengths:
        d_content = int(torch.randint(1, 7, (), generator=generator))
        _previous_token_case(answer, T, d_content, generator=generator)
    _previous_token_case(answer, T=5, d_content=0, generator=generator)  # tokens that are positions only


register(
    "2.3",
    "Design a previous-token head",
    _check_previous_token,
    answer="previous_token_projections",
    solution=_previous_token_solution,
    mistakes=[
        Mistake("attends to itself", _previous_token_attends_to_itself, "on ITSELF"),
        Mistake("attends to the next token", _previous_token_attends_to_next, "the NEXT position i + 1"),
        Mistake("scores not scaled up", _previous_token_unscaled, "scale your scores up"),
        Mistake("a scale that does not grow with T", _previous_token_fixed_strength, "must grow with T"),
        Mistake("content not zeroed", _previous_token_content_leaks, "the content changes where it looks"),
    ],
)


# ---------------------------------------------------------------------------------
# Properties (see _core's docstring): what an answer breaks, probed one idea at a time.

_EXTRA = 3  # d_model = d_k + 3 in the probes, so that sqrt(d_model) is not sqrt(d_k)


def _head_inputs(Q: torch.Tensor, K: torch.Tensor, d_v: int = 11):
    """Tokens and matrices whose projections are Q and K exactly: x = [Q, 0], W_Q = W_K = [I; 0]."""
    d = Q.shape[1]
    pad = lambda X: torch.cat([X, torch.zeros(X.shape[0], _EXTRA)], dim=1)
    W = torch.cat([torch.eye(d), torch.zeros(_EXTRA, d)], dim=0)  # (d_model, d_k)
    W_V = _randn(51, d + _EXTRA, d_v)
    return pad(Q), pad(K), W.clone(), W.clone(), W_V


def _head_weights_of(answer, Q, K):
    x_query, x_memory, W_Q, W_K, W_V = _head_inputs(Q, K)
    H, A = probe_pair(answer(x_query, x_memory, W_Q, W_K, W_V))
    return probe_tensor(A, (Q.shape[0], K.shape[0]))


def _head_output(answer, Q, K, V):
    x_query, x_memory, W_Q, W_K, W_V = _head_inputs(Q, K)
    H, A = probe_pair(answer(x_query, x_memory, W_Q, W_K, W_V))
    A = probe_tensor(A, (Q.shape[0], K.shape[0]))
    return probe_tensor(H, (Q.shape[0], W_V.shape[1])), A, (x_memory @ W_V).double()


def _memory_probe(answer):
    """Keys and values come from x_memory: with the query tokens changed, each query's weights follow its own
    tokens, and the weights do not depend on W_V."""
    Q, K = _randn(52, 3, 4), _randn(53, 5, 4)
    x_query, x_memory, W_Q, W_K, W_V = _head_inputs(Q, K)
    H, A = probe_pair(answer(x_query, x_memory, W_Q, W_K, W_V))
    A = probe_tensor(A, (3, 5))
    _, A_other_values = probe_pair(answer(x_query, x_memory, W_Q, W_K, 2.0 * W_V + 1.0))
    if not torch.allclose(probe_tensor(A_other_values, (3, 5)), A, atol=1e-6):
        return "changing W_V changed the weights: the weights come from the queries (x_query W_Q) and keys (x_memory W_K) alone; W_V only makes the values"
    if isinstance(H, torch.Tensor) and tuple(H.shape) == tuple(x_memory[:3].shape):
        if torch.allclose(H.detach().double(), A @ x_memory.double(), atol=1e-5):
            return (
                "your output averages the raw tokens x_memory: project the values first, V = x_memory W_V, then H = A V"
            )
    return None


def _roles_probe(answer) -> str | None:
    """Cross-attention with 4 query and 4 memory tokens (so that swapped roles still run): the weights must not be
    those of the queries taken from x_memory, or of K Q^T."""
    generator = torch.Generator().manual_seed(58)
    x_query, x_memory = torch.randn(4, 5, generator=generator), torch.randn(4, 5, generator=generator)
    W_Q, W_K, W_V = (torch.randn(5, d, generator=generator) / 5**0.5 for d in (3, 3, 2))
    H, A = probe_pair(answer(x_query, x_memory, W_Q, W_K, W_V))
    A = probe_tensor(A, (4, 4)).float()
    weights = lambda Q, K: torch.softmax(Q @ K.T / math.sqrt(3), dim=-1)
    if torch.allclose(A, weights(x_memory @ W_Q, x_query @ W_K), atol=1e-5):
        return (
            "your weights are those of queries made from x_memory and keys made from x_query: you swapped the roles. The "
            "queries come from x_query (Q = x_query W_Q) and the keys from x_memory (K = x_memory W_K)"
        )
    if torch.allclose(A, weights(x_query @ W_Q, x_query @ W_K), atol=1e-5):
        return (
            "your weights are those of keys made from x_query: the keys come from x_memory, the tokens that answer "
            "(K = x_memory W_K); from x_query they are right only in self-attention"
        )
    if torch.allclose(A, weights(x_memory @ W_Q, x_memory @ W_K), atol=1e-5):
        return "your weights are those of queries made from x_memory: the queries come from x_query (Q = x_query W_Q)"
    if torch.allclose(A, weights(x_memory @ W_K, x_query @ W_Q), atol=1e-5):
        return (
            "your weights are softmax(K Q^T): one row per key. Compute S = Q K^T (Q @ K.T), so that row i holds query "
            "i's weights over the keys"
        )
    return None


def _sources_probe(answer):
    """Cross-attention with more queries (6) than memory tokens (4): the queries come from x_query, the keys
    and values from x_memory."""
    sentence = _roles_probe(answer)
    if sentence:
        return sentence
    generator = torch.Generator().manual_seed(55)
    x_query, x_memory = torch.randn(6, 5, generator=generator), torch.randn(4, 5, generator=generator)
    W_Q, W_K, W_V = (torch.randn(5, d, generator=generator) / 5**0.5 for d in (3, 3, 2))
    H, A = probe_pair(answer(x_query, x_memory, W_Q, W_K, W_V))
    if isinstance(A, torch.Tensor) and tuple(A.shape) == (4, 4):
        return "with 6 query tokens and 4 memory tokens your A has shape (4, 4), one row per MEMORY token: the queries come from x_query (Q = x_query W_Q), one row of A per query token"
    if isinstance(A, torch.Tensor) and tuple(A.shape) == (6, 6):
        return "with 6 query tokens and 4 memory tokens your A has shape (6, 6), one column per QUERY token: the keys come from x_memory (K = x_memory W_K), one column of A per memory token"
    if isinstance(A, torch.Tensor) and tuple(A.shape) == (4, 6):
        Q_m, K_q = x_memory @ W_Q, x_query @ W_K
        swapped = torch.softmax(Q_m @ K_q.T / math.sqrt(3), dim=-1)
        if torch.allclose(A.detach().float(), swapped, atol=1e-5):
            return (
                "with 6 query tokens and 4 memory tokens your A has shape (4, 6), one row per MEMORY token: you swapped "
                "the roles. The queries come from x_query (Q = x_query W_Q) and the keys from x_memory (K = x_memory W_K)"
            )
        return (
            "with 6 query tokens and 4 memory tokens your A has shape (4, 6), one row per key and one column per query: "
            "compute S = Q K^T (Q @ K.T), not K Q^T, so that row i holds query i's weights over the keys"
        )
    A = probe_tensor(A, (6, 4))
    H = probe_tensor(H, (6, 2))
    values = (x_memory @ W_V).double()
    if torch.allclose(H, A @ values, atol=1e-5):
        return None
    if torch.allclose(H, A @ (x_query @ W_V).double()[:4], atol=1e-5):
        return "your output averages values made from x_query: the values come from the memory tokens, V = x_memory W_V"
    return None  # the values property below says more


def _head_pair(answer):
    """Cross-attention with T_q = 3, T_k = 5, d_v = 2 (and d_model = 6, d_k = 4): the answer's pair and its values."""
    generator = torch.Generator().manual_seed(56)
    x_query, x_memory = torch.randn(3, 6, generator=generator), torch.randn(5, 6, generator=generator)
    W_Q, W_K, W_V = (torch.randn(6, d, generator=generator) / 6**0.5 for d in (4, 4, 2))
    return answer(x_query, x_memory, W_Q, W_K, W_V), x_memory @ W_V


def _rectangular_head(answer):
    generator = torch.Generator().manual_seed(57)
    x_query, x_memory = torch.randn(6, 5, generator=generator), torch.randn(4, 5, generator=generator)
    W_Q, W_K, W_V = (torch.randn(5, d, generator=generator) for d in (3, 3, 2))
    return answer(x_query, x_memory, W_Q, W_K, W_V)


add_properties(
    "2.1",
    [
        Property("the pair (H, A): the output first, then the weights", output_pair_probe(_head_pair)),
        Property(
            "no randomness (the same inputs give the same H and A)", determinism_probe(lambda a: _head_pair(a)[0])
        ),
        Property("the sources (queries from x_query; keys and values from x_memory)", _sources_probe),
        *attention_properties(_head_weights_of, sizes=lambda d: {"d_model": d + _EXTRA, "d_v": 11}),
        Property("the values (the weights do not depend on W_V; H = A V with V = x_memory W_V)", _memory_probe),
        Property(
            "the output H = A V (each output row averages the VALUE rows with that query's weights)",
            values_probe(_head_output, keys_like_values=False),
        ),
        Property(
            "the shapes (x W with W of shape (d_model, d); every query meets every key)",
            crash_probe(_rectangular_head, T_q=6, T_k=4, d_model=5, d_k=3, d_v=2),
        ),
    ],
)


def _blend_probe(answer):
    for norm in (2.5, 1.0):  # |q| = 1 alone would hide a key divided by |q| instead of |q|^2
        sentence = _blend_sentence(answer, norm)
        if sentence:
            return sentence
    return None


def _blend_sentence(answer, norm: float):
    query = _randn(54, 5)
    query = norm * query / query.norm()
    share = 0.25
    keys = probe_tensor(answer(query.clone(), share), (3, 5))
    q = query.double()
    raw = keys @ q
    weights = torch.softmax(raw / math.sqrt(5), dim=0)
    target = torch.tensor([share, 1 - share, 0.0], dtype=torch.float64)
    if torch.allclose(weights, target, atol=1e-3):
        return None
    shown = "(" + ", ".join(f"{float(w):.3f}" for w in weights) + ")"
    where = f"for share = 0.25 and a query of length |q| = {norm:g}, your keys give the weights {shown}"
    log_odds = math.log(share / (1 - share))
    if weights[2] > 1e-3 and torch.allclose(weights[:2] / weights[:2].sum(), target[:2], atol=1e-3):
        return f"{where}: the third key still takes {float(weights[2]):.3f}; give it a score far below the other two"
    if abs(float(raw[0] - raw[1]) - log_odds) < 1e-3:
        return (
            f"{where}: their dot products with the query differ by log(share / (1 - share)) = {log_odds:.3f}, but the "
            "scores are these divided by sqrt(d_k) = sqrt(5) before the softmax: multiply the keys by sqrt(d_k)"
        )
    if torch.allclose(weights, target[[1, 0, 2]], atol=1e-3):
        return f"{where}: the shares are swapped; the FIRST key gets the weight share"
    if torch.allclose(raw[:2] / math.sqrt(5), target[:2].exp(), atol=1e-3):
        return (
            f"{where}: your scaled scores are exp(share) and exp(1 - share); the softmax exponentiates the scores "
            "itself, so the scores are the logs of the shares, log(share) and log(1 - share), and the third far below"
        )
    if torch.allclose(raw[:2] / math.sqrt(5), target[:2], atol=1e-3):
        return (
            f"{where}: your scaled scores are the shares themselves ({share:g} and {1 - share:g}), but the softmax "
            "exponentiates the scores: make the two scaled scores differ by log(share / (1 - share)) and the third far below"
        )
    gap = float(raw[0] - raw[1]) / math.sqrt(5)  # the difference of the two scaled scores
    for factor, cause in (
        (norm, "your scores grow with |q|: divide the direction by q.q = |q|^2, not by |q|"),
        (
            norm**2,
            "your scores grow with |q|^2: divide the direction by q.q = |q|^2, so the scores do not depend on |q|",
        ),
    ):
        if norm != 1.0 and abs(gap - factor * log_odds) < 1e-3 * max(1.0, abs(factor * log_odds)):
            return f"{where}: {cause}"
    if abs(gap - math.log10(share / (1 - share))) < 1e-3:
        return (
            f"{where}: the scores differ by log10(share / (1 - share)); the softmax exponentiates with base e, so use "
            "the natural log (math.log)"
        )
    return (
        f"{where}, not (0.250, 0.750, 0.000): the softmax makes weights proportional to exp(score), so the two scaled "
        "scores q.k / sqrt(d_k) must differ by log(share / (1 - share)) whatever the length of q, and the third be far below both"
    )


add_properties("2.2", [Property("the blend (weights share, 1 - share and about 0 for the query)", _blend_probe)])


def _previous_token_alone(answer):
    return probe_from_check(_previous_token_case, 8, 0, torch.Generator().manual_seed(0))(answer)


def _previous_token_with_content(answer):
    return probe_from_check(_previous_token_case, 8, 3, torch.Generator().manual_seed(0))(answer)


def _previous_token_long(answer):
    return probe_from_check(_previous_token_case, 64, 2, torch.Generator().manual_seed(0))(answer)


def _previous_token_shapes(answer):
    result = answer(8, 2)
    W_Q, W_K = probe_pair(result)
    for name, W in (("W_Q", W_Q), ("W_K", W_K)):
        if not isinstance(W, torch.Tensor):
            return (
                f"{name} is {type(W).__module__}.{type(W).__name__}: return torch tensors (torch.zeros, torch.eye, ...)"
            )
        if isinstance(W, torch.Tensor) and (W.dim() != 2 or W.shape[0] != 10):
            return (
                f"for T = 8 and d_content = 2, {name} has shape {tuple(W.shape)}, but it multiplies tokens of T + d_content = 10 "
                "features from the right (x W), so it needs one ROW per feature: shape (10, d_k)"
            )
    return None


add_properties(
    "2.3",
    [
        Property("the shapes (W_Q and W_K are tensors with one row per feature of a token)", _previous_token_shapes),
        Property(
            "the previous token (position i puts at least 0.9 on i - 1; T = 8, positions only)", _previous_token_alone
        ),
        Property("content ignored (random content must not move where it looks)", _previous_token_with_content),
        Property("a long sequence (T = 64: the score gap must grow with T)", _previous_token_long),
    ],
)
