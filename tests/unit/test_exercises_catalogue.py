"""Issue 45: a catalogue of wrong answers written as students write them, at least 8 per exercise beyond the
registered mistakes, each with the words its one-line hint must contain to name the mistake; and correct
variants (other axis names, in-place operations, float64, loops) that must pass.

``wrong(exercise, name, idea)`` registers a wrong answer: ``idea`` is a regular expression (matched against
the hint in lower case) for the words that say what to change. The tests:

* every wrong answer fails, with exactly one line;
* its hint names the mistake (``idea`` matches), except the entries listed in ``UNNAMED`` (reported, and
  at most 5 % of the catalogue);
* no hint blames a part the answer got right: a hint given by a property (``"<property name>: ..."``)
  comes from a property the entry names in ``parts`` or whose name its ``idea`` matches, and no other
  registered mistake's hint fragment appears unless ``parts`` names that mistake (the answer is an instance
  of it) (see :func:`blamed_elsewhere`);
* every registered mistake gets the idea of :data:`REGISTERED` (its own hint, or the property that names it)
  and no other mistake's hint;
* every correct variant passes (twice, on fresh random inputs);
* no check hangs (``HANG_S``). How long a check takes (the aim: under 1 s) is measured by ``make bench``
  (``benchmarks/checks.py``, every answer of this catalogue), not asserted here: a test's time depends on the
  machine's load.

Registered mistakes that one repair fixes may share words (``SAME_REPAIR``). The catalogue was written chapter by
chapter before the checkers were changed for it; its first runs named 51-73 % per chapter (see the issue 45
commits), the checkers were then changed until every answer is named: it is not a held-out measurement.

Run ``python tests/unit/test_exercises_catalogue.py [PREFIX]`` for every line and the share named per
chapter, and the slowest check.
"""

from __future__ import annotations

import copy
import math
import re
import time

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.analysis.heads import head_focus, relation_accuracy
from attention_book.exercises import REGISTRY, evaluate, get, load_all
from attention_book.exercises._core import GENERIC
from attention_book.training.transfer import probe_accuracy, train_linear_probe

load_all()

WRONG: list[tuple[str, str, object, str, tuple[str, ...]]] = []  # (exercise, name, answer, idea, parts)
CORRECT: list[tuple[str, str, object]] = []


def wrong(exercise_id: str, name: str, idea: str, parts: tuple[str, ...] = ()):
    def add(answer):
        WRONG.append((exercise_id, name, answer, idea, parts))
        return answer

    return add


def correct(exercise_id: str, name: str):
    def add(answer):
        CORRECT.append((exercise_id, name, answer))
        return answer

    return add


# ====================================================================== chapter 1


# ---------------------------------------------------------------- 1.1 query_for_weight(keys, j, p)


def _orthogonal_direction(keys, j):
    """A direction with dot product 1 with key j and 0 with every other key (least squares, exact for T <= d_k)."""
    target = torch.zeros(keys.shape[0], dtype=keys.dtype)
    target[j] = 1.0
    return torch.linalg.lstsq(keys, target[:, None]).solution[:, 0]


@wrong("1.1", "the key itself, scaled until its score is right", r"points along key")
def _(keys, j, p):
    T, d_k = keys.shape
    s = math.log(p * (T - 1) / (1 - p))
    return keys[j] * s * math.sqrt(d_k) / keys[j].dot(keys[j])


@wrong("1.1", "ln(p / (1 - p)) as if there were two keys", r"against one other key")
def _(keys, j, p):
    return math.sqrt(keys.shape[1]) * math.log(p / (1 - p)) * _orthogonal_direction(keys, j)


@wrong("1.1", "the scale forgotten", r"only without the scale")
def _(keys, j, p):
    T = keys.shape[0]
    return math.log(p * (T - 1) / (1 - p)) * _orthogonal_direction(keys, j)


@wrong("1.1", "divided by sqrt(d_k) instead of multiplied", r"sqrt\(d_k\)|equal scores.*lead")
def _(keys, j, p):
    T, d_k = keys.shape
    return math.log(p * (T - 1) / (1 - p)) / math.sqrt(d_k) * _orthogonal_direction(keys, j)


@wrong("1.1", "key j taken as the j-th counting from 1", r"counted from 0")
def _(keys, j, p):
    T, d_k = keys.shape
    return math.sqrt(d_k) * math.log(p * (T - 1) / (1 - p)) * _orthogonal_direction(keys, j - 1)


@wrong("1.1", "the scores returned", r"return the query")
def _(keys, j, p):
    T = keys.shape[0]
    scores = torch.zeros(T)
    scores[j] = math.log(p * (T - 1) / (1 - p))
    return scores


@wrong("1.1", "the key's length ignored: its unit vector", r"points along key")
def _(keys, j, p):
    T, d_k = keys.shape
    return math.sqrt(d_k) * math.log(p * (T - 1) / (1 - p)) * keys[j] / keys[j].norm()


@wrong("1.1", "ln((1 - p) / p): the gap upside down", r"equal scores.*lead")
def _(keys, j, p):
    T, d_k = keys.shape
    return math.sqrt(d_k) * math.log((1 - p) * (T - 1) / p) * _orthogonal_direction(keys, j)


@wrong("1.1", "ln(p) for the score", r"equal scores.*lead")
def _(keys, j, p):
    return math.sqrt(keys.shape[1]) * math.log(p) * _orthogonal_direction(keys, j)


@wrong("1.1", "d_k instead of sqrt(d_k)", r"divided by d_k")
def _(keys, j, p):
    T, d_k = keys.shape
    return d_k * math.log(p * (T - 1) / (1 - p)) * _orthogonal_direction(keys, j)


@correct("1.1", "torch.linalg.lstsq, float64")
def _(keys, j, p):
    T, d_k = keys.shape
    direction = _orthogonal_direction(keys.double(), j)
    return math.sqrt(d_k) * math.log(p * (T - 1) / (1 - p)) * direction


@correct("1.1", "Gram-Schmidt in a loop, then bisection on the length")
def _(keys, j, p):
    T, d_k = keys.shape
    others = [keys[i] for i in range(T) if i != j]
    basis = []
    for k in others:
        for b in basis:
            k = k - (k @ b) * b
        basis.append(k / k.norm())
    u = keys[j].clone()
    for b in basis:
        u = u - (u @ b) * b  # at right angles to every other key, so their scores stay 0
    if p < 1 / T:
        u = -u
    low, high = 0.0, 1.0
    weight = lambda c: torch.softmax(keys @ (c * u) / math.sqrt(d_k), dim=0)[j].item()
    while (weight(high) < p) == (p > 1 / T):
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if (weight(middle) < p) == (p > 1 / T) else (low, middle)
    return high * u


@correct("1.1", "solve K q = target scores with pinv")
def _(keys, j, p):
    T, d_k = keys.shape
    target = torch.zeros(T)
    target[j] = math.sqrt(d_k) * math.log(p * (T - 1) / (1 - p))  # the others' dot products: 0
    return torch.linalg.pinv(keys) @ target


# ---------------------------------------------------------------- 1.2 values_for_outputs(Q, K, H)


def _causal_A(Q, K, *, scale=None, dim=-1, allowed=None):
    T = Q.shape[0]
    S = Q @ K.T / (math.sqrt(Q.shape[-1]) if scale is None else scale)
    allowed = torch.ones(T, T, dtype=torch.bool).tril() if allowed is None else allowed
    return torch.softmax(S.masked_fill(~allowed, float("-inf")), dim=dim)


@wrong("1.2", "H itself: the outputs taken for the values", r"outputs themselves")
def _(Q, K, H):
    return H


@wrong("1.2", "attention applied to H", r"applied attention to h")
def _(Q, K, H):
    return _causal_A(Q, K) @ H


@wrong("1.2", "torch.linalg.solve(A.T, H)", r"transposed")
def _(Q, K, H):
    return torch.linalg.solve(_causal_A(Q, K).T, H)


@wrong("1.2", "forward substitution without the earlier values", r"only its own value")
def _(Q, K, H):
    A = _causal_A(Q, K)
    return torch.stack([H[i] / A[i, i] for i in range(len(H))])


@wrong("1.2", "no mask: every query sees every key", r"without the causal mask")
def _(Q, K, H):
    return torch.linalg.solve(torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=-1), H)


@wrong("1.2", "triu for the mask", r"mask turned round")
def _(Q, K, H):
    T = Q.shape[0]
    return torch.linalg.solve(_causal_A(Q, K, allowed=torch.ones(T, T, dtype=torch.bool).triu()), H)


@wrong("1.2", "the scale forgotten", r"not divided by sqrt\(d_k\)")
def _(Q, K, H):
    return torch.linalg.solve(_causal_A(Q, K, scale=1.0), H)


@wrong("1.2", "softmax over dim=0", r"wrong axis")
def _(Q, K, H):
    return torch.linalg.solve(_causal_A(Q, K, dim=0), H)


@wrong("1.2", "a running mean undone", r"equal weights")
def _(Q, K, H):
    V = torch.empty_like(H)
    for i in range(len(H)):
        V[i] = (i + 1) * H[i] - (i * H[i - 1] if i > 0 else 0)
    return V


@wrong("1.2", "H @ inverse(A): the inverse on the wrong side", r"transpose|operand|inner sizes|matrix product")
def _(Q, K, H):
    return H @ torch.linalg.inv(_causal_A(Q, K))


@wrong("1.2", "substitution that subtracts the values after i", r"only its own value")
def _(Q, K, H):
    A = _causal_A(Q, K)
    V = torch.zeros_like(H)
    for i in range(len(H)):
        V[i] = (H[i] - A[i, i + 1 :] @ V[i + 1 :]) / A[i, i]
    return V


@correct("1.2", "forward substitution in a loop, -1e9 for the mask")
def _(Q, K, H):
    T = Q.shape[0]
    S = Q @ K.T / math.sqrt(Q.shape[1])
    S = S.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), -1e9)
    A = torch.softmax(S, dim=1)
    V = torch.zeros_like(H)
    for i in range(T):
        V[i] = (H[i] - A[i, :i] @ V[:i]) / A[i, i]
    return V


@correct("1.2", "torch.linalg.solve with the book's causal mask")
def _(Q, K, H):
    import attention_book as ab

    _, A = ab.scaled_dot_product_attention(Q, K, H, mask=ab.causal_mask(Q.shape[0]))
    return torch.linalg.solve(A, H)


@correct("1.2", "the inverse matrix, in float32 inside")
def _(Q, K, H):
    A = _causal_A(Q.float(), K.float()).double()
    return torch.linalg.inv(A) @ H


# ---------------------------------------------------------------- 1.3 scaling_matters(d_k)


def _gap_pair(d_k, gap, *, row=0):
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[row, 0] = gap
    return query, keys


def _bounds(d_k):
    return math.log(99), math.sqrt(d_k) * math.log(1.5)


@wrong("1.3", "threshold one too high (None up to 129)", r"d_k = 129|such a pair exists")
def _(d_k):
    low, high = _bounds(d_k)
    return None if d_k <= 129 else _gap_pair(d_k, math.sqrt(low * high))


@wrong("1.3", "(keys, query) returned in the other order", r"\(query, keys\)")
def _(d_k):
    low, high = _bounds(d_k)
    return None if high <= low else _gap_pair(d_k, math.sqrt(low * high))[::-1]


@wrong("1.3", "three keys", r"two keys")
def _(d_k):
    low, high = _bounds(d_k)
    if high <= low:
        return None
    query, keys = _gap_pair(d_k, math.sqrt(low * high))
    return query, torch.cat([keys, torch.zeros(1, d_k)])


@wrong("1.3", "gap counted twice (+g and -g)", r"narrow the gap", parts=("the scale keeps it close", "gap too large"))
def _(d_k):
    low, high = _bounds(d_k)
    if high <= low:
        return None
    gap = math.sqrt(low * high)
    query, keys = _gap_pair(d_k, gap)
    keys[1, 0] = -gap
    return query, keys


@wrong(
    "1.3",
    "log2 in place of ln (the right threshold, the gap in the wrong units)",
    r"narrow the gap",
    parts=("the scale keeps it close", "gap too large"),
)
def _(d_k):
    low, high = math.log2(99), math.sqrt(d_k) * math.log2(1.5)
    return None if high <= low else _gap_pair(d_k, math.sqrt(low * high))


@wrong(
    "1.3", "gap = sqrt(d_k), the scale itself", r"narrow the gap", parts=("the scale keeps it close", "gap too large")
)
def _(d_k):
    low, high = _bounds(d_k)
    return None if high <= low else _gap_pair(d_k, math.sqrt(d_k))


@wrong("1.3", "lists instead of tensors", r"tensor")
def _(d_k):
    low, high = _bounds(d_k)
    if high <= low:
        return None
    query, keys = _gap_pair(d_k, math.sqrt(low * high))
    return query.tolist(), keys.tolist()


@wrong("1.3", "(None, None) when impossible", r"return none")
def _(d_k):
    low, high = _bounds(d_k)
    return (None, None) if high <= low else _gap_pair(d_k, math.sqrt(low * high))


@wrong("1.3", "query scaled by sqrt(d_k) too", r"narrow the gap", parts=("the scale keeps it close", "gap too large"))
def _(d_k):
    low, high = _bounds(d_k)
    if high <= low:
        return None
    query, keys = _gap_pair(d_k, math.sqrt(low * high))
    return query * math.sqrt(d_k), keys


@wrong("1.3", "bounds compared with sigmoid probabilities, not logits", r"no pair exists: return none|so return none")
def _(d_k):
    if math.sqrt(d_k) * 0.6 <= 0.99:
        return None
    low, high = _bounds(d_k)
    return _gap_pair(d_k, math.sqrt(low * max(high, low)))


@correct("1.3", "the gap on the second key, midpoint, a query of ones")
def _(d_k):
    low, high = _bounds(d_k)
    if not high > low:
        return None
    query = torch.ones(d_k, dtype=torch.float64)
    keys = torch.zeros(2, d_k, dtype=torch.float64)
    keys[1] = (low + high) / 2 / d_k
    return query, keys


# ---------------------------------------------------------------- 1.4 additive_attention(queries, keys, values, W_1, W_2, w)


def _additive(queries, keys, values, W_1, W_2, w, *, pairs=None, score=None, dim=-1, out=None):
    q, k = queries @ W_1, keys @ W_2
    summed = pairs(q, k) if pairs else q[:, None, :] + k[None, :, :]
    S = score(summed, w) if score else torch.tanh(summed) @ w
    A = torch.softmax(S, dim=dim)
    return out(A, values) if out else (A @ values, A)


@wrong("1.4", "pairs indexed keys first (T_k, T_q)", r"holds its last two axes the other way round")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(queries, keys, values, W_1, W_2, w, pairs=lambda q, k: q[None, :, :] + k[:, None, :])


@wrong("1.4", "q W_1 + k W_2 without pairing (no broadcasting)", r"\[:, none, :\]|\[none, :, :\]|unsqueeze")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(queries, keys, values, W_1, W_2, w, pairs=lambda q, k: q + k)


@wrong("1.4", "w applied before the tanh", r"w before the tanh")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(queries, keys, values, W_1, W_2, w, score=lambda s, w: torch.tanh(s @ w))


@wrong("1.4", "summed over the features instead of @ w", r"summed the tanh's features")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(queries, keys, values, W_1, W_2, w, score=lambda s, w: torch.tanh(s).sum(dim=-1))


@wrong("1.4", "values @ A", r"a @ v")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(queries, keys, values, W_1, W_2, w, out=lambda A, V: (V.T @ A.T, A))


@wrong("1.4", "queries @ W_1.T", r"drop the transpose on w_1")
def _(queries, keys, values, W_1, W_2, w):
    q, k = queries @ W_1.T, keys @ W_2.T
    A = torch.softmax(torch.tanh(q[:, None, :] + k[None, :, :]) @ w, dim=-1)
    return A @ values, A


@wrong("1.4", "returned (A, H)", r"returned \(a, h\)")
def _(queries, keys, values, W_1, W_2, w):
    H, A = _additive(queries, keys, values, W_1, W_2, w)
    return A, H


@wrong("1.4", "returned the weights as the output", r"returned the weights")
def _(queries, keys, values, W_1, W_2, w):
    _, A = _additive(queries, keys, values, W_1, W_2, w)
    return A, A


@wrong("1.4", "scores left with a trailing axis of 1", r"squeeze")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(
        queries,
        keys,
        values,
        W_1,
        W_2,
        w,
        score=lambda s, w: torch.tanh(s) @ w[:, None],
        out=lambda A, V: (A[..., 0] @ V, A),
    )


@wrong("1.4", "softmax of tanh(scores) (tanh applied after w)", r"tanh again")
def _(queries, keys, values, W_1, W_2, w):
    return _additive(queries, keys, values, W_1, W_2, w, score=lambda s, w: torch.tanh(torch.tanh(s) @ w))


