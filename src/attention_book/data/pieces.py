"""Word pieces for chapter 7's small models, and BERT's masking of them.

:class:`PieceVocabulary` maps the word pieces (from the pretrained model's WordPiece
tokenizer) that occur in the training reviews to a compact vocabulary, so the small
models trained from scratch need 4,000 embedding rows instead of 30,522.
:func:`mask_tokens` is the corruption of masked-language-model pretraining; chapter 7
writes it out in plain torch first and checks it against this one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .._validation import describe_shape, require_count, require_padding_mask, require_tensor, require_texts
from .tasks import IGNORE, PAD

__all__ = ["SPECIAL_PIECES", "UNK", "MASK", "PieceVocabulary", "build_vocabulary", "mask_tokens"]

SPECIAL_PIECES = ("[PAD]", "[UNK]", "[MASK]")
UNK, MASK = 1, 2  # ids of [UNK] and [MASK]; [PAD] is the book's PAD (0)


@dataclass
class PieceVocabulary:
    """Word pieces (from the pretrained model's WordPiece tokenizer) seen in the training texts.

    Ids: 0 = [PAD], 1 = [UNK] (a piece seen too rarely to be kept), 2 = [MASK], then the
    pieces from most to least frequent. No [CLS]/[SEP]: the small models pool by averaging.
    """

    tokenizer: object
    pieces: list[str]
    counts: list[int]
    index: dict[int, int] = field(repr=False)  # WordPiece id -> our id

    def __len__(self) -> int:
        return len(self.pieces)

    def __repr__(self) -> str:
        return f"PieceVocabulary({len(self):,} pieces, 3 special)"

    def encode(self, texts: Sequence[str], max_tokens: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> (tokens (N, T), padding_mask (N, T)), at most ``max_tokens`` pieces each."""
        texts = require_texts(texts)
        require_count(max_tokens, "max_tokens")
        self.tokenizer.no_truncation()
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        rows = [[self.index.get(i, UNK) for i in encoding.ids[:max_tokens]] or [UNK] for encoding in encodings]
        T = max(len(row) for row in rows)
        tokens = torch.full((len(rows), T), PAD, dtype=torch.long)
        for n, row in enumerate(rows):
            tokens[n, : len(row)] = torch.tensor(row)
        lengths = torch.tensor([len(row) for row in rows])
        return tokens, torch.arange(T)[None, :] < lengths[:, None]

    def decode(self, ids) -> list[str]:
        return [self.pieces[i] for i in torch.as_tensor(ids).tolist()]

    @property
    def commonest(self) -> int:
        """The id of the most frequent ordinary piece: the best guess that ignores context."""
        return len(SPECIAL_PIECES) + int(torch.tensor(self.counts[len(SPECIAL_PIECES) :]).argmax())


def build_vocabulary(
    pretrained, texts: Sequence[str], min_count: int = 2, max_pieces: int | None = None
) -> PieceVocabulary:
    """The pieces of ``texts`` (tokenized by the pretrained model's WordPiece) seen at least ``min_count`` times.

    With ``max_pieces``, only that many of the most frequent ones (the rest become [UNK]).
    ``pretrained`` is anything with a ``tokenizer`` (a :class:`~attention_book.pretrained.PretrainedEncoder`).
    """
    texts = require_texts(texts)
    require_count(min_count, "min_count")
    if max_pieces is not None:
        require_count(max_pieces, "max_pieces")
    tokenizer = pretrained.tokenizer
    tokenizer.no_truncation()
    counts = Counter(i for encoding in tokenizer.encode_batch(texts, add_special_tokens=False) for i in encoding.ids)
    kept = sorted((i for i, c in counts.items() if c >= min_count), key=lambda i: (-counts[i], i))[:max_pieces]
    pieces = list(SPECIAL_PIECES) + [tokenizer.id_to_token(i) for i in kept]
    kept_set = set(kept)
    frequencies = [0, sum(c for i, c in counts.items() if i not in kept_set), 0] + [counts[i] for i in kept]
    index = {i: n + len(SPECIAL_PIECES) for n, i in enumerate(kept)}
    return PieceVocabulary(tokenizer, pieces, frequencies, index=index)


def mask_tokens(
    tokens: torch.Tensor,
    padding_mask: torch.Tensor,
    generator: torch.Generator,
    mask_id: int = MASK,
    vocab_size: int | None = None,
    rate: float = 0.15,
    first_id: int = len(SPECIAL_PIECES),
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption: choose ``rate`` of the real tokens; of those, 80% become [MASK],
    10% a random piece (ids ``first_id`` to ``vocab_size - 1``), 10% stay. Without
    ``vocab_size`` the 10% meant for random pieces stay too.

    Returns (corrupted tokens, targets), targets :data:`~attention_book.data.tasks.IGNORE`
    at every position that was not chosen. Every sequence gets at least one chosen token.
    """
    require_tensor(tokens, "tokens")
    if not 0 < rate < 1:
        raise ValueError(f"rate must lie between 0 and 1, but {rate!r} was given")
    if tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError(
            f"tokens must be a (batch, T) tensor of ids, but has shape {describe_shape(tokens)} and dtype {tokens.dtype}"
        )
    require_padding_mask(padding_mask, tuple(tokens.shape), "tokens")
    draw = torch.rand(tokens.shape, generator=generator)
    chosen = (draw < rate) & padding_mask
    # Make sure every sequence predicts at least one token.
    none = ~chosen.any(dim=1)
    if none.any():
        first_real = padding_mask.float().argmax(dim=1)
        chosen[none, first_real[none]] = True
    action = torch.rand(tokens.shape, generator=generator)
    corrupted = tokens.clone()
    corrupted[chosen & (action < 0.8)] = mask_id
    if vocab_size is not None:
        swap = chosen & (action >= 0.8) & (action < 0.9)
        random_ids = torch.randint(first_id, vocab_size, tokens.shape, generator=generator)
        corrupted[swap] = random_ids[swap]
    targets = torch.where(chosen, tokens, torch.full_like(tokens, IGNORE))
    return corrupted, targets
