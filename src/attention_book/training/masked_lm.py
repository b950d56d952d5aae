"""Scoring a masked language model (chapter 7): accuracy at the ``[MASK]`` positions of corrupted
texts, and the pieces it puts in a gap. The model is trained by
:func:`attention_book.training.transfer.train_mlm`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .._validation import require_count, require_texts
from ..data.batches import index_batches
from ..data.pieces import MASK, SPECIAL_PIECES, PieceVocabulary, mask_tokens
from ..data.tasks import IGNORE
from ..modes import evaluating

__all__ = ["masked_token_accuracy", "fill_mask"]


@torch.no_grad()
def masked_token_accuracy(
    model: nn.Module | None, vocabulary: PieceVocabulary, texts: Sequence[str], seed: int = 1, max_tokens: int = 48
) -> float:
    """Top-1 accuracy at the [MASK] positions of ``texts``, corrupted as in training (seeded).

    The corruption is :func:`mask_tokens` with the vocabulary, as :func:`train_mlm` uses it
    (80 % [MASK], 10 % a random piece, 10 % unchanged), but only positions that show [MASK]
    are scored: at the others the input is a real piece, the unchanged ones the answer
    itself, and a model that copies its input would score there without having learned
    anything. ``model=None``: always guess the commonest piece.
    """
    texts = require_texts(texts)
    generator = torch.Generator().manual_seed(seed)
    correct = total = 0
    for rows in index_batches(len(texts), 256):
        tokens, padding_mask = vocabulary.encode([texts[i] for i in rows], max_tokens)
        corrupted, targets = mask_tokens(tokens, padding_mask, generator, vocab_size=len(vocabulary))
        scored = (corrupted == MASK) & (targets != IGNORE)  # the target is hidden from the input
        if model is None:
            guesses = torch.full_like(targets, vocabulary.commonest)
        else:
            guesses = torch.full_like(targets, -1)
            with evaluating(model):
                guesses[scored] = model(corrupted, padding_mask, scored).argmax(-1)
        correct += int((guesses[scored] == targets[scored]).sum())
        total += int(scored.sum())
    return correct / total


@torch.no_grad()
def fill_mask(model: nn.Module, vocabulary: PieceVocabulary, text: str, top: int = 5) -> list[tuple[str, float]]:
    """The ``top`` pieces the model puts where ``text`` says [MASK], with their probabilities."""
    if not isinstance(text, str) or "[MASK]" not in text:
        raise ValueError(f"the text must contain [MASK] where a piece is to be guessed, but is {text!r}")
    require_count(top, "top")
    before, after = text.split("[MASK]", 1)
    left = vocabulary.encode([before])[0][0] if before.strip() else torch.zeros(0, dtype=torch.long)
    right = vocabulary.encode([after])[0][0] if after.strip() else torch.zeros(0, dtype=torch.long)
    tokens = torch.cat([left, torch.tensor([MASK]), right])[None, :]  # (1, T)
    with evaluating(model):
        probabilities = model(tokens).softmax(-1)[0, len(left)]  # (vocab,)
    probabilities[: len(SPECIAL_PIECES)] = 0
    values, ids = probabilities.topk(top)
    return [(vocabulary.pieces[i], float(p)) for i, p in zip(ids.tolist(), values.tolist())]