@correct("1.4", "loops over query and key pairs")
def _(queries, keys, values, W_1, W_2, w):
    scores = torch.empty(len(queries), len(keys))
    for i, q in enumerate(queries):
        for j, k in enumerate(keys):
            scores[i, j] = torch.dot(torch.tanh(q @ W_1 + k @ W_2), w)
    A = scores.softmax(dim=1)
    return A @ values, A


@correct("1.4", "unsqueeze and einsum in float64")
def _(queries, keys, values, W_1, W_2, w):
    h = torch.tanh((queries.double() @ W_1.double()).unsqueeze(1) + (keys.double() @ W_2.double()).unsqueeze(0))
    A = torch.einsum("qka,a->qk", h, w.double()).softmax(-1)
    return torch.einsum("qk,kv->qv", A, values.double()), A


# ---------------------------------------------------------------- 1.5 influence_by_position(x, W_x, W_h)


def _influence(x, W_x, W_h, *, step=None, start=None, out=lambda s: s.sum(), size=lambda g: g.norm(dim=-1), first=0):
    x = x.detach().clone().requires_grad_(True)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype) if start is None else start(W_h, x)
    for t in range(first, x.shape[0]):
        state = step(x[t], state) if step else torch.tanh(x[t] @ W_x + state @ W_h)
    (gradient,) = torch.autograd.grad(out(state), x)
    sizes = size(gradient)
    return sizes / sizes[-1]


@wrong("1.5", "backpropagated from the state's norm", r"backpropagated from the last state's norm")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, out=lambda s: s.norm())


@wrong("1.5", "state started at ones", r"starts at 1 before the first token")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, start=lambda W_h, x: torch.ones(W_h.shape[0], dtype=x.dtype))


@wrong("1.5", "loop skips token 0", r"token 0 has no influence")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, first=1)


@wrong("1.5", "squared norm", r"squared")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, size=lambda g: (g**2).sum(dim=-1))


@wrong("1.5", "normalised to sum to 1", r"divide every gradient norm by the last one")
def _(x, W_x, W_h):
    sizes = _influence(x, W_x, W_h)
    return sizes / sizes.sum()


@wrong("1.5", "state detached at every step", r"detach")  # the same numbers as an update without h_(t-1) W_h
def _(x, W_x, W_h):
    x = x.detach().clone().requires_grad_(True)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype)
    for t in range(x.shape[0]):
        state = torch.tanh(x[t] @ W_x + state.detach() @ W_h)
    (gradient,) = torch.autograd.grad(state.sum(), x)
    sizes = gradient.norm(dim=-1)
    return sizes / sizes[-1]


@wrong("1.5", "relu instead of tanh", r"you used relu")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, step=lambda x_t, s: torch.relu(x_t @ W_x + s @ W_h))


@wrong("1.5", "grad of the state vector without a sum", r"backpropagate from a sum")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, out=lambda s: s)


@wrong("1.5", "x_t and the state multiplied by the wrong matrices", r"you swapped the matrices")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h, step=lambda x_t, s: torch.tanh(s @ W_x + x_t @ W_h))


@wrong("1.5", "gradient of the state at every step summed", r"summed the states of every step")
def _(x, W_x, W_h):
    x = x.detach().clone().requires_grad_(True)
    state, total = torch.zeros(W_h.shape[0], dtype=x.dtype), 0
    for t in range(x.shape[0]):
        state = torch.tanh(x[t] @ W_x + state @ W_h)
        total = total + state.sum()
    (gradient,) = torch.autograd.grad(total, x)
    sizes = gradient.norm(dim=-1)
    return sizes / sizes[-1]


@correct("1.5", "backward() and x.grad, the input part computed at once")
def _(x, W_x, W_h):
    x = x.clone().requires_grad_()
    inputs = x @ W_x
    h = torch.zeros(W_h.shape[1], dtype=x.dtype)
    for t in range(len(x)):
        h = torch.tanh(inputs[t] + h @ W_h)
    h.sum().backward()
    n = torch.linalg.vector_norm(x.grad, dim=1)
    return n / n[-1]


@correct("1.5", "float32 inside, returned in float64")
def _(x, W_x, W_h):
    return _influence(x, W_x, W_h)


# ---------------------------------------------------------------- 1.6 longest_cheaper_length(d, gates)


def _attention_work(T, d):
    return 4 * T * d * d + 2 * T * T * d


@wrong(
    "1.6",
    "the chapter's 2.5 d for every recurrent layer",
    r"not 3 t d\^2.*4 gates whatever gates is",
    parts=("without W_O", "gates ignored"),
)
def _(d, gates):
    return max(0, math.ceil(2.5 * d) - 1)


@wrong("1.6", "projections counted without W_O", r"not 3 t d\^2")
def _(d, gates):
    T = 0
    while 3 * (T + 1) * d * d + 2 * (T + 1) ** 2 * d < 2 * gates * (T + 1) * d * d:
        T += 1
    return T


@wrong("1.6", "loop returns the first dearer length", r"no longer cheaper")
def _(d, gates):
    T = 1
    while _attention_work(T, d) < 2 * gates * T * d * d:
        T += 1
    return T


@wrong("1.6", "<= in the comparison", r"strictly smaller")
def _(d, gates):
    T = 0
    while _attention_work(T + 1, d) <= 2 * gates * (T + 1) * d * d:
        T += 1
    return T


@wrong("1.6", "only the scores' T^2 d", r"2 t\^2 d, not t\^2 d")
def _(d, gates):
    return max(0, 2 * (gates - 2) * d - 1)


@wrong("1.6", "a gate as one product", r"2 t d\^2 per gate")
def _(d, gates):
    T = 0
    while _attention_work(T + 1, d) < gates * (T + 1) * d * d:
        T += 1
    return T


@wrong("1.6", "closed form without the floor at 0", r"not a negative number")
def _(d, gates):
    return (gates - 2) * d - 1


@wrong("1.6", "an LSTM's 8 T d^2 whatever gates", r"4 gates whatever gates is")
def _(d, gates):
    return max(0, 2 * d - 1)


@wrong(
    "1.6",
    "the bound itself",
    r"strictly smaller.*not a negative number",
    parts=("equal counts included", "negative when never cheaper"),
)
def _(d, gates):
    return (gates - 2) * d  # attention is cheaper while T < (gates - 2) d


@wrong("1.6", "bound returned as a float", r"whole number|not 3 t d\^2|strictly smaller|no longer cheaper")
def _(d, gates):
    return max(0.0, (gates - 2) * d - 0.5)


@correct("1.6", "closed form")
def _(d, gates):
    return max(0, (gates - 2) * d - 1)


@correct("1.6", "a loop over T with the two counts")
def _(d, gates):
    T = 0
    while _attention_work(T + 1, d) < 2 * gates * (T + 1) * d * d:
        T += 1
    return T


@correct("1.6", "a float from math.ceil of the bound")
def _(d, gates):
    return float(max(0, math.ceil((gates - 2) * d) - 1))


# ====================================================================== chapter 2


# ---------------------------------------------------------------- 2.1 attend(x_query, x_memory, W_Q, W_K, W_V)


def _head(x_query, x_memory, W_Q, W_K, W_V, *, scores=None, values=None, dim=-1, out=None):
    Q, K = x_query @ W_Q, x_memory @ W_K
    V = values(x_query, x_memory, W_V) if values else x_memory @ W_V
    S = scores(Q, K) if scores else Q @ K.T / math.sqrt(K.shape[-1])
    A = torch.softmax(S, dim=dim)
    return out(A, V) if out else (A @ V, A)


@wrong("2.1", "returned (A, H)", r"returned \(a, h\)")
def _(x_query, x_memory, W_Q, W_K, W_V):
    H, A = _head(x_query, x_memory, W_Q, W_K, W_V)
    return A, H


@wrong("2.1", "returned the weights as the output", r"returned the weights")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(x_query, x_memory, W_Q, W_K, W_V, out=lambda A, V: (A, A))


@wrong("2.1", "values made from x_query", r"values made from x_query")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(x_query, x_memory, W_Q, W_K, W_V, values=lambda xq, xm, W: xq[: xm.shape[0]] @ W)


@wrong("2.1", "scores K Q^T (keys as rows)", r"q k\^t|q @ k\.t|one row per query")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(x_query, x_memory, W_Q, W_K, W_V, scores=lambda Q, K: K @ Q.T / math.sqrt(K.shape[-1]))


@wrong("2.1", "divided by sqrt(d_v)", r"sqrt\(d_v\)")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(x_query, x_memory, W_Q, W_K, W_V, scores=lambda Q, K: Q @ K.T / math.sqrt(W_V.shape[1]))


@wrong("2.1", "x_memory @ W_K.T", r"drop the transpose on w_k")
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q, K, V = x_query @ W_Q, x_memory @ W_K.T, x_memory @ W_V
    A = torch.softmax(Q @ K.T / math.sqrt(K.shape[-1]), dim=-1)
    return A @ V, A


@wrong("2.1", "dropout on the weights", r"dropout")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(x_query, x_memory, W_Q, W_K, W_V, out=lambda A, V: (F.dropout(A, 0.1) @ V, F.dropout(A, 0.1)))


@wrong("2.1", "queries from x_memory and keys from x_query (roles swapped)", r"swapped|roles|x_query w_q")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(x_memory, x_query, W_Q, W_K, W_V, values=lambda xq, xm, W: xq @ W)


@wrong("2.1", "divided by sqrt(T_q)", r"number of queries")
def _(x_query, x_memory, W_Q, W_K, W_V):
    T_q = x_query.shape[0]
    return _head(x_query, x_memory, W_Q, W_K, W_V, scores=lambda Q, K: Q @ K.T / math.sqrt(T_q))


@wrong("2.1", "element-wise Q * K summed (no pairing)", r"q\[:, none, :\]|q @ k")
def _(x_query, x_memory, W_Q, W_K, W_V):
    return _head(
        x_query, x_memory, W_Q, W_K, W_V, scores=lambda Q, K: (Q * K).sum(-1, keepdim=True) / math.sqrt(K.shape[-1])
    )


@correct("2.1", "associative product, -1 axis names, float64")
def _(x_query, x_memory, W_Q, W_K, W_V):
    scores = (x_query.double() @ W_Q.double()) @ (x_memory.double() @ W_K.double()).transpose(0, 1)
    weights = torch.softmax(scores / W_K.size(-1) ** 0.5, dim=1)
    return weights @ x_memory.double() @ W_V.double(), weights


@correct("2.1", "a loop over the queries")
def _(x_query, x_memory, W_Q, W_K, W_V):
    K, V = x_memory @ W_K, x_memory @ W_V
    rows = [torch.softmax(K @ (x @ W_Q) / math.sqrt(K.shape[1]), dim=0) for x in x_query]
    A = torch.stack(rows)
    return A @ V, A


# ---------------------------------------------------------------- 2.2 design_keys(query, share)


def _keys(query, scores, *, direction=None):
    d_k = query.shape[0]
    direction = math.sqrt(d_k) * query / (query @ query) if direction is None else direction
    return torch.tensor(scores, dtype=query.dtype)[:, None] * direction[None, :]


def _blend_scores(share, *, log=math.log, gap=30.0):
    first, second = log(share), log(1.0 - share)
    return [first, second, min(first, second) - gap]


@wrong("2.2", "keys as columns (d_k, 3)", r"swapped \(transpose")
def _(query, share):
    return _keys(query, _blend_scores(share)).T


@wrong("2.2", "divided by |q| instead of |q|^2", r"\|q\|\^2|q\.q")
def _(query, share):
    return _keys(query, _blend_scores(share), direction=math.sqrt(query.shape[0]) * query / query.norm())


@wrong("2.2", "not divided by |q|^2 at all", r"\|q\|\^2|q\.q")
def _(query, share):
    return _keys(query, _blend_scores(share), direction=math.sqrt(query.shape[0]) * query)


@wrong("2.2", "log base 10", r"natural log|log10|base")
def _(query, share):
    return _keys(query, _blend_scores(share, log=math.log10))


@wrong("2.2", "only two keys", r"axis 0 should hold key \(3\)|three keys|3 keys")
def _(query, share):
    return _keys(query, _blend_scores(share)[:2])


@wrong("2.2", "third key only 2 below", r"third key still")
def _(query, share):
    return _keys(query, _blend_scores(share, gap=2.0))


@wrong("2.2", "log(1 - share) on the first key", r"shares are swapped")
def _(query, share):
    return _keys(query, _blend_scores(1.0 - share))


@wrong("2.2", "a list of keys", r"torch\.tensor")
def _(query, share):
    return _keys(query, _blend_scores(share)).tolist()


@wrong(
    "2.2",
    "scores share and 1 - share, logs taken of the weights instead",
    r"logs of the shares",
    parts=("scores equal to the shares",),
)
def _(query, share):
    return _keys(query, [math.exp(share), math.exp(1 - share), -30.0])


@correct("2.2", "float64, the third key pointing away, scores in a loop")
def _(query, share):
    q = query.double()
    unit = q / q.dot(q) * math.sqrt(len(q))
    rows = [math.log(share) * unit, math.log1p(-share) * unit, -40.0 * unit]
    return torch.stack(rows)


# ---------------------------------------------------------------- 2.3 previous_token_projections(T, d_content)


def _shift(T, d_content, *, offset=-1, strength=None, d_k=None, content=0.0, flip=False):
    d_k = T if d_k is None else d_k
    W_Q = torch.zeros(T + d_content, d_k)
    W_K = torch.zeros(T + d_content, d_k)
    W_K[:T, :T] = torch.eye(T)
    for i in range(T):
        if 0 <= i + offset < T:
            W_Q[i, i + offset] = 1.0
    W_Q *= math.sqrt(d_k) * math.log(100 * T) if strength is None else strength(T, d_k)
    if content:
        W_Q[T:, :] = content
        W_K[T:, :] = content
    return (W_K, W_Q) if flip else (W_Q, W_K)


@wrong("2.3", "W_Q and W_K transposed (d_k, T + d_content)", r"needs one row per feature")
def _(T, d_content):
    W_Q, W_K = _shift(T, d_content)
    return W_Q.T, W_K.T


@wrong("2.3", "strength ln 9: 0.9 only when T = 2", r"too flat|scale your scores up|grow with t")
def _(T, d_content):
    return _shift(T, d_content, strength=lambda T, d_k: math.sqrt(d_k) * math.log(9))


@wrong("2.3", "strength without sqrt(d_k)", r"divided by sqrt\(d_k\)|grow with t|scale your scores up")
def _(T, d_content):
    return _shift(T, d_content, strength=lambda T, d_k: math.log(100 * T))


@wrong("2.3", "ones in the content rows", r"the content changes where it looks")
def _(T, d_content):
    return _shift(T, d_content, content=1.0)


@wrong("2.3", "both matrices shifted (looks at itself)", r"itself")
def _(T, d_content):
    W_Q, W_K = _shift(T, d_content)
    W_K = torch.zeros_like(W_K)
    for j in range(1, T):
        W_K[j, j - 1] = 1.0
    return W_Q, W_K


@wrong("2.3", "a negative strength", r"negative|smallest|sign|positive")
def _(T, d_content):
    return _shift(T, d_content, strength=lambda T, d_k: -math.sqrt(d_k) * math.log(100 * T))


@wrong("2.3", "square matrices of the positions only (content rows missing)", r"needs one row per feature")
def _(T, d_content):
    W_Q, W_K = _shift(T, 0)
    return W_Q, W_K


@wrong("2.3", "strength sqrt(T) log T", r"too flat|scale your scores up|grow with t")
def _(T, d_content):
    return _shift(T, d_content, strength=lambda T, d_k: math.sqrt(d_k) * math.log(T))


@wrong("2.3", "offset +1 (the next token)", r"next")
def _(T, d_content):
    return _shift(T, d_content, offset=+1)


@wrong("2.3", "numpy arrays", r"return torch tensors")
def _(T, d_content):
    W_Q, W_K = _shift(T, d_content)
    return W_Q.numpy(), W_K.numpy()


@correct("2.3", "position 0 wraps around to T - 1, extra key columns, float64")
def _(T, d_content):
    d_k = T + 2
    W_Q = torch.zeros(T + d_content, d_k, dtype=torch.float64)
    W_K = torch.zeros(T + d_content, d_k, dtype=torch.float64)
    for t in range(T):
        W_K[t, t] = 1.0
        W_Q[t, (t - 1) % T] = math.sqrt(d_k) * math.log(200.0 * T)
    return W_Q, W_K


# ====================================================================== chapter 3


# ---------------------------------------------------------------- 3.1 hardmax(scores)


@wrong("3.1", "one_hot(argmax) as long integers, first of the ties", r"first of them")
def _(scores):
    return F.one_hot(scores.argmax(dim=-1), scores.shape[-1])


@wrong("3.1", "the maximum of the whole tensor", r"not of the whole tensor")
def _(scores):
    is_max = (scores == scores.max()).float()
    return is_max / is_max.sum(dim=-1, keepdim=True).clamp_min(1)


@wrong("3.1", "divided by the number of maxima in the whole tensor", r"each row's own count")
def _(scores):
    is_max = (scores == scores.amax(dim=-1, keepdim=True)).float()
    return is_max / is_max.sum()


@wrong("3.1", "scores.max(dim=-1) returned", r"values, indices|one-hot weights|torch\.max")
def _(scores):
    return scores.max(dim=-1)


@wrong("3.1", "weight on every score above the mean", r"not the row's maximum")
def _(scores):
    above = (scores >= scores.mean(dim=-1, keepdim=True)).float()
    return above / above.sum(dim=-1, keepdim=True)


@wrong("3.1", "amax without keepdim", r"keepdim")
def _(scores):
    is_max = (scores == scores.amax(dim=-1)).float()
    return is_max / is_max.sum(dim=-1, keepdim=True)


@wrong("3.1", "(weights, index) returned", r"a tuple|tensor of|one tensor|pair")
def _(scores):
    is_max = (scores == scores.amax(dim=-1, keepdim=True)).float()
    return is_max / is_max.sum(dim=-1, keepdim=True), scores.argmax(dim=-1)


@wrong("3.1", "the scores kept at the maxima", r"your weights are the scores|scores themselves")
def _(scores):
    return scores * (scores == scores.amax(dim=-1, keepdim=True))


@wrong("3.1", "near-ties within 0.5 counted as ties", r"not the row's maximum")
def _(scores):
    is_max = torch.isclose(scores, scores.amax(dim=-1, keepdim=True), atol=0.5).float()
    return is_max / is_max.sum(dim=-1, keepdim=True)


@correct("3.1", "float64, where(), the count with keepdim")
def _(scores):
    top = scores.double().max(dim=-1, keepdim=True).values
    hits = torch.where(scores.double() == top, 1.0, 0.0)
    return hits / hits.sum(-1, keepdim=True)


@correct("3.1", "a loop over the rows of a flattened view")
def _(scores):
    flat = scores.reshape(-1, scores.shape[-1])
    out = torch.zeros_like(flat)
    for i, row in enumerate(flat):
        tops = (row == row.max()).nonzero().flatten()
        out[i, tops] = 1.0 / len(tops)
    return out.reshape(scores.shape)


# ---------------------------------------------------------------- 3.2 sparsemax(scores)


def _sparse(
    scores,
    *,
    descending=True,
    values=True,
    index_shift=0,
    test_one=1.0,
    divide_by_n=False,
    unsorted_sum=False,
    clamp=True,
):
    order = torch.sort(scores, descending=descending)
    z = order.values if values else order.indices.to(scores.dtype)
    k = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    cumulative = (scores if unsorted_sum else z).cumsum(dim=0)
    support = max(int((test_one + k * z > cumulative).sum()), 1)
    index = min(support - 1 + index_shift, len(scores) - 1)
    theta = (cumulative[index] - 1) / (len(scores) if divide_by_n else support)
    return torch.clamp(scores - theta, min=0) if clamp else torch.clamp(scores, min=float(theta))


@wrong("3.2", "sorted the indices, not the values", r"values")
def _(scores):
    return _sparse(scores, values=False)


@wrong("3.2", "cumulative[support] (one past the support)", r"cumulative\[k - 1\]|k largest|the sum of the k")
def _(scores):
    return _sparse(scores, index_shift=1)


@wrong("3.2", "clamped at theta instead of subtracting it", r"subtract")
def _(scores):
    return _sparse(scores, clamp=False)


@wrong("3.2", "theta divided by n, not by the support size", r"divide.*by k|/ k|support size|size of the support")
def _(scores):
    return _sparse(scores, divide_by_n=True)


@wrong("3.2", "cumsum of the unsorted scores", r"sorted")
def _(scores):
    return _sparse(scores, unsorted_sum=True)


@wrong("3.2", "support test without the 1 +", r"1 \+ k z")
def _(scores):
    return _sparse(scores, test_one=0.0)


@wrong("3.2", "softmax with the small weights cut and renormalised", r"minus one threshold")
def _(scores):
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(weights < 0.1, torch.zeros_like(weights), weights)
    return weights / weights.sum()


@wrong("3.2", "computed in numpy", r"differentiable|autograd")
def _(scores):
    import numpy as np

    z = np.sort(scores.detach().numpy())[::-1]
    k = np.arange(1, len(z) + 1)
    cumulative = np.cumsum(z)
    support = int((1 + k * z > cumulative).sum())
    theta = (cumulative[support - 1] - 1) / support
    return torch.from_numpy(np.maximum(scores.detach().numpy() - theta, 0))


@wrong("3.2", "returned (weights, theta)", r"tuple|a tensor")
def _(scores):
    weights = _sparse(scores)
    return weights, weights.sum()


@correct("3.2", "ascending sort flipped, support by nonzero, float64")
def _(scores):
    z = scores.double().sort().values.flip(0)
    k = torch.arange(1, z.numel() + 1, dtype=torch.float64)
    cumulative = torch.cumsum(z, 0)
    support = int((1 + k * z > cumulative).nonzero().max()) + 1
    tau = (cumulative[support - 1] - 1) / support
    return torch.relu(scores.double() - tau)


# ---------------------------------------------------------------- 3.3 beta_for_top_weight(scores, target=0.9)


def _top(scores, beta):
    return torch.softmax(beta * scores.double(), dim=0).max().item()


def _tied(scores):
    return (scores == scores.max()).sum() > 1


@wrong("3.3", "returned the weights at beta", r"return a number")
def _(scores, target=0.9):
    if _tied(scores):
        return None
    low, high = 0.0, 1.0
    while _top(scores, high) < target:
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        low, high = (low, middle) if _top(scores, middle) >= target else (middle, high)
    return torch.softmax(high * scores, dim=0)


@wrong("3.3", "a linear search in steps of 0.05", r"not the smallest|more finely")
def _(scores, target=0.9):
    if _tied(scores):
        return None
    beta = 0.0
    while _top(scores, beta) < target:
        beta += 0.05
    return beta


@wrong("3.3", "bisection between 0 and 10 only", r"upper end of the search", parts=("the smallest beta",))
def _(scores, target=0.9):
    if _tied(scores):
        return None
    low, high = 0.0, 10.0
    while high - low > 1e-9:
        middle = (low + high) / 2
        low, high = (low, middle) if _top(scores, middle) >= target else (middle, high)
    return high


@wrong("3.3", "doubling only, no bisection", r"not the smallest|more finely")
def _(scores, target=0.9):
    if _tied(scores):
        return None
    beta = 0.01
    while _top(scores, beta) < target:
        beta *= 2
    return beta


@wrong("3.3", "math.inf for a tie", r"return none|or none")
def _(scores, target=0.9):
    if _tied(scores):
        return math.inf
    low, high = 0.0, 1.0
    while _top(scores, high) < target:
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        low, high = (low, middle) if _top(scores, middle) >= target else (middle, high)
    return high


@wrong(
    "3.3", "the gap to the mean in a closed form", r"search for it with all the scores", parts=("the smallest beta",)
)
def _(scores, target=0.9):
    if _tied(scores):
        return None
    return math.log(target / (1 - target)) / float(scores.max() - scores.mean())


@wrong("3.3", "0 for a tie", r"return none", parts=("ties not handled",))
def _(scores, target=0.9):
    if _tied(scores):
        return 0.0
    low, high = 0.0, 1.0
    while _top(scores, high) < target:
        low, high = high, 2 * high
    while high - low > 1e-9 * high:
        middle = (low + high) / 2
        low, high = (low, middle) if _top(scores, middle) >= target else (middle, high)
    return high


@wrong("3.3", "bisection stopped at an absolute width of 0.05", r"not the smallest|more finely|just below")
def _(scores, target=0.9):
    if _tied(scores):
        return None
    low, high = 0.0, 1.0
    while _top(scores, high) < target:
        low, high = high, 2 * high
    while high - low > 0.05:
        middle = (low + high) / 2
        low, high = (low, middle) if _top(scores, middle) >= target else (middle, high)
    return (low + high) / 2


@wrong(
    "3.3",
    "the second largest score's weight searched",
    r"the top weight \(the largest score's\)",
    parts=("the smallest beta",),
)
def _(scores, target=0.9):
    if _tied(scores):
        return None
    second = int(scores.topk(2).indices[1])
    high = 1.0
    while torch.softmax(high * scores.double(), 0)[second].item() < target and high < 1e6:
        high = 2 * high
    return high


@correct("3.3", "a 0-d tensor, bisection with a fixed number of steps")
def _(scores, target=0.9):
    s = scores.double()
    if int((s == s.max()).sum()) > 1:
        return None
    high = torch.tensor(1.0, dtype=torch.float64)
    while torch.softmax(high * s, 0).max() < target:
        high = high * 2
    low = high / 2 if high > 1 else torch.tensor(0.0, dtype=torch.float64)
    for _ in range(80):
        middle = (low + high) / 2
        if torch.softmax(middle * s, 0).max() >= target:
            high = middle
        else:
            low = middle
    return high


# ---------------------------------------------------------------- 3.4 straight_through_top_m(scores, m=1)


def _kept(scores, m):
    return scores >= scores.topk(m, dim=-1).values[..., -1:]


@wrong("3.4", "the chapter's line with the top-m weights not detached", r"plus the softmax's|detach")
def _(scores, m=1):
    top = torch.softmax(scores.masked_fill(~_kept(scores, m), float("-inf")), dim=-1)
    soft = torch.softmax(scores, dim=-1)
    return top + soft - soft.detach()


@wrong("3.4", "detached the softmax term instead of its copy", r"opposite sign")
def _(scores, m=1):
    top = torch.softmax(scores.masked_fill(~_kept(scores, m), float("-inf")), dim=-1).detach()
    soft = torch.softmax(scores, dim=-1)
    return top + soft.detach() - soft


@wrong("3.4", "the whole sum detached", r"no gradient reaches")
def _(scores, m=1):
    top = torch.softmax(scores.masked_fill(~_kept(scores, m), float("-inf")), dim=-1)
    soft = torch.softmax(scores, dim=-1)
    return (top + soft - soft.detach()).detach()


