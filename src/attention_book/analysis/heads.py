"""Where attention heads look, measured: on the book's trained models and on the pretrained one.

==============================  ===========================================  =======
function                        measures                                     chapter
==============================  ===========================================  =======
``attention_maps``              both maps of the recall model                2
``lookup_hit_rate``             how often the lookup finds the asked pair    2
``relation_accuracy``           accuracy per relation (partner, previous)    4
``head_focus``                  weight per head on previous/partner/itself   4
``decoding_attention``          the decoder's weights at every decoding step 6
``cross_attention_hit_rate``    does cross-attention find the token written  6
``HeadPatternCounter``          weight per head on six patterns, over texts  7
``strongest_heads``             the head that follows each pattern most      7
==============================  ===========================================  =======

Every function runs its model in evaluation mode and leaves the mode as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .._validation import require_texts
from ..data.batches import index_batches
from ..data.tasks import BOS, EOS, IGNORE, PAD, AssociativeRecall, TwoRelationTask
from ..decoding import greedy_decode
from ..modes import evaluating
from ..pretrained import PretrainedEncoder
from ..recall import RecallModel
from ..transformer import EncoderDecoder

__all__ = [
    "attention_maps",
    "lookup_hit_rate",
    "relation_accuracy",
    "head_focus",
    "decoding_attention",
    "cross_attention_hit_rate",
    "HEAD_PATTERNS",
    "HeadPatternCounter",
    "head_pattern_scores",
    "strongest_heads",
]


@torch.no_grad()
def attention_maps(model: RecallModel, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` on ``tokens`` (batch, T); return (binding weights (batch, T, T), lookup weights (batch, T)).

    The weights come back on the CPU, ready to plot.
    """
    device = next(model.parameters()).device
    with evaluating(model):
        model(tokens.to(device))
    binding = model.pair_attention.last_weights.cpu()  # (batch, T, T)
    lookup = model.lookup_attention.last_weights[:, 0].cpu()  # (batch, 1, T) -> (batch, T)
    return binding, lookup


def lookup_hit_rate(model: RecallModel, task: AssociativeRecall) -> float:
    """Fraction of the task's examples whose lookup puts its largest weight on the asked pair.

    The asked pair is the key token equal to the last token and the value token right after it.
    """
    tokens = task.tokens  # (N, T)
    _, lookup = attention_maps(model, tokens)  # (N, T)
    pairs = tokens[:, : 2 * task.num_pairs]  # (N, 2 pairs): k1 v1 k2 v2 ...
    key_position = (pairs[:, 0::2] == tokens[:, -1:]).float().argmax(dim=1) * 2  # (N,)
    top = lookup.argmax(dim=1)  # (N,)
    hits = (top == key_position) | (top == key_position + 1)
    return hits.float().mean().item()


