"""Chapter 7's token-level transfer: a tag for every word, from a pretrained encoder or from scratch.

Both taggers are :class:`~attention_book.TokenClassifier`: an :class:`~attention_book.Encoder`
and a linear layer that scores every tag at every word piece. :func:`pretrained_tagger`
copies all-MiniLM-L6-v2's weights into the encoder (every weight then trains);
:func:`scratch_tagger` starts the chapter's small encoder (:data:`SMALL_MODEL`) from random
numbers. :func:`train_tagger` trains either one the same way: AdamW at a constant rate,
batches of tweets of similar length (:class:`~attention_book.data.batches.LengthBatches`),
the cross-entropy at each word's first piece (:func:`~attention_book.token_loss`, which
skips :data:`~attention_book.IGNORE`), through :func:`~attention_book.fit`, with early
stopping by :class:`~attention_book.training.transfer.KeepBest`. :func:`predict_words`
reads a tag per word back from the first pieces; the entity-level scores are in
:mod:`attention_book.data.entities`. Chapter 7 writes one training step out first.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validation import require_count
from ..data.batches import LengthBatches, index_batches, trim_padding
from ..data.entities import TAG_NAMES, AlignedPieces, word_predictions
from ..data.tasks import IGNORE
from ..modes import evaluating
from ..pretrained import PretrainedEncoder, bert_encoder_options
from ..transformer import TokenClassifier
from .loop import History, fit
from .losses import token_loss
from .transfer import SMALL_MODEL, KeepBest

__all__ = [
    "TAGGER_WEIGHT_DECAY",
    "pretrained_tagger",
    "scratch_tagger",
    "random_minilm_tagger",
    "tagger_optimizer",
    "train_tagger",
    "predict_words",
    "tagging_loss",
]

TAGGER_WEIGHT_DECAY = 0.01
"""AdamW's weight decay for every tagger (as the chapter's other recipes)."""


def pretrained_tagger(pretrained: PretrainedEncoder, seed: int = 0, num_tags: int = len(TAG_NAMES)) -> TokenClassifier:
    """A :class:`TokenClassifier` whose encoder is a trainable copy of ``pretrained``'s; a new head from ``seed``."""
    model = random_minilm_tagger(pretrained, seed, num_tags)
    model.encoder.load_state_dict(pretrained.encoder.state_dict())
    return model


def random_minilm_tagger(
    pretrained: PretrainedEncoder, seed: int = 0, num_tags: int = len(TAG_NAMES)
) -> TokenClassifier:
    """MiniLM's architecture (``pretrained``'s configuration) with every weight random, from ``seed``."""
    torch.manual_seed(seed)
    return TokenClassifier(num_classes=num_tags, **bert_encoder_options(pretrained.config))


def scratch_tagger(vocab_size: int, max_len: int, seed: int = 0, num_tags: int = len(TAG_NAMES)) -> TokenClassifier:
    """The chapter's small encoder (:data:`SMALL_MODEL`) and a tag head, every weight random, from ``seed``."""
    torch.manual_seed(seed)
    return TokenClassifier(vocab_size, num_tags, **{**SMALL_MODEL, "max_len": max_len})


def tagger_optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    """AdamW over every weight of ``model``, one learning rate, weight decay :data:`TAGGER_WEIGHT_DECAY`."""
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=TAGGER_WEIGHT_DECAY)


def train_tagger(
    model: TokenClassifier,
    aligned: AlignedPieces,
    steps: int,
    lr: float,
    seed: int = 0,
    batch_size: int = 32,
    keep_best: KeepBest | None = None,
    progress: bool = False,
) -> History:
    """Train ``model`` on the aligned tweets for ``steps`` batches at the constant rate ``lr``.

    Batch order comes from ``seed`` (the same batches for every model given the same
    seed); gradients are clipped to norm 1 (:func:`fit`'s default). With ``keep_best``,
    checkpoints are scored along the way and the best is put back at the end.
    """
    require_count(steps, "steps")
    batches = LengthBatches(aligned.tensors(), batch_size, torch.Generator().manual_seed(seed))
    history = fit(
        model,
        batches,
        token_loss,
        epochs=-(-steps // len(batches)),
        max_steps=steps,
        optimizer=tagger_optimizer(model, lr),
        progress=progress,
        description="tagging",
        on_step=keep_best.hook(model) if keep_best is not None else None,
    )
    if keep_best is not None:
        keep_best.restore(model)
    return history


@torch.no_grad()
def predict_words(model: nn.Module, aligned: AlignedPieces, batch_size: int = 64) -> list[list[str]]:
    """One predicted tag per word of every sentence of ``aligned`` (read at each word's first piece)."""
    predictions = torch.zeros_like(aligned.tokens)
    lengths = aligned.padding_mask.sum(dim=1)
    with evaluating(model):
        for rows in index_batches(len(aligned), batch_size, lengths=lengths):
            batch = trim_padding({"tokens": aligned.tokens[rows], "padding_mask": aligned.padding_mask[rows]})
            logits = model(batch["tokens"], batch["padding_mask"])  # (batch, T, tags)
            predictions[rows, : logits.shape[1]] = logits.argmax(dim=-1)
    return word_predictions(predictions, aligned)


@torch.no_grad()
def tagging_loss(model: nn.Module, aligned: AlignedPieces, batch_size: int = 64) -> float:
    """The mean cross-entropy over every word's first piece of ``aligned`` (the loss training lowers)."""
    total, count = 0.0, 0
    lengths = aligned.padding_mask.sum(dim=1)
    with evaluating(model):
        for rows in index_batches(len(aligned), batch_size, lengths=lengths):
            batch = trim_padding({name: value[rows] for name, value in aligned.tensors().items()})
            targeted = int((batch["targets"] != IGNORE).sum())
            total += float(token_loss(model, batch)) * targeted
            count += targeted
    return total / count
