"""Chapter 4's figures: the dependency parse that motivates several heads, a schematic of
multi-head attention with its shapes, and accuracy by relation over several seeds.

:func:`parse_example` parses the chapter's sentence with a trained spaCy pipeline when
one is installed (Colab ships ``en_core_web_sm``) and otherwise builds the same parse by
hand; :func:`render_parse` draws it with displaCy as an SVG whose ids do not change from
run to run (displaCy draws random ones), so the notebook's output is reproducible and the
website shows the picture. The task and the measurements are in
:mod:`attention_book.data.tasks` and :mod:`attention_book.analysis.heads`.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np

from ..analysis.plotting import PAGE_INCHES

__all__ = [
    "parse_example",
    "relations",
    "ParseFigure",
    "render_parse",
    "plot_multi_head_diagram",
    "plot_relation_accuracy",
    "EXAMPLE_SENTENCE",
    "HAND_PARSE",
    "TRAINED_PIPELINE",
]


EXAMPLE_SENTENCE = "She gave her brother the old red bicycle"
# The parse a trained English parser gives this sentence (spaCy's labels): for each word,
# its part of speech, the index of its head word and the relation to it. "gave" is the root.
HAND_PARSE = {
    "words": ["She", "gave", "her", "brother", "the", "old", "red", "bicycle"],
    "pos": ["PRON", "VERB", "PRON", "NOUN", "DET", "ADJ", "ADJ", "NOUN"],
    "heads": [1, 1, 3, 1, 7, 7, 7, 1],
    "deps": ["nsubj", "ROOT", "poss", "dative", "det", "amod", "amod", "dobj"],
}
TRAINED_PIPELINE = "en_core_web_sm"


def parse_example(text: str = EXAMPLE_SENTENCE, prefer_trained: bool = True):
    """Parse ``text``: returns ``(doc, source)`` with a spaCy ``Doc`` and where its parse came from.

    With ``prefer_trained`` and the pipeline ``en_core_web_sm`` installed, the pipeline
    parses the text. Otherwise the chapter's sentence gets the hand-written
    :data:`HAND_PARSE` (any other text then raises ValueError: there is no parser).
    """
    import spacy

    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty string, but {text!r} was given")
    if prefer_trained and spacy.util.is_package(TRAINED_PIPELINE):
        return spacy.load(TRAINED_PIPELINE)(text), f"parsed by spaCy's trained pipeline {TRAINED_PIPELINE}"
    if text.split() != HAND_PARSE["words"]:
        raise ValueError(
            f"no trained spaCy pipeline is installed, and only the chapter's sentence {EXAMPLE_SENTENCE!r} "
            f"has a hand-written parse; {text!r} was given (pip install a pipeline such as {TRAINED_PIPELINE})"
        )
    from spacy.tokens import Doc

    doc = Doc(
        spacy.blank("en").vocab,
        words=HAND_PARSE["words"],
        spaces=[True] * (len(HAND_PARSE["words"]) - 1) + [False],  # no space after the last word
        pos=HAND_PARSE["pos"],
        heads=HAND_PARSE["heads"],
        deps=HAND_PARSE["deps"],
    )
    return doc, "hand-written (no trained spaCy pipeline is installed here)"


def relations(doc) -> list[tuple[str, str, str]]:
    """Every arc of the parse as ``(head word, relation, dependent word)``, in sentence order."""
    return [(token.head.text, token.dep_, token.text) for token in doc if token.dep_ != "ROOT"]


class ParseFigure:
    """A displaCy drawing of a parse; Jupyter shows it as an SVG image (``_repr_svg_``)."""

    def __init__(self, svg: str, text: str):
        self.svg = svg
        self.text = text

    def _repr_svg_(self) -> str:
        return self.svg

    def __repr__(self) -> str:
        return f"<dependency parse of {self.text!r}>"


def render_parse(doc, distance: int = 70) -> ParseFigure:
    """The displaCy arc diagram of ``doc`` as a :class:`ParseFigure` with reproducible ids.

    Compact (square arcs, labels written flat) with ``distance`` pixels between words: the
    eight-word example is 610 px wide, so its 12.8 px labels stay above 7 px on a 390 px
    phone, where the page column is 342 px (issue 29).

    displaCy names its arcs ``arrow-<random hex>-0-i`` afresh on every call; here the random
    part is replaced by one derived from the text, so the same parse gives the same SVG.
    """
    from spacy import displacy

    svg = displacy.render(
        doc,
        style="dep",
        jupyter=False,
        options={"distance": distance, "compact": True, "font": "DejaVu Sans, Arial, sans-serif"},
    )
    stable = f"parse{zlib.crc32(doc.text.encode('utf-8')):08x}"
    svg = re.sub(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", stable, svg)
    return ParseFigure(svg.strip(), doc.text)


# ---------------------------------------------------------------------------------
# Multi-head attention as a diagram

_HEAD_COLOURS = ("#3b528b", "#1f7f7a", "#3d7a2a")  # dark viridis-like hues: head 1, head 2, head n_h


def _box(
    ax,
    x: float,
    y: float,
    width: float,
    height: float,
    lines: Sequence[str],
    edge: str,
    face: str = "white",
    fontsize: float = 9,
    spacing: float = 0.34,
) -> None:
    """A rounded box centred on (x, y); ``lines`` are written one under another, ``spacing`` apart."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch(
            (x - width / 2, y - height / 2),
            width,
            height,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            linewidth=1.4,
            edgecolor=edge,
            facecolor=face,
        )
    )
    top = y + spacing * (len(lines) - 1) / 2
    for n, line in enumerate(lines):
        ax.text(x, top - n * spacing, line, ha="center", va="center", fontsize=fontsize)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], colour: str = "#444444") -> None:
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops={"arrowstyle": "-|>", "color": colour, "linewidth": 1.1, "shrinkA": 0, "shrinkB": 0},
    )


