"""Chapter 1's figures: the bottleneck experiment, tokens and outputs in the plane, saturation of the softmax, costs and timings against T.

Presentation only: chapter 1 computes every number it plots in its own cells (the costs
and timings come from :mod:`attention_book.analysis.cost`). Every figure is at most
:data:`~attention_book.analysis.plotting.PAGE_INCHES` wide with no text under 9 pt, so it stays
legible on a 390 px phone. The lines over seeds (bottleneck, influence, saturation) are drawn by
seaborn through :func:`~attention_book.analysis.plotting.seed_band`; the diagrams, scatter and
cost curves are plain matplotlib (one value per point: nothing to aggregate).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Polygon

from ..analysis.formatting import to_numpy
from ..analysis.plotting import PAGE_INCHES, plot_attention, seed_band

__all__ = [
    "plot_attention_flow",
    "plot_attention_pair",
    "plot_bottleneck",
    "plot_influence",
    "plot_layer_costs",
    "plot_tokens_and_outputs",
    "plot_saturation",
    "plot_timings",
]


def _points_of_tokens(tokens: Sequence[str], inputs, outputs) -> tuple[np.ndarray, np.ndarray]:
    """``inputs`` and ``outputs`` as (T, 2) arrays, one row per token; a clear error otherwise."""
    inputs, outputs = to_numpy(inputs), to_numpy(outputs)
    if inputs.ndim != 2 or inputs.shape[1] != 2 or outputs.shape != inputs.shape:
        raise ValueError(
            f"inputs and outputs must both have shape (T, 2), but have shapes {inputs.shape} and {outputs.shape}"
        )
    if len(tokens) != len(inputs):
        raise ValueError(f"{len(tokens)} token labels were given for {len(inputs)} vectors")
    return inputs, outputs


def plot_tokens_and_outputs(
    tokens: Sequence[str],
    inputs,
    outputs,
    ax=None,
    title: str | None = None,
    feature_names: tuple[str, str] = ("feature 1", "feature 2"),
):
    """Tokens with two features as points, and an arrow from each token to its output.

    Args:
        tokens: T labels.
        inputs: (T, 2) token vectors, one per row.
        outputs: (T, 2) attention outputs, row i belonging to token i.
        ax: axes to draw into (a new figure if None).

    Returns the axes. The shaded triangle (polygon) spans the tokens: a weighted
    average with non-negative weights that sum to 1 can only land inside it.
    """
    inputs, outputs = _points_of_tokens(tokens, inputs, outputs)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 5.6), layout="constrained")
    if len(inputs) >= 3:
        centre = inputs.mean(axis=0)
        order = np.argsort(np.arctan2(inputs[:, 1] - centre[1], inputs[:, 0] - centre[0]))
        ax.add_patch(
            Polygon(
                inputs[order],
                closed=True,
                facecolor="#dddddd",
                edgecolor="#999999",
                zorder=0,
                label="where weighted averages can land",
            )
        )
    ax.scatter(inputs[:, 0], inputs[:, 1], s=70, color="#1f4e79", zorder=3, label="token vectors $x_j$")
    ax.scatter(outputs[:, 0], outputs[:, 1], s=70, marker="D", color="#e08a00", zorder=4, label="outputs $h_i$")
    for token, start, end in zip(tokens, inputs, outputs):
        ax.annotate(f"{token}", start, textcoords="offset points", xytext=(-8, 8), ha="right", fontsize=11)
        ax.annotate(
            "",
            xy=end,
            xytext=start,
            zorder=2,
            arrowprops={"arrowstyle": "->", "color": "#e08a00", "lw": 1.5, "shrinkA": 5, "shrinkB": 5},
        )
        ax.annotate(
            f"$h_{{\\mathrm{{{token}}}}}$",
            end,
            textcoords="offset points",
            xytext=(6, -14),
            fontsize=10,
            color="#a05a00",
        )
    low = min(inputs.min(), outputs.min()) - 0.35
    high = max(inputs.max(), outputs.max()) + 0.35
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_aspect("equal")
    ax.set_xlabel(feature_names[0])
    ax.set_ylabel(feature_names[1])
    ax.grid(alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), fontsize=9, ncols=2)
    if title:
        ax.set_title(title)
    return ax


def plot_saturation(dims, saturated_unscaled, saturated_scaled, slope_unscaled, slope_scaled, num_keys: int):
    """Two panels against d_k, one above the other: the share of saturated queries (top), and
    the median slope a(1 - a) (bottom).

    Each argument after ``dims`` is (seeds, len(dims)): the line is the mean over the seeds,
    the band their range (seaborn). Unscaled scores in one colour, scaled by 1/sqrt(d_k) in
    another. The slope is drawn on a log scale, since unscaled it falls by orders of magnitude.
    """
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(PAGE_INCHES - 0.2, 6.4), layout="constrained")
    styles = (
        ("o", "#d62728", r"unscaled: softmax$(q \cdot k)$"),
        ("s", "#1f4e79", r"scaled: softmax$(q \cdot k / \sqrt{d_k})$"),
    )
    for ax, runs in ((top, (saturated_unscaled, saturated_scaled)), (bottom, (slope_unscaled, slope_scaled))):
        for values, (marker, colour, label) in zip(runs, styles):
            values = to_numpy(values).reshape(-1, len(dims))  # (seeds, widths)
            seed_band(ax, dims, values, label=label, colour=colour, marker=marker, markeredgewidth=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(dims, [str(d) for d in dims])
        ax.minorticks_off()
        ax.set_xlabel("width of queries and keys $d_k$")
        ax.grid(alpha=0.3)
    top.set_ylim(-0.02, 1.02)
    top.set_ylabel("share of queries")
    top.set_title(f"Saturated: largest of {num_keys} weights > 0.99")
    top.legend(fontsize=9, loc="upper left")
    bottom.get_legend().remove()
    bottom.set_yscale("log")
    bottom.set_ylabel("median $a(1 - a)$ (log scale)")
    bottom.set_title("How much the largest weight can still move")
    return figure


def plot_timings(
    lengths: Sequence[int], seconds: Sequence[float], ax=None, title: str | None = None, device: str = "cpu"
):
    """Measured time against sequence length on log-log axes, with a T^2 guide line.

    On log-log axes a cost that grows like T^2 is a straight line of slope 2; the
    guide has slope 2 and runs through the middle of the measurements (least squares).
    """
    lengths = np.asarray(lengths, dtype=float)
    milliseconds = 1000 * np.asarray(seconds, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    ax.loglog(lengths, milliseconds, "o-", color="#1f4e79", label=f"measured on {device}")
    offset = np.mean(np.log(milliseconds) - 2 * np.log(lengths))
    guide = np.exp(offset) * lengths**2
    ax.loglog(lengths, guide, "--", color="#e08a00", label=r"$\propto T^2$ (slope 2)")
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("time per attention call (ms)")
    ax.set_xticks(lengths, [str(int(T)) for T in lengths])
    ax.minorticks_off()
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


def plot_bottleneck(
    lengths: Sequence[int], accuracy, chance: float, labels: Sequence[str], ax=None, title: str | None = None
):
    """Accuracy against the sequence length, one line per model: the mean over seeds and their range.

    ``accuracy`` is (models, seeds, len(lengths)); ``labels`` names the models; a dotted
    line marks ``chance`` (guessing one symbol at random). The lines and bands are seaborn's.
    """
    values = to_numpy(accuracy)  # (models, seeds, lengths)
    if values.ndim != 3 or values.shape[0] != len(labels) or values.shape[2] != len(lengths):
        raise ValueError(
            f"accuracy must be (models={len(labels)}, seeds, lengths={len(lengths)}), but shape {values.shape} was given"
        )
    if ax is None:
        _, ax = plt.subplots(figsize=(5.4, 3.6), layout="constrained")
    for runs, label, (marker, colour) in zip(values, labels, (("o", "#d62728"), ("s", "#1f4e79"))):
        seed_band(ax, lengths, runs, label=label, colour=colour, marker=marker, markeredgewidth=0)
    ax.axhline(chance, linestyle=":", color="grey", label=f"chance (1/{round(1 / chance)})")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(lengths, [str(T) for T in lengths])
    ax.set_xlabel("length of the sequence to copy (symbols)")
    ax.set_ylabel("share of output symbols right")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9, loc="lower left")
    if title:
        ax.set_title(title)
    return ax


def plot_layer_costs(
    lengths: Sequence[int],
    costs: dict[str, Sequence[float]],
    crossovers: dict[str, float],
    ax=None,
    title: str | None = None,
):
    """Multiply-adds per token of each layer against T, on log-log axes, with the crossovers marked.

    ``costs`` maps a layer's name to its multiply-adds at each length (divided by T here, so
    a layer whose work grows like T is flat); ``crossovers`` maps a label to the length
    at which attention's line crosses another layer's (a dashed vertical line each).
    """
    lengths = np.asarray(lengths, dtype=float)
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.8), layout="constrained")
    styles = ("-", "--", "-.", ":")
    for index, (name, values) in enumerate(costs.items()):
        per_token = np.asarray(values, dtype=float) / lengths
        ax.loglog(lengths, per_token, styles[index % len(styles)], linewidth=2, label=name)
    for label, T in crossovers.items():
        ax.axvline(T, color="grey", linewidth=0.8, linestyle=(0, (4, 3)))
        ax.annotate(
            label, (T, ax.get_ylim()[1]), xytext=(3, -3), textcoords="offset points", fontsize=9, va="top", rotation=90
        )
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("multiply-adds per token")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=9, loc="upper left")
    if title:
        ax.set_title(title)
    return ax


def plot_influence(
    lengths: Sequence[int], runs: dict[str, Sequence[Sequence[float]]], ax=None, title: str | None = None
):
    """The first token's relative influence on the last output against T, on a log axis.

    ``runs`` maps a layer's name to one list of values per length (one value per seed): the
    line is the median over the seeds, the band their range (seaborn).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5.4, 3.6), layout="constrained")
    for (name, values), (marker, colour) in zip(runs.items(), (("o", "#d62728"), ("s", "#1f4e79"))):
        values = np.asarray(values, dtype=float)  # (lengths, seeds)
        if values.shape[0] != len(lengths):
            raise ValueError(
                f"{name!r} has values for {values.shape[0]} lengths, but {len(lengths)} lengths were given"
            )
        # (seeds, lengths); the median before the log scale is set, so it is numpy's median
        seed_band(
            ax, lengths, values.T, label=name, colour=colour, marker=marker, estimator="median", markeredgewidth=0
        )
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("first token's influence on the last output\n(relative to the last token's, log scale)")
    ax.grid(alpha=0.3, which="major")
    ax.legend(fontsize=9, loc="lower left")
    if title:
        ax.set_title(title)
    return ax


