"""Chapter 5's figures: the sinusoidal table and its columns, position similarity, training curves,
accuracy by length and rotary scores by offset.

Presentation only: the word-order task is in :mod:`attention_book.data.tasks`, the
order-blind ceiling in :mod:`attention_book.analysis.baselines`. Every figure is at most
:data:`~attention_book.analysis.plotting.PAGE_INCHES` wide with no text under 9 pt, so it stays
legible on a 390 px phone. The curves over seeds (training, accuracy by length) are drawn by
seaborn through :func:`~attention_book.analysis.plotting.seed_band`; the heatmaps are the
book's one heatmap and the table's columns plain matplotlib lines (exact values, no seeds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.formatting import to_numpy
from ..analysis.plotting import PAGE_INCHES, heatmap, seed_band
from ..training.loop import History

_WIDTH = PAGE_INCHES  # the width of every figure drawn here (issue 29: legible on a phone)

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
        table,
        ax,
        title,
        xlabel="dimension (even: sin, odd: cos)",
        ylabel="position p",
        colorbar_label="value",
        vmin=-1.0,
        vmax=1.0,
        figsize=(_WIDTH, 3.6),
    )


def plot_encoding_columns(table, columns: Sequence[int], ax=None, title: str = "Columns of the table"):
    """Selected columns of a (positions, d_model) table as curves against the position."""
    matrix = to_numpy(table)
    if ax is None:
        _, ax = plt.subplots(figsize=(_WIDTH, 3.6), layout="constrained")
    positions = np.arange(matrix.shape[0])
    styles = ["-", "--", "-.", ":"]
    for n, column in enumerate(columns):
        kind = "sin" if column % 2 == 0 else "cos"
        ax.plot(
            positions,
            matrix[:, column],
            styles[n % len(styles)],
            marker="o",
            markersize=2.5,
            label=f"dimension {column} ({kind})",
        )
    ax.set_xlabel("position p")
    ax.set_ylabel("value")
    ax.set_ylim(-1.15, 1.15)
    ax.set_title(title)
    # Under the axes, two to a row: beside them it took a third of a phone's width.
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    ax.grid(alpha=0.3)
    return ax


def plot_similarity(matrix, ax=None, title: str = "Dot products of position vectors", label: str = "PE(i) · PE(j)"):
    """Heatmap of a (T, T) position-to-position matrix: rows and columns are positions."""
    return heatmap(matrix, ax, title, xlabel="position j", ylabel="position i", colorbar_label=label, aspect="equal")


def _as_runs(value) -> list:
    """One run or a sequence of runs (one per seed) -> a list of runs."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def plot_order_training(
    histories: Mapping[str, History | Sequence[History]], steps_per_epoch: int, title: str = "Which word comes first"
):
    """Two panels, one above the other: training loss per step and validation accuracy per epoch,
    one line per model.

    A model may come with one :class:`History` or one per seed; then the line is the mean over
    the seeds and a shaded band spans their range (smallest to largest value at each step),
    drawn by seaborn (:func:`~attention_book.analysis.plotting.seed_band`).
    """
    # One column over the shared step axis (side by side, the panels were too small on a phone).
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(_WIDTH, 6.2), sharex=True, layout="constrained")
    styles = ["-", "--", "-.", ":"]
    seeds = 1
    for n, (name, value) in enumerate(histories.items()):
        runs = _as_runs(value)
        seeds = max(seeds, len(runs))
        steps = min(len(history.step_loss) for history in runs)
        window = max(1, min(10, steps))
        smooth = np.stack(
            [
                np.convolve(np.asarray(history.step_loss[:steps]), np.ones(window) / window, mode="valid")
                for history in runs
            ]
        )  # (seeds, steps - window + 1)
        seed_band(top, np.arange(window, steps + 1), smooth, label=name, linestyle=styles[n % 4])
        evaluations = min(len(history.valid_metric) for history in runs)
        accuracy = np.stack(
            [np.asarray(history.valid_metric[:evaluations]) for history in runs]
        )  # (seeds, evaluations)
        epochs = np.asarray(runs[0].epoch[:evaluations])
        seed_band(
            bottom,
            epochs * steps_per_epoch,
            accuracy,
            label=name,
            linestyle=styles[n % 4],
            marker="o",
            markersize=4,
            markeredgewidth=0,
        )
    top.axhline(math.log(2), color="gray", linestyle=":", label="ln 2 (a coin flip)")
    top.set_ylabel("loss (mean of 10 steps)")
    top.set_title("training loss", fontsize=10)
    top.legend(fontsize=9)
    top.grid(alpha=0.3)
    bottom.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    bottom.set_ylim(0.0, 1.02)
    bottom.set_xlabel("training step")
    bottom.set_ylabel("accuracy")
    bottom.set_title("validation accuracy", fontsize=10)
    bottom.legend(fontsize=9, loc="lower right")
    bottom.grid(alpha=0.3)
    suffix = f"\n(line: mean of {seeds} seeds; band: their range)" if seeds > 1 else ""
    figure.suptitle(title + suffix, fontsize=11)
    return figure


def plot_accuracy_by_length(
    results: Mapping[str, Mapping[int, float | Sequence[float]]],
    trained_lengths: tuple[int, int],
    ax=None,
    title: str = "Accuracy by sequence length",
    predictions: Mapping[str, Mapping[int, float | Sequence[float]]] | None = None,
    ylabel: str = "test accuracy",
):
    """One line per model: accuracy against the sequence length; the trained lengths are shaded.

    An accuracy may be one number or one per seed: then the line is the mean and a band
    spans the range (seaborn, through :func:`~attention_book.analysis.plotting.seed_band`).
    ``predictions`` (same form) are drawn as thin dashed lines without markers, in the colour
    of the model of the same name if there is one.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(_WIDTH, 4.6), layout="constrained")
    ax.axvspan(trained_lengths[0] - 0.5, trained_lengths[1] + 0.5, color="#dddddd", label="lengths seen in training")
    markers = ["o", "s", "^", "D"]
    colours = {}
    seeds = 1
    for n, (name, by_length) in enumerate(results.items()):
        lengths = sorted(by_length)
        runs = np.array([_as_runs(by_length[length]) for length in lengths], dtype=float).T  # (seeds, lengths)
        seeds = max(seeds, len(runs))
        line = seed_band(ax, lengths, runs, label=name, marker=markers[n % 4], markersize=4, markeredgewidth=0)
        colours[name] = line.get_color()
    for name, by_length in (predictions or {}).items():
        lengths = sorted(by_length)
        runs = np.array([_as_runs(by_length[length]) for length in lengths], dtype=float).T
        colour = next((c for model, c in colours.items() if model in name), "black")
        ax.plot(lengths, runs.mean(axis=0), "--", color=colour, linewidth=1.6, label=name)
    ax.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title + (f"\n(line: mean of {seeds} seeds; band: their range)" if seeds > 1 else ""), fontsize=10)
    # Under the axes, two to a row: inside them, the legend covered the line at 50%.
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2)
    ax.grid(alpha=0.3)
    return ax


def plot_offset_scores(scores, ax=None, title: str = "Rotary: score of q at i with k at j"):
    """Heatmap of a (T, T) score matrix: rows = query positions, columns = key positions."""
    return heatmap(
        scores,
        ax,
        title,
        xlabel="key position j",
        ylabel="query position i",
        colorbar_label="score q·k",
        aspect="equal",
    )
