"""What attention costs: exact operation and memory counts, wall-clock timings, parameter counts.

Chapter 1 counts the work of the T x T weight matrix and times it against T; chapter 4
counts the parameters of narrow and wide heads; the benchmarks reuse the timing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from .._validation import require_count
from ..attention import scaled_dot_product_attention

__all__ = ["attention_cost", "time_attention", "loglog_slope", "parameter_count"]


def attention_cost(T: int, d_k: int, d_v: int | None = None, bytes_per_number: int = 4) -> dict[str, int]:
    """Exact work and memory of single-head self-attention over T tokens.

    Returns multiply-adds for the scores ``Q K^T`` (``T * T * d_k``) and for the
    output ``A V`` (``T * T * d_v``), the number of entries of the weight matrix
    ``A`` (``T * T``) and the bytes it takes (``bytes_per_number`` each, 4 for float32).
    """
    require_count(T, "T")
    require_count(d_k, "d_k")
    d_v = d_k if d_v is None else d_v
    return {
        "score_multiply_adds": T * T * d_k,
        "output_multiply_adds": T * T * d_v,
        "weight_entries": T * T,
        "weight_bytes": T * T * bytes_per_number,
    }


def time_attention(
    lengths: Sequence[int],
    d_k: int = 64,
    repeats: int = 3,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> list[float]:
    """Wall-clock seconds of ``scaled_dot_product_attention`` for each sequence length.

    One sequence of T random tokens with d_k features is attended over itself
    (Q = K = V), after one untimed warm-up call. Each length is timed ``repeats``
    times and the fastest run is kept: on a shared machine, slower runs measure
    interruptions by other programs rather than attention. Timings still vary from
    run to run and machine to machine: never compare them with stored outputs.
    """
    device = torch.device(device)
    generator = torch.Generator().manual_seed(seed)
    seconds = []
    for T in lengths:
        x = torch.randn(T, d_k, generator=generator).to(device)  # (T, d_k)
        scaled_dot_product_attention(x, x, x)  # warm-up
        runs = []
        for _ in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            scaled_dot_product_attention(x, x, x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            runs.append(time.perf_counter() - start)
        seconds.append(min(runs))
    return seconds


def loglog_slope(lengths: Sequence[int], seconds: Sequence[float]) -> float:
    """Slope of the least-squares line through (log T, log time): 2 for a cost that grows like T^2."""
    return float(np.polyfit(np.log(np.asarray(lengths, dtype=float)), np.log(np.asarray(seconds, dtype=float)), 1)[0])


def parameter_count(module: nn.Module) -> int:
    """Number of trainable numbers in ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