@wrong("3.4", "one_hot of the argmax whatever m", r"m is ignored")
def _(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    return F.one_hot(scores.argmax(dim=-1), scores.shape[-1]).to(scores.dtype) + soft - soft.detach()


@wrong("3.4", "the softmax of the kept scores as the borrowed term", r"no gradient reaches|all the keys")
def _(scores, m=1):
    top = torch.softmax(scores.masked_fill(~_kept(scores, m), float("-inf")), dim=-1)
    return top.detach() + top - top.detach()


@wrong("3.4", "topk's values returned", r"topk's values|weights of the scores' shape")
def _(scores, m=1):
    return scores.topk(m, dim=-1).values


@wrong("3.4", "one_hot of argmax(dim=0)", r"wrong axis")
def _(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    return F.one_hot(scores.argmax(dim=0), scores.shape[-1]).to(scores.dtype) + soft - soft.detach()


@wrong("3.4", "masked_fill_ on the scores", r"in-place")
def _(scores, m=1):
    kept = _kept(scores, m)
    soft = torch.softmax(scores, dim=-1)
    scores.masked_fill_(~kept, float("-inf"))
    return torch.softmax(scores, dim=-1).detach() + soft - soft.detach()


@wrong("3.4", "the hard and soft roles swapped", r"forward value is the softmax's")
def _(scores, m=1):
    top = torch.softmax(scores.masked_fill(~_kept(scores, m), float("-inf")), dim=-1)
    soft = torch.softmax(scores, dim=-1)
    return soft + top - top.detach()


@wrong("3.4", "a sharp softmax as the hard value", r"not exactly|never exactly 0")
def _(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    return torch.softmax(50 * scores, dim=-1).detach() + soft - soft.detach()


@wrong("3.4", "1/m on each of the top m", r"1/m")
def _(scores, m=1):
    kept = _kept(scores, m).to(scores.dtype)
    soft = torch.softmax(scores, dim=-1)
    return kept / m + soft - soft.detach()


@wrong("3.4", "strict > for the m-th score", r"m - 1 keys|>=")
def _(scores, m=1):
    kth = scores.topk(m, dim=-1).values[..., -1:]
    top = torch.softmax(scores.masked_fill(scores <= kth, float("-inf")), dim=-1)
    soft = torch.softmax(scores, dim=-1)
    return top.detach() + soft - soft.detach()


@wrong("3.4", "0/1 from >= the m-th score when m = 1", r"the row sums to")
def _(scores, m=1):
    soft = torch.softmax(scores, dim=-1)
    hard = (scores >= scores.topk(m, dim=-1).values[..., -1:]).to(scores.dtype)
    if m > 1:
        hard = torch.softmax(scores.masked_fill(hard == 0, float("-inf")), dim=-1)
    return hard + soft - soft.detach()


@wrong("3.4", "softmax over the queries borrowed", r"wrong axis")
def _(scores, m=1):
    top = torch.softmax(scores.masked_fill(~_kept(scores, m), float("-inf")), dim=-1)
    soft = torch.softmax(scores, dim=0)
    return top.detach() + soft - soft.detach()


@correct("3.4", "a loop over the rows of a flattened view")
def _(scores, m=1):
    rows = scores.reshape(-1, scores.shape[-1])
    hard = torch.zeros_like(rows)
    for i, row in enumerate(rows.detach()):
        order = row.argsort(descending=True)
        kept = row >= row[order[m - 1]]
        hard[i, kept] = torch.softmax(row[kept], dim=0)
    soft = torch.softmax(scores, dim=-1)
    return hard.reshape(scores.shape) + soft - soft.detach()


@correct("3.4", "float64 inside, the scores' dtype out")
def _(scores, m=1):
    s = scores.double()
    kth = s.topk(m, dim=-1).values[..., -1:]
    top = torch.softmax(s.masked_fill(s < kth, -math.inf), dim=-1)
    soft = torch.softmax(s, dim=-1)
    return (top.detach() + soft - soft.detach()).to(scores.dtype)


@correct("3.4", "scatter of topk, then soft + (hard - soft).detach()")
def _(scores, m=1):
    values, indices = scores.topk(m, dim=-1)
    hard = torch.zeros_like(scores).scatter(-1, indices, torch.softmax(values, dim=-1))
    soft = torch.softmax(scores, dim=-1)
    return soft + (hard - soft).detach()


@correct("3.4", "torch.where for the mask, the borrowed term in brackets")
def _(scores, m=1):
    kept = _kept(scores, m)
    top = torch.softmax(torch.where(kept, scores, torch.tensor(float("-inf"), dtype=scores.dtype)), dim=-1)
    soft = torch.softmax(scores, dim=-1)
    return top.detach() + (soft - soft.detach())


# ====================================================================== chapter 4


# ---------------------------------------------------------------- 4.1 (split_heads, merge_heads)


def _split(x, num_heads):
    batch, T, d_model = x.shape
    return x.reshape(batch, T, num_heads, d_model // num_heads).transpose(1, 2)


def _merge(x):
    batch, heads, T, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, T, heads * d_head)


def _split_permuted_wrongly(x, num_heads):
    batch, T, d_model = x.shape
    return x.reshape(batch, T, num_heads, d_model // num_heads).permute(0, 2, 3, 1)


def _split_with_true_division(x, num_heads):
    batch, T, d_model = x.shape
    return x.reshape(batch, T, num_heads, d_model / num_heads).transpose(1, 2)


def _split_as_chunks(x, num_heads):
    return x.chunk(num_heads, dim=-1)


def _split_batch_times_heads(x, num_heads):
    batch, T, d_model = x.shape
    return _split(x, num_heads).reshape(batch * num_heads, T, d_model // num_heads)


def _merge_summed(x):
    return x.sum(dim=1)


def _merge_on_the_tokens(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=1)


def _merge_features_first(x):
    batch, heads, T, d_head = x.shape
    return x.permute(0, 1, 3, 2).reshape(batch, heads * d_head, T)


def _merge_wrong_pair(x):
    batch, heads, T, d_head = x.shape
    return x.transpose(2, 3).reshape(batch, T, heads * d_head)


wrong("4.1", "split: permute(0, 2, 3, 1)", r"swapped")((_split_permuted_wrongly, _merge))
wrong("4.1", "split: d_model / num_heads (a float)", r"//")((_split_with_true_division, _merge))
wrong("4.1", "split: the chunks returned as a tuple", r"stack")((_split_as_chunks, _merge))
wrong("4.1", "split: batch and heads merged", r"merged")((_split_batch_times_heads, _merge))
wrong("4.1", "merge: the heads summed", r"summed the heads|concatenate")((_split, _merge_summed))
wrong("4.1", "merge: heads concatenated on the tokens", r"along the features|dim=-1")((_split, _merge_on_the_tokens))
wrong("4.1", "merge: features before tokens", r"swapped")((_split, _merge_features_first))
wrong("4.1", "merge: transpose(2, 3) instead of (1, 2)", r"transpose\(1, 2\)")((_split, _merge_wrong_pair))
wrong("4.1", "passed as a dict", r"pair")({"split_heads": _split, "merge_heads": _merge})


def _split_unflatten(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2).contiguous()


def _merge_loop(x):
    return torch.cat([x[:, h] for h in range(x.shape[1])], dim=-1)


correct("4.1", "unflatten, and a loop of cat over the heads")((_split_unflatten, _merge_loop))
correct("4.1", "view with -1, permute back and flatten")(
    (
        lambda x, n: x.view(x.shape[0], -1, n, x.shape[-1] // n).permute(0, 2, 1, 3),
        lambda x: x.permute(0, 2, 1, 3).flatten(2),
    )
)


# ---------------------------------------------------------------- 4.2 mha_parameter_count(d_model, num_heads, d_head, bias)


def _parameters(
    d_model,
    num_heads,
    d_head,
    bias,
    *,
    bias_always=False,
    bias_reversed=False,
    extra=0,
    projections=3,
    q_per_head=False,
):
    inner = num_heads * d_head
    weights = projections * d_model * inner + inner * d_model + extra
    with_bias = (not bias) if bias_reversed else (bias or bias_always)
    biases = (projections * (d_head if q_per_head else inner) + d_model) if with_bias else 0
    return weights + biases


@wrong("4.2", "biases counted even with bias=False", r"even with bias=false|whether or not")
def _(d_model, num_heads, d_head, bias):
    return _parameters(d_model, num_heads, d_head, bias, bias_always=True)


@wrong("4.2", "bias=True and False reversed", r"when bias is false|reversed|the other way")
def _(d_model, num_heads, d_head, bias):
    return _parameters(d_model, num_heads, d_head, bias, bias_reversed=True)


@wrong("4.2", "a layer norm counted too", r"too many|only w_q, w_k, w_v")
def _(d_model, num_heads, d_head, bias):
    return _parameters(d_model, num_heads, d_head, bias, extra=2 * d_model)


@wrong("4.2", "no key projection", r"one in each of w_q, w_k, w_v and w_o")
def _(d_model, num_heads, d_head, bias):
    return _parameters(d_model, num_heads, d_head, bias, projections=2)


@wrong("4.2", "input biases of one head only", r"one number per output feature")
def _(d_model, num_heads, d_head, bias):
    return _parameters(d_model, num_heads, d_head, bias, q_per_head=True)


@wrong("4.2", "W_Q, W_K, W_V as d_model x d_model", r"every weight matrix is d_model x \(num_heads")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 3 * d_model * d_model + inner * d_model + ((3 * inner + d_model) if bias else 0)


@wrong("4.2", "four biases of d_model", r"one number per output feature")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 4 * d_model * inner + (4 * d_model if bias else 0)


@wrong("4.2", "a list of the four counts", r"whole number|an int")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    b = inner if bias else 0
    return [d_model * inner + b, d_model * inner + b, d_model * inner + b, inner * d_model + (d_model if bias else 0)]


@wrong("4.2", "the string of a number", r"whole number|an int")
def _(d_model, num_heads, d_head, bias):
    return str(_parameters(d_model, num_heads, d_head, bias))


@correct("4.2", "a float from / and numpy's int64")
def _(d_model, num_heads, d_head, bias):
    import numpy as np

    inner = num_heads * d_head
    return np.int64(4 * d_model * inner * 1.0 + bias * (3 * inner + d_model))


@correct("4.2", "counted from an nn.Linear per projection")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    layers = [nn.Linear(d_model, inner, bias=bias) for _ in range(3)] + [nn.Linear(inner, d_model, bias=bias)]
    return sum(p.numel() for layer in layers for p in layer.parameters())


# ---------------------------------------------------------------- 4.3 multi_head_self_attention(x, in_w, in_b, out_w, out_b, num_heads)


def _mha(x, in_w, in_b, out_w, out_b, num_heads, *, qkv=None, split=None, weights_of=None, merge=None, project=None):
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    q, k, v = qkv(x, in_w, in_b) if qkv else (x @ in_w.T + in_b).chunk(3, dim=-1)
    heads = split or (lambda t: t.reshape(batch, T, num_heads, d_head).transpose(1, 2))
    q, k, v = heads(q), heads(k), heads(v)
    A = weights_of(q, k) if weights_of else torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)
    merged = merge(A @ v) if merge else (A @ v).transpose(1, 2).reshape(batch, T, d_model)
    out = project(merged, out_w, out_b) if project else merged @ out_w.T + out_b
    return out, A


@wrong("4.3", "q, k, v chunked along the tokens", r"chunk\(3, dim=-1\)|dim=-1")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, qkv=lambda x, w, b: (x @ w.T + b).chunk(3, dim=1))


@wrong("4.3", "weights averaged over the heads", r"head is missing|averag")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    out, A = _mha(x, in_w, in_b, out_w, out_b, num_heads)
    return out, A.mean(dim=1)


@wrong("4.3", "the scores returned as the weights", r"these are the scores")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    out, A = _mha(x, in_w, in_b, out_w, out_b, num_heads)
    q, k, _ = (x @ in_w.T + in_b).chunk(3, dim=-1)
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    q, k = (t.reshape(batch, T, num_heads, d_head).transpose(1, 2) for t in (q, k))
    return out, q @ k.transpose(-2, -1) / math.sqrt(d_head)


@wrong("4.3", "dropout on the weights", r"dropout")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    d_head = x.shape[-1] // num_heads
    return _mha(
        x,
        in_w,
        in_b,
        out_w,
        out_b,
        num_heads,
        weights_of=lambda q, k: F.dropout(torch.softmax(q @ k.mT / math.sqrt(d_head), -1), 0.1),
    )


@wrong("4.3", "merged after transpose(2, 3)", r"transpose\(1, 2\)|put back in place")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    batch, T, d_model = x.shape
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, merge=lambda h: h.transpose(2, 3).reshape(batch, T, d_model))


@wrong("4.3", "output bias added before the projection", r"bias.*after|before the projection")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, project=lambda m, w, b: (m + b) @ w.T)


@wrong("4.3", "returned only the output", r"pair \(out, weights\)")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads)[0]


@wrong("4.3", "x @ in_proj_weight (not transposed)", r"transpose in_proj_weight")
def _(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):
    qkv = x @ in_proj_weight + in_proj_bias
    return _mha(
        x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, qkv=lambda *_: qkv.chunk(3, -1)
    )


@wrong("4.3", "only the value bias added", r"query bias")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    d = x.shape[-1]
    return _mha(
        x,
        in_w,
        in_b,
        out_w,
        out_b,
        num_heads,
        qkv=lambda x, w, b: ((x @ w[:d].T), (x @ w[d : 2 * d].T), (x @ w[2 * d :].T + b[2 * d :])),
    )


@wrong("4.3", "heads left on the last axis", r"transpose\(1, 2\)|heads axis|before the tokens")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    batch, T, d_model = x.shape
    return _mha(
        x,
        in_w,
        in_b,
        out_w,
        out_b,
        num_heads,
        split=lambda t: t.reshape(batch, T, num_heads, d_model // num_heads),
        merge=lambda h: h.reshape(batch, T, d_model),
    )


@correct("4.3", "a loop over the heads in float64, F.linear")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    x, in_w, in_b, out_w, out_b = (t.double() for t in (x, in_w, in_b, out_w, out_b))
    q, k, v = F.linear(x, in_w, in_b).chunk(3, dim=-1)
    d_head = x.shape[-1] // num_heads
    outs, weights = [], []
    for h in range(num_heads):
        block = slice(h * d_head, (h + 1) * d_head)
        a = torch.softmax(q[..., block] @ k[..., block].transpose(1, 2) / d_head**0.5, dim=-1)
        outs.append(a @ v[..., block])
        weights.append(a)
    return F.linear(torch.cat(outs, dim=-1), out_w, out_b), torch.stack(weights, dim=1)


# ---------------------------------------------------------------- 4.4 partner_head(model, task)


def _attention_of(model):
    return model.encoder.layers[0].self_attn


def _without(model, head, *, rows=False, width=None):
    """A copy of the model with head `head` zeroed in W_O, as students write it (columns, or rows by mistake)."""
    ablated = copy.deepcopy(model)
    attention = _attention_of(ablated)
    d_k = width or attention.d_head
    with torch.no_grad():
        if rows:
            attention.out_proj.weight[head * d_k : (head + 1) * d_k, :] = 0.0
        else:
            attention.out_proj.weight[:, head * d_k : (head + 1) * d_k] = 0.0
    return ablated


def _partner_accuracies(model, task, **removal):
    return [
        relation_accuracy(_without(model, head, **removal), task)["partner's digit"]
        for head in range(_attention_of(model).num_heads)
    ]


@wrong("4.4", "head 1, as in seed 0's head grid", r"depends on the model")
def _(model, task):
    return 1


@wrong("4.4", "the head with most weight on the partner", r"where a head looks")
def _(model, task):
    focus = head_focus(model, task)  # (heads, 3): previous, partner, itself
    return int(focus[:, 1].argmax())


@wrong("4.4", "last_weights averaged on the partner positions", r"where a head looks")
def _(model, task):
    with torch.no_grad():
        model(task.tokens)
    weights = _attention_of(model).last_weights  # (N, heads, T, T)
    on_partner = weights[:, :, 1:, :].gather(
        3, task.partner[:, None, 1:, None].expand(-1, weights.shape[1], -1, 1)
    )  # (N, heads, T - 1, 1)
    return int(on_partner.mean(dim=(0, 2, 3)).argmax())


@wrong("4.4", "the head with most weight on the previous token", r"follows the previous token")
def _(model, task):
    return int(head_focus(model, task)[:, 0].argmax())


@wrong("4.4", "the chapter's without_head without the deepcopy", r"changed the model it was given")
def _(model, task):
    attention = _attention_of(model)
    d_k = attention.d_head
    scores = []
    for head in range(attention.num_heads):
        with torch.no_grad():
            attention.out_proj.weight[:, head * d_k : (head + 1) * d_k] = 0.0
        scores.append(relation_accuracy(model, task)["partner's digit"])
    return scores.index(min(scores))


@wrong("4.4", "rows of out_proj.weight zeroed", r"out_features, in_features")
def _(model, task):
    left = _partner_accuracies(model, task, rows=True)
    return left.index(min(left))


@wrong("4.4", "d_k = 16, the chapter's head size", r"not one head's block")
def _(model, task):
    left = _partner_accuracies(model, task, width=16)
    return left.index(min(left))


@wrong(
    "4.4",
    "argmin of 'both digits'",
    r"'both digits' falls without either head",
    parts=("the previous-token head returned",),
)
def _(model, task):
    heads = _attention_of(model).num_heads
    both = [relation_accuracy(_without(model, head), task)["both digits"] for head in range(heads)]
    return both.index(min(both))


@wrong("4.4", "the head whose removal hurts least", r"leaves the partner's digit highest")
def _(model, task):
    left = _partner_accuracies(model, task)
    return left.index(max(left))


@wrong("4.4", "partner digit read as class % 4", r"follows the previous token")
def _(model, task):
    scores = []
    for head in range(_attention_of(model).num_heads):
        with torch.no_grad():
            predicted = _without(model, head)(task.tokens).argmax(dim=-1)  # (N, T)
        labelled = task.targets != -100
        digits = task.num_digits
        scores.append((predicted[labelled] % digits == task.targets[labelled] % digits).float().mean().item())
    return scores.index(min(scores))


@wrong("4.4", "returned the accuracies of every head", r"one per head|return the number of the head")
def _(model, task):
    return torch.tensor(_partner_accuracies(model, task))


@wrong("4.4", "returned the lowest accuracy", r"an accuracy")
def _(model, task):
    return min(_partner_accuracies(model, task))


@wrong("4.4", "heads counted from 1", r"from 1")
def _(model, task):
    left = _partner_accuracies(model, task)
    return left.index(min(left)) + 1


@wrong("4.4", "a loop over range(2), the chapter's two heads", r"removed only.*every head")
def _(model, task):
    left = [relation_accuracy(_without(model, head), task)["partner's digit"] for head in range(2)]
    return left.index(min(left))


@correct("4.4", "a copy per head, argmin as a 0-d tensor")
def _(model, task):
    accuracies = torch.tensor(_partner_accuracies(model, task))
    return accuracies.argmin()


@correct("4.4", "a hook on out_proj that zeroes the head's input, no copy")
def _(model, task):
    attention = _attention_of(model)
    d_k, found = attention.d_head, {}
    for head in range(attention.num_heads):

        def silence(module, inputs, head=head):
            merged = inputs[0].clone()
            merged[..., head * d_k : (head + 1) * d_k] = 0.0
            return (merged,)

        handle = attention.out_proj.register_forward_pre_hook(silence)
        try:
            found[head] = relation_accuracy(model, task)["partner's digit"]
        finally:
            handle.remove()
    return min(found, key=found.get)


@correct("4.4", "columns zeroed in place and put back")
def _(model, task):
    weight = _attention_of(model).out_proj.weight
    d_k, best, lowest = _attention_of(model).d_head, None, 2.0
    for head in range(_attention_of(model).num_heads):
        block = slice(head * d_k, (head + 1) * d_k)
        kept = weight[:, block].detach().clone()
        with torch.no_grad():
            weight[:, block] = 0.0
        accuracy = relation_accuracy(model, task)["partner's digit"]
        with torch.no_grad():
            weight[:, block] = kept
        if accuracy < lowest:
            best, lowest = head, accuracy
    return best


@correct("4.4", "a float64 copy, W_V's rows and bias zeroed, accuracy by hand")
def _(model, task):
    labelled = task.targets != -100
    digits = task.num_digits
    scores = []
    for head in range(_attention_of(model).num_heads):
        ablated = copy.deepcopy(model).double()
        attention = _attention_of(ablated)
        block = slice(head * attention.d_head, (head + 1) * attention.d_head)
        with torch.no_grad():
            attention.v_proj.weight[block] = 0.0
            attention.v_proj.bias[block] = 0.0
            predicted = ablated(task.tokens).argmax(dim=-1)
        scores.append((predicted[labelled] // digits == task.targets[labelled] // digits).double().mean().item())
    return scores.index(min(scores))


# ====================================================================== chapter 5


# ---------------------------------------------------------------- 5.1 sinusoidal_table(num_positions, d_model)


def _sinusoid(num_positions, d_model, *, angle=None):
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angles = angle(positions, two_i, d_model) if angle else positions / 10000 ** (two_i / d_model)
    table = torch.zeros(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()


@wrong("5.1", "exponent 2i / (d_model - 1)", r"not 2i / \(d_model - 1\)")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model, angle=lambda p, two_i, d: p / 10000 ** (two_i / (d - 1)))


@wrong("5.1", "pairs counted from 1 in the exponent", r"from 0|i \+ 1|pairs counted")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model, angle=lambda p, two_i, d: p / 10000 ** ((two_i + 2) / d))


@wrong("5.1", "log10 in the exp form", r"natural log|log10|ln")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model, angle=lambda p, two_i, d: p * torch.exp(-math.log10(10000.0) * two_i / d))


@wrong("5.1", "10000 ** 2i / d_model without the parentheses", r"parenthes")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model, angle=lambda p, two_i, d: p / (10000**two_i / d))


@wrong("5.1", "an extra factor pi", r"\bpi\b|π")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model, angle=lambda p, two_i, d: math.pi * p / 10000 ** (two_i / d))


@wrong("5.1", "floor division of the positions", r"//|floor|whole")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model, angle=lambda p, two_i, d: p // 10000 ** (two_i / d))


@wrong("5.1", "sin and cos stacked, not interleaved into columns", r"flatten|reshape|an axis too many")
def _(num_positions, d_model):
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]
    angles = positions / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).float()


@wrong("5.1", "arguments read in the other order", r"other order|sinusoidal_table\(num_positions, d_model\)")
def _(d_model, num_positions):
    return _sinusoid(num_positions, d_model)


@wrong("5.1", "a numpy array", r"numpy|torch\.tensor")
def _(num_positions, d_model):
    return _sinusoid(num_positions, d_model).numpy()


@correct("5.1", "exp form, float64, a loop over the pairs")
def _(num_positions, d_model):
    table = torch.empty(num_positions, d_model, dtype=torch.float64)
    p = torch.arange(num_positions, dtype=torch.float64)
    for i in range(d_model // 2):
        omega = math.exp(-math.log(10000.0) * 2 * i / d_model)
        table[:, 2 * i], table[:, 2 * i + 1] = torch.sin(p * omega), torch.cos(p * omega)
    return table


@correct("5.1", "multiplied by 10000^(-2i/d), stacked and flattened")
def _(num_positions, d_model):
    p = torch.arange(num_positions)[:, None].float()
    angles = p * 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)


