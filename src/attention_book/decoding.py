"""Chapter 6: writing an output one token at a time: greedy decoding, beam search, scoring.

Floor 1 (model code): functions of a trained :class:`~attention_book.EncoderDecoder` (or any
model with ``encode`` and ``decode``). :func:`greedy_decode` takes the most likely token at
each step, with or without the decoder's KV cache; :func:`beam_search` keeps the
``beam_width`` most probable partial outputs; :func:`sequence_log_prob` scores a whole
output in one teacher-forced pass. (A language model writes with
:meth:`~attention_book.LanguageModel.generate`.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ._validation import require_count, require_exact_rank, require_tensor
from .modes import evaluating
from .transformer import Decoder, EncoderDecoder

__all__ = ["greedy_decode", "beam_search", "sequence_log_prob"]


def _keep_every_steps_weights(layers, rows, *, steps: int) -> None:
    """Stack the one-row weights of each cached step, so each layer holds what one full pass leaves.

    ``rows`` holds, per layer, each step's self-attention row (batch, heads, 1, t) and
    cross-attention row (batch, heads, 1, T_in).
    """
    for layer, (own, cross) in zip(layers, rows):
        # Row t attended to t + 1 positions; later positions get weight 0, as under a causal mask.
        layer.self_attn.last_weights = torch.cat([F.pad(row, (0, steps - row.shape[-1])) for row in own], dim=2)
        layer.cross_attn.last_weights = torch.cat(cross, dim=2)  # (batch, heads, L, T_in)


def _use_cache(model, cache: bool | None) -> bool:
    """Whether to decode with the KV cache: ``cache``, or (None) whenever the model's decoder can take a token at a time."""
    cacheable = isinstance(getattr(model, "decoder", None), Decoder)
    cache = cacheable if cache is None else cache
    if cache and not cacheable:
        raise ValueError(
            f"cache=True needs an ab.EncoderDecoder, whose decoder can take one token at a time, but a "
            f"{type(model).__name__} was given; pass cache=False to feed every token at each step"
        )
    return cache


@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder,
    source: torch.Tensor,
    max_len: int,
    bos: int,
    eos: int,
    source_padding: torch.Tensor | None = None,
    return_logits: bool = False,
    cache: bool | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Generate up to ``max_len`` tokens per source sequence, each the most likely next token.

    Returns (batch, L) token ids without the leading BOS, L <= max_len; once a sequence
    has produced EOS, its remaining positions are EOS too. Decoding stops early when
    every sequence has finished. With ``return_logits=True`` also every step's logits,
    (batch, L, vocab).

    With ``cache=True`` each step feeds only the newest token (:meth:`Decoder.step`): the keys
    and values of the earlier positions are kept, not recomputed (a KV cache). Since the
    decoder is causal, that gives what ``cache=False`` gives, which feeds BOS and every token
    written so far at each step (``model.decode``; any model with ``encode`` and ``decode``).
    The default, None, uses the cache when the model's decoder is an :class:`ab.Decoder`.
    Either way each decoder layer's ``self_attn.last_weights`` (batch, heads, L, L) and
    ``cross_attn.last_weights`` (batch, heads, L, T_in) afterwards hold every step's weights,
    row t from step t + 1, the future weighted 0: what one teacher-forced pass leaves.
    """
    require_tensor(source, "source")
    require_exact_rank(source, "source", rank=2, layout="(batch, T_in) of token ids")
    require_count(max_len, "max_len", 1)
    cache = _use_cache(model, cache)
    batch = source.shape[0]
    with evaluating(model):
        memory = model.encode(source, source_padding)  # (batch, T_in, d_model)
        generated = torch.full((batch, 1), bos, dtype=torch.long, device=source.device)  # (batch, 1): BOS
        finished = torch.zeros(batch, dtype=torch.bool, device=source.device)
        if cache:
            state = model.decoder.start(memory, source_padding)
            rows = [([], []) for _ in model.decoder.layers]  # per layer: each step's self- and cross-attention row

            def next_logits() -> torch.Tensor:
                logits = model.output(model.decoder.step(generated[:, -1:], state))[:, -1]  # (batch, vocab)
                for layer, (own, cross) in zip(model.decoder.layers, rows):
                    own.append(layer.self_attn.last_weights)  # (batch, heads, 1, t)
                    cross.append(layer.cross_attn.last_weights)  # (batch, heads, 1, T_in)
                return logits
        else:

            def next_logits() -> torch.Tensor:
                return model.decode(generated, memory, source_padding)[:, -1]  # (batch, vocab)

        step_logits = []
        for _ in range(max_len):
            logits = next_logits()
            next_token = logits.argmax(dim=-1)  # (batch,)
            next_token = torch.where(finished, torch.full_like(next_token, eos), next_token)
            generated = torch.cat([generated, next_token[:, None]], dim=1)  # (batch, t + 1)
            step_logits.append(logits)
            finished |= next_token == eos
            if finished.all():
                break
    if cache:  # the full-pass loop's last pass already left these
        _keep_every_steps_weights(model.decoder.layers, rows, steps=len(step_logits))
    if return_logits:
        return generated[:, 1:], torch.stack(step_logits, dim=1)  # (batch, L), (batch, L, vocab)
    return generated[:, 1:]


@torch.no_grad()
def sequence_log_prob(
    model: EncoderDecoder,
    source: torch.Tensor,
    output: torch.Tensor,
    bos: int,
    eos: int,
    source_padding: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probability the model gives a whole output sequence: sum over t of log p(y_t | y_<t, source).

    ``output`` (batch, L) is written as :func:`greedy_decode` writes it (no leading BOS;
    anything after the first EOS is ignored). One teacher-forced pass scores every position:
    the decoder is fed BOS and ``output`` shifted right. Returns (batch,) natural logs.
    """
    require_tensor(source, "source")
    require_exact_rank(source, "source", rank=2, layout="(batch, T_in) of token ids")
    require_tensor(output, "output")
    require_exact_rank(output, "output", rank=2, layout="(batch, L) of token ids")
    if output.shape[0] != source.shape[0] or output.shape[1] < 1:
        raise ValueError(
            f"output must hold at least one token for each of the {source.shape[0]} sources, "
            f"but has shape {tuple(output.shape)}"
        )
    start = torch.full_like(output[:, :1], bos)  # (batch, 1)
    target_in = torch.cat([start, output[:, :-1]], dim=1)  # (batch, L): BOS, y_1 ... y_{L-1}
    with evaluating(model):
        log_probs = torch.log_softmax(model(source, target_in, source_padding), dim=-1)  # (batch, L, vocab)
    chosen = log_probs.gather(-1, output[..., None])[..., 0]  # (batch, L): log p of each written token
    ended_before = torch.cumsum(output == eos, dim=1) - (output == eos).long()  # EOS tokens strictly before t
    return (chosen * (ended_before == 0)).sum(dim=1)  # (batch,): up to and including the first EOS


class _Beams:
    """The next-token log-probabilities of every kept sequence of a beam search, with or without the KV cache.

    Without the cache each step feeds BOS and every token written so far (``model.decode``);
    with it, only the newest token (:meth:`Decoder.step`), and :meth:`follow` reorders the
    cached keys and values of the earlier positions to follow the sequences the beam kept.
    """

    def __init__(self, model, memory: torch.Tensor, padding: torch.Tensor | None, *, cache: bool):
        self.model, self.memory, self.padding = model, memory, padding
        self.state = model.decoder.start(memory, padding) if cache else None

    def log_probs(self, written: torch.Tensor) -> torch.Tensor:
        """(rows, t) tokens so far -> (rows, vocab) log p of each next token."""
        if self.state is None:
            logits = self.model.decode(written, self.memory, self.padding)[:, -1]
        else:
            logits = self.model.output(self.model.decoder.step(written[:, -1:], self.state))[:, -1]
        return torch.log_softmax(logits, dim=-1)

    def follow(self, rows: torch.Tensor) -> None:
        """Row i of the beam now continues the sequence that was in row ``rows[i]``."""
        if self.state is not None:
            self.state.past = [(keys[rows], values[rows]) for keys, values in self.state.past]


