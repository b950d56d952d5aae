"""Chapter 5: positional encoding.

Self-attention treats its input as a set: permuting the tokens permutes the
outputs the same way. Adding a position signal to each token embedding breaks
that symmetry. The sinusoidal table of Vaswani et al. (2017) is::

    PE[p, 2i]     = sin(p / 10000^(2i / d_model))
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model))

Pair i turns at the frequency ``omega_i = 10000^(-2i / d_model)``, so moving k positions
rotates every pair by the angle ``omega_i * k``: ``PE[p + k] = PE[p] @ offset_rotation(d_model, k)``
for every p. Rotary embeddings (``apply_rotary``) apply the same rotations to queries and
keys instead of adding a table to the tokens.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validation import describe_shape, require_count, require_exact_rank, require_rank, require_tensor

__all__ = [
    "sinusoidal_encoding",
    "sinusoidal_frequencies",
    "offset_rotation",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "rotate_half",
    "apply_rotary",
]


def _check_base(base: object) -> float:
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 1:
        raise ValueError(f"base must be a number greater than 1 (the paper uses 10000), but {base!r} was given")
    return float(base)


def sinusoidal_frequencies(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The angular frequency of each sin/cos pair, shape (ceil(d_model / 2),): ``base^(-2i / d_model)``.

    Pair i repeats every ``2 pi / omega_i`` positions: from 2 pi (pair 0) to almost
    ``2 pi * base`` (the last pair). Float64, on the CPU.
    """
    require_count(d_model, "d_model")
    base = _check_base(base)
    pair_index = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),) holds 2i
    return torch.exp(-math.log(base) * pair_index / d_model)  # 1 / base^(2i/d)


def sinusoidal_encoding(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal table, shape (num_positions, d_model): sines in even columns, cosines in odd.

    Row p is the encoding of position p (0-based); float32, on the CPU. An odd d_model
    ends with a lone sine column.
    """
    require_count(num_positions, "num_positions")
    frequencies = sinusoidal_frequencies(d_model, base)  # (ceil(d/2),)
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    angles = positions * frequencies[None, :]  # (P, ceil(d/2))
    table = torch.zeros(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


def offset_rotation(d_model: int, offset: int, base: float = 10000.0) -> torch.Tensor:
    """The (d_model, d_model) matrix M with ``PE[p + offset] = PE[p] @ M`` for every position p.

    Block diagonal: pair i (columns 2i and 2i + 1, holding sin and cos of ``omega_i p``) gets
    the 2 x 2 block ``[[cos a, -sin a], [sin a, cos a]]`` with ``a = omega_i * offset``, which
    rotates the row vector (sin, cos) forward by the angle a. It does not depend on p, and a
    negative offset moves backwards. d_model must be even (pairs). Float64, on the CPU.
    """
    require_count(d_model, "d_model")
    if d_model % 2:
        raise ValueError(f"the offset rotation acts on sin/cos pairs, so d_model must be even, but d_model={d_model}")
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise ValueError(f"offset must be an integer number of positions, but {offset!r} was given")
    angles = sinusoidal_frequencies(d_model, base) * offset  # (d/2,)
    cos, sin = torch.cos(angles), torch.sin(angles)
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    pairs = torch.arange(0, d_model, 2)
    matrix[pairs, pairs] = cos  # sin_new = sin * cos(a) + cos * sin(a)
    matrix[pairs + 1, pairs] = sin
    matrix[pairs, pairs + 1] = -sin  # cos_new = cos * cos(a) - sin * sin(a)
    matrix[pairs + 1, pairs + 1] = cos
    return matrix


def _check_tokens(x: torch.Tensor, d_model: int, max_len: int, offset: int = 0) -> None:
    require_tensor(x, "x")
    require_exact_rank(x, "x", rank=3, layout="(batch, T, d_model)")
    if x.shape[-1] != d_model:
        raise ValueError(
            f"x has {x.shape[-1]} features (shape {describe_shape(x)}) but the encoding has d_model={d_model}"
        )
    require_count(offset, "offset", 0)
    if offset + x.shape[1] > max_len:
        where = f"tokens at positions {offset} to {offset + x.shape[1] - 1}" if offset else f"{x.shape[1]} tokens"
        raise ValueError(
            f"the sequence has {where} but this positional encoding knows only max_len={max_len} positions"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to (batch, T, d_model) embeddings; no parameters.

    Takes ``(max_len, d_model)`` in the order :class:`LearnedPositionalEncoding` does.
    """

    def __init__(self, max_len: int, d_model: int, *, dropout: float = 0.0, base: float = 10000.0):
        super().__init__()
        require_count(max_len, "max_len")
        require_count(d_model, "d_model")
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model, base), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (batch, T, d_model) at positions offset, ..., offset + T - 1 (a decoder's next token has offset t)."""
        _check_tokens(x, d_model=self.d_model, max_len=self.max_len, offset=offset)
        return self.dropout(x + self.table[offset : offset + x.shape[1]])  # (batch, T, d) + (T, d)


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned vector per position (as in BERT and GPT); knows only ``max_len`` positions.

    The rows start as normal noise with standard deviation 0.02 (BERT's and GPT-2's starting
    scale), about ``0.02 * sqrt(d_model)`` long. Training moves only the rows of positions that
    occur in its sequences; the others stay near zero, so a token at such a position gets almost
    no position signal (chapter 5 measures what that does to longer sequences).
    """

    def __init__(self, max_len: int, d_model: int, *, dropout: float = 0.0):
        super().__init__()
        require_count(max_len, "max_len")
        require_count(d_model, "d_model")
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x (batch, T, d_model) at positions offset, ..., offset + T - 1 (a decoder's next token has offset t)."""
        _check_tokens(x, d_model=self.d_model, max_len=self.max_len, offset=offset)
        positions = torch.arange(offset, offset + x.shape[1], device=x.device)  # (T,)
        return self.dropout(x + self.embedding(positions))  # (batch, T, d) + (T, d)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotate each feature pair (x_2i, x_2i+1) by 90 degrees: -> (-x_2i+1, x_2i)."""
    require_tensor(x, "x")
    require_rank(x, "x", minimum=1, layout="(..., d)")
    if x.shape[-1] % 2:
        raise ValueError(
            f"rotate_half turns feature pairs, so the last dimension must be even, but x has shape {describe_shape(x)}"
        )
    pairs = x.unflatten(-1, (-1, 2))  # (..., d/2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (..., d)


def apply_rotary(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al., 2021) for (..., T, d) queries or keys, d even.

    Pair i of the token at position p is rotated by the angle ``p / base^(2i/d)``, so the
    dot product of a rotated query and key depends only on their offset. Token t of the
    second-to-last axis is taken to sit at position t.
    """
    require_tensor(x, "x")
    require_rank(x, "x", minimum=2, layout="(..., T, d)")
    if not x.is_floating_point():
        raise ValueError(f"x must hold floating-point numbers, but has dtype {x.dtype}")
    T, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"rotary embeddings rotate feature pairs, so d must be even, but d={d}")
    base = _check_base(base)
    frequencies = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)  # (d/2,)
    angles = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * frequencies  # (T, d/2)
    cos = angles.cos().repeat_interleave(2, dim=-1).to(x.dtype)  # (T, d)
    sin = angles.sin().repeat_interleave(2, dim=-1).to(x.dtype)  # (T, d)
    return x * cos + rotate_half(x) * sin
