"""Exercises of chapter 1, "Attention as a weighted sum".

1.1 Design a query that gives a chosen key a chosen weight p (scaled dot products, the softmax
    over all the keys, and a longer key that outscores the chosen one along its direction).
1.2 The values behind given outputs of causal attention: V with A V = H (the weighted sum undone,
    with the causal mask and the scale).
1.3 Design a query and two keys for which the sqrt(d_k) scale decides between a
    near-hard and a soft choice, or say that none exist for this d_k.
1.4 Bahdanau's additive attention: scores tanh(q_i W_1 + k_j W_2) w, then weights and outputs.
1.5 The influence of every token on a recurrent layer's last state, relative to the last token's.
1.6 The longest sequence for which self-attention (with W_O) does less work than a recurrent layer with g gates.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.attention_scores`, :func:`~attention_book.softmax`, or what the
answer must achieve: key j's weight, the outputs A V) and recognises typical wrong answers by
what they compute.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import torch

from ..attention import attention_scores, softmax
from ._core import (
    ExerciseFailure,
    Inconclusive,
    Mistake,
    Property,
    add_properties,
    call,
    diagnose,
    name_sizes,
    probe_pair,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)
from ._probes import (
    _randn,
    attention_properties,
    output_pair_probe,
    values_probe,
)

# ---------------------------------------------------------------------------------
# 1.1 Design: a query that gives a chosen key a chosen weight

WEIGHT_TOLERANCE = 1e-3  # key j's weight may miss p by this much

# The hints' fragments, shared by the probes, the checker and the registered mistakes.
QW_SHAPE = "return the query"
QW_INDEX = "keys are counted from 0"
QW_UNSCALED = "only without the scale"
QW_BY_D_K = "when the scores are divided by d_k"
QW_AWAY = "points away from key"
QW_ONE_OTHER = "against one other key"
QW_ALONG = "points along key"


def _query_for_weight_solution(keys: torch.Tensor, j: int, p: float) -> torch.Tensor:
    """A query (d_k,) that gives key j of keys (T, d_k), T <= d_k and independent, the weight p."""
    T, d_k = keys.shape
    one_hot = torch.zeros(T, dtype=keys.dtype)
    one_hot[j] = 1.0
    direction = torch.linalg.pinv(keys) @ one_hot  # (d_k,): dot product 1 with key j, 0 with the others
    score = math.log(p * (T - 1) / (1 - p))  # key j's scaled score: e^s / (e^s + T - 1) = p
    return math.sqrt(d_k) * score * direction


def _direction(keys: torch.Tensor, j: int) -> torch.Tensor:
    one_hot = torch.zeros(keys.shape[0], dtype=keys.dtype)
    one_hot[j] = 1.0
    return torch.linalg.pinv(keys) @ one_hot


def _qw_along_key(keys, j, p):
    """A query along key j whose own scaled score is the solution's: the other keys' scores are not 0."""
    T, d_k = keys.shape
    return math.sqrt(d_k) * math.log(p * (T - 1) / (1 - p)) * keys[j] / (keys[j] @ keys[j])


def _qw_unscaled(keys, j, p):
    T = keys.shape[0]
    return math.log(p * (T - 1) / (1 - p)) * _direction(keys, j)


def _qw_by_d_k(keys, j, p):
    T, d_k = keys.shape
    return d_k * math.log(p * (T - 1) / (1 - p)) * _direction(keys, j)


def _qw_one_other(keys, j, p):
    return math.sqrt(keys.shape[1]) * math.log(p / (1 - p)) * _direction(keys, j)


def _qw_counted_from_1(keys, j, p):
    return _query_for_weight_solution(keys, j - 1, p)


def _qw_points_away(keys, j, p):
    return -_query_for_weight_solution(keys, j, p)


def _qw_weights(keys, j, p):
    query = _query_for_weight_solution(keys, j, p)
    return torch.softmax(keys @ query / math.sqrt(keys.shape[1]), dim=-1)


def _weights_for(keys: torch.Tensor, query: torch.Tensor, divisor: float | None = None) -> torch.Tensor:
    """softmax(keys @ query / divisor) in float64; the divisor is sqrt(d_k) unless given."""
    divisor = math.sqrt(keys.shape[-1]) if divisor is None else divisor
    return torch.softmax(keys.double() @ query.double() / divisor, dim=-1)


def _short_vector(values: torch.Tensor) -> str:
    return "[" + ", ".join(f"{float(value):.3g}" for value in values) + "]"


def _answer_query(answer, keys: torch.Tensor, j: int, *, p: float, where: str) -> torch.Tensor:
    """The answer's query as float64 (d_k,); a wrong type, shape or a non-finite number is an ExerciseFailure."""
    T, d_k = keys.shape
    got = call(answer, keys.clone(), j, p)
    if isinstance(got, torch.Tensor) and tuple(got.shape) == (T,) and T != d_k:
        raise ExerciseFailure(
            f"{where} you returned a tensor of shape ({T},), one number per key (scores or weights?): {QW_SHAPE}, a "
            f"vector of shape ({d_k},) whose scaled dot products with the keys give key {j} the weight {p:g}"
        )
    query = require_tensor_like(got, torch.zeros(d_k, dtype=torch.float64), f"the query ({where.strip()})")
    if not torch.isfinite(query).all():
        raise ExerciseFailure(f"{where} your query contains nan or inf: {_short_vector(query)}")
    return query