def _head(
    ax, r: str, x: float, colour, *, width: float, y_projection: float, y_attention: float, y_concat: float
) -> None:
    """Head ``r`` of the multi-head diagram at ``x``: its projections, its attention, the arrow to the concat."""
    projections = [
        rf"$Q_{{{r}}} = X\, W_Q^{{({r})}}$",
        rf"$K_{{{r}}} = X\, W_K^{{({r})}}$",
        rf"$V_{{{r}}} = X\, W_V^{{({r})}}$",
    ]
    _box(ax, x, y_projection, width=width, height=1.56, lines=[*projections, r"each $(T,\ d_k)$"], edge=colour)
    _arrow(ax, (x, y_projection + 0.78), (x, y_attention - 0.78))
    attention = [
        rf"$A_{{{r}}} = \mathrm{{softmax}}(Q_{{{r}}} K_{{{r}}}^\top / \sqrt{{d_k}})$",
        r"weights $(T,\ T)$",
        rf"$\mathrm{{head}}_{{{r}}} = A_{{{r}}}\, V_{{{r}}}$",
        r"$(T,\ d_k)$",
    ]
    _box(ax, x, y_attention, width=width, height=1.56, lines=attention, edge=colour, spacing=0.36)
    _arrow(ax, (x, y_attention + 0.78), (x, y_concat - 0.45))
    name = "head " + ("$n_h$" if r == "n_h" else r)
    ax.text(
        x - width / 2, y_attention + 0.9, name, fontsize=10, color=colour, fontweight="bold", ha="left", va="bottom"
    )


def plot_multi_head_diagram(title: str = "Multi-head attention, with the shape of every tensor"):
    """Multi-head self-attention drawn bottom to top, with the shape of every tensor. Returns the figure.

    ``X`` (T, d_model) goes to every head; head r projects it with its own ``W_Q^(r)``,
    ``W_K^(r)``, ``W_V^(r)`` to queries, keys and values of d_k features, attends
    (weights T x T, output T x d_k); the heads' outputs are concatenated side by side
    (T, n_h d_k) and ``W_O`` (n_h d_k, d_model) maps them back to (T, d_model). Two heads
    are drawn, head 1 and head n_h, with dots for the ones between, so that the figure is
    :data:`~attention_book.analysis.plotting.PAGE_INCHES` wide with text of 9 pt and more
    (legible on a phone).
    """
    figure, ax = plt.subplots(figsize=(6.0, 6.9))
    width = 4.1
    columns = {"1": 2.15, "n_h": 7.85}  # x of each drawn head
    y_input, y_projection, y_attention, y_concat, y_out, y_result = 0.45, 2.45, 4.85, 6.95, 8.25, 9.35
    _box(
        ax,
        5.0,
        y_input,
        width=6.6,
        height=0.56,
        lines=[r"$X$   $(T,\ d_{\mathrm{model}})$: one row per token"],
        edge="#444444",
        face="#f2f2f2",
    )
    for (r, x), colour in zip(columns.items(), (_HEAD_COLOURS[0], _HEAD_COLOURS[2])):
        _arrow(ax, (5.0 + (x - 5.0) * 0.35, y_input + 0.28), (x, y_projection - 0.78))
        _head(
            ax, r, x, colour=colour, width=width, y_projection=y_projection, y_attention=y_attention, y_concat=y_concat
        )
    for y in (y_projection, y_attention):
        ax.text(5.0, y, r"$\cdots$", fontsize=14, ha="center", va="center")
    concat = [r"Concat$(\mathrm{head}_1, \dots, \mathrm{head}_{n_h})$: the heads", r"side by side, $(T,\ n_h d_k)$"]
    _box(ax, 5.0, y_concat, width=9.9, height=0.9, lines=concat, edge="#444444", face="#f2f2f2", spacing=0.36)
    _arrow(ax, (5.0, y_concat + 0.45), (5.0, y_out - 0.28))
    _box(
        ax,
        5.0,
        y_out,
        width=8.4,
        height=0.56,
        lines=[r"times $W_O$ $(n_h d_k,\ d_{\mathrm{model}})$: mixes the heads"],
        edge="#444444",
    )
    _arrow(ax, (5.0, y_out + 0.28), (5.0, y_result - 0.28))
    _box(
        ax,
        5.0,
        y_result,
        width=6.6,
        height=0.56,
        lines=[r"$\mathrm{MultiHead}(X)$   $(T,\ d_{\mathrm{model}})$"],
        edge="#444444",
        face="#f2f2f2",
    )
    note = (
        r"narrow heads: $d_k = d_{\mathrm{model}} / n_h$, so $n_h d_k = d_{\mathrm{model}}$;"
        "\n"
        r"in code all heads are one (batch, $n_h$, $T$, $d_k$) tensor"
    )
    ax.text(5.0, -0.25, note, ha="center", va="top", fontsize=9, color="#333333", linespacing=1.5)
    ax.set_xlim(-0.1, 10.1)
    ax.set_ylim(-1.2, 9.8)
    ax.set_axis_off()
    ax.set_title(title, fontsize=10)
    figure.tight_layout()
    return figure