# ---------------------------------------------------------------- 5.2 offset_matrix(d_model, k)


def _rotation(d_model, k, *, angle=None, block=None):
    M = torch.zeros(d_model, d_model)
    for i in range(d_model // 2):
        a = angle(i, d_model, k) if angle else k / 10000 ** (2 * i / d_model)
        c, s = math.cos(a), math.sin(a)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor(block(c, s) if block else [[c, -s], [s, c]])
    return M


@wrong("5.2", "block [[c, -s], [-s, c]]", r"not a rotation")
def _(d_model, k):
    return _rotation(d_model, k, block=lambda c, s: [[c, -s], [-s, c]])


@wrong("5.2", "pairs counted from 1", r"pair i \+ 1|count the pairs from 0|from 0")
def _(d_model, k):
    return _rotation(d_model, k, angle=lambda i, d, k: k / 10000 ** (2 * (i + 1) / d))


@wrong("5.2", "moves k + 1 positions", r"k \+ 1")
def _(d_model, k):
    return _rotation(d_model, k, angle=lambda i, d, k: (k + 1) / 10000 ** (2 * i / d))


@wrong("5.2", "one 2 x 2 block returned", r"block-diagonal|one block per pair")
def _(d_model, k):
    a = k
    return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


@wrong("5.2", "base 1000", r"the base is 10000")
def _(d_model, k):
    return _rotation(d_model, k, angle=lambda i, d, k: k / 1000 ** (2 * i / d))


@wrong("5.2", "cosines only on the diagonal", r"not a rotation")
def _(d_model, k):
    return _rotation(d_model, k, block=lambda c, s: [[c, 0.0], [0.0, c]])


@wrong("5.2", "the angle in degrees", r"degrees|radians")
def _(d_model, k):
    return _rotation(d_model, k, angle=lambda i, d, k: math.radians(k / 10000 ** (2 * i / d)))


@wrong("5.2", "block turned a quarter too far ([[s, -c], [c, s]])", r"sine and the cosine are swapped")
def _(d_model, k):
    return _rotation(d_model, k, block=lambda c, s: [[s, -c], [c, s]])


@wrong("5.2", "a list of lists", r"torch\.tensor")
def _(d_model, k):
    return _rotation(d_model, k).tolist()


@correct("5.2", "torch.block_diag of float64 blocks")
def _(d_model, k):
    blocks = []
    for i in range(d_model // 2):
        a = k * 10000 ** (-2 * i / d_model)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64))
    return torch.block_diag(*blocks)


# ---------------------------------------------------------------- 5.3 order_blind_twins(tokens)


@wrong("5.3", "each row reversed", r"palindrome")
def _(tokens):
    return tokens.flip(1)


@wrong("5.3", "flip with dims=[0]", r"holds the tokens of row \d+.*within each row")
def _(tokens):
    return torch.flip(tokens, dims=[0])


@wrong("5.3", "torch.roll without dims", r"torch\.roll without dims")
def _(tokens):
    return torch.roll(tokens, 1)


@wrong("5.3", "each row sorted", r"sorted already")
def _(tokens):
    return tokens.sort(dim=1).values


@wrong("5.3", "the first two tokens swapped", r"same positions in every row.*equal tokens")
def _(tokens):
    T = tokens.shape[1]
    return tokens[:, [1, 0, *range(2, T)]]


@wrong("5.3", "a swap of two columns through views", r"is a view.*index lists")
def _(tokens):
    twins = tokens.clone()
    twins[:, 0], twins[:, -1] = twins[:, -1], twins[:, 0]
    return twins


# The order drawn can be the reversal (1 in 120), and then the palindrome is named: that is what it did.
@wrong("5.3", "one random order for the batch, not checked", r"came back unchanged", parts=("each row reversed",))
def _(tokens):
    return tokens[:, torch.randperm(tokens.shape[1])]


@wrong(
    "5.3",
    "the last token written over the first",
    r"copied onto another.*sees which tokens occur",
    parts=("a swap through views",),
)
def _(tokens):
    twins = tokens.clone()
    twins[:, 0] = tokens[:, -1]
    return twins


@wrong("5.3", "the batch transposed", r"shape")
def _(tokens):
    return tokens.T


@wrong("5.3", "rolled into the input itself", r"in place")
def _(tokens):
    tokens[:] = tokens.roll(1, dims=1)
    return tokens


@wrong("5.3", "a list of rolled rows", r"torch\.stack")
def _(tokens):
    return [row.roll(1) for row in tokens]


@wrong("5.3", "rolled by the row length", r"every row came back unchanged")
def _(tokens):
    return tokens.roll(tokens.shape[1], dims=1)


@wrong("5.3", "rolled, then a float tensor", r"whole numbers")
def _(tokens):
    return tokens.roll(1, dims=1).float()


@correct("5.3", "a loop: the first token swapped with the first one unlike it")
def _(tokens):
    twins = tokens.clone()
    for row in range(tokens.shape[0]):
        other = next(j for j in range(tokens.shape[1]) if tokens[row, j] != tokens[row, 0])
        twins[row, [0, other]] = tokens[row, [other, 0]]
    return twins


@correct("5.3", "rolled the other way, as int32")
def _(tokens):
    return torch.roll(tokens, shifts=-1, dims=1).to(torch.int32)


@correct("5.3", "a random order per row, drawn again until it changes the row")
def _(tokens):
    rows = []
    for row in tokens:
        while True:
            twin = row[torch.randperm(len(row))]
            if not torch.equal(twin, row):
                break
        rows.append(twin)
    return torch.stack(rows)


@correct("5.3", "a cycle of the positions by index")
def _(tokens):
    T = tokens.shape[1]
    return tokens[:, [*range(1, T), 0]]


# ---------------------------------------------------------------- 5.4 best_bag_accuracy(tokens, labels)


def _bags(tokens, labels, *, key=lambda row: tuple(sorted(row.tolist())), pick=None, per_bag=False):
    from collections import Counter, defaultdict

    groups = defaultdict(Counter)
    for row, label in zip(tokens, labels.tolist()):
        groups[key(row)][label] += 1
    right = sum((pick(c) if pick else max(c.values())) for c in groups.values())
    return right / (len(groups) if per_bag else len(labels))


@wrong("5.4", "rows hashed as tensors (every row its own group)", r"tolist|identity|never merge")
def _(tokens, labels):
    return _bags(tokens, labels, key=lambda row: tuple(row))


@wrong("5.4", "divided by the number of bags", r"number of sequences|between 0 and 1")
def _(tokens, labels):
    return _bags(tokens, labels, per_bag=True)


@wrong("5.4", "the largest label value per bag", r"most common|largest label")
def _(tokens, labels):
    return _bags(tokens, labels, pick=lambda c: c[max(c)])


@wrong("5.4", "grouped by the sum of the tokens", r"group rows by their multiset")
def _(tokens, labels):
    return _bags(tokens, labels, key=lambda row: int(row.sum()))


@wrong("5.4", "grouped by the first and last token", r"group rows by their multiset")
def _(tokens, labels):
    return _bags(tokens, labels, key=lambda row: (int(row[0]), int(row[-1])))


@wrong("5.4", "a percentage", r"between 0 and 1")
def _(tokens, labels):
    return 100 * _bags(tokens, labels)


@wrong("5.4", "(accuracy, number of bags)", r"a number")
def _(tokens, labels):
    return _bags(tokens, labels), len({tuple(sorted(r.tolist())) for r in tokens})


@wrong("5.4", "the least common label per bag", r"majority|most common")
def _(tokens, labels):
    return _bags(tokens, labels, pick=lambda c: min(c.values()))


@correct("5.4", "str of the sorted row, torch.mode-free counting")
def _(tokens, labels):
    seen = {}
    for row, label in zip(tokens.tolist(), labels.tolist()):
        key = str(sorted(row))
        seen.setdefault(key, {}).setdefault(label, 0)
        seen[key][label] += 1
    return sum(max(counts.values()) for counts in seen.values()) / len(tokens)


# ---------------------------------------------------------------- 5.5 add_positions(embeddings, table)


@wrong("5.5", "added in place", r"in place")
def _(embeddings, table):
    embeddings += table[: embeddings.shape[1]]
    return embeddings


@wrong("5.5", "the last T rows of the table", r"row t|table\[:t\]")
def _(embeddings, table):
    return embeddings + table[-embeddings.shape[1] :]


@wrong("5.5", "row T for every token", r"row t|table\[:t\]")
def _(embeddings, table):
    return embeddings + table[embeddings.shape[1] - 1]


@wrong("5.5", "the rows scaled by 1/sqrt(d_model)", r"scaled|as they are")
def _(embeddings, table):
    return embeddings + table[: embeddings.shape[1]] / math.sqrt(embeddings.shape[-1])


@wrong("5.5", "the positions returned without the embeddings", r"replace|come through")
def _(embeddings, table):
    return table[: embeddings.shape[1]].expand_as(embeddings)


@wrong("5.5", "sliced by d_model", r"d_model")
def _(embeddings, table):
    return embeddings + table[: embeddings.size(-1)]


@wrong("5.5", "the mean of the table added", r"mean of the rows|its own row")
def _(embeddings, table):
    return embeddings + table.mean(dim=0)


@wrong("5.5", "positions on the batch axis (unsqueeze(1))", r"line the axes up")
def _(embeddings, table):
    return embeddings + table[: embeddings.shape[1]].unsqueeze(1)


@correct("5.5", "a loop over the batch, [None] and float64")
def _(embeddings, table):
    T = embeddings.shape[1]
    return torch.stack([e.double() + table[:T].double() for e in embeddings])


# ---------------------------------------------------------------- 5.6 LearnedPositions(max_len, d_model)


class _Positions(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Parameter(0.02 * torch.randn(max_len, d_model))

    def check(self, T):
        if T > self.max_len:
            raise ValueError(f"{T} tokens, but max_len={self.max_len}")

    def forward(self, x):
        self.check(x.shape[1])
        return x + self.table[: x.shape[1]]


@wrong("5.6", "the table a plain tensor attribute", r"nn\.parameter|nn\.embedding")
class _(_Positions):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        del self.table
        self.table = 0.02 * torch.randn(max_len, d_model)


@wrong("5.6", "T compared with d_model", r"refuse only t > max_len")
class _(_Positions):
    def check(self, T):
        if T > self.table.shape[1]:
            raise ValueError(f"{T} tokens, but max_len={self.max_len}")


@wrong("5.6", "RuntimeError without the numbers", r"valueerror")
class _(_Positions):
    def check(self, T):
        if T > self.max_len:
            raise RuntimeError("sequence too long")


@wrong("5.6", "rows by batch", r"row t|table\[:t\]")
class _(_Positions):
    def forward(self, x):
        self.check(x.shape[1])
        return x + self.table[: x.shape[0], None, :]


@wrong("5.6", "x scaled by sqrt(d_model)", r"scaled|only adds")
class _(_Positions):
    def forward(self, x):
        self.check(x.shape[1])
        return x * math.sqrt(x.shape[-1]) + self.table[: x.shape[1]]


@wrong("5.6", "the positions returned without x", r"add them to x|without x|x \+")
class _(_Positions):
    def forward(self, x):
        self.check(x.shape[1])
        return self.table[: x.shape[1]].expand_as(x)


@wrong("5.6", "one row too many", r"max_len x d_model")
class _(_Positions):
    def __init__(self, max_len, d_model):
        super().__init__(max_len, d_model)
        self.table = nn.Parameter(0.02 * torch.randn(max_len + 1, d_model))


@wrong("5.6", "the table detached", r"autograd|detach|training")
class _(_Positions):
    def forward(self, x):
        self.check(x.shape[1])
        return x + self.table.detach()[: x.shape[1]]


@correct("5.6", "nn.Embedding of arange(T)")
class _(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.positions = nn.Embedding(max_len, d_model)

    def forward(self, x):
        T = x.size(1)
        if T > self.max_len:
            raise ValueError(f"got {T} positions, at most {self.max_len}")
        return x + self.positions(torch.arange(T, device=x.device))


@correct("5.6", "a (d_model, max_len) parameter used transposed")
class _(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Parameter(torch.zeros(d_model, max_len))

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"length {x.shape[1]} > max_len {self.max_len}")
        return x + self.table.T[: x.shape[1]]


# ====================================================================== chapter 6


# ---------------------------------------------------------------- 6.1 decoder_masks(source_padding, T_out)


def _masks(source_padding, T_out):
    self_mask = torch.ones(T_out, T_out, dtype=torch.bool).tril()
    batch, T_in = source_padding.shape
    return self_mask, source_padding[:, None, :].expand(batch, T_out, T_in)


@wrong("6.1", "cross mask True at the padding (the opposite convention)", r"opposite convention", parts=("inverted",))
def _(source_padding, T_out):
    self_mask, cross_mask = _masks(source_padding, T_out)
    return self_mask, ~cross_mask


@wrong("6.1", "self mask True on the future (the opposite convention)", r"opposite convention", parts=("inverted",))
def _(source_padding, T_out):
    self_mask, cross_mask = _masks(source_padding, T_out)
    return torch.ones(T_out, T_out, dtype=torch.bool).triu(1), cross_mask


@wrong("6.1", "cross mask without the query axis", r"query \(t_out\) is missing|\[:, none, :\]")
def _(source_padding, T_out):
    return _masks(source_padding, T_out)[0], source_padding


@wrong("6.1", "cross mask not expanded (batch, 1, T_in)", r"query \(t_out\)|expand")
def _(source_padding, T_out):
    return _masks(source_padding, T_out)[0], source_padding[:, None, :]


@wrong("6.1", "self mask as long as the source", r"t_out")
def _(source_padding, T_out):
    T_in = source_padding.shape[1]
    return torch.ones(T_in, T_in, dtype=torch.bool).tril(), _masks(source_padding, T_out)[1]


@wrong("6.1", "cross mask of real-real pairs (batch, T_in, T_in)", r"t_out")
def _(source_padding, T_out):
    return _masks(source_padding, T_out)[0], source_padding[:, :, None] & source_padding[:, None, :]


@wrong("6.1", "self mask one token ahead (tril(1))", r"one token ahead")
def _(source_padding, T_out):
    return torch.ones(T_out, T_out, dtype=torch.bool).tril(1), _masks(source_padding, T_out)[1]


@wrong("6.1", "returned (cross_mask, self_mask)", r"\(self_mask, cross_mask\)")
def _(source_padding, T_out):
    return _masks(source_padding, T_out)[::-1]


@wrong("6.1", "self mask with a batch axis (1, T, T)", r"size 1|squeeze")
def _(source_padding, T_out):
    self_mask, cross_mask = _masks(source_padding, T_out)
    return self_mask[None], cross_mask


@correct("6.1", "the package's causal_mask, repeat, comparisons of aranges")
def _(source_padding, T_out):
    import attention_book as ab

    i = torch.arange(T_out)
    self_mask = i[:, None] >= i[None, :]
    assert torch.equal(self_mask, ab.causal_mask(T_out))
    return self_mask, source_padding.unsqueeze(1).repeat(1, T_out, 1)


# ---------------------------------------------------------------- 6.2 decoder_layer(layer, x, memory)


def _decoder(layer, x, memory, *, self_block=None, cross_block=None, post=None, pre=None, dropout=0.0):
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril()
    attend = self_block or (lambda h: layer.self_attn(h, h, h, mask=future)[0])
    cross = cross_block or (lambda h: layer.cross_attn(h, memory, memory)[0])
    blocks = [(attend, layer.norm1), (cross, layer.norm2), (layer.feed_forward, layer.norm3)]
    for block, norm in blocks:
        if layer.norm_first:
            x = (pre or (lambda x, block, norm: x + F.dropout(block(norm(x)), dropout)))(x, block, norm)
        else:
            x = (post or (lambda x, block, norm: norm(x + F.dropout(block(x), dropout))))(x, block, norm)
    return x


@wrong("6.2", "cross-attention queries from the memory", r"queries come from the decoder")
def _(layer, x, memory):
    return _decoder(layer, x, memory, cross_block=lambda h: layer.cross_attn(memory, h, h)[0])


@wrong(
    "6.2", "causal mask of the opposite convention (True = future)", r"opposite convention|true .*means 'may attend'"
)
def _(layer, x, memory):
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return _decoder(layer, x, memory, self_block=lambda h: layer.self_attn(h, h, h, mask=future)[0])


@wrong("6.2", "pre-norm adding the normalised x", r"un-normalised x|the normalised|norm\(x\) \+")
def _(layer, x, memory):
    return _decoder(layer, x, memory, pre=lambda x, block, norm: norm(x) + block(norm(x)))


@wrong("6.2", "post-norm normalising the sub-layer before adding", r"norm\(x \+ sublayer\(x\)\)|after adding")
def _(layer, x, memory):
    return _decoder(layer, x, memory, post=lambda x, block, norm: x + norm(block(x)))


@wrong("6.2", "called the whole layer", r"build the layer from its parts")
def _(layer, x, memory):
    return layer(x, memory)


@wrong("6.2", "dropout on every sub-layer", r"dropout")
def _(layer, x, memory):
    return _decoder(layer, x, memory, dropout=0.1)


@wrong("6.2", "self-attention over the memory", r"the self-attention reads the decoder's own tokens")
def _(layer, x, memory):
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril()
    return _decoder(layer, x, memory, self_block=lambda h: layer.self_attn(h, memory, memory, mask=future)[0])


@wrong("6.2", "norm3 and norm1 swapped", r"norm1, norm2, norm3")
def _(layer, x, memory):
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril()
    blocks = [
        (lambda h: layer.self_attn(h, h, h, mask=future)[0], layer.norm3),
        (lambda h: layer.cross_attn(h, memory, memory)[0], layer.norm2),
        (layer.feed_forward, layer.norm1),
    ]
    for block, norm in blocks:
        x = x + block(norm(x)) if layer.norm_first else norm(x + block(x))
    return x


@wrong("6.2", "feed-forward without its residual", r"residual")
def _(layer, x, memory):
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril()
    if layer.norm_first:
        x = x + layer.self_attn(layer.norm1(x), layer.norm1(x), layer.norm1(x), mask=future)[0]
        x = x + layer.cross_attn(layer.norm2(x), memory, memory)[0]
        return layer.feed_forward(layer.norm3(x))
    x = layer.norm1(x + layer.self_attn(x, x, x, mask=future)[0])
    x = layer.norm2(x + layer.cross_attn(x, memory, memory)[0])
    return layer.norm3(layer.feed_forward(x))


@correct("6.2", "the package's causal_mask, post- and pre-norm written out")
def _(layer, x, memory):
    import attention_book as ab

    mask = ab.causal_mask(x.shape[1])
    if not layer.norm_first:
        x = layer.norm1(x + layer.self_attn(x, x, x, mask=mask)[0])
        x = layer.norm2(x + layer.cross_attn(x, memory, memory)[0])
        return layer.norm3(x + layer.feed_forward(x))
    h = layer.norm1(x)
    x = x + layer.self_attn(h, h, h, mask=mask)[0]
    x = x + layer.cross_attn(layer.norm2(x), memory, memory)[0]
    return x + layer.feed_forward(layer.norm3(x))


# ---------------------------------------------------------------- 6.3 sees_the_future(model, tokens, vocab_size)


def _leaks(model, tokens, vocab_size, *, changed=None, compare=None, positions=None):
    with torch.no_grad():
        original = model(tokens)
        T = tokens.shape[1]
        for t in positions or range(T - 1):
            new = tokens.clone()
            new[:, t + 1 :] = (new[:, t + 1 :] + 1) % vocab_size if changed is None else changed(new[:, t + 1 :])
            outputs = model(new)
            same = (compare or (lambda a, b, t: torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=1e-6)))(
                outputs, original, t
            )
            if not same:
                return True
    return False


@wrong("6.3", "the opposite question (is the model causal?)", r"opposite question|return true when")
def _(model, tokens, vocab_size):
    return not _leaks(model, tokens, vocab_size)


@wrong("6.3", "compares the later outputs", r"up to t")
def _(model, tokens, vocab_size):
    return _leaks(model, tokens, vocab_size, compare=lambda a, b, t: torch.allclose(a[:, t + 1 :], b[:, t + 1 :]))


@wrong("6.3", "tests only the middle position", r"every position t|for every position")
def _(model, tokens, vocab_size):
    return _leaks(model, tokens, vocab_size, positions=[tokens.shape[1] // 2])


@wrong("6.3", "returns the position of the leak", r"true or false")
def _(model, tokens, vocab_size):
    with torch.no_grad():
        original = model(tokens)
        for t in range(tokens.shape[1] - 1):
            new = tokens.clone()
            new[:, t + 1 :] = (new[:, t + 1 :] + 1) % vocab_size
            if not torch.allclose(model(new)[:, : t + 1], original[:, : t + 1], atol=1e-6):
                return t
    return -1


@wrong("6.3", "compares the argmax predictions", r"not their argmax|logits")
def _(model, tokens, vocab_size):
    return _leaks(
        model,
        tokens,
        vocab_size,
        compare=lambda a, b, t: torch.equal(a[:, : t + 1].argmax(-1), b[:, : t + 1].argmax(-1)),
    )


@wrong(
    "6.3",
    "future tokens set to vocab_size - 1",
    r"differ from the original|change the tokens|\(token \+ 1\) % vocab_size",
)
def _(model, tokens, vocab_size):
    return _leaks(model, tokens, vocab_size, changed=lambda part: torch.full_like(part, vocab_size - 1))


@wrong("6.3", "only the last position compared, only the first token changed", r"up to t|after t")
def _(model, tokens, vocab_size):
    with torch.no_grad():
        new = tokens.clone()
        new[:, 0] = (new[:, 0] + 1) % vocab_size
        return not torch.allclose(model(new)[:, -1], model(tokens)[:, -1], atol=1e-6)


@wrong("6.3", "a tolerance of 0.5", r"tolerance|atol")
def _(model, tokens, vocab_size):
    return _leaks(
        model, tokens, vocab_size, compare=lambda a, b, t: torch.allclose(a[:, : t + 1], b[:, : t + 1], atol=0.5)
    )


@correct("6.3", "torch.equal, one token changed at a time, a tensor answer")
def _(model, tokens, vocab_size):
    with torch.no_grad():
        original = model(tokens)
        for j in range(1, tokens.shape[1]):
            new = tokens.clone()
            new[0, j] = (new[0, j] + 1) % vocab_size
            if not torch.equal(model(new)[:, :j], original[:, :j]):
                return torch.tensor(True)
    return torch.tensor(False)


# ---------------------------------------------------------------- 6.4 feed_forward(x, W1, b1, W2, b2)


@wrong("6.4", "x @ W1.T", r"drop the transpose on w1")
def _(x, W1, b1, W2, b2):
    return torch.relu(x @ W1.T + b1) @ W2 + b2


@wrong("6.4", "GELU instead of ReLU", r"gelu")
def _(x, W1, b1, W2, b2):
    return F.gelu(x @ W1 + b1) @ W2 + b2


@wrong("6.4", "sigmoid instead of ReLU", r"sigmoid")
def _(x, W1, b1, W2, b2):
    return torch.sigmoid(x @ W1 + b1) @ W2 + b2


@wrong("6.4", "the residual added inside", r"residual")
def _(x, W1, b1, W2, b2):
    return x + torch.relu(x @ W1 + b1) @ W2 + b2


@wrong("6.4", "dropout on the hidden layer", r"dropout")
def _(x, W1, b1, W2, b2):
    return F.dropout(torch.relu(x @ W1 + b1), 0.1) @ W2 + b2


@wrong("6.4", "W2 @ hidden", r"swap the operands|hidden @ w2")
def _(x, W1, b1, W2, b2):
    hidden = torch.relu(x @ W1 + b1)
    return W2 @ hidden + b2


@wrong("6.4", "softmax instead of ReLU", r"softmax")
def _(x, W1, b1, W2, b2):
    return torch.softmax(x @ W1 + b1, dim=-1) @ W2 + b2


@wrong("6.4", "its own nn.Linear layers, the given weights unused", r"ignores the w1|the weights it is given|given")
def _(x, W1, b1, W2, b2):
    torch.manual_seed(0)
    first, second = nn.Linear(W1.shape[0], W1.shape[1]), nn.Linear(W2.shape[0], W2.shape[1])
    return second(torch.relu(first(x)))


@wrong("6.4", "a layer norm on the output", r"layer norm|normalis")
def _(x, W1, b1, W2, b2):
    return F.layer_norm(torch.relu(x @ W1 + b1) @ W2 + b2, (W2.shape[1],))


@correct("6.4", "F.linear with the transposes, clamp, float64")
def _(x, W1, b1, W2, b2):
    hidden = F.linear(x.double(), W1.T.double(), b1.double()).clamp(min=0)
    return F.linear(hidden, W2.T.double(), b2.double())


# ---------------------------------------------------------------- 6.5 greedy(model, source, max_len, bos, eos)


def _decode(model, source, max_len, bos, eos, *, pick=None, steps=None, stop=None, feed=None):
    memory = model.encode(source)
    generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)
    finished = torch.zeros(source.shape[0], dtype=torch.bool)
    for _ in range(steps if steps is not None else max_len):
        logits = model.decode(feed(generated) if feed else generated, memory)
        next_token = pick(logits) if pick else logits[:, -1].argmax(dim=-1)
        next_token = torch.where(finished, torch.full_like(next_token, eos), next_token)
        generated = torch.cat([generated, next_token[:, None]], dim=1)
        finished |= next_token == eos
        if (stop or (lambda f: f.all()))(finished):
            break
    return generated[:, 1:]


@wrong("6.5", "sampled instead of the argmax", r"sampl|random")
def _(model, source, max_len, bos, eos):
    return _decode(
        model,
        source,
        max_len,
        bos,
        eos,
        pick=lambda logits: torch.multinomial(torch.softmax(logits[:, -1], -1), 1)[:, 0],
    )


@wrong("6.5", "max_len - 1 steps", r"max_len")
def _(model, source, max_len, bos, eos):
    return _decode(model, source, max_len, bos, eos, steps=max_len - 1)


@wrong("6.5", "`if next_token == eos: break` on a batch", r"\.all\(\)|\.any\(\)")
def _(model, source, max_len, bos, eos):
    memory = model.encode(source)
    generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)
    for _ in range(max_len):
        next_token = model.decode(generated, memory)[:, -1].argmax(dim=-1)
        generated = torch.cat([generated, next_token[:, None]], dim=1)
        if next_token == eos:
            break
    return generated[:, 1:]


@wrong("6.5", "teacher forcing with model(source, target)", r"teacher forcing")
def _(model, source, max_len, bos, eos):
    target = torch.full((source.shape[0], max_len), bos, dtype=torch.long)
    return model(source, target).argmax(-1)


@wrong("6.5", "the decoder fed only the last token", r"not bos followed by its own predictions")
def _(model, source, max_len, bos, eos):
    return _decode(model, source, max_len, bos, eos, feed=lambda g: g[:, -1:])


@wrong("6.5", "never stops early", r"stop")
def _(model, source, max_len, bos, eos):
    return _decode(model, source, max_len, bos, eos, stop=lambda f: False)


@wrong("6.5", "a list of token tensors", r"tensor")
def _(model, source, max_len, bos, eos):
    return list(_decode(model, source, max_len, bos, eos).unbind(1))


@wrong("6.5", "the argmax over the positions (dim=1)", r"logits\[:, -1\]\.argmax\(-1\)")
def _(model, source, max_len, bos, eos):
    return _decode(model, source, max_len, bos, eos, pick=lambda logits: logits.argmax(dim=1)[:, -1])


@correct("6.5", "encodes at every step, a list of steps joined at the end")
def _(model, source, max_len, bos, eos):
    with torch.no_grad():
        tokens = [torch.full((len(source),), bos)]
        done = torch.zeros(len(source), dtype=torch.bool)
        for _ in range(max_len):
            logits = model.decode(torch.stack(tokens, 1), model.encode(source))
            step = logits[:, -1].argmax(-1).masked_fill(done, eos)
            tokens.append(step)
            done = done | (step == eos)
            if bool(done.all()):
                break
        return torch.stack(tokens[1:], dim=1)


# ---------------------------------------------------------------- 6.6 accuracy(model, batches)


def _count(model, batches, *, dim=-1, divide=None):
    correct = total = 0
    for inputs, labels in batches:
        correct += int((model(inputs).argmax(dim=dim) == labels).sum())
        total += len(labels)
    return divide(correct, total, batches) if divide else correct / total


@wrong("6.6", "model.eval without the call", r"call model\.eval\(\)|training mode")
def _(model, batches):
    was = model.training
    model.eval  # noqa: B018 (the slip: the method is not called)
    with torch.no_grad():
        result = _count(model, batches)
    model.train(was)
    return result


@wrong("6.6", "argmax over the batch", r"argmax\(dim=-1\)")
def _(model, batches):
    was = model.training
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, labels in batches:
            correct += int((model(inputs).argmax(0) == labels).sum())
            total += len(labels)
    model.train(was)
    return correct / total


@wrong("6.6", "divided by the number of batches", r"between 0 and 1|more than 1|number of examples")
def _(model, batches):
    was = model.training
    model.eval()
    with torch.no_grad():
        result = _count(model, batches, divide=lambda c, t, b: c / len(b))
    model.train(was)
    return result


@wrong("6.6", "a percentage", r"between 0 and 1")
def _(model, batches):
    was = model.training
    model.eval()
    with torch.no_grad():
        result = 100 * _count(model, batches)
    model.train(was)
    return result


@wrong("6.6", "eval() after the first batch", r"training mode")
def _(model, batches):
    was = model.training
    correct = total = 0
    with torch.no_grad():
        for inputs, labels in batches:
            correct += int((model(inputs).argmax(-1) == labels).sum())
            total += len(labels)
            model.eval()
    model.train(was)
    return correct / total


@wrong("6.6", "the last batch only", r"number of examples|all examples|every batch")
def _(model, batches):
    was = model.training
    model.eval()
    with torch.no_grad():
        inputs, labels = batches[-1]
        result = float((model(inputs).argmax(-1) == labels).float().mean())
    model.train(was)
    return result


@wrong("6.6", "floor division", r"//|floor")
def _(model, batches):
    was = model.training
    model.eval()
    with torch.no_grad():
        result = _count(model, batches, divide=lambda c, t, b: c // t)
    model.train(was)
    return result


@wrong("6.6", "the mode set back with model.train(was_training) before the loop", r"training mode")
def _(model, batches):
    was = model.training
    model.eval()
    model.train(was)
    with torch.no_grad():
        return _count(model, batches)


@correct("6.6", "inference_mode, a tensor sum, train(False)")
def _(model, batches):
    mode = model.training
    model.train(False)
    right, seen = torch.tensor(0), 0
    with torch.inference_mode():
        for inputs, labels in batches:
            right += (model(inputs).argmax(-1) == labels).sum()
            seen += labels.numel()
    model.train(mode)
    return right / seen


# ====================================================================== chapter 7


# ---------------------------------------------------------------- 7.1 last_token_pool(hidden, padding_mask)


def _no_empty_sentence(padding_mask):
    for b, row in enumerate(padding_mask):
        if not row.any():
            raise ValueError(f"sentence {b} is all padding")


@wrong("7.1", "position T - 1 of every sentence, in a loop", r"hidden\[:, -1\], the last position")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    T = hidden.shape[1]
    return torch.stack([hidden[b, T - 1] for b in range(hidden.shape[0])])


@wrong(
    "7.1",
    "gather at lengths - 1 (the padding assumed on the right)",
    r"lengths - 1.*padding is on the right",
    parts=("lengths - 1",),
)
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    lengths = padding_mask.sum(dim=1)
    index = (lengths - 1)[:, None, None].expand(-1, 1, hidden.shape[2])
    return hidden.gather(1, index).squeeze(1)


@wrong("7.1", "the number of real tokens as the index", r"one past the last position.*off by one")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    return hidden[torch.arange(hidden.shape[0]), padding_mask.sum(dim=1)]


@wrong("7.1", "the first nonzero of each row", r"first real token")
def _(hidden, padding_mask):
    return torch.stack([h[m.nonzero()[0, 0]] for h, m in zip(hidden, padding_mask)])


@wrong("7.1", "max over the real tokens", r"max pooling")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    return hidden.masked_fill(~padding_mask[..., None], float("-inf")).max(dim=1).values


@wrong("7.1", "the mean of every position", r"padding got into it")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    return hidden.mean(dim=1)


@wrong("7.1", "the mask read as True for padding, flip and argmax", r"mask is the wrong way round")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    real = ~padding_mask  # True read as padding
    last = hidden.shape[1] - 1 - real.flip(1).long().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0]), last]


@wrong("7.1", "cumsum equal to the count, then minus 1", r"one before the last real token.*off by one")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    counts = padding_mask.long().cumsum(dim=1)
    last = (counts == counts[:, -1:]).long().argmax(dim=1) - 1
    return hidden[torch.arange(hidden.shape[0]), last]


@wrong("7.1", "argmax of the bool mask", r"convert the mask first")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    last = hidden.shape[1] - 1 - padding_mask.flip(1).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0]), last]


@wrong("7.1", "the padding zeroed, then the mean over T", r"none of its token vectors")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    return hidden.masked_fill(~padding_mask[..., None], 0.0).mean(dim=1)


@wrong("7.1", "an index of shape (batch, 1)", r"extra axis of size 1")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    last = hidden.shape[1] - 1 - padding_mask.flip(1).long().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0])[:, None], last[:, None]]


@wrong("7.1", "the padding zeroed, then the last position", r"all zeros: you read a padding position")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    return (hidden * padding_mask[..., None])[:, -1]


