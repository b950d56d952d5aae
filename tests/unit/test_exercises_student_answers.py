"""Wrong answers written the way students write them (issue 32), kept as tests.

Written before they were first run against the checkers, without looking at the checkers' hints:
each is a plausible slip, and ``IDEA`` is a regular expression for the words a useful hint must
use (the idea the answer breaks, in the chapter's words). Every wrong answer must fail, and its
one printed line must name that idea. ``CORRECT`` holds other right answers that must pass.

Run ``python tests/unit/test_exercises_student_answers.py`` for the counts per exercise.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.exercises import check
from attention_book.exercises._core import GENERIC
from attention_book.training.transfer import probe_accuracy, train_linear_probe

SCALE = r"sqrt\(d_k\)|the scale"
AXIS = r"sum to 1|over the keys|dim=-1|softmax axis|wrong axis"
SHAPE = r"shape|axis|broadcast"

WRONG: list[tuple[str, str, object, str]] = []  # (exercise, name, answer, idea)
CORRECT: list[tuple[str, str, object]] = []


def wrong(exercise_id: str, name: str, idea: str):
    def register(answer):
        WRONG.append((exercise_id, name, answer, idea))
        return answer

    return register


def correct(exercise_id: str, name: str):
    def register(answer):
        CORRECT.append((exercise_id, name, answer))
        return answer

    return register


# ------------------------------------------------------------------ 0.1 attention weights (Q, K) -> A


@wrong("0.1", "scale after the softmax", SCALE)
def _(Q, K):
    return torch.softmax(Q @ K.T, dim=-1) / math.sqrt(Q.shape[-1])


@wrong("0.1", "keys against queries (transposed)", r"transpos|query|row")
def _(Q, K):
    return torch.softmax(K @ Q.T / math.sqrt(Q.shape[-1]), dim=-1)


@wrong("0.1", "divided by the number of keys", SCALE)
def _(Q, K):
    return torch.softmax(Q @ K.T / math.sqrt(K.shape[0]), dim=-1)


@wrong("0.1", "cosine similarity", r"dot product|sqrt\(d_k\)|scale")
def _(Q, K):
    return torch.softmax(F.normalize(Q, dim=-1) @ F.normalize(K, dim=-1).T, dim=-1)


@wrong("0.1", "sigmoid instead of softmax", AXIS + r"|softmax")
def _(Q, K):
    return torch.sigmoid(Q @ K.T / math.sqrt(Q.shape[-1]))


@correct("0.1", "einsum")
def _(Q, K):
    return torch.einsum("qd,kd->qk", Q, K).div(Q.shape[-1] ** 0.5).softmax(-1)


# ------------------------------------------------------------------ 1.3 when does the scale decide?


def _construction(d_k, gap):
    query = torch.zeros(d_k)
    query[0] = 1.0
    keys = torch.zeros(2, d_k)
    keys[0, 0] = gap
    return query, keys


@wrong("1.3", "guessed threshold d_k >= 100", r"none|no query")
def _(d_k):
    if d_k < 100:
        return None
    return _construction(d_k, math.sqrt(math.log(99) * math.sqrt(d_k) * math.log(1.5)))


@wrong("1.3", "gap on the upper bound", r"with the scale|0\.6|top weight")
def _(d_k):
    low, high = math.log(99), math.sqrt(d_k) * math.log(1.5)
    return None if high <= low else _construction(d_k, high * 1.02)


@wrong("1.3", "query of ones", r"with the scale|top weight")
def _(d_k):
    low, high = math.log(99), math.sqrt(d_k) * math.log(1.5)
    if high <= low:
        return None
    gap = math.sqrt(low * high)
    query = torch.ones(d_k)
    keys = torch.zeros(2, d_k)
    keys[0] = gap
    return query, keys


@wrong("1.3", "keys as columns", SHAPE + r"|keys")
def _(d_k):
    low, high = math.log(99), math.sqrt(d_k) * math.log(1.5)
    if high <= low:
        return None
    query, keys = _construction(d_k, math.sqrt(low * high))
    return query, keys.T


@wrong("1.3", "ratio inverted in the log", r"none|no query")
def _(d_k):
    low, high = math.log(99), math.sqrt(d_k) * math.log(0.4 / 0.6)
    return None if high <= low else _construction(d_k, math.sqrt(low * high))


@correct("1.3", "midpoint gap")
def _(d_k):
    low, high = math.log(99), math.sqrt(d_k) * math.log(1.5)
    return None if high <= low else _construction(d_k, (low + high) / 2)


# ------------------------------------------------------------------ 2.1 one head with projections


@wrong("2.1", "keys from the query tokens", r"keys|memory")
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q, K, V = x_query @ W_Q, x_query @ W_K, x_memory @ W_V
    A = torch.softmax(Q @ K.T / math.sqrt(K.shape[-1]), dim=-1)
    return A @ V, A


@wrong("2.1", "weights on the left", SHAPE + r"|cannot be multiplied")
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q, K, V = W_Q @ x_query, W_K @ x_memory, W_V @ x_memory
    A = torch.softmax(Q @ K.T / math.sqrt(K.shape[-1]), dim=-1)
    return A @ V, A


@wrong("2.1", "scaled by sqrt(d_model)", SCALE)
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q, K, V = x_query @ W_Q, x_memory @ W_K, x_memory @ W_V
    A = torch.softmax(Q @ K.T / math.sqrt(W_Q.shape[0]), dim=-1)
    return A @ V, A


@wrong("2.1", "scaled by sqrt(T_q)", SCALE)
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q, K, V = x_query @ W_Q, x_memory @ W_K, x_memory @ W_V
    A = torch.softmax(Q @ K.T / math.sqrt(Q.shape[0]), dim=-1)
    return A @ V, A


@wrong("2.1", "softmax of K Q^T then transposed", AXIS)
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q, K, V = x_query @ W_Q, x_memory @ W_K, x_memory @ W_V
    A = torch.softmax(K @ Q.T / math.sqrt(K.shape[-1]), dim=-1).T
    return A @ V, A


@correct("2.1", "nn.functional.linear with transposed weights")
def _(x_query, x_memory, W_Q, W_K, W_V):
    Q = F.linear(x_query, W_Q.T)
    K = F.linear(x_memory, W_K.T)
    V = F.linear(x_memory, W_V.T)
    A = (Q @ K.transpose(0, 1) * K.shape[1] ** -0.5).softmax(dim=1)
    return A @ V, A


# ------------------------------------------------------------------ 2.2 design keys for a blend


def _direction(query):
    return math.sqrt(query.shape[0]) * query / (query @ query)


@wrong("2.2", "shares times the query", r"weight|share|blend|log")
def _(query, share):
    return torch.stack([share * query, (1 - share) * query, 0 * query])


@wrong("2.2", "divided by |q| instead of |q|^2", r"weight|share|blend|sqrt|scale")
def _(query, share):
    direction = math.sqrt(query.shape[0]) * query / query.norm()
    scores = torch.tensor([math.log(share), math.log(1 - share), math.log(min(share, 1 - share)) - 30])
    return scores[:, None] * direction


@wrong("2.2", "keys as columns", SHAPE)
def _(query, share):
    scores = torch.tensor([math.log(share), math.log(1 - share), -40.0])
    return (scores[:, None] * _direction(query)).T


@wrong("2.2", "shares swapped", r"weight|share|first key")
def _(query, share):
    scores = torch.tensor([math.log(1 - share), math.log(share), -40.0])
    return scores[:, None] * _direction(query)


@wrong("2.2", "third key is minus the query", r"third|weight")
def _(query, share):
    scores = torch.tensor([math.log(share), math.log(1 - share)])
    return torch.cat([scores[:, None] * _direction(query), -query[None, :]])


@correct("2.2", "log-odds and zero")
def _(query, share):
    scores = torch.tensor([math.log(share / (1 - share)), 0.0, -50.0])
    return scores[:, None] * _direction(query)


# ------------------------------------------------------------------ 2.3 previous-token head


def _shift(T, d_content, strength, query_offset=1):
    W_Q = torch.zeros(T + d_content, T)
    W_K = torch.zeros(T + d_content, T)
    W_K[:T, :] = torch.eye(T)
    for i in range(query_offset, T):
        if 0 <= i - query_offset < T:
            W_Q[i, i - query_offset] = strength
    return W_Q, W_K


@wrong("2.3", "no strength at all", r"weight|0\.99|strength|scale")
def _(T, d_content):
    return _shift(T, d_content, 1.0)


@wrong("2.3", "matrices transposed", SHAPE)
def _(T, d_content):
    W_Q, W_K = _shift(T, d_content, math.sqrt(T) * math.log(100 * T))
    return W_Q.T, W_K.T


@wrong("2.3", "content rows of the query random", r"content")
def _(T, d_content):
    W_Q, W_K = _shift(T, d_content, math.sqrt(T) * math.log(100 * T))
    W_Q[T:] = torch.randn(d_content, T)
    W_K[T:] = torch.randn(d_content, T)
    return W_Q, W_K


@wrong("2.3", "strength 10 for every T", r"weight|0\.99|strength|grow")
def _(T, d_content):
    return _shift(T, d_content, 10.0)


@wrong("2.3", "shift by two", r"previous|i - 1|position")
def _(T, d_content):
    return _shift(T, d_content, math.sqrt(T) * math.log(100 * T), query_offset=2)


@correct("2.3", "position 0 wraps to the last position")
def _(T, d_content):
    W_Q, W_K = _shift(T, d_content, math.sqrt(T) * math.log(100 * T))
    W_Q[0, T - 1] = math.sqrt(T) * math.log(100 * T)
    return W_Q, W_K


# ------------------------------------------------------------------ 3.1 hardmax with ties


@wrong("3.1", "one_hot of argmax", r"tie")
def _(scores):
    return F.one_hot(scores.argmax(dim=-1), scores.shape[-1]).to(scores.dtype)


@wrong("3.1", "maximum of the whole tensor", r"row|each|maximum|axis")
def _(scores):
    is_max = (scores == scores.max()).float()
    return is_max / is_max.sum(dim=-1, keepdim=True).clamp(min=1)


@wrong("3.1", "divided by the row length", r"sum to 1|tie|1/m")
def _(scores):
    is_max = (scores == scores.amax(dim=-1, keepdim=True)).float()
    return is_max / scores.shape[-1]


@wrong("3.1", "softmax with a large factor", r"hardmax|one-hot|exact|zero|0")
def _(scores):
    return torch.softmax(scores * 20, dim=-1)


@wrong("3.1", "boolean result", r"tie|dtype|float|bool|1/m")
def _(scores):
    return scores == scores.amax(dim=-1, keepdim=True)


@correct("3.1", "where and keepdim sum")
def _(scores):
    top = scores.max(dim=-1, keepdim=True).values
    hits = torch.where(scores == top, 1.0, 0.0).to(scores.dtype)
    return hits / hits.sum(-1, keepdim=True)


# ------------------------------------------------------------------ 3.2 sparsemax


def _sorted_parts(scores):
    z, _ = torch.sort(scores, descending=True)
    k = torch.arange(1, len(scores) + 1, dtype=scores.dtype)
    return z, k, z.cumsum(0)


@wrong("3.2", "threshold from the next index", r"threshold|sum to 1|support")
def _(scores):
    z, k, c = _sorted_parts(scores)
    support = int((1 + k * z > c).sum())
    index = min(support, len(scores) - 1)
    return torch.clamp(scores - (c[index] - 1) / support, min=0)


@wrong("3.2", "relu of scores minus their mean", r"sum to 1|threshold")
def _(scores):
    return torch.relu(scores - scores.mean())


@wrong("3.2", "support from the last index that passes", r"support|threshold|sum to 1")
def _(scores):
    z, k, c = _sorted_parts(scores)
    support = int((1 + k * z > c).nonzero().max())  # an index, not a count
    support = max(support, 1)
    return torch.clamp(scores - (c[support - 1] - 1) / support, min=0)


@wrong("3.2", "top score minus one, renormalised", r"threshold|sparsemax|support")
def _(scores):
    out = torch.clamp(scores - (scores.max() - 1), min=0)
    return out / out.sum()


@wrong("3.2", "sorted a detached copy", r"gradient|graph|detach")
def _(scores):
    z, k, c = _sorted_parts(scores.detach())
    support = int((1 + k * z > c).sum())
    theta = (c[support - 1] - 1) / support
    return torch.clamp(scores - theta, min=0)


@correct("3.2", "loop over k")
def _(scores):
    z = scores.sort(descending=True).values
    best = 0
    for j in range(len(z)):
        total_next = z[: j + 1].sum()
        if 1 + (j + 1) * z[j] > total_next:
            best = j + 1
    theta = (z[:best].sum() - 1) / best
    return (scores - theta).clamp(min=0)


# ------------------------------------------------------------------ 3.3 inverse temperature


def _bisect(top_weight, target, tolerance):
    low, high = 0.0, 1.0
    while top_weight(high) < target:
        low, high = high, 2 * high
    while high - low > tolerance:
        middle = (low + high) / 2
        if top_weight(middle) >= target:
            high = middle
        else:
            low = middle
    return high


@wrong("3.3", "target fixed at 0.9", r"target")
def _(scores, target=0.9):
    scores = scores.double()
    if (scores == scores.max()).sum() > 1:
        return None
    return _bisect(lambda b: torch.softmax(b * scores, 0).max().item(), 0.9, 1e-10)


@wrong("3.3", "any tie means None", r"tie|none")
def _(scores, target=0.9):
    scores = scores.double()
    if len(set(scores.tolist())) < len(scores):
        return None
    return _bisect(lambda b: torch.softmax(b * scores, 0).max().item(), target, 1e-10)


@wrong("3.3", "bisection stopped at 1e-2", r"smallest|precis|close|top weight|target")
def _(scores, target=0.9):
    scores = scores.double()
    if (scores == scores.max()).sum() > 1:
        return None
    return _bisect(lambda b: torch.softmax(b * scores, 0).max().item(), target, 1e-2)


# Written as a wrong answer, but after 60 halvings the lower end differs from the upper by about 1e-18 of
# beta: its top weight misses the target by rounding only, so it is right in every digit that matters.
@correct("3.3", "lower end after 60 halvings")
def _(scores, target=0.9):
    scores = scores.double()
    if (scores == scores.max()).sum() > 1:
        return None

    def f(b):
        return torch.softmax(b * scores, 0).max().item()

    low, high = 0.0, 1.0
    while f(high) < target:
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        if f(middle) >= target:
            high = middle
        else:
            low = middle
    return low


@wrong("3.3", "formula that treats the other keys as equal", r"formula|two keys|top weight|smallest|target")
def _(scores, target=0.9):
    s = sorted(scores.tolist(), reverse=True)
    if s[0] == s[1]:
        return None
    return math.log(target * (len(s) - 1) / (1 - target)) / (s[0] - s[1])


@wrong("3.3", "doubling until the target is reached", r"smallest|finely|bisection")
def _(scores, target=0.9):
    scores = scores.double()
    if (scores == scores.max()).sum() > 1:
        return None
    beta = 0.01
    while torch.softmax(beta * scores, 0).max().item() < target:
        beta *= 2
    return beta


@correct("3.3", "scipy-free bisection on the log")
def _(scores, target=0.9):
    scores = scores.double()
    if (scores == scores.max()).sum() > 1:
        return None
    return _bisect(lambda b: torch.softmax(b * scores, 0).max().item(), target, 1e-12)


# ------------------------------------------------------------------ 4.1 split and merge heads


def _split(x, h):
    b, t, d = x.shape
    return x.reshape(b, t, h, d // h).transpose(1, 2)


def _merge(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def _pair(split, merge):
    return split, merge


WRONG.append(
    (
        "4.1",
        "split with the head index fastest",
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], x.shape[2] // h, h).permute(0, 3, 1, 2), _merge),
        r"head|feature|split",
    )
)
WRONG.append(
    (
        "4.1",
        "merge with permute(0, 2, 3, 1)",
        (_split, lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1)),
        r"merge|head|feature|order",
    )
)
WRONG.append(
    (
        "4.1",
        "split transposing 1 and 3",
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(1, 3), _merge),
        SHAPE,
    )
)
WRONG.append(
    (
        "4.1",
        "merge transposing the last two axes",
        (_split, lambda x: x.transpose(2, 3).reshape(x.shape[0], x.shape[2], -1)),
        r"merge|order|shape|axis|transpos",
    )
)
WRONG.append(
    (
        "4.1",
        "split by chunks of tokens",
        (
            lambda x, h: (
                torch.stack(x.chunk(h, dim=1), dim=1)
                if x.shape[1] % h == 0
                else x.reshape(x.shape[0], h, x.shape[1], -1)
            ),
            _merge,
        ),
        r"split|head|feature|token|shape",
    )
)
CORRECT.append(
    (
        "4.1",
        "chunk and stack, reshape(-1)",
        (
            lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=1),
            lambda x: x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1),
        ),
    )
)
CORRECT.append(
    (
        "4.1",
        "view with contiguous",
        (
            lambda x, h: x.view(x.shape[0], x.shape[1], h, -1).permute(0, 2, 1, 3),
            lambda x: x.permute(0, 2, 1, 3).contiguous().view(x.shape[0], x.shape[2], -1),
        ),
    )
)


# ------------------------------------------------------------------ 4.2 parameter count


@wrong("4.2", "ignores d_head", r"d_head|heads|inner|narrow|wide")
def _(d_model, num_heads, d_head, bias):
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


@wrong("4.2", "output projection and its bias per head", r"output|bias|w_o")
def _(d_model, num_heads, d_head, bias):
    per_head = 3 * d_model * d_head + d_head * d_model + ((3 * d_head + d_model) if bias else 0)
    return num_heads * per_head


@wrong("4.2", "output bias as wide as the heads", r"output|bias")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 4 * d_model * inner + (4 * inner if bias else 0)


@wrong("4.2", "biases whatever the flag", r"bias")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 4 * d_model * inner + 3 * inner + d_model


@wrong("4.2", "forgot the value projection", r"w_v|value|projection|three|3")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 3 * d_model * inner + ((2 * inner + d_model) if bias else 0)


@correct("4.2", "built and counted")
def _(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    layers = [nn.Linear(d_model, inner, bias=bias) for _ in range(3)] + [nn.Linear(inner, d_model, bias=bias)]
    return sum(p.numel() for layer in layers for p in layer.parameters())


# ------------------------------------------------------------------ 4.3 multi-head attention


def _mha(
    x,
    in_w,
    in_b,
    out_w,
    out_b,
    num_heads,
    *,
    scale=None,
    merge=None,
    average=False,
    same_bias=False,
    out_transposed=False,
    softmax_dim=-1,
):
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    if same_bias:
        q = x @ in_w[:d_model].T + in_b[:d_model]
        k = x @ in_w[d_model : 2 * d_model].T + in_b[:d_model]
        v = x @ in_w[2 * d_model :].T + in_b[:d_model]
    else:
        q, k, v = (x @ in_w.T + in_b).chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, T, num_heads, d_head).transpose(1, 2) for t in (q, k, v))
    weights = torch.softmax(q @ k.transpose(-2, -1) / (scale or math.sqrt(d_head)), dim=softmax_dim)
    heads = weights @ v
    merged = merge(heads) if merge else heads.transpose(1, 2).reshape(batch, T, d_model)
    out = merged @ (out_w if out_transposed else out_w.T) + out_b
    return out, (weights.mean(dim=1) if average else weights)


@wrong("4.3", "weights averaged over the heads", r"head|shape|axis")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, average=True)


@wrong("4.3", "scaled by sqrt(num_heads)", r"sqrt\(d_head\)|sqrt\(d_k\)|scale")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, scale=math.sqrt(num_heads))


@wrong("4.3", "merge with permute(0, 2, 3, 1)", r"merge|head|order|feature")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(
        x,
        in_w,
        in_b,
        out_w,
        out_b,
        num_heads,
        merge=lambda h: h.permute(0, 2, 3, 1).reshape(h.shape[0], h.shape[2], -1),
    )


@wrong("4.3", "the query bias for all three", r"bias")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, same_bias=True)


@wrong("4.3", "output weight not transposed", r"output|out_proj|transpos")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, out_transposed=True)


@wrong("4.3", "softmax over the heads", AXIS)
def _(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha(x, in_w, in_b, out_w, out_b, num_heads, softmax_dim=1)


@correct("4.3", "F.linear, einsum and inference_mode")
def _(x, in_w, in_b, out_w, out_b, num_heads):
    batch, T, d = x.shape
    q, k, v = F.linear(x, in_w, in_b).split(d, dim=-1)
    q, k, v = (t.view(batch, T, num_heads, -1) for t in (q, k, v))
    w = torch.einsum("bqhd,bkhd->bhqk", q, k).div(math.sqrt(d // num_heads)).softmax(-1)
    merged = torch.einsum("bhqk,bkhd->bqhd", w, v).reshape(batch, T, d)
    return F.linear(merged, out_w, out_b), w


# ------------------------------------------------------------------ 5.1 sinusoidal table


def _table(P, d, *, denominator=None, base=10000.0, odd=torch.cos, odd_shift=0):
    positions = torch.arange(P, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d, 2, dtype=torch.float64)
    table = torch.zeros(P, d, dtype=torch.float64)
    table[:, 0::2] = torch.sin(positions / base ** (two_i / (denominator or d)))
    table[:, 1::2] = odd(positions / base ** ((two_i + odd_shift) / (denominator or d)))
    return table.float()


@wrong("5.1", "exponent over num_positions", r"d_model|frequenc|wavelength|10000")
def _(num_positions, d_model):
    return _table(num_positions, d_model, denominator=num_positions)


@wrong("5.1", "sine in the odd columns too", r"cos")
def _(num_positions, d_model):
    return _table(num_positions, d_model, odd=torch.sin)


@wrong("5.1", "base 1000", r"10000|frequenc|wavelength")
def _(num_positions, d_model):
    return _table(num_positions, d_model, base=1000.0)


@wrong("5.1", "linear frequencies", r"frequenc|10000|wavelength|exponent")
def _(num_positions, d_model):
    positions = torch.arange(num_positions, dtype=torch.float32)[:, None]
    angles = positions * torch.arange(0, d_model, 2) / d_model
    table = torch.zeros(num_positions, d_model)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return table


@wrong("5.1", "odd columns use (i + 1) / d", r"pair|frequenc|cos|exponent|column")
def _(num_positions, d_model):
    return _table(num_positions, d_model, odd_shift=1)


@correct("5.1", "multiplied by 10000^(-2i/d), float32")
def _(num_positions, d_model):
    p = torch.arange(num_positions).float().unsqueeze(1)
    freq = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(p * freq)
    pe[:, 1::2] = torch.cos(p * freq)
    return pe


# ------------------------------------------------------------------ 5.2 offset matrix


def _offset(d_model, k, block, *, exponent=lambda i, d: 2 * i / d, place=lambda i: 2 * i):
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        a = k / 10000 ** exponent(i, d_model)
        c, s = math.cos(a), math.sin(a)
        j = place(i)
        M[j : j + 2, j : j + 2] = torch.tensor(block(c, s), dtype=torch.float64)
    return M


@wrong("5.2", "a reflection, not a rotation", r"rotat|angle|sin|block")
def _(d_model, k):
    return _offset(d_model, k, lambda c, s: [[c, s], [s, c]])


@wrong("5.2", "angle multiplied by the wavelength", r"angle|frequenc|omega|10000")
def _(d_model, k):
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        a = k * 10000 ** (2 * i / d_model)
        c, s = math.cos(a), math.sin(a)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return M


@wrong("5.2", "the identity", r"k|angle|rotat|offset|move")
def _(d_model, k):
    return torch.eye(d_model, dtype=torch.float64)


@wrong("5.2", "blocks at (i, i+1)", r"pair|block|column|rotat")
def _(d_model, k):
    return _offset(d_model, k, lambda c, s: [[c, -s], [s, c]], place=lambda i: i)


@wrong("5.2", "angle k times the pair index", r"angle|frequenc|omega|10000")
def _(d_model, k):
    return _offset(d_model, k, lambda c, s: [[c, -s], [s, c]], exponent=lambda i, d: -math.log10(i + 1) / 4)


@correct("5.2", "block_diag in float32")
def _(d_model, k):
    blocks = []
    for i in range(d_model // 2):
        a = k / 10000 ** (2 * i / d_model)
        blocks.append(torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64))
    return torch.block_diag(*blocks)


# ------------------------------------------------------------------ 5.4 best invariant accuracy


def _bag_accuracy(tokens, labels, key):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[key(row)][label] += 1
    return sum(max(c.values()) for c in groups.values()) / len(labels)


WRONG.append(
    (
        "5.4",
        "grouped by the token sum",
        lambda tokens, labels: _bag_accuracy(tokens, labels, sum),
        r"multiset|bag|order|group|sorted",
    )
)
WRONG.append(
    (
        "5.4",
        "grouped by the first three tokens",
        lambda tokens, labels: _bag_accuracy(tokens, labels, lambda r: tuple(r[:3])),
        r"multiset|bag|order|group|sorted",
    )
)
WRONG.append(
    (
        "5.4",
        "a percentage",
        lambda tokens, labels: 100 * _bag_accuracy(tokens, labels, lambda r: tuple(sorted(r))),
        r"fraction|percent|between 0 and 1",
    )
)


def _distinct_labels(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(sorted(row))][label] += 1
    return sum(len(c) for c in groups.values()) / len(labels)


def _number_of_bags(tokens, labels):
    return len({tuple(sorted(r)) for r in tokens.tolist()}) / len(labels)


WRONG.append(("5.4", "counted the distinct labels per bag", _distinct_labels, r"majority|most|count|label"))
WRONG.append(("5.4", "number of bags over N", _number_of_bags, r"majority|most|count|label"))


def _unique_rows(tokens, labels):
    bags, inverse = torch.unique(tokens.sort(dim=1).values, dim=0, return_inverse=True)
    table = torch.zeros(len(bags), int(labels.max()) + 1)
    table.index_put_((inverse, labels.long()), torch.ones(len(labels)), accumulate=True)
    return float(table.max(dim=1).values.sum() / len(labels))


CORRECT.append(("5.4", "torch.unique over sorted rows", _unique_rows))


# ------------------------------------------------------------------ 5.5 add positions


WRONG.append(
    ("5.5", "table slice transposed", lambda e, table: e + table[: e.shape[1]].T, r"axis|shape|position|feature")
)
WRONG.append(
    (
        "5.5",
        "positions on a middle axis",
        lambda e, table: e + table[: e.shape[1]][:, None, :],
        r"axis|shape|position|batch",
    )
)
WRONG.append(("5.5", "the last T rows", lambda e, table: e + table[-e.shape[1] :], r"first|row|position 0|positions"))
WRONG.append(
    (
        "5.5",
        "sliced by the batch size",
        lambda e, table: e + table[: e.shape[0]][:, None, :],
        r"batch|axis|position|shape",
    )
)
WRONG.append(("5.5", "multiplied", lambda e, table: e * table[: e.shape[1]], r"add|sum|plus"))
WRONG.append(("5.5", "the mean position", lambda e, table: e + table[: e.shape[1]].mean(0), r"position|each|row"))
CORRECT.append(("5.5", "unsqueeze and expand", lambda e, table: e + table[: e.shape[1]].unsqueeze(0).expand_as(e)))
CORRECT.append(("5.5", "nn.functional.embedding", lambda e, table: e + F.embedding(torch.arange(e.shape[1]), table)))


# ------------------------------------------------------------------ 5.6 learned positions


class _Learned56(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Parameter(0.02 * torch.randn(max_len, d_model))

    def forward(self, x):
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(f"sequence of {T} tokens is longer than max_len={self.max_len}")
        return x + self.table[:T]


class _IndexError56(_Learned56):
    def forward(self, x):
        T = x.shape[1]
        if T > self.max_len:
            raise IndexError(f"sequence of {T} tokens is longer than max_len={self.max_len}")
        return x + self.table[:T]


class _BatchRows56(_Learned56):
    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"sequence of {x.shape[1]} tokens is longer than max_len={self.max_len}")
        return x + self.table[: x.shape[0]][:, None, :]


class _PlainTensor56(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.table = 0.02 * torch.randn(max_len, d_model, requires_grad=True)

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"sequence of {x.shape[1]} tokens is longer than max_len={self.max_len}")
        return x + self.table[: x.shape[1]]


class _ChecksFeatures56(_Learned56):
    def forward(self, x):
        if x.shape[-1] > self.max_len:
            raise ValueError(f"sequence of {x.shape[-1]} tokens is longer than max_len={self.max_len}")
        return x + self.table[: x.shape[1]]


class _OneVector56(_Learned56):
    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"sequence of {x.shape[1]} tokens is longer than max_len={self.max_len}")
        return x + self.table[0]


class _Embedding56(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.positions = nn.Embedding(max_len, d_model)

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"got {x.shape[1]} positions, max_len is {self.max_len}")
        return x + self.positions(torch.arange(x.shape[1]))


WRONG.append(("5.6", "IndexError instead of ValueError", _IndexError56, r"valueerror"))
WRONG.append(("5.6", "table rows by batch", _BatchRows56, r"batch|position|axis|shape"))
WRONG.append(("5.6", "a tensor attribute, not a Parameter", _PlainTensor56, r"parameter|learn"))
WRONG.append(("5.6", "length check on the features", _ChecksFeatures56, r"length|max_len|valueerror|tokens"))
WRONG.append(("5.6", "one vector for every position", _OneVector56, r"position|each|row"))
CORRECT.append(("5.6", "nn.Embedding", _Embedding56))


# ------------------------------------------------------------------ 6.1 decoder masks


def _cross(source_padding, T_out):
    return source_padding[:, None, :].expand(source_padding.shape[0], T_out, source_padding.shape[1])


WRONG.append(
    (
        "6.1",
        "future mask (True = blocked)",
        lambda sp, T: (torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), _cross(sp, T)),
        r"true|inverted|may attend|future|causal|triangle",
    )
)
WRONG.append(
    (
        "6.1",
        "cross mask axes swapped",
        lambda sp, T: (torch.ones(T, T, dtype=torch.bool).tril(), sp[:, :, None].expand(sp.shape[0], sp.shape[1], T)),
        r"shape|axis|t_out|t_in",
    )
)
WRONG.append(
    (
        "6.1",
        "cross mask not expanded",
        lambda sp, T: (torch.ones(T, T, dtype=torch.bool).tril(), sp[:, None, :]),
        r"shape|axis|t_out|expand",
    )
)
WRONG.append(
    (
        "6.1",
        "self mask the size of the source",
        lambda sp, T: (torch.ones(sp.shape[1], sp.shape[1], dtype=torch.bool).tril(), _cross(sp, T)),
        r"shape|t_out|size",
    )
)
WRONG.append(
    (
        "6.1",
        "cross mask inverted",
        lambda sp, T: (torch.ones(T, T, dtype=torch.bool).tril(), _cross(~sp, T)),
        r"padding|inverted|true",
    )
)
CORRECT.append(
    (
        "6.1",
        "arange comparison and repeat",
        lambda sp, T: (torch.arange(T)[None, :] <= torch.arange(T)[:, None], sp.unsqueeze(1).repeat(1, T, 1)),
    )
)


# ------------------------------------------------------------------ 6.2 decoder layer


def _layer(
    layer,
    x,
    memory,
    *,
    causal="tril",
    cross_queries_from_memory=False,
    norm_inside=False,
    residual_of_norm=False,
    one_norm=False,
    skip_ff=False,
    cross_mask=False,
):
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril()
    mask = ~future if causal == "inverted" else future
    norms = [layer.norm1] * 3 if one_norm else [layer.norm1, layer.norm2, layer.norm3]

    def self_block(h):
        return layer.self_attn(h, h, h, mask=mask)[0]

    def cross_block(h):
        if cross_queries_from_memory:
            return layer.cross_attn(memory, h, h)[0]
        return layer.cross_attn(h, memory, memory, mask=future[:, : memory.shape[1]] if cross_mask else None)[0]

    blocks = [self_block, cross_block, layer.feed_forward]
    if skip_ff:
        blocks = blocks[:2]
        norms = norms[:2]
    for block, norm in zip(blocks, norms):
        if layer.norm_first:
            if residual_of_norm:
                h = norm(x)
                x = h + block(h)
            else:
                x = x + block(norm(x))
        elif norm_inside:
            x = x + norm(block(x))
        else:
            x = norm(x + block(x))
    return x


WRONG.append(
    (
        "6.2",
        "causal mask inverted",
        lambda layer, x, m: _layer(layer, x, m, causal="inverted"),
        r"causal|future|mask|nan",
    )
)
WRONG.append(
    (
        "6.2",
        "cross-attention queries from the memory",
        lambda layer, x, m: _layer(layer, x, m, cross_queries_from_memory=True),
        r"cross|queries|memory|encoder",
    )
)
WRONG.append(
    (
        "6.2",
        "post-norm normalising only the sub-layer",
        lambda layer, x, m: _layer(layer, x, m, norm_inside=True),
        r"norm|residual",
    )
)
WRONG.append(
    (
        "6.2",
        "pre-norm residual adds the normalised input",
        lambda layer, x, m: _layer(layer, x, m, residual_of_norm=True),
        r"residual|norm",
    )
)
WRONG.append(("6.2", "norm1 everywhere", lambda layer, x, m: _layer(layer, x, m, one_norm=True), r"norm"))
WRONG.append(
    (
        "6.2",
        "forgot the feed-forward",
        lambda layer, x, m: _layer(layer, x, m, skip_ff=True),
        r"feed-forward|feed_forward|sub-layer",
    )
)
WRONG.append(
    (
        "6.2",
        "causal mask on the cross-attention too",
        lambda layer, x, m: _layer(layer, x, m, cross_mask=True),
        r"cross|mask|memory|causal|future",
    )
)


# ------------------------------------------------------------------ 6.3 does the model see the future?


def _leak_test(perturb, compare="past", start=0):
    def sees_the_future(model, tokens, vocab_size):
        with torch.no_grad():
            original = model(tokens)
            T = tokens.shape[1]
            for t in range(start, T - 1):
                changed = tokens.clone()
                perturb(changed, t, vocab_size)
                out = model(changed)
                if compare == "past":
                    moved = not torch.allclose(out[:, : t + 1], original[:, : t + 1], atol=1e-6)
                elif compare == "future":
                    moved = not torch.allclose(out[:, t + 1 :], original[:, t + 1 :], atol=1e-6)
                else:
                    moved = not torch.allclose(out, original, atol=1e-6)
                if moved:
                    return True
        return False

    return sees_the_future


def _plus_one(changed, t, vocab_size):
    changed[:, t + 1 :] += 1


def _set_to_zero(changed, t, vocab_size):
    changed[:, t + 1 :] = 0


def _wrap(changed, t, vocab_size):
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % vocab_size


def _only_next(changed, t, vocab_size):
    changed[:, t + 1] = (changed[:, t + 1] + 1) % vocab_size


WRONG.append(
    ("6.3", "+1 without wrapping around the vocabulary", _leak_test(_plus_one), r"vocab|wrap|% vocab_size|token")
)
WRONG.append(
    ("6.3", "set the future to token 0", _leak_test(_set_to_zero), r"different|same token|unchanged|token 0|change")
)
WRONG.append(("6.3", "compares the future outputs", _leak_test(_wrap, compare="future"), r"earlier|before|past|future"))
WRONG.append(("6.3", "any output that moves", _leak_test(_wrap, compare="all"), r"earlier|before|past|causal|future"))
WRONG.append(("6.3", "loop starts at the middle", _leak_test(_wrap, start=2), r"position|every|first|early"))
CORRECT.append(("6.3", "one token at a time, compare position t only", _leak_test(_only_next)))


# ------------------------------------------------------------------ 6.4 position-wise feed-forward


WRONG.append(
    ("6.4", "GELU instead of ReLU", lambda x, W1, b1, W2, b2: F.gelu(x @ W1 + b1) @ W2 + b2, r"relu|activation")
)
WRONG.append(
    (
        "6.4",
        "W1 transposed",
        lambda x, W1, b1, W2, b2: torch.relu(x @ W1.T + b1) @ W2.T + b2,
        SHAPE + r"|cannot be multiplied|transpos",
    )
)
WRONG.append(
    (
        "6.4",
        "softmax over the positions",
        lambda x, W1, b1, W2, b2: torch.softmax(x @ W1 + b1, dim=1) @ W2 + b2,
        r"position-wise|position|each token|relu",
    )
)
WRONG.append(("6.4", "no b2", lambda x, W1, b1, W2, b2: (x @ W1 + b1).clamp(min=0) @ W2, r"bias|b2"))
WRONG.append(
    ("6.4", "adds a residual", lambda x, W1, b1, W2, b2: x + torch.relu(x @ W1 + b1) @ W2 + b2, r"residual|x \+")
)
WRONG.append(
    (
        "6.4",
        "returns the flattened positions",
        lambda x, W1, b1, W2, b2: torch.relu(x.reshape(-1, x.shape[-1]) @ W1 + b1) @ W2 + b2,
        SHAPE,
    )
)
CORRECT.append(
    (
        "6.4",
        "reshape(-1, d) and back",
        lambda x, W1, b1, W2, b2: (torch.relu(x.reshape(-1, x.shape[-1]) @ W1 + b1) @ W2 + b2).reshape(x.shape),
    )
)
CORRECT.append(
    ("6.4", "F.linear with transposes", lambda x, W1, b1, W2, b2: F.linear(F.relu(F.linear(x, W1.T, b1)), W2.T, b2))
)


# ------------------------------------------------------------------ 6.5 greedy decoding


def _decode(
    *, replace_after_eos=True, stop_when_done=True, steps_extra=0, source_as_input=False, all_at_once=False, pad=None
):
    @torch.no_grad()
    def greedy(model, source, max_len, bos, eos):
        memory = model.encode(source)
        batch = source.shape[0]
        if all_at_once:
            inputs = torch.full((batch, max_len), bos, dtype=torch.long)
            return model.decode(inputs, memory).argmax(-1)
        if source_as_input:
            inputs = torch.cat([torch.full((batch, 1), bos, dtype=torch.long), source], dim=1)[:, :max_len]
            return model.decode(inputs, memory).argmax(-1)
        generated = torch.full((batch, 1), bos, dtype=torch.long)
        finished = torch.zeros(batch, dtype=torch.bool)
        for _ in range(max_len + steps_extra):
            next_token = model.decode(generated, memory)[:, -1].argmax(-1)
            if replace_after_eos:
                next_token = torch.where(finished, torch.full_like(next_token, eos if pad is None else pad), next_token)
            generated = torch.cat([generated, next_token[:, None]], dim=1)
            finished |= next_token == eos
            if stop_when_done and finished.all():
                break
        return generated[:, 1:]

    return greedy


WRONG.append(("6.5", "keeps the model's tokens after EOS", _decode(replace_after_eos=False), r"eos"))
WRONG.append(
    (
        "6.5",
        "the source as the decoder's input",
        _decode(source_as_input=True),
        r"teacher forcing|own (output|prediction)|its own",
    )
)
WRONG.append(
    (
        "6.5",
        "all positions at once from BOS",
        _decode(all_at_once=True),
        r"teacher forcing|own (output|prediction)|its own|bos",
    )
)
WRONG.append(("6.5", "one step too many", _decode(steps_extra=1), r"max_len|length|steps"))
WRONG.append(("6.5", "pads finished sequences with 0", _decode(pad=0), r"eos"))
CORRECT.append(("6.5", "list of steps and inference_mode", _decode()))


# ------------------------------------------------------------------ 6.6 evaluation loop


def _evaluate(*, per_batch_total=False, dim=-1, mode="eval", percent=False, grad=False):
    def accuracy(model, batches):
        was = model.training
        model.eval() if mode == "eval" else model.train()
        correct = total = 0
        context = torch.enable_grad() if grad else torch.no_grad()
        with context:
            for inputs, labels in batches:
                correct += int((model(inputs).argmax(dim=dim) == labels).sum())
                total += 1 if per_batch_total else len(labels)
        model.train(was)
        return 100 * correct / total if percent else correct / total

    return accuracy


WRONG.append(("6.6", "divides by the number of batches", _evaluate(per_batch_total=True), r"total|count|example|batch"))
WRONG.append(("6.6", "argmax over the batch", _evaluate(dim=0), r"argmax|axis|class"))
WRONG.append(("6.6", "train() at the start", _evaluate(mode="train"), r"eval|dropout|train mode"))
WRONG.append(("6.6", "a percentage", _evaluate(percent=True), r"fraction|percent|between 0 and 1"))
WRONG.append(("6.6", "gradients switched on", _evaluate(grad=True), r"no_grad|gradient|graph"))


def _inference(model, batches):
    was = model.training
    model.eval()
    hits = []
    with torch.inference_mode():
        for inputs, labels in batches:
            hits.append(model(inputs).argmax(-1) == labels)
    model.train(was)
    return torch.cat(hits).float().mean().item()


CORRECT.append(("6.6", "inference_mode and a list of hits", _inference))


# ------------------------------------------------------------------ 7.1 the last real token


def _last_real_positions(padding_mask):
    return torch.where(padding_mask, torch.arange(padding_mask.shape[1]), -1).amax(dim=1)


def _last_token_where_amax(hidden, padding_mask):
    empty = ~padding_mask.any(dim=1)
    if empty.any():
        raise ValueError(f"sentence {empty.nonzero()[0].item()} has only padding")
    return hidden[torch.arange(hidden.shape[0]), _last_real_positions(padding_mask)]


WRONG.append(("7.1", "the last real token of the whole batch", lambda h, m: h[m][-1], r"batch|shape|sentence|axis"))
WRONG.append(("7.1", "the last position", lambda h, m: h[:, -1, :], r"last position|padding"))
WRONG.append(
    (
        "7.1",
        "the count minus one as the position",
        lambda h, m: h[torch.arange(h.shape[0]), m.long().sum(-1) - 1],
        r"lengths - 1|on the right|left",
    )
)
WRONG.append(
    ("7.1", "the first True", lambda h, m: h[torch.arange(h.shape[0]), m.float().argmax(-1)], r"first real token")
)
WRONG.append(
    (
        "7.1",
        "mean pooling as in the chapter",
        lambda h, m: (h * m[..., None]).sum(1) / m.sum(1, keepdim=True),
        r"mean pooling|averaged",
    )
)
CORRECT.append(("7.1", "torch.where and amax", _last_token_where_amax))


# ------------------------------------------------------------------ 7.2 classification head


class _Head72(nn.Module):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Linear(d_model, num_classes)

    def pooled(self, tokens, padding_mask):
        hidden = self.encoder(tokens, padding_mask)
        w = padding_mask.float()[..., None]
        return (hidden * w).sum(1) / w.sum(1)

    def forward(self, tokens, padding_mask):
        return self.head(self.pooled(tokens, padding_mask))


class _MeanOfLogits72(_Head72):
    def forward(self, tokens, padding_mask):
        return self.head(self.encoder(tokens, padding_mask)).mean(dim=1)


class _LogSoftmax72(_Head72):
    def forward(self, tokens, padding_mask):
        return torch.log_softmax(super().forward(tokens, padding_mask), dim=-1)


class _SumPool72(_Head72):
    def forward(self, tokens, padding_mask):
        hidden = self.encoder(tokens, padding_mask)
        return self.head((hidden * padding_mask.float()[..., None]).sum(1))


class _InvertedMask72(_Head72):
    def forward(self, tokens, padding_mask):
        hidden = self.encoder(tokens, ~padding_mask)
        w = padding_mask.float()[..., None]
        return self.head((hidden * w).sum(1) / w.sum(1))


class _Frozen72(_Head72):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__(encoder, d_model, num_classes)
        for p in self.encoder.parameters():
            p.requires_grad_(False)


WRONG.append(("7.2", "mean of the token logits", _MeanOfLogits72, r"padding|pool|real tokens"))
WRONG.append(("7.2", "log-probabilities", _LogSoftmax72, r"logits|softmax|probabilit"))
WRONG.append(("7.2", "sum pooling", _SumPool72, r"mean|average|divide|pool"))
WRONG.append(("7.2", "inverted mask for the encoder", _InvertedMask72, r"mask|padding"))
WRONG.append(("7.2", "froze the encoder", _Frozen72, r"gradient|encoder|fine-tun|train"))


class _MaskedFill72(_Head72):
    def forward(self, tokens, padding_mask):
        hidden = self.encoder(tokens, padding_mask).masked_fill(~padding_mask.unsqueeze(-1), 0.0)
        return self.head(hidden.sum(1) / padding_mask.sum(1, keepdim=True))


CORRECT.append(("7.2", "masked_fill pooling", _MaskedFill72))


# ------------------------------------------------------------------ 7.3 best layer


def _layer_scores(train_features, train_labels, valid_features, valid_labels, *, fit="train", judge="valid"):
    scores = []
    for layer in range(train_features.shape[1]):
        if fit == "both":
            probe = train_linear_probe(
                torch.cat([train_features[:, layer], valid_features[:, layer]]), torch.cat([train_labels, valid_labels])
            )
        else:
            probe = train_linear_probe(train_features[:, layer], train_labels)
        scores.append(probe_accuracy(probe, valid_features[:, layer], valid_labels))
    return scores


WRONG.append(
    (
        "7.3",
        "probes fitted on train and validation",
        lambda *a: int(torch.tensor(_layer_scores(*a, fit="both")).argmax()),
        r"validation|held-out|train",
    )
)
WRONG.append(("7.3", "returned the accuracy", lambda *a: max(_layer_scores(*a)), r"index|int|layer"))
WRONG.append(
    (
        "7.3",
        "layer with the largest mean feature",
        lambda tf, tl, vf, vl: int(vf.mean(dim=(0, 2)).argmax()),
        r"probe|accura|valid",
    )
)
WRONG.append(
    (
        "7.3",
        "index from the end",
        lambda *a: len(_layer_scores(*a)) - 1 - int(torch.tensor(_layer_scores(*a)).argmax()),
        r"index|layer|count",
    )
)
WRONG.append(
    (
        "7.3",
        "indexing the examples instead of the layers",
        lambda tf, tl, vf, vl: max(
            range(tf.shape[1]),
            key=lambda i: probe_accuracy(train_linear_probe(tf[i], tl[: tf.shape[2]]), vf[i], vl[: vf.shape[2]]),
        ),
        r"axis|layer|shape|examples",
    )
)
CORRECT.append(("7.3", "argmax over a tensor of accuracies", lambda *a: int(torch.tensor(_layer_scores(*a)).argmax())))


# ------------------------------------------------------------------ a second batch, written after the probes

# Written (2 per exercise) once the probes of issue 32 were in place and before these answers were first run,
# to see how the probes do on mistakes they were not built around. Kept as tests like the first batch.

SECOND_BATCH_START = len(WRONG)

WRONG.append(
    (
        "0.1",
        "softmax of the squared scores",
        lambda Q, K: torch.softmax((Q @ K.T / math.sqrt(Q.shape[-1])) ** 2, dim=-1),
        r"softmax|larger score|weight",
    )
)
WRONG.append(
    ("0.1", "scaled by sqrt(d_k + 1)", lambda Q, K: torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1] + 1), dim=-1), SCALE)
)
# Written as wrong, but the query of ones meets the keys' only nonzero feature with a 1, so the scores are those
# of the chapter's construction: it is right (found on its first run).
CORRECT.append(
    (
        "1.3",
        "query of ones",
        lambda d_k: (
            None
            if math.sqrt(d_k) * math.log(1.5) <= math.log(99)
            else (
                torch.full((d_k,), 1.0),
                _construction(d_k, math.sqrt(math.log(99) * math.sqrt(d_k) * math.log(1.5)))[1],
            )
        ),
    )
)
WRONG.append(
    (
        "1.3",
        "None from d_k = 256",
        lambda d_k: None if d_k < 256 else _construction(d_k, math.sqrt(math.log(99) * math.sqrt(d_k) * math.log(1.5))),
        r"none|pair exists",
    )
)
WRONG.append(
    (
        "2.1",
        "queries from the memory",
        lambda xq, xm, WQ, WK, WV: (lambda A: (A @ (xm @ WV), A))(
            torch.softmax((xm @ WQ) @ (xm @ WK).T / math.sqrt(WK.shape[1]), dim=-1)
        ),
        r"quer|shape|axis|x_query",
    )
)
WRONG.append(
    (
        "2.1",
        "values from the query tokens",
        lambda xq, xm, WQ, WK, WV: (lambda A: (A @ (xq @ WV)[: A.shape[1]], A))(
            torch.softmax((xq @ WQ) @ (xm @ WK).T / math.sqrt(WK.shape[1]), dim=-1)
        ),
        r"values|x_memory|shape|memory",
    )
)
WRONG.append(
    (
        "2.2",
        "scores log(share) without the third key pushed down",
        lambda q, share: (
            torch.tensor([math.log(share), math.log(1 - share), math.log(1 - share)])[:, None] * _direction(q)
        ),
        r"third|weight",
    )
)
WRONG.append(
    (
        "2.2",
        "probabilities as scores, scaled",
        lambda q, share: torch.tensor([share, 1 - share, -30.0])[:, None] * _direction(q),
        r"weight|log|exp",
    )
)
WRONG.append(
    (
        "2.3",
        "keys shifted instead of queries, the wrong way",
        lambda T, dc: (lambda W: (W[1], W[0]))(_shift(T, dc, math.sqrt(T) * math.log(100 * T))),
        r"next|previous|position|wrong way",
    )
)
WRONG.append(
    (
        "2.3",
        "strength log(100) * sqrt(T) only",
        lambda T, dc: _shift(T, dc, math.sqrt(T) * math.log(100)),
        r"weight|0\.9|grow|flat",
    )
)
WRONG.append(
    (
        "3.1",
        "argmax with keepdim into scatter",
        lambda s: torch.zeros_like(s).scatter(-1, s.argmax(-1, keepdim=True), 1.0),
        r"tie",
    )
)
WRONG.append(
    (
        "3.1",
        "ties get 1/n of the row",
        lambda s: (
            (s == s.amax(-1, keepdim=True)).float()
            / ((s == s.amax(-1, keepdim=True)).float().sum(-1, keepdim=True) + 1)
        ),
        r"sum to 1|tie|1/m|weight",
    )
)
WRONG.append(
    (
        "3.2",
        "softmax then zero the small ones",
        lambda s: (lambda w: w * (w > 0.1))(torch.softmax(s, 0)),
        r"sum to 1|threshold",
    )
)
WRONG.append(
    (
        "3.2",
        "threshold from the mean of the support",
        lambda s: torch.clamp(s - s[s > s.mean()].mean() + 0.0, min=0),
        r"sum to 1|threshold",
    )
)
WRONG.append(
    (
        "3.3",
        "one Newton step from beta = 1",
        lambda s, target=0.9: (
            None if (s == s.max()).sum() > 1 else 1.0 + (target - torch.softmax(s.double(), 0).max().item())
        ),
        r"smallest|top weight|target|below",
    )
)
WRONG.append(
    (
        "3.3",
        "None when the target is above 0.9",
        lambda s, target=0.9: (
            None
            if target > 0.9 or (s == s.max()).sum() > 1
            else _bisect(lambda b: torch.softmax(b * s.double(), 0).max().item(), target, 1e-12)
        ),
        r"none|target|reaches",
    )
)
WRONG.append(
    (
        "4.1",
        "split over the batch axis",
        (lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(0, 2), _merge),
        r"shape|axis|head|batch",
    )
)
WRONG.append(
    (
        "4.1",
        "merge without reshape (stack of heads)",
        (_split, lambda x: torch.cat(list(x.unbind(1)), dim=1)),
        r"shape|axis|merge|position|feature",
    )
)
WRONG.append(
    (
        "4.2",
        "square W_Q, W_K, W_V",
        lambda d, h, dh, bias: 3 * d * d + h * dh * d + ((3 * d + d) if bias else 0),
        r"d_head|weights|w_q|count",
    )
)
WRONG.append(("4.2", "a bias only on W_O", lambda d, h, dh, bias: 4 * d * h * dh + (d if bias else 0), r"bias"))
WRONG.append(("4.3", "scaled by d_head", lambda *a: _mha(*a, scale=(a[0].shape[-1] // a[5])), r"sqrt|scale"))
WRONG.append(
    ("4.3", "no output bias", lambda x, w, b, ow, ob, h: _mha(x, w, b, ow, torch.zeros_like(ob), h), r"bias|output")
)
WRONG.append(
    (
        "5.1",
        "cos in the even columns",
        lambda P, d: _table(P, d, odd=torch.cos)[:, [i ^ 1 for i in range(d)]],
        r"cos|sin|position 0|even",
    )
)
WRONG.append(("5.1", "positions from 1", lambda P, d: _table(P + 1, d)[1:], r"position 0|positions|0"))
WRONG.append(
    ("5.2", "the rotation for k = 1", lambda d, k: _offset(d, 1, lambda c, s: [[c, -s], [s, c]]), r"angle|k|turn")
)
WRONG.append(
    (
        "5.2",
        "a dense matrix from sin and cos of k",
        lambda d, k: torch.full((d, d), math.cos(k) / d, dtype=torch.float64),
        r"rotation|block|turn",
    )
)
WRONG.append(
    (
        "5.4",
        "grouped by sorted set of distinct tokens",
        lambda t, y: _bag_accuracy(t, y, lambda r: tuple(sorted(set(r)))),
        r"bag|multiset|repeated",
    )
)
WRONG.append(
    (
        "5.4",
        "majority label over the whole set per bag size",
        lambda t, y: _bag_accuracy(t, y, len),
        r"bag|multiset|group",
    )
)
WRONG.append(
    ("5.5", "the table added twice", lambda e, table: e + 2 * table[: e.shape[1]], r"row|position|added|table")
)
WRONG.append(("5.5", "the table's first row to every position", lambda e, table: e + table[0], r"row|position"))


class _ZeroTable56(_Learned56):
    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"{x.shape[1]} tokens, max_len={self.max_len}")
        return x + self.table[: x.shape[1]].detach()


class _SliceByMaxLen56(_Learned56):
    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"{x.shape[1]} tokens, max_len={self.max_len}")
        return x + self.table[-x.shape[1] :]


WRONG.append(("5.6", "table detached", _ZeroTable56, r"gradient|learn|autograd"))
WRONG.append(("5.6", "the last T rows", _SliceByMaxLen56, r"row|position"))
WRONG.append(
    (
        "6.1",
        "causal mask with the diagonal excluded",
        lambda sp, T: (torch.ones(T, T, dtype=torch.bool).tril(-1), _cross(sp, T)),
        r"itself|diagonal|j <= i",
    )
)
WRONG.append(
    (
        "6.1",
        "cross mask of ones",
        lambda sp, T: (
            torch.ones(T, T, dtype=torch.bool).tril(),
            torch.ones(sp.shape[0], T, sp.shape[1], dtype=torch.bool),
        ),
        r"padd",
    )
)
WRONG.append(
    (
        "6.2",
        "no residual on the cross-attention",
        lambda layer, x, m: (
            lambda h: (
                layer.norm3(h + layer.feed_forward(h))
                if not layer.norm_first
                else h + layer.feed_forward(layer.norm3(h))
            )
        )(
            (
                lambda h1: (
                    layer.norm2(layer.cross_attn(h1, m, m)[0])
                    if not layer.norm_first
                    else layer.cross_attn(layer.norm2(h1), m, m)[0]
                )
            )(
                (
                    layer.norm1(
                        x
                        + layer.self_attn(x, x, x, mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril())[0]
                    )
                )
                if not layer.norm_first
                else x
                + layer.self_attn(
                    layer.norm1(x),
                    layer.norm1(x),
                    layer.norm1(x),
                    mask=torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril(),
                )[0]
            )
        ),
        r"residual",
    )
)
WRONG.append(
    (
        "6.2",
        "pre-norm for every layer",
        lambda layer, x, m: _layer(
            type(
                "L",
                (),
                {
                    "norm_first": True,
                    "norm1": layer.norm1,
                    "norm2": layer.norm2,
                    "norm3": layer.norm3,
                    "self_attn": layer.self_attn,
                    "cross_attn": layer.cross_attn,
                    "feed_forward": layer.feed_forward,
                },
            )(),
            x,
            m,
        ),
        r"norm|residual",
    )
)
WRONG.append(
    (
        "6.3",
        "changes a random token that may be the same",
        _leak_test(
            lambda c, t, v: c.__setitem__((slice(None), slice(t + 1, None)), c[:, t + 1 :] * 0 + (c[:, t + 1 :] % 2))
        ),
        r"change|different|token",
    )
)
WRONG.append(
    (
        "6.3",
        "compares with a loose tolerance",
        lambda model, tokens, v: any(
            not torch.allclose(
                model(torch.cat([tokens[:, : t + 1], (tokens[:, t + 1 :] + 1) % v], 1))[:, : t + 1],
                model(tokens)[:, : t + 1],
                atol=1.0,
            )
            for t in range(tokens.shape[1] - 1)
        ),
        r"missed|leak|tolerance",
    )
)
WRONG.append(
    ("6.4", "ReLU on the input", lambda x, W1, b1, W2, b2: torch.relu(x) @ W1 @ W2 + b1 @ W2 + b2, r"relu|b1|formula")
)
WRONG.append(
    (
        "6.4",
        "W2 before W1",
        lambda x, W1, b1, W2, b2: (
            torch.relu(x @ W1 + b1) @ W2 + b2 + 0 * x.sum(1, keepdim=True) + x.mean(1, keepdim=True) * 0.01
        ),
        r"position",
    )
)
WRONG.append(
    (
        "6.5",
        "takes the first position's prediction",
        _decode()
        if False
        else (
            lambda model, source, max_len, bos, eos: _decode()(
                type(
                    "M",
                    (),
                    {
                        "encode": model.encode,
                        "decode": lambda self, g, m: model.decode(g, m)[:, :1].expand(-1, g.shape[1], -1),
                    },
                )(),
                source,
                max_len,
                bos,
                eos,
            )
        ),
        r"own|last position|output",
    )
)
WRONG.append(
    (
        "6.5",
        "sampling instead of argmax",
        lambda model, source, max_len, bos, eos: torch.multinomial(
            torch.ones(source.shape[0], 11), max_len, replacement=True
        ),
        r"own|model|output|sampling",
    )
)


def _last_batch_accuracy(model, batches):
    # As first written, this answer entered torch.no_grad() without leaving it, which switched autograd off for
    # every later check in the process (now check() restores the grad mode); the mistake it stands for is the
    # accuracy of the last batch only.
    was = model.training
    model.eval()
    with torch.no_grad():
        result = float((model(batches[-1][0]).argmax(-1) == batches[-1][1]).float().mean())
    model.train(was)
    return result


WRONG.append(("6.6", "accuracy of the last batch", _last_batch_accuracy, r"all examples|accuracy|examples"))
WRONG.append(
    (
        "6.6",
        "labels compared with the logits' max",
        lambda model, batches: (
            sum(int((model(x).max(-1).values.round() == y).sum()) for x, y in batches) / sum(len(y) for _, y in batches)
        ),
        r"argmax|eval|no_grad|examples|train",
    )
)
WRONG.append(
    (
        "7.1",
        "the mask inverted in torch.where",
        lambda h, m: h[torch.arange(h.shape[0]), _last_real_positions(~m)],
        r"wrong way round|padding",
    )
)
WRONG.append(
    (
        "7.1",
        "the first real position plus the count",
        lambda h, m: h[torch.arange(h.shape[0]), m.long().argmax(-1) + m.sum(-1)],
        r"off by one|one past",
    )
)


class _MaxPool72(_Head72):
    def forward(self, tokens, padding_mask):
        hidden = self.encoder(tokens, padding_mask).masked_fill(~padding_mask[..., None], -1e9)
        return self.head(hidden.max(1).values)


class _Softmaxed72(_Head72):
    def forward(self, tokens, padding_mask):
        return torch.softmax(super().forward(tokens, padding_mask), dim=-1)


WRONG.append(("7.2", "max pooling", _MaxPool72, r"mean|pool|average"))
WRONG.append(("7.2", "probabilities", _Softmaxed72, r"logits|probabilit"))
WRONG.append(
    (
        "7.3",
        "the layer with the best training accuracy",
        lambda tf, tl, vf, vl: max(
            range(tf.shape[1]), key=lambda i: probe_accuracy(train_linear_probe(tf[:, i], tl), tf[:, i], tl)
        ),
        r"validation|training",
    )
)
WRONG.append(
    (
        "7.3",
        "the first layer above 0.9 validation accuracy",
        lambda tf, tl, vf, vl: next(
            (i for i in range(tf.shape[1]) if probe_accuracy(train_linear_probe(tf[:, i], tl), vf[:, i], vl) > 0.6), 0
        ),
        r"validation|highest|best",
    )
)


# ------------------------------------------------------------------ 1.4 and 1.5 (added to chapter 1 later)

# Written before they were first run, after the two exercises were added to chapter 1 (issue 30).


def _additive(queries, keys, values, W_1, W_2, w, *, combine=None, squash=torch.tanh, dim=-1, out=None):
    q, k = queries @ W_1, keys @ W_2
    inner = combine(q, k) if combine else q[:, None, :] + k[None, :, :]
    scores = squash(inner) @ w
    A = torch.softmax(scores, dim=dim)
    return (out(A, values, keys) if out else A @ values), A


WRONG.append(("1.4", "sigmoid instead of tanh", lambda *a: _additive(*a, squash=torch.sigmoid), r"tanh|additive score"))
WRONG.append(("1.4", "relu instead of tanh", lambda *a: _additive(*a, squash=torch.relu), r"tanh|additive score"))
WRONG.append(
    (
        "1.4",
        "difference instead of sum",
        lambda *a: _additive(*a, combine=lambda q, k: q[:, None, :] - k[None, :, :]),
        r"add|additive score|sum",
    )
)
WRONG.append(("1.4", "softmax over dim 0", lambda *a: _additive(*a, dim=0), AXIS))
WRONG.append(
    (
        "1.4",
        "keys averaged instead of values",
        lambda q, k, v, W_1, W_2, w: _additive(
            q, k, v, W_1, W_2, w, out=lambda A, values, keys: A @ keys[:, : values.shape[1]]
        ),
        r"values|h = a v|output",
    )
)


def _influence(x, W_x, W_h, *, squash=torch.tanh, norm=lambda g: g.norm(dim=-1), relative=-1, start=None):
    x = x.detach().clone().requires_grad_(True)
    state = torch.zeros(W_h.shape[0], dtype=x.dtype) if start is None else start(x, W_x)
    for t in range(x.shape[0]):
        state = squash(x[t] @ W_x + state @ W_h)
    (gradient,) = torch.autograd.grad(state.sum(), x)
    values = norm(gradient)
    return values / values[relative]


WRONG.append(
    (
        "1.5",
        "relative to the largest",
        lambda x, W_x, W_h: (lambda v: v / v.max())(_influence(x, W_x, W_h)),
        r"last|relative",
    )
)
WRONG.append(
    (
        "1.5",
        "sigmoid recurrence",
        lambda x, W_x, W_h: _influence(x, W_x, W_h, squash=torch.sigmoid),
        r"tanh|chain|recurrence",
    )
)
WRONG.append(
    (
        "1.5",
        "absolute sum of the gradient",
        lambda x, W_x, W_h: _influence(x, W_x, W_h, norm=lambda g: g.abs().sum(dim=-1)),
        r"norm|length|gradient",
    )
)
WRONG.append(
    ("1.5", "state updated without W_h", lambda x, W_x, W_h: _influence(x, W_x, W_h * 0), r"chain|recurrence|w_h|tanh")
)
WRONG.append(
    (
        "1.5",
        "relative to the middle token",
        lambda x, W_x, W_h: _influence(x, W_x, W_h, relative=x.shape[0] // 2),
        r"last|relative",
    )
)


# ------------------------------------------------------------------ the tests


def _names(idea: str, line: str) -> bool:
    """Whether the hint in a check line names the idea; the generic 'differs from the reference' never does."""
    if GENERIC in line:
        return False
    hint = line.split("): ", 1)[1] if "): " in line else line
    return bool(re.search(idea, hint.lower()))


def _run(exercise_id, answer, capsys):
    passed = check(exercise_id, answer)
    return bool(passed), capsys.readouterr().out.strip()


@pytest.mark.parametrize(("exercise_id", "name", "answer", "idea"), WRONG, ids=[f"{w[0]}-{w[1]}" for w in WRONG])
def test_a_students_wrong_answer_fails_with_a_hint_that_names_its_idea(exercise_id, name, answer, idea, capsys):
    passed, line = _run(exercise_id, answer, capsys)
    assert not passed, f"{exercise_id} {name}: passed"
    assert "\n" not in line
    assert _names(idea, line), f"{exercise_id} {name}: {line}"


@pytest.mark.parametrize(("exercise_id", "name", "answer"), CORRECT, ids=[f"{c[0]}-{c[1]}" for c in CORRECT])
def test_a_correct_alternative_passes(exercise_id, name, answer, capsys):
    passed, line = _run(exercise_id, answer, capsys)
    assert passed, line


def counts(only: str = "") -> dict[str, tuple[int, int, int]]:
    """exercise -> (wrong answers, failed, hint names the idea), printing every line."""
    import contextlib
    import io

    table: dict[str, list[int]] = {}
    for exercise_id, name, answer, idea in WRONG:
        if not exercise_id.startswith(only):
            continue
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            passed = bool(check(exercise_id, answer))
        line = buffer.getvalue().strip()
        named = not passed and _names(idea, line)
        row = table.setdefault(exercise_id, [0, 0, 0])
        row[0] += 1
        row[1] += not passed
        row[2] += named
        print(f"{'ok ' if named else 'BAD'} {exercise_id} {name}: {line}")
    return {key: tuple(value) for key, value in table.items()}


if __name__ == "__main__":
    import sys

    result = counts(sys.argv[1] if len(sys.argv) > 1 else "")
    print(f"{'exercise':<9}{'wrong':>6}{'failed':>8}{'named':>7}")
    for key, (n, failed, named) in result.items():
        print(f"{key:<9}{n:>6}{failed:>8}{named:>7}")
    total = [sum(v[i] for v in result.values()) for i in range(3)]
    print(f"{'all':<9}{total[0]:>6}{total[1]:>8}{total[2]:>7}")
    second = WRONG[SECOND_BATCH_START:]
    print(f"(the second batch, written after the probes: {len(second)} answers, rows 'second' below)")
