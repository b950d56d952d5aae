"""The losses and metrics that :func:`~attention_book.fit` and :func:`~attention_book.evaluate` take.

Every loss is ``loss_fn(model, batch) -> scalar tensor`` and every metric
``metric_fn(model, batch) -> (correct, total)``, over batches laid out as
:mod:`attention_book.data.tasks` lays out items:

==================================  ========================================  ==========
pair                                what is predicted                         chapters
==================================  ========================================  ==========
``classification_loss / _accuracy`` one ``label`` per sequence                2, 5, 6, 7
``token_loss / token_accuracy``     one of ``targets`` per position           4, 6
``masked_token_loss``               ``targets`` only where there is one       7
``seq2seq_loss / _exact_match``     an answer sequence (teacher forcing)      6
``seq2seq_forced_exact_match``      the same exact match, in one forced pass  6
``seq2seq_token_accuracy``          the share of answer tokens right          1
==================================  ========================================  ==========

A model gets ``batch["padding_mask"]`` as its second argument when the batch has one.
Positions whose target is :data:`~attention_book.data.tasks.IGNORE` take no part.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..data.tasks import BOS, EOS, IGNORE, PAD
from ..decoding import greedy_decode

__all__ = [
    "classification_loss",
    "classification_accuracy",
    "token_loss",
    "token_accuracy",
    "masked_token_loss",
    "seq2seq_loss",
    "seq2seq_exact_match",
    "seq2seq_forced_exact_match",
    "seq2seq_token_accuracy",
]


def _inputs(batch: dict) -> tuple[torch.Tensor, ...]:
    """The model's inputs: the tokens, and the padding mask if the batch has one."""
    if "padding_mask" in batch:
        return batch["tokens"], batch["padding_mask"]
    return (batch["tokens"],)


def classification_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy of the logits ``model(tokens[, padding_mask])`` (batch, classes) against ``batch["label"]``."""
    return F.cross_entropy(model(*_inputs(batch)), batch["label"])


def classification_accuracy(model: nn.Module, batch: dict) -> tuple[int, int]:
    """(correct, total) of the most likely class against ``batch["label"]``."""
    predictions = model(*_inputs(batch)).argmax(dim=-1)
    return int((predictions == batch["label"]).sum()), len(predictions)


def token_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy over every position that has a target: logits (batch, T, classes) against ``targets`` (batch, T).

    A language model's next-token loss is this loss with the next tokens as targets.
    """
    logits = model(*_inputs(batch))  # (batch, T, classes)
    return F.cross_entropy(logits.flatten(0, 1), batch["targets"].flatten(), ignore_index=IGNORE)


def token_accuracy(model: nn.Module, batch: dict) -> tuple[int, int]:
    """(positions answered right, positions with a target) of a batch."""
    predictions = model(*_inputs(batch)).argmax(dim=-1)  # (batch, T)
    targeted = batch["targets"] != IGNORE
    return int((predictions == batch["targets"])[targeted].sum()), int(targeted.sum())


def masked_token_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """:func:`token_loss` computed only at the positions that have a target (a masked language model's loss).

    ``model(tokens, padding_mask, chosen)`` returns logits at the ``chosen`` positions only
    (as :class:`~attention_book.TokenClassifier` does): with 15 % of the positions
    masked, that saves most of the output layer's work. Same value as :func:`token_loss`.
    """
    chosen = batch["targets"] != IGNORE  # (batch, T)
    logits = model(batch["tokens"], batch["padding_mask"], chosen)  # (n_chosen, vocab)
    return F.cross_entropy(logits, batch["targets"][chosen])


def seq2seq_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Teacher-forced cross-entropy of an :class:`EncoderDecoder` on a SequenceTask batch."""
    logits = model(batch["source"], batch["target_in"], batch["source_padding"], batch["target_padding"])
    # (batch, T_out, vocab) -> (batch * T_out, vocab) against (batch * T_out,)
    return F.cross_entropy(logits.flatten(0, 1), batch["target_out"].flatten(), ignore_index=PAD)


def seq2seq_exact_match(model: nn.Module, batch: dict) -> tuple[int, int]:
    """Sequences whose greedy decoding (up to and including EOS) equals the answer exactly."""
    target = batch["target_out"]  # (batch, max_len + 1): answer, EOS, PAD...
    generated = greedy_decode(
        model, batch["source"], target.shape[1], bos=BOS, eos=EOS, source_padding=batch["source_padding"]
    )
    width = generated.shape[1]
    padded = torch.full_like(target, EOS)
    padded[:, :width] = generated
    real = target != PAD  # compare up to and including EOS
    correct = ((padded == target) | ~real).all(dim=1)
    return int(correct.sum()), len(target)


def seq2seq_forced_exact_match(model: nn.Module, batch: dict) -> tuple[int, int]:
    """The exact match of :func:`seq2seq_exact_match`, found in one teacher-forced pass.

    A sequence counts when the most likely token at every real position (up to and
    including EOS) is the right one, given the true tokens before it. That is exactly the
    condition for greedy decoding to write the answer: if every step's argmax is right
    given a right prefix, greedy decoding never leaves the true prefix, and if it writes
    the answer, every prefix it was fed was the true one. So both metrics count the same
    sequences (up to exact ties between two tokens' scores), and this one needs one pass of
    the decoder instead of one per output token: cheap enough to run during training.
    """
    logits = model(batch["source"], batch["target_in"], batch["source_padding"], batch["target_padding"])
    target = batch["target_out"]  # (batch, T_out): answer, EOS, PAD...
    right = (logits.argmax(dim=-1) == target) | (target == PAD)  # (batch, T_out); padding never counts against
    return int(right.all(dim=1).sum()), len(target)


def seq2seq_token_accuracy(model: nn.Module, batch: dict) -> tuple[int, int]:
    """(answer tokens predicted right, answer tokens) in one teacher-forced pass; EOS and padding left out.

    Each answer token counts on its own, given the true tokens before it, so a model that
    gets the start of a long answer right and loses the rest scores in between 0 and 1
    (chapter 1 plots it against the length; chance is one over the number of symbols).
    """
    logits = model(batch["source"], batch["target_in"], batch["source_padding"], batch["target_padding"])
    target = batch["target_out"]  # (batch, T_out): answer, EOS, PAD...
    answer = (target != PAD) & (target != EOS)  # (batch, T_out)
    return int((logits.argmax(dim=-1) == target)[answer].sum()), int(answer.sum())
