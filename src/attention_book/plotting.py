"""Figures of attention weights, drawn the same way in every chapter.

One sequential, colour-blind-safe colour map (viridis) for all attention weights;
rows are queries, columns are keys; token labels on both axes.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["ATTENTION_CMAP", "plot_attention", "plot_attention_grid", "to_numpy"]

ATTENTION_CMAP = "viridis"


def to_numpy(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        return weights.detach().float().cpu().numpy()
    return np.asarray(weights, dtype=float)


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

    ``annotate`` writes each weight in its cell (default: when the matrix is at most 10 x 10).
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
    image = ax.imshow(matrix, cmap=ATTENTION_CMAP, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(columns), key_labels, rotation=90 if max(map(len, key_labels), default=0) > 2 else 0)
    ax.set_yticks(range(rows), query_labels)
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries (attending)")
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = rows <= 10 and columns <= 10
    if annotate:
        top = vmax if vmax is not None else matrix.max()
        for i in range(rows):
            for j in range(columns):
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="black" if matrix[i, j] > 0.6 * top else "white")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def plot_attention_grid(
    weights,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    title: str | None = None,
    layer_names: Sequence[str] | None = None,
    cell_size: float = 2.2,
):
    """Grid of heatmaps, one row per layer and one column per head. Returns the figure.

    ``weights``: (layers, heads, T_q, T_k), or a list of (heads, T_q, T_k) per layer
    (a leading batch axis of size 1 is dropped).
    """
    if isinstance(weights, (list, tuple)):
        weights = torch.stack([torch.as_tensor(w).squeeze(0) if torch.as_tensor(w).dim() == 4 else torch.as_tensor(w) for w in weights])
    grid = to_numpy(weights)
    if grid.ndim != 4:
        raise ValueError(f"weights must have shape (layers, heads, T_q, T_k), but have shape {grid.shape}")
    layers, heads, rows, columns = grid.shape
    query_labels = _check_labels(query_labels, rows, "query_labels")
    key_labels = _check_labels(key_labels, columns, "key_labels")
    fig, axes = plt.subplots(layers, heads, figsize=(0.8 + cell_size * heads, 0.6 + cell_size * layers), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer, head]
            ax.imshow(grid[layer, head], cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0)
            ax.set_xticks(range(columns), key_labels if layer == layers - 1 else [], rotation=90, fontsize=7)
            ax.set_yticks(range(rows), query_labels if head == 0 else [], fontsize=7)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize=9)
            if head == 0:
                name = layer_names[layer] if layer_names else f"layer {layer}"
                ax.set_ylabel(f"{name}\nqueries", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("keys", fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig
