"""Chapter 5 helpers: the word-order task, its training loop glue, and the chapter's figures.

None of this is the lesson (the chapter writes that out); it keeps the chapter's cells short.

* :class:`WordOrderTask` is a seeded dataset in which only word order decides the label:
  each sequence holds the words ``deep`` and ``learning`` once, among filler words, and
  the label says which comes first. Sequences come in *twins*, the same words with
  ``deep`` and ``learning`` swapped and the opposite label, so a model that cannot see
  order scores exactly 50% on any set of twins.
* :func:`order_loss` and :func:`order_accuracy` are the loss and metric that
  :func:`~attention_book.fit` needs for it (they pass the padding mask to the model).
* :func:`best_invariant_accuracy` is the best accuracy any model that sees only the
  bag of tokens (the multiset) can reach on a labelled set: what is lost without order.
* :func:`position_candidates` tabulates simple position signals against the
  requirements of a good one; the ``plot_*`` functions draw the chapter's figures.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from .plotting import ATTENTION_CMAP, to_numpy
from .tasks import PAD, Vocabulary
from .training import History

__all__ = [
    "FILLER_WORDS",
    "WordOrderTask",
    "order_loss",
    "order_accuracy",
    "best_invariant_accuracy",
    "max_abs_difference",
    "plot_encoding_table",
    "plot_encoding_columns",
    "plot_similarity",
    "plot_order_training",
    "plot_accuracy_by_length",
    "plot_offset_scores",
]

FILLER_WORDS = ("we", "love", "study", "and", "it", "is", "fun", "now", "so", "much")
MARKED = ("deep", "learning")
LABELS = ("learning first", "deep first")  # label 1: "deep" comes before "learning"


class WordOrderTask(Dataset):
    """Sequences of filler words with ``deep`` and ``learning`` in them once each; which comes first?

    Args:
        num_samples: number of sequences; must be even, since they come in twins.
        min_len, max_len: lengths are drawn uniformly from ``[min_len, max_len]`` (at least 2).
        pad_to: width of the padded ``tokens`` tensor (default ``max_len``); use the
            longest length of all the sets a model will see, so their batches line up.
        seed: the same seed gives the same sequences.

    Items are dicts: ``tokens`` (pad_to,) ids padded with PAD, ``padding`` (pad_to,)
    True for real tokens, ``label`` (1 if ``deep`` comes first, else 0) and ``length``.
    Sequence ``2i + 1`` is the twin of sequence ``2i``: the same words with ``deep`` and
    ``learning`` swapped, and the opposite label.
    """

    def __init__(self, num_samples: int, min_len: int = 4, max_len: int = 8, pad_to: int | None = None, seed: int = 0):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 2 or num_samples % 2:
            raise ValueError(f"num_samples must be a positive even integer (sequences come in twins), but {num_samples!r} was given")
        if not (isinstance(min_len, int) and isinstance(max_len, int) and 2 <= min_len <= max_len):
            raise ValueError(f"need 2 <= min_len <= max_len (two marked words fit), but min_len={min_len!r} and max_len={max_len!r}")
        pad_to = max_len if pad_to is None else pad_to
        if not isinstance(pad_to, int) or pad_to < max_len:
            raise ValueError(f"pad_to must be an integer of at least max_len={max_len}, but {pad_to!r} was given")
        self.vocab = Vocabulary(MARKED + FILLER_WORDS)
        self.label_names = LABELS
        deep, learning = self.vocab.encode(list(MARKED)).tolist()
        first_filler = deep + 2
        generator = torch.Generator().manual_seed(seed)
        pairs = num_samples // 2
        lengths = torch.randint(min_len, max_len + 1, (pairs,), generator=generator)
        fillers = torch.randint(first_filler, first_filler + len(FILLER_WORDS), (pairs, pad_to), generator=generator)
        tokens = torch.full((num_samples, pad_to), PAD, dtype=torch.long)
        labels = torch.zeros(num_samples, dtype=torch.long)
        for i, length in enumerate(lengths.tolist()):
            where = torch.randperm(length, generator=generator)[:2].tolist()  # two distinct positions
            row = fillers[i, :length].clone()
            row[where[0]], row[where[1]] = deep, learning
            twin = row.clone()
            twin[where[0]], twin[where[1]] = learning, deep
            tokens[2 * i, :length], tokens[2 * i + 1, :length] = row, twin
            labels[2 * i] = int(where[0] < where[1])
            labels[2 * i + 1] = 1 - labels[2 * i]
        self.tokens = tokens  # (N, pad_to)
        self.padding = tokens != PAD  # (N, pad_to): True for real tokens
        self.labels = labels  # (N,)
        self.lengths = self.padding.sum(dim=1)  # (N,)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {
            "tokens": self.tokens[index],
            "padding": self.padding[index],
            "label": self.labels[index],
            "length": self.lengths[index],
        }

    def sentence(self, index: int) -> str:
        """The words of sequence ``index`` and its label, e.g. ``'we deep fun learning -> deep first'``."""
        words = self.vocab.decode(self.tokens[index])
        return f"{' '.join(words)} -> {self.label_names[int(self.labels[index])]}"


def order_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy of ``model(tokens, padding)`` (batch, 2) logits against the labels."""
    return F.cross_entropy(model(batch["tokens"], batch["padding"]), batch["label"])


def order_accuracy(model: nn.Module, batch: dict) -> tuple[int, int]:
    """(correct, total) of the model's predictions on a batch of :class:`WordOrderTask`."""
    predictions = model(batch["tokens"], batch["padding"]).argmax(dim=-1)
    return int((predictions == batch["label"]).sum()), len(predictions)