# ---------------------------------------------------------------------------------
# The two-relation task


def _relation_table(results: dict[str, dict[str, float | Sequence[float]]]):
    """The long-form table seaborn draws from: one row per model, relation and seed."""
    import pandas as pd

    names = list(results)
    measures = list(next(iter(results.values())))
    runs = {
        (name, measure): np.atleast_1d(np.asarray(results[name][measure], dtype=float))
        for name in names
        for measure in measures
    }
    labels = {
        name: name
        if all(len(runs[name, m]) == 1 for m in measures)
        else f"{name} (mean of {len(runs[name, measures[0]])} seeds)"
        for name in names
    }
    frame = pd.DataFrame(
        [
            {"model": labels[name], "measure": measure, "accuracy": value}
            for (name, measure), values in runs.items()
            for value in values
        ]
    )
    return names, measures, runs, [labels[name] for name in names], frame


def _write_means_over_bars(ax, names, measures, runs) -> None:
    """Each bar's mean accuracy, written just above its highest seed."""
    for name, bars in zip(names, ax.containers):
        for bar_, measure in zip(bars, measures):
            values = runs[name, measure]
            ax.text(
                bar_.get_x() + bar_.get_width() / 2,
                float(values.max()) + 0.02,
                f"{values.mean():.0%}",
                ha="center",
                va="bottom",
                fontsize=9,
            )


def plot_relation_accuracy(
    results: dict[str, dict[str, float | Sequence[float]]],
    ax=None,
    title: str | None = None,
    ylabel: str = "held-out accuracy",
    reference: tuple[str, float, str] | None = None,
):
    """Grouped bars drawn by seaborn: for each model (a key of ``results``), its accuracy on each relation.

    A value may be one accuracy or one per seed: then the bar is their mean, a black line
    spans their range (seaborn's ``errorbar=("pi", 100)``) and a dot marks each seed.
    ``reference=(relation, value, label)`` draws a red dashed line at ``value`` over that
    relation's bars, named in the legend. The legend goes under the axes, so the figure stays
    :data:`~attention_book.analysis.plotting.PAGE_INCHES` wide. Returns the axes.
    """
    import seaborn as sns

    names, measures, runs, hue_order, frame = _relation_table(results)
    several = any(len(values) > 1 for values in runs.values())
    if ax is None:
        _, ax = plt.subplots(figsize=(PAGE_INCHES, 4.4))
    colours = [tuple(c) for c in plt.get_cmap("viridis")(np.linspace(0.2, 0.75, len(names)))]
    common = {"data": frame, "x": "measure", "y": "accuracy", "hue": "model", "order": measures, "ax": ax}
    sns.barplot(
        **common,
        hue_order=hue_order,
        palette=colours,
        errorbar=("pi", 100) if several else None,
        err_kws={"color": "black", "linewidth": 1.4},
        edgecolor="black",
        linewidth=0.6,
        saturation=1.0,
    )
    if several:
        sns.stripplot(
            **common,
            hue_order=hue_order,
            palette=["black"] * len(names),
            dodge=True,
            jitter=0.12,
            size=3.5,
            legend=False,
        )
    _write_means_over_bars(ax, names, measures, runs=runs)
    if reference is not None:
        measure, value, label = reference
        if measure not in measures:
            raise ValueError(f"the reference's relation must be one of {measures}, not {measure!r}")
        where = measures.index(measure)
        ax.hlines(value, where - 0.45, where + 0.45, colors="tab:red", linestyles="--", linewidth=1.4, label=label)
    ax.set_ylim(0, 1.14)
    ax.set_ylabel(ylabel)
    ax.set_xlabel("what the answer needs")
    ax.set_title(title or "Accuracy by relation")
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        fontsize=9,
        title="bar: mean; line: range over seeds; dots: seeds" if several else None,
        title_fontsize=9,
        frameon=False,
    )
    ax.figure.tight_layout()
    return ax
