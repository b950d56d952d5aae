"""How vectors compare: one word's contextual vectors across sentences and depths, and two tensors' largest gap.

Chapter 7 measures how alike the vectors of "bank" are within and across its senses at
every depth of the pretrained encoder; chapters 5 and 7 compare tensors with
:func:`max_abs_difference` (e.g. a rotated query against the offset rotation).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..modes import evaluating
from ..pretrained import PretrainedEncoder

__all__ = ["word_vectors", "contextual_similarity_by_layer", "max_abs_difference"]


@torch.no_grad()
def word_vectors(model: PretrainedEncoder, sentence: str, word: str) -> torch.Tensor:
    """The vectors of ``word`` in ``sentence`` at every depth: (layers + 1, d), averaged over its pieces.

    Depth 0 is the embedding output (token + position + segment, normalised), depth k the
    output of k layers; the "static" vector of a piece is its row of the token table alone.
    """
    batch = model.encode([sentence])
    pieces = model.tokenizer.encode(word, add_special_tokens=False).ids
    ids = batch.tokens[0].tolist()
    for start in range(len(ids) - len(pieces) + 1):
        if ids[start : start + len(pieces)] == pieces:
            break
    else:
        raise ValueError(f"{word!r} (word pieces {pieces}) does not occur in {sentence!r}")
    with evaluating(model):
        states = model.hidden_states(batch.tokens, batch.padding_mask, batch.token_types)
    return torch.stack([state[0, start : start + len(pieces)].mean(0) for state in states]).cpu()


def contextual_similarity_by_layer(
    model: PretrainedEncoder, word: str, groups: dict[str, Sequence[str]]
) -> dict[str, list[float]]:
    """Average cosine similarity of ``word``'s vectors, per depth, within each group of sentences and across groups.

    ``groups`` maps a sense (e.g. "money") to sentences using ``word`` in that sense.
    Returns ``{"same sense": [...], "different sense": [...]}``, one number per depth (0 to layers).
    """
    if len(groups) < 2:
        raise ValueError(f"give at least two groups of sentences (two senses), but {len(groups)} were given")
    vectors, senses = [], []
    for sense, sentences in groups.items():
        for sentence in sentences:
            vectors.append(word_vectors(model, sentence, word))
            senses.append(sense)
    stacked = torch.stack(vectors, dim=1)  # (layers + 1, n, d)
    similarity = F.cosine_similarity(stacked[:, :, None], stacked[:, None, :], dim=-1)  # (layers + 1, n, n)
    same = torch.tensor([[a == b for b in senses] for a in senses])
    off_diagonal = ~torch.eye(len(senses), dtype=torch.bool)
    return {
        "same sense": similarity[:, same & off_diagonal].mean(-1).tolist(),
        "different sense": similarity[:, ~same].mean(-1).tolist(),
    }


def max_abs_difference(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest absolute difference between two tensors of the same shape, as a float."""
    return float((a.detach() - b.detach()).abs().max())
