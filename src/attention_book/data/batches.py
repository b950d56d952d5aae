"""Mini-batches of examples of similar length, with the columns that are padding everywhere cut off.

Used by chapter 7's training recipes (:mod:`attention_book.training.transfer`) and
measurements: sentences vary from 2 to 48 word pieces, and batching them by length
computes little padding. A :class:`LengthBatches` is re-iterable (every pass draws a new
order from its generator) and has a length, so :func:`attention_book.fit` treats it like
a ``DataLoader``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from .._validation import require_count, require_tensor

__all__ = ["index_batches", "trim_padding", "LengthBatches"]


def index_batches(
    count: int, batch_size: int, generator: torch.Generator | None = None, lengths: torch.Tensor | None = None
) -> Iterator[torch.Tensor]:
    """Row indices, ``batch_size`` at a time: shuffled with ``generator``, else in order.

    With ``lengths``, batches hold examples of similar length: shuffled examples are
    sorted by length within pools of 32 batches, cut into batches, and the batches
    shuffled (without ``generator``: all examples sorted by length). Every example is in
    exactly one batch, and there are ``ceil(count / batch_size)`` batches either way.
    """
    require_count(count, "count")
    require_count(batch_size, "batch_size")
    order = torch.randperm(count, generator=generator) if generator is not None else torch.arange(count)
    if lengths is None:
        for start in range(0, count, batch_size):
            yield order[start : start + batch_size]
        return
    pool = count if generator is None else 32 * batch_size
    batches = []
    for begin in range(0, count, pool):
        chunk = order[begin : begin + pool]
        chunk = chunk[torch.argsort(lengths[chunk], stable=True)]
        batches += [chunk[start : start + batch_size] for start in range(0, len(chunk), batch_size)]
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    yield from batches


def trim_padding(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Cut the positions that are padding in every row: each tensor as wide as ``padding_mask`` loses them.

    ``batch["padding_mask"]`` is (batch, T), True for real tokens; every other tensor whose
    second dimension is T (tokens, labels per token, token vectors) is cut to the longest
    real length; the rest (a label per example) is kept as it is.
    """
    if "padding_mask" not in batch:
        raise ValueError(f"trim_padding needs a 'padding_mask' in the batch, but it holds {sorted(batch)}")
    padding_mask = require_tensor(batch["padding_mask"], "padding_mask")
    if padding_mask.dim() != 2 or padding_mask.dtype != torch.bool:
        raise ValueError(
            f"padding_mask must be a boolean (batch, T) tensor, but has shape {tuple(padding_mask.shape)} and dtype {padding_mask.dtype}"
        )
    width = padding_mask.shape[1]
    T = int(padding_mask.sum(dim=1).max())
    return {
        name: value[:, :T] if value.dim() >= 2 and value.shape[1] == width else value for name, value in batch.items()
    }


class LengthBatches:
    """Re-iterable mini-batches of a dict of tensors that share their first dimension (the examples).

    Each pass yields ``{name: tensor[rows]}`` for the rows of :func:`index_batches`. When the
    tensors include a ``padding_mask``, ``by_length`` groups examples of similar length (its
    row sums) and ``trim`` cuts the padding columns (:func:`trim_padding`). ``generator``
    makes the order random and reproducible.
    """

    def __init__(
        self,
        tensors: Mapping[str, torch.Tensor],
        batch_size: int,
        generator: torch.Generator | None = None,
        by_length: bool = True,
        trim: bool = True,
    ):
        if not isinstance(tensors, Mapping) or not tensors:
            raise ValueError(f"tensors must be a non-empty dict of tensors, but {type(tensors).__name__} was given")
        counts = {name: len(require_tensor(value, name)) for name, value in tensors.items()}
        if len(set(counts.values())) != 1:
            raise ValueError(f"every tensor needs one row per example, but the row counts differ: {counts}")
        self.tensors = dict(tensors)
        self.batch_size = require_count(batch_size, "batch_size")
        self.generator = generator
        self.count = next(iter(counts.values()))
        has_mask = "padding_mask" in self.tensors
        self.lengths = self.tensors["padding_mask"].sum(dim=1) if (by_length and has_mask) else None
        self.trim = trim and has_mask

    def __len__(self) -> int:
        return -(-self.count // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        for rows in index_batches(self.count, self.batch_size, self.generator, lengths=self.lengths):
            batch = {name: value[rows] for name, value in self.tensors.items()}
            yield trim_padding(batch) if self.trim else batch
