"""Chapter 1: why attention was invented, as two small recurrent encoder-decoders.

Before attention, a translation model read the source with a recurrent *encoder* and
wrote the answer with a recurrent *decoder* that started from the encoder's last state:
the whole source had to pass through that one fixed-size vector. Bahdanau et al. (2015)
let the decoder look back at *every* encoder state instead, through a weighted average
whose weights come from a learned score, the **additive score**
``s_ij = tanh(q_i W_1 + k_j W_2) w``.

:class:`RNNEncoderDecoder` is both models in one class: with ``attention=False`` the
decoder sees the encoder's last state at every step (the fixed-size bottleneck); with
``attention=True`` it sees, at every step, a weighted average of all the encoder states
(:class:`AdditiveScore` makes the weights). Everything else, the parameters included, is
the same, so that a comparison of the two measures the bottleneck and nothing else.

The decoder combines its state with what it saw after each update, as Luong et al. (2015)
do; Bahdanau et al. feed it into the next update instead. Both are attention over the
encoder states; this order lets the decoder run over a whole teacher-forced answer in
one call of ``nn.GRU``, which keeps chapter 1's five-seed experiment within seconds.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from ._validation import require_count

__all__ = ["AdditiveScore", "RNNEncoderDecoder"]


class AdditiveScore(nn.Module):
    """Bahdanau's additive score ``s_ij = tanh(q_i W_1 + k_j W_2) w`` of every query against every key.

    Args:
        d_query: features of a query (the asking vector).
        d_key: features of a key; it need not equal ``d_query``.
        d_hidden: width ``d_a`` of the score's hidden layer.
    """

    def __init__(self, d_query: int, d_key: int, d_hidden: int):
        super().__init__()
        for value, name in ((d_query, "d_query"), (d_key, "d_key"), (d_hidden, "d_hidden")):
            require_count(value, name)
        self.W_1 = nn.Linear(d_query, d_hidden, bias=False)  # applied to the asking vector
        self.W_2 = nn.Linear(d_key, d_hidden, bias=False)  # applied to every key
        self.w = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Scores ``(batch, T_q, T_k)`` of queries ``(batch, T_q, d_query)`` against keys ``(batch, T_k, d_key)``."""
        if queries.dim() != 3 or keys.dim() != 3:
            raise ValueError(
                f"queries and keys must be (batch, T, features), but shapes {tuple(queries.shape)} "
                f"and {tuple(keys.shape)} were given"
            )
        if queries.shape[-1] != self.W_1.in_features or keys.shape[-1] != self.W_2.in_features:
            raise ValueError(
                f"the score expects queries with {self.W_1.in_features} and keys with "
                f"{self.W_2.in_features} features, but {queries.shape[-1]} and {keys.shape[-1]} were given"
            )
        # (batch, T_q, 1, d_a) + (batch, 1, T_k, d_a) -> (batch, T_q, T_k, d_a): every pair
        hidden = torch.tanh(self.W_1(queries)[:, :, None] + self.W_2(keys)[:, None])
        return self.w(hidden).squeeze(-1)  # (batch, T_q, T_k)


class RNNEncoderDecoder(nn.Module):
    """A GRU encoder and a GRU decoder, joined by one fixed-size vector or by additive attention.

    Args:
        vocab_size: number of token ids (source and answer share one vocabulary).
        hidden: width of the embeddings and of both GRU states; with ``attention=False``
            this is the size of the one vector the whole source must pass through.
        attention: False: the decoder sees the encoder's last state at every step.
            True: it sees a weighted average of all the encoder states, weighted by
            :class:`AdditiveScore` of its own state against each of them.

    ``forward(source, target_in, source_padding=None, target_padding=None)`` takes the
    layout of :class:`~attention_book.data.tasks.SequenceTask` and returns logits
    ``(batch, T_out, vocab_size)`` (teacher forcing: ``target_in`` is BOS + answer). After a
    call with ``attention=True``, ``last_weights`` holds the weights ``(batch, T_out, T_in)``.
    """

    def __init__(self, vocab_size: int, hidden: int = 32, attention: bool = True):
        super().__init__()
        require_count(vocab_size, "vocab_size")
        require_count(hidden, "hidden")
        self.attention = attention
        self.embed = nn.Embedding(vocab_size, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        # Built in both models, used only with attention=True: the two have the same parameters.
        self.score = AdditiveScore(hidden, hidden, hidden)
        self.out = nn.Linear(2 * hidden, vocab_size)  # from [decoder state, what it saw]
        self.last_weights: torch.Tensor | None = None

    def encode(
        self, source: torch.Tensor, source_padding: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Encoder states ``(batch, T_in, hidden)`` and the last real state of each source ``(batch, hidden)``."""
        if source.dim() != 2:
            raise ValueError(f"source must be (batch, T_in) token ids, but shape {tuple(source.shape)} was given")
        embedded = self.embed(source)  # (batch, T_in, hidden)
        if source_padding is None or bool(source_padding.all()):
            states, last = self.encoder(embedded)  # (batch, T_in, hidden), (1, batch, hidden)
            return states, last[0]
        if source_padding.shape != source.shape:
            raise ValueError(
                f"source_padding must have the source's shape {tuple(source.shape)}, "
                f"but {tuple(source_padding.shape)} was given"
            )
        lengths = source_padding.sum(dim=1).cpu()
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        states, last = self.encoder(packed)
        states, _ = pad_packed_sequence(states, batch_first=True, total_length=source.shape[1])
        return states, last[0]

    def forward(
        self,
        source: torch.Tensor,
        target_in: torch.Tensor,
        source_padding: torch.Tensor | None = None,
        target_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        states, last = self.encode(source, source_padding)
        # The decoder starts from the encoder's last state: (batch, T_out, hidden)
        decoder_states, _ = self.decoder(self.embed(target_in), last[None].contiguous())
        if self.attention:
            scores = self.score(decoder_states, states)  # (batch, T_out, T_in)
            if source_padding is not None:
                scores = scores.masked_fill(~source_padding[:, None, :], float("-inf"))
            weights = torch.softmax(scores, dim=-1)  # (batch, T_out, T_in)
            seen = weights @ states  # (batch, T_out, T_in) @ (batch, T_in, hidden) -> (batch, T_out, hidden)
            self.last_weights = weights.detach()
        else:
            seen = last[:, None].expand_as(decoder_states)  # the one vector, at every step
        return self.out(torch.cat([decoder_states, seen], dim=-1))  # (batch, T_out, vocab)