@torch.no_grad()
def relation_accuracy(model: nn.Module, task: TwoRelationTask) -> dict[str, float]:
    """Fractions of labelled positions whose answer is right: both digits, the partner's, the previous token's."""
    with evaluating(model):
        device = next(model.parameters()).device
        predictions = model(task.tokens.to(device)).argmax(dim=-1).cpu()  # (N, T)
    targeted = task.targets != IGNORE
    targets = task.targets[targeted]
    predicted = predictions[targeted]
    d = task.num_digits
    return {
        "both digits": (predicted == targets).float().mean().item(),
        "partner's digit": (predicted // d == targets // d).float().mean().item(),
        "previous token's digit": (predicted % d == targets % d).float().mean().item(),
    }


@torch.no_grad()
def head_focus(model: nn.Module, task: TwoRelationTask, layer: int = 0) -> torch.Tensor:
    """How much weight each head puts, on average, on the previous token, the partner and the token itself.

    Returns a (heads, 3) tensor; columns are (previous, partner, itself), averaged over every
    labelled position of ``task``.
    """
    with evaluating(model):
        device = next(model.parameters()).device
        model(task.tokens.to(device))
    weights = model.attention_weights()[layer].cpu()  # (N, heads, T, T)
    T = task.length
    positions = torch.arange(1, T)  # every position with a label
    previous = weights[:, :, positions, positions - 1]  # (N, heads, T - 1)
    partner_index = task.partner[:, None, 1:, None].expand(-1, weights.shape[1], -1, 1)  # (N, heads, T - 1, 1)
    partner = weights[:, :, 1:, :].gather(3, partner_index)[..., 0]  # (N, heads, T - 1)
    itself = weights[:, :, positions, positions]  # (N, heads, T - 1)
    return torch.stack([previous.mean((0, 2)), partner.mean((0, 2)), itself.mean((0, 2))], dim=1)  # (heads, 3)


@torch.no_grad()
def decoding_attention(
    model: EncoderDecoder,
    source: torch.Tensor,
    max_len: int | None = None,
    source_padding: torch.Tensor | None = None,
) -> dict:
    """Greedy-decode one source sequence and collect the decoder's attention at every step.

    ``source`` is (T_in,) or (1, T_in). Decoding stops at EOS or after ``max_len`` tokens
    (default: the decoder's maximum length minus one). Because the decoder's self-attention
    is causal, one teacher-forced pass over BOS + the generated tokens gives, in row t,
    exactly the weights that step t of the decoding loop computed; this function uses that.

    Returns a dict: ``output`` (L,) generated ids (EOS included if produced), ``decoder_in``
    (L,) ids fed to the decoder (BOS, then the output shifted right), ``self_attention``
    (layers, heads, L, L) and ``cross_attention`` (layers, heads, L, T_in), on the CPU.
    """
    if source.dim() == 1:
        source = source[None]
    if source.dim() != 2 or source.shape[0] != 1:
        raise ValueError(
            f"source must be one sequence, shaped (T_in,) or (1, T_in), but has shape {tuple(source.shape)}"
        )
    device = next(model.parameters()).device
    source = source.to(device)
    if source_padding is not None:
        source_padding = source_padding.reshape(1, -1).to(device)
    limit = max_len if max_len is not None else model.decoder.embedding.max_len - 1
    with evaluating(model):
        output = greedy_decode(model, source, limit, bos=BOS, eos=EOS, source_padding=source_padding)[0]  # (L,)
        if (output == EOS).any():
            output = output[: int((output == EOS).nonzero()[0]) + 1]  # up to and including the first EOS
        decoder_in = torch.cat([torch.tensor([BOS], device=device), output[:-1]])  # (L,)
        memory = model.encode(source, source_padding)  # (1, T_in, d_model)
        model.decode(decoder_in[None], memory, source_padding)
        self_weights = torch.stack([w[0] for w in model.decoder.self_attention_weights()])  # (layers, heads, L, L)
        cross_weights = torch.stack([w[0] for w in model.decoder.cross_attention_weights()])  # (layers, heads, L, T_in)
    return {
        "output": output.cpu(),
        "decoder_in": decoder_in.cpu(),
        "self_attention": self_weights.cpu(),
        "cross_attention": cross_weights.cpu(),
    }


@torch.no_grad()
def cross_attention_hit_rate(model: EncoderDecoder, task, layer: int = -1) -> float:
    """How often a decoding step looks hardest at a source token equal to the token it writes.

    One teacher-forced pass over every example of ``task`` (a :class:`~attention_book.SequenceTask`);
    for each output position before EOS, the source position with the largest cross-attention
    weight of ``layer`` (averaged over heads) is found. Returns the fraction of positions where
    that source token equals the token written there (for sorting: the rank order).
    """
    device = next(model.parameters()).device
    with evaluating(model):
        model(
            task.source.to(device),
            task.target_in.to(device),
            task.source_padding.to(device),
            task.target_padding.to(device),
        )
    cross = model.decoder.cross_attention_weights()[layer].mean(1).cpu()  # (N, T_out, T_in): averaged over heads
    looked_at = cross.argmax(dim=-1)  # (N, T_out)
    seen = torch.gather(task.source, 1, looked_at)  # (N, T_out): the source token at that position
    answer = task.target_out  # (N, T_out): the token written at each position
    counted = (answer != PAD) & (answer != EOS)
    return float(((seen == answer) & counted).sum() / counted.sum())


HEAD_PATTERNS = ("previous token", "next token", "itself", "[CLS]", "[SEP]", "punctuation")
_PUNCTUATION = set(".,!?;:-'\"()")


class HeadPatternCounter:
    """Adds up, over many sentences, how much weight each head gives to each pattern's keys.

    Queries are the word pieces between [CLS] and [SEP]; ``scores()`` returns
    ``{pattern: (layers, heads)}`` averages over all of them.
    """

    def __init__(self, num_layers: int, num_heads: int):
        self.totals = {pattern: torch.zeros(num_layers, num_heads) for pattern in HEAD_PATTERNS}
        self.even_totals = dict.fromkeys(HEAD_PATTERNS, 0.0)  # what a head spreading its weight evenly would score
        self.queries = 0

    def add(self, weights: list[torch.Tensor], padding_mask: torch.Tensor, labels: list[list[str]]) -> None:
        """``weights``: one (batch, heads, T, T) tensor per layer, of sentences encoded with [CLS] and [SEP]."""
        stacked = torch.stack([w.detach().cpu() for w in weights], dim=1)  # (batch, layers, heads, T, T)
        lengths = padding_mask.sum(dim=1).cpu().tolist()
        for b, length in enumerate(lengths):
            if length < 3:
                continue
            w = stacked[b, :, :, :length, :length]  # (layers, heads, L, L)
            words = torch.arange(1, length - 1)  # queries: the pieces between [CLS] and [SEP]
            punctuation = torch.tensor([label in _PUNCTUATION for label in labels[b][:length]])  # (L,)
            self.totals["previous token"] += w[:, :, words, words - 1].sum(-1)
            self.totals["next token"] += w[:, :, words, words + 1].sum(-1)
            self.totals["itself"] += w[:, :, words, words].sum(-1)
            self.totals["[CLS]"] += w[:, :, words, 0].sum(-1)
            self.totals["[SEP]"] += w[:, :, words, length - 1].sum(-1)
            self.totals["punctuation"] += w[:, :, words][..., punctuation].sum((-1, -2))
            for pattern in ("previous token", "next token", "itself", "[CLS]", "[SEP]"):
                self.even_totals[pattern] += len(words) / length  # one key of `length`
            self.even_totals["punctuation"] += len(words) * float(punctuation.sum()) / length
            self.queries += len(words)

    def scores(self) -> dict[str, torch.Tensor]:
        if not self.queries:
            raise ValueError("no sentence with words has been added yet")
        return {pattern: total / self.queries for pattern, total in self.totals.items()}

    def even_spread(self) -> dict[str, float]:
        """The score of a head that spreads its weight evenly over the sentence: the level of "no preference"."""
        if not self.queries:
            raise ValueError("no sentence with words has been added yet")
        return {pattern: total / self.queries for pattern, total in self.even_totals.items()}


@torch.no_grad()
def head_pattern_scores(
    model: PretrainedEncoder, texts: Sequence[str], max_tokens: int = 48
) -> dict[str, torch.Tensor]:
    """For every layer and head, the average weight a word piece gives to each pattern's keys.

    Averaged over the real word pieces of ``texts`` (not [CLS] or [SEP] as queries).
    Returns ``{pattern: (layers, heads) tensor}`` for :data:`HEAD_PATTERNS`.
    """
    texts = require_texts(texts)
    counter = HeadPatternCounter(model.num_layers, model.num_heads)
    with evaluating(model):
        for rows in index_batches(len(texts), 64):
            batch = model.encode([texts[i] for i in rows], max_tokens=max_tokens)
            model(batch.tokens, batch.padding_mask, batch.token_types)
            counter.add(model.attention_weights(), batch.padding_mask, batch.labels)
    return counter.scores()


def strongest_heads(scores: dict[str, torch.Tensor]) -> list[tuple[str, int, int, float]]:
    """For each pattern, the (pattern, layer, head, average weight) of the head that follows it most."""
    found = []
    for pattern, table in scores.items():
        flat = int(table.argmax())
        layer, head = divmod(flat, table.shape[1])
        found.append((pattern, layer, head, float(table[layer, head])))
    return found
