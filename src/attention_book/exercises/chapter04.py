"""Exercises of chapter 4, "Multi-head attention".

4.1 Split a (batch, T, d_model) tensor into heads and merge the heads back.
4.2 Count the parameters of a multi-head attention layer with heads of any size
    (narrow, d_model / h per head; wide, d_model per head).
4.3 Multi-head self-attention from PyTorch's own weights, equal to
    ``torch.nn.MultiheadAttention``.
4.4 Which head of a two-relation model finds the partner: decided by removing heads, on models
    built by hand whose head roles are shuffled (and where a head may look at the partner unused).

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.split_heads`, :func:`~attention_book.merge_heads`,
:class:`~attention_book.MultiHeadAttention`, ``torch.nn.MultiheadAttention``; for 4.4 the head
each hand-built model was given) and recognises typical wrong answers by what they compute.
"""

from __future__ import annotations

import copy
import math
import numbers

import torch
from torch import nn

from ..analysis.heads import head_focus, relation_accuracy
from ..data.tasks import IGNORE, TwoRelationTask
from ..multihead import MultiHeadAttention
from ..multihead import merge_heads as reference_merge
from ..multihead import split_heads as reference_split
from ..transformer import TokenClassifier
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

# ---------------------------------------------------------------------------------
# 4.4 Which head finds the partner?
#
# The checker's models are chapter 4's two_relation_model (one encoder layer, a read-out of the 16 digit pairs at every
# position) with learned positions, 2-4 heads and weights set by hand, so that each head plays a role chosen by the
# checker: "partner" (attends to the other token with the same letter and writes its digit where the read-out finds the
# partner's digit), "previous" (the same for the token before), "unused" (attends to the partner more sharply than the
# partner head, but nothing it writes reaches the read-out) or "idle" (uniform weights, writes nothing). A token's
# vector keeps each part in its own features; W_O is filled with small random numbers wherever they reach nothing
# the read-out reads (the layer norms shift and scale every feature alike, and every class's read-out row sums to 2),
# so that which rows or columns of W_O an answer zeroed can be seen from W_O itself.

_D_MODEL, _LETTERS, _DIGITS, _LENGTH = 96, 8, 4, 8
_LETTER, _DIGIT, _POSITION, _PARTNER_OUT, _PREVIOUS_OUT = 0, 8, 12, 20, 24
# Scaled scores: the partner head's on the partner, the unused head's, the previous-token head's on the token before.
_PARTNER_SCORE, _UNUSED_SCORE, _PREVIOUS_SCORE, _SELF_PENALTY = 5.0, 10.0, 8.0, 20.0
_TASK_SIZE = 100


def _set_head(attention, head: int, role: str) -> None:
    """Head ``head``'s blocks of W_Q, W_K, W_V (rows) and W_O (columns) for its role (under torch.no_grad)."""
    d_k = attention.d_head
    start, root = head * d_k, math.sqrt(d_k)
    q, k, v, out = (
        attention.q_proj.weight,
        attention.k_proj.weight,
        attention.v_proj.weight,
        attention.out_proj.weight,
    )
    letters, positions = slice(_LETTER, _LETTER + _LETTERS), slice(_POSITION, _POSITION + _LENGTH)
    if role in ("partner", "unused"):  # score a^2 for the same letter, minus a penalty for the token itself
        a = math.sqrt((_PARTNER_SCORE if role == "partner" else _UNUSED_SCORE) * root)
        q[start : start + _LETTERS, letters] = a * torch.eye(_LETTERS)
        k[start : start + _LETTERS, letters] = a * torch.eye(_LETTERS)
        q[start + _LETTERS : start + _LETTERS + _LENGTH, positions] = -_SELF_PENALTY * root * torch.eye(_LENGTH)
        k[start + _LETTERS : start + _LETTERS + _LENGTH, positions] = torch.eye(_LENGTH)
    elif role == "previous":  # position t's query matches the key of position t - 1
        q[start : start + _LENGTH - 1, _POSITION + 1 : _POSITION + _LENGTH] = (
            _PREVIOUS_SCORE * root * torch.eye(_LENGTH - 1)
        )
        k[start : start + _LENGTH, positions] = torch.eye(_LENGTH)
    if role != "idle":  # the value is the token's digit, one-hot, in the head's first 4 features
        v[start : start + _DIGITS, _DIGIT : _DIGIT + _DIGITS] = torch.eye(_DIGITS)
    out[_PARTNER_OUT : _PREVIOUS_OUT + _DIGITS, start : start + _DIGITS] = 0.0  # the read-out's features
    target = {"partner": _PARTNER_OUT, "previous": _PREVIOUS_OUT}.get(role)
    if target is not None:
        out[target : target + _DIGITS, start : start + _DIGITS] = 4.0 * torch.eye(_DIGITS)


def _hand_built_model(roles: tuple[str, ...], generator: torch.Generator, *, lean: tuple[int, int]) -> TokenClassifier:
    """A two_relation_model whose head h plays ``roles[h]``; ``lean`` = (partner digit, previous digit) that its
    read-out answers when the head of that relation is gone (a tiny bias)."""
    model = TokenClassifier(
        _LETTERS * _DIGITS,
        _DIGITS * _DIGITS,
        d_model=_D_MODEL,
        num_heads=len(roles),
        d_ff=8,
        num_layers=1,
        max_len=_LENGTH,
        positional="learned",
    )
    layer = model.encoder.layers[0]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        layer.norm1.weight.fill_(1.0)
        layer.norm2.weight.fill_(1.0)
        for token in range(_LETTERS * _DIGITS):  # token = letter * 4 + digit
            model.encoder.embedding.tokens.weight[token, _LETTER + token // _DIGITS] = 1.0
            model.encoder.embedding.tokens.weight[token, _DIGIT + token % _DIGITS] = 1.0
        model.encoder.embedding.positions.embedding.weight[:, _POSITION : _POSITION + _LENGTH] = torch.eye(_LENGTH)
        layer.self_attn.out_proj.weight.copy_(0.1 * torch.randn(_D_MODEL, _D_MODEL, generator=generator))
        for head, role in enumerate(roles):
            _set_head(layer.self_attn, head, role)
        for pair in range(_DIGITS * _DIGITS):  # class 4 * partner digit + previous digit
            model.head.weight[pair, _PARTNER_OUT + pair // _DIGITS] = 1.0
            model.head.weight[pair, _PREVIOUS_OUT + pair % _DIGITS] = 1.0
            model.head.bias[pair] = 0.01 * ((pair // _DIGITS == lean[0]) + (pair % _DIGITS == lean[1]))
    return model.eval()


def _task_and_lean(generator: torch.Generator) -> tuple[TwoRelationTask, tuple[int, int]]:
    """A small task, and the digits the read-out falls back on: the commonest partner's digit and the rarest previous
    digit, at least a point apart, so that removing the previous-token head costs 'both digits' more than removing the
    partner head (an answer that picks by 'both digits' then names the wrong head every time)."""
    while True:
        task = TwoRelationTask(_TASK_SIZE, seed=int(torch.randint(0, 2**31 - 1, (), generator=generator)))
        targets = task.targets[task.targets != IGNORE]
        partner = torch.bincount(targets // _DIGITS, minlength=_DIGITS).float() / len(targets)
        previous = torch.bincount(targets % _DIGITS, minlength=_DIGITS).float() / len(targets)
        if float(partner.max() - previous.min()) >= 0.01:
            return task, (int(partner.argmax()), int(previous.argmin()))


def _role_cases(generator: torch.Generator) -> list[tuple[str, ...]]:
    """Two heads both ways round; three heads with the unused one before the previous-token head; four with the
    partner head at 2 or 3."""

    def shuffled(roles):
        return tuple(roles[i] for i in torch.randperm(len(roles), generator=generator).tolist())

    two = [("partner", "previous"), ("previous", "partner")]
    if bool(torch.rand((), generator=generator) < 0.5):
        two.reverse()
    three = shuffled(("partner", "previous", "unused"))
    while three.index("unused") > three.index("previous"):
        three = shuffled(three)
    four = shuffled(("partner", "previous", "unused", "idle"))
    while four.index("partner") < 2:  # past the chapter's two heads
        four = shuffled(four)
    return [*two, three, four]


def _copy_without_head(model: nn.Module, head: int) -> nn.Module:
    """A copy of ``model`` whose attention layer ignores head ``head``: its columns of W_O set to 0."""
    ablated = copy.deepcopy(model)
    attention = ablated.encoder.layers[0].self_attn
    with torch.no_grad():
        attention.out_proj.weight[:, head * attention.d_head : (head + 1) * attention.d_head] = 0.0
    return ablated


def _partner_head_solution(model: nn.Module, task: TwoRelationTask) -> int:
    """The head of layer 0 without which the model loses the partner's digit."""
    heads = model.encoder.layers[0].self_attn.num_heads
    left = [relation_accuracy(_copy_without_head(model, head), task)["partner's digit"] for head in range(heads)]
    return min(range(heads), key=lambda head: left[head])  # the head whose removal costs the partner most


# What the checker says: every hint names what to change.
ROLE_WORDS = {
    "partner": "finds the partner",
    "previous": "follows the previous token",
    "unused": "looks at the partner but is not used",
    "idle": "idle",
}
HEAD_HINTS = {
    "in place": "your function changed the model it was given",
    "rows": "nn.Linear stores W_O as (out_features, in_features)",
    "block": "which is not one head's block",
    "at once": "removed at once",
    "missing": "you removed only",
    "from one": "you counted the heads from 1",
    "constant": "which head finds the partner depends on the model",
    "looks": "where a head looks is not what the model uses",
    "highest": "the head whose removal leaves the partner's digit highest",
    "previous": "the head that follows the previous token",
}


def _described(roles: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"head {head}: {ROLE_WORDS[role]}" for head, role in enumerate(roles)) + ")"


def _watch(model: nn.Module) -> list[torch.Tensor]:
    """The W_O of every run of the model's attention from now on, in the model and in its copies (copy.deepcopy
    keeps the hook)."""
    seen: list[torch.Tensor] = []

    def record(module, args):
        seen.append(module.out_proj.weight.detach().to(torch.float32).clone())

    model.encoder.layers[0].self_attn.register_forward_pre_hook(record)
    return seen


def _head_number(result, heads: int) -> int:
    """The answer as an int (a whole number, or a one-element integer tensor); anything else is explained."""
    where = f"for a model with {heads} heads your function returned"
    if isinstance(result, torch.Tensor) and result.numel() == 1 and not result.is_floating_point():
        result = result.item()
    if isinstance(result, numbers.Integral) and not isinstance(result, bool):
        return int(result)
    if isinstance(result, torch.Tensor) and result.numel() == heads:
        raise ExerciseFailure(
            f"{where} a tensor of {heads} values, one per head: return the number of the head the model needs for the "
            "partner (e.g. int(values.argmin()) of the partner's digit accuracies left)"
        )
    if isinstance(result, (list, tuple, dict)):
        raise ExerciseFailure(
            f"{where} a {type(result).__name__} of {len(result)}: return one number, the head the model needs for the "
            "partner (take the min or argmin of what you collected)"
        )
    if isinstance(result, (numbers.Real, torch.Tensor)) and not isinstance(result, bool):
        value = float(result)
        if 0.0 <= value <= 1.0 and not value.is_integer():
            raise ExerciseFailure(
                f"{where} {value:.4g}, an accuracy: return the number of the head whose removal gives it "
                "(an int from 0 to num_heads - 1), not the accuracy itself"
            )
        raise ExerciseFailure(f"{where} {value!r}: return the head's number as an int (0 to num_heads - 1)")
    raise ExerciseFailure(f"{where} {result!r}: return the head's number as an int (0 to num_heads - 1)")


def _left_alone(model: nn.Module, before: dict[str, torch.Tensor]) -> None:
    for name, tensor in model.state_dict().items():
        if not torch.equal(tensor, before[name]):
            changed = int((tensor != before[name]).sum())
            raise ExerciseFailure(
                f"{HEAD_HINTS['in place']}: {changed} entries of {name} differ after the call. Remove each head in a copy "
                "(ablated = copy.deepcopy(model)), so that the model stays whole for the next head and for whoever uses "
                "it after you"
            )


def _listed(numbers: list[int]) -> str:
    return (
        " and ".join(str(n) for n in numbers)
        if len(numbers) < 3
        else ", ".join(map(str, numbers[:-1])) + f" and {numbers[-1]}"
    )


def _span(indices: list[int]) -> str:
    if indices == list(range(indices[0], indices[-1] + 1)):
        return f"{indices[0]} to {indices[-1]}"
    return ", ".join(str(index) for index in indices[:6]) + (", ..." if len(indices) > 6 else "")


def _removals(seen: list[torch.Tensor], original: torch.Tensor, heads: int) -> tuple[set[int], str | None]:
    """The heads an answer removed (from the W_O of each run it made), or what went wrong in a removal."""
    d_k, removed = _D_MODEL // heads, set()
    was_zero_column, was_zero_row = (original == 0).all(dim=0), (original == 0).all(dim=1)
    for weight in seen:
        columns = ((weight == 0).all(dim=0) & ~was_zero_column).nonzero().flatten().tolist()
        rows = ((weight == 0).all(dim=1) & ~was_zero_row).nonzero().flatten().tolist()
        if rows and not columns:
            return removed, (
                f"{HEAD_HINTS['rows']}, so head r's output enters through its columns r*d_k to (r+1)*d_k - 1 "
                f"(weight[:, r*d_k:(r+1)*d_k] = 0); you zeroed rows {_span(rows)}, which are output features"
            )
        blocks = {column // d_k for column in columns}
        whole = columns == [c for block in sorted(blocks) for c in range(block * d_k, (block + 1) * d_k)]
        if columns and whole and len(blocks) > 1:
            return removed, (
                f"one of your runs had heads {_listed(sorted(blocks))} {HEAD_HINTS['at once']} (columns "
                f"{_span(columns)} of out_proj.weight zeroed): removing heads one after another in the same copy keeps "
                "the earlier ones removed; copy the model afresh for each head"
            )
        if columns and not whole:
            return removed, (
                f"one of your removals zeroed columns {_span(columns)} of out_proj.weight, {HEAD_HINTS['block']}: "
                f"with d_k = d_model // num_heads = {_D_MODEL} // {heads} = {d_k} here, head r owns columns r*d_k to "
                f"(r+1)*d_k - 1 (head 0: 0 to {d_k - 1}, head 1: {d_k} to {2 * d_k - 1})"
            )
        removed |= blocks
    return removed, None


def _wrong_head_hint(cases: list[tuple], task: TwoRelationTask) -> str:
    """Why the answer named another head than the partner head in at least one of the models."""
    expected = [roles.index("partner") for roles, *_ in cases]
    got = [answer for _, _, answer, _, _ in cases]
    for (roles, _, answer, seen, original), partner in zip(cases, expected):
        removed, _ = _removals(seen, original, len(roles))
        if removed and len(removed) < len(roles) and partner not in removed and answer != partner:
            return (
                f"{HEAD_HINTS['missing']} heads {_listed(sorted(removed))} of a model with {len(roles)} heads "
                f"{_described(roles)}: try every head, range(attention.num_heads), not a fixed number of them"
            )
    if all(answer == partner + 1 for answer, partner in zip(got, expected)):
        return f"{HEAD_HINTS['from one']}: the book numbers them from 0 (head 0 owns the first d_k columns of W_O)"
    for roles, _, answer, _, _ in cases:
        if not 0 <= answer < len(roles):
            return f"you returned head {answer} for a model with {len(roles)} heads: heads are numbered 0 to {len(roles) - 1}"
    if len(set(got)) == 1:
        first, other = cases[0][0], next(roles for roles, *_ in cases if roles.index("partner") != expected[0])
        return (
            f"{HEAD_HINTS['constant']}: you returned head {got[0]} for every model, but the partner head is head "
            f"{expected[0]} in a model whose heads are {_described(first)} and head {other.index('partner')} in "
            f"{_described(other)} (in the chapter it changes with the seed): decide from the model you are given, by "
            "removing each head in turn (in a copy) and measuring the partner's digit"
        )
    return _role_hint(cases, task)


def _role_hint(cases: list[tuple], task: TwoRelationTask) -> str:
    """Why the head returned plays another role: the accuracies the checker measures without each head."""
    left = [
        [relation_accuracy(_copy_without_head(model, head), task) for head in range(len(roles))]
        for roles, model, *_ in cases
    ]
    partner_left = [[accuracies["partner's digit"] for accuracies in per_model] for per_model in left]
    focus = [head_focus(model, task)[:, 1] for _, model, *_ in cases]
    index = next(i for i, (roles, _, answer, _, _) in enumerate(cases) if roles[answer] != "partner")
    roles, _, answer, _, _ = cases[index]
    partner = roles.index("partner")
    kept, lost = partner_left[index][answer], partner_left[index][partner]
    got = [answer for _, _, answer, _, _ in cases]
    if all(g == int(weights.argmax()) for g, weights in zip(got, focus)):
        return (
            f"{HEAD_HINTS['looks']}: for a model whose heads are {_described(roles)} you returned head {answer}, which "
            f"puts {float(focus[index][answer]):.2%} of its weight on the partner (head {partner}: "
            f"{float(focus[index][partner]):.2%}), yet without head {answer} the partner's digit is still right "
            f"{kept:.0%} of the time and without head {partner} only {lost:.0%}. Remove each head in a copy and "
            "measure the partner's digit"
        )
    if all(g == max(range(len(values)), key=values.__getitem__) for g, values in zip(got, partner_left)):
        return (
            f"you returned {HEAD_HINTS['highest']} (for a model whose heads are {_described(roles)}: head {answer}, "
            f"{kept:.0%} right without it); the partner head is the one whose removal costs it most (head {partner}: "
            f"{lost:.0%} without it): take the smallest accuracy (min or argmin), not the largest"
        )
    if all(case[0][g] == "previous" for case, g in zip(cases, got)):
        previous = left[index][answer]["previous token's digit"]
        return (
            f"in every model you returned {HEAD_HINTS['previous']}: without it (head {answer} of "
            f"{_described(roles)}) the previous token's digit falls to {previous:.0%} while the partner's digit stays at "
            f"{kept:.0%}. Return the head without which the partner's digit falls "
            "(relation_accuracy(...)[\"partner's digit\"]); 'both digits' falls without either head, so it cannot "
            "tell them apart"
        )
    return (
        f"for a model whose heads are {_described(roles)} you returned head {answer}, but without it the partner's "
        f"digit is still right {kept:.0%} of the time; without head {partner} it falls to {lost:.0%}: that is the head "
        "the model needs for the partner"
    )


def _check_partner_head(answer) -> None:
    generator = random_generator()
    task, lean = _task_and_lean(generator)
    cases = []
    for roles in _role_cases(generator):
        model = _hand_built_model(roles, generator, lean=lean)
        original = model.encoder.layers[0].self_attn.out_proj.weight.detach().clone()
        before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        seen = _watch(model)
        result = call(answer, model, task)
        _left_alone(model, before)
        cases.append((roles, model, _head_number(result, len(roles)), seen, original))
    for roles, _, _, seen, original in cases:  # a removal done wrong fails even where it gave the right head
        hint = _removals(seen, original, len(roles))[1]
        if hint:
            raise ExerciseFailure(hint)
    if any(roles.index("partner") != got for roles, _, got, _, _ in cases):
        raise ExerciseFailure(_wrong_head_hint(cases, task))


def _accuracies_without(model, task, remove) -> list[dict[str, float]]:
    """relation_accuracy without each head, each removed by ``remove(model, head)``."""
    heads = model.encoder.layers[0].self_attn.num_heads
    return [relation_accuracy(remove(model, head), task) for head in range(heads)]


def _always_head_one(model, task):
    return 1  # the partner head of one seed


def _by_where_heads_look(model, task):
    return int(head_focus(model, task)[:, 1].argmax())  # the most weight on the partner


def _removed_in_place(model, task):
    attention = model.encoder.layers[0].self_attn
    d_k = attention.d_head
    left = []
    for head in range(attention.num_heads):
        with torch.no_grad():
            attention.out_proj.weight[:, head * d_k : (head + 1) * d_k] = 0.0  # no copy
        left.append(relation_accuracy(model, task)["partner's digit"])
    return left.index(min(left))


def _rows_of_w_o(model, head):
    ablated = copy.deepcopy(model)
    d_k = ablated.encoder.layers[0].self_attn.d_head
    with torch.no_grad():
        ablated.encoder.layers[0].self_attn.out_proj.weight[head * d_k : (head + 1) * d_k] = 0.0
    return ablated


def _removes_rows(model, task):
    left = [accuracies["partner's digit"] for accuracies in _accuracies_without(model, task, _rows_of_w_o)]
    return left.index(min(left))


def _keeps_the_highest(model, task):
    left = [accuracies["partner's digit"] for accuracies in _accuracies_without(model, task, _copy_without_head)]
    return left.index(max(left))


def _measures_the_previous_digit(model, task):
    left = [accuracies["previous token's digit"] for accuracies in _accuracies_without(model, task, _copy_without_head)]
    return left.index(min(left))


def _slice_from_head(model, head):
    ablated = copy.deepcopy(model)
    d_k = ablated.encoder.layers[0].self_attn.d_head
    with torch.no_grad():
        ablated.encoder.layers[0].self_attn.out_proj.weight[:, head : head + d_k] = 0.0  # not head * d_k
    return ablated


def _starts_at_head(model, task):
    left = [accuracies["partner's digit"] for accuracies in _accuracies_without(model, task, _slice_from_head)]
    return left.index(min(left))


def _one_copy_for_all(model, task):
    ablated = copy.deepcopy(model)
    attention = ablated.encoder.layers[0].self_attn
    d_k, left = attention.d_head, []
    for head in range(attention.num_heads):
        with torch.no_grad():
            attention.out_proj.weight[:, head * d_k : (head + 1) * d_k] = 0.0
        left.append(relation_accuracy(ablated, task)["partner's digit"])
    return left.index(min(left))


register(
    "4.4",
    "Which head finds the partner?",
    _check_partner_head,
    answer="partner_head",
    solution=_partner_head_solution,
    mistakes=[
        Mistake("always head 1", _always_head_one, HEAD_HINTS["constant"]),
        Mistake("by where the heads look", _by_where_heads_look, HEAD_HINTS["looks"]),
        Mistake("heads removed in the model itself", _removed_in_place, HEAD_HINTS["in place"]),
        Mistake("rows of W_O zeroed", _removes_rows, HEAD_HINTS["rows"]),
        Mistake("the highest accuracy left", _keeps_the_highest, HEAD_HINTS["highest"]),
        Mistake("the previous-token head returned", _measures_the_previous_digit, HEAD_HINTS["previous"]),
        Mistake("columns from head, not head * d_k", _starts_at_head, HEAD_HINTS["block"]),
        Mistake("one copy for every head", _one_copy_for_all, HEAD_HINTS["at once"]),
    ],
)
