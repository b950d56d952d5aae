"""Chapter 6, decoder-only: English number names as a character corpus, and lines a model writes.

Floor 2 (data). :class:`CharacterCorpus` cuts a stream of number names ("three hundred
forty two", one per line) into windows for next-character prediction; :func:`is_number_name`
tells whether a written line is a real name; :func:`sample_lines` lets a trained
:class:`~attention_book.LanguageModel` write lines of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch.utils.data import Dataset

from .._validation import require_count

if TYPE_CHECKING:
    from ..transformer import LanguageModel

__all__ = ["CharacterCorpus", "number_words", "is_number_name", "ALPHABET", "sample_lines"]


_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """The English name of 0 <= n <= 999 in lower case, words separated by spaces: 342 -> 'three hundred forty two'."""
    require_count(n, "n", minimum=0, maximum=999)
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    rest = n % 100
    return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + number_words(rest))


_NAMES = {number_words(n): n for n in range(1000)}
ALPHABET = "\n " + "".join(sorted(set("".join(_NAMES)) - {" "}))
"""Newline, space and the letters of the number names: the characters of every :class:`CharacterCorpus`."""


def is_number_name(text: str) -> bool:
    """True if ``text`` is exactly the name of a number from 0 to 999 as :func:`number_words` writes it."""
    return text in _NAMES


class CharacterCorpus(Dataset):
    """Random windows of a character stream of number names, for next-character prediction.

    The stream is ``num_lines`` names of random numbers below ``largest`` + 1, one per line
    (``"\\n"`` ends a line). Each item is a window of ``T`` + 1 characters split into
    ``tokens`` (the first T) and ``targets`` (the last T): the target at position t is the
    character that follows position t. ``characters`` lists the alphabet (ids are indices).
    """

    def __init__(self, num_windows: int, T: int = 24, num_lines: int = 4000, largest: int = 99, seed: int = 0):
        require_count(num_windows, "num_windows", 1)
        require_count(T, "T", 2)
        require_count(largest, "largest", minimum=0, maximum=999)
        generator = torch.Generator().manual_seed(seed)
        numbers = torch.randint(0, largest + 1, (num_lines,), generator=generator).tolist()
        self.text = "".join(number_words(n) + "\n" for n in numbers)
        self.characters = ALPHABET  # the same ids for every corpus, whatever numbers it happens to hold
        self.index = {character: i for i, character in enumerate(self.characters)}
        stream = self.encode(self.text)  # (length,)
        if len(stream) <= T + 1:
            raise ValueError(f"the corpus has {len(stream)} characters, too few for windows of T={T}; raise num_lines")
        starts = torch.randint(0, len(stream) - T - 1, (num_windows,), generator=generator)
        windows = torch.stack([stream[start : start + T + 1] for start in starts.tolist()])  # (N, T + 1)
        self.tokens, self.targets = windows[:, :-1], windows[:, 1:]  # (N, T) each; targets shifted by one

    def encode(self, text: str) -> torch.Tensor:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"characters {unknown!r} are not in this corpus's alphabet {self.characters!r}")
        return torch.tensor([self.index[character] for character in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.characters[i] for i in torch.as_tensor(ids).tolist())

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"tokens": self.tokens[index], "targets": self.targets[index]}


@torch.no_grad()
def sample_lines(
    model: LanguageModel, corpus: CharacterCorpus, num_lines: int, seed: int = 0, temperature: float = 1.0
) -> list[str]:
    """Let ``model`` write ``num_lines`` lines, each started from a newline and sampled until the next one.

    Returns the lines without their newline. A line that has not ended within the model's
    ``max_len`` - 1 characters is returned as far as it got.
    """
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    start = corpus.encode("\n").to(device).repeat(num_lines, 1)  # (num_lines, 1)
    written = model.generate(
        start, model.max_len - 1, temperature=temperature, generator=generator
    )  # (num_lines, max_len)
    return [corpus.decode(row[1:]).split("\n")[0] for row in written.cpu()]