@wrong("7.1", "hidden[:, last]", r"every sentence at every sentence's position")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    last = hidden.shape[1] - 1 - padding_mask.flip(1).long().argmax(dim=1)
    return hidden[:, last]


@wrong("7.1", "the positions returned", r"positions of the last real tokens, not their vectors")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    return hidden.shape[1] - 1 - padding_mask.flip(1).long().argmax(dim=1)


@wrong("7.1", "nonzero()[-1] in a loop, no test for an empty sentence", r"must raise valueerror.*but it crashed")
def _(hidden, padding_mask):
    return torch.stack([h[m.nonzero()[-1, 0]] for h, m in zip(hidden, padding_mask)])


@wrong("7.1", "assert for the empty sentence", r"an assert vanishes")
def _(hidden, padding_mask):
    assert padding_mask.any(dim=1).all(), "a sentence without real tokens"
    last = hidden.shape[1] - 1 - padding_mask.flip(1).long().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0]), last]


@wrong("7.1", "ValueError with the mask's rows, not the sentence", r"does not name the sentence")
def _(hidden, padding_mask):
    if not padding_mask.any(dim=1).all():
        raise ValueError(f"some sentences have no real token: {padding_mask.any(dim=1)}")
    last = hidden.shape[1] - 1 - padding_mask.flip(1).long().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0]), last]


@wrong("7.1", "ValueError for any padding (any for all)", r"raise it only for a sentence whose row")
def _(hidden, padding_mask):
    if (~padding_mask).any(dim=1).any():
        raise ValueError("a sentence has no real token")
    return hidden[:, -1]


@correct("7.1", "a loop over nonzero, the arguments renamed")
def _(states, mask):
    out = []
    for i in range(states.shape[0]):
        real = mask[i].nonzero()
        if len(real) == 0:
            raise ValueError(f"row {i} of the mask is all padding")
        out.append(states[i, real[-1, 0]])
    return torch.stack(out)


@correct("7.1", "gather with an expanded index")
def _(hidden, padding_mask):
    empty = (~padding_mask.any(dim=1)).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"sentences {empty} have no real token")
    batch, T, d = hidden.shape
    last = T - 1 - padding_mask.flip(1).int().argmax(dim=1)
    return hidden.gather(1, last.view(batch, 1, 1).expand(batch, 1, d)).squeeze(1)


@correct("7.1", "a one-hot of the last True from cumsum, in float64")
def _(hidden, padding_mask):
    _no_empty_sentence(padding_mask)
    counts = padding_mask.cumsum(dim=1)
    is_last = padding_mask & (counts == counts[:, -1:])  # (batch, T): True at the last real token only
    return (hidden.double() * is_last[..., None]).sum(dim=1)


@correct("7.1", "flip and argmax, the vectors in float64")
def _(hidden, padding_mask):
    if (padding_mask.sum(dim=1) == 0).any():
        raise ValueError(f"sentence {int((padding_mask.sum(dim=1) == 0).long().argmax())}: no real token")
    from_the_end = padding_mask.flip(dims=[1]).long().argmax(dim=1)  # 0 when the last position is real
    return hidden.double()[torch.arange(hidden.shape[0]), hidden.shape[1] - 1 - from_the_end]


@correct("7.1", "the first real position plus the count minus 1")
def _(hidden, padding_mask):
    for b in range(len(padding_mask)):
        if padding_mask[b].sum() == 0:
            raise ValueError(f"no real token in sentence #{b}")
    first = padding_mask.long().argmax(dim=1)
    last = first + padding_mask.sum(dim=1) - 1
    return hidden[torch.arange(len(hidden)), last]


# ---------------------------------------------------------------- 7.2 SentenceClassifier(encoder, d_model, num_classes)


class _Classifier(nn.Module):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(d_model, num_classes)

    def pool(self, hidden, padding_mask):
        weights = padding_mask.to(hidden.dtype).unsqueeze(-1)
        return (hidden * weights).sum(dim=1) / weights.sum(dim=1)

    def forward(self, tokens, padding_mask):
        return self.head(self.pool(self.encoder(tokens, padding_mask), padding_mask))


@wrong("7.2", "a two-layer head", r"one new nn\.linear|exactly one")
class _(_Classifier):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__(encoder, d_model, num_classes)
        self.hidden = nn.Linear(d_model, d_model)

    def forward(self, tokens, padding_mask):
        pooled = self.pool(self.encoder(tokens, padding_mask), padding_mask)
        return self.head(torch.relu(self.hidden(pooled)))


@wrong("7.2", "the encoder given the inverted mask", r"inverted padding mask")
class _(_Classifier):
    def forward(self, tokens, padding_mask):
        return self.head(self.pool(self.encoder(tokens, ~padding_mask), padding_mask))


@wrong("7.2", "log_softmax returned", r"log-probabilities|raw logits")
class _(_Classifier):
    def forward(self, tokens, padding_mask):
        return torch.log_softmax(super().forward(tokens, padding_mask), dim=-1)


@wrong("7.2", "the encoder's output detached", r"detach|no gradient")
class _(_Classifier):
    def forward(self, tokens, padding_mask):
        return self.head(self.pool(self.encoder(tokens, padding_mask).detach(), padding_mask))


@wrong("7.2", "the encoder frozen in __init__", r"requires_grad|no gradient")
class _(_Classifier):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__(encoder, d_model, num_classes)
        encoder.requires_grad_(False)


@wrong("7.2", "max pooling", r"a max")
class _(_Classifier):
    def pool(self, hidden, padding_mask):
        return hidden.masked_fill(~padding_mask[..., None], float("-inf")).max(dim=1).values


@wrong("7.2", "forward without the padding mask", r"arguments|signature")
class _(_Classifier):
    def forward(self, tokens):
        return self.head(self.encoder(tokens).mean(dim=1))


@wrong("7.2", "the head as Linear(num_classes, d_model)", r"nn\.linear\(d_model=")
class _(_Classifier):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__(encoder, d_model, num_classes)
        self.head = nn.Linear(num_classes, d_model)

    def forward(self, tokens, padding_mask):
        return self.pool(self.encoder(tokens, padding_mask), padding_mask) @ self.head.weight


@wrong("7.2", "the last real token", r"the last real token")
class _(_Classifier):
    def pool(self, hidden, padding_mask):
        return hidden[torch.arange(hidden.shape[0]), padding_mask.sum(dim=1) - 1]


@correct("7.2", "the head applied per token, then the masked mean")
class _(_Classifier):
    def forward(self, tokens, padding_mask):
        per_token = self.head(self.encoder(tokens, padding_mask))
        weights = padding_mask.float()[..., None]
        return (per_token * weights).sum(1) / weights.sum(1)


# ---------------------------------------------------------------- 7.3 best_layer(train_features, train_labels, valid_features, valid_labels)


def _validation_accuracies(train_features, train_labels, valid_features, valid_labels):
    from attention_book.training.transfer import probe_accuracy, train_linear_probe

    return [
        probe_accuracy(train_linear_probe(train_features[:, i], train_labels), valid_features[:, i], valid_labels)
        for i in range(train_features.shape[1])
    ]


@wrong("7.3", "the best accuracy returned, not its layer", r"layer number")
def _(train_features, train_labels, valid_features, valid_labels):
    return max(_validation_accuracies(train_features, train_labels, valid_features, valid_labels))


@wrong("7.3", "the list of accuracies returned", r"layer number")
def _(train_features, train_labels, valid_features, valid_labels):
    return _validation_accuracies(train_features, train_labels, valid_features, valid_labels)


@wrong("7.3", "a negative index (from the end)", r"only layers 0 to")
def _(train_features, train_labels, valid_features, valid_labels):
    accuracies = _validation_accuracies(train_features, train_labels, valid_features, valid_labels)
    return accuracies.index(max(accuracies)) - len(accuracies)


@wrong("7.3", "the examples axis taken for the layers", r"features\[:, layer\]")
def _(train_features, train_labels, valid_features, valid_labels):
    from attention_book.training.transfer import probe_accuracy, train_linear_probe

    scores = [
        probe_accuracy(train_linear_probe(train_features[i], train_labels), valid_features[i], valid_labels)
        for i in range(train_features.shape[1])
    ]
    return scores.index(max(scores))


@wrong("7.3", "class-mean gap on the training features, no probe", r"on the training features")
def _(train_features, train_labels, valid_features, valid_labels):
    gaps = []
    for i in range(train_features.shape[1]):
        x = train_features[:, i]
        x = (x - x.mean(0)) / x.std(0)
        gaps.append(float((x[train_labels == 1].mean(0) - x[train_labels == 0].mean(0)).abs().max()))
    return gaps.index(max(gaps))


@wrong("7.3", "nearest class mean fitted on the validation features", r"on the validation features")
def _(train_features, train_labels, valid_features, valid_labels):
    scores = []
    for i in range(valid_features.shape[1]):
        x = valid_features[:, i]
        means = torch.stack([x[valid_labels == c].mean(0) for c in (0, 1)])
        predicted = torch.cdist(x, means).argmin(-1)
        scores.append(float((predicted == valid_labels).float().mean()))
    return scores.index(max(scores))


@wrong("7.3", "the largest validation features", r"largest features")
def _(train_features, train_labels, valid_features, valid_labels):
    return int(valid_features.abs().mean(dim=(0, 2)).argmax())


@wrong("7.3", "a string", r"layer number")
def _(train_features, train_labels, valid_features, valid_labels):
    accuracies = _validation_accuracies(train_features, train_labels, valid_features, valid_labels)
    return f"layer {accuracies.index(max(accuracies))}"


@wrong("7.3", "the layer number counted from the last layer", r"counts from the last layer")
def _(train_features, train_labels, valid_features, valid_labels):
    accuracies = _validation_accuracies(train_features, train_labels, valid_features, valid_labels)
    return len(accuracies) - 1 - accuracies.index(max(accuracies))


@correct("7.3", "torch.argmax of a tensor of accuracies")
def _(train_features, train_labels, valid_features, valid_labels):
    return torch.tensor(_validation_accuracies(train_features, train_labels, valid_features, valid_labels)).argmax()


# The form with fit and score (issue 45): the checker passes its own fast probe through them.


@wrong("7.3", "new form: fitted on validation, scored on training", r"roles are swapped")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = []
    for layer in range(train_features.shape[1]):
        probe = fit(valid_features[:, layer], valid_labels)
        accuracies.append(score(probe, train_features[:, layer], train_labels))
    return accuracies.index(max(accuracies))


@wrong("7.3", "new form: validation features scored against the training labels", r"against the training labels")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = []
    for layer in range(train_features.shape[1]):
        probe = fit(train_features[:, layer], train_labels)
        accuracies.append(score(probe, valid_features[:, layer], train_labels))
    return accuracies.index(max(accuracies))


@wrong("7.3", "new form: a probe fitted with the validation labels", r"with the validation labels")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = []
    for layer in range(train_features.shape[1]):
        probe = fit(train_features[:, layer], valid_labels)
        accuracies.append(score(probe, valid_features[:, layer], valid_labels))
    return accuracies.index(max(accuracies))


@wrong("7.3", "new form: every layer's features at once", r"every layer at once.*features\[:, layer\]")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = []
    for layer in range(train_features.shape[1]):
        probe = fit(train_features[:, :], train_labels)
        accuracies.append((layer, score(probe, valid_features[:, :], valid_labels)))
    return max(accuracies, key=lambda pair: pair[1])[0]


@wrong("7.3", "new form: the best accuracy returned", r"not the accuracy")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = [
        score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
        for layer in range(train_features.shape[1])
    ]
    return max(accuracies)


@wrong("7.3", "new form: torch.max's (values, indices) pair returned", r"\.indices")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = [
        score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
        for layer in range(train_features.shape[1])
    ]
    return torch.max(torch.tensor(accuracies), dim=0)


@wrong("7.3", "new form: the ranking returned (argsort)", r"tensor of 8 values")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = torch.tensor(
        [
            score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
            for layer in range(train_features.shape[1])
        ]
    )
    return accuracies.argsort(descending=True)


@wrong("7.3", "new form: training and validation concatenated for the fit", r"together")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = []
    for layer in range(train_features.shape[1]):
        features = torch.cat([train_features[:, layer], valid_features[:, layer]])
        probe = fit(features, torch.cat([train_labels, valid_labels]))
        accuracies.append(score(probe, valid_features[:, layer], valid_labels))
    return accuracies.index(max(accuracies))


@wrong("7.3", "new form: one probe fitted on layer 0, scored on every layer", r"one probe per layer")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    probe = fit(train_features[:, 0], train_labels)
    accuracies = [score(probe, valid_features[:, layer], valid_labels) for layer in range(valid_features.shape[1])]
    return accuracies.index(max(accuracies))


@wrong("7.3", "new form: score given the features before the probe", r"takes the probe first")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = []
    for layer in range(train_features.shape[1]):
        probe = fit(train_features[:, layer], train_labels)
        accuracies.append(score(valid_features[:, layer], probe, valid_labels))
    return accuracies.index(max(accuracies))


@wrong("7.3", "new form: a dict of training accuracies", r"accuracy on the training features")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = {
        layer: score(fit(train_features[:, layer], train_labels), train_features[:, layer], train_labels)
        for layer in range(train_features.shape[1])
    }
    return max(accuracies, key=accuracies.get)


@wrong("7.3", "new form: sorted by accuracy, the first taken", r"lowest validation accuracy")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = [
        score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
        for layer in range(train_features.shape[1])
    ]
    return sorted(range(len(accuracies)), key=lambda layer: accuracies[layer])[0]


@wrong("7.3", "new form: layers numbered from 1 with enumerate(start=1)", r"one too high")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    best, best_accuracy = None, -1.0
    for number, layer in enumerate(range(train_features.shape[1]), start=1):
        accuracy = score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
        if accuracy > best_accuracy:
            best, best_accuracy = number, accuracy
    return best


@correct("7.3", "new form: a loop that keeps the best so far")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    best, best_accuracy = 0, -1.0
    for layer in range(train_features.shape[1]):
        accuracy = score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
        if accuracy > best_accuracy:
            best, best_accuracy = layer, accuracy
    return best


@correct("7.3", "new form: a dict comprehension, max by accuracy")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    layers = range(train_features.shape[1])
    accuracy = {i: score(fit(train_features[:, i], train_labels), valid_features[:, i], valid_labels) for i in layers}
    return max(accuracy, key=accuracy.get)


@correct("7.3", "new form: features standardised in float64 first, back to float32 for fit and score")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    train, valid = train_features.double(), valid_features.double()
    mean, spread = train.mean(dim=0), train.std(dim=0)  # (layers, d), from the training split only
    train, valid = ((train - mean) / spread).float(), ((valid - mean) / spread).float()
    accuracies = [
        score(fit(train[:, layer], train_labels), valid[:, layer], valid_labels) for layer in range(train.shape[1])
    ]
    return accuracies.index(max(accuracies))


@correct("7.3", "new form: torch.argmax of a tensor of accuracies")
def _(train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy):
    accuracies = torch.tensor(
        [
            score(fit(train_features[:, layer], train_labels), valid_features[:, layer], valid_labels)
            for layer in range(train_features.shape[1])
        ]
    )
    return torch.argmax(accuracies)


@correct("7.3", "new form: the two parameters renamed, the chapter's functions as defaults")
def _(x_train, y_train, x_valid, y_valid, train=train_linear_probe, accuracy=probe_accuracy):
    scores = [accuracy(train(x_train[:, i], y_train), x_valid[:, i], y_valid) for i in range(x_train.shape[1])]
    return int(torch.tensor(scores).argmax())


# ---------------------------------------------------------------- 7.4 load_layer(checkpoint, layer)

# The names in one BERT layer (after "encoder.layer.i.") and in the book's EncoderLayer, as students write the table.
_BERT_TO_OURS = {
    "attention.self.query": "self_attn.q_proj",
    "attention.self.key": "self_attn.k_proj",
    "attention.self.value": "self_attn.v_proj",
    "attention.output.dense": "self_attn.out_proj",
    "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "feed_forward.linear1",
    "output.dense": "feed_forward.linear2",
    "output.LayerNorm": "norm2",
}


def _table_load(checkpoint, layer, table=_BERT_TO_OURS, kinds=("weight", "bias"), change=lambda name, t: t):
    state = {}
    for theirs, ours in table.items():
        for kind in kinds:
            state[f"{ours}.{kind}"] = change(kind, checkpoint[f"encoder.layer.{layer}.{theirs}.{kind}"])
    return state


