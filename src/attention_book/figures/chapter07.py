"""Chapter 7's figures: head-pattern scores, chosen heads on one sentence, contextual similarity, learning curves.

Presentation only: the recipes are in :mod:`attention_book.training.transfer`, the
measurements in :mod:`attention_book.analysis.heads` and :mod:`attention_book.analysis.vectors`.
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
]


def plot_head_scores(scores: dict[str, torch.Tensor], patterns: Sequence[str] | None = None):
    """One (layers x heads) heatmap per pattern: how much weight each head gives to it."""
    patterns = list(patterns or scores)
    columns = min(3, len(patterns))
    rows = math.ceil(len(patterns) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.3 * columns, 2.5 * rows), layout="constrained", squeeze=False)
    for ax in axes.flat[len(patterns):]:
        ax.set_axis_off()
    for ax, pattern in zip(axes.flat, patterns):
        table = to_numpy(scores[pattern])
        heatmap(table, ax, vmin=0, vmax=1, xlabel="head", ylabel="layer")
        ax.set_title(f"weight on {pattern}", fontsize=10)
        ax.set_xticks(range(table.shape[1]))
        ax.set_yticks(range(table.shape[0]))
        ax.tick_params(labelsize=7)
    figure.colorbar(axes.flat[0].images[0], ax=list(axes.flat), fraction=0.02, pad=0.02, label="average attention weight")
    return figure


@torch.no_grad()
def plot_heads(model: PretrainedEncoder, text: str, heads: Sequence[tuple[str, int, int, float]]):
    """The weights of a few chosen heads on one sentence, side by side (rows = queries, columns = keys)."""
    tokens, labels = model.encode_sentence(text)
    with evaluating(model):
        model(tokens)
    weights = model.attention_weights()
    figure, axes = plt.subplots(1, len(heads), figsize=(3.4 * len(heads), 3.9), layout="constrained", squeeze=False)
    for ax, (pattern, layer, head, score) in zip(axes[0], heads):
        matrix = to_numpy(weights[layer][0, head])
        image = ax.imshow(matrix, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(f"layer {layer}, head {head}\n{pattern}: {score:.2f} on average", fontsize=9)
        ax.set_xlabel("keys (attended to)", fontsize=8)
    axes[0][0].set_ylabel("queries (attending)", fontsize=8)
    figure.colorbar(image, ax=list(axes[0]), fraction=0.02, pad=0.02, label="attention weight")
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


def plot_learning_curves(results: dict[str, dict[int, float]], baseline: float | None = None, ax=None):
    """Test accuracy against the number of labelled examples, one line per approach (log x axis)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.2, 3.6), layout="constrained")
    markers = iter(("o", "s", "^", "D", "v"))
    for name, curve in results.items():
        sizes = sorted(curve)
        ax.plot(sizes, [curve[n] for n in sizes], marker=next(markers), label=name)
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=f"always 'fresh' ({baseline:.0%})")
    ax.set_xscale("log")
    all_sizes = sorted({n for curve in results.values() for n in curve})
    ax.set_xticks(all_sizes, [f"{n:,}" for n in all_sizes])
    ax.minorticks_off()
    ax.set_xlabel("labelled training examples")
    ax.set_ylabel("test accuracy")
    ax.set_title("Where pretraining pays off")
    ax.legend(fontsize=8)
    return ax