def best_invariant_accuracy(tokens: torch.Tensor, labels: torch.Tensor, padding: torch.Tensor | None = None) -> float:
    """The best accuracy a model that sees only the bag of tokens can reach on this labelled set.

    Sequences with the same multiset of tokens look identical to such a model, so it can
    at best give each multiset its most common label. ``tokens`` (N, T) ids, ``labels``
    (N,), ``padding`` (N, T) True for real tokens (default: every token is real).
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ValueError(f"tokens must be a (N, T) tensor of ids, but {getattr(tokens, 'shape', type(tokens).__name__)} was given")
    if not isinstance(labels, torch.Tensor) or labels.shape != tokens.shape[:1]:
        raise ValueError(f"labels must be a tensor of shape ({tokens.shape[0]},), one per sequence")
    if padding is None:
        padding = torch.ones_like(tokens, dtype=torch.bool)
    groups: dict[tuple, Counter] = defaultdict(Counter)
    for row, keep, label in zip(tokens.tolist(), padding.tolist(), labels.tolist()):
        bag = tuple(sorted(token for token, real in zip(row, keep) if real))
        groups[bag][label] += 1
    return sum(max(counts.values()) for counts in groups.values()) / len(labels)


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference between two tensors of the same shape, as a float."""
    return float((a.detach() - b.detach()).abs().max())


# ---------------------------------------------------------------------------------
# Figures


def plot_encoding_table(table, ax=None, title: str = "Sinusoidal positional encoding"):
    """Heatmap of a (positions, d_model) encoding table: rows = positions, columns = dimensions."""
    matrix = to_numpy(table)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 3.6), layout="constrained")
    image = ax.imshow(matrix, cmap=ATTENTION_CMAP, vmin=-1.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension (even: sin, odd: cos)")
    ax.set_ylabel("position p")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02, label="value")
    return ax


def plot_encoding_columns(table, columns: Sequence[int], ax=None, title: str = "Columns of the table"):
    """Selected columns of a (positions, d_model) table as curves against the position."""
    matrix = to_numpy(table)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 3.0), layout="constrained")
    positions = np.arange(matrix.shape[0])
    styles = ["-", "--", "-.", ":"]
    for n, column in enumerate(columns):
        kind = "sin" if column % 2 == 0 else "cos"
        ax.plot(positions, matrix[:, column], styles[n % len(styles)], marker="o", markersize=2.5,
                label=f"dimension {column} ({kind})")
    ax.set_xlabel("position p")
    ax.set_ylabel("value")
    ax.set_ylim(-1.15, 1.15)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return ax


def plot_similarity(matrix, ax=None, title: str = "Dot products of position vectors", label: str = "PE(i) · PE(j)"):
    """Heatmap of a (T, T) position-to-position matrix: rows and columns are positions."""
    values = to_numpy(matrix)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.6, 3.8), layout="constrained")
    image = ax.imshow(values, cmap=ATTENTION_CMAP, aspect="equal", interpolation="nearest")
    ax.set_xlabel("position j")
    ax.set_ylabel("position i")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=label)
    return ax


def plot_order_training(histories: Mapping[str, History], steps_per_epoch: int, title: str = "Which word comes first"):
    """Two panels: training loss per step and held-out accuracy per epoch, one line per model."""
    figure, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.4), layout="constrained")
    styles = ["-", "--", "-.", ":"]
    for n, (name, history) in enumerate(histories.items()):
        losses = np.asarray(history.step_loss)
        window = max(1, min(10, len(losses)))
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        left.plot(np.arange(window, len(losses) + 1), smooth, styles[n % 4], label=name)
        epochs = np.asarray(history.epoch)
        right.plot(epochs * steps_per_epoch, history.valid_metric, styles[n % 4], marker="o", markersize=3, label=name)
    left.axhline(math.log(2), color="gray", linestyle=":", label="ln 2 (a coin flip)")
    left.set_xlabel("training step")
    left.set_ylabel("training loss (mean of 10 steps)")
    left.set_title(f"{title}: training loss")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    right.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    right.set_ylim(0.0, 1.02)
    right.set_xlabel("training step")
    right.set_ylabel("held-out accuracy")
    right.set_title(f"{title}: held-out accuracy")
    right.legend(fontsize=8, loc="lower right")
    right.grid(alpha=0.3)
    return figure


def plot_accuracy_by_length(results: Mapping[str, Mapping[int, float]], trained_lengths: tuple[int, int], ax=None,
                            title: str = "Accuracy by sequence length"):
    """One line per model: accuracy against the sequence length; the trained lengths are shaded."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.2), layout="constrained")
    ax.axvspan(trained_lengths[0] - 0.5, trained_lengths[1] + 0.5, color="#dddddd", label="lengths seen in training")
    markers = ["o", "s", "^", "D"]
    for n, (name, by_length) in enumerate(results.items()):
        lengths = sorted(by_length)
        ax.plot(lengths, [by_length[length] for length in lengths], marker=markers[n % 4], label=name)
    ax.axhline(0.5, color="gray", linestyle=":", label="chance (50%)")
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel("sequence length")
    ax.set_ylabel("held-out accuracy")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    return ax


def plot_offset_scores(scores, ax=None, title: str = "Rotary: score of q at i with k at j"):
    """Heatmap of a (T, T) score matrix: rows = query positions, columns = key positions."""
    values = to_numpy(scores)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.6, 3.8), layout="constrained")
    image = ax.imshow(values, cmap=ATTENTION_CMAP, aspect="equal", interpolation="nearest")
    ax.set_xlabel("key position j")
    ax.set_ylabel("query position i")
    ax.set_title(title)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="score q·k")
    return ax
