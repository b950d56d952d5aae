"""Chapter 7's figures: head-pattern scores, chosen heads on one sentence, contextual similarity,
the transfer study's learning curves with intervals, similarity gaps, and attention over image patches.

Presentation only: the recipes are in :mod:`attention_book.training.transfer`, the
measurements in :mod:`attention_book.analysis.heads` and :mod:`attention_book.analysis.vectors`.
Every figure is at most 6.6 inches (660 px) wide, the page column, so that the website shows
it unscaled and its smallest text (7 pt) stays above 8 px.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch

from ..analysis.formatting import to_numpy
from ..analysis.plotting import ATTENTION_CMAP, heatmap
from ..modes import evaluating
from ..pretrained import PretrainedEncoder

__all__ = [
    "plot_head_scores",
    "plot_heads",
    "plot_contextual_similarity",
    "plot_learning_curves",
    "plot_similarity_gaps",
    "plot_patch_attention",
]

COLUMN_INCHES = 6.6  # the website's text column (660 px at 100 dpi)


def plot_head_scores(scores: dict[str, torch.Tensor], patterns: Sequence[str] | None = None):
    """One (layers x heads) heatmap per pattern, two per row: how much weight each head gives to it."""
    patterns = list(patterns or scores)
    columns = min(2, len(patterns))
    rows = math.ceil(len(patterns) / columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(COLUMN_INCHES, 2.15 * rows), layout="constrained", squeeze=False
    )
    for ax in axes.flat[len(patterns) :]:
        ax.set_axis_off()
    for ax, pattern in zip(axes.flat, patterns):
        table = to_numpy(scores[pattern])
        heatmap(table, ax, vmin=0, vmax=1, xlabel="head", ylabel="layer")
        ax.set_title(f"weight on {pattern}", fontsize=10)
        ax.set_xticks(range(table.shape[1]))
        ax.set_yticks(range(table.shape[0]))
        ax.tick_params(labelsize=7)
        ax.xaxis.label.set_fontsize(8)
        ax.yaxis.label.set_fontsize(8)
    bar = figure.colorbar(axes.flat[0].images[0], ax=list(axes.flat), fraction=0.03, pad=0.02)
    bar.set_label("average attention weight", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return figure


@torch.no_grad()
def plot_heads(model: PretrainedEncoder, text: str, heads: Sequence[tuple[str, int, int, float]]):
    """The weights of a few chosen heads on one sentence, two per row (rows = queries, columns = keys)."""
    tokens, labels = model.encode_sentence(text)
    with evaluating(model):
        model(tokens)
    weights = model.attention_weights()
    columns = min(2, len(heads))
    rows = math.ceil(len(heads) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(COLUMN_INCHES, 3.5 * rows), layout="constrained", squeeze=False)
    for ax in axes.flat[len(heads) :]:
        ax.set_axis_off()
    for ax, (pattern, layer, head, score) in zip(axes.flat, heads):
        matrix = to_numpy(weights[layer][0, head])
        image = ax.imshow(matrix, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(f"layer {layer}, head {head}\n{pattern}: {score:.2f} on average", fontsize=9)
        ax.set_xlabel("keys (attended to)", fontsize=8)
        ax.set_ylabel("queries (attending)", fontsize=8)
    bar = figure.colorbar(image, ax=list(axes.flat), fraction=0.03, pad=0.02)
    bar.set_label("attention weight", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    return figure


# ---------------------------------------------------------------------------------
# Contextual vectors


def plot_contextual_similarity(similarity: dict[str, list[float]], word: str, ax=None):
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2), layout="constrained")
    for (name, values), style in zip(similarity.items(), ("o-", "s--")):
        ax.plot(range(len(values)), values, style, label=f"{name} of {word!r}")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":", label="static embedding (always 1)")
    ax.set_xlabel("depth (layers applied; 0 = embedding output)")
    ax.set_ylabel("average cosine similarity")
    ax.set_title(f"How alike are two vectors of {word!r}?")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower left")
    return ax


# ---------------------------------------------------------------------------------
# The results


ARM_STYLES = {
    "scratch": ("o", "#7f7f7f"),
    "frozen": ("s", "#1f77b4"),
    "fine-tuned": ("^", "#d62728"),
    "MLM then fine-tuned": ("D", "#2ca02c"),
}


def plot_learning_curves(
    summary: dict[str, dict[int, tuple[float, float, float]]],
    baseline: float | None = None,
    ax=None,
    ylabel: str = "test accuracy",
    bottom: float = 0.5,
):
    """Accuracy against the number of labelled examples, one line per arm, with 95 % intervals (log x axis).

    ``summary[arm][n] = (mean, low, high)``. The y axis starts at ``bottom`` (50 %: below
    always answering the majority class), and the axis label says so.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(COLUMN_INCHES, 4.0), layout="constrained")
    arms = list(summary)
    offsets = {arm: 1.0 + 0.035 * (k - (len(arms) - 1) / 2) for k, arm in enumerate(arms)}  # keep the bars apart
    for arm in arms:
        sizes = sorted(summary[arm])
        means = [summary[arm][n][0] for n in sizes]
        below = [summary[arm][n][0] - summary[arm][n][1] for n in sizes]
        above = [summary[arm][n][2] - summary[arm][n][0] for n in sizes]
        marker, colour = ARM_STYLES.get(arm, ("o", None))
        ax.errorbar(
            [n * offsets[arm] for n in sizes],
            means,
            yerr=[below, above],
            marker=marker,
            color=colour,
            capsize=3,
            linewidth=1.5,
            markersize=5,
            label=arm,
        )
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=f"always 'fresh' ({baseline:.0%})")
    ax.set_xscale("log")
    all_sizes = sorted({n for curve in summary.values() for n in curve})
    ax.set_xticks(all_sizes, [f"{n:,}" for n in all_sizes])
    ax.minorticks_off()
    ax.set_ylim(bottom, 1.0)
    ax.set_xlabel("labelled training examples (log scale)")
    ax.set_ylabel(f"{ylabel}\n(axis from {bottom:.0%})" if bottom > 0 else ylabel)
    ax.set_title("Four ways to build a classifier: mean and 95 % interval")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    return ax


