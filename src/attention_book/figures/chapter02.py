"""Chapter 2's figures: the two attention maps of the recall model, and its lookups one above the other.

Both are narrow enough (about 5 in) that the weights written in the cells stay legible on a
390 px phone.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import torch

from ..analysis.heads import attention_maps
from ..analysis.plotting import plot_attention
from ..data.tasks import Vocabulary
from ..recall import RecallModel

__all__ = ["plot_recall_attention", "plot_lookups"]


def plot_recall_attention(model: RecallModel, tokens: torch.Tensor, vocab: Vocabulary, title: str | None = None):
    """Both attention maps of one example (tokens of shape (T,)): binding (T x T) and lookup (1 x T).

    Returns the matplotlib figure.
    """
    binding, lookup = attention_maps(model, tokens[None])
    labels = [vocab.tokens[i] for i in tokens.tolist()]
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(5.0, 7.0), gridspec_kw={"height_ratios": [len(labels), 1.6]}, layout="constrained"
    )
    plot_attention(
        binding[0], labels, labels, ax=top, title="Layer 1 (binding):\neach token reads itself and the token before"
    )
    plot_attention(
        lookup,
        [f"{labels[-1]} asks"],
        labels,
        ax=bottom,
        colorbar=False,
        title=f"Layer 2 (lookup):\nthe asked key '{labels[-1]}' reads the store",
    )
    bottom.set_ylabel("query")
    if title:
        figure.suptitle(title)
    return figure


def plot_lookups(model: RecallModel, tokens: torch.Tensor, vocab: Vocabulary, title: str | None = None):
    """The lookup row (the last token's weights over all tokens) of several examples, one per panel.

    ``tokens``: (examples, T). Returns the matplotlib figure.
    """
    _, lookup = attention_maps(model, tokens)  # (examples, T)
    count = len(tokens)
    figure, axes = plt.subplots(count, 1, figsize=(5.0, 0.7 + 0.95 * count), layout="constrained", squeeze=False)
    for ax, row, weights in zip(axes[:, 0], tokens, lookup):
        labels = [vocab.tokens[i] for i in row.tolist()]
        plot_attention(weights, [f"{labels[-1]} asks"], labels, ax=ax, colorbar=False)
        ax.set_xlabel("")
        ax.set_ylabel("")
    axes[-1, 0].set_xlabel("keys: the tokens of each sequence")
    figure.supylabel("query: the asked key", fontsize=10)
    figure.colorbar(axes[0, 0].images[0], ax=axes[:, 0].tolist(), fraction=0.04, pad=0.02, label="attention weight")
    figure.suptitle(title or "Where the asked key looks, in held-out sequences", wrap=True)
    return figure