def _along_key_sentence(keys: torch.Tensor, j: int, *, got: str) -> str:
    """What a query along key j gets wrong: the other keys' dot products with k_j, and a longer key's lead."""
    T = keys.shape[0]
    dots = keys.double() @ keys[j].double()
    rival = max((i for i in range(T) if i != j), key=lambda i: float(dots[i]))
    beaten = (
        f"; key {rival} even outscores it along that direction (k_{rival} . k_{j} = {float(dots[rival]):.3g} > "
        f"k_{j} . k_{j} = {float(dots[j]):.3g}): a dot product rewards length, not only direction"
        if dots[rival] > dots[j]
        else ""
    )
    return (
        f"{got}: your query {QW_ALONG} {j}, so the other keys' scores are not 0 (their dot products with k_{j} "
        f"are {_short_vector(torch.cat([dots[:j], dots[j + 1 :]]))}){beaten}. Choose its direction so that the "
        "other keys' scores do not get in the way"
    )


def _query_diagnosis(keys: torch.Tensor, query: torch.Tensor, j: int, *, p: float) -> str | None:
    """None when key j's weight is p; otherwise what the query got wrong, in one sentence."""
    T, d_k = keys.shape
    weights = _weights_for(keys, query)
    close = lambda weight: abs(float(weight) - p) <= WEIGHT_TOLERANCE
    if close(weights[j]):
        return None
    got = f"key {j} gets weight {float(weights[j]):.4f}, not {p:g}"
    others = [i for i in range(T) if i != j and close(weights[i])]
    if others:
        return (
            f"key {others[0]} got the weight {p:g} and key {j} got {float(weights[j]):.4f}: {QW_INDEX}, so key j is "
            f"keys[j], row {j} of the keys"
        )
    if float(query @ keys[j].double()) > (1 - 1e-6) * float(query.norm() * keys[j].double().norm()):
        return _along_key_sentence(keys, j, got=got)
    if close(_weights_for(keys, query, 1.0)[j]):
        return (
            f"{got}: your query gives it the weight {p:g} {QW_UNSCALED}. Attention divides every dot product by "
            f"sqrt(d_k) = {math.sqrt(d_k):.3g} before the softmax, so the dot products must be sqrt(d_k) times larger"
        )
    if close(_weights_for(keys, query, float(d_k))[j]):
        return (
            f"{got}: your query would give it the weight {p:g} {QW_BY_D_K}, but attention divides them by "
            f"sqrt(d_k) = {math.sqrt(d_k):.3g}, not d_k = {d_k}"
        )
    if close(_weights_for(keys, -query)[j]):
        return f"{got}: your query {QW_AWAY} {j}: minus your query gives the weight {p:g}, so flip its sign"
    scores = keys.double() @ query / math.sqrt(d_k)
    rest = torch.cat([scores[:j], scores[j + 1 :]])
    if float(rest.max() - rest.min()) <= 1e-4 * max(1.0, float(scores.abs().max())):  # float32 leaves ~1e-6
        gap = float(scores[j] - rest[0])
        if abs(gap - math.log(p / (1 - p))) < 1e-3:
            return (
                f"{got}: key {j}'s scaled score leads the others by ln(p / (1 - p)) = {gap:.3g}, which gives the "
                f"weight p {QW_ONE_OTHER}; here there are T - 1 = {T - 1} others, and each keeps a weight "
                "proportional to e^(its score)"
            )
        return (
            f"{got}: your query gives the other keys equal scores, so key {j}'s weight is e^g / (e^g + T - 1) with "
            f"g = {gap:.3g}, its scaled score's lead over theirs; choose the lead g that makes this p"
        )
    return (
        f"{got} (your query's scaled scores are {_short_vector(scores)}): key j's weight is e^(s_j) divided by the sum "
        "of e^(s_i) over ALL the keys, with s_i = q . k_i / sqrt(d_k)"
    )


