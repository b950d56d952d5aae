"""Heatmaps drawn the same way in every chapter: one function, one colour map.

One sequential, colour-blind-safe colour map (viridis, :data:`ATTENTION_CMAP`) for every
heatmap the book draws; for attention weights rows are queries, columns are keys, with
token labels on both axes. Chapters 1-7 and every widget use it; chapter-specific figures
live in :mod:`attention_book.figures`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from .formatting import format_weight, to_numpy

__all__ = ["ATTENTION_CMAP", "PAGE_INCHES", "heatmap", "plot_attention", "plot_attention_grid", "seed_band"]

ATTENTION_CMAP = "viridis"
# The widest a figure is drawn, in inches (at 100 dpi, pixels / 100). The notebook's inline backend
# crops a figure to its drawing and adds 0.1 in on each side, so a figure this wide becomes a PNG of
# about 591 px; with no text under 9 pt its smallest text is then 7.2 px or more on a 390 px phone,
# where the page column is 342 px (tools/site/figure_audit.py measures every figure the chapters draw).
PAGE_INCHES = 5.8


def seed_band(
    ax,
    x,
    runs,
    *,
    label: str,
    interval: str = "range",
    colour=None,
    marker=None,
    linestyle="-",
    estimator: str = "mean",
    **line,
):
    """One model's line over ``x``, with a band over its seeds, drawn by seaborn.

    ``runs`` is (seeds, len(x)). The line is the mean over the seeds (``estimator="median"``:
    their median, taken before any log scale is set on ``ax``); the band is their whole
    range, smallest to largest (``interval="range"``, seaborn's ``errorbar=("pi", 100)``), or a
    95 % bootstrap interval of the mean (``interval="ci95"``, ``errorbar=("ci", 95)``, seeded,
    so the figure is the same on every machine). Returns the line drawn.
    """
    import numpy as np
    import pandas as pd
    import seaborn as sns

    values = np.asarray(to_numpy(runs) if isinstance(runs, torch.Tensor) else runs, dtype=float)
    if values.ndim == 1:
        values = values[None, :]
    points = np.asarray(x, dtype=float)
    if values.ndim != 2 or values.shape[1] != len(points):
        raise ValueError(
            f"seed_band needs runs of shape (seeds, {len(points)}) for {len(points)} x values, but got {values.shape}"
        )
    if estimator not in ("mean", "median"):
        raise ValueError(f"estimator must be 'mean' or 'median', but got {estimator!r}")
    errorbars = {"range": ("pi", 100), "ci95": ("ci", 95)}
    if interval not in errorbars:
        raise ValueError(f"interval must be one of {sorted(errorbars)}, but got {interval!r}")
    seeds, count = values.shape
    frame = pd.DataFrame(
        {"x": np.tile(points, seeds), "value": values.ravel(), "seed": np.repeat(np.arange(seeds), count)}
    )
    before = len(ax.lines)
    sns.lineplot(
        data=frame,
        x="x",
        y="value",
        ax=ax,
        estimator=estimator,
        errorbar=errorbars[interval] if seeds > 1 else None,
        seed=0,
        label=label,
        color=colour,
        marker=marker,
        linestyle=linestyle,
        err_kws={"alpha": 0.2, "linewidth": 0},
        **line,
    )
    ax.set_xlabel("")
    ax.set_ylabel("")
    return ax.lines[before]


def heatmap(
    matrix,
    ax=None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    colorbar_label: str | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    aspect: str = "auto",
    figsize: tuple[float, float] = (4.6, 3.8),
):
    """The book's one heatmap: a 2-D matrix in :data:`ATTENTION_CMAP`, labelled axes, a colour bar if labelled.

    Returns the axes (a new figure of ``figsize`` when ``ax`` is None). Attention weights,
    encoding tables, similarity and score matrices and head scores are all drawn with it.
    """
    values = to_numpy(matrix).astype(float)
    if values.ndim != 2:
        raise ValueError(f"a heatmap needs a 2-D matrix, but got shape {values.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=figsize, layout="constrained")
    image = ax.imshow(values, cmap=ATTENTION_CMAP, vmin=vmin, vmax=vmax, aspect=aspect, interpolation="nearest")
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if colorbar_label is not None:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=colorbar_label)
    return ax


def _check_labels(labels, size: int, name: str):
    """Labels as strings, one per row (queries) or column (keys) of the weights."""
    if labels is None:
        return [str(i) for i in range(size)]
    labels = [str(label) for label in labels]
    if len(labels) != size:
        axis = "rows (queries)" if name.startswith("query") else "columns (keys)"
        raise ValueError(f"{name} has {len(labels)} labels but the weights have {size} {axis}")
    return labels


def plot_attention(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
    vmax: float | None = 1.0,
):
    """Heatmap of a (T_q, T_k) weight matrix: rows = queries, columns = keys. Returns the axes.

    ``annotate`` writes each weight in its cell (default: when the matrix is at most 10 x 10),
    an exact zero (a mask, sparsemax, top-k) as ``0`` and a weight that only rounds to zero as
    ``0.00``, as :func:`~attention_book.analysis.formatting.format_weight` prints them.
    """
    matrix = to_numpy(weights)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2:
        raise ValueError(f"weights must be a (T_q, T_k) matrix, but have shape {matrix.shape}")
    rows, columns = matrix.shape
    query_labels = _check_labels(query_labels, rows, "query_labels")
    key_labels = _check_labels(key_labels, columns, "key_labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.45 * columns, 0.8 + 0.4 * rows))
    heatmap(
        matrix,
        ax,
        title,
        xlabel="keys (attended to)",
        ylabel="queries (attending)",
        colorbar_label="attention weight" if colorbar else None,
        vmin=0.0,
        vmax=vmax,
    )
    ax.set_xticks(range(columns), key_labels, rotation=90 if max(map(len, key_labels), default=0) > 2 else 0)
    ax.set_yticks(range(rows), query_labels)
    if annotate is None:
        annotate = rows <= 10 and columns <= 10
    if annotate:
        top = vmax if vmax is not None else matrix.max()
        for i in range(rows):
            for j in range(columns):
                ax.text(
                    j,
                    i,
                    format_weight(matrix[i, j]),
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if matrix[i, j] > 0.6 * top else "white",
                )
    return ax


def plot_attention_grid(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
    layer_names: Sequence[str] | None = None,
    cell_size: float = 2.2,
    colorbar: bool = False,
):
    """Grid of heatmaps, one row per layer and one column per head. Returns the figure.

    ``weights``: (layers, heads, T_q, T_k), or a list of (heads, T_q, T_k) per layer
    (a leading batch axis of size 1 is dropped). Every map uses the scale 0 to 1;
    ``colorbar=True`` draws it once, beside the grid. The figure is at most
    :data:`PAGE_INCHES` wide (``cell_size`` shrinks to fit) and its text at least 9 pt.
    """
    if isinstance(weights, (list, tuple)):
        weights = torch.stack(
            [torch.as_tensor(w).squeeze(0) if torch.as_tensor(w).dim() == 4 else torch.as_tensor(w) for w in weights]
        )
    grid = to_numpy(weights)
    if grid.ndim != 4:
        raise ValueError(f"weights must have shape (layers, heads, T_q, T_k), but have shape {grid.shape}")
    layers, heads, rows, columns = grid.shape
    query_labels = _check_labels(query_labels, rows, "query_labels")
    key_labels = _check_labels(key_labels, columns, "key_labels")
    cell_size = min(cell_size, (PAGE_INCHES - 0.9 - (0.9 if colorbar else 0.0)) / heads)
    width = 0.9 + cell_size * heads + (0.9 if colorbar else 0.0)
    fig, axes = plt.subplots(layers, heads, figsize=(width, 0.7 + cell_size * layers), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            heatmap(grid[layer, head], ax, vmin=0.0, vmax=1.0, aspect="equal")
            ax.set_xticks(range(columns), key_labels if layer == layers - 1 else [], rotation=90, fontsize=9)
            ax.set_yticks(range(rows), query_labels if head == 0 else [], fontsize=9)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=10)
            if head == 0:
                name = layer_names[layer] if layer_names else f"layer {layer}"
                ax.set_ylabel(f"{name}\nqueries", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("keys", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if colorbar:  # after the layout, which does not place colour bars
        fig.colorbar(axes[0, 0].images[0], ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    return fig
