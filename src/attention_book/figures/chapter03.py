"""Chapter 3's figures: weight bars, sparsemax's threshold, the beta sweep, hard attention's flat gradient, losses.

Presentation only: chapter 3 computes every number it plots in its own cells. Every figure is
at most :data:`~attention_book.analysis.plotting.PAGE_INCHES` wide with no text under 9 pt, so
it stays legible on a 390 px phone; figures of several panels stack them in one column, over a
shared x axis. All are drawn with matplotlib: they show exact, deterministic curves (no seeds,
so nothing for seaborn's statistics to summarise), and the heatmaps are the book's one heatmap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from ..analysis.formatting import format_weight, to_numpy
from ..analysis.plotting import ATTENTION_CMAP, PAGE_INCHES, plot_attention

__all__ = [
    "plot_weight_bars",
    "plot_threshold",
    "plot_beta_sweep",
    "plot_weight_against_score",
    "plot_losses",
    "plot_simplex_paths",
    "plot_weight_maps",
    "METHOD_COLOURS",
    "METHOD_STYLES",
]


_WIDTH = PAGE_INCHES  # the width of every figure drawn here (issue 29: legible on a phone)

# One colour per way of turning scores into weights, used by every line plot of the chapter
# (colour-blind-safe choices from matplotlib's "tab10"; the bar charts use ATTENTION_CMAP).
METHOD_COLOURS = {"softmax": "#1f77b4", "sparsemax": "#ff7f0e", "hardmax": "#2ca02c", "top-k": "#9467bd"}
METHOD_STYLES = {"softmax": "-", "sparsemax": "--", "hardmax": ":", "top-k": "-."}


def _colour(name: str) -> str:
    return METHOD_COLOURS.get(name.split("(")[0].strip().split()[0], "#555555")


def _style(name: str) -> str:
    return METHOD_STYLES.get(name.split("(")[0].strip().split()[0], "-")


def plot_weight_bars(
    weights: Mapping[str, object],
    labels: Sequence[str],
    title: str | None = None,
    panel_height: float = 1.75,
):
    """One bar chart per weight vector, one above the other, over the same keys. Returns the figure.

    Args:
        weights: panel title -> a weight vector of shape (n,) (tensor, array or list).
        labels: the n key labels (tokens), written under the bars of the lowest panel.
        title: a title over all panels.
        panel_height: height of one panel in inches (every panel is _WIDTH wide).

    Each bar is coloured by its weight with the book's attention colour map and labelled with
    its value (``0`` when exactly zero); each panel's title gives the L0 "norm" (how many
    weights are non-zero) and the L1 norm (their sum).
    """
    rows = {name: to_numpy(vector).reshape(-1) for name, vector in weights.items()}
    if not rows:
        raise ValueError("weights is empty; give at least one weight vector")
    labels = [str(label) for label in labels]
    for name, row in rows.items():
        if len(row) != len(labels):
            raise ValueError(f"the weights {name!r} have {len(row)} entries but {len(labels)} labels were given")
    colour_map = matplotlib.colormaps[ATTENTION_CMAP]
    # One column of panels sharing the keys' axis: at most _WIDTH wide however many
    # weightings there are (side by side, three panels would shrink to illegible on a phone).
    figure, axes = plt.subplots(
        len(rows),
        1,
        figsize=(_WIDTH, 0.7 + panel_height * len(rows)),
        sharex=True,
        sharey=True,
        layout="constrained",
        squeeze=False,
    )
    positions = np.arange(len(labels))
    for ax, (name, row) in zip(axes[:, 0], rows.items()):
        ax.bar(positions, row, color=colour_map(row), edgecolor="black", linewidth=0.7)
        for position, weight in zip(positions, row):
            ax.text(position, weight + 0.03, format_weight(weight), ha="center", va="bottom", fontsize=9)
        l0 = int((row != 0).sum())
        l1 = float(np.abs(row).sum())
        ax.set_title(f"{name}:  $L_0$ = {l0},  $L_1$ = {l1:.2f}", fontsize=10)
        ax.set_ylim(0, 1.3)
        ax.set_yticks([0, 0.5, 1])
    wide = sum(map(len, labels)) > 8 * len(labels)  # only long labels need turning
    axes[-1, 0].set_xticks(positions, labels, rotation=45 if wide else 0)
    axes[-1, 0].set_xlabel("keys")
    figure.supylabel("attention weight", fontsize=10)
    if title:
        figure.suptitle(title)
    return figure


def plot_threshold(scores, threshold: float, labels: Sequence[str], title: str | None = None, ax=None):
    """Sparsemax as a picture: the scores as bars, the threshold theta as a line; the part of each
    bar above the line is that key's weight, and keys whose score is below the line get 0.

    Args:
        scores: (n,) scores.
        threshold: theta, so that the parts above it sum to 1.
        labels: n key labels.
        title: the axes title.
        ax: axes to draw into (a new figure if None). Returns the axes.
    """
    scores = to_numpy(scores).reshape(-1)
    labels = [str(label) for label in labels]
    if len(labels) != len(scores):
        raise ValueError(f"{len(scores)} scores but {len(labels)} labels were given")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2), layout="constrained")
    positions = np.arange(len(scores))
    above = np.clip(scores - threshold, 0.0, None)
    colour_map = matplotlib.colormaps[ATTENTION_CMAP]
    ax.bar(positions, scores, color="#dddddd", edgecolor="black", linewidth=0.7, label="score $s_j$")
    ax.bar(
        positions,
        above,
        bottom=threshold,
        color=colour_map(0.75),
        edgecolor="black",
        linewidth=0.7,
        label=r"weight $p_j = \max(s_j - \theta, 0)$",
    )
    ax.axhline(threshold, color="#d62728", linewidth=1.4)
    ax.text(-0.45, threshold + 0.03, rf"$\theta$ = {threshold:.2f}", color="#d62728", va="bottom", ha="left")
    for position, score, weight in zip(positions, scores, above):
        top = score if weight > 0 else max(score, 0.0)  # just above the bar (or above 0 for a negative score)
        ax.text(position, top + 0.05, f"p = {format_weight(weight)}", ha="center", va="bottom", fontsize=9)
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_xticks(positions, labels)
    ax.set_xlabel("keys")
    ax.set_ylabel("score")
    ax.set_ylim(min(0.0, scores.min()) - 0.3, max(scores.max(), threshold) + 0.6)
    ax.legend(fontsize=9, loc="upper right")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_beta_sweep(
    betas,
    entropies: Mapping[str, object],
    nonzero: Mapping[str, object],
    num_keys: int,
    marks: Sequence[float] = (),
    title: str | None = None,
):
    """Entropy (top) and number of non-zero weights (bottom) against beta on a log axis.

    Args:
        betas: (m,) inverse temperatures, increasing.
        entropies: method name -> (m,) entropy in nats at each beta.
        nonzero: method name -> (m,) number of non-zero weights at each beta.
        num_keys: n, for the reference lines ln n (uniform) and n (every key).
        marks: betas to mark with thin dotted vertical lines, each labelled with its value.
        title: a title over both panels.
    """
    betas = to_numpy(betas).reshape(-1)
    # Two panels in one column over the shared beta axis (side by side they were too small on a phone).
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(_WIDTH, 5.8), sharex=True, layout="constrained")
    for name, values in entropies.items():
        top.plot(betas, to_numpy(values), _style(name), color=_colour(name), label=name, linewidth=1.8)
    top.axhline(math.log(num_keys), color="grey", linewidth=0.8)
    # Under the line at the right, where the curves have fallen away from it (above it, at the
    # left, the label ran into the panel's title).
    top.text(
        betas[-1],
        math.log(num_keys),
        f"uniform: ln {num_keys} = {math.log(num_keys):.2f} ",
        va="top",
        ha="right",
        fontsize=9,
    )
    top.set_ylim(-0.05, math.log(num_keys) * 1.12)
    top.axhline(0.0, color="grey", linewidth=0.8)
    top.set_ylabel("entropy (nats)")
    top.set_title("Entropy: spread of the weights", fontsize=10)
    for name, values in nonzero.items():
        bottom.step(betas, to_numpy(values), _style(name), where="post", color=_colour(name), label=name, linewidth=1.8)
    bottom.set_ylim(0, num_keys + 0.6)
    bottom.set_yticks(range(0, num_keys + 1))
    bottom.set_ylabel("non-zero weights ($L_0$)")
    bottom.set_title("How many keys get any weight", fontsize=10)
    bottom.set_xlabel(r"inverse temperature $\beta$ (log scale)")
    for ax in (top, bottom):
        ax.set_xscale("log")
        for mark in marks:
            ax.axvline(mark, color="grey", linewidth=0.8, linestyle=":")
            ax.annotate(
                f"β = {mark:g}",
                (mark, 0.5),
                xycoords=("data", "axes fraction"),
                xytext=(3, 0),
                textcoords="offset points",
                rotation=90,
                va="center",
                fontsize=9,
                color="dimgrey",
            )
        ax.legend(fontsize=9, loc="center right")
    if title:
        figure.suptitle(title)
    return figure


def plot_weight_against_score(
    grid,
    weights: Mapping[str, object],
    slopes: Mapping[str, object],
    key_label: str,
    jumps: Mapping[str, float] | None = None,
    title: str | None = None,
):
    """One key's weight (top) and its slope d weight / d score (bottom) as its score varies.

    Args:
        grid: (m,) values of the key's score.
        weights: method name -> (m,) weight of the key at each score.
        slopes: method name -> (m,) derivative of that weight with respect to the score.
        key_label: the key's name, for the axis labels.
        jumps: method name -> score where its weight jumps (drawn as a dashed vertical line on
            the slope panel: the derivative is undefined there).
        title: a title over both panels.
    """
    grid = to_numpy(grid).reshape(-1)
    # Two panels in one column over the shared score axis (side by side they were too small on a phone).
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(_WIDTH, 5.8), sharex=True, layout="constrained")
    for name, values in weights.items():
        top.plot(grid, to_numpy(values), _style(name), color=_colour(name), label=name, linewidth=1.8)
    for name, values in slopes.items():
        bottom.plot(grid, to_numpy(values), _style(name), color=_colour(name), label=name, linewidth=1.8)
    for name, where in (jumps or {}).items():
        bottom.axvline(where, color=_colour(name), linestyle="--", linewidth=0.8)
        bottom.annotate(
            f"{name}: a jump,\nno derivative",
            (where, 0.72),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=9,
            color=_colour(name),
            ha="left",
            va="center",
            xycoords=("data", "axes fraction"),
        )
    top.set_ylabel(f"weight of '{key_label}'")
    top.set_ylim(-0.05, 1.05)
    top.set_title("The weight as the score moves", fontsize=10)
    bottom.set_ylabel("d weight / d score")
    bottom.set_title("Its slope: what gradient descent sees", fontsize=10)
    bottom.set_xlabel(f"score of '{key_label}' (other scores fixed)")
    for ax in (top, bottom):
        ax.legend(fontsize=9, loc="upper left")
    if title:
        figure.suptitle(title)
    return figure


def plot_losses(runs: Mapping[str, Mapping[str, Sequence[float]]], title: str | None = None):
    """Training-loss curves: one panel per run (e.g. a starting point), one above the other, one line per method.

    Args:
        runs: panel title -> (method name -> loss at every step).
        title: a title over all panels.
    """
    # One column of panels over the shared step axis, _WIDTH wide however many runs there are.
    figure, axes = plt.subplots(
        len(runs),
        1,
        figsize=(_WIDTH, 0.8 + 2.3 * len(runs)),
        sharex=True,
        sharey=True,
        layout="constrained",
        squeeze=False,
    )
    for ax, (panel, curves) in zip(axes[:, 0], runs.items()):
        for name, losses in curves.items():
            ax.plot(
                np.arange(len(losses)),
                np.asarray(losses, dtype=float),
                _style(name),
                color=_colour(name),
                label=name,
                linewidth=1.8,
            )
        ax.set_title(panel, fontsize=10)
        ax.set_ylabel("loss (squared error)")
        ax.legend(fontsize=9, loc="center right")
    axes[-1, 0].set_xlabel("gradient-descent step")
    if title:
        figure.suptitle(title)
    return figure


def plot_simplex_paths(paths: Mapping[str, object], key_labels: Sequence[str], ax=None, title: str | None = None):
    """Weight vectors over three keys as points of the probability triangle, one path per method.

    ``paths`` maps a method's name to a (steps, 3) tensor of weights, e.g. softmax(beta * s) for
    increasing beta. Each corner is one key (all the weight on it), each edge the weights that
    leave out the opposite key, the centre the uniform weights.
    """
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, math.sqrt(3) / 2]])  # (3, 2)
    if len(key_labels) != 3:
        raise ValueError(f"the triangle has 3 corners, but {len(key_labels)} key labels were given")
    if ax is None:
        _, ax = plt.subplots(figsize=(4.8, 4.4), layout="constrained")
    ax.add_patch(plt.Polygon(corners, closed=True, facecolor="#f4f4f4", edgecolor="#777777"))
    for corner, label, offset in zip(corners, key_labels, ((-6, -12), (6, -12), (0, 8))):
        ax.annotate(
            f"all on {label}",
            corner,
            xytext=offset,
            textcoords="offset points",
            fontsize=9,
            ha="right" if offset[0] < 0 else "left" if offset[0] > 0 else "center",
        )
    ax.plot(*corners.mean(axis=0), "k+", markersize=8)
    ax.annotate("uniform", corners.mean(axis=0), xytext=(5, -10), textcoords="offset points", fontsize=9)
    for name, weights in paths.items():
        weights = to_numpy(weights).reshape(-1, 3)
        if not np.allclose(weights.sum(axis=1), 1.0, atol=1e-6):
            raise ValueError(f"every row of {name!r} must sum to 1 (weights over three keys)")
        points = weights @ corners  # (steps, 2)
        ax.plot(points[:, 0], points[:, 1], _style(name), color=_colour(name), label=name, linewidth=2)
    ax.set_aspect("equal")
    ax.set_xlim(-0.25, 1.25)
    ax.set_ylim(-0.15, 1.0)
    ax.axis("off")
    ax.legend(fontsize=9, loc="upper right")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def plot_weight_maps(maps: Mapping[str, object], labels: Sequence[str], title: str | None = None):
    """Several (T, T) weight matrices over the same tokens as heatmaps, two to a row. Returns the figure.

    Args:
        maps: panel title -> a (T, T) weight matrix (rows: queries, columns: keys).
        labels: the T token labels, for the rows and the columns alike.
        title: a title over all panels.

    Each map is the book's :func:`~attention_book.analysis.plotting.plot_attention` on the
    scale 0 to 1, with its weights written in the cells; the token labels are written once per
    row and column of panels, and one colour bar serves them all.
    """
    if not maps:
        raise ValueError("maps is empty; give at least one weight matrix")
    columns = min(2, len(maps))
    rows = math.ceil(len(maps) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(_WIDTH, 0.6 + 2.9 * rows), layout="constrained", squeeze=False)
    for ax, (name, matrix) in zip(axes.flat, maps.items()):
        plot_attention(matrix, labels, labels, ax=ax, title=name, colorbar=False)
        for text in ax.texts:  # the weights in the cells: 9 pt keeps them legible on a phone
            text.set_fontsize(9)
        ax.set_title(name, fontsize=11)
        ax.label_outer()  # tokens and axis names once per row and column of panels
    for ax in axes.flat[len(maps) :]:
        ax.set_visible(False)
    figure.colorbar(axes[0, 0].images[0], ax=axes, shrink=0.7, label="attention weight")
    if title:
        figure.suptitle(title)
    return figure