def _query_case(answer, keys: torch.Tensor, j: int, *, p: float, what: str) -> None:
    where = f"for {what} ({keys.shape[0]} keys of size d_k = {keys.shape[1]}), key j = {j} and p = {p:g}"
    query = _answer_query(answer, keys, j, p=p, where=where)
    sentence = _query_diagnosis(keys, query, j, p=p)
    if sentence:
        raise ExerciseFailure(f"{where}: {sentence}")


def _check_query_for_weight(answer) -> None:
    generator = random_generator()
    d_k = int(torch.randint(5, 13, (), generator=generator))
    T = int(
        torch.randint(3, d_k, (), generator=generator)
    )  # 3 <= T < d_k: with two keys a flipped sign looks like the other j
    j = int(torch.randint(0, T, (), generator=generator))
    _query_case(answer, torch.randn(T, d_k, generator=generator), j, p=0.9, what="random keys")
    # A key that dominates key j along its own direction: k_i . k_j > k_j . k_j.
    keys = torch.randn(3, 6, generator=generator)
    keys[0] = 3.0 * keys[2] + 0.3 * torch.randn(6, generator=generator)
    _query_case(answer, keys, 2, p=0.8, what="keys where key 0 is long along key 2")
    # A weight below 1/T, a weight near 1 with many features, as many keys as features, two keys.
    _query_case(answer, torch.randn(4, 7, generator=generator), 3, p=0.1, what="random keys")
    _query_case(answer, torch.randn(6, 64, generator=generator), 0, p=0.99, what="random keys")
    _query_case(answer, torch.randn(5, 5, generator=generator), 1, p=0.5, what="as many keys as features")
    _query_case(answer, torch.randn(2, 3, generator=generator), 1, p=0.75, what="two keys")


register(
    "1.1",
    "A query for a chosen weight",
    _check_query_for_weight,
    answer="query_for_weight",
    solution=_query_for_weight_solution,
    mistakes=[
        Mistake("query along key j", _qw_along_key, QW_ALONG),
        Mistake("no sqrt(d_k)", _qw_unscaled, QW_UNSCALED),
        Mistake("d_k for sqrt(d_k)", _qw_by_d_k, QW_BY_D_K),
        Mistake("one other key", _qw_one_other, QW_ONE_OTHER),
        Mistake("j counted from 1", _qw_counted_from_1, QW_INDEX),
        Mistake("sign flipped", _qw_points_away, QW_AWAY),
        Mistake("returned the weights", _qw_weights, QW_SHAPE),
    ],
)

# Properties of 1.1: each probe builds keys on which one idea decides key j's weight.
_QW_KEYS = _randn(61, 3, 6)
_QW_LONG = _QW_KEYS.clone()
_QW_LONG[0] = 3.0 * _QW_KEYS[2] + 0.3 * _randn(62, 6)  # key 0 outscores key 2 along key 2


