"""Chapter 5's figures: the sinusoidal table and its columns, position similarity, training curves,
accuracy by length and rotary scores by offset.

Presentation only: the word-order task is in :mod:`attention_book.data.tasks`, the
order-blind ceiling in :mod:`attention_book.analysis.baselines`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.formatting import to_numpy
from ..analysis.plotting import heatmap
from ..training.loop import History

__all__ = [
    "plot_encoding_table",
    "plot_encoding_columns",
    "plot_similarity",
    "plot_order_training",
    "plot_accuracy_by_length",
    "plot_offset_scores",
]


def plot_encoding_table(table, ax=None, title: str = "Sinusoidal positional encoding"):
    """Heatmap of a (positions, d_model) encoding table: rows = positions, columns = dimensions."""
    return heatmap(
        table, ax, title, "dimension (even: sin, odd: cos)", "position p", "value", vmin=-1.0, vmax=1.0, figsize=(7.0, 3.6)
    )


def plot_encoding_columns(table, columns: Sequence[int], ax=None, title: str = "Columns of the table"):
    """Selected columns of a (positions, d_model) table as curves against the position."""
    matrix = to_numpy(table)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 3.0), layout="constrained")
    positions = np.arange(matrix.shape[0])
    styles = ["-", "--", "-.", ":"]
    for n, column in enumerate(columns):
        kind = "sin" if column % 2 == 0 else "cos"
        ax.plot(positions, matrix[:, column], styles[n % len(styles)], marker="o", markersize=2.5,
                label=f"dimension {column} ({kind})")
    ax.set_xlabel("position p")
    ax.set_ylabel("value")
    ax.set_ylim(-1.15, 1.15)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return ax


def plot_similarity(matrix, ax=None, title: str = "Dot products of position vectors", label: str = "PE(i) · PE(j)"):
    """Heatmap of a (T, T) position-to-position matrix: rows and columns are positions."""
    return heatmap(matrix, ax, title, "position j", "position i", label, aspect="equal")


def plot_order_training(histories: Mapping[str, History], steps_per_epoch: int, title: str = "Which word comes first"):
    """Two panels: training loss per step and held-out accuracy per epoch, one line per model."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.4), layout="constrained")
    styles = ["-", "--", "-.", ":"]
    for n, (name, history) in enumerate(histories.items()):
        losses = np.asarray(history.step_loss)
        window = max(1, min(10, len(losses)))
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        left.plot(np.arange(window, len(losses) + 1), smooth, styles[n % 4], label=name)
        epochs = np.asarray(history.epoch)
        right.plot(epochs * steps_per_epoch, history.valid_metric, styles[n % 4], marker="o", markersize=3, label=name)
    left.axhline(math.log(2), color="gray", linestyle=":", label="ln 2 (a coin flip)")
    left.set_xlabel("training step")
    left.set_ylabel("training loss (mean of 10 steps)")
    left.set_title(f"{title}: training loss")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    right.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    right.set_ylim(0.0, 1.02)
    right.set_xlabel("training step")
    right.set_ylabel("held-out accuracy")
    right.set_title(f"{title}: held-out accuracy")
    right.legend(fontsize=8, loc="lower right")
    right.grid(alpha=0.3)
    return figure


def plot_accuracy_by_length(results: Mapping[str, Mapping[int, float]], trained_lengths: tuple[int, int], ax=None,
                            title: str = "Accuracy by sequence length"):
    """One line per model: accuracy against the sequence length; the trained lengths are shaded."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.2), layout="constrained")
    ax.axvspan(trained_lengths[0] - 0.5, trained_lengths[1] + 0.5, color="#dddddd", label="lengths seen in training")
    markers = ["o", "s", "^", "D"]
    for n, (name, by_length) in enumerate(results.items()):
        lengths = sorted(by_length)
        ax.plot(lengths, [by_length[length] for length in lengths], marker=markers[n % 4], label=name)
    ax.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    return ax


def plot_offset_scores(scores, ax=None, title: str = "Rotary: score of q at i with k at j"):
    """Heatmap of a (T, T) score matrix: rows = query positions, columns = key positions."""
    return heatmap(scores, ax, title, "key position j", "query position i", "score q·k", aspect="equal")
