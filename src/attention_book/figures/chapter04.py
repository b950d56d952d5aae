"""Chapter 4's figures: the dependency parse that motivates several heads, and accuracy by relation.

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

import matplotlib.pyplot as plt
import numpy as np

__all__ = [
    "parse_example",
    "relations",
    "ParseFigure",
    "render_parse",
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


def render_parse(doc, distance: int = 95) -> ParseFigure:
    """The displaCy arc diagram of ``doc`` as a :class:`ParseFigure` with reproducible ids.

    displaCy names its arcs ``arrow-<random hex>-0-i`` afresh on every call; here the random
    part is replaced by one derived from the text, so the same parse gives the same SVG.
    """
    from spacy import displacy

    svg = displacy.render(
        doc, style="dep", jupyter=False, options={"distance": distance, "compact": False, "font": "DejaVu Sans, Arial, sans-serif"}
    )
    stable = f"parse{zlib.crc32(doc.text.encode('utf-8')):08x}"
    svg = re.sub(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", stable, svg)
    return ParseFigure(svg.strip(), doc.text)


# ---------------------------------------------------------------------------------
# The two-relation task

def plot_relation_accuracy(results: dict[str, dict[str, float]], ax=None, title: str | None = None):
    """Grouped bars: for each model (a key of ``results``), its accuracy on each relation."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7.4, 3.2))
    names = list(results)
    measures = list(next(iter(results.values())))
    width = 0.8 / len(names)
    colours = plt.get_cmap("viridis")(np.linspace(0.2, 0.75, len(names)))
    for index, name in enumerate(names):
        positions = np.arange(len(measures)) + (index - (len(names) - 1) / 2) * width
        values = [results[name][measure] for measure in measures]
        bars = ax.bar(positions, values, width, label=name, color=colours[index], edgecolor="black", linewidth=0.6)
        ax.bar_label(bars, labels=[f"{v:.0%}" for v in values], fontsize=8, padding=2)
    ax.set_xticks(np.arange(len(measures)), measures)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("held-out accuracy")
    ax.set_xlabel("what the answer needs")
    ax.set_title(title or "Accuracy by relation")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="model", title_fontsize=8)
    ax.figure.tight_layout()
    return ax
