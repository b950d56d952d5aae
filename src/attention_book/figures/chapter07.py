"""Chapter 7's figures: head-pattern scores, chosen heads on one sentence, contextual similarity,
the transfer study's learning curves with intervals, similarity gaps, attention over image patches,
and the entity study's validation curves.

Presentation only: the recipes are in :mod:`attention_book.training.transfer`, the
measurements in :mod:`attention_book.analysis.heads` and :mod:`attention_book.analysis.vectors`.
Every figure is at most :data:`~attention_book.analysis.plotting.PAGE_INCHES` (5.8 inches) wide
with no text under 9 pt, so that its smallest text stays at 7 px or more on a 390 px phone
(and above 8 px on the desktop page). The two figures with intervals (the learning curves and
the similarity gaps) are drawn by seaborn from the raw values, with the chapter's own 95 %
t-interval (:func:`~attention_book.training.study_results.mean_interval`) as the error bar,
so the figure shows the very intervals the tables print.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import torch

from ..analysis.formatting import to_numpy
from ..analysis.plotting import ATTENTION_CMAP, PAGE_INCHES, heatmap
from ..modes import evaluating
from ..pretrained import PretrainedEncoder
from ..training.study_results import mean_interval

__all__ = [
    "plot_head_scores",
    "plot_heads",
    "plot_contextual_similarity",
    "plot_learning_curves",
    "plot_similarity_gaps",
    "plot_patch_attention",
    "plot_tagging_curves",
]

SMALLEST_POINTS = 9  # the smallest text any figure of this chapter draws (tick labels, legends)
WIDTH = PAGE_INCHES  # the width of every figure drawn here (issue 29: legible on a phone)


def _t_interval(values) -> tuple[float, float]:
    """seaborn's error bar: the 95 % t-interval of the mean that the chapter's tables print."""
    _, low, high = mean_interval(list(values))
    return low, high


def plot_head_scores(scores: dict[str, torch.Tensor], patterns: Sequence[str] | None = None):
    """One (layers x heads) heatmap per pattern, two per row: how much weight each head gives to it."""
    patterns = list(patterns or scores)
    columns = min(2, len(patterns))
    rows = math.ceil(len(patterns) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(WIDTH, 0.2 + 1.95 * rows), layout="constrained", squeeze=False)
    for ax in axes.flat[len(patterns) :]:
        ax.set_axis_off()
    for ax, pattern in zip(axes.flat, patterns):
        table = to_numpy(scores[pattern])
        # axis names on the outer panels only: the grid shares them
        outer_row, outer_column = ax.get_subplotspec().is_last_row(), ax.get_subplotspec().is_first_col()
        heatmap(
            table, ax, vmin=0, vmax=1, xlabel="head" if outer_row else None, ylabel="layer" if outer_column else None
        )
        ax.set_title(f"weight on {pattern}", fontsize=10)
        ax.set_xticks(range(table.shape[1]))
        ax.set_yticks(range(table.shape[0]))
        ax.tick_params(labelsize=SMALLEST_POINTS, length=2, pad=1)
        ax.xaxis.label.set_fontsize(SMALLEST_POINTS)
        ax.yaxis.label.set_fontsize(SMALLEST_POINTS)
    bar = figure.colorbar(axes.flat[0].images[0], ax=list(axes.flat), fraction=0.04, pad=0.02)
    bar.set_label("average attention weight", fontsize=SMALLEST_POINTS)
    bar.ax.tick_params(labelsize=SMALLEST_POINTS)
    return figure


@torch.no_grad()
def plot_heads(model: PretrainedEncoder, text: str, heads: Sequence[tuple[str, int, int, float]]):
    """The weights of a few chosen heads on one sentence, one under the other (rows = queries, columns = keys).

    One map per row: side by side, a sentence of 16 word pieces would not keep its labels at
    9 pt apart on a phone.
    """
    tokens, labels = model.encode_sentence(text)
    with evaluating(model):
        model(tokens)
    weights = model.attention_weights()
    figure, axes = plt.subplots(len(heads), 1, figsize=(4.6, 4.1 * len(heads)), layout="constrained", squeeze=False)
    for ax, (pattern, layer, head, score) in zip(axes.flat, heads):
        matrix = to_numpy(weights[layer][0, head])
        image = ax.imshow(matrix, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=SMALLEST_POINTS)
        ax.set_yticks(range(len(labels)), labels, fontsize=SMALLEST_POINTS)
        ax.set_title(f"layer {layer}, head {head}: {pattern}, {score:.2f} on average", fontsize=10)
        ax.set_xlabel("keys (attended to)", fontsize=SMALLEST_POINTS)
        ax.set_ylabel("queries (attending)", fontsize=SMALLEST_POINTS)
    bar = figure.colorbar(image, ax=list(axes.flat), fraction=0.05, pad=0.03, shrink=0.6)
    bar.set_label("attention weight", fontsize=SMALLEST_POINTS)
    bar.ax.tick_params(labelsize=SMALLEST_POINTS)
    return figure


# ---------------------------------------------------------------------------------
# Contextual vectors


def plot_contextual_similarity(similarity: dict[str, list[float]], word: str, ax=None):
    """Average cosine similarity of two vectors of ``word`` at each depth, one line per kind of pair."""
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH, 3.4), layout="constrained")
    for (name, values), style in zip(similarity.items(), ("o-", "s--")):
        ax.plot(range(len(values)), values, style, label=f"{name} of {word!r}")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":", label="static embedding (always 1)")
    ax.set_xlabel("depth (layers applied; 0 = embedding output)")
    ax.set_ylabel("average cosine similarity")
    ax.set_title(f"How alike are two vectors of {word!r}?")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=SMALLEST_POINTS, loc="lower left")
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
    results: Mapping,
    split: str = "test",
    baseline: float | None = None,
    ax=None,
    bottom: float = 0.5,
):
    """Accuracy against the number of labelled examples, one line per arm, with 95 % intervals (log x axis).

    ``results`` is the study as :func:`~attention_book.training.transfer_study.run_study`
    returns it (``results["arms"][arm][str(n)][split]``: one accuracy per repeat). seaborn
    draws the mean over the repeats and, as error bars, the same 95 % t-interval that
    :func:`~attention_book.training.study_results.summarize_study` computes. The y axis
    starts at ``bottom`` (50 %: below always answering the majority class), and the axis
    label says so.
    """
    import pandas as pd
    import seaborn as sns

    if split not in ("validation", "test"):
        raise ValueError(f"split must be 'validation' or 'test', but {split!r} was given")
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH, 4.2), layout="constrained")
    arms = list(results["arms"])
    offsets = {arm: 1.0 + 0.035 * (k - (len(arms) - 1) / 2) for k, arm in enumerate(arms)}  # keep the bars apart
    all_sizes = sorted({int(n) for by_size in results["arms"].values() for n in by_size})
    for arm in arms:
        rows = [
            {"labels": int(n) * offsets[arm], "accuracy": accuracy}
            for n, record in results["arms"][arm].items()
            if split in record
            for accuracy in record[split]
        ]
        marker, colour = ARM_STYLES.get(arm, ("o", None))
        sns.lineplot(
            data=pd.DataFrame(rows),
            x="labels",
            y="accuracy",
            ax=ax,
            estimator="mean",
            errorbar=_t_interval,
            err_style="bars",
            err_kws={"capsize": 3, "linewidth": 1.2},
            marker=marker,
            markersize=6,
            markeredgewidth=0,
            color=colour,
            linewidth=1.5,
            label=arm,
        )
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=f"always 'fresh' ({baseline:.0%})")
    ax.set_xscale("log")
    ax.set_xticks(all_sizes, [f"{n:,}" for n in all_sizes])
    ax.minorticks_off()
    ax.set_ylim(bottom, 1.0)
    ax.set_xlabel("labelled training examples (log scale)")
    name = f"{split} accuracy"
    ax.set_ylabel(f"{name}\n(axis from {bottom:.0%})" if bottom > 0 else name)
    ax.set_title("Four ways to build a classifier: mean and 95 % interval")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=SMALLEST_POINTS, loc="upper left", ncol=2)
    return ax


def plot_similarity_gaps(per_review: Mapping[str, Sequence[float]], ax=None):
    """Horizontal bars: how much more alike two reviews' vectors are when they share something.

    ``per_review[name]`` holds one gap per review; seaborn draws their mean with the 95 %
    t-interval of :func:`~attention_book.training.study_results.mean_interval` as the
    error bar, the interval the chapter prints.
    """
    import pandas as pd
    import seaborn as sns

    names = list(per_review)
    frame = pd.DataFrame(
        [{"name": name, "gap": float(value)} for name in names for value in to_numpy(torch.as_tensor(per_review[name]))]
    )
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH, 1.0 + 0.6 * len(names)), layout="constrained")
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c"][: len(names)]
    sns.barplot(
        data=frame,
        x="gap",
        y="name",
        hue="name",
        order=names,
        hue_order=names,
        palette=colours,
        legend=False,
        orient="h",
        estimator="mean",
        errorbar=_t_interval,
        capsize=0.25,
        err_kws={"linewidth": 1.2, "color": "black"},
        ax=ax,
    )
    ax.axvline(0, color="black", linewidth=0.8)
    ax.xaxis.set_major_locator(plt.MaxNLocator(5))
    ax.set_ylabel("")
    ax.set_xlabel("extra cosine similarity of the sentence vectors\n(mean and 95 % interval over the reviews)")
    return ax


def plot_patch_attention(image: torch.Tensor, received: torch.Tensor, patch: int, title: str = ""):
    """An image (H, W) beside the attention each of its patches receives (grid of patches), same grid drawn on both."""
    image, received = to_numpy(image), to_numpy(received)
    rows, columns = received.shape
    figure, (left, right) = plt.subplots(1, 2, figsize=(WIDTH, 3.0), layout="constrained")
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
    bar.set_label("average weight received", fontsize=SMALLEST_POINTS)
    bar.ax.tick_params(labelsize=SMALLEST_POINTS)
    if title:
        figure.suptitle(title, fontsize=10)
    return figure


def plot_tagging_curves(study: Mapping, ax=None):
    """Validation entity F1 at every checkpoint of the entity study's runs: one thin line per seed,
    one colour per arm (the runs as :func:`~attention_book.training.entity_study.run_entity_study`
    stored them, ``study["arms"][arm]["runs"][i]["validation_by_step"]``)."""
    import pandas as pd
    import seaborn as sns

    rows = [
        {"arm": arm, "seed": run["seed"], "training step": step, "validation entity F1": f1}
        for arm, entry in study["arms"].items()
        for run in entry.get("runs", [])
        for step, f1 in run["validation_by_step"]
    ]
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH, 3.4), layout="constrained")
    sns.lineplot(
        data=pd.DataFrame(rows),
        x="training step",
        y="validation entity F1",
        hue="arm",
        style="arm",
        units="seed",
        estimator=None,
        markers=True,
        dashes=False,
        linewidth=1,
        ax=ax,
    )
    ax.set_ylim(0, 1)
    ax.set_title("Validation F1 at each checkpoint, one line per seed")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=SMALLEST_POINTS, loc="upper right")
    return ax
