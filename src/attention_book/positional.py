"""Chapter 5: positional encoding.

Self-attention treats its input as a set: permuting the tokens permutes the
outputs the same way. Adding a position signal to each token embedding breaks
that symmetry. The sinusoidal table of Vaswani et al. (2017) is::

    PE[p, 2i]     = sin(p / 10000^(2i / d_model))
    PE[p, 2i + 1] = cos(p / 10000^(2i / d_model))
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._validation import describe_shape, require_exact_rank, require_tensor

__all__ = [
    "sinusoidal_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEncoding",
    "rotate_half",
    "apply_rotary",
]


def _check_positive_int(value: object, name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, but {value!r} was given")


def sinusoidal_encoding(num_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal table, shape (num_positions, d_model): sines in even columns, cosines in odd."""
    _check_positive_int(num_positions, "num_positions")
    _check_positive_int(d_model, "d_model")
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    pair_index = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),) holds 2i
    frequencies = torch.exp(-math.log(base) * pair_index / d_model)  # 1 / base^(2i/d)
    angles = positions * frequencies[None, :]  # (P, ceil(d/2))
    table = torch.zeros(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


def _check_tokens(x: torch.Tensor, d_model: int, max_len: int) -> None:
    require_tensor(x, "x")
    require_exact_rank(x, "x", 3, "(batch, T, d_model)")
    if x.shape[-1] != d_model:
        raise ValueError(
            f"x has {x.shape[-1]} features (shape {describe_shape(x)}) but the encoding has d_model={d_model}"
        )
    if x.shape[1] > max_len:
        raise ValueError(
            f"the sequence has {x.shape[1]} tokens but this positional encoding knows only "
            f"max_len={max_len} positions"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to (batch, T, d_model) embeddings; no parameters."""

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tokens(x, self.d_model, self.max_len)
        return self.dropout(x + self.table[: x.shape[1]])  # (batch, T, d) + (T, d)


class LearnedPositionalEncoding(nn.Module):
    """Adds a learned vector per position (as in BERT and GPT); knows only ``max_len`` positions."""

    def __init__(self, max_len: int, d_model: int, dropout: float = 0.0):
        super().__init__()
        _check_positive_int(max_len, "max_len")
        self.d_model, self.max_len = d_model, max_len
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_tokens(x, self.d_model, self.max_len)
        positions = torch.arange(x.shape[1], device=x.device)  # (T,)
        return self.dropout(x + self.embedding(positions))  # (batch, T, d) + (T, d)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """Rotate each feature pair (x_2i, x_2i+1) by 90 degrees: -> (-x_2i+1, x_2i)."""
    pairs = x.unflatten(-1, (-1, 2))  # (..., d/2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)  # (..., d)


def apply_rotary(x: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding (Su et al., 2021) for (..., T, d) queries or keys, d even.

    Pair i of the token at position p is rotated by the angle ``p / base^(2i/d)``, so the
    dot product of a rotated query and key depends only on their offset.
    """
    require_tensor(x, "x")
    T, d = x.shape[-2], x.shape[-1]
    if d % 2:
        raise ValueError(f"rotary embeddings rotate feature pairs, so d must be even, but d={d}")
    frequencies = base ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)  # (d/2,)
    angles = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * frequencies  # (T, d/2)
    cos = angles.cos().repeat_interleave(2, dim=-1).to(x.dtype)  # (T, d)
    sin = angles.sin().repeat_interleave(2, dim=-1).to(x.dtype)  # (T, d)
    return x * cos + rotate_half(x) * sin