def _query_probe(cases, *, only: tuple[str, ...] = ()) -> Callable:
    """A probe over (keys, j, p) cases: the diagnosis's sentence, or (with ``only``) only a sentence that names one
    of these fragments; a wrong type or shape is left to the checker."""

    def probe(answer) -> str | None:
        for keys, j, p in cases:
            try:
                query = _answer_query(answer, keys, j, p=p, where="")
            except ExerciseFailure as failure:
                raise Inconclusive("the checker names the type or shape") from failure
            sentence = _query_diagnosis(keys, query, j, p=p)
            if sentence and (not only or any(fragment in sentence for fragment in only)):
                return f"for keys of shape {tuple(keys.shape)}, key j = {j} and p = {p:g}: {sentence}"
        return None

    return probe


add_properties(
    "1.1",
    [
        Property("key j (counted from 0)", _query_probe([(_QW_KEYS, 1, 0.8)], only=(QW_INDEX,))),
        Property(
            "dot products (a query along key j gives the other keys scores too)",
            _query_probe([(_QW_LONG, 2, 0.8), (_QW_KEYS, 1, 0.8)], only=(QW_ALONG,)),
        ),
        Property(
            "the weight p (the scale sqrt(d_k), and a softmax over all T keys)",
            _query_probe([(_QW_KEYS, 1, 0.8), (_randn(63, 4, 7), 3, 0.1)]),
        ),
    ],
)


# ---------------------------------------------------------------------------------
# 1.2 Design: the values behind the outputs of causal attention

# The hints' fragments, shared by the probes, the checker and the registered mistakes.
VO_SAME = "your values are the outputs themselves"
VO_FORWARD = "you applied attention to H"
VO_TRANSPOSED = "with the weights transposed"
VO_DIAGONAL = "only its own value"
VO_EQUAL = "equal weights"
VO_NO_MASK = "without the causal mask"
VO_MASK_INVERTED = "the mask turned round"
VO_UNSCALED = "scores not divided by sqrt(d_k)"
VO_BY_D_K = "scores divided by d_k"
VO_AXIS = "a softmax over the wrong axis"


