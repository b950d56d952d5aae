"""Chapter 3's widget: turn the inverse temperature from uniform to argmax.

One row of scores (one query against a few keys) is turned into weights three ways, side
by side: ``softmax(beta * s)``, ``sparsemax(beta * s)`` and ``hardmax(s)`` (which beta
cannot change). Each panel says the entropy of its weights and how many are non-zero.
Below them, the entropy of every method across the whole range of beta, with a marker
where the slider is now.

Controls: the inverse temperature beta (a log-scale slider from 0.01, almost uniform, to
100, almost argmax) and the scores themselves, typed as ``river=1.9, bank=1.5, ...``
(a label and a score per key) or as plain numbers ``1.9, 1.5, ...``.

An update redraws only what moves with beta on a cached background (blitting) and
encodes the PNG without Pillow's row filters (:func:`~attention_book.widgets._base.png_bytes`), to stay fast.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch

from ..analysis.formatting import format_exact, format_weight
from ..analysis.plotting import ATTENTION_CMAP
from ..attention import softmax
from ..soft_hard import entropy, hardmax, sparsemax
from ._base import AttentionWidget, WidgetInputError, png_bytes

__all__ = [
    "SoftHardExplorer",
    "parse_scores",
    "png_bytes",
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
SWEEP_POINTS = 161  # betas in the entropy curves
COLOURS = {"softmax": "#1f77b4", "sparsemax": "#ff7f0e", "hardmax": "#2ca02c"}
STYLES = {"softmax": "-", "sparsemax": "--", "hardmax": ":"}


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
        raise WidgetInputError("type one score per key, separated by commas, for example \"river=1.9, bank=1.5, the=0.2\"")
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
                f"{number.strip()!r} (entry {index + 1}) is not a number; write \"label=score\" or just the score"
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

    After every update, ``state`` holds ``beta``, ``labels``, ``scores``, the weights
    ``softmax``, ``sparsemax`` and ``hardmax`` (lists), ``entropy`` and ``nonzero``
    (dicts keyed by those three names) and ``uniform_entropy`` (ln n).
    """

    title = "Soft-hard explorer: one query's scores, turned into weights three ways"
    figure_size = (9.6, 4.9)

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
        self.beta_slider = widgets.FloatLogSlider(
            value=float(beta), base=10, min=math.log10(BETA_MIN), max=math.log10(BETA_MAX), step=0.05,
            description="inverse temperature β", continuous_update=False, readout_format=".3g",
            style={"description_width": "initial"}, layout=widgets.Layout(width="420px"),
        )
        self.scores_text = widgets.Text(
            value=format_scores(self.labels, self.scores), description="scores", continuous_update=False,
            placeholder="river=1.9, bank=1.5, the=0.2", layout=widgets.Layout(width="460px"),
        )
        self._on_device: dict[tuple, tuple[torch.Tensor, dict]] = {}
        self._built_for: tuple | None = None  # (labels, scores) the figure was built for; draw() builds it
        self._finish_init()

    # -- controls -----------------------------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        return [self.beta_slider, self.scores_text]

    def _dtype(self, device: torch.device) -> torch.dtype:
        return torch.float32 if device.type == "mps" else torch.float64  # MPS has no float64

    # -- compute ------------------------------------------------------------------------
    def _sweep(self, device: torch.device) -> tuple[torch.Tensor, dict]:
        """The scores on ``device`` and, once per row of scores, what does not depend on the slider.

        That is the entropy and the number of non-zero weights of every method at every beta
        of the slider's range (the curves of the lower panel), and the hardmax weights.
        """
        key = (device.type, tuple(self.scores))
        if key not in self._on_device:
            dtype = self._dtype(device)
            scores = torch.tensor(self.scores, dtype=dtype, device=device)  # (n,)
            betas = torch.logspace(math.log10(BETA_MIN), math.log10(BETA_MAX), SWEEP_POINTS, dtype=dtype, device=device)
            scaled = betas[:, None] * scores[None, :]  # (points, n)
            weights = torch.stack([softmax(scaled), sparsemax(scaled), hardmax(scaled)])  # (3, points, n)
            curves = torch.stack([entropy(weights), (weights > 0).sum(dim=-1).to(dtype)])  # (2, 3, points)
            hard = hardmax(scores)  # (n,): the same at every beta > 0
            sweep = {
                "betas": betas.cpu().numpy(),
                "entropy": curves[0].cpu().numpy(),
                "nonzero": curves[1].cpu().numpy(),
                "hardmax": hard.cpu().tolist(),
                "hardmax_entropy": float(entropy(hard)),
                "hardmax_nonzero": int((hard > 0).sum()),
            }
            self._on_device = {key: (scores, sweep)}  # keep only the current row of scores
        return self._on_device[key]

    def compute(self, device: torch.device) -> dict:
        labels, scores = parse_scores(self.scores_text.value)
        self.labels, self.scores = labels, scores
        beta = float(self.beta_slider.value)
        row, sweep = self._sweep(device)  # (n,)
        scaled = beta * row  # (n,): the scores times the inverse temperature
        weights = torch.stack([softmax(scaled), sparsemax(scaled), hardmax(scaled)])  # (3, n)
        summary = torch.stack([entropy(weights), (weights > 0).sum(dim=-1).to(weights.dtype)], dim=1)  # (3, 2)
        everything = torch.cat([weights, summary], dim=1).cpu().tolist()  # one transfer: (3, n + 2)
        n = len(scores)
        state = {"beta": beta, "labels": list(labels), "scores": list(scores), "uniform_entropy": math.log(n),
                 "entropy": {}, "nonzero": {}, "sweep": sweep}
        for name, values in zip(METHODS, everything):
            state[name] = values[:n]
            state["entropy"][name] = values[n]
            state["nonzero"][name] = int(values[n + 1])
        return state

    # -- draw ---------------------------------------------------------------------------
    def _build_figure(self, labels: Sequence[str], scores: Sequence[float], sweep: dict) -> None:
        """Axes, the hardmax panel and the entropy curves for this row of scores, drawn once.

        Only what moves with beta (the softmax and sparsemax bars, their numbers, the markers
        on the curves) is redrawn by :meth:`draw` and :meth:`png`; everything else is kept as
        pixels. Text is the slow part of a redraw, so the fixed words ("entropy", "β =") are
        in the background and only the numbers are redrawn.
        """
        figure = self.figure
        figure.clear()
        figure.set_layout_engine("none")
        n = len(labels)
        self.colour_map = matplotlib.colormaps[ATTENTION_CMAP]
        positions = np.arange(n)
        small = 6 if n > 7 else (7 if n > 5 else 8)
        long_labels = n > 6 or max(len(label) for label in labels) > 6
        # Fixed margins (an automatic layout would double the time a new row of scores takes);
        # rotated labels need more room under the bars.
        grid = figure.add_gridspec(2, 3, height_ratios=[2.3, 1.25], left=0.07, right=0.985, top=0.94, bottom=0.1,
                                   wspace=0.2, hspace=0.55 if long_labels else 0.32)
        self.bars, self.value_texts, self.info_texts = {}, {}, {}
        titles = {"softmax": "softmax(β s)", "sparsemax": "sparsemax(β s)", "hardmax": "hardmax(s): β changes nothing"}
        for column, name in enumerate(METHODS):
            ax = figure.add_subplot(grid[0, column])
            self.bars[name] = ax.bar(positions, np.zeros(n), color=self.colour_map(0.0), edgecolor="black", linewidth=0.7)
            self.value_texts[name] = [ax.text(j, 0.0, "", ha="center", va="bottom", fontsize=small) for j in range(n)]
            ax.text(0.03, 0.97, "entropy (nats)\nnon-zero", transform=ax.transAxes, ha="left", va="top", fontsize=8)
            self.info_texts[name] = ax.text(0.45, 0.97, "", transform=ax.transAxes, ha="left", va="top", fontsize=8)
            ax.set_ylim(0, 1.42)
            ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
            ax.set_xlim(-0.6, n - 0.4)
            ax.set_xticks(positions, labels, rotation=60 if long_labels else 0, fontsize=small)
            ax.set_title(titles[name], fontsize=10)
            if column == 0:
                ax.set_ylabel("attention weight")
        # hardmax(beta s) = hardmax(s) for every beta > 0: its panel is drawn once, here.
        self._set_panel("hardmax", sweep["hardmax"], sweep["hardmax_entropy"], sweep["hardmax_nonzero"])
        curves = figure.add_subplot(grid[1, :])
        betas = sweep["betas"]
        for index, name in enumerate(METHODS):
            curves.plot(betas, sweep["entropy"][index], STYLES[name], color=COLOURS[name], label=name, linewidth=1.6)
        curves.axhline(math.log(n), color="grey", linewidth=0.7)
        curves.text(betas[0], math.log(n), f" uniform: ln {n} = {math.log(n):.2f}", ha="left", va="bottom", fontsize=7)
        curves.set_xscale("log")
        curves.set_xlim(betas[0], betas[-1])
        curves.set_ylim(-0.08, max(math.log(n), 0.1) * 1.3)
        curves.set_xlabel("inverse temperature β (log scale)")
        curves.set_ylabel("entropy (nats)")
        curves.legend(fontsize=7, loc="lower left")
        # The value of beta sits next to the red line and moves with it (x in data, y in axes coordinates).
        self.beta_text = curves.text(1.0, 0.5, "", transform=curves.get_xaxis_transform(), va="center", fontsize=8,
                                     color="#d62728", weight="bold")
        self.beta_line = curves.axvline(1.0, color="#d62728", linewidth=1.2)
        self.markers = {name: curves.plot([1.0], [0.0], "o", color=COLOURS[name], markersize=5)[0] for name in METHODS}
        moving = ("softmax", "sparsemax")
        dynamic = [
            *(bar for name in moving for bar in self.bars[name]),
            *(text for name in moving for text in self.value_texts[name]),
            *(self.info_texts[name] for name in moving), self.beta_line, *self.markers.values(), self.beta_text,
        ]
        self.cache_background(figure, dynamic, freeze_layout=False)
        self._built_for = (tuple(labels), tuple(scores))

    def _set_panel(self, name: str, weights: Sequence[float], entropy_nats: float, nonzero: int) -> None:
        for j, (bar, text, weight) in enumerate(zip(self.bars[name], self.value_texts[name], weights)):
            bar.set_height(weight)
            bar.set_facecolor(self.colour_map(weight))
            text.set_position((j, weight + 0.02))
            text.set_text(format_weight(weight))
        self.info_texts[name].set_text(f"{entropy_nats:.2f}\n{nonzero} of {len(weights)}")

    def draw(self, state: dict) -> None:
        if self._built_for != (tuple(state["labels"]), tuple(state["scores"])):
            self._build_figure(state["labels"], state["scores"], state["sweep"])
        beta = state["beta"]
        for name in ("softmax", "sparsemax"):
            self._set_panel(name, state[name], state["entropy"][name], state["nonzero"][name])
        for name in METHODS:
            self.markers[name].set_data([beta], [state["entropy"][name]])
        self.beta_line.set_xdata([beta, beta])
        self.beta_text.set_text(f" β = {beta:.3g} ")
        self.beta_text.set_x(beta)
        self.beta_text.set_horizontalalignment("left" if beta <= 10 else "right")