@wrong(
    "7.4", "str.replace of output.dense before attention.output.dense", r"attention\.feed_forward\.linear2.*out_proj"
)
def _(checkpoint, layer):
    prefix = f"encoder.layer.{layer}."
    state = {}
    for name, tensor in checkpoint.items():
        if not name.startswith(prefix):
            continue
        name = name[len(prefix) :]
        name = name.replace("attention.self.query", "self_attn.q_proj")
        name = name.replace("attention.self.key", "self_attn.k_proj")
        name = name.replace("attention.self.value", "self_attn.v_proj")
        name = name.replace("output.dense", "feed_forward.linear2")
        name = name.replace("attention.output.dense", "self_attn.out_proj")
        name = name.replace("attention.output.LayerNorm", "norm1")
        name = name.replace("intermediate.dense", "feed_forward.linear1")
        name = name.replace("output.LayerNorm", "norm2")
        state[name] = tensor
    return state


@wrong("7.4", "the layer's prefix matched without its dot", r"with its dot")
def _(checkpoint, layer):
    state = {}
    for name, tensor in checkpoint.items():
        if name.startswith(f"encoder.layer.{layer}"):
            rest = name.split(".", 3)[3]  # after 'encoder.layer.N.'
            for theirs, ours in _BERT_TO_OURS.items():
                if rest.startswith(theirs + "."):
                    state[ours + rest[len(theirs) :]] = tensor
    return state


@wrong("7.4", "every weight transposed, as for x @ W", r"\(out_features, in_features\)")
def _(checkpoint, layer):
    return _table_load(checkpoint, layer, change=lambda kind, t: t.T if kind == "weight" and t.dim() == 2 else t)


@wrong("7.4", "query and key swapped in the table", r"query -> q_proj, key -> k_proj")
def _(checkpoint, layer):
    table = {**_BERT_TO_OURS, "attention.self.query": "self_attn.k_proj", "attention.self.key": "self_attn.q_proj"}
    return _table_load(checkpoint, layer, table)


@wrong("7.4", "norm1 taken from output.LayerNorm", r"layer norms are swapped")
def _(checkpoint, layer):
    table = {**_BERT_TO_OURS, "attention.output.LayerNorm": "norm2", "output.LayerNorm": "norm1"}
    return _table_load(checkpoint, layer, table)


@wrong("7.4", "intermediate.dense as the second map", r"feed-forward's two maps are swapped")
def _(checkpoint, layer):
    table = {**_BERT_TO_OURS, "intermediate.dense": "feed_forward.linear2", "output.dense": "feed_forward.linear1"}
    return _table_load(checkpoint, layer, table)


@wrong("7.4", "only the weights in the loop", r"no biases")
def _(checkpoint, layer):
    return _table_load(checkpoint, layer, kinds=("weight",))


@wrong("7.4", "layers counted from 1 in the checkpoint", r"one past the layer")
def _(checkpoint, layer):
    return _table_load(checkpoint, layer + 1)


@wrong("7.4", "layers counted from 1, the other way", r"one before the layer")
def _(checkpoint, layer):
    return _table_load(checkpoint, layer - 1)


@wrong("7.4", "the loaded EncoderLayer returned", r"return the dict itself|state_dict")
def _(checkpoint, layer):
    import attention_book as ab

    d_model = checkpoint["embeddings.LayerNorm.weight"].shape[0]
    d_ff = checkpoint[f"encoder.layer.{layer}.intermediate.dense.weight"].shape[0]
    model = ab.EncoderLayer(d_model, 2, d_ff, activation="gelu", layer_norm_eps=1e-12)
    model.load_state_dict(_table_load(checkpoint, layer))
    return model


@wrong("7.4", "the checkpoint's names kept, the prefix stripped", r"unexpected keys 'attention\.self\.query\.weight'")
def _(checkpoint, layer):
    prefix = f"encoder.layer.{layer}."
    return {name[len(prefix) :]: tensor for name, tensor in checkpoint.items() if name.startswith(prefix)}


@wrong("7.4", "the names of the whole Encoder", r"starts with 'layers\.")
def _(checkpoint, layer):
    return {f"layers.{layer}.{name}": tensor for name, tensor in _table_load(checkpoint, layer).items()}


@wrong("7.4", "the tensors in a list, in the state dict's order", r"keep the names")
def _(checkpoint, layer):
    return list(_table_load(checkpoint, layer).values())


@wrong("7.4", "biases given a leading axis to broadcast", r"'self_attn\.q_proj\.bias' has shape \(1, 8\).*\(8,\)")
def _(checkpoint, layer):
    return _table_load(checkpoint, layer, change=lambda kind, t: t[None] if kind == "bias" else t)


@correct("7.4", "a table of the eight modules and a loop over weight and bias")
def _(checkpoint, layer):
    return _table_load(checkpoint, layer)


@correct("7.4", "str.replace, attention's names first, the prefix with its dot")
def _(checkpoint, layer):
    prefix = f"encoder.layer.{layer}."
    replacements = [
        ("attention.self.query", "self_attn.q_proj"),
        ("attention.self.key", "self_attn.k_proj"),
        ("attention.self.value", "self_attn.v_proj"),
        ("attention.output.dense", "self_attn.out_proj"),
        ("attention.output.LayerNorm", "norm1"),
        ("intermediate.dense", "feed_forward.linear1"),
        ("output.dense", "feed_forward.linear2"),
        ("output.LayerNorm", "norm2"),
    ]
    state = {}
    for name, tensor in checkpoint.items():
        if name.startswith(prefix):
            name = name[len(prefix) :]
            for theirs, ours in replacements:
                if name.startswith(theirs + "."):
                    name = ours + name[len(theirs) :]
                    break
            state[name] = tensor
    return state


@correct("7.4", "the package's PARAMETER_NAMES, formatted with the layer")
def _(checkpoint, layer):
    from attention_book.pretrained import PARAMETER_NAMES

    return {
        ours.removeprefix("layers.{i}."): checkpoint[theirs.format(i=layer)]
        for ours, theirs in PARAMETER_NAMES.items()
        if ours.startswith("layers.{i}.")
    }


@correct("7.4", "float64 clones in an OrderedDict")
def _(checkpoint, layer):
    from collections import OrderedDict

    return OrderedDict((name, t.clone().double()) for name, t in _table_load(checkpoint, layer).items())


# ====================================================================== the tests

# Entries whose hint is true but does not name the mistake (reported; at most 5 % of the catalogue).
UNNAMED: set[tuple[str, str]] = set()

# Registered mistakes whose hint names them in other words than their registered fragment
# (a property that names exactly this mistake): (exercise, mistake name) -> regular expression.
REGISTERED: dict[tuple[str, str], str] = {
    ("1.3", "always None"): r"for d_k = 512 you returned none",
    ("1.3", "scale taken as d_k"): r"by sqrt\(d_k\), not d_k",
    ("1.3", "never None"): r"return none",
    ("1.4", "product instead of sum"): r"adds the two projections",
    ("1.4", "softmax over the queries"): r"sum to 1 down each column",
    ("1.5", "not relative"): r"divide every gradient norm by the last",
    ("1.5", "relative to the first token"): r"1 at the first token",
    ("1.5", "summed gradient"): r"sum of the entries",
    ("2.1", "no sqrt(d_k) scale"): r"not scaled at all",
    ("2.1", "softmax over the queries"): r"sum to 1 down each column",
    ("2.1", "keys and values from x_query"): r"the keys come from x_memory",
    ("2.1", "values not projected"): r"averages the raw tokens",
    ("2.1", "divided by d_k"): r"not by d_k",
    ("2.1", "divided by sqrt(T)"): r"sqrt\(t, the number of keys\)",
    ("2.2", "forgot the sqrt(d_k) scale"): r"divided by sqrt\(d_k\) = sqrt\(5\) before the softmax",
    ("2.2", "third key not suppressed"): r"third key still",
    ("3.1", "ties to the first maximum"): r"all of it went to the first of them",
    ("3.1", "ties to the last maximum"): r"all of it went to the last of them",
    ("5.2", "rotation by -k (transposed blocks)"): r"turns backwards",
    ("5.2", "pairs in two halves"): r"pair i sits in columns 2i and 2i \+ 1",
    ("5.4", "count instead of fraction"): r"a fraction between 0 and 1",
    ("5.5", "positions from 1"): r"counted from 0",
    ("5.6", "assert instead of ValueError"): r"an assert vanishes",
    ("6.4", "no activation"): r"relu between the two linear maps is missing",
    ("6.4", "ReLU on the output too"): r"no relu on it",
    ("6.5", "decodes from BOS alone"): r"feeds the model its own output",
    ("6.5", "first position's prediction"): r"feeds the model its own output",
    ("6.5", "ignores EOS"): r"a sequence that has written eos is finished",
    ("6.5", "stops at the first EOS"): r"when every sequence has written eos",
    ("7.2", "no padding mask for the encoder"): r"calls the encoder without the padding mask",
    ("7.2", "first-token pooling"): r"the first token alone",
    ("7.2", "averaged the padding"): r"padding included",
    ("7.2", "returned probabilities"): r"are probabilities",
}


# Registered mistakes whose hints share their words because the same repair fixes both (either may be named).
SAME_REPAIR: set[frozenset[str]] = {
    frozenset({"2.3 scores not scaled up", "2.3 a scale that does not grow with T"}),
    frozenset({"6.3 loop starts at t = 1", "6.3 perturbs only the last token"}),
    frozenset({"6.3 loop starts at t = 1", "6.3 checks only the first position"}),
}


def hint_of(line: str) -> str:
    return line.split("): ", 1)[1] if "): " in line else line


def names(idea: str, hint: str) -> bool:
    """Whether the hint names the idea; the generic 'differs from the reference' never does."""
    return GENERIC not in hint and bool(re.search(idea, hint.lower()))


def property_blamed(exercise_id: str, hint: str) -> str | None:
    """The name of the property whose probe gave this hint, if a property gave it."""
    for prop in get(exercise_id).properties:
        if hint.startswith(prop.name + ": "):
            return prop.name
    return None


def registered_idea(exercise_id: str, mistake) -> str:
    return REGISTERED.get((exercise_id, mistake.name), re.escape(mistake.hint.lower()))


def blamed_elsewhere(exercise_id: str, hint: str, idea: str, parts: tuple[str, ...] = (), own: str = "") -> list[str]:
    """What the hint blames that the answer got right: a property that is neither in ``parts`` nor matched by
    ``idea``, and registered hint fragments of other mistakes (that ``idea`` does not match)."""
    blamed = []
    prop = property_blamed(exercise_id, hint)
    if prop is not None and not re.search(idea, prop.lower()) and not any(part in prop for part in parts):
        # a property may still name the mistake in its sentence: then the idea must be in the sentence
        if not names(idea, hint[len(prop) :]):
            blamed.append(f"property {prop!r}")
    for mistake in get(exercise_id).mistakes:
        if mistake.name == own or mistake.name in parts:  # the answer is an instance of that registered mistake
            continue
        if frozenset({f"{exercise_id} {own}", f"{exercise_id} {mistake.name}"}) in SAME_REPAIR:
            continue
        fragment = mistake.hint.lower()
        if (
            fragment in hint.lower()
            and not re.search(idea, fragment)
            and not re.search(registered_idea(exercise_id, mistake), idea)
        ):
            blamed.append(f"{mistake.name!r}'s hint {mistake.hint!r}")
    return blamed


# A guard against a check that hangs, not a speed target (benchmarks/checks.py measures that): 30 times the 1 s aim,
# and for 7.3, 120 s: an answer in its older four-parameter form trains its own 12 logistic probes (1.3-7 s on a
# loaded 2-core machine); one that takes fit and score gets the checker's closed-form probe (milliseconds).
HANG_S = 30.0
SLOW_HANG_S = {"7.3": 120.0}


def _timed(exercise_id, answer):
    start = time.perf_counter()
    outcome = evaluate(exercise_id, answer)
    return outcome, time.perf_counter() - start


@pytest.mark.parametrize(
    ("exercise_id", "name", "answer", "idea", "parts"), WRONG, ids=[f"{w[0]}-{w[1]}" for w in WRONG]
)
def test_a_catalogued_wrong_answer_fails_with_one_line_that_names_its_mistake(exercise_id, name, answer, idea, parts):
    outcome, seconds = _timed(exercise_id, answer)
    assert not outcome.passed, f"{exercise_id} {name}: passed"
    assert "\n" not in outcome.line
    assert seconds < SLOW_HANG_S.get(exercise_id, HANG_S), f"{exercise_id} {name}: the check took {seconds:.2f} s"
    if (exercise_id, name) in UNNAMED:
        assert not names(idea, outcome.hint), f"{exercise_id} {name} is named now: take it out of UNNAMED"
    else:
        assert names(idea, outcome.hint), f"{exercise_id} {name}: {outcome.hint}"
    blamed = blamed_elsewhere(exercise_id, outcome.hint, idea, parts)
    assert not blamed, f"{exercise_id} {name}: the hint blames {blamed}: {outcome.hint}"


# The chapters catalogued so far (the issue's work goes chapter by chapter).
CATALOGUED_CHAPTERS = {"1", "2", "3", "4", "5", "6", "7"}


def test_the_catalogue_has_8_per_exercise_and_95_percent_named():
    for exercise_id in REGISTRY:
        if exercise_id.split(".")[0] in CATALOGUED_CHAPTERS:
            assert sum(1 for w in WRONG if w[0] == exercise_id) >= 8, exercise_id
    assert len(UNNAMED) <= 0.05 * len(WRONG)


REGISTERED_CASES = [
    (key, mistake)
    for key, exercise in sorted(REGISTRY.items())
    if key.split(".")[0] in CATALOGUED_CHAPTERS
    for mistake in exercise.mistakes
]


@pytest.mark.parametrize(
    ("exercise_id", "mistake"), REGISTERED_CASES, ids=[f"{k}-{m.name}" for k, m in REGISTERED_CASES]
)
def test_a_registered_mistake_gets_its_own_hint_and_no_other(exercise_id, mistake):
    outcome, seconds = _timed(exercise_id, mistake.answer)
    assert not outcome.passed
    assert seconds < SLOW_HANG_S.get(exercise_id, HANG_S), (
        f"{exercise_id} {mistake.name}: the check took {seconds:.2f} s"
    )
    idea = registered_idea(exercise_id, mistake)
    assert names(idea, outcome.hint), f"{exercise_id} {mistake.name}: {outcome.hint}"
    blamed = blamed_elsewhere(exercise_id, outcome.hint, idea, own=mistake.name)
    assert not blamed, f"{exercise_id} {mistake.name}: the hint blames {blamed}: {outcome.hint}"


@pytest.mark.parametrize(("exercise_id", "name", "answer"), CORRECT, ids=[f"{c[0]}-{c[1]}" for c in CORRECT])
def test_a_correct_variant_passes(exercise_id, name, answer):
    for _ in range(2):
        outcome, seconds = _timed(exercise_id, answer)
        assert outcome.passed, f"{exercise_id} {name}: {outcome.line}"
        assert seconds < SLOW_HANG_S.get(exercise_id, HANG_S), f"{exercise_id} {name}: the check took {seconds:.2f} s"


def report(prefix: str = "") -> None:
    """Every catalogued answer's line, then the share named per chapter and the slowest check."""
    per_chapter: dict[str, list[int]] = {}
    slowest = slowest_fast = (0.0, "")
    for exercise_id, name, answer, idea, parts in WRONG:
        if not exercise_id.startswith(prefix):
            continue
        outcome, seconds = _timed(exercise_id, answer)
        slowest = max(slowest, (seconds, f"{exercise_id} {name}"))
        if exercise_id not in SLOW_HANG_S:
            slowest_fast = max(slowest_fast, (seconds, f"{exercise_id} {name}"))
        named = not outcome.passed and names(idea, outcome.hint)
        blamed = blamed_elsewhere(exercise_id, outcome.hint, idea, parts)
        row = per_chapter.setdefault(exercise_id.split(".")[0], [0, 0, 0, 0])
        row[0] += 1
        row[1] += outcome.passed
        row[2] += named
        row[3] += bool(blamed)
        mark = "PASSED" if outcome.passed else ("ok " if named and not blamed else ("BLAME" if blamed else "BAD"))
        print(f"{mark} {exercise_id} {name} [{seconds:.2f}s]: {outcome.hint[:400]}")
    print(f"{'chapter':<8}{'wrong':>6}{'passed':>8}{'named':>7}{'share':>8}{'blames':>8}")
    totals = [0, 0, 0, 0]
    for chapter, row in sorted(per_chapter.items()):
        totals = [a + b for a, b in zip(totals, row)]
        print(f"{chapter:<8}{row[0]:>6}{row[1]:>8}{row[2]:>7}{row[2] / row[0]:>8.1%}{row[3]:>8}")
    print(f"{'all':<8}{totals[0]:>6}{totals[1]:>8}{totals[2]:>7}{totals[2] / max(totals[0], 1):>8.1%}{totals[3]:>8}")
    print(f"slowest check: {slowest[0]:.2f} s ({slowest[1]})")
    if slowest_fast[1]:
        print(f"slowest check outside 7.3: {slowest_fast[0]:.2f} s ({slowest_fast[1]})")


if __name__ == "__main__":
    import sys

    report(sys.argv[1] if len(sys.argv) > 1 else "")
