"""Chapter 6's figures: post-norm and pre-norm blocks, masks, gradient by depth, and decoding attention.

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
from ..analysis.plotting import plot_attention
from ..data.tasks import PAD, Vocabulary
from ..transformer import EncoderDecoder

__all__ = [
    "plot_block_diagram",
    "plot_mask",
    "plot_gradient_by_depth",
    "plot_decoding_attention",
]


_BOX = {"attention": "#cfe2f3", "feed-forward": "#d9ead3", "layer norm": "#fce5cd"}


def _box(ax, y: float, label: str, kind: str) -> None:
    ax.add_patch(
        FancyBboxPatch((-0.9, y - 0.28), 1.8, 0.56, boxstyle="round,pad=0.02", facecolor=_BOX[kind], edgecolor="black", lw=1)
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
    """
    figure, axes = plt.subplots(1, 2, figsize=(8.4, 5.4))
    highway = "#e69f00"
    layouts = {
        "Post-norm (original Transformer, BERT)\nx = norm(x + sublayer(x))": [
            ("attention", "multi-head self-attention", 1.0),
            ("plus", None, 2.0),
            ("layer norm", "layer norm", 2.9),
            ("feed-forward", "position-wise feed-forward", 4.0),
            ("plus", None, 5.0),
            ("layer norm", "layer norm", 5.9),
        ],
        "Pre-norm (GPT-2 and most models since)\nx = x + sublayer(norm(x))": [
            ("layer norm", "layer norm", 1.0),
            ("attention", "multi-head self-attention", 2.0),
            ("plus", None, 3.0),
            ("layer norm", "layer norm", 4.0),
            ("feed-forward", "position-wise feed-forward", 5.0),
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
                _skip(ax, branch, y, highway)
                branch = y + 0.45  # the next residual branches off just above this one
                previous = y - 0.08
            else:
                _box(ax, y, label, kind)
                previous = y
            if kind == "layer norm" and parts[0][0] == "attention":  # post-norm: the next branch is after the norm
                branch = y + 0.5
        _arrow(ax, previous + 0.28, 6.9)
        ax.text(0, 6.95, "output  (batch, T, d_model)", ha="center", va="bottom", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_xlim(-1.3, 1.8)
        ax.set_ylim(-0.6, 7.5)
        ax.set_axis_off()
    figure.text(0.5, 0.02, "orange: residual connections (each adds a sub-layer's output to its input)", ha="center", fontsize=9, color="#9a6a00")
    figure.tight_layout(rect=(0, 0.04, 1, 1))
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
            ax.text(j, i, "\u2713" if matrix[i, j] else "\u00d7", ha="center", va="center", fontsize=8,
                    color="white" if matrix[i, j] else "#888888")
    ax.set_xticks(range(columns), key_labels, rotation=90 if max(map(len, key_labels), default=0) > 2 else 0)
    ax.set_yticks(range(rows), query_labels)
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries (attending)")
    if title:
        ax.set_title(title, fontsize=10)
    return ax


# ---------------------------------------------------------------------------------
# Post-norm against pre-norm: how much gradient reaches the bottom of the stack


def plot_gradient_by_depth(depths: Sequence[int], post_norm: Sequence[float], pre_norm: Sequence[float], ax=None):
    """Gradient norm at the bottom of the stack against depth, one line per block type. Returns the axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2))
    ax.plot(depths, post_norm, "o-", color="#d55e00", label="post-norm: norm(x + sublayer(x))")
    ax.plot(depths, pre_norm, "s-", color="#0072b2", label="pre-norm: x + sublayer(norm(x))")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(depths), [str(d) for d in depths])
    ax.set_ylim(0, max(max(post_norm), max(pre_norm)) * 1.15)
    ax.set_xlabel("number of layers in the stack")
    ax.set_ylabel("gradient norm at the bottom")
    ax.set_title("How much gradient reaches the first layer (at initialisation)", fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    ax.figure.tight_layout()
    return ax


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

    Rows are the decoding steps, labelled "fed token -> written token". Returns the figure.
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
    figure, (left, right) = plt.subplots(
        1, 2, figsize=(3.2 + 0.55 * (len(source_labels) + len(fed)), 1.4 + 0.42 * len(rows)),
        gridspec_kw={"width_ratios": [len(source_labels), len(fed)]},
    )
    plot_attention(cross, rows, source_labels, ax=left, title="cross-attention to the source", colorbar=False)
    left.set_xlabel("source tokens (keys)")
    left.set_ylabel("decoding step: fed \u2192 written")
    plot_attention(causal, rows, fed, ax=right, title="causal self-attention", colorbar=False)
    right.set_xlabel("tokens fed so far (keys)")
    right.set_ylabel("")
    right.set_yticks(range(len(rows)), [""] * len(rows))
    layer_name = f"layer {layer % len(found['cross_attention'])}"
    figure.suptitle(title or f"Greedy decoding of {' '.join(source_labels)} ({layer_name}, average of the heads)", fontsize=10)
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------
# Encoder-only: toy reviews with a [CLS] token

# ---------------------------------------------------------------------------------
# Decoder-only: a character-level corpus of English number names
