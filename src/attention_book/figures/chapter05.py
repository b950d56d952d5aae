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
        table,
        ax,
        title,
        "dimension (even: sin, odd: cos)",
        "position p",
        "value",
        vmin=-1.0,
        vmax=1.0,
        figsize=(7.0, 3.6),
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
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return ax


def plot_similarity(matrix, ax=None, title: str = "Dot products of position vectors", label: str = "PE(i) · PE(j)"):
    """Heatmap of a (T, T) position-to-position matrix: rows and columns are positions."""
    return heatmap(matrix, ax, title, "position j", "position i", label, aspect="equal")


def _as_runs(value) -> list:
    """One run or a sequence of runs (one per seed) -> a list of runs."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _band(ax, x, runs: np.ndarray, style: str, label: str, marker: str | None = None, colour=None):
    """Mean of ``runs`` (seeds, points) as a line, their range (smallest to largest) as a shaded band."""
    mean = runs.mean(axis=0)
    (line,) = ax.plot(x, mean, style, marker=marker, markersize=3.5, label=label, color=colour)
    if len(runs) > 1:
        ax.fill_between(x, runs.min(axis=0), runs.max(axis=0), color=line.get_color(), alpha=0.2, linewidth=0)
    return line


def plot_order_training(
    histories: Mapping[str, History | Sequence[History]], steps_per_epoch: int, title: str = "Which word comes first"
):
    """Two panels: training loss per step and validation accuracy per epoch, one line per model.

    A model may come with one :class:`History` or one per seed; then the line is the mean over
    the seeds and a shaded band spans their range (smallest to largest value at each step).
    """
    figure, (left, right) = plt.subplots(1, 2, figsize=(8.8, 3.4), layout="constrained")
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
        _band(left, np.arange(window, steps + 1), smooth, styles[n % 4], name)
        evaluations = min(len(history.valid_metric) for history in runs)
        accuracy = np.stack(
            [np.asarray(history.valid_metric[:evaluations]) for history in runs]
        )  # (seeds, evaluations)
        epochs = np.asarray(runs[0].epoch[:evaluations])
        _band(right, epochs * steps_per_epoch, accuracy, styles[n % 4], name, marker="o")
    left.axhline(math.log(2), color="gray", linestyle=":", label="ln 2 (a coin flip)")
    left.set_xlabel("training step")
    left.set_ylabel("training loss (mean of 10 steps)")
    left.set_title("training loss", fontsize=10)
    left.legend(fontsize=9)
    left.grid(alpha=0.3)
    right.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    right.set_ylim(0.0, 1.02)
    right.set_xlabel("training step")
    right.set_ylabel("validation accuracy")
    right.set_title("validation accuracy", fontsize=10)
    right.legend(fontsize=9, loc="lower right")
    right.grid(alpha=0.3)
    suffix = f" (line: mean of {seeds} seeds; band: their range)" if seeds > 1 else ""
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
    spans the range. ``predictions`` (same form) are drawn as thin dashed lines without
    markers, in the colour of the model of the same name if there is one.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(7.2, 3.6), layout="constrained")
    ax.axvspan(trained_lengths[0] - 0.5, trained_lengths[1] + 0.5, color="#dddddd", label="lengths seen in training")
    markers = ["o", "s", "^", "D"]
    colours = {}
    seeds = 1
    for n, (name, by_length) in enumerate(results.items()):
        lengths = sorted(by_length)
        runs = np.array([_as_runs(by_length[length]) for length in lengths], dtype=float).T  # (seeds, lengths)
        seeds = max(seeds, len(runs))
        colours[name] = _band(ax, lengths, runs, "-", name, marker=markers[n % 4]).get_color()
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
    ax.legend(fontsize=8.5, loc="lower left")
    ax.grid(alpha=0.3)
    return ax


def plot_offset_scores(scores, ax=None, title: str = "Rotary: score of q at i with k at j"):
    """Heatmap of a (T, T) score matrix: rows = query positions, columns = key positions."""
    return heatmap(scores, ax, title, "key position j", "query position i", "score q·k", aspect="equal")