def plot_attention_pair(first, second, first_labels, second_labels, titles: tuple[str, str]):
    """Two (T, T) attention maps one above the other, with one colour bar for both. Returns the figure.

    Stacked rather than side by side so that the weights written in the cells stay legible
    on a phone; ``first_labels`` and ``second_labels`` label each map's rows and columns.
    """
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(4.9, 6.6), layout="constrained")
    plot_attention(first, first_labels, first_labels, ax=top, title=titles[0], colorbar=False)
    plot_attention(second, second_labels, second_labels, ax=bottom, title=titles[1], colorbar=False)
    figure.colorbar(top.images[0], ax=[top, bottom], shrink=0.6, label="attention weight")
    return figure


def plot_attention_flow(ax=None):
    """A block diagram of scaled dot-product attention: Q, K, V -> scores -> scale -> mask -> softmax -> A V -> H.

    Drawn from top to bottom as in Vaswani et al.'s Figure 2, each box labelled with what it
    computes and the shape of its result.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 5.4), layout="constrained")
    boxes = {  # name: (x, y, text)
        "Q": (1.0, 6.0, "queries $Q$\n$(T_q,\\ d_k)$"),
        "K": (3.0, 6.0, "keys $K$\n$(T_k,\\ d_k)$"),
        "V": (4.6, 6.0, "values $V$\n$(T_k,\\ d_v)$"),
        "scores": (2.0, 4.8, "MatMul: $Q K^\\top$\n$(T_q,\\ T_k)$"),
        "scale": (2.0, 3.8, "Scale: $\\div \\sqrt{d_k}$"),
        "mask": (2.0, 2.8, "Mask (optional): $-\\infty$\nwhere $M_{ij}$ is False"),
        "softmax": (2.0, 1.8, "Softmax over each row\n$A$: $(T_q,\\ T_k)$"),
        "mix": (3.4, 0.8, "MatMul: $A V$"),
        "H": (3.4, -0.2, "output $H$\n$(T_q,\\ d_v)$"),
    }
    colours = {"Q": "#dce6f2", "K": "#dce6f2", "V": "#fbe5cc", "H": "#e2efda"}
    for name, (x, y, text) in boxes.items():
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=9,
            bbox={"boxstyle": "round,pad=0.4", "facecolor": colours.get(name, "#f2f2f2"), "edgecolor": "#555555"},
        )
    arrows = [
        ("Q", "scores"),
        ("K", "scores"),
        ("scores", "scale"),
        ("scale", "mask"),
        ("mask", "softmax"),
        ("softmax", "mix"),
        ("V", "mix"),
        ("mix", "H"),
    ]
    for start, end in arrows:
        (x0, y0, _), (x1, y1, _) = boxes[start], boxes[end]
        ax.annotate(
            "",
            xy=(x1, y1 + 0.35),
            xytext=(x0, y0 - 0.35),
            arrowprops={"arrowstyle": "->", "color": "#333333", "lw": 1.2},
        )
    ax.set_xlim(-0.2, 5.4)
    ax.set_ylim(-0.8, 6.6)
    ax.axis("off")
    ax.set_title("Scaled dot-product attention, step by step")
    return ax
