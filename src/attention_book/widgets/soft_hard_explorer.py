"""Chapter 3's widget: turn the inverse temperature from uniform to argmax.

One row of scores (one query against a few keys) is turned into weights three ways, side
by side: ``softmax(beta * s)``, ``sparsemax(beta * s)`` and ``hardmax(s)`` (which beta
cannot change). Each panel says the entropy of its weights and how many are non-zero.
Below them, the entropy of every method across the whole range of beta, with a marker
where the slider is now.

Controls: the inverse temperature beta (a log-scale slider from 0.01, almost uniform, to
100, almost argmax) and the scores themselves, typed as ``river=1.9, bank=1.5, ...``
(a label and a score per key) or as plain numbers ``1.9, 1.5, ...``.

The kernel computes all three at every stop of the beta slider (torch, on the chosen
device); the browser draws the stop the slider is at, so moving it needs no kernel. On the
book's website (no kernel) js/03_soft_hard.js computes the same numbers for typed scores
(parseScores, softHardData; tested against this module in tests/widgets/test_static_math.py).

Its drawing, its page computation and its view rule are in ``js/03_soft_hard.js``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import numpy as np
import torch

from ..analysis.formatting import format_exact
from ..attention import softmax
from ..soft_hard import entropy, hardmax, sparsemax
from ._base import AttentionWidget, WidgetInputError, rounded

__all__ = [
    "SoftHardExplorer",
    "parse_scores",
    "BETAS",
    "format_scores",
    "DEFAULT_LABELS",
    "DEFAULT_SCORES",
    "MAX_KEYS",
    "SCORE_LIMIT",
    "BETA_MIN",
    "BETA_MAX",
]

DEFAULT_LABELS = ["the", "river", "bank", "was", "steep"]
DEFAULT_SCORES = [0.2, 1.9, 1.5, -0.4, 0.9]
MAX_KEYS = 10
SCORE_LIMIT = 20.0
BETA_MIN, BETA_MAX = 0.01, 100.0  # the slider's range (10^-2 to 10^2)
METHODS = ("softmax", "sparsemax", "hardmax")
# The slider's stops: 10 ** (-2 ... 2) in steps of 0.05 (81 stops, 1.0 among them).
BETAS = tuple(round(10 ** (k / 20), 6) for k in range(-40, 41))


def format_scores(labels: Sequence[str], scores: Sequence[float]) -> str:
    """``"the=0.2, river=1.9"``: the text the scores box shows (what :func:`parse_scores` reads)."""
    return ", ".join(f"{label}={format_exact(score)}" for label, score in zip(labels, scores))


def parse_scores(text: str, limit: float = SCORE_LIMIT, max_keys: int = MAX_KEYS) -> tuple[list[str], list[float]]:
    """Read ``"river=1.9, bank=1.5, the=0.2"`` or ``"1.9, 1.5, 0.2"`` into (labels, scores).

    Entries are separated by commas; each is ``label=score`` or just a score (then its label
    is ``key i``). Raises WidgetInputError naming what is wrong: nothing typed, an empty entry,
    an entry that is not a number, too many keys, a score outside ``[-limit, limit]``.
    """
    entries = [entry.strip() for entry in text.strip().strip("[]()").split(",")]
    if not any(entries):
        raise WidgetInputError(
            'type one score per key, separated by commas, for example "river=1.9, bank=1.5, the=0.2"'
        )
    if len(entries) > max_keys:
        raise WidgetInputError(f"{len(entries)} scores were given; this widget shows 1 to {max_keys} keys")
    labels, scores = [], []
    for index, entry in enumerate(entries):
        if not entry:
            raise WidgetInputError(f"entry {index + 1} is empty: remove the extra comma")
        label, _, number = entry.rpartition("=")
        label = label.strip() or f"key {index + 1}"
        try:
            score = float(number)
        except ValueError:
            raise WidgetInputError(
                f'{number.strip()!r} (entry {index + 1}) is not a number; write "label=score" or just the score'
            ) from None
        if not math.isfinite(score):
            raise WidgetInputError(f"{number.strip()!r} (entry {index + 1}) is not a finite number")
        if abs(score) > limit:
            raise WidgetInputError(
                f"the score of {label!r} is {format_exact(score)}; keep scores between {format_exact(-limit)} and {format_exact(limit)}"
            )
        labels.append(label)
        scores.append(score)
    return labels, scores


class SoftHardExplorer(AttentionWidget):
    """Move the inverse temperature beta; see softmax, sparsemax and hardmax of the same scores.

    Args:
        scores: the scores of one query against n keys, 1 to 10 numbers (a list or a 1-D
            tensor) between -20 and 20 (default: the chapter's *the river bank was steep*).
        labels: n names for the keys (default: the chapter's tokens, or ``key 1``, ...).
        device: where the weights are computed ("cpu", "cuda", ...; default: the book's
            default device).
        beta: the starting inverse temperature, between 0.01 and 100 (default 1).

    ``data`` holds ``labels``, ``scores``, ``betas`` (the slider's stops), ``softmax`` and
    ``sparsemax`` (one row of weights per stop), ``hardmax``, and ``entropy`` and
    ``nonzero`` per method and stop; ``view["beta"]`` is the index of the stop shown;
    :meth:`shown` reads out what the picture shows.
    """

    def __init__(
        self,
        scores=None,
        labels: Sequence[str] | None = None,
        device: str | torch.device | None = None,
        beta: float = 1.0,
    ):
        if scores is None:
            scores = DEFAULT_SCORES
            if labels is None:
                labels = DEFAULT_LABELS
        try:
            values = torch.as_tensor(scores, dtype=torch.float64).detach().cpu()
        except (TypeError, ValueError, RuntimeError) as error:
            raise ValueError(f"scores must be a list of numbers or a 1-D tensor: {error}") from None
        if values.dim() != 1 or not 1 <= values.numel() <= MAX_KEYS:
            raise ValueError(
                f"scores must be one row of 1 to {MAX_KEYS} numbers (one per key), but have shape {tuple(values.shape)}"
            )
        if not torch.isfinite(values).all() or values.abs().max() > SCORE_LIMIT:
            raise ValueError(
                f"scores must be finite numbers between {-SCORE_LIMIT:g} and {SCORE_LIMIT:g}, "
                f"but {values.tolist()} was given"
            )
        if labels is None:
            labels = [f"key {i + 1}" for i in range(values.numel())]
        if isinstance(labels, str) or not all(isinstance(label, str) for label in labels):
            raise ValueError("labels must be a list of strings, one per score")
        labels = list(labels)
        if len(labels) != values.numel():
            raise ValueError(f"labels has {len(labels)} labels but there are {values.numel()} scores")
        if any(not label.strip() or "," in label or "=" in label for label in labels):
            raise ValueError(f"each label must be non-empty and contain no ',' or '=', but {labels} was given")
        if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not BETA_MIN <= beta <= BETA_MAX:
            raise ValueError(f"beta must be a number from {BETA_MIN:g} to {BETA_MAX:g}, but {beta!r} was given")
        super().__init__(device=device)
        self.labels, self.scores = [label.strip() for label in labels], values.tolist()
        self.kind = "soft_hard"
        self.title = "Soft-hard explorer: one query's scores, turned into weights three ways"
        self.betas = BETAS
        self.view = {"beta": int(np.argmin([abs(math.log(b / beta)) for b in BETAS]))}
        self.inputs = {"scores": format_scores(self.labels, self.scores)}
        self._start()

    def _dtype(self, device: torch.device) -> torch.dtype:
        return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64

    # -- compute ------------------------------------------------------------------------
    def compute(self, device: torch.device) -> dict:
        """Softmax, sparsemax and hardmax of beta * scores at every stop of the slider, their
        entropies and non-zero counts, computed with torch on ``device`` in one batch."""
        labels, scores = parse_scores(self.inputs["scores"])
        self.labels, self.scores = labels, scores
        dtype = self._dtype(device)
        row = torch.tensor(scores, dtype=dtype, device=device)  # (n,)
        betas = torch.tensor(BETAS, dtype=dtype, device=device)  # (points,)
        scaled = betas[:, None] * row[None, :]  # (points, n): scores times the inverse temperature
        weights = torch.stack([softmax(scaled), sparsemax(scaled), hardmax(scaled)])  # (3, points, n)
        entropies = entropy(weights)  # (3, points)
        nonzero = (weights > 0).sum(dim=-1)  # (3, points)
        hard = hardmax(row)  # (n,): the same at every beta > 0
        return {
            "labels": list(labels),
            "scores": list(scores),
            "betas": list(BETAS),
            "softmax": rounded(weights[0]),
            "sparsemax": rounded(weights[1]),
            "hardmax": rounded(hard),
            "entropy": {name: rounded(values) for name, values in zip(METHODS, entropies)},
            "nonzero": {name: values.tolist() for name, values in zip(METHODS, nonzero.cpu())},
            "uniform_entropy": math.log(len(scores)),
        }

    def shown(self) -> dict:
        """What the picture shows now: beta and the three rows of weights with their entropies."""
        b = self.view["beta"]
        data = self.data
        return {
            "beta": data["betas"][b],
            "softmax": data["softmax"][b],
            "sparsemax": data["sparsemax"][b],
            "hardmax": data["hardmax"],
            "entropy": {name: data["entropy"][name][b] for name in METHODS},
            "nonzero": {name: data["nonzero"][name][b] for name in METHODS},
        }
