"""How the book prints numbers: one module for the chapters' printed outputs and the widgets' labels.

Printed outputs are compared by nbval on every run, so a number is always written with a
fixed number of decimals and never as ``-0.00``. Used by chapters 1-7 and every widget.

===================  ===========================================================
function             writes
===================  ===========================================================
``format_number``    ``0.25`` (fixed decimals)
``format_short``     ``5.5`` (trailing zeros dropped: numbers a reader types)
``format_exact``     ``0.125`` (six significant digits: reads back the same)
``format_weight``    ``0`` for an exact zero, else fixed decimals (sparse weights)
``format_vector``    ``[0.91, 0.67]``, any of the above per entry
``format_weights``   ``[   0, 0.70, 0.30]`` aligned, exact zeros as ``0``
``format_bytes``     ``16.0 GiB``
``format_shape``     ``(2, 5, 8)``
``format_results``   a table: one row per approach, one column per training-set size
===================  ===========================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

__all__ = [
    "to_numpy",
    "format_number",
    "format_short",
    "format_exact",
    "format_weight",
    "format_vector",
    "format_weights",
    "format_bytes",
    "format_shape",
    "format_results",
]


def to_numpy(values) -> np.ndarray:
    """A tensor (on any device, with or without grad), array or list as a NumPy array."""
    if isinstance(values, torch.Tensor):
        return values.detach().float().cpu().numpy()
    return np.asarray(values)


def format_number(value: float, digits: int = 2) -> str:
    """``0.25``: a number with ``digits`` decimals; a negative zero prints as ``0.00``, so output never depends on rounding noise."""
    text = f"{float(value):.{digits}f}"
    return f"{0.0:.{digits}f}" if float(text) == 0.0 else text


def format_short(value: float, digits: int = 2) -> str:
    """``10``, ``5.5``, ``0.25``: at most ``digits`` decimals, trailing zeros dropped (for numbers a reader types)."""
    text = f"{float(value):.{digits}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def format_exact(value: float) -> str:
    """``1.9``, ``-0.4``, ``0.125``: six significant digits, so that the text reads back as the same number."""
    text = f"{float(value):.6g}"
    return "0" if text == "-0" else text


def format_vector(values, digits: int = 2, number: Callable[[float, int], str] = format_number) -> str:
    """``[0.91, 0.67]``: a 1-D tensor, array or list printed with ``digits`` decimals.

    Each entry is written by ``number`` (default :func:`format_number`: negative zeros print
    as ``0.00``); ``number=format_short`` gives ``[10, 5.5, 0]``.
    """
    return "[" + ", ".join(number(value, digits) for value in to_numpy(values).reshape(-1)) + "]"


def format_bytes(count: int) -> str:
    """``16.0 GiB``: a number of bytes in the largest binary unit that keeps it at least 1."""
    value = float(count)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_weight(weight: float, digits: int = 2) -> str:
    """``0`` for a weight that is exactly zero, else the weight with ``digits`` decimals.

    Sparsemax and hardmax give exact zeros, softmax only tiny positive weights; writing them
    differently (``0`` versus ``0.00``) keeps that difference visible in tables and figures.
    """
    weight = float(weight)
    return "0" if weight == 0.0 else f"{weight:.{digits}f}"


def format_weights(weights, digits: int = 2) -> str:
    """``[   0, 0.70, 0.30,    0,    0]``: a weight vector with exact zeros printed as ``0``.

    A weight that is merely tiny prints as ``0.00``, so an exact zero (sparsemax, hardmax,
    top-k) and a small positive weight (softmax) look different. Entries are padded to one
    width so that rows printed one under another line up. Float64 weights are not rounded to
    float32 first (a weight of 1e-74 is not zero).
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().double().cpu().numpy()
    numbers = np.asarray(weights, dtype=float).reshape(-1)
    return "[" + ", ".join(format_weight(weight, digits).rjust(digits + 2) for weight in numbers) + "]"


def format_shape(shape: Sequence[int]) -> str:
    """``(2, 5, 8)``: a shape as the chapter prints it."""
    return "(" + ", ".join(str(int(size)) for size in shape) + ")"


def format_results(results: dict[str, dict[int, float]]) -> str:
    """A plain-text table: one row per approach, one column per number of labelled examples."""
    sizes = sorted({n for curve in results.values() for n in curve})
    width = max(len(name) for name in results) + 2
    header = "approach".ljust(width) + "".join(f"{n:>10,}" for n in sizes)
    lines = [header, "-" * len(header)]
    for name, curve in results.items():
        lines.append(name.ljust(width) + "".join(f"{curve[n]:>10.1%}" if n in curve else f"{'-':>10}" for n in sizes))
    return "\n".join(lines)