@torch.no_grad()
def beam_search(
    model: EncoderDecoder,
    source: torch.Tensor,
    max_len: int,
    bos: int,
    eos: int,
    beam_width: int = 4,
    source_padding: torch.Tensor | None = None,
    cache: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the ``beam_width`` most probable partial outputs at every step instead of one.

    At each step every kept sequence is extended by every token of the vocabulary, scored
    by its total log-probability (the sum of log p of its tokens), and the ``beam_width``
    best of all these candidates are kept. A sequence that has written EOS stays in the
    beam unchanged (it is extended by EOS at no cost). Search stops when every kept
    sequence has ended or after ``max_len`` tokens. No length penalty: every candidate
    of a step has the same length, and a finished sequence keeps the score it ended with.
    ``cache`` as in :func:`greedy_decode` (the cache follows the kept sequences).

    Returns ``(tokens, log_prob)``: the best sequence per source, (batch, L) without the
    leading BOS and EOS-padded after its EOS as :func:`greedy_decode` writes it, and its
    total log-probability (batch,). ``beam_width=1`` is greedy decoding.
    """
    require_tensor(source, "source")
    require_exact_rank(source, "source", rank=2, layout="(batch, T_in) of token ids")
    require_count(max_len, "max_len", 1)
    require_count(beam_width, "beam_width", 1)
    cache = _use_cache(model, cache)
    batch, width = source.shape[0], beam_width
    device = source.device
    with evaluating(model):
        memory = model.encode(source, source_padding).repeat_interleave(width, dim=0)  # (batch * width, T_in, d_model)
        padding = None if source_padding is None else source_padding.repeat_interleave(width, dim=0)
        beams = _Beams(model, memory, padding, cache=cache)
        written = torch.full((batch * width, 1), bos, dtype=torch.long, device=device)  # (batch * width, 1)
        scores = torch.full((batch, width), float("-inf"), device=device)
        scores[:, 0] = 0.0  # one sequence to start from: the others would repeat it
        finished = torch.zeros(batch, width, dtype=torch.bool, device=device)
        first_row = torch.arange(batch, device=device)[:, None] * width  # (batch, 1): where each source's beams start
        for _ in range(max_len):
            log_probs = beams.log_probs(written)  # (batch * width, vocab)
            vocab = log_probs.shape[-1]
            if not 0 <= eos < vocab:
                raise ValueError(f"eos must be a token id in [0, {vocab}) for this model, but {eos!r} was given")
            only_eos = torch.full((vocab,), float("-inf"), device=device)
            only_eos[eos] = 0.0  # a finished sequence can only go on with EOS, at no cost
            log_probs = torch.where(finished[..., None], only_eos, log_probs.view(batch, width, vocab))
            candidates = scores[..., None] + log_probs  # (batch, width, vocab): every one-token extension
            scores, index = candidates.view(batch, width * vocab).topk(width, dim=-1)  # (batch, width) best of them
            parent, token = index // vocab, index % vocab  # which kept sequence, which new token
            rows = (first_row + parent).flatten()  # (batch * width,)
            written = torch.cat([written[rows], token.flatten()[:, None]], dim=1)  # (batch * width, t + 1)
            beams.follow(rows)
            finished = finished.gather(1, parent) | (token == eos)
            if finished.all():
                break
        best = scores.argmax(dim=-1)  # (batch,)
        tokens = written.view(batch, width, -1)[torch.arange(batch, device=device), best]  # (batch, 1 + L)
    return tokens[:, 1:], scores.gather(1, best[:, None])[:, 0]
