"""Chapter 1: attention as a weighted average, in matrix form.

Notation (the whole book): tokens are rows. For queries ``Q`` of shape
``(..., T_q, d_k)``, keys ``K`` of shape ``(..., T_k, d_k)`` and values ``V`` of
shape ``(..., T_k, d_v)``::

    S = Q K^T / (sqrt(d_k) * temperature)      scores   (..., T_q, T_k)
    A = softmax(S) row by row                  weights  (..., T_q, T_k)
    H = A V                                    outputs  (..., T_q, d_v)

Masks are boolean and ``True`` means "may attend".
"""

from __future__ import annotations

import math

import torch

from ._validation import (
    broadcast_shape,
    check_mask,
    describe_shape,
    require_floating,
    require_positive,
    require_rank,
    require_tensor,
)

__all__ = ["softmax", "attention_scores", "scaled_dot_product_attention", "causal_mask", "padding_mask"]


def softmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along ``dim``: non-negative weights that sum to 1.

    Written out (rather than calling ``torch.softmax``) so the chapter can point at
    every step. Subtracting the maximum first changes nothing mathematically and
    keeps ``exp`` from overflowing. Entries equal to ``-inf`` (masked) get weight 0;
    a slice that is entirely ``-inf`` gets all zeros instead of NaN.
    """
    require_tensor(scores, "scores")
    require_floating(scores, "scores")
    largest = scores.amax(dim=dim, keepdim=True).nan_to_num(0.0, posinf=0.0, neginf=0.0)  # a masked slice: 0
    exponentials = torch.exp(scores - largest)
    # With a finite maximum the total is at least exp(0) = 1; it is 0 only when every entry is
    # -inf, and clamping it to 1 then gives zeros instead of 0 / 0.
    total = exponentials.sum(dim=dim, keepdim=True).clamp(min=1.0)
    return exponentials / total


def attention_scores(q: torch.Tensor, k: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Scaled dot-product scores ``Q K^T / (sqrt(d_k) * temperature)``: shape (..., T_q, T_k)."""
    d_k = q.shape[-1]
    # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    return q @ k.transpose(-2, -1) / (math.sqrt(d_k) * temperature)


def _check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        require_tensor(tensor, name)
        require_rank(tensor, name, minimum=2, layout="(..., tokens, features)")
        require_floating(tensor, name)
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"queries and keys must have the same number of features d_k to be compared, "
            f"but q has {q.shape[-1]} (shape {describe_shape(q)}) and k has {k.shape[-1]} "
            f"(shape {describe_shape(k)})"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"every key needs one value: k has {k.shape[-2]} tokens (shape {describe_shape(k)}) "
            f"but v has {v.shape[-2]} (shape {describe_shape(v)})"
        )
    if broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2]) is None:
        raise ValueError(
            f"the leading (batch) dimensions of q {describe_shape(q)}, k {describe_shape(k)} "
            f"and v {describe_shape(v)} must match or broadcast"
        )


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention with its weights: returns ``(out, weights)``.

    Args:
        q: queries, shape (..., T_q, d_k).
        k: keys, shape (..., T_k, d_k).
        v: values, shape (..., T_k, d_v).
        mask: optional boolean tensor broadcastable to (..., T_q, T_k); True = may attend.
        temperature: positive; scores are divided by ``sqrt(d_k) * temperature``.
            Below 1 sharpens the weights, above 1 flattens them.

    Returns:
        out: shape (..., T_q, d_v), each row a weighted average of the rows of ``v``.
        weights: shape (..., T_q, T_k), each row non-negative and summing to 1
            (a query that may attend to nothing gets a row of zeros).
    """
    _check_qkv(q, k, v)
    require_positive(temperature, "temperature")
    scores = attention_scores(q, k, temperature)  # (..., T_q, T_k)
    mask = check_mask(mask, scores.shape, "(..., T_q, T_k)")
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., T_q, T_k)
    out = weights @ v  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, weights


def causal_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Lower-triangular ``(T, T)`` boolean mask: position t may attend to positions <= t.

    While torch traces a model (``torch.onnx.export``, as the decoding stepper saves its model for
    the website) a length read from a shape is a 0-d tensor: it is taken as the int it holds (the
    traced graph then has this T fixed)."""
    if isinstance(T, torch.Tensor) and T.dim() == 0 and not T.is_floating_point() and torch.jit.is_tracing():
        T = int(T)
    if not isinstance(T, int) or isinstance(T, bool) or T < 1:
        raise ValueError(f"T must be a positive integer (a sequence length), but {T!r} was given")
    return torch.ones(T, T, dtype=torch.bool, device=device).tril()


def padding_mask(lengths: torch.Tensor | list[int], T: int) -> torch.Tensor:
    """``(batch, T)`` boolean mask, True for the first ``lengths[b]`` (real) tokens of row b.

    To use it as an attention mask over keys, add a query axis: ``mask[:, None, :]``
    has shape (batch, 1, T) and broadcasts over queries.
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1 or lengths.is_floating_point():
        raise ValueError(
            f"lengths must be a 1-D sequence of integers (one length per sequence), "
            f"but has shape {describe_shape(lengths)} and dtype {lengths.dtype}"
        )
    if not isinstance(T, int) or T < 1:
        raise ValueError(f"T must be a positive integer, but {T!r} was given")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > T):
        raise ValueError(
            f"every length must lie between 0 and T={T}, but lengths range from "
            f"{int(lengths.min())} to {int(lengths.max())}"
        )
    positions = torch.arange(T, device=lengths.device)  # (T,)
    return positions[None, :] < lengths[:, None]  # (batch, T)