def plot_similarity_gaps(gaps: dict[str, tuple[float, float, float]], ax=None):
    """Horizontal bars: how much more alike two reviews' vectors are when they share something, with 95 % intervals."""
    if ax is None:
        _, ax = plt.subplots(figsize=(COLUMN_INCHES, 0.6 + 0.55 * len(gaps)), layout="constrained")
    names = list(gaps)
    means = [gaps[name][0] for name in names]
    errors = [[gaps[name][0] - gaps[name][1] for name in names], [gaps[name][2] - gaps[name][0] for name in names]]
    ax.barh(range(len(names)), means, xerr=errors, capsize=4, color=["#1f77b4", "#ff7f0e", "#2ca02c"][: len(names)])
    ax.set_yticks(range(len(names)), names)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel("extra cosine similarity of the sentence vectors (mean and 95 % interval)")
    ax.invert_yaxis()
    return ax


def plot_patch_attention(image: torch.Tensor, received: torch.Tensor, patch: int, title: str = ""):
    """An image (H, W) beside the attention each of its patches receives (grid of patches), same grid drawn on both."""
    image, received = to_numpy(image), to_numpy(received)
    rows, columns = received.shape
    figure, (left, right) = plt.subplots(1, 2, figsize=(COLUMN_INCHES, 3.0), layout="constrained")
    left.imshow(image, cmap="gray_r")
    left.set_title("the image, cut into patches", fontsize=10)
    heat = right.imshow(received, cmap=ATTENTION_CMAP, vmin=0)
    right.set_title("attention each patch receives", fontsize=10)
    for ax, scale in ((left, patch), (right, 1)):
        for k in range(1, rows):
            ax.axhline(k * scale - 0.5, color="#d62728" if ax is left else "white", linewidth=0.6)
        for k in range(1, columns):
            ax.axvline(k * scale - 0.5, color="#d62728" if ax is left else "white", linewidth=0.6)
        ax.set_xticks([])
        ax.set_yticks([])
    bar = figure.colorbar(heat, ax=right, fraction=0.046, pad=0.04)
    bar.set_label("average weight received", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure
