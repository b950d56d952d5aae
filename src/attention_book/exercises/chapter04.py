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
)
from ._probes import attention_properties, determinism_probe

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
    "(transpose(1, 2)) before reshaping to (batch, T, heads * d_head); reshaping straight away mixes tokens",
    "interleaved": "heads merged in the wrong order: the features of each head must stay together "
    "(head 0's d_head features, then head 1's, ...), the inverse of split_heads, not interleaved",
    "summed": "you summed the heads: merging puts them side by side (head 0's d_head features, then head 1's, ...), "
    "so concatenate their features, it does not add them",
    "averaged": "you averaged the heads: merging puts them side by side (head 0's d_head features, then head 1's, "
    "...), so concatenate their features",
    "on the tokens": "you concatenated the heads along the tokens (dim=1): concatenate them along the features "
    "(dim=-1), so that each token gets num_heads * d_head features",
}


def _split_merge_pair(answer):
    """The student's (split_heads, merge_heads); a single function is tried as split_heads first."""
    if isinstance(answer, (tuple, list)) and len(answer) == 2:
        return answer
    if callable(answer):
        call(answer, torch.zeros(1, 2, 4), 2)  # a stub raises "not implemented yet" here
    raise ExerciseFailure(
        f'pass both functions as a pair, check("4.1", (split_heads, merge_heads)); got {type(answer).__name__}'
    )


def _check_split_merge(answer) -> None:
    split, merge = _split_merge_pair(answer)
    generator = random_generator()
    # (batch, T, heads, d_head): several heads first, so that every mistake shows; one head last.
    for batch, T, heads, d_head in [(2, 5, 3, 4), (3, 4, 2, 6), (1, 7, 4, 2), (2, 3, 1, 5)]:
        x = torch.randn(batch, T, heads * d_head, generator=generator)
        name_sizes(batch=batch, T=T, num_heads=heads, d_head=d_head, d_model=heads * d_head)
        got = call(split, x.clone(), heads)
        what = f"split_heads(x, num_heads={heads}) for x of shape {tuple(x.shape)}"
        if isinstance(got, (tuple, list)) and len(got) == heads and all(isinstance(t, torch.Tensor) for t in got):
            raise ExerciseFailure(
                f"{what} is a {type(got).__name__} of {heads} tensors of shape {tuple(got[0].shape)}: stack them on a new "
                f"head axis, torch.stack(chunks, dim=1), to get one tensor of shape {(batch, heads, T, d_head)}"
            )
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
            axes=("batch", "head", "position", "feature of a head"),
        )
        head_outputs = torch.randn(batch, heads, T, d_head, generator=generator)
        diagnose(
            call(merge, head_outputs.clone()),
            reference_merge(head_outputs),
            f"merge_heads(x) for x of shape {tuple(head_outputs.shape)}",
            known_mistakes={
                MERGE_HINTS["without_transpose"]: _merge_without_transpose(head_outputs),
                MERGE_HINTS["interleaved"]: _merge_interleaved(head_outputs),
                MERGE_HINTS["summed"]: head_outputs.sum(dim=1),
                MERGE_HINTS["averaged"]: head_outputs.mean(dim=1),
                MERGE_HINTS["on the tokens"]: torch.cat(list(head_outputs.unbind(1)), dim=1),
            },
            atol=0.0,
            rtol=0.0,
            axes=("batch", "position", "feature"),
        )


register(
    "4.1",
    "Split and merge heads",
    _check_split_merge,
    answer=("split_heads", "merge_heads"),
    solution=(_split_solution, _merge_solution),
    mistakes=[
        Mistake(
            "split: reshape without transpose", (_split_without_transpose, _merge_solution), "reshape without transpose"
        ),
        Mistake("split: interleaved features", (_split_interleaved, _merge_solution), "every h-th feature"),
        Mistake(
            "split: heads axis left behind the tokens",
            (_split_heads_last, _merge_solution),
            "must come before the tokens",
        ),
        Mistake(
            "merge: no transpose back", (_split_solution, _merge_without_transpose), "merged without transposing back"
        ),
        Mistake(
            "merge: heads in the wrong order", (_split_solution, _merge_interleaved), "heads merged in the wrong order"
        ),
        Mistake(
            "split: view without transpose",
            (_split_view_without_transpose, _merge_solution),
            "reshape without transpose",
        ),
        Mistake(
            "merge: view after transpose",
            (_split_solution, _merge_transpose_then_view),
            "With reshape your answer is right",
        ),
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
    answer="mha_parameter_count",
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
    chunk_dim=-1,
    value_bias_only=False,
    out_bias_first=False,
):
    """The solution with one thing done wrong (for the known mistakes and the slips probe)."""
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    if transpose_weights:
        weight = in_proj_weight.T  # (d_model, 3 d_model)
    else:  # W_Q, W_K, W_V each used as stored, (out, in), instead of transposed
        weight = torch.cat(in_proj_weight.chunk(3, dim=0), dim=1)  # (d_model, 3 d_model)
    if value_bias_only:
        in_proj_bias = torch.cat([torch.zeros(2 * d_model, dtype=x.dtype), in_proj_bias[2 * d_model :]])
    qkv = x @ weight + (in_proj_bias if biases else 0.0)  # (batch, T, 3 d_model)
    if layout == "stacked":
        parts = qkv.chunk(3, dim=chunk_dim)
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
    if out_bias_first:
        return (merged + out_proj_bias) @ out_proj_weight.T, weights
    return merged @ out_proj_weight.T + (out_proj_bias if biases else 0.0), weights


def _mistake(**wrong):
    def answer(x, in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, num_heads):
        return _mha_variant(
            x,
            in_proj_weight,
            in_proj_bias,
            out_proj_weight=out_proj_weight,
            out_proj_bias=out_proj_bias,
            num_heads=num_heads,
            **wrong,
        )

    return answer


MHA_MISTAKES = {
    "scale_d_model": (
        {"scale": "d_model"},
        "divide the scores by sqrt(d_head) = sqrt(d_model / num_heads), the size of ONE head's queries and keys, "
        "not by sqrt(d_model)",
    ),
    "no_scale": ({"scale": "none"}, "you forgot to divide the scores by sqrt(d_head)"),
    "softmax_dim": (
        {"softmax_dim": -2},
        "softmax over the wrong axis: each query's row (the last axis, the keys) must sum to 1",
    ),
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
    for batch, T, d_model, heads, x_scale in [
        (2, 5, 12, 3, 1.0),
        (1, 6, 8, 2, 1.0),
        (3, 4, 16, 4, 1.0),
        (2, 3, 6, 1, 1.0),
        (2, 4, 8, 2, 30.0),
    ]:
        layer = _random_torch_layer(d_model, heads, generator)
        name_sizes(batch=batch, T=T, d_model=d_model, num_heads=heads, d_head=d_model // heads)
        x = x_scale * torch.randn(batch, T, d_model, generator=generator)
        if x_scale > 1:
            x[:, 1] = x[:, 0]
        with torch.no_grad():
            expected_out, expected_weights = layer(x, x, x, need_weights=True, average_attn_weights=False)
        arguments = (
            layer.in_proj_weight.detach(),
            layer.in_proj_bias.detach(),
            layer.out_proj.weight.detach(),
            layer.out_proj.bias.detach(),
        )
        with torch.no_grad():
            out, weights = _split_result(
                call(answer, x.clone(), *(a.clone() for a in arguments), heads), "multi_head_self_attention"
            )
            wrong = {hint: _mistake(**change)(x, *arguments, heads) for change, hint in MHA_MISTAKES.values()}
        size = f"(batch={batch}, T={T}, d_model={d_model}, num_heads={heads}{', x times 30: large scores' if x_scale > 1 else ''})"
        if (
            isinstance(weights, torch.Tensor)
            and heads not in (1, T)
            and tuple(weights.shape) == (batch, T, heads, heads)
        ):
            raise ExerciseFailure(
                f"the tensor of attention weights {size} has shape {tuple(weights.shape)}, heads by heads for every token: "
                "the heads axis must come before the tokens. Reshape q, k, v to (batch, T, heads, d_head), then "
                "transpose(1, 2) to (batch, heads, T, d_head)"
            )
        diagnose(
            weights,
            expected_weights,
            f"the tensor of attention weights {size}",
            known_mistakes={hint: result[1] for hint, result in wrong.items()},
            # Scores in the hundreds (x times 30): float32's rounding of them moves a weight by up to ~2e-5, so a
            # right answer computed in float64 differs that much from the float32 reference.
            atol=1e-4 if x_scale > 1 else 1e-5,
            rtol=1e-4,
            axes=("batch", "head", "query", "key"),
        )
        diagnose(
            out,
            expected_out,
            f"the output tensor {size}",
            known_mistakes={hint: result[0] for hint, result in wrong.items()},
            # The same rounding through values of size ~30: a right float64 answer landed 2.3e-3 away (torch 2.6)
            atol=1e-2 if x_scale > 1 else 1e-4,
            rtol=1e-3 if x_scale > 1 else 1e-4,
        )


register(
    "4.3",
    "Multi-head attention, equal to nn.MultiheadAttention",
    _check_multi_head_attention,
    answer="multi_head_self_attention",
    solution=_mha_solution,
    mistakes=[
        Mistake(name, _mistake(**change), hint.split(":")[0].split(",")[0])
        for name, (change, hint) in MHA_MISTAKES.items()
    ]
    + [Mistake("split_with_view_without_transpose", _mistake(split="view_no_transpose"), "reshape without transpose")],
)


# ---------------------------------------------------------------------------------
# Properties (see _core's docstring): what an answer breaks, probed one idea at a time.

_B, _T, _H, _D = 2, 5, 3, 4  # batch, tokens, heads, features per head: all different


def _split_ids() -> torch.Tensor:
    """x[b, t, f] = 1000 b + 100 t + f: every number says where it came from."""
    b = torch.arange(_B)[:, None, None]
    t = torch.arange(_T)[None, :, None]
    f = torch.arange(_H * _D)[None, None, :]
    return (1000 * b + 100 * t + f).float()


def _split_probe(answer):
    split, _ = probe_pair(answer)
    x = _split_ids()
    got = probe_tensor(split(x.clone(), _H), (_B, _H, _T, _D))
    for key, variant in (("without_transpose", _split_without_transpose), ("interleaved", _split_interleaved)):
        if torch.equal(got, variant(x, _H).double()):
            return SPLIT_HINTS[key]
    for b in range(_B):
        for h in range(_H):
            for t in range(_T):
                for j in range(_D):
                    value = int(got[b, h, t, j])
                    wanted = 1000 * b + 100 * t + h * _D + j
                    if value != wanted:
                        source = f"token {value % 1000 // 100}'s feature {value % 100}"
                        return (
                            f"for x of shape ({_B}, {_T}, {_H * _D}) and {_H} heads, head {h} at token {t}, slot {j} holds {source}, "
                            f"but should hold token {t}'s feature {h * _D + j}: head h takes the block of features "
                            f"h*d_head .. (h+1)*d_head - 1 of every token (reshape to (batch, T, heads, d_head), then move the heads "
                            "axis in front of the tokens with transpose(1, 2))"
                        )
    return None


def _merge_probe(answer):
    _, merge = probe_pair(answer)
    b = torch.arange(_B)[:, None, None, None]
    h = torch.arange(_H)[None, :, None, None]
    t = torch.arange(_T)[None, None, :, None]
    j = torch.arange(_D)[None, None, None, :]
    heads = (1000 * b + 100 * h + 10 * t + j).float()  # (batch, heads, T, d_head)
    got = probe_tensor(merge(heads.clone()), (_B, _T, _H * _D))
    for key, variant in (("without_transpose", _merge_without_transpose), ("interleaved", _merge_interleaved)):
        if torch.equal(got, variant(heads).double()):
            return MERGE_HINTS[key]
    for bb in range(_B):
        for tt in range(_T):
            for f in range(_H * _D):
                value = int(got[bb, tt, f])
                wanted = 1000 * bb + 100 * (f // _D) + 10 * tt + f % _D
                if value != wanted:
                    return (
                        f"for head outputs of shape ({_B}, {_H}, {_T}, {_D}), feature {f} of token {tt} holds head {value % 1000 // 100}'s "
                        f"slot {value % 10} of token {value % 100 // 10}, but should hold head {f // _D}'s slot {f % _D} of token {tt}: "
                        "move the tokens back in front of the heads (transpose(1, 2)), then put the heads side by side with reshape"
                    )
    return None


add_properties(
    "4.1",
    [
        Property("the split (head h gets features h*d_head .. (h+1)*d_head - 1 of every token)", _split_probe),
        Property("the merge (head h's outputs go back to features h*d_head .. (h+1)*d_head - 1)", _merge_probe),
    ],
)


def _count(answer, *args) -> int:
    result = answer(*args)
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise ValueError("not a number: the checker says so")
    return int(result)


_COUNT_SLIPS = {
    "you forgot the output projection W_O, which maps the concatenated heads back to d_model": _count_without_output_projection,
    "you counted the projections of one head only: every head has its own W_Q, W_K and W_V (multiply by num_heads), "
    "and W_O reads all heads": _count_one_head,
    "you forgot the biases: with bias=True each projection also has one bias per output feature": _count_without_biases,
    "the output projection's bias has one number per OUTPUT feature, d_model, not num_heads * d_head": _count_output_bias_per_input,
    "W_O maps the concatenated heads (num_heads * d_head features) to d_model, so it is (num_heads * d_head) x d_model, "
    "not d_model x d_model": _count_square_output,
}


def _count_extra_probe(answer):
    """Whole terms added or taken away: the registered slips, biases counted whatever bias says, a fixed multiple of
    d_model too many."""
    sizes = [(8, 2, 3, True), (8, 2, 3, False), (5, 3, 7, True), (6, 4, 6, True)]
    counts = [_count(answer, *case) for case in sizes]
    if counts != [_parameter_count_solution(*case) for case in sizes]:
        for hint, slip in _COUNT_SLIPS.items():
            if counts == [slip(*case) for case in sizes]:
                return f"for d_model = 8 and 2 heads of d_head = 3 (bias=True) you count {counts[0]}: {hint}"
    without, with_ = _count(answer, 8, 2, 3, False), _count(answer, 8, 2, 3, True)
    right_without, right_with = 4 * 8 * 6, 4 * 8 * 6 + 3 * 6 + 8
    if without == right_with and with_ == right_with:
        return (
            f"for d_model = 8 and 2 heads of d_head = 3 you count {without} with bias=False too: you counted the biases "
            "even with bias=False; add them only when bias is True"
        )
    if without == right_with and with_ == right_without:
        return (
            f"for d_model = 8 and 2 heads of d_head = 3 you count {without} with bias=False and {with_} with bias=True: "
            "you add the biases when bias is False; the test is the wrong way round"
        )
    extra, extra_wide = without - right_without, _count(answer, 16, 2, 3, False) - 4 * 16 * 6
    if extra > 0 and extra % 8 == 0 and extra_wide == 2 * extra:
        return (
            f"for d_model = 8 and 2 heads of d_head = 3 without biases you count {extra} = {extra // 8} d_model parameters "
            "too many: the layer has only W_Q, W_K, W_V and W_O (and their biases), no layer norm or other weights"
        )
    return None


def _count_weights_probe(answer):
    smallest = _count(answer, 1, 1, 1, False)
    if smallest != 4:
        return (
            f"with d_model = num_heads = d_head = 1 and no biases there are 4 weights, one in each of W_Q, W_K, W_V and W_O; "
            f"you count {smallest}"
        )
    narrow, wide = _count(answer, 8, 2, 3, False), _count(answer, 8, 2, 6, False)
    if wide != 2 * narrow:
        return (
            f"without biases, doubling d_head (d_model = 8, 2 heads, d_head 3 -> 6) took your count from {narrow} to {wide}; "
            "every weight matrix is d_model x (num_heads * d_head) (W_O the other way round), so the count must double: "
            f"4 * d_model * num_heads * d_head = {4 * 8 * 2 * 3} -> {4 * 8 * 2 * 6}"
        )
    if narrow != 4 * 8 * 2 * 3:
        return (
            f"for d_model = 8, 2 heads of d_head = 3 and no biases you count {narrow}; W_Q, W_K, W_V are 8 x 6 and W_O is 6 x 8: "
            f"4 * 8 * 6 = {4 * 8 * 2 * 3}"
        )
    return None


def _count_biases_probe(answer):
    added = _count(answer, 8, 2, 3, True) - _count(answer, 8, 2, 3, False)
    expected = 3 * 2 * 3 + 8
    if added == expected:
        return None
    return (
        f"for d_model = 8 and 2 heads of d_head = 3, bias=True adds {added} parameters to your count; a bias has one number per "
        f"OUTPUT feature: num_heads * d_head = 6 for each of W_Q, W_K, W_V and d_model = 8 for W_O, so {expected}"
    )


add_properties(
    "4.2",
    [
        Property("the terms counted (the four projections and, with bias=True only, their biases)", _count_extra_probe),
        Property("the weights (W_Q, W_K, W_V, W_O: d_model x num_heads * d_head each)", _count_weights_probe),
        Property("the biases (one per output feature of each projection, only with bias=True)", _count_biases_probe),
    ],
)


def _mha_call(answer, x, *, in_w, in_b, out_w, out_b, heads):
    out, weights = probe_pair(answer(x, in_w, in_b, out_w, out_b, heads))
    batch, T, d_model = x.shape
    return probe_tensor(out, (batch, T, d_model)), probe_tensor(weights, (batch, heads, T, T))


def _mha_weights_of(answer, Q, K):
    """Head 0's weights for queries Q and keys K: tokens [a_t, b_t, 0, ...], head 0 reads q = a, k = b; the
    other four heads see zeros (5 heads: sqrt(num_heads) is neither sqrt(d_head) nor sqrt(T) here)."""
    d, heads = Q.shape[1], 5
    T = max(Q.shape[0], K.shape[0])
    x = torch.zeros(1, T, heads * d)
    x[0, : Q.shape[0], :d] = Q
    x[0, : K.shape[0], d : 2 * d] = K
    d_model = heads * d
    W_q = torch.zeros(d_model, d_model)
    W_k = torch.zeros(d_model, d_model)
    W_q[:d, :d] = torch.eye(d)  # head 0's query = a
    W_k[:d, d : 2 * d] = torch.eye(d)  # head 0's key = b
    in_w = torch.cat([W_q, W_k, torch.eye(d_model)], 0)
    _, weights = _mha_call(
        answer,
        x,
        in_w=in_w,
        in_b=torch.zeros(3 * d_model),
        out_w=torch.eye(d_model),
        out_b=torch.zeros(d_model),
        heads=heads,
    )
    return weights[0, 0, : Q.shape[0], : K.shape[0]]


def _uniform_setup(seed: int = 61):
    generator = torch.Generator().manual_seed(seed)
    d_model, heads, T = 12, 3, 4
    x = torch.randn(2, T, d_model, generator=generator)
    in_w = torch.cat([torch.zeros(2 * d_model, d_model), torch.eye(d_model)], 0)  # q = k = 0: uniform weights; v = x
    return x, in_w, torch.zeros(3 * d_model), heads, generator


def _merge_in_mha_probe(answer):
    x, in_w, in_b, heads, _ = _uniform_setup()
    d_model = x.shape[-1]
    out, _ = _mha_call(
        answer, x, in_w=in_w, in_b=in_b, out_w=torch.eye(d_model), out_b=torch.zeros(d_model), heads=heads
    )
    mean = x.double().mean(dim=1, keepdim=True).expand_as(out)
    if torch.allclose(out, mean, atol=1e-5):
        return None
    return (
        "with zero queries and keys (every weight 1/T) and identity value and output projections, every output token must "
        f"be the mean of the input tokens; yours differs by up to {float((out - mean).abs().max()):.3g}: the heads are not put back "
        "in place when merged (transpose(1, 2) back to (batch, T, heads, d_head), then reshape to (batch, T, d_model))"
    )


def _output_projection_probe(answer):
    x, in_w, in_b, heads, generator = _uniform_setup()
    d_model = x.shape[-1]
    out_w = torch.randn(d_model, d_model, generator=generator)
    out_b = torch.randn(d_model, generator=generator)
    out, _ = _mha_call(answer, x, in_w=in_w, in_b=in_b, out_w=out_w, out_b=out_b, heads=heads)
    mean = x.double().mean(dim=1, keepdim=True)
    expected = (mean @ out_w.double().T + out_b.double()).expand_as(out)
    if torch.allclose(out, expected, atol=1e-4):
        return None
    variants = {
        "you multiplied by out_proj_weight without transposing it: nn.Linear computes x W^T + b": mean @ out_w.double()
        + out_b.double(),
        "the output projection is missing: apply out_proj_weight and out_proj_bias to the merged heads": mean,
        "the output bias is missing: add out_proj_bias after the output projection": mean @ out_w.double().T,
    }
    for hint, wrong in variants.items():
        if torch.allclose(out, wrong.expand_as(out), atol=1e-4):
            return f"with uniform weights every output token is mean(x) W_O^T + b_O; {hint}"
    return f"with uniform weights every output token must be mean(x) W_O^T + b_O; yours differs by up to {float((out - expected).abs().max()):.3g}"


def _in_bias_probe(answer):
    generator = torch.Generator().manual_seed(62)
    d_model, heads = 12, 3
    x = torch.randn(2, 4, d_model, generator=generator)
    in_b = torch.randn(3 * d_model, generator=generator)
    out, _ = _mha_call(
        answer,
        x,
        in_w=torch.zeros(3 * d_model, d_model),
        in_b=in_b,
        out_w=torch.eye(d_model),
        out_b=torch.zeros(d_model),
        heads=heads,
    )
    parts = in_b.double().chunk(3)
    if torch.allclose(out, parts[2].expand_as(out), atol=1e-5):
        return None
    for name, part in (("query", parts[0]), ("key", parts[1])):
        if torch.allclose(out, part.expand_as(out), atol=1e-5):
            return (
                f"with in_proj_weight = 0 every value is the value bias in_proj_bias[2 d_model:], so every output token is it; yours is "
                f"the {name} bias: in_proj_bias is [query bias | key bias | value bias], each d_model long"
            )
    return (
        "with in_proj_weight = 0 every value is the value bias in_proj_bias[2 d_model:], so every output token must be it (with identity "
        "output projection); yours is not: add in_proj_bias to x @ in_proj_weight.T before splitting it into q, k, v"
    )


def _heads_probe(answer):
    """Identity projections, 3 heads of 2 features, and tokens whose only nonzero features are 2 and 3 (head 1's
    block): heads 0 and 2 see all-zero queries and keys, so each of their rows is uniform, and head 1's are not.
    Rows that do not sum to 1 are left to the softmax probes."""
    generator = torch.Generator().manual_seed(63)
    d_model, heads, d_head, T = 6, 3, 2, 4
    x = torch.zeros(1, T, d_model)
    x[0, :, 2:4] = 2.0 * torch.randn(T, 2, generator=generator)
    in_w = torch.cat([torch.eye(d_model)] * 3, 0)
    _, weights = _mha_call(
        answer,
        x,
        in_w=in_w,
        in_b=torch.zeros(3 * d_model),
        out_w=torch.eye(d_model),
        out_b=torch.zeros(d_model),
        heads=heads,
    )
    rows = weights[0].sum(dim=-1)
    if not torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
        raise Inconclusive("the softmax axis probe says more")
    uniform = [
        bool(torch.allclose(weights[0, h], torch.full((T, T), 1.0 / T, dtype=torch.float64), atol=1e-5))
        for h in range(heads)
    ]
    if uniform == [True, False, True]:
        return None
    wrong = [h for h, flat in enumerate(uniform) if flat != (h != 1)]
    return (
        f"with identity projections, {heads} heads of d_head = {d_head}, and tokens whose only nonzero features are 2 and 3 "
        f"(head 1's block), heads 0 and 2 must see zero queries and keys (every weight 1/{T}) and head 1 the rest; your head "
        f"{wrong[0]} {'has uniform weights' if uniform[wrong[0]] else 'does not'}: split each token's d_model features into "
        "num_heads consecutive blocks, reshape(batch, T, num_heads, d_head), then transpose(1, 2) to (batch, num_heads, T, d_head)"
    )


_MHA_SLIPS = {
    **{hint: change for change, hint in MHA_MISTAKES.values()},
    "you cut q, k and v along the tokens: in_proj_weight gives each token [q | k | v], so chunk(3, dim=-1), along "
    "the features": {"chunk_dim": 1},
    "only the value bias is added: in_proj_bias is [query bias | key bias | value bias], add all of it to "
    "x @ in_proj_weight.T before the split (the query bias changes the weights)": {"value_bias_only": True},
    "you added out_proj_bias before the output projection: out = merged @ out_proj_weight.T + out_proj_bias, the bias "
    "after the product": {"out_bias_first": True},
}


def _mha_slips_probe(answer):
    """A random layer with 3 heads, 3 tokens (so that q, k, v cut along the tokens still run) and nonzero biases:
    the answer must not compute any of the usual slips exactly."""
    generator = torch.Generator().manual_seed(64)
    d_model, heads = 12, 3
    x = torch.randn(2, 3, d_model, generator=generator)
    parts = (
        0.5 * torch.randn(3 * d_model, d_model, generator=generator),
        0.5 * torch.randn(3 * d_model, generator=generator),
        0.5 * torch.randn(d_model, d_model, generator=generator),
        0.5 * torch.randn(d_model, generator=generator),
    )
    out, weights = _mha_call(
        answer, x.clone(), in_w=parts[0], in_b=parts[1], out_w=parts[2], out_b=parts[3], heads=heads
    )
    right = _mha_solution(x.double(), *(p.double() for p in parts), heads)
    if torch.allclose(out, right[0], atol=1e-4) and torch.allclose(weights, right[1], atol=1e-5):
        return None
    for hint, change in _MHA_SLIPS.items():
        if change.get("split") == "view_no_transpose":
            continue
        wrong = _mistake(**change)(x.double(), *(p.double() for p in parts), heads)
        if torch.allclose(out, wrong[0], atol=1e-4) and torch.allclose(weights, wrong[1], atol=1e-5):
            return hint
    return None


def _mha_pair(answer):
    generator = torch.Generator().manual_seed(65)
    d_model = 8
    x = torch.randn(1, 4, d_model, generator=generator)
    return answer(
        x,
        torch.randn(3 * d_model, d_model, generator=generator),
        torch.randn(3 * d_model, generator=generator),
        torch.randn(d_model, d_model, generator=generator),
        torch.randn(d_model, generator=generator),
        2,
    )


add_properties(
    "4.3",
    [
        Property("no randomness (the same inputs give the same output and weights)", determinism_probe(_mha_pair)),
        Property("the steps of multi-head attention (each as nn.MultiheadAttention takes it)", _mha_slips_probe),
        Property("the heads (head h reads its own block of d_head features of q, k and v)", _heads_probe),
        *attention_properties(_mha_weights_of, sizes=lambda d: {"d_model": 5 * d, "num_heads": 5}, axis_sizes=(3, 3)),
        Property(
            "the merge (with uniform weights the heads pass on the mean of the values, each feature in its place)",
            _merge_in_mha_probe,
        ),
        Property("the in-projection biases ([query | key | value], added before the split)", _in_bias_probe),
        Property("the output projection (out = merged W_O^T + b_O)", _output_projection_probe),
    ],
)
