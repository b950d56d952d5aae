"""Exercises of chapter 4, "Multi-head attention".

4.1 Split a (batch, T, d_model) tensor into heads and merge the heads back.
4.2 Count the parameters of a multi-head attention layer with heads of any size
    (narrow, d_model / h per head; wide, d_model per head).
4.3 Multi-head self-attention from PyTorch's own weights, equal to
    ``torch.nn.MultiheadAttention``.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.split_heads`, :func:`~attention_book.merge_heads`,
:class:`~attention_book.MultiHeadAttention`, ``torch.nn.MultiheadAttention``) and recognises
typical wrong answers by what they compute.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from ..multihead import MultiHeadAttention
from ..multihead import merge_heads as reference_merge
from ..multihead import split_heads as reference_split
from ._core import ExerciseFailure, Mistake, call, diagnose, random_generator, register

# ---------------------------------------------------------------------------------
# 4.1 Split and merge heads


def _split_solution(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, T, d_model) -> (batch, heads, T, d_model / heads)."""
    batch, T, d_model = x.shape
    x = x.reshape(batch, T, num_heads, d_model // num_heads)  # (batch, T, heads, d_head)
    return x.transpose(1, 2)  # (batch, heads, T, d_head)


def _merge_solution(x: torch.Tensor) -> torch.Tensor:
    """(batch, heads, T, d_head) -> (batch, T, heads * d_head)."""
    batch, heads, T, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, T, heads * d_head)  # (batch, T, heads, d_head) -> (batch, T, d_model)


def _split_without_transpose(x, num_heads):
    batch, T, d_model = x.shape
    return x.reshape(batch, num_heads, T, d_model // num_heads)


def _split_interleaved(x, num_heads):
    batch, T, d_model = x.shape
    return x.reshape(batch, T, d_model // num_heads, num_heads).permute(0, 3, 1, 2)  # head i: features i, i + h, ...


def _split_heads_last(x, num_heads):
    batch, T, d_model = x.shape
    return x.reshape(batch, T, num_heads, d_model // num_heads)  # forgot to move the heads axis


def _merge_without_transpose(x):
    batch, heads, T, d_head = x.shape
    return x.reshape(batch, T, heads * d_head)


def _split_view_without_transpose(x, num_heads):
    batch, T, d_model = x.shape
    return x.view(batch, num_heads, T, d_model // num_heads)


def _merge_transpose_then_view(x):
    batch, heads, T, d_head = x.shape
    return x.transpose(1, 2).view(batch, T, heads * d_head)  # raises: the transposed tensor is not contiguous


def _merge_interleaved(x):
    batch, heads, T, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(batch, T, heads * d_head)  # features of the heads interleaved


SPLIT_HINTS = {
    "without_transpose": "reshape without transpose: reshaping straight to (batch, heads, T, d_head) cuts the "
    "numbers in memory order, so one head gets all the features of a few tokens instead of a slice of the "
    "features of every token. "
    "View as (batch, T, heads, d_head) first, then swap the T and heads axes",
    "interleaved": "the heads got every h-th feature (interleaved); head i must take one contiguous block, "
    "features i*d_head to (i+1)*d_head - 1, as in view(batch, T, heads, d_head)",
    "heads_last": "the heads axis must come before the tokens: after view(batch, T, heads, d_head), "
    "transpose(1, 2) to get (batch, heads, T, d_head)",
}
MERGE_HINTS = {
    "without_transpose": "merged without transposing back: the heads axis must move behind the tokens "
    "(transpose(1, 2)) before reshaping to (batch, T, heads * d_head); reshape without transpose mixes tokens",
    "interleaved": "heads merged in the wrong order: the features of each head must stay together "
    "(head 0's d_head features, then head 1's, ...), the inverse of split_heads, not interleaved",
}


def _split_merge_pair(answer):
    """The student's (split_heads, merge_heads); a single function is tried as split_heads first."""
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        return answer
    if callable(answer):
        call(answer, torch.zeros(1, 2, 4), 2)  # a stub raises "not implemented yet" here
    raise ExerciseFailure(
        f"pass both functions as a pair, check(\"4.1\", (split_heads, merge_heads)); got {type(answer).__name__}"
    )


def _check_split_merge(answer) -> None:
    split, merge = _split_merge_pair(answer)
    generator = random_generator()
    # (batch, T, heads, d_head): several heads first, so that every mistake shows; one head last.
    for batch, T, heads, d_head in [(2, 5, 3, 4), (3, 4, 2, 6), (1, 7, 4, 2), (2, 3, 1, 5)]:
        x = torch.randn(batch, T, heads * d_head, generator=generator)
        got = call(split, x.clone(), heads)
        what = f"split_heads(x, num_heads={heads}) for x of shape {tuple(x.shape)}"
        if isinstance(got, torch.Tensor) and tuple(got.shape) == (batch, T, heads, d_head) and T != heads:
            raise ExerciseFailure(f"{what} has shape {tuple(got.shape)}: {SPLIT_HINTS['heads_last']}")
        diagnose(
            got,
            reference_split(x, heads),
            what,
            known_mistakes={
                SPLIT_HINTS["without_transpose"]: _split_without_transpose(x, heads),
                SPLIT_HINTS["interleaved"]: _split_interleaved(x, heads),
            },
            atol=0.0,
            rtol=0.0,
        )
        head_outputs = torch.randn(batch, heads, T, d_head, generator=generator)
        diagnose(
            call(merge, head_outputs.clone()),
            reference_merge(head_outputs),
            f"merge_heads(x) for x of shape {tuple(head_outputs.shape)}",
            known_mistakes={
                MERGE_HINTS["without_transpose"]: _merge_without_transpose(head_outputs),
                MERGE_HINTS["interleaved"]: _merge_interleaved(head_outputs),
            },
            atol=0.0,
            rtol=0.0,
        )


register(
    "4.1",
    "Split and merge heads",
    _check_split_merge,
    solution=(_split_solution, _merge_solution),
    mistakes=[
        Mistake("split: reshape without transpose", (_split_without_transpose, _merge_solution), "reshape without transpose"),
        Mistake("split: interleaved features", (_split_interleaved, _merge_solution), "every h-th feature"),
        Mistake("split: heads axis left behind the tokens", (_split_heads_last, _merge_solution), "must come before the tokens"),
        Mistake("merge: no transpose back", (_split_solution, _merge_without_transpose), "merged without transposing back"),
        Mistake("merge: heads in the wrong order", (_split_solution, _merge_interleaved), "heads merged in the wrong order"),
        Mistake("split: view without transpose", (_split_view_without_transpose, _merge_solution), "reshape without transpose"),
        Mistake("merge: view after transpose", (_split_solution, _merge_transpose_then_view), "With reshape your answer is right"),
    ],
)

# ---------------------------------------------------------------------------------
# 4.2 Count the parameters of narrow and wide heads


def _parameter_count_solution(d_model: int, num_heads: int, d_head: int, bias: bool) -> int:
    """Parameters of W_Q, W_K, W_V (d_model -> heads * d_head) and W_O (heads * d_head -> d_model)."""
    inner = num_heads * d_head  # all heads side by side
    weights = 3 * d_model * inner + inner * d_model
    biases = (3 * inner + d_model) if bias else 0  # one bias per output feature
    return weights + biases


def _count_without_output_projection(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 3 * d_model * inner + (3 * inner if bias else 0)


def _count_one_head(d_model, num_heads, d_head, bias):
    return 3 * d_model * d_head + d_head * d_model + ((3 * d_head + d_model) if bias else 0)


def _count_without_biases(d_model, num_heads, d_head, bias):
    return 4 * d_model * num_heads * d_head


def _count_output_bias_per_input(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 4 * d_model * inner + (4 * inner if bias else 0)


def _count_square_output(d_model, num_heads, d_head, bias):
    inner = num_heads * d_head
    return 3 * d_model * inner + d_model * d_model + ((3 * inner + d_model) if bias else 0)


def _parameter_cases(generator: torch.Generator) -> list[tuple[int, int, int, bool]]:
    """Narrow, wide and other head sizes, two heads or more, biases on and off."""
    cases = []
    for index in range(9):
        heads = int(torch.randint(2, 9, (), generator=generator))
        size = int(torch.randint(2, 17, (), generator=generator))
        kind = index % 3
        if kind == 0:  # narrow: d_model = heads * d_head
            cases.append((heads * size, heads, size, index % 2 == 0))
        elif kind == 1:  # wide: d_head = d_model
            cases.append((size, heads, size, index % 2 == 0))
        else:  # any head size
            d_model = int(torch.randint(2, 65, (), generator=generator))
            cases.append((d_model, heads, size + (size == d_model), index % 2 == 0))
    return cases


def _check_parameter_count(answer) -> None:
    cases = _parameter_cases(random_generator())
    got = []
    for d_model, heads, d_head, bias in cases:
        result = call(answer, d_model, heads, d_head, bias)
        if isinstance(result, torch.Tensor) and result.numel() == 1:
            result = result.item()
        if isinstance(result, bool) or not isinstance(result, numbers.Real) or float(result) != int(result):
            raise ExerciseFailure(
                f"for d_model={d_model}, num_heads={heads}, d_head={d_head}, bias={bias} your function returned "
                f"{result!r}; it should return a whole number (an int)"
            )
        got.append(float(result))
    expected = [
        float(sum(p.numel() for p in MultiHeadAttention(d_model, heads, bias=bias, d_head=d_head).parameters()))
        for d_model, heads, d_head, bias in cases
    ]

    def wrong(mistake):
        return torch.tensor([float(mistake(*case)) for case in cases], dtype=torch.float64)

    d_model, heads, d_head, bias = cases[1]
    diagnose(
        torch.tensor(got, dtype=torch.float64),
        torch.tensor(expected, dtype=torch.float64),
        f"the list of parameter counts for 9 random layers (one of them: d_model={d_model}, num_heads={heads}, "
        f"d_head={d_head}, bias={bias})",
        known_mistakes={
            "you forgot the output projection W_O, which maps the concatenated heads back to d_model": wrong(
                _count_without_output_projection
            ),
            "you counted the projections of one head only: every head has its own W_Q, W_K and W_V "
            "(multiply by num_heads), and W_O reads all heads": wrong(_count_one_head),
            "you forgot the biases: with bias=True each projection also has one bias per output feature": wrong(
                _count_without_biases
            ),
            "the output projection's bias has one number per OUTPUT feature, d_model, not num_heads * d_head": wrong(
                _count_output_bias_per_input
            ),
            "W_O maps the concatenated heads (num_heads * d_head features) to d_model, so it is "
            "(num_heads * d_head) x d_model, not d_model x d_model": wrong(_count_square_output),
        },
        atol=0.0,
        rtol=0.0,
    )


register(
    "4.2",
    "Parameters of narrow and wide heads",
    _check_parameter_count,
    solution=_parameter_count_solution,
    mistakes=[
        Mistake("forgot the output projection", _count_without_output_projection, "forgot the output projection"),
        Mistake("one head only", _count_one_head, "projections of one head only"),
        Mistake("forgot the biases", _count_without_biases, "you forgot the biases"),
        Mistake("output bias per input feature", _count_output_bias_per_input, "one number per OUTPUT feature"),
        Mistake("square output projection", _count_square_output, "not d_model x d_model"),
    ],
)

# ---------------------------------------------------------------------------------
# 4.3 Multi-head self-attention from PyTorch's weights


def _mha_solution(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):
    """Self-attention of x (batch, T, d_model) with nn.MultiheadAttention's weights -> (out, weights)."""
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    qkv = x @ in_proj_weight.T + in_proj_bias  # (batch, T, 3 d_model): [Q | K | V]
    q, k, v = qkv.chunk(3, dim=-1)  # each (batch, T, d_model)
    q, k, v = (t.reshape(batch, T, num_heads, d_head).transpose(1, 2) for t in (q, k, v))  # (batch, heads, T, d_head)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (batch, heads, T, T)
    weights = torch.softmax(scores, dim=-1)  # (batch, heads, T, T)
    heads = weights @ v  # (batch, heads, T, d_head)
    merged = heads.transpose(1, 2).reshape(batch, T, d_model)  # (batch, T, d_model)
    return merged @ out_proj_weight.T + out_proj_bias, weights


def _mha_variant(
    x,
    in_proj_weight,
    in_proj_bias,
    out_proj_weight,
    out_proj_bias,
    num_heads,
    *,
    scale="d_head",
    softmax_dim=-1,
    transpose_weights=True,
    split="correct",
    layout="stacked",
    biases=True,
    output_projection=True,
):
    """The solution with one thing done wrong (for the known mistakes)."""
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    if transpose_weights:
        weight = in_proj_weight.T  # (d_model, 3 d_model)
    else:  # W_Q, W_K, W_V each used as stored, (out, in), instead of transposed
        weight = torch.cat(in_proj_weight.chunk(3, dim=0), dim=1)  # (d_model, 3 d_model)
    qkv = x @ weight + (in_proj_bias if biases else 0.0)  # (batch, T, 3 d_model)
    if layout == "stacked":
        parts = qkv.chunk(3, dim=-1)
        if split == "correct":
            q, k, v = (t.reshape(batch, T, num_heads, d_head).transpose(1, 2) for t in parts)
        elif split == "view_no_transpose":  # raises on the chunks, which are not contiguous
            q, k, v = (t.view(batch, num_heads, T, d_head) for t in parts)
        else:
            q, k, v = (t.reshape(batch, num_heads, T, d_head) for t in parts)
    else:  # per head [q_h | k_h | v_h], the layout of some tutorials
        q, k, v = qkv.reshape(batch, T, num_heads, 3 * d_head).transpose(1, 2).chunk(3, dim=-1)
    divisor = {"d_head": math.sqrt(d_head), "d_model": math.sqrt(d_model), "none": 1.0}[scale]
    weights = torch.softmax(q @ k.transpose(-2, -1) / divisor, dim=softmax_dim)
    merged = (weights @ v).transpose(1, 2).reshape(batch, T, d_model)
    if not output_projection:
        return merged, weights
    return merged @ out_proj_weight.T + (out_proj_bias if biases else 0.0), weights


def _mistake(**wrong):
    def answer(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):
        return _mha_variant(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads, **wrong)

    return answer


MHA_MISTAKES = {
    "scale_d_model": (
        {"scale": "d_model"},
        "divide the scores by sqrt(d_head) = sqrt(d_model / num_heads), the size of ONE head's queries and keys, "
        "not by sqrt(d_model)",
    ),
    "no_scale": ({"scale": "none"}, "you forgot to divide the scores by sqrt(d_head)"),
    "softmax_dim": ({"softmax_dim": -2}, "softmax over the wrong axis: each query's row (the last axis, the keys) must sum to 1"),
    "no_weight_transpose": (
        {"transpose_weights": False},
        "nn.Linear computes x @ W.T + b: the weight is stored as (out_features, in_features), so transpose it",
    ),
    "split_without_transpose": (
        {"split": "no_transpose"},
        "reshape without transpose: view Q, K and V as (batch, T, heads, d_head), then transpose(1, 2)",
    ),
    "interleaved_layout": (
        {"layout": "per_head"},
        "in_proj_weight stacks all of W_Q, then all of W_K, then all of W_V: cut the projection into three blocks "
        "of d_model features (chunk(3, dim=-1)) BEFORE splitting into heads",
    ),
    "no_biases": ({"biases": False}, "you forgot the biases: add in_proj_bias and out_proj_bias"),
    "no_output_projection": (
        {"output_projection": False},
        "you forgot the output projection: multiply the merged heads by out_proj_weight.T and add out_proj_bias",
    ),
}


def _random_torch_layer(d_model: int, heads: int, generator: torch.Generator) -> nn.MultiheadAttention:
    """An nn.MultiheadAttention with random weights AND biases (PyTorch starts its biases at zero)."""
    layer = nn.MultiheadAttention(d_model, heads, batch_first=True).eval()
    with torch.no_grad():
        for parameter in (layer.in_proj_weight, layer.in_proj_bias, layer.out_proj.weight, layer.out_proj.bias):
            parameter.copy_(0.5 * torch.randn(parameter.shape, generator=generator))
    return layer


def _split_result(result, what: str):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"{what} should return a pair (out, weights), but returned {type(result).__name__}")
    return result


def _check_multi_head_attention(answer) -> None:
    generator = random_generator()
    # The last case multiplies x by 30: scores in the hundreds or more, where exp() overflows unless
    # each row's maximum is subtracted first; its first two tokens are equal (tied scores).
    for batch, T, d_model, heads, x_scale in [(2, 5, 12, 3, 1.0), (1, 6, 8, 2, 1.0), (3, 4, 16, 4, 1.0), (2, 3, 6, 1, 1.0), (2, 4, 8, 2, 30.0)]:
        layer = _random_torch_layer(d_model, heads, generator)
        x = x_scale * torch.randn(batch, T, d_model, generator=generator)
        if x_scale > 1:
            x[:, 1] = x[:, 0]
        with torch.no_grad():
            expected_out, expected_weights = layer(x, x, x, need_weights=True, average_attn_weights=False)
        arguments = (layer.in_proj_weight.detach(), layer.in_proj_bias.detach(), layer.out_proj.weight.detach(), layer.out_proj.bias.detach())
        with torch.no_grad():
            out, weights = _split_result(
                call(answer, x.clone(), *(a.clone() for a in arguments), heads), "multi_head_self_attention"
            )
            wrong = {hint: _mistake(**change)(x, *arguments, heads) for change, hint in MHA_MISTAKES.values()}
        size = f"(batch={batch}, T={T}, d_model={d_model}, num_heads={heads}{', x times 30: large scores' if x_scale > 1 else ''})"
        diagnose(
            weights,
            expected_weights,
            f"the tensor of attention weights {size}",
            known_mistakes={hint: result[1] for hint, result in wrong.items()},
            atol=1e-5,
            rtol=1e-4,
        )
        diagnose(
            out,
            expected_out,
            f"the output tensor {size}",
            known_mistakes={hint: result[0] for hint, result in wrong.items()},
            atol=1e-4,
            rtol=1e-4,
        )


register(
    "4.3",
    "Multi-head attention, equal to nn.MultiheadAttention",
    _check_multi_head_attention,
    solution=_mha_solution,
    mistakes=[
        Mistake(name, _mistake(**change), hint.split(":")[0].split(",")[0])
        for name, (change, hint) in MHA_MISTAKES.items()
    ]
    + [Mistake("split_with_view_without_transpose", _mistake(split="view_no_transpose"), "reshape without transpose")],
)
