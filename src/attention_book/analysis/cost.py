"""What attention costs: exact operation and memory counts, wall-clock timings, parameter counts.

Chapter 1 counts the work of the T x T weight matrix and times it against T; chapter 4
counts the parameters of narrow and wide heads; the benchmarks reuse the timing.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from .._validation import require_count
from ..attention import scaled_dot_product_attention

__all__ = ["attention_cost", "layer_costs", "time_attention", "time_layers", "loglog_slope", "parameter_count"]


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


def layer_costs(T: int, d: int, kernel_size: int = 3) -> dict[str, dict[str, int]]:
    """Vaswani et al.'s Table 1 counted exactly: work, waiting steps and path of one layer over T tokens of width d.

    For each layer: ``multiply_adds`` (everything it computes, projections included),
    ``sequential_steps`` (operations that must wait for one another) and ``path_length``
    (layers or updates a signal from the first token passes through to reach the last):

    - self-attention: Q, K and V projections ``3 T d^2`` plus scores and mixing ``2 T^2 d``;
      one step; path 1;
    - simple RNN: ``x_t W_x + h_(t-1) W_h`` at every step, ``2 T d^2``; T steps; path T - 1;
    - LSTM: the same for each of its four gates, ``8 T d^2``; T steps; path T - 1;
    - convolution whose kernel spans ``kernel_size`` tokens centred on each position (an
      odd width, d channels in and out, as :func:`time_layers` times it):
      ``kernel_size T d^2``; one step; each layer reaches ``(kernel_size - 1) / 2`` tokens
      further on each side, so a stack of ``ceil(2 (T - 1) / (kernel_size - 1))`` layers
      before the first token reaches the last (Vaswani et al. call the kernel width k; the
      book keeps k for keys). A kernel that looks only back reaches ``kernel_size - 1``
      tokens per layer and needs about half as many.

    Biases and elementwise work (tanh, softmax, gates) are left out, as in the paper.
    """
    require_count(T, "T")
    require_count(d, "d")
    require_count(kernel_size, "kernel_size", 3)
    if kernel_size % 2 == 0:
        raise ValueError(f"a centred kernel spans an odd number of tokens, but kernel_size={kernel_size}")
    return {
        "self-attention": {"multiply_adds": 3 * T * d * d + 2 * T * T * d, "sequential_steps": 1, "path_length": 1},
        "simple RNN": {"multiply_adds": 2 * T * d * d, "sequential_steps": T, "path_length": T - 1},
        "LSTM": {"multiply_adds": 8 * T * d * d, "sequential_steps": T, "path_length": T - 1},
        f"convolution (kernel {kernel_size})": {
            "multiply_adds": kernel_size * T * d * d,
            "sequential_steps": 1,
            "path_length": math.ceil(2 * (T - 1) / (kernel_size - 1)),
        },
    }


def time_layers(
    lengths: Sequence[int], d: int = 64, kernel_size: int = 3, repeats: int = 3, seed: int = 0
) -> dict[str, list[float]]:
    """Wall-clock seconds of one forward pass of each layer of :func:`layer_costs`, on the CPU.

    One sequence of T random tokens of width d, no gradients: self-attention with its Q, K,
    V projections (one ``nn.Linear(d, 3 d)``, then :func:`scaled_dot_product_attention`),
    PyTorch's ``nn.RNN`` (tanh) and ``nn.LSTM``, and ``nn.Conv1d`` with ``kernel_size``,
    centred (``padding=kernel_size // 2``).
    Each is timed ``repeats`` times after one untimed warm-up call and the fastest run
    is kept. Timings differ from run to run and machine to machine.
    """
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    projection = nn.Linear(d, 3 * d, bias=False)
    recurrent = nn.RNN(d, d, bias=False, batch_first=True)
    lstm = nn.LSTM(d, d, bias=False, batch_first=True)
    convolution = nn.Conv1d(d, d, kernel_size, padding=kernel_size // 2, bias=False)

    def attend(x: torch.Tensor) -> torch.Tensor:
        q, k, v = projection(x).chunk(3, dim=-1)  # (1, T, d) each
        return scaled_dot_product_attention(q, k, v)[0]

    layers = {
        "self-attention": attend,
        "simple RNN": lambda x: recurrent(x)[0],
        "LSTM": lambda x: lstm(x)[0],
        f"convolution (kernel {kernel_size})": lambda x: convolution(x.transpose(1, 2)),  # (1, d, T)
    }
    seconds: dict[str, list[float]] = {name: [] for name in layers}
    with torch.no_grad():
        for T in lengths:
            x = torch.randn(1, T, d, generator=generator)  # (1, T, d)
            for name, layer in layers.items():
                layer(x)  # warm-up
                runs = []
                for _ in range(repeats):
                    start = time.perf_counter()
                    layer(x)
                    runs.append(time.perf_counter() - start)
                seconds[name].append(min(runs))
    return seconds


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
