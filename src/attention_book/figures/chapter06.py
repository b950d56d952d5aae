"""Chapter 6's figures: the encoder-decoder and its blocks, masks, gradient by depth, learning-rate
schedules and decoding attention.

Presentation only: the toy data are in :mod:`attention_book.data.tasks`, the gradient and
attention measurements in :mod:`attention_book.analysis`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import torch
from matplotlib.colors import ListedColormap
from matplotlib.patches import FancyBboxPatch

from ..analysis.formatting import to_numpy
from ..analysis.heads import decoding_attention
from ..analysis.plotting import plot_attention, seed_band
from ..data.tasks import PAD, Vocabulary
from ..transformer import EncoderDecoder

__all__ = [
    "plot_encoder_decoder_diagram",
    "plot_block_diagram",
    "plot_mask",
    "plot_gradient_by_depth",
    "plot_learning_rate_schedules",
    "plot_decoding_attention",
]


_BOX = {"attention": "#cfe2f3", "feed-forward": "#d9ead3", "layer norm": "#fce5cd"}


def _box(ax, y: float, label: str, kind: str) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (-0.9, y - 0.28), 1.8, 0.56, boxstyle="round,pad=0.02", facecolor=_BOX[kind], edgecolor="black", lw=1
        )
    )
    ax.text(0, y, label, ha="center", va="center", fontsize=9)


def _plus(ax, y: float) -> None:
    ax.plot([0], [y], marker="o", markersize=17, markerfacecolor="white", markeredgecolor="black", zorder=3)
    ax.text(0, y, "+", ha="center", va="center", fontsize=12, zorder=4)


def _arrow(ax, y0: float, y1: float, x: float = 0.0, color: str = "black", lw: float = 1.2) -> None:
    ax.annotate("", xy=(x, y1), xytext=(x, y0), arrowprops={"arrowstyle": "-|>", "color": color, "lw": lw})


def _skip(ax, y_from: float, y_to: float, color: str) -> None:
    """A residual connection: branch off at y_from, run up the right side, join the + at y_to."""
    ax.plot([0, 1.35, 1.35], [y_from, y_from, y_to], color=color, lw=2.2, solid_capstyle="round")
    ax.annotate("", xy=(0.2, y_to), xytext=(1.35, y_to), arrowprops={"arrowstyle": "-|>", "color": color, "lw": 2.2})


def plot_block_diagram():
    """Post-norm (left) and pre-norm (right) encoder blocks, drawn bottom to top. Returns the figure.

    The residual path (the "highway" that skips each sub-layer) is drawn in orange. In the
    post-norm block it runs *through* each layer norm; in the pre-norm block it never meets one.
    Both blocks fit side by side in :data:`~attention_book.analysis.plotting.PAGE_INCHES` with
    text of 9 pt and more (legible on a phone).
    """
    figure, axes = plt.subplots(1, 2, figsize=(6.0, 5.6))
    highway = "#e69f00"
    layouts = {
        "Post-norm\n(original Transformer, BERT)\nx = norm(x + sublayer(x))": [
            ("attention", "self-attention", 1.0),
            ("plus", None, 2.0),
            ("layer norm", "layer norm", 2.9),
            ("feed-forward", "feed-forward", 4.0),
            ("plus", None, 5.0),
            ("layer norm", "layer norm", 5.9),
        ],
        "Pre-norm\n(GPT-2 and most models since)\nx = x + sublayer(norm(x))": [
            ("layer norm", "layer norm", 1.0),
            ("attention", "self-attention", 2.0),
            ("plus", None, 3.0),
            ("layer norm", "layer norm", 4.0),
            ("feed-forward", "feed-forward", 5.0),
            ("plus", None, 6.0),
        ],
    }
    for ax, (title, parts) in zip(axes, layouts.items()):
        previous = 0.0
        ax.text(0, -0.15, "x  (batch, T, d_model)", ha="center", va="top", fontsize=9)
        branch = 0.45
        for kind, label, y in parts:
            _arrow(ax, previous + (0.28 if previous else 0.0), y - (0.2 if kind == "plus" else 0.28))
            if kind == "plus":
                _plus(ax, y)
                _skip(ax, branch, y, color=highway)
                branch = y + 0.45  # the next residual branches off just above this one
                previous = y - 0.08
            else:
                _box(ax, y, label, kind=kind)
                previous = y
            if kind == "layer norm" and parts[0][0] == "attention":  # post-norm: the next branch is after the norm
                branch = y + 0.5
        _arrow(ax, previous + 0.28, 6.9)
        ax.text(0, 6.95, "output  (batch, T, d_model)", ha="center", va="bottom", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_xlim(-1.3, 1.8)
        ax.set_ylim(-0.6, 7.5)
        ax.set_axis_off()
    figure.text(
        0.5,
        0.02,
        "orange: residual connections\n(each adds a sub-layer's output to its input)",
        ha="center",
        fontsize=9,
        color="#9a6a00",
    )
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    return figure


_PART = {"embed": "#e8e8e8", "attention": "#cfe2f3", "norm": "#fce5cd", "feed-forward": "#d9ead3", "output": "#ead1dc"}
_MASK_TEXT = "#7a1f1f"
_HIGHWAY = "#e69f00"


def _part(
    ax, x: float, y: float, width: float, label: str, kind: str, mask: str | None = None, height: float = 0.62
) -> None:
    """A rounded box centred at (x, y); a mask, if any, is named on a second line in dark red."""
    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.03",
            facecolor=_PART[kind],
            edgecolor="black",
            lw=1,
        )
    )
    if mask is None:
        ax.text(x, y, label, ha="center", va="center", fontsize=9)
    else:
        ax.text(x, y + 0.13, label, ha="center", va="center", fontsize=9)
        ax.text(x, y - 0.16, mask, ha="center", va="center", fontsize=9, color=_MASK_TEXT, style="italic")


def _up(ax, x: float, y0: float, y1: float) -> None:
    ax.annotate("", xy=(x, y1), xytext=(x, y0), arrowprops={"arrowstyle": "-|>", "color": "black", "lw": 1.1})


def _around(ax, x_centre: float, x_right: float, y_from: float, y_to: float, x_box_edge: float) -> None:
    """A residual connection: branches off the main path below a sub-layer, runs up its right side into add & norm."""
    ax.plot([x_centre], [y_from], marker="o", markersize=4, color=_HIGHWAY, zorder=3)
    ax.plot([x_centre, x_right, x_right], [y_from, y_from, y_to], color=_HIGHWAY, lw=2, solid_capstyle="round")
    ax.annotate(
        "", xy=(x_box_edge, y_to), xytext=(x_right, y_to), arrowprops={"arrowstyle": "-|>", "color": _HIGHWAY, "lw": 2}
    )


# (height, label, kind, mask) of each part of a block, bottom to top.
_ENCODER_PARTS = [
    (2.55, "multi-head self-attention", "attention", "source padding"),
    (3.55, "add & layer norm", "norm", None),
    (4.55, "feed-forward (per token)", "feed-forward", None),
    (5.55, "add & layer norm", "norm", None),
]
_DECODER_PARTS = [
    (2.55, "masked self-attention", "attention", "causal + target padding"),
    (3.55, "add & layer norm", "norm", None),
    (4.55, "cross-attention", "attention", "source padding"),
    (5.55, "add & layer norm", "norm", None),
    (6.55, "feed-forward (per token)", "feed-forward", None),
    (7.55, "add & layer norm", "norm", None),
]


def _stack(ax, centre: float, parts, *, top: float, width: float) -> None:
    """One stack: a dashed frame marked "x N" above its right corner, each part with the arrow into it,
    each residual connection."""
    left, right = centre - width / 2 - 0.2, centre + width / 2 + 0.5
    ax.add_patch(
        FancyBboxPatch(
            (left, 1.95),
            right - left,
            top - 1.95,
            boxstyle="round,pad=0.05",
            facecolor="none",
            edgecolor="#666666",
            lw=1.2,
            linestyle="--",
        )
    )
    ax.text(right, top + 0.12, "\u00d7 N", ha="right", va="bottom", fontsize=11, fontweight="bold")
    previous = 1.2
    for y, label, kind, mask in parts:
        _up(ax, centre, y0=previous + 0.31, y1=y - 0.31)
        _part(ax, centre, y, width=width, label=label, kind=kind, mask=mask)
        if kind == "norm":  # the residual joins here, from below the sub-layer before it
            _around(ax, centre, centre + width / 2 + 0.28, y_from=y - 1.5, y_to=y, x_box_edge=centre + width / 2)
        previous = y


def _memory(ax, enc: float, dec: float, width: float) -> None:
    """The encoder's output, the memory, going to the keys and values of every decoder block's cross-attention."""
    _up(ax, enc, y0=6.2, y1=6.5)
    ax.text(enc, 6.95, "memory", ha="center", va="center", fontsize=9, fontweight="bold")
    ax.text(enc, 6.68, "(batch, T_in, d_model)", ha="center", va="center", fontsize=9)
    bend = enc + width / 2 + 0.82  # between the encoder's frame and the decoder's
    ax.plot([enc + 1.2, bend, bend], [6.8, 6.8, 4.55], color="#3465a4", lw=2)
    arrow = {"arrowstyle": "-|>", "color": "#3465a4", "lw": 2}
    ax.annotate("", xy=(dec - width / 2, 4.55), xytext=(bend, 4.55), arrowprops=arrow)
    ax.text(bend + 0.06, 5.75, "keys and values", ha="left", va="center", rotation=90, fontsize=9, color="#3465a4")
    ax.text(dec - 0.12, 4.05, "queries", ha="right", va="center", fontsize=9)


def _decoder_ends(ax, dec: float, width: float) -> None:
    """The decoder's input (the output so far, shifted right) and its output (next-token probabilities)."""
    shifted = "output so far, shifted right:\n<bos> y\u2081 \u2026  (batch, T_out)"
    ax.text(dec, 0.2, shifted, ha="center", va="center", fontsize=9, linespacing=1.3)
    _up(ax, dec, y0=0.52, y1=0.9)
    _part(ax, x=dec, y=1.2, width=width, label="token embedding + positions", kind="embed")
    _up(ax, dec, y0=7.86, y1=8.55)
    _part(ax, x=dec, y=8.85, width=width, label="linear: d_model \u2192 vocabulary", kind="output")
    _up(ax, dec, y0=9.16, y1=9.55)
    _part(ax, x=dec, y=9.85, width=width, label="softmax", kind="output")
    _up(ax, dec, y0=10.16, y1=10.5)
    ax.text(dec, 10.75, "next-token probabilities  (batch, T_out, vocab)", ha="center", va="center", fontsize=9)


def plot_encoder_decoder_diagram():
    """The whole encoder-decoder Transformer (post-norm, as in the 2017 paper and this chapter's model).

    Encoder stack on the left, decoder stack on the right, drawn bottom to top; each stack
    repeats its block N times. Attention boxes name the mask they use (dark red);
    orange lines are residual connections; the encoder's output (the memory) feeds the
    keys and values of every decoder block's cross-attention. The figure is
    :data:`~attention_book.analysis.plotting.PAGE_INCHES` wide with text of 9 pt and more
    (legible on a phone). Returns the figure.
    """
    figure, ax = plt.subplots(figsize=(6.0, 7.6))
    width, enc, dec = 3.3, 1.9, 6.67
    # Encoder: embedding, then N blocks of self-attention and feed-forward.
    ax.text(enc, 0.25, "source tokens  (batch, T_in)", ha="center", va="center", fontsize=9)
    _up(ax, enc, y0=0.45, y1=0.9)
    _part(ax, x=enc, y=1.2, width=width, label="token embedding + positions", kind="embed")
    _stack(ax, enc, _ENCODER_PARTS, top=6.1, width=width)
    _stack(ax, dec, _DECODER_PARTS, top=8.1, width=width)
    _memory(ax, enc, dec, width=width)
    _decoder_ends(ax, dec, width)
    ax.text(enc, 7.45, "ENCODER", ha="center", va="center", fontsize=11, fontweight="bold")
    ax.text(dec, 11.3, "DECODER", ha="center", va="center", fontsize=11, fontweight="bold")
    legend = (
        "orange: residual connections\n(each adds a sub-layer's input\nto its output)\n\n"
        "dark red, in italics: the mask\neach attention uses\n(True = may attend)"
    )
    ax.text(0.1, 10.6, legend, ha="left", va="top", fontsize=9, color="#444444")
    ax.set_xlim(0.0, 9.0)
    ax.set_ylim(-0.3, 11.6)
    ax.set_axis_off()
    figure.tight_layout()
    return figure


_MASK_CMAP = ListedColormap(["#f0f0f0", "#3b528b"])


def plot_mask(
    mask: torch.Tensor,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
):
    """Draw a boolean (T_q, T_k) mask: dark = may attend (True), light = masked (False). Returns the axes."""
    matrix = to_numpy(torch.as_tensor(mask).to(torch.float32))
    if matrix.ndim != 2:
        raise ValueError(f"mask must be a (T_q, T_k) matrix, but has shape {matrix.shape}")
    rows, columns = matrix.shape
    query_labels = [str(i) for i in range(rows)] if query_labels is None else list(query_labels)
    key_labels = [str(j) for j in range(columns)] if key_labels is None else list(key_labels)
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.4 * columns, 0.8 + 0.4 * rows))
    ax.imshow(matrix, cmap=_MASK_CMAP, vmin=0, vmax=1, aspect="auto")
    for i in range(rows):
        for j in range(columns):
            ax.text(
                j,
                i,
                "\u2713" if matrix[i, j] else "\u00d7",
                ha="center",
                va="center",
                fontsize=9,
                color="white" if matrix[i, j] else "#888888",
            )
    ax.set_xticks(range(columns), key_labels, rotation=90 if max(map(len, key_labels), default=0) > 2 else 0)
    ax.set_yticks(range(rows), query_labels)
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries (attending)")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


# ---------------------------------------------------------------------------------
# Post-norm against pre-norm: how much gradient reaches the bottom of the stack


def plot_gradient_by_depth(depths: Sequence[int], post_norm: Sequence, pre_norm: Sequence, ax=None):
    """Gradient norm at the bottom of the stack against depth, one line per block type. Returns the axes.

    ``post_norm`` and ``pre_norm`` hold one entry per depth: a number, or the values of several
    seeds, drawn by seaborn (:func:`~attention_book.analysis.plotting.seed_band`) as their mean
    (line) and range (shaded band).
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 3.8))
    ax.set_xscale("log", base=2)
    top = 0.0
    for values, marker, colour, label in (
        (post_norm, "o", "#d55e00", "post-norm: norm(x + sublayer(x))"),
        (pre_norm, "s", "#0072b2", "pre-norm: x + sublayer(norm(x))"),
    ):
        rows = [[float(v)] if isinstance(v, (int, float)) else [float(x) for x in v] for v in values]
        if len({len(r) for r in rows}) != 1:
            raise ValueError(f"every depth needs the same number of seeds, but got {[len(r) for r in rows]}")
        seeds = len(rows[0])
        label += f", mean of {seeds} seeds" if seeds > 1 else ""
        seed_band(ax, depths, [list(run) for run in zip(*rows)], label=label, colour=colour, marker=marker)
        top = max(top, max(max(r) for r in rows))
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(depths), [str(d) for d in depths])
    ax.set_ylim(0, top * 1.15)
    ax.set_xlabel("number of layers in the stack")
    ax.set_ylabel("gradient norm at the bottom")
    ax.set_title(
        "How much gradient reaches the first layer (at initialisation)\nshaded: range over the seeds", fontsize=10
    )
    ax.legend(fontsize=9, loc="lower left")
    ax.figure.tight_layout()
    return ax


def plot_learning_rate_schedules(used: Sequence[float], original: Sequence[float], warmup: int, d_model: int = 512):
    """Top: the learning rate of each step of one of this chapter's runs. Bottom: the 2017 schedule.

    ``original`` is lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) for steps 1, 2, ...
    One above the other, so each keeps the page's width (and its text 9 pt and more) on a phone.
    Returns the figure.
    """
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(6.0, 5.4))
    top.plot(range(1, len(used) + 1), used, color="#0072b2")
    top.set_title(
        'this chapter: linear warm-up, linear decay\n(ab.fit(schedule="linear"), the sorting run)', fontsize=10
    )
    top.set_xlabel("step")
    top.set_ylabel("learning rate")
    bottom.set_ylabel("learning rate")
    bottom.plot(range(1, len(original) + 1), original, color="#d55e00")
    bottom.axvline(warmup, color="#888888", lw=1, linestyle="--")
    bottom.text(warmup * 1.15, max(original) * 0.95, f"warmup = {warmup:,d}", fontsize=9, va="top", color="#555555")
    bottom.set_title(f"2017 Transformer: inverse square root\n(d_model = {d_model}, warmup = {warmup:,d})", fontsize=10)
    bottom.set_xlabel("step")
    for ax in (top, bottom):
        ax.set_ylim(0, None)
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------
# Greedy decoding with its attention weights


def plot_decoding_attention(
    model: EncoderDecoder,
    source: torch.Tensor,
    vocab: Vocabulary,
    layer: int = -1,
    title: str | None = None,
):
    """Cross-attention (and causal self-attention) of a whole greedy decoding, averaged over heads.

    Rows are the decoding steps, labelled "fed token -> written token". The cross-attention is
    drawn above the self-attention, each as wide as the page allows, so that the weights
    written in the cells stay legible on a phone. Returns the figure.
    """
    if source.dim() == 1:
        source = source[None]
    real = source[0] != PAD
    source = source[:, real]
    found = decoding_attention(model, source)
    source_labels = vocab.decode(source[0], strip=False)
    written = [vocab.tokens[i] for i in found["output"].tolist()]
    fed = [vocab.tokens[i] for i in found["decoder_in"].tolist()]
    rows = [f"{a} \u2192 {b}" for a, b in zip(fed, written)]
    cross = found["cross_attention"][layer].mean(0)  # (L, T_in): averaged over heads
    causal = found["self_attention"][layer].mean(0)  # (L, L)
    cell = min(0.42, 3.6 / max(len(source_labels), len(fed)))  # inches per cell: at most 5.2 in wide
    figure, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(1.6 + cell * max(len(source_labels), len(fed)), 2.2 + 2 * cell * len(rows)),
        gridspec_kw={"height_ratios": [1, 1]},
    )
    plot_attention(cross, rows, source_labels, ax=top, title="cross-attention to the source", colorbar=False)
    top.set_xlabel("source tokens (keys)")
    top.set_ylabel("step: fed \u2192 written")
    plot_attention(causal, rows, fed, ax=bottom, title="causal self-attention", colorbar=False)
    bottom.set_xlabel("tokens fed so far (keys)")
    bottom.set_ylabel("step: fed \u2192 written")
    for ax, columns in ((top, len(source_labels)), (bottom, len(fed))):
        ax.set_aspect("equal")  # square cells in both maps, whatever their number of columns
        ax.set_xlim(-0.5, columns - 0.5)
    layer_name = f"layer {layer % len(found['cross_attention'])}"
    figure.suptitle(
        title or f"Greedy decoding of {' '.join(source_labels)}\n({layer_name}, average of the heads)", fontsize=10
    )
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------
# Encoder-only: toy reviews with a [CLS] token

# ---------------------------------------------------------------------------------
# Decoder-only: a character-level corpus of English number names