def _values_for_outputs_solution(Q: torch.Tensor, K: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """Values V (T, d_v) for which causal attention of Q, K (T, d_k) outputs H (T, d_v): A V = H."""
    T, d_k = Q.shape
    S = Q @ K.T / math.sqrt(d_k)  # (T, T)
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # query i sees keys 0..i
    A = torch.softmax(S.masked_fill(~allowed, float("-inf")), dim=-1)  # (T, T), lower triangular
    return torch.linalg.solve_triangular(A, H, upper=False)  # (T, d_v)


def _causal_weights(Q, K, *, divisor=None, mask="causal", dim=-1) -> torch.Tensor:
    """The causal weights in float64, or a slip's: another divisor, no mask or the mask turned round, another axis."""
    Q, K = Q.double(), K.double()
    T = Q.shape[0]
    S = Q @ K.T / (math.sqrt(Q.shape[1]) if divisor is None else divisor)
    allowed = {
        "causal": torch.ones(T, T, dtype=torch.bool).tril(),
        "inverted": torch.ones(T, T, dtype=torch.bool).triu(),
    }
    if mask in allowed:
        S = S.masked_fill(~allowed[mask], float("-inf"))
    return torch.softmax(S, dim=dim)


def _vo_same(Q, K, H):
    return H.clone()


def _vo_forward(Q, K, H):
    return (_causal_weights(Q, K) @ H.double()).to(H.dtype)


def _vo_transposed(Q, K, H):
    return torch.linalg.solve(_causal_weights(Q, K).T, H.double()).to(H.dtype)


def _vo_diagonal(Q, K, H):
    return (H.double() / _causal_weights(Q, K).diagonal()[:, None]).to(H.dtype)


def _vo_equal(Q, K, H):
    """The running mean undone: V_i = (i + 1) H_i - i H_(i-1), right only when every score is equal."""
    counts = torch.arange(1, H.shape[0] + 1, dtype=H.dtype)[:, None]
    return counts * H - torch.cat([torch.zeros_like(H[:1]), (counts[:-1]) * H[:-1]])


def _vo_solved(weights):
    return lambda Q, K, H: torch.linalg.solve(weights(Q, K), H.double()).to(H.dtype)


_vo_no_mask = _vo_solved(lambda Q, K: _causal_weights(Q, K, mask=None))
_vo_mask_inverted = _vo_solved(lambda Q, K: _causal_weights(Q, K, mask="inverted"))
_vo_unscaled = _vo_solved(lambda Q, K: _causal_weights(Q, K, divisor=1.0))
_vo_by_d_k = _vo_solved(lambda Q, K: _causal_weights(Q, K, divisor=float(Q.shape[1])))
_vo_axis = _vo_solved(lambda Q, K: _causal_weights(Q, K, dim=0))

# hint -> the slip, in groups: how the mixing is undone, the mask, the weights.
_VO_UNDOING = {
    f"{VO_SAME}: but output i mixes the values 0 to i with the weights A[i], so only output 0 equals its value; "
    "find V with A V = H": _vo_same,
    f"{VO_FORWARD} (A H): attention mixes the values into the outputs, H = A V, and you need the values, so undo "
    "the mixing: solve A V = H for V": _vo_forward,
    f"you solved the system {VO_TRANSPOSED} (A^T V = H): output i is row i of A times V, H = A V, so solve A V = H "
    "as it stands": _vo_transposed,
    f"you divided each output by the weight of {VO_DIAGONAL} (H_i / A_ii): output i also mixes the earlier values "
    "0 to i - 1, which must be taken out first (solve A V = H, row by row from the top, or all at once)": _vo_diagonal,
    f"you undid a running mean, as if query i gave {VO_EQUAL} to keys 0 to i; the weights are the softmax of the "
    "scores q_i . k_j / sqrt(d_k), which differ: compute A from Q and K": _vo_equal,
}
_VO_MASK = {
    f"your values fit attention {VO_NO_MASK} (every query sees every key): query i may only see keys 0 to i, so set "
    "the scores above the diagonal to -inf before the softmax": _vo_no_mask,
    f"your values fit attention with {VO_MASK_INVERTED}: query i sees keys i to T - 1 there, but in causal attention "
    "it sees keys 0 to i (keep the lower triangle, tril)": _vo_mask_inverted,
}
_VO_WEIGHTS = {
    f"your values fit attention with {VO_UNSCALED}: divide the scores by sqrt(d_k) before the softmax": _vo_unscaled,
    f"your values fit attention with {VO_BY_D_K}: divide them by sqrt(d_k), not d_k": _vo_by_d_k,
    f"your values fit attention with {VO_AXIS} (down the columns, over the queries): each query's weights sum to 1 "
    "over the keys, dim=-1": _vo_axis,
}


def _answer_values(answer, Q: torch.Tensor, K: torch.Tensor, *, H: torch.Tensor, where: str) -> torch.Tensor:
    got = call(answer, Q.clone(), K.clone(), H.clone())
    values = require_tensor_like(got, H, f"the values V ({where})", axes=("position", "value feature"))
    if not torch.isfinite(values).all():
        raise ExerciseFailure(f"the values V ({where}) contain nan or inf")
    return values.double()


def _values_diagnosis(Q, K, H, *, values, slips: dict) -> str | None:
    """None when causal attention with these values outputs H; the slip the values come from, if one of ``slips``;
    otherwise '' (a difference no slip explains)."""
    outputs = _causal_weights(Q, K) @ values
    scale = max(1.0, float(H.abs().max()), float(values.abs().max()))
    if torch.allclose(outputs, H.double(), rtol=0.0, atol=1e-5 * scale):  # float32 inside passes too
        return None
    for hint, slip in slips.items():
        if torch.allclose(values, slip(Q, K, H).double(), rtol=1e-5, atol=1e-5 * scale):
            return hint
    return ""


def _values_case(answer, Q, K, *, H, what: str) -> None:
    where = f"{what}: T = {Q.shape[0]}, d_k = {Q.shape[1]}, d_v = {H.shape[1]}"
    values = _answer_values(answer, Q, K, H=H, where=where)
    sentence = _values_diagnosis(Q, K, H, values=values, slips={**_VO_UNDOING, **_VO_MASK, **_VO_WEIGHTS})
    if sentence is None:
        return
    if not sentence:
        outputs = _causal_weights(Q, K) @ values
        row = int((outputs - H.double()).abs().amax(dim=-1).argmax())
        sentence = (
            f"with your values, causal attention outputs row {row} as {_short_vector(outputs[row])} where H has "
            f"{_short_vector(H[row])}: the values must make A V = H exactly, with A the causal weights of Q and K"
        )
    raise ExerciseFailure(f"for {where}, {sentence}")


def _well_posed(generator: torch.Generator, T: int, d_k: int, *, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries and keys whose causal weights give each query's own key at least 0.05, so that V = A^-1 H stays
    of the size of H (a tiny A_ii would make V huge and the comparison A V = H loose)."""
    while True:
        Q, K = (scale * torch.randn(T, d_k, generator=generator, dtype=torch.float64) for _ in range(2))
        if float(_causal_weights(Q, K).diagonal().min()) >= 0.05:
            return Q, K


def _check_values_for_outputs(answer) -> None:
    generator = random_generator()
    T = int(torch.randint(4, 8, (), generator=generator))
    d_k = int(torch.randint(2, 6, (), generator=generator))
    d_v = int(torch.randint(1, 4, (), generator=generator))
    name_sizes(T=T, d_k=d_k, d_v=d_v)
    for scale, what in ((1.0, "random queries and keys"), (2.0, "scores twice as large")):
        Q, K = _well_posed(generator, T, d_k, scale=scale)
        _values_case(answer, Q, K, H=torch.randn(T, d_v, generator=generator, dtype=torch.float64), what=what)
    one = torch.randn(1, 3, generator=generator, dtype=torch.float64)
    _values_case(answer, one, one, H=torch.randn(1, 2, generator=generator, dtype=torch.float64), what="one token")


register(
    "1.2",
    "The values behind the outputs",
    _check_values_for_outputs,
    answer="values_for_outputs",
    solution=_values_for_outputs_solution,
    mistakes=[
        Mistake("returned H", _vo_same, VO_SAME),
        Mistake("applied attention to H", _vo_forward, VO_FORWARD),
        Mistake("transposed system", _vo_transposed, VO_TRANSPOSED),
        Mistake("divided by the diagonal", _vo_diagonal, VO_DIAGONAL),
        Mistake("running mean undone", _vo_equal, VO_EQUAL),
        Mistake("no causal mask", _vo_no_mask, VO_NO_MASK),
        Mistake("mask turned round", _vo_mask_inverted, VO_MASK_INVERTED),
        Mistake("no sqrt(d_k)", _vo_unscaled, VO_UNSCALED),
        Mistake("divided by d_k", _vo_by_d_k, VO_BY_D_K),
        Mistake("softmax over the queries", _vo_axis, VO_AXIS),
    ],
)

# Properties of 1.2, on five tokens (d_k = 3, d_v = 2): each names the slips of one idea.
_VO_Q, _VO_K, _VO_H = (_randn(seed, 5, size).double() for seed, size in ((64, 3), (65, 3), (66, 2)))


def _values_probe(slips: dict, *, generic: bool = False) -> Callable:
    def probe(answer) -> str | None:
        try:
            values = _answer_values(answer, _VO_Q, _VO_K, H=_VO_H, where="")
        except ExerciseFailure as failure:
            raise Inconclusive("the checker names the type or shape") from failure
        sentence = _values_diagnosis(_VO_Q, _VO_K, _VO_H, values=values, slips=slips)
        if sentence or (generic and sentence == ""):
            outputs = _causal_weights(_VO_Q, _VO_K) @ values
            gap = float((outputs - _VO_H).abs().max())
            return f"for five tokens, causal attention with your values misses H by up to {gap:.3g}" + (
                f": {sentence}"
                if sentence
                else ": A V must equal H, with A the causal weights softmax(Q K^T / sqrt(d_k))"
            )
        return None

    return probe


add_properties(
    "1.2",
    [
        Property("undoing the mixing (H = A V, solved for V)", _values_probe(_VO_UNDOING)),
        Property("the causal mask (output i mixes the values 0 to i)", _values_probe(_VO_MASK)),
        Property("the weights (softmax of q . k / sqrt(d_k) over the keys)", _values_probe(_VO_WEIGHTS, generic=True)),
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
