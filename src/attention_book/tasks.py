"""Synthetic, seeded tasks whose attention maps are easy to read.

Every task shares one small vocabulary: ``PAD``, ``BOS``, ``EOS``, then symbols.
Datasets are generated once from a seed, so the same seed always gives the same
examples, and a different seed gives a disjoint-looking held-out set.

* copy / reverse / sort (``SequenceTask``): sequence-to-sequence; the cross-attention
  of a trained model is diagonal, anti-diagonal or rank-ordered.
* associative recall (``AssociativeRecall``): ``k1 v1 k2 v2 ... kn vn ? q`` -> the
  value stored under key q: chapter 2's soft lookup, learned.
"""

from __future__ import annotations

import string
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

__all__ = ["PAD", "BOS", "EOS", "Vocabulary", "SequenceTask", "AssociativeRecall", "TASKS"]

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")


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


def _check_lengths(min_len: int, max_len: int) -> None:
    if not (isinstance(min_len, int) and isinstance(max_len, int) and 1 <= min_len <= max_len):
        raise ValueError(f"need 1 <= min_len <= max_len, but min_len={min_len!r} and max_len={max_len!r}")


class SequenceTask(Dataset):
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
        key_ids = torch.stack(
            [torch.randperm(num_keys, generator=generator)[:num_pairs] for _ in range(num_samples)]
        ) + first_key  # (N, pairs), distinct keys per row
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


TASKS = {"copy": SequenceTask, "reverse": SequenceTask, "sort": SequenceTask, "associative_recall": AssociativeRecall}
