"""Chapter 4's helpers: the dependency parse, the two-relation task and its model.

Not the lesson itself, so they live here rather than in the notebook:

* :func:`parse_example` parses the chapter's sentence with a trained spaCy pipeline when
  one is installed (Colab ships ``en_core_web_sm``) and otherwise builds the same parse
  by hand; :func:`render_parse` draws it with displaCy as an SVG whose ids do not change
  from run to run (displaCy draws random ones), so the notebook's output is reproducible
  and the website shows the picture.
* :class:`TwoRelationTask` is a task that needs two different relations at every
  position: "the token with the same letter" (found by content) and "the token just
  before" (found by position). :class:`TwoRelationModel` is one encoder layer and a
  per-token read-out; :func:`relation_accuracy` and :func:`head_focus` measure how well it
  follows each relation and which head follows which.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from .transformer import Encoder
from .widgets.head_viewer import word_encoder

__all__ = [
    "EXAMPLE_SENTENCE",
    "HAND_PARSE",
    "parse_example",
    "render_parse",
    "ParseFigure",
    "relations",
    "IGNORE",
    "TwoRelationTask",
    "TwoRelationModel",
    "token_loss",
    "token_accuracy",
    "relation_accuracy",
    "head_focus",
    "plot_relation_accuracy",
    "parameter_count",
]

# ---------------------------------------------------------------------------------
# The dependency parse

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

IGNORE = -100  # label of positions that have no answer (the first token has no previous token)


class TwoRelationTask(Dataset):
    """Sequences of letter-digit tokens such as ``c2``; each letter occurs exactly twice.

    The answer at position t (t >= 1) is a pair of digits: the digit of t's *partner*, the
    other token with the same letter (a relation found by content), and the digit of the
    token at t - 1 (a relation found by position). It is encoded as the class
    ``num_digits * partner_digit + previous_digit``; position 0 has no previous token and
    gets the label :data:`IGNORE`.

    Each item is ``{"tokens": (T,), "labels": (T,)}``; ``partner`` (N, T) holds the
    partner's position. The same seed always gives the same sequences.
    """

    def __init__(self, num_samples: int, seed: int = 0, num_letters: int = 8, num_digits: int = 4, num_pairs: int = 4):
        for name, value, low in (("num_samples", num_samples, 1), ("num_digits", num_digits, 2), ("num_pairs", num_pairs, 2)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer of at least {low}, but {value!r} was given")
        if isinstance(num_letters, bool) or not isinstance(num_letters, int) or not num_pairs <= num_letters <= 26:
            raise ValueError(f"num_letters must be an integer from num_pairs={num_pairs} to 26, but {num_letters!r} was given")
        if num_digits > 10:
            raise ValueError(f"num_digits must be at most 10, but {num_digits!r} was given")
        self.num_letters, self.num_digits, self.num_pairs = num_letters, num_digits, num_pairs
        self.length = 2 * num_pairs
        letters = "abcdefghijklmnopqrstuvwxyz"[:num_letters]
        self.vocabulary = [f"{letter}{digit}" for letter in letters for digit in range(num_digits)]
        self.num_classes = num_digits * num_digits
        generator = torch.Generator().manual_seed(seed)
        T = self.length
        # Which letters, where: each chosen letter fills two random positions.
        chosen = torch.rand(num_samples, num_letters, generator=generator).argsort(dim=1)[:, :num_pairs]  # (N, pairs)
        order = torch.rand(num_samples, T, generator=generator).argsort(dim=1)  # (N, T): a random permutation
        sequence_letters = torch.empty(num_samples, T, dtype=torch.long)
        sequence_letters.scatter_(1, order, chosen.repeat(1, 2))  # (N, T)
        digits = torch.randint(0, num_digits, (num_samples, T), generator=generator)  # (N, T)
        self.tokens = sequence_letters * num_digits + digits  # (N, T) ids into the vocabulary
        same = sequence_letters[:, :, None] == sequence_letters[:, None, :]  # (N, T, T)
        same &= ~torch.eye(T, dtype=torch.bool)
        self.partner = same.float().argmax(dim=2)  # (N, T): the other position with the same letter
        partner_digit = digits.gather(1, self.partner)  # (N, T)
        previous_digit = torch.cat([torch.zeros(num_samples, 1, dtype=torch.long), digits[:, :-1]], dim=1)  # (N, T)
        self.labels = num_digits * partner_digit + previous_digit  # (N, T)
        self.labels[:, 0] = IGNORE
        self.encode = word_encoder(self.vocabulary, max_len=T)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        return {"tokens": self.tokens[index], "labels": self.labels[index]}

    def words(self, index: int) -> list[str]:
        """The tokens of sequence ``index`` as text, e.g. ``['c1', 'h3', ...]``."""
        return [self.vocabulary[i] for i in self.tokens[index].tolist()]

    def answers(self, index: int) -> list[str]:
        """The answers of sequence ``index`` as text: ``'32'`` for partner's digit 3 and previous digit 2, ``'-'`` for none."""
        pairs = [self.answer(label) for label in self.labels[index].tolist()]
        return ["-" if pair is None else f"{pair[0]}{pair[1]}" for pair in pairs]

    def answer(self, label: int) -> tuple[int, int] | None:
        """The class ``label`` as the pair (partner's digit, previous token's digit); None for IGNORE."""
        if label == IGNORE:
            return None
        return divmod(int(label), self.num_digits)


