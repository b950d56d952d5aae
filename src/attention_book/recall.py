"""Chapter 2: a key-value store that a small attention model learns by itself.

The task (:class:`~attention_book.data.tasks.AssociativeRecall`) shows the model a few
key-value pairs and then asks for one key: ``a 3 c 7 e 1 ? c`` -> ``7``.

:class:`RecallModel` solves it with two attention layers, and each one has a job
that you can read off its attention map:

1. **Binding** (``pair_attention``, self-attention): every token may look at itself
   and the token just before it. A value token looks back at its key and copies
   the key into its own vector, so after this layer the value token at position
   ``2i + 1`` carries both "I belong to key k_i" and "my value is v_i".
2. **Lookup** (``lookup_attention``, self-attention for one query): only the last
   token (the asked key) asks; every token of the same sequence answers, so its
   weights are the last row of a T x T self-attention map. Its query matches the value
   token that carries the asked key, and the value that comes back is read out as the
   answer.

Tokens enter as an embedding plus a learned position vector (chapter 5). The
measurements of a trained model (``attention_maps``, ``lookup_hit_rate``) are in
:mod:`attention_book.analysis.heads`, its figures in :mod:`attention_book.figures.chapter02`.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validation import require_count
from .key_value import SingleHeadAttention
from .positional import LearnedPositionalEncoding

__all__ = [
    "previous_token_mask",
    "RecallModel",
]


def previous_token_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(T, T)`` boolean mask, True where key j is the query's own position or the one before it.

    Row i may attend to columns ``i - 1`` and ``i`` (row 0 only to column 0).
    """
    require_count(T, "T (a sequence length)")
    positions = torch.arange(T, device=device)
    offset = positions[:, None] - positions[None, :]  # (T, T): query position - key position
    return (offset == 0) | (offset == 1)


class RecallModel(nn.Module):
    """Embedding + learned positions, a binding layer, a lookup layer and a linear read-out.

    Args:
        vocab_size: number of token ids (``len(task.vocab)``).
        max_len: longest sequence the model will see (``2 * num_pairs + 2``).
        d_model: width of every vector (queries, keys and values too).
        look_back_only: if True (default), the binding layer may only look at the
            previous token and itself (:func:`previous_token_mask`). With False it is
            unrestricted self-attention. Chapter 2 measures that within the steps the masked
            model needs (one pass, 63 steps), the unmasked one stays near guessing; whether and
            when it would learn the task, the book does not measure.

    ``forward(tokens)``: tokens (batch, T) -> logits (batch, vocab_size), read out at the
    last position. After a forward pass, ``pair_attention.last_weights`` (batch, T, T)
    and ``lookup_attention.last_weights`` (batch, 1, T) hold the two attention maps.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 32, look_back_only: bool = True):
        super().__init__()
        self.max_len, self.look_back_only = max_len, look_back_only
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positions = LearnedPositionalEncoding(max_len, d_model)
        self.pair_norm = nn.LayerNorm(d_model)
        self.pair_attention = SingleHeadAttention(d_model, d_k=d_model)  # layer 1: self-attention
        self.lookup_norm = nn.LayerNorm(d_model)
        self.lookup_attention = SingleHeadAttention(d_model, d_k=d_model)  # layer 2: the last token asks
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.is_floating_point():
            raise ValueError(
                f"tokens must be a (batch, T) tensor of token ids, but has shape {tuple(tokens.shape)} "
                f"and dtype {tokens.dtype}"
            )
        T = tokens.shape[1]
        x = self.positions(self.token_embedding(tokens))  # (batch, T, d_model)
        mask = previous_token_mask(T, tokens.device) if self.look_back_only else None
        bound, _ = self.pair_attention(self.pair_norm(x), mask=mask)  # (batch, T, d_model)
        x = x + bound  # residual: every token keeps its own identity and adds what it read
        context = self.lookup_norm(x)  # (batch, T, d_model)
        asked = context[:, -1:]  # (batch, 1, d_model): the last token, the key we ask for
        found, _ = self.lookup_attention(asked, context)  # (batch, 1, d_model)
        answer = x[:, -1] + found[:, 0]  # (batch, d_model)
        return self.readout(answer)  # (batch, vocab_size)
