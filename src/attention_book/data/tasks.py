"""Every toy task of the book: synthetic, seeded, with one item layout and one padding convention.

Datasets are generated once from a seed: the same seed always gives the same examples,
another seed an independent set (for validation and test). Items are dicts of tensors
that the default ``DataLoader`` collates. Inputs are ``tokens`` padded with :data:`PAD`,
with a boolean ``padding_mask`` (True = real token) where lengths vary; per-position
labels use :data:`IGNORE` where there is nothing to predict.

=====================  ==============================================  =======
task                   what it asks                                    chapter
=====================  ==============================================  =======
``AssociativeRecall``  ``k1 v1 ... kn vn ? q`` -> the value under q    2
``TwoRelationTask``    per token: partner's digit, previous digit      4
``WordOrderTask``      does "deep" come before "learning"?             5
``SequenceTask``       copy / reverse / sort a sequence                6
``ToyReviews``         is a bag of opinion words positive? ([CLS])     6
``CharacterCorpus``    the next character of English number names      6
=====================  ==============================================  =======

(``CharacterCorpus`` and the number names live in :mod:`attention_book.data.numbers`.)

:func:`word_encoder` turns typed text into ids of a word-level vocabulary (chapter 4's
task and the head viewer use it).
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

from .._validation import require_count
from .numbers import CharacterCorpus

__all__ = [
    "PAD",
    "BOS",
    "EOS",
    "IGNORE",
    "SPECIALS",
    "Vocabulary",
    "word_encoder",
    "SequenceTask",
    "AssociativeRecall",
    "TwoRelationTask",
    "WordOrderTask",
    "ToyReviews",
    "TASKS",
]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")
IGNORE = -100
"""Label of a position that has no answer: ``F.cross_entropy(..., ignore_index=IGNORE)`` skips it.

(-100 is also cross-entropy's default ``ignore_index``.) Padding is the token id :data:`PAD`
in inputs and IGNORE in labels; a padding mask is a boolean tensor named ``padding_mask``,
True for real tokens."""


@dataclass(frozen=True)
class Vocabulary:
    """Special tokens followed by ``symbols``; turns ids into readable labels and back."""

    symbols: tuple[str, ...]

    @property
    def tokens(self) -> tuple[str, ...]:
        return SPECIALS + self.symbols

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, labels: list[str] | str) -> torch.Tensor:
        index = {token: i for i, token in enumerate(self.tokens)}
        unknown = [label for label in labels if label not in index]
        if unknown:
            raise ValueError(f"unknown tokens {unknown!r}; this vocabulary has {list(self.tokens)}")
        return torch.tensor([index[label] for label in labels], dtype=torch.long)

    def decode(self, ids: torch.Tensor | list[int], strip: bool = True) -> list[str]:
        """Labels for ``ids``; with ``strip`` it stops at EOS and drops PAD and BOS."""
        labels = []
        for i in torch.as_tensor(ids).tolist():
            if strip and i == EOS:
                break
            if strip and i in (PAD, BOS):
                continue
            labels.append(self.tokens[i])
        return labels


def _check_lengths(min_len: int, max_len: int, shortest: int = 1) -> None:
    require_count(min_len, "min_len", shortest)
    require_count(max_len, f"max_len (at least min_len={min_len})", min_len)


class SourceTargetItems(Dataset):
    """What a sequence-to-sequence task hands the training loop: item ``i`` is a dict of its source,
    the decoder's input and target (shifted by one) and their padding masks, from the tensors
    ``source``, ``source_padding``, ``target_in``, ``target_out`` and ``target_padding`` that a
    subclass builds (``SequenceTask``, ``DateTask``)."""

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {
            "source": self.source[index],
            "source_padding": self.source_padding[index],
            "target_in": self.target_in[index],
            "target_out": self.target_out[index],
            "target_padding": self.target_padding[index],
        }


class SequenceTask(SourceTargetItems):
    """Copy, reverse or sort a random sequence of symbols.

    Each item is a dict of tensors (the default DataLoader collates them):
    ``source`` (max_len,) padded with PAD; ``source_padding`` (max_len,) True for real
    tokens; ``target_in`` (max_len + 1,) = BOS + answer, padded; ``target_out``
    (max_len + 1,) = answer + EOS, padded (the labels for teacher forcing);
    ``target_padding`` (max_len + 1,) True where ``target_in`` holds a real token.
    """

    KINDS = ("copy", "reverse", "sort")

    def __init__(
        self,
        kind: str,
        num_samples: int,
        min_len: int = 4,
        max_len: int = 8,
        num_symbols: int = 10,
        seed: int = 0,
    ):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {self.KINDS}, but {kind!r} was given")
        if not 2 <= num_symbols <= 26:
            raise ValueError(f"num_symbols must lie between 2 and 26, but {num_symbols!r} was given")
        _check_lengths(min_len, max_len)
        self.kind, self.max_len = kind, max_len
        self.vocab = Vocabulary(tuple(string.ascii_uppercase[:num_symbols]))  # sorts alphabetically
        generator = torch.Generator().manual_seed(seed)
        lengths = torch.randint(min_len, max_len + 1, (num_samples,), generator=generator)
        first_symbol = len(SPECIALS)
        symbols = torch.randint(first_symbol, first_symbol + num_symbols, (num_samples, max_len), generator=generator)
        positions = torch.arange(max_len)
        self.source_padding = positions[None, :] < lengths[:, None]  # (N, max_len)
        self.source = symbols.masked_fill(~self.source_padding, PAD)  # (N, max_len)
        answers = torch.full_like(self.source, PAD)
        for i, length in enumerate(lengths.tolist()):
            answers[i, :length] = self._solve(self.source[i, :length])
        self.target_out = torch.full((num_samples, max_len + 1), PAD, dtype=torch.long)
        self.target_out[:, :max_len] = answers
        self.target_out[torch.arange(num_samples), lengths] = EOS  # (N, max_len + 1)
        self.target_in = torch.full_like(self.target_out, PAD)
        self.target_in[:, 0] = BOS
        self.target_in[:, 1:] = answers  # (N, max_len + 1): BOS then the answer
        self.target_padding = torch.arange(max_len + 1)[None, :] <= lengths[:, None]  # BOS + answer

    def _solve(self, sequence: torch.Tensor) -> torch.Tensor:
        if self.kind == "copy":
            return sequence
        if self.kind == "reverse":
            return sequence.flip(0)
        return sequence.sort().values


class AssociativeRecall(Dataset):
    """``k1 v1 ... kn vn ? q`` -> the value stored under key q.

    Keys are letters, values are digits, keys within a sequence are distinct. Items are
    dicts: ``tokens`` (2 num_pairs + 2,) and ``label`` (a vocabulary id of the value).
    """

    def __init__(self, num_samples: int, num_pairs: int = 4, num_keys: int = 8, num_values: int = 10, seed: int = 0):
        if not 1 <= num_pairs <= num_keys <= 26 or not 2 <= num_values <= 10:
            raise ValueError(
                f"need 1 <= num_pairs <= num_keys <= 26 and 2 <= num_values <= 10, but got "
                f"num_pairs={num_pairs}, num_keys={num_keys}, num_values={num_values}"
            )
        keys = tuple(string.ascii_lowercase[:num_keys])
        values = tuple(str(i) for i in range(num_values))
        self.vocab = Vocabulary(keys + values + ("?",))
        self.num_pairs = num_pairs
        generator = torch.Generator().manual_seed(seed)
        first_key = len(SPECIALS)
        first_value = first_key + num_keys
        question = len(self.vocab) - 1
        key_ids = (
            torch.stack([torch.randperm(num_keys, generator=generator)[:num_pairs] for _ in range(num_samples)])
            + first_key
        )  # (N, pairs), distinct keys per row
        value_ids = torch.randint(first_value, first_value + num_values, (num_samples, num_pairs), generator=generator)
        asked = torch.randint(0, num_pairs, (num_samples,), generator=generator)  # which pair is asked
        pairs = torch.stack([key_ids, value_ids], dim=-1).flatten(1)  # (N, 2 pairs): k1 v1 k2 v2 ...
        rows = torch.arange(num_samples)
        self.tokens = torch.cat(
            [pairs, torch.full((num_samples, 1), question), key_ids[rows, asked][:, None]], dim=1
        )  # (N, 2 pairs + 2)
        self.labels = value_ids[rows, asked]  # (N,)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"tokens": self.tokens[index], "label": self.labels[index]}


Encode = Callable[[str], tuple[torch.Tensor, list[str]]]


def word_encoder(vocabulary, max_len: int | None = None, lowercase: bool = False) -> Encode:
    """An ``encode(text) -> (tokens (1, T), labels)`` for a word-level vocabulary.

    ``vocabulary`` is an :class:`~attention_book.Vocabulary`, a mapping ``{word: id}``, or
    a sequence of words (a word's id is its position). The text is split on white space.
    ``encode`` raises ValueError for an empty text, unknown words (naming them) and a
    text of more than ``max_len`` words.

    ``encode.word_rules`` describes it completely (``words``: the vocabulary in id order as
    ``[word, id]`` pairs, ``max_len``, ``lowercase``, and ``known``, the text that names the
    vocabulary in the unknown-word message), so that the book's website can encode typed
    text in JavaScript exactly as this function does (the head viewer saves it).
    """
    if hasattr(vocabulary, "tokens") and not isinstance(vocabulary, Mapping):
        vocabulary = list(vocabulary.tokens)
    if isinstance(vocabulary, Mapping):
        index = {str(word): int(i) for word, i in vocabulary.items()}
    elif isinstance(vocabulary, Sequence) and not isinstance(vocabulary, str):
        index = {str(word): i for i, word in enumerate(vocabulary)}
    else:
        raise ValueError(
            "vocabulary must be an attention_book Vocabulary, a dict {word: id} or a list of words, "
            f"but a {type(vocabulary).__name__} was given"
        )
    if not index:
        raise ValueError("the vocabulary is empty")
    if max_len is not None:
        require_count(max_len, "max_len", 1)
    examples = ", ".join(word for word in list(index)[:12] if not word.startswith("<"))
    known = f"{len(index)} words, e.g. {examples}"

    def encode(text: str) -> tuple[torch.Tensor, list[str]]:
        if not isinstance(text, str):
            raise ValueError(f"the text must be a string, but a {type(text).__name__} was given")
        words = (text.lower() if lowercase else text).split()
        if not words:
            raise ValueError("the sentence is empty: type a few words separated by spaces")
        unknown = [word for word in dict.fromkeys(words) if word not in index]
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            raise ValueError(
                f"unknown word{plural} {', '.join(repr(w) for w in unknown)}: the model only knows its "
                f"vocabulary ({known})"
            )
        if max_len is not None and len(words) > max_len:
            raise ValueError(f"the sentence has {len(words)} words but the model reads at most {max_len}")
        return torch.tensor([[index[word] for word in words]], dtype=torch.long), words

    encode.word_rules = {
        "words": [[word, i] for word, i in index.items()],
        "max_len": max_len,
        "lowercase": bool(lowercase),
        "known": known,
    }
    return encode


# ---------------------------------------------------------------------------------
# Chapter 4: two relations at every position, one found by content and one by position


class TwoRelationTask(Dataset):
    """Sequences of letter-digit tokens such as ``c2``; each letter occurs exactly twice.

    The answer at position t (t >= 1) is a pair of digits: the digit of t's *partner*, the
    other token with the same letter (a relation found by content), and the digit of the
    token at t - 1 (a relation found by position). It is encoded as the class
    ``num_digits * partner_digit + previous_digit``; position 0 has no previous token and
    gets the target :data:`IGNORE`.

    Each item is ``{"tokens": (T,), "targets": (T,)}``; ``partner`` (N, T) holds the
    partner's position. The same seed always gives the same sequences.
    """

    def __init__(self, num_samples: int, seed: int = 0, num_letters: int = 8, num_digits: int = 4, num_pairs: int = 4):
        require_count(num_samples, "num_samples", 1)
        require_count(num_digits, "num_digits", minimum=2, maximum=10)
        require_count(num_pairs, "num_pairs", 2)
        require_count(num_letters, "num_letters", minimum=num_pairs, maximum=26)
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
        self.targets = num_digits * partner_digit + previous_digit  # (N, T)
        self.targets[:, 0] = IGNORE
        self.encode = word_encoder(self.vocabulary, max_len=T)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict:
        return {"tokens": self.tokens[index], "targets": self.targets[index]}

    def words(self, index: int) -> list[str]:
        """The tokens of sequence ``index`` as text, e.g. ``['c1', 'h3', ...]``."""
        return [self.vocabulary[i] for i in self.tokens[index].tolist()]

    def answers(self, index: int) -> list[str]:
        """The answers of sequence ``index`` as text: ``'32'`` for partner's digit 3 and previous digit 2, ``'-'`` for none."""
        pairs = [self.answer(label) for label in self.targets[index].tolist()]
        return ["-" if pair is None else f"{pair[0]}{pair[1]}" for pair in pairs]

    def answer(self, label: int) -> tuple[int, int] | None:
        """The class ``label`` as the pair (partner's digit, previous token's digit); None for IGNORE."""
        if label == IGNORE:
            return None
        return divmod(int(label), self.num_digits)


# ---------------------------------------------------------------------------------
# Chapter 5: a task that only word order decides


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

    Items are dicts: ``tokens`` (pad_to,) ids padded with PAD, ``padding_mask`` (pad_to,)
    True for real tokens, ``label`` (1 if ``deep`` comes first, else 0) and ``length``.
    Sequence ``2i + 1`` is the twin of sequence ``2i``: the same words with ``deep`` and
    ``learning`` swapped, and the opposite label.
    """

    def __init__(self, num_samples: int, min_len: int = 4, max_len: int = 8, pad_to: int | None = None, seed: int = 0):
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 2 or num_samples % 2:
            raise ValueError(
                f"num_samples must be a positive even integer (sequences come in twins), but {num_samples!r} was given"
            )
        _check_lengths(min_len, max_len, shortest=2)  # two marked words must fit
        pad_to = max_len if pad_to is None else pad_to
        require_count(pad_to, f"pad_to (at least max_len={max_len})", max_len)
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
        self.padding_mask = tokens != PAD  # (N, pad_to): True for real tokens
        self.labels = labels  # (N,)
        self.lengths = self.padding_mask.sum(dim=1)  # (N,)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {
            "tokens": self.tokens[index],
            "padding_mask": self.padding_mask[index],
            "label": self.labels[index],
            "length": self.lengths[index],
        }

    def sentence(self, index: int) -> str:
        """The words of sequence ``index`` and its label, e.g. ``'we deep fun learning -> deep first'``."""
        words = self.vocab.decode(self.tokens[index])
        return f"{' '.join(words)} -> {self.label_names[int(self.labels[index])]}"


# ---------------------------------------------------------------------------------
# Chapter 6, encoder-only: toy reviews with a [CLS] token


POSITIVE = ("good", "great", "fun", "clever")
NEGATIVE = ("bad", "dull", "awful", "boring")
NEUTRAL = ("the", "movie", "plot", "was", "and", "acting")
CLS = "[CLS]"


class ToyReviews(Dataset):
    """Reviews of 3 to ``max_words`` random words, positive if they hold more positive than negative words.

    Positive words: good, great, fun, clever; negative: bad, dull, awful, boring; the rest
    (the, movie, plot, was, and, acting) carry no opinion. Reviews with a tie are not drawn.
    Every review starts with a [CLS] token. Items are dicts: ``tokens`` (max_words + 1,)
    padded with PAD, ``padding_mask`` (max_words + 1,) True for real tokens, ``label`` (1 =
    positive, 0 = negative).
    """

    def __init__(self, num_samples: int, max_words: int = 8, seed: int = 0):
        require_count(num_samples, "num_samples", 1)
        require_count(max_words, "max_words", 3)
        self.vocab = Vocabulary((CLS,) + POSITIVE + NEGATIVE + NEUTRAL)
        words = POSITIVE + NEGATIVE + NEUTRAL
        opinion = torch.tensor([1] * len(POSITIVE) + [-1] * len(NEGATIVE) + [0] * len(NEUTRAL))
        generator = torch.Generator().manual_seed(seed)
        first_word = self.vocab.tokens.index(words[0])
        rows, labels = [], []
        while len(rows) < num_samples:
            length = int(torch.randint(3, max_words + 1, (), generator=generator))
            choice = torch.randint(0, len(words), (length,), generator=generator)
            score = int(opinion[choice].sum())
            if score == 0:
                continue
            row = torch.full((max_words + 1,), PAD, dtype=torch.long)
            row[0] = self.vocab.tokens.index(CLS)
            row[1 : length + 1] = choice + first_word
            rows.append(row)
            labels.append(int(score > 0))
        self.tokens = torch.stack(rows)  # (N, max_words + 1)
        self.padding_mask = self.tokens != PAD  # (N, max_words + 1)
        self.labels = torch.tensor(labels)  # (N,)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"tokens": self.tokens[index], "padding_mask": self.padding_mask[index], "label": self.labels[index]}


TASKS = {
    "copy": SequenceTask,
    "reverse": SequenceTask,
    "sort": SequenceTask,
    "associative_recall": AssociativeRecall,
    "two_relation": TwoRelationTask,
    "word_order": WordOrderTask,
    "toy_reviews": ToyReviews,
    "number_names": CharacterCorpus,
}