class TwoRelationModel(nn.Module):
    """One encoder layer (self-attention with ``num_heads`` heads, feed-forward) and a read-out per token.

    tokens (batch, T) -> logits (batch, T, num_classes). ``attention_weights()`` returns the
    encoder layer's weights, [(batch, heads, T, T)], so the head viewer can show them.
    The parameter count does not depend on ``num_heads``: the heads split d_model.
    """

    def __init__(self, vocab_size: int, num_classes: int, num_heads: int, d_model: int = 32, max_len: int = 8):
        super().__init__()
        self.encoder = Encoder(vocab_size, d_model=d_model, num_heads=num_heads, d_ff=2 * d_model, num_layers=1, max_len=max_len)
        self.readout = nn.Linear(d_model, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.readout(self.encoder(tokens))  # (batch, T, num_classes)

    def attention_weights(self) -> list[torch.Tensor | None]:
        return self.encoder.attention_weights()


def token_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy over every labelled position (for :func:`attention_book.fit`)."""
    logits = model(batch["tokens"])  # (batch, T, classes)
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=IGNORE)


def token_accuracy(model: nn.Module, batch: dict) -> tuple[int, int]:
    """(correctly answered positions, labelled positions) of a batch."""
    predictions = model(batch["tokens"]).argmax(dim=-1)  # (batch, T)
    labelled = batch["labels"] != IGNORE
    return int((predictions == batch["labels"])[labelled].sum()), int(labelled.sum())


@torch.no_grad()
def relation_accuracy(model: nn.Module, task: TwoRelationTask) -> dict[str, float]:
    """Fractions of labelled positions whose answer is right: both digits, the partner's, the previous token's."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    predictions = model(task.tokens.to(device)).argmax(dim=-1).cpu()  # (N, T)
    model.train(was_training)
    labelled = task.labels != IGNORE
    labels = task.labels[labelled]
    predicted = predictions[labelled]
    d = task.num_digits
    return {
        "both digits": (predicted == labels).float().mean().item(),
        "partner's digit": (predicted // d == labels // d).float().mean().item(),
        "previous token's digit": (predicted % d == labels % d).float().mean().item(),
    }


@torch.no_grad()
def head_focus(model: TwoRelationModel, task: TwoRelationTask, layer: int = 0) -> torch.Tensor:
    """How much weight each head puts, on average, on the previous token, the partner and the token itself.

    Returns a (heads, 3) tensor; columns are (previous, partner, itself), averaged over every
    labelled position of ``task``.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    model(task.tokens.to(device))
    model.train(was_training)
    weights = model.attention_weights()[layer].cpu()  # (N, heads, T, T)
    T = task.length
    positions = torch.arange(1, T)  # every position with a label
    previous = weights[:, :, positions, positions - 1]  # (N, heads, T - 1)
    partner_index = task.partner[:, None, 1:, None].expand(-1, weights.shape[1], -1, 1)  # (N, heads, T - 1, 1)
    partner = weights[:, :, 1:, :].gather(3, partner_index)[..., 0]  # (N, heads, T - 1)
    itself = weights[:, :, positions, positions]  # (N, heads, T - 1)
    return torch.stack([previous.mean((0, 2)), partner.mean((0, 2)), itself.mean((0, 2))], dim=1)  # (heads, 3)


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


def parameter_count(module: nn.Module) -> int:
    """Number of trainable numbers in ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def format_shape(shape: Sequence[int]) -> str:
    """``(2, 5, 8)``: a shape as the chapter prints it."""
    return "(" + ", ".join(str(int(size)) for size in shape) + ")"
