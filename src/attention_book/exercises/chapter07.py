"""Exercises of chapter 7, "Transfer learning".

7.1 The last real token of a padded batch (padding on either side): the read-out of decoder-only models.
7.2 A classification head on a (pretrained) encoder, that can be fine-tuned.
7.3 (design) Pick the layer whose frozen features classify best, without fooling yourself.
7.4 Load a pretrained layer into the book's EncoderLayer by matching the checkpoint's parameter names.

Each checker tests the answer on fresh random inputs against the reference
(the vector at each sentence's last real token, read from the positions the checker padded;
:func:`~attention_book.pretrained.mean_pool` and a small :class:`~attention_book.Encoder`;
linear probes from :mod:`attention_book.training.transfer`; the chapter's own mapping of BERT's names,
:data:`~attention_book.pretrained.PARAMETER_NAMES`) and recognises typical
wrong answers by what they compute. Nothing here loads the pretrained model: the
checks run in a fraction of a second.
"""

from __future__ import annotations

import inspect
import numbers
import re
from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import nn

from .._validation import require_labels
from ..layers import EncoderLayer
from ..pretrained import PARAMETER_NAMES
from ..training.transfer import LinearProbe, probe_accuracy, train_linear_probe
from ..transformer import Encoder
from ..transformer import mean_pool as reference_mean_pool
from ._core import (
    ExerciseFailure,
    Mistake,
    Property,
    add_properties,
    call,
    describe_exception,
    diagnose,
    name_sizes,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)

# ---------------------------------------------------------------------------------
# 7.1 The last real token of a padded batch

# The padding vector at position t is near _PADDING_BASE + _PADDING_STEP * t: far from the real tokens (standard
# normal), so that a read of the padding shows, and different at every position, so the hint can say which was read.
_PADDING_BASE = 1000.0
_PADDING_STEP = 100.0


def _last_token_pool_solution(hidden: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Each sentence's vector at its last real token: hidden (batch, T, d), padding_mask (batch, T) bool -> (batch, d).

    The padding may be on the left or on the right of each sentence; a sentence without a real token raises ValueError.
    """
    empty = ~padding_mask.any(dim=1)  # (batch,): sentences without a real token
    if empty.any():
        raise ValueError(f"sentence {int(empty.nonzero()[0])} has no real token: it has no last token to read")
    positions = torch.arange(padding_mask.shape[1], device=padding_mask.device)  # (T,)
    last = (positions * padding_mask).argmax(dim=1)  # (batch,): the largest position whose mask is True
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (batch, d)


def _rows(hidden, positions):
    return hidden[torch.arange(hidden.shape[0]), positions]


def _last_position(hidden, padding_mask):
    return hidden[:, -1]


def _lengths_minus_one(hidden, padding_mask):
    return _rows(hidden, padding_mask.sum(dim=1) - 1)


def _first_real_token(hidden, padding_mask):
    return _rows(hidden, padding_mask.long().argmax(dim=1))


def _mean_of_real_tokens(hidden, padding_mask):
    weights = padding_mask[..., None].to(hidden.dtype)
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1)


def _last_padding_position(hidden, padding_mask):
    return _rows(hidden, (torch.arange(padding_mask.shape[1]) * ~padding_mask).argmax(dim=1))


def _one_before_the_last(hidden, padding_mask):
    return _rows(hidden, (torch.arange(padding_mask.shape[1]) * padding_mask).argmax(dim=1) - 1)


def _position_axis_kept(hidden, padding_mask):
    last = (torch.arange(padding_mask.shape[1]) * padding_mask).argmax(dim=1)
    return hidden.gather(1, last[:, None, None].expand(-1, 1, hidden.shape[-1]))  # (batch, 1, d)


def _no_check_for_an_empty_sentence(hidden, padding_mask):
    return _rows(hidden, (torch.arange(padding_mask.shape[1]) * padding_mask).argmax(dim=1))


def _error_without_the_sentence(hidden, padding_mask):
    if not padding_mask.any(dim=1).all():
        raise ValueError("a sentence has no real token")
    return _no_check_for_an_empty_sentence(hidden, padding_mask)


class _PaddedBatch(NamedTuple):
    """What the checker gives an answer (hidden, padding_mask) and what it knows about it (first, last: (batch,), the
    positions of each sentence's first and last real token)."""

    hidden: torch.Tensor
    padding_mask: torch.Tensor
    first: torch.Tensor
    last: torch.Tensor

    def sentence(self, b: int) -> str:
        """'sentence 2 (padded on the left: real tokens at positions 3 to 6)'."""
        i, j, T = int(self.first[b]), int(self.last[b]), self.padding_mask.shape[1]
        side = "without padding" if (i, j) == (0, T - 1) else ("padded on the left" if i > 0 else "padded on the right")
        where = f"real token at position {i}" if i == j else f"real tokens at positions {i} to {j}"
        return f"sentence {b} ({side}: {where})"


def _padded_batch(generator: torch.Generator, *, batch: int, T: int, d: int, dtype=torch.float32) -> _PaddedBatch:
    """``batch`` >= 4 sentences in random order, each padded on the left or on the right (each its own side, both
    sides present), one without padding and one of a single real token; every padding position holds a large vector
    (near _PADDING_BASE + _PADDING_STEP * t)."""
    lengths = torch.randint(2, T, (batch,), generator=generator)  # 2 to T - 1 real tokens
    lengths[0], lengths[-1] = T, 1  # a sentence without padding, and one of a single real token
    left = torch.rand(batch, generator=generator) < 0.5
    left[1], left[2] = False, True  # one sentence padded on the right, one on the left
    order = torch.randperm(batch, generator=generator)
    lengths, left = lengths[order], left[order]
    first = torch.where(left, T - lengths, torch.zeros_like(lengths))
    last = first + lengths - 1
    positions = torch.arange(T)
    padding_mask = (positions >= first[:, None]) & (positions <= last[:, None])  # (batch, T)
    hidden = torch.randn(batch, T, d, generator=generator, dtype=dtype)
    padding = hidden + _PADDING_BASE + _PADDING_STEP * positions[:, None].to(dtype)  # (batch, T, d)
    hidden = torch.where(padding_mask[..., None], hidden, padding)
    return _PaddedBatch(hidden, padding_mask, first=first, last=last)


def _positions_read(got: torch.Tensor, hidden: torch.Tensor) -> list[int | None]:
    """For each sentence, the position whose vector the answer returned, or None where it returned no position's."""
    reads = []
    for row, vectors in zip(got, hidden):
        matches = [t for t in range(vectors.shape[0]) if torch.allclose(row, vectors[t], atol=1e-5, rtol=1e-4)]
        reads.append(matches[0] if matches else None)
    return reads


def _wrong_shape(got, inputs: _PaddedBatch, what: str) -> None:
    """The shapes of the usual indexing slips, named; other shapes are left to require_tensor_like."""
    if not isinstance(got, torch.Tensor):
        return
    batch, _, d = inputs.hidden.shape
    shape = tuple(got.shape)
    if shape == (batch, 1, d):
        raise ExerciseFailure(
            f"{what} has shape {shape}: an extra axis of size 1, the position axis kept (by gather, keepdim=True, a "
            "slice like [t:t + 1] or an index of shape (batch, 1)); return shape (batch, d), one vector per sentence "
            "(squeeze(1))"
        )
    if shape == (batch, batch, d):
        diagonal = got[torch.arange(batch), torch.arange(batch)].detach().to(inputs.hidden.dtype)
        if torch.allclose(diagonal, _rows(inputs.hidden, inputs.last), atol=1e-5, rtol=1e-4):
            raise ExerciseFailure(
                f"{what} has shape {shape}: hidden[:, last] reads every sentence at every sentence's position; pair "
                "each sentence with its own position, hidden[torch.arange(batch), last]"
            )
    if shape in ((batch,), (batch, 1)) and not got.is_floating_point() and got.dtype != torch.bool:
        raise ExerciseFailure(
            f"{what} holds whole numbers of shape {shape}: the positions of the last real tokens, not their vectors; "
            "return hidden[torch.arange(batch), positions], shape (batch, d)"
        )


def _pattern_hint(reads: list[int | None], got: torch.Tensor, inputs: _PaddedBatch) -> str | None:
    """The usual slips, recognised from the positions the answer read in every sentence (or from its pooling)."""
    hidden, padding_mask, first, last = inputs
    batch, T, _ = hidden.shape
    lengths = padding_mask.sum(dim=1)
    wrong = [r for r in range(batch) if reads[r] != int(last[r])]
    b = next((r for r in wrong if int(lengths[r]) > 1), wrong[0])  # an example, of several real tokens if one is wrong
    sentence, t, j = inputs.sentence(b), reads[b], int(last[b])
    padded = [r for r in range(batch) if int(lengths[r]) < T]
    last_padding = torch.where(first > 0, first - 1, torch.full_like(first, T - 1))
    longer = [r for r in range(batch) if int(lengths[r]) > 1]

    def read_everywhere(positions, rows=range(batch)) -> bool:
        return all(reads[r] == int(positions[r]) for r in rows)

    if read_everywhere([T - 1] * batch):
        return (
            f"you took hidden[:, -1], the last position: in {sentence} that is padding. Read each sentence at the "
            "last True of its mask"
        )
    if read_everywhere(lengths - 1):
        return (
            "you took position lengths - 1 (the number of real tokens minus 1), the last real token only when the "
            f"padding is on the right: in {sentence} you read position {t}, but its real tokens end at {j}. Find "
            "the last True of each row of the mask"
        )
    if read_everywhere(first):
        return (
            "you took each sentence's FIRST real token (the argmax of the mask is its first True); "
            f"{sentence} must give the vector at its LAST, position {j}"
        )
    if padded and read_everywhere(last_padding, padded):
        return (
            f"your mask is the wrong way round: you read the last PADDING position (in {sentence}, position {t}); "
            "True marks a real token, so read the last True"
        )
    if read_everywhere(last - 1, longer):
        return f"you read the token one before the last real token (in {sentence}, position {t}): an index off by one"
    if torch.allclose(got, _mean_of_real_tokens(hidden, padding_mask), atol=1e-5, rtol=1e-4):
        return (
            "you averaged the real tokens (mean pooling, the read-out MiniLM was trained with); this read-out is "
            "the vector at each sentence's last real token alone"
        )
    if torch.allclose(got, hidden.masked_fill(~padding_mask[..., None], float("-inf")).amax(dim=1), atol=1e-5):
        return (
            "you took a max over the real tokens (max pooling); this read-out is the vector at each sentence's last "
            "real token alone"
        )
    return None


def _row_hint(reads: list[int | None], got: torch.Tensor, inputs: _PaddedBatch) -> str:
    """What the answer returned for a sentence it got wrong: a padding position read, zeros or padding's large numbers
    (in any sentence: the first such one), else a real token that is not the last, else a mix of token vectors."""
    wrong = [r for r in range(len(reads)) if reads[r] != int(inputs.last[r])]
    for b in wrong:
        sentence, t, j = inputs.sentence(b), reads[b], int(inputs.last[b])
        if t is not None and not inputs.padding_mask[b, t]:
            past = " (one past its last real token: an index off by one)" if t == j + 1 else ""
            return (
                f"for {sentence} you returned the vector at position {t}, a padding position{past}: the checker puts "
                f"vectors near {_PADDING_BASE + _PADDING_STEP * t:.0f} there so that a read of the padding shows. Read "
                "each sentence at the last position whose mask is True"
            )
        if t is None and not got[b].any():
            return (
                f"your vector for {sentence} is all zeros: you read a padding position after zeroing the padding "
                "(masked_fill or a product with the mask); read the last real token itself"
            )
        if t is None and got[b].abs().max() > _PADDING_BASE / 10:
            return (
                f"your vector for {sentence} holds numbers near {float(got[b].abs().max()):.0f}, the size of the "
                "checker's padding vectors: padding got into it (an average or sum over every position?); return the "
                "one vector at the last real token"
            )
    b = next((r for r in wrong if reads[r] is not None), None)
    if b is None:
        return (
            f"your vector for {inputs.sentence(wrong[0])} is none of its token vectors (a sum or an average of "
            "several?); return the one vector at its last real token"
        )
    t, j = reads[b], int(inputs.last[b])
    before = " (one before it: an index off by one)" if t == j - 1 else ""
    return (
        f"for {inputs.sentence(b)} you returned the vector at position {t}, a real token but not the last, {j}{before}"
    )


def _judge_last_tokens(got, inputs: _PaddedBatch, what: str) -> None:
    expected = _rows(inputs.hidden, inputs.last)  # (batch, d)
    _wrong_shape(got, inputs, what)
    got = require_tensor_like(got, expected, what, axes=("batch", "feature"))
    if torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
        return
    reads = _positions_read(got, inputs.hidden)
    if not torch.isfinite(got).all():
        diagnose(got, expected, what)  # nan or inf, said so
    raise ExerciseFailure(f"{what} is wrong: {_pattern_hint(reads, got, inputs) or _row_hint(reads, got, inputs)}")


def _check_a_sentence_without_real_tokens(answer, generator: torch.Generator) -> None:
    """A batch whose sentence k has no real token must raise ValueError, its message naming k."""
    hidden, padding_mask, _, _ = _padded_batch(generator, batch=5, T=6, d=4)
    k = int(torch.randint(2, 4, (1,), generator=generator))  # 2 or 3: no size of the batch
    padding_mask[k] = False
    hidden[k] = torch.randn(6, 4, generator=generator) + _PADDING_BASE + _PADDING_STEP * torch.arange(6.0)[:, None]
    name_sizes(batch=5, T=6, d=4)
    batch_text = f"a batch whose sentence {k} has no real token (its row of padding_mask is all False)"
    try:
        call(answer, hidden.clone(), padding_mask.clone())
    except ValueError as error:
        if re.search(rf"(?<!\d){k}(?!\d)", str(error)):
            return
        raise ExerciseFailure(
            f"your ValueError for {batch_text} does not name the sentence: put its index, {k}, in the message "
            f"(yours says {str(error)[:80]!r})"
        ) from None
    except AssertionError:
        raise ExerciseFailure(
            f"for {batch_text} you used assert: an assert vanishes under python -O; raise ValueError naming the "
            "sentence"
        ) from None
    except NotImplementedError:
        raise
    except Exception as error:
        raise ExerciseFailure(
            f"for {batch_text} your function must raise ValueError naming the sentence, but it crashed: "
            f"{describe_exception(error)}. Test for such a sentence first (padding_mask.any(dim=1)) and raise "
            "ValueError"
        ) from None
    raise ExerciseFailure(
        f"for {batch_text} your function returned a value (read from the padding) where it must raise a ValueError "
        "naming the sentence: test padding_mask.any(dim=1), and raise ValueError(f'sentence {i} has no real token')"
    )


def _one_past_the_end(error: Exception, T: int) -> str:
    """The hint for an index of T (a count used as a position), with the student's line that raised."""
    raised = describe_exception(error).split(". Likely cause:")[0]
    return (
        f"{raised}. Position {T} is one past the last position (positions run from 0 to T - 1 = {T - 1}): an index "
        "off by one, a count used as a position? The last of n real tokens that start at position i is at i + n - 1"
    )


def _check_last_token_pool(answer) -> None:
    generator = random_generator()
    for batch, T, d, dtype in ((6, 7, 5, torch.float32), (4, 9, 3, torch.float64)):
        inputs = _padded_batch(generator, batch=batch, T=T, d=d, dtype=dtype)
        name_sizes(batch=batch, T=T, d=d)
        what = f"the sentence vectors for hidden of shape ({batch}, {T}, {d})"
        try:
            got = call(answer, inputs.hidden.clone(), inputs.padding_mask.clone())
        except ValueError as error:
            raise ExerciseFailure(
                f"your function raised ValueError ({str(error)[:80]!r}) on a batch where every sentence has a real "
                "token: raise it only for a sentence whose row of padding_mask is all False"
            ) from None
        except (IndexError, RuntimeError) as error:
            if f"index {T} is out of bounds" not in str(error):
                raise
            raise ExerciseFailure(_one_past_the_end(error, T)) from None
        _judge_last_tokens(got, inputs, what)
    _check_a_sentence_without_real_tokens(answer, generator)


register(
    "7.1",
    "The last real token of a padded batch",
    _check_last_token_pool,
    answer="last_token_pool",
    solution=_last_token_pool_solution,
    mistakes=[
        Mistake("the last position", _last_position, "you took hidden[:, -1], the last position"),
        Mistake("lengths - 1", _lengths_minus_one, "you took position lengths - 1"),
        Mistake("the first real token", _first_real_token, "each sentence's FIRST real token"),
        Mistake("mean pooling", _mean_of_real_tokens, "you averaged the real tokens (mean pooling"),
        Mistake("inverted mask", _last_padding_position, "your mask is the wrong way round"),
        Mistake("one before the last", _one_before_the_last, "one before the last real token"),
        Mistake("the position axis kept", _position_axis_kept, "an extra axis of size 1"),
        Mistake("no error for an empty sentence", _no_check_for_an_empty_sentence, "must raise a ValueError"),
        Mistake("the error does not name the sentence", _error_without_the_sentence, "does not name the sentence"),
    ],
)

# ---------------------------------------------------------------------------------
# 7.2 A classification head on an encoder


class _ClassifierSolution(nn.Module):
    """An encoder, mean pooling over the real tokens, and a new linear layer: logits (batch, num_classes)."""

    def __init__(self, encoder: nn.Module, d_model: int, num_classes: int):
        super().__init__()
        self.encoder = encoder  # pretrained: keep it, do not build a new one
        self.head = nn.Linear(d_model, num_classes)  # new: learned on the labelled task

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(tokens, padding_mask)  # (batch, T, d_model)
        weights = padding_mask.to(hidden.dtype).unsqueeze(-1)  # (batch, T, 1)
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1)  # (batch, d_model)
        return self.head(pooled)  # (batch, num_classes): logits, no softmax


class _ClassifierWithoutMaskInEncoder(_ClassifierSolution):
    def forward(self, tokens, padding_mask):
        hidden = self.encoder(tokens)  # real tokens also attend to the padding
        return self.head(reference_mean_pool(hidden, padding_mask))


class _ClassifierFirstToken(_ClassifierSolution):
    def forward(self, tokens, padding_mask):
        return self.head(self.encoder(tokens, padding_mask)[:, 0])


class _ClassifierMeanWithPadding(_ClassifierSolution):
    def forward(self, tokens, padding_mask):
        return self.head(self.encoder(tokens, padding_mask).mean(dim=1))


class _ClassifierReturningProbabilities(_ClassifierSolution):
    def forward(self, tokens, padding_mask):
        return super().forward(tokens, padding_mask).softmax(dim=-1)


class _ClassifierWithFrozenEncoder(_ClassifierSolution):
    def forward(self, tokens, padding_mask):
        with torch.no_grad():
            hidden = self.encoder(tokens, padding_mask)
        return self.head(reference_mean_pool(hidden, padding_mask))


class _ClassifierWithNewEncoder(_ClassifierSolution):
    def __init__(self, encoder, d_model, num_classes):
        super().__init__(encoder, d_model, num_classes)
        vocab_size = encoder.embedding.vocab_size
        self.encoder = Encoder(
            vocab_size, d_model=d_model, num_heads=2, d_ff=2 * d_model, num_layers=1, max_len=encoder.embedding.max_len
        )


def _find_head(model: nn.Module, encoder: nn.Module, d_model: int, *, num_classes: int) -> nn.Linear:
    encoder_parameters = {id(p) for p in encoder.parameters()}
    heads = [
        module
        for module in model.modules()
        if isinstance(module, nn.Linear) and id(module.weight) not in encoder_parameters
    ]
    fitting = [m for m in heads if (m.in_features, m.out_features) == (d_model, num_classes)]
    if len(fitting) == 1 and len(heads) > 1:
        found = ", ".join(f"Linear({m.in_features}, {m.out_features})" for m in heads)
        raise ExerciseFailure(
            f"the model adds {len(heads)} new linear layers on top of the encoder ({found}): the head is exactly one new "
            f"nn.Linear(d_model={d_model}, num_classes={num_classes}) applied to the pooled vector"
        )
    if len(fitting) != 1:
        found = ", ".join(f"Linear({m.in_features}, {m.out_features})" for m in heads) or "none"
        raise ExerciseFailure(
            f"the model should add exactly one new nn.Linear(d_model={d_model}, num_classes={num_classes}) "
            f"on top of the encoder; new linear layers found: {found}"
        )
    return fitting[0]


def _check_classifier(answer) -> None:
    generator = random_generator()
    vocab_size, d_model, num_classes, T = 30, 16, int(torch.randint(2, 5, (), generator=generator)), 7
    torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))  # fork_rng in check() restores it
    encoder = Encoder(vocab_size, d_model=d_model, num_heads=2, d_ff=32, num_layers=1, max_len=16).eval()
    model = call(answer, encoder, d_model, num_classes)
    if not isinstance(model, nn.Module):
        raise ExerciseFailure(
            f"calling your class should build a torch.nn.Module, but it built a {type(model).__name__}"
        )
    model.eval()
    encoder_parameters = {id(p) for p in encoder.parameters()}
    if not encoder_parameters <= {id(p) for p in model.parameters()}:
        raise ExerciseFailure(
            "your model does not hold the encoder you gave it: use the encoder you are given (store it as an attribute, "
            "e.g. self.encoder = encoder), do not build a new one; its pretrained weights are the point"
        )
    head = _find_head(model, encoder, d_model, num_classes=num_classes)
    with torch.no_grad():
        head.weight.copy_(torch.randn(num_classes, d_model, generator=generator))
        head.bias.copy_(torch.randn(num_classes, generator=generator))
    tokens = torch.randint(1, vocab_size, (4, T), generator=generator)
    lengths = torch.tensor([T, 5, 3, 1])
    padding_mask = torch.arange(T)[None, :] < lengths[:, None]  # (4, T)
    tokens = tokens.masked_fill(~padding_mask, 0)
    with torch.no_grad():
        hidden = encoder(tokens, padding_mask)  # (4, T, d_model)
        expected = head(reference_mean_pool(hidden, padding_mask))  # (4, num_classes)
        unmasked = encoder(tokens)
        mistakes = {
            "pass padding_mask to the encoder as well; without it the real tokens attend to the padding": head(
                reference_mean_pool(unmasked, padding_mask)
            ),
            "you used the first token's vector; average the real tokens' vectors (mean pooling with the mask)": head(
                hidden[:, 0]
            ),
            "you averaged over the padding too; weight each position by the padding mask": head(hidden.mean(dim=1)),
            "return the logits (raw scores), not probabilities: F.cross_entropy applies the softmax itself": expected.softmax(
                -1
            ),
        }
    logits = call(model, tokens, padding_mask)
    diagnose(logits, expected, f"the logits for 4 sentences of lengths {lengths.tolist()}", known_mistakes=mistakes)
    # Fine-tuning needs gradients in the encoder as well as in the head.
    model.zero_grad()
    model.train()
    call(model, tokens, padding_mask).sum().backward()
    if head.weight.grad is None or head.weight.grad.abs().sum() == 0:
        raise ExerciseFailure(
            "the head gets no gradient: the logits must come from the head, nn.Linear(d_model, num_classes)"
        )
    grads = [p.grad for p in encoder.parameters()]
    if all(g is None or g.abs().sum() == 0 for g in grads):
        raise ExerciseFailure(
            "the encoder gets no gradient, so fine-tuning could not change it: do not run it under torch.no_grad() "
            "or detach its output; freezing is a choice made with requires_grad, outside the model"
        )


register(
    "7.2",
    "A classification head on an encoder",
    _check_classifier,
    answer="SentenceClassifier",
    solution=_ClassifierSolution,
    mistakes=[
        Mistake("no padding mask for the encoder", _ClassifierWithoutMaskInEncoder, "pass padding_mask to the encoder"),
        Mistake("first-token pooling", _ClassifierFirstToken, "first token's vector"),
        Mistake("averaged the padding", _ClassifierMeanWithPadding, "averaged over the padding"),
        Mistake("returned probabilities", _ClassifierReturningProbabilities, "not probabilities"),
        Mistake("encoder under no_grad", _ClassifierWithFrozenEncoder, "the encoder gets no gradient"),
        Mistake("built a new encoder", _ClassifierWithNewEncoder, "use the encoder you are given"),
    ],
)

# ---------------------------------------------------------------------------------
# 7.3 (design) Pick the layer whose frozen features classify best
#
# The answer trains its probes with ``fit(features, labels)`` and measures them with ``score(probe, features,
# labels)``, two arguments whose defaults are the chapter's train_linear_probe and probe_accuracy. The checker passes
# its own fast probe through them (:class:`_RecordingProbes`: a closed-form linear probe, microseconds where a
# logistic probe takes 0.1 s), so a check takes milliseconds where it took a second (issue 45), and it records what
# each call was given, so that a probe fitted on the wrong split or scored against the wrong labels is named. An
# answer written before these two arguments existed (four parameters) is called as before and trains its own
# logistic probes: slower, judged the same.


def _best_layer_solution(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
) -> int:
    """The layer whose linear probe, trained on the training features, is most accurate on the validation features."""
    num_layers = train_features.shape[1]
    accuracies = []
    for layer in range(num_layers):
        probe = fit(train_features[:, layer], train_labels)  # fit on training data only
        accuracies.append(score(probe, valid_features[:, layer], valid_labels))  # judge on held-out data
    return max(range(num_layers), key=lambda layer: accuracies[layer])


def _best_by_training_accuracy(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
):
    scores = [
        score(fit(train_features[:, i], train_labels), train_features[:, i], train_labels)
        for i in range(train_features.shape[1])
    ]
    return max(range(len(scores)), key=lambda i: scores[i])


def _trained_on_validation(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
):
    scores = [
        score(fit(valid_features[:, i], valid_labels), valid_features[:, i], valid_labels)
        for i in range(valid_features.shape[1])
    ]
    return max(range(len(scores)), key=lambda i: scores[i])


def _always_last_layer(train_features, train_labels, valid_features, valid_labels, fit=None, score=None):
    return train_features.shape[1] - 1


def _largest_features(train_features, train_labels, valid_features, valid_labels, fit=None, score=None):
    return int(train_features.norm(dim=-1).mean(dim=0).argmax())


def _counted_from_one(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
):
    chosen = _best_layer_solution(
        train_features, train_labels, valid_features=valid_features, valid_labels=valid_labels, fit=fit, score=score
    )
    return chosen + 1


def _worst_layer(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
):
    scores = [
        score(fit(train_features[:, i], train_labels), valid_features[:, i], valid_labels)
        for i in range(train_features.shape[1])
    ]
    return min(range(len(scores)), key=lambda i: scores[i])


def _swapped_splits(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
):
    scores = [
        score(fit(valid_features[:, i], valid_labels), train_features[:, i], train_labels)
        for i in range(train_features.shape[1])
    ]
    return max(range(len(scores)), key=lambda i: scores[i])


def _scored_against_training_labels(
    train_features, train_labels, valid_features, valid_labels, fit=train_linear_probe, score=probe_accuracy
):
    scores = [
        score(fit(train_features[:, i], train_labels), valid_features[:, i], train_labels)
        for i in range(train_features.shape[1])
    ]
    return max(range(len(scores)), key=lambda i: scores[i])


def _fast_probe(features: torch.Tensor, labels: torch.Tensor) -> LinearProbe:
    """A linear probe fitted in closed form: each feature standardised with the training set's mean and spread (as
    :func:`train_linear_probe` does), then the nearest class mean. As a :class:`LinearProbe`, its logits for class c
    are ``x . m_c - |m_c|^2 / 2`` (x and the class means m_c standardised), whose argmax is the nearest class mean.

    On the checker's layers it gives every layer the role the logistic probe gives it (the best layer, the shortcut
    that only the training set has, the one that only the validation set has, the flipped layer: 300 seeds in
    ``tests/unit/test_exercises_chapter07.py``, 2,000 when it was written), in microseconds instead of 200 Adam
    steps."""
    features = features.detach().float()
    labels = labels.long()
    num_classes = max(2, int(labels.max()) + 1)
    probe = LinearProbe(features.mean(0), features.std(0).clamp_min(1e-6), num_classes)
    standardised = (features - probe.mean) / probe.std  # (N, d)
    present = torch.stack([(labels == c).any() for c in range(num_classes)])  # (classes,)
    means = torch.stack(
        [standardised[labels == c].mean(0) if present[c] else probe.mean * 0 for c in range(num_classes)]
    )
    with torch.no_grad():
        probe.linear.weight.copy_(means)  # (classes, d)
        probe.linear.bias.copy_(torch.where(present, -0.5 * means.pow(2).sum(-1), torch.tensor(-1e9)))
    return probe.eval()


def _layer_features(
    generator: torch.Generator, *, num_layers: int = 8, n_train: int = 240, n_valid: int = 240, d: int = 8
):
    """Synthetic per-layer features with known roles. Returns (train, train_labels, valid, valid_labels, roles).

    best: a clear class signal (about 90% separable). trap: one feature equals the label on the
    training set only (100% training accuracy, chance on validation). valid_trap: a clear signal on
    the training set only and a feature that equals the label on the validation set only (a probe
    fitted on validation scores 100% there; one fitted on training, about chance). loud: huge features without
    signal. flipped: the class signal reverses between training and validation (the worst layer).
    every other layer, the last included: a weak signal (about 70%).
    """
    # Neither 0 nor one of the last two, and such that best + 1 (counted from 1) and num_layers - 1 - best (counted
    # from the last layer) are two other layers: 1, 2, 4 or 5 of 8.
    choices = [i for i in range(1, num_layers - 2) if num_layers - 1 - i not in (i, i + 1)]
    best = choices[int(torch.randint(0, len(choices), (), generator=generator))]
    mirror = num_layers - 1 - best
    others = [i for i in range(num_layers - 1) if i not in (best, best + 1, mirror)]
    picked = torch.randperm(len(others), generator=generator)[:4].tolist()
    trap, loud, flipped, valid_trap = (others[i] for i in picked)
    train_labels = torch.arange(n_train) % 2
    valid_labels = torch.arange(n_valid) % 2
    train_labels = train_labels[torch.randperm(n_train, generator=generator)]
    valid_labels = valid_labels[torch.randperm(n_valid, generator=generator)]

    def signal(labels, strength, direction):
        sign = (2 * labels - 1).float()[:, None]  # (n, 1): -1 or +1
        return strength * sign * direction[None, :] + torch.randn(len(labels), d, generator=generator)

    train = torch.zeros(n_train, num_layers, d)
    valid = torch.zeros(n_valid, num_layers, d)
    for layer in range(num_layers):
        direction = torch.randn(d, generator=generator)
        direction = direction / direction.norm()
        if layer == best:
            train[:, layer], valid[:, layer] = (
                signal(train_labels, 1.4, direction),
                signal(valid_labels, 1.4, direction),
            )
        elif layer == flipped:
            train[:, layer], valid[:, layer] = (
                signal(train_labels, 1.0, direction),
                signal(valid_labels, -1.0, direction),
            )
        elif layer == valid_trap:  # a signal only in training, a shortcut (feature 0) only in validation
            direction[0] = 0.0
            train[:, layer] = signal(train_labels, 1.4, direction / direction.norm())
            valid[:, layer] = torch.randn(n_valid, d, generator=generator)
            valid[:, layer, 0] = 3.0 * (2 * valid_labels - 1).float()
        elif layer == trap:
            train[:, layer] = torch.randn(n_train, d, generator=generator)
            train[:, layer, 0] = 3.0 * (2 * train_labels - 1).float()  # a shortcut that only the training set has
            valid[:, layer] = torch.randn(n_valid, d, generator=generator)
        elif layer == loud:
            train[:, layer] = 1000.0 * torch.randn(n_train, d, generator=generator)
            valid[:, layer] = 1000.0 * torch.randn(n_valid, d, generator=generator)
        else:
            train[:, layer], valid[:, layer] = (
                signal(train_labels, 0.5, direction),
                signal(valid_labels, 0.5, direction),
            )
    roles = {"best": best, "trap": trap, "loud": loud, "flipped": flipped, "valid_trap": valid_trap}
    return train, train_labels, valid, valid_labels, roles


def _layer_probe_data():
    """Four layers: 0 a large signal in the training set that the validation set reverses (it fits the training set,
    fails on new data, and has the largest features); 1 a weak signal (good, not the best); 2 a clear signal in both
    sets (the best); 3 noise."""
    generator = torch.Generator().manual_seed(81)
    N, d = 40, 2
    labels = [torch.arange(N) % 2 for _ in range(2)]
    sets = []
    for which, y in enumerate(labels):
        sign = (2 * y - 1).float()[:, None]
        flip = 1.0 if which == 0 else -1.0
        trap = 10.0 * (0.3 * torch.randn(N, d, generator=generator) + flip * sign * torch.tensor([1.0, 1.0]))
        signal_sign = sign.clone()
        if which == 1:
            signal_sign[
                :2
            ] *= -1  # two validation examples against the rule: its best accuracy is 0.95, not 1 (a layer number)
        signal = 0.5 * torch.randn(N, d, generator=generator) + 1.5 * signal_sign * torch.tensor([1.0, 0.0])
        weak = torch.randn(N, d, generator=generator) + 0.7 * sign * torch.tensor([0.0, 1.0])  # good, not the best
        noise = torch.randn(N, d, generator=generator)
        sets.append(torch.stack([trap, weak, signal, noise], dim=1))  # (N, 4, d)
    return sets[0], labels[0], sets[1], labels[1]


_BEST_PROBE_LAYER = 2

_TRAINING_ACCURACY = (
    "you judged the layers by their accuracy on the TRAINING features; a layer can fit the training set perfectly and "
    "still fail on new data. Train on the training features, compare on the validation features"
)
_TRAINED_ON_VALIDATION = (
    "you trained the probes on the VALIDATION features (and scored them there), so a layer with a shortcut that only "
    "the validation set has wins. Fit each probe on the training features only; the validation features are for "
    "comparing the layers"
)
_SWAPPED_SPLITS = (
    "you fitted each probe on the VALIDATION features and scored it on the TRAINING features: the two splits' roles "
    "are swapped, so the examples that should judge a probe are the ones it learned from. Call "
    "fit(train_features[:, layer], train_labels), then score(probe, valid_features[:, layer], valid_labels)"
)
_FITTED_ON_BOTH = (
    "you fitted each probe on the training and validation features together, so the validation accuracy no longer "
    "measures unseen data. Fit on the training features alone and score on the validation features"
)
_WRONG_FIT_LABELS = (
    "you fitted a probe on the {features} features with the {labels} labels, which belong to other examples: each "
    "split's features go with its own labels, fit(train_features[:, layer], train_labels)"
)
_WRONG_SCORE_LABELS = (
    "you scored a probe on the {features} features against the {labels} labels, which belong to other examples, so "
    "every layer scores about 50%: score(probe, valid_features[:, layer], valid_labels)"
)
_MIXED_LAYERS = (
    "you scored the probe fitted on layer {fitted}'s features on layer {scored}'s features: fit one probe per layer "
    "(inside the loop) and score it on the same layer's validation features"
)
_ALL_LAYERS = (
    "you gave {call} the features of every layer at once, shape {shape}: a probe reads one layer's features, "
    "train_features[:, layer] of shape {one}, so fit and score once per layer"
)


class _RecordingProbes:
    """The checker's ``fit`` and ``score`` for exercise 7.3: :func:`_fast_probe` and ``probe_accuracy``, with a record
    of what each call was given (which split and which layer the features are, which split the labels are), so that
    :func:`_misuse` can name a probe fitted on the wrong split, scored against the wrong labels or on another layer."""

    def __init__(self, train, train_labels, *, valid, valid_labels):
        self.splits = {"training": (train, train_labels), "validation": (valid, valid_labels)}
        self.fitted: dict[int, tuple] = {}  # id(probe) -> (split, layer, the splits its labels are)
        self.kept: list[nn.Module] = []  # every probe fitted, kept alive so that no id is reused
        self.scored: list[tuple] = []  # (the probe's fit or None, split, layer, the labels' splits, accuracy)

    @property
    def accuracies(self) -> list[float]:
        return [record[-1] for record in self.scored]

    def where(self, features: torch.Tensor) -> tuple[str | None, int | None]:
        """("training", 3), ("validation", 3), ("both", 3) for a layer's two splits one after the other, or (None, None)."""
        values = features.detach().float()
        (train, _), (valid, _) = self.splits.values()
        for split, (every, _) in self.splits.items():
            for layer in range(every.shape[1]):
                if values.shape == every[:, layer].shape and torch.equal(values, every[:, layer]):
                    return split, layer
        if values.shape[0] == train.shape[0] + valid.shape[0]:
            for layer in range(train.shape[1]):
                for both in (
                    torch.cat([train[:, layer], valid[:, layer]]),
                    torch.cat([valid[:, layer], train[:, layer]]),
                ):
                    if values.shape == both.shape and torch.equal(values, both):
                        return "both", layer
        return None, None

    def label_splits(self, labels) -> set[str]:
        """The splits whose labels ``labels`` are (both, where the two splits' labels are equal), or an empty set."""
        if not isinstance(labels, torch.Tensor):
            return set()
        return {
            split for split, (_, own) in self.splits.items() if labels.shape == own.shape and torch.equal(labels, own)
        }

    def require_one_layer(self, features, labels, call: str) -> None:
        """One layer's features (N, d), as many examples as labels; otherwise the failure that says what was given."""
        train = self.splits["training"][0]
        if not isinstance(features, torch.Tensor):
            first = " (score takes the probe first: score(probe, features, labels))" if call == "score" else ""
            raise ExerciseFailure(
                f"{call} takes one layer's features, a tensor (N, d), but was given a {type(features).__name__}{first}"
            )
        if features.dim() == 3:
            one = (train.shape[0], train.shape[2])
            raise ExerciseFailure(_ALL_LAYERS.format(call=call, shape=tuple(features.shape), one=one))
        if features.dim() == 2 and isinstance(labels, torch.Tensor) and features.shape[0] != labels.shape[0]:
            raise ExerciseFailure(
                f"{call} was given the features of {features.shape[0]} examples (shape {tuple(features.shape)}) but "
                f"{labels.shape[0]} labels: axis 0 of (examples, layers, d) holds the examples, so one layer's "
                "features are features[:, layer], not features[layer]"
            )

    def fit(self, features, labels) -> nn.Module:
        self.require_one_layer(features, labels, "fit")
        probe = _fast_probe(features, require_labels(labels, features.shape[0]))
        self.kept.append(probe)
        self.fitted[id(probe)] = (*self.where(features), self.label_splits(labels))
        return probe

    def score(self, probe, features, labels) -> float:
        self.require_one_layer(features, labels, "score")
        accuracy = probe_accuracy(probe, features, labels)
        self.scored.append((self.fitted.get(id(probe)), *self.where(features), self.label_splits(labels), accuracy))
        return accuracy


def _misuse(probes: _RecordingProbes) -> str | None:
    """What the answer's calls of fit and score did wrong, read from their record (None if nothing): a probe that was
    scored after being fitted on the validation split (scored on the training split: the splits swapped), on both
    splits, or with the other split's labels; a score against the other split's labels or on another layer's
    features; and scores on the training split only."""
    splits = ("training", "validation")
    for fitted, split, _layer, _labels, _accuracy in probes.scored:
        if fitted is not None and fitted[0] == "validation":
            return _SWAPPED_SPLITS if split == "training" else _TRAINED_ON_VALIDATION
        if fitted is not None and fitted[0] == "both":
            return _FITTED_ON_BOTH
    for fitted, split, layer, label_splits, _accuracy in probes.scored:
        if fitted is not None and fitted[0] in splits and fitted[2] and fitted[0] not in fitted[2]:
            (other,) = set(splits) - {fitted[0]}
            return _WRONG_FIT_LABELS.format(features=fitted[0].upper(), labels=other.upper())
        if split in splits and label_splits and split not in label_splits:
            (other,) = set(splits) - {split}
            return _WRONG_SCORE_LABELS.format(features=split.upper(), labels=other.upper())
        if fitted is not None and None not in (fitted[1], layer) and fitted[1] != layer:
            return _MIXED_LAYERS.format(fitted=fitted[1], scored=layer)
    scored_splits = {split for _fitted, split, *_rest in probes.scored}
    if "training" in scored_splits and "validation" not in scored_splits:
        return _TRAINING_ACCURACY
    return None


def _probe_parameters(answer) -> tuple[str, str] | None:
    """The names under which the answer takes fit and score: ``fit`` and ``score``, or else the parameters whose defaults
    are train_linear_probe and probe_accuracy; None for an answer without them (the four-parameter form)."""
    try:
        signature = inspect.signature(answer)
    except (TypeError, ValueError):
        return None
    by_name = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    parameters = {name: p for name, p in signature.parameters.items() if p.kind in by_name}

    def named(word: str, default) -> str | None:
        if word in parameters:
            return word
        return next((name for name, p in parameters.items() if p.default is default), None)

    names = (named("fit", train_linear_probe), named("score", probe_accuracy))
    if None in names:
        return None
    try:
        signature.bind(1, 2, 3, 4, **{names[0]: 5, names[1]: 6})
    except TypeError:
        return None
    return names


def _run_best_layer(answer, data: tuple, probes: _RecordingProbes):
    """The answer's result on ``data`` (train, train_labels, valid, valid_labels), with the checker's fit and score if
    it takes them, otherwise called with the four tensors alone (it then trains its own probes)."""
    arguments = tuple(tensor.clone() for tensor in data)
    names = _probe_parameters(answer)
    if names is None:
        return call(answer, *arguments)
    return call(answer, *arguments, **{names[0]: probes.fit, names[1]: probes.score})


def _layer_number(result, num_layers: int, accuracies: list[float] = ()) -> int:
    """The answer's layer as an int, or the failure that says what it returned instead."""
    expected = f"a layer number (an int from 0 to {num_layers - 1})"
    if type(result).__module__ == "torch.return_types":
        raise ExerciseFailure(
            f"best_layer should return {expected}, but returned the (values, indices) pair of "
            f"torch.{type(result).__name__}: return its .indices, the layer, not the pair"
        )
    if isinstance(result, torch.Tensor) and result.numel() > 1:
        raise ExerciseFailure(
            f"best_layer should return {expected}, but returned a tensor of {result.numel()} values (shape "
            f"{tuple(result.shape)}), one per layer?: return the one layer whose validation accuracy is highest"
        )
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if isinstance(result, float) and (not result.is_integer() or result in accuracies):
        given = "what score returned" if result in accuracies else "an accuracy?"
        raise ExerciseFailure(
            f"best_layer should return {expected}, but returned {result:.4g} ({given}): return the position of the "
            "highest validation accuracy, the layer, not the accuracy itself"
        )
    if (
        isinstance(result, bool)
        or not isinstance(result, numbers.Integral)
        and not (isinstance(result, float) and result.is_integer())
    ):
        raise ExerciseFailure(f"best_layer should return {expected}, but returned {result!r:.60}")
    return int(result)


def _check_on_fixed_features(answer) -> None:
    """A second set of features, fixed, for an answer that chose the right layer of the random ones: a rule that picks
    a layer without comparing validation accuracies (the largest mean, a fixed number) finds the best of 8 layers
    now and then by chance, and is caught here. Four layers: 0 fits the training set and fails on new data, 1 is
    good, 2 the best, 3 noise."""
    train, train_labels, valid, valid_labels = data = _layer_probe_data()
    probes = _RecordingProbes(train, train_labels, valid=valid, valid_labels=valid_labels)
    result = _run_best_layer(answer, data, probes)
    misuse = _misuse(probes)
    if misuse is not None:
        raise ExerciseFailure(misuse)
    chosen, best = _layer_number(result, train.shape[1], probes.accuracies), _BEST_PROBE_LAYER
    if chosen == best:
        return
    if not 0 <= chosen < train.shape[1]:
        raise ExerciseFailure(
            f"for features of 4 layers you chose layer {chosen}, but the layers are 0 to 3 (axis 1 of (examples, "
            "layers, features)), counted from 0"
        )
    probes = {layer: _fast_probe(train[:, layer], train_labels) for layer in (chosen, best)}
    fit = probe_accuracy(probes[chosen], train[:, chosen], train_labels)
    held_out = {layer: probe_accuracy(probes[layer], valid[:, layer], valid_labels) for layer in (chosen, best)}
    raise ExerciseFailure(
        f"your answer was right on one set of features, but for another (4 layers) you chose layer {chosen}, whose "
        f"probe trained on the training features scores {fit:.2f} on them and {held_out[chosen]:.2f} on the validation "
        f"features; layer {best}'s scores {held_out[best]:.2f} there. Train one probe per layer on the TRAINING "
        "features and keep the layer with the highest VALIDATION accuracy"
    )


def _role_hints(roles: dict[str, int], num_layers: int) -> dict[int, str]:
    """Layer -> what choosing it says about the procedure (the roles of :func:`_layer_features`)."""
    best = roles["best"]
    hints = {
        roles["trap"]: _TRAINING_ACCURACY,
        roles["loud"]: "you picked the layer with the largest features; size says nothing about how well they "
        "separate the classes. Train a probe per layer and compare validation accuracies",
        roles["flipped"]: "you returned the layer with the LOWEST validation accuracy; take the highest",
        roles["valid_trap"]: _TRAINED_ON_VALIDATION,
        num_layers - 1: "the last layer is not always the best one; measure every layer",
        best + 1: "your layer number is one too high: layer 0 is the embedding output, so count from 0 "
        "(range(num_layers))",
    }
    hints.setdefault(
        num_layers - 1 - best,
        "your layer number counts from the last layer: layer 0 is the embedding output, the first of axis 1, so "
        "return the position of the best layer counted from 0",
    )
    return hints


def _check_best_layer(answer) -> None:
    generator = random_generator()
    train, train_labels, valid, valid_labels, roles = _layer_features(generator)
    probes = _RecordingProbes(train, train_labels, valid=valid, valid_labels=valid_labels)
    result = _run_best_layer(answer, (train, train_labels, valid, valid_labels), probes)
    misuse = _misuse(probes)
    if misuse is not None:
        raise ExerciseFailure(misuse)
    num_layers = train.shape[1]
    chosen = _layer_number(result, num_layers, probes.accuracies)
    best = roles["best"]
    if chosen == best:
        _check_on_fixed_features(answer)
        return
    hints = _role_hints(roles, num_layers)
    if 0 <= chosen < num_layers and chosen in hints:
        raise ExerciseFailure(
            f"you chose layer {chosen}, but layer {best} classifies the validation features best: {hints[chosen]}"
        )
    if not 0 <= chosen < num_layers:
        raise ExerciseFailure(
            f"you chose layer {chosen}, but there are only layers 0 to {num_layers - 1} (features of shape {tuple(train.shape)})"
        )
    raise ExerciseFailure(
        f"you chose layer {chosen}, but layer {best} classifies the validation features best; "
        "train one linear probe per layer on the training features and keep the layer with the highest validation accuracy"
    )


register(
    "7.3",
    "Pick the best layer for frozen features",
    _check_best_layer,
    answer="best_layer",
    solution=_best_layer_solution,
    mistakes=[
        Mistake("judged by training accuracy", _best_by_training_accuracy, "accuracy on the TRAINING features"),
        Mistake("always the last layer", _always_last_layer, "the last layer is not always the best"),
        Mistake("largest features", _largest_features, "largest features"),
        Mistake("counted layers from 1", _counted_from_one, "one too high"),
        Mistake("took the worst layer", _worst_layer, "LOWEST validation accuracy"),
        Mistake(
            "trained the probes on validation", _trained_on_validation, "trained the probes on the VALIDATION features"
        ),
        Mistake("fitted on validation, scored on training", _swapped_splits, "the two splits' roles are swapped"),
        Mistake("scored against the training labels", _scored_against_training_labels, "against the TRAINING labels"),
    ],
)


# ---------------------------------------------------------------------------------
# 7.4 Load a pretrained layer by matching parameter names
#
# load_layer(checkpoint, layer) -> the state dict of one ab.EncoderLayer, from a BERT checkpoint named as Hugging
# Face's BertModel names its weights (MiniLM's file). One layer, not the whole Encoder: its 16 tensors hold every
# idea of the mapping (the names, attention.output.dense against output.dense, which layer norm is which, nn.Linear's
# (out, in) layout), the embeddings' 5 add none, and minilm.encoder.layers[i] is such a layer, so
# layers[i].load_state_dict(load_layer(checkpoint, i), strict=True) is the real use. The checker builds a small
# random checkpoint (no 90 MB model), compares the answer's dict name by name and tensor by tensor with the
# chapter's own mapping (pretrained.PARAMETER_NAMES), and names a tensor in the wrong place by where it came from.

# The checkpoint's modules of one layer (after "encoder.layer.i.") and their weights' shapes ("d" = d_model, "ff" =
# d_ff; a LayerNorm's weight is a vector), as BertModel names them.
_BERT_LAYER_MODULES = {
    "attention.self.query": ("d", "d"),
    "attention.self.key": ("d", "d"),
    "attention.self.value": ("d", "d"),
    "attention.output.dense": ("d", "d"),
    "attention.output.LayerNorm": ("d",),
    "intermediate.dense": ("ff", "d"),
    "output.dense": ("d", "ff"),
    "output.LayerNorm": ("d",),
}
_LAYER_PREFIX = "layers.{i}."  # our Encoder's name for layer i, in PARAMETER_NAMES
# our module -> the checkpoint's, in one layer ("self_attn.q_proj" -> "attention.self.query")
_OURS_TO_THEIRS = {
    name[len(_LAYER_PREFIX) :].rsplit(".", 1)[0]: theirs.split(".", 3)[3].rsplit(".", 1)[0]
    for name, theirs in PARAMETER_NAMES.items()
    if name.startswith(_LAYER_PREFIX)
}


def _load_layer_solution(checkpoint: dict, layer: int) -> dict:
    """Encoder layer ``layer`` of a BERT checkpoint as the state dict of our EncoderLayer: {our name: tensor}."""
    prefix = f"encoder.layer.{layer}."  # with the dot: layer 1 is not layer 11
    ours_to_theirs = {
        "self_attn.q_proj": "attention.self.query",
        "self_attn.k_proj": "attention.self.key",
        "self_attn.v_proj": "attention.self.value",
        "self_attn.out_proj": "attention.output.dense",  # W_O
        "norm1": "attention.output.LayerNorm",  # after attention
        "feed_forward.linear1": "intermediate.dense",  # d_model -> d_ff
        "feed_forward.linear2": "output.dense",  # d_ff -> d_model
        "norm2": "output.LayerNorm",  # after the feed-forward
    }
    return {
        f"{ours}.{kind}": checkpoint[f"{prefix}{theirs}.{kind}"]  # nn.Linear and BERT both store (out, in)
        for ours, theirs in ours_to_theirs.items()
        for kind in ("weight", "bias")
    }


def _renamed(checkpoint, layer, changes: dict[str, str], *, transform=None) -> dict:
    """The solution's dict with some of our module names pointing at other checkpoint modules (``changes``: our
    module -> the checkpoint's), and ``transform(name, tensor)`` applied to every tensor."""
    state = {}
    for name in _load_layer_solution(checkpoint, layer):
        ours, kind = name.rsplit(".", 1)
        theirs = changes.get(ours, _OURS_TO_THEIRS[ours])
        tensor = checkpoint[f"encoder.layer.{layer}.{theirs}.{kind}"]
        state[name] = transform(name, tensor) if transform else tensor
    return state


def _load_qkv_rotated(checkpoint, layer):
    changes = {"self_attn.q_proj": "attention.self.key", "self_attn.k_proj": "attention.self.value"}
    return _renamed(checkpoint, layer, {**changes, "self_attn.v_proj": "attention.self.query"})


def _load_transposed(checkpoint, layer):
    return _renamed(checkpoint, layer, {}, transform=lambda name, t: t.T if t.dim() == 2 else t)


def _load_norms_swapped(checkpoint, layer):
    return _renamed(checkpoint, layer, {"norm1": "output.LayerNorm", "norm2": "attention.output.LayerNorm"})


def _load_feed_forward_swapped(checkpoint, layer):
    return _renamed(
        checkpoint, layer, {"feed_forward.linear1": "output.dense", "feed_forward.linear2": "intermediate.dense"}
    )


def _load_without_biases(checkpoint, layer):
    return {name: tensor for name, tensor in _load_layer_solution(checkpoint, layer).items() if name.endswith("weight")}


def _load_next_layer(checkpoint, layer):
    return _load_layer_solution(checkpoint, layer + 1)


def _load_layer_norm_unmapped(checkpoint, layer):
    state = _load_layer_solution(checkpoint, layer)
    for kind in ("weight", "bias"):
        state[f"attention.output.LayerNorm.{kind}"] = state.pop(f"norm1.{kind}")
    return state


def _load_with_encoder_prefix(checkpoint, layer):
    return {f"layers.{layer}.{name}": tensor for name, tensor in _load_layer_solution(checkpoint, layer).items()}


def _bert_checkpoint(generator: torch.Generator, *, num_layers: int, d_model: int, d_ff: int) -> dict:
    """A small random checkpoint named as BertModel names its weights: the embeddings, ``num_layers`` layers and the
    pooler, every tensor different (a layer norm's weights near 1, the rest standard normal)."""
    sizes = {"d": d_model, "ff": d_ff}
    checkpoint = {
        "embeddings.word_embeddings.weight": torch.randn(30, d_model, generator=generator),
        "embeddings.position_embeddings.weight": torch.randn(16, d_model, generator=generator),
        "embeddings.token_type_embeddings.weight": torch.randn(2, d_model, generator=generator),
        "embeddings.LayerNorm.weight": 1 + 0.1 * torch.randn(d_model, generator=generator),
        "embeddings.LayerNorm.bias": torch.randn(d_model, generator=generator),
        "embeddings.position_ids": torch.arange(16)[None],
    }
    for i in range(num_layers):
        for module, shape in _BERT_LAYER_MODULES.items():
            weight = torch.randn(*(sizes[size] for size in shape), generator=generator)
            if module.endswith("LayerNorm"):
                weight = 1 + 0.1 * weight
            checkpoint[f"encoder.layer.{i}.{module}.weight"] = weight
            checkpoint[f"encoder.layer.{i}.{module}.bias"] = torch.randn(sizes[shape[0]], generator=generator)
    checkpoint["pooler.dense.weight"] = torch.randn(d_model, d_model, generator=generator)
    checkpoint["pooler.dense.bias"] = torch.randn(d_model, generator=generator)
    return checkpoint


def _expected_layer(checkpoint: dict, layer: int) -> dict[str, str]:
    """Our EncoderLayer's names -> the checkpoint's names for encoder layer ``layer`` (the chapter's mapping)."""
    return {
        name[len(_LAYER_PREFIX) :]: theirs.format(i=layer)
        for name, theirs in PARAMETER_NAMES.items()
        if name.startswith(_LAYER_PREFIX)
    }


def _origin(tensor, checkpoint: dict) -> tuple[str, bool] | None:
    """The checkpoint's name whose tensor ``tensor`` is, and whether it is transposed; None if it is none of them."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return None
    values = tensor.detach().to(torch.float32)
    for name, source in checkpoint.items():
        if source.shape == values.shape and torch.equal(source, values):
            return name, False
    for name, source in checkpoint.items():
        if source.dim() == 2 and source.T.shape == values.shape and torch.equal(source.T, values):
            return name, True
    return None


def _layer_of(name: str) -> int | None:
    """3 for "encoder.layer.3.attention.self.query.weight", None for a name outside the layers."""
    parts = name.split(".")
    return int(parts[2]) if name.startswith("encoder.layer.") and parts[2].isdigit() else None


def _module_of(name: str) -> str:
    """ "attention.self.query.weight" for "encoder.layer.3.attention.self.query.weight"."""
    return name.split(".", 3)[3] if _layer_of(name) is not None else name


def _require_state_dict(result) -> dict:
    """The answer's dict; otherwise the failure that says what it returned instead."""
    if isinstance(result, nn.Module):
        raise ExerciseFailure(
            f"load_layer should return a dict {{name: tensor}} (a state dict), but returned the module "
            f"{type(result).__name__}: return the dict itself, or the loaded layer's .state_dict()"
        )
    if not isinstance(result, Mapping):
        raise ExerciseFailure(
            "load_layer should return a dict {name: tensor} that EncoderLayer.load_state_dict accepts, but returned "
            f"a {type(result).__name__}: keep the names, {{'self_attn.q_proj.weight': tensor, ...}}"
        )
    for name, value in result.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise ExerciseFailure(
                f"load_layer's dict should map names (str) to tensors, but maps {name!r:.60} to a "
                f"{type(value).__name__}"
            )
    return dict(result)


def _names_problem(got: dict, expected: dict[str, str], checkpoint: dict, *, layer: int) -> str | None:
    """What is wrong with the dict's names (keys), naming them; None when they are exactly EncoderLayer's."""
    missing = [name for name in expected if name not in got]
    unexpected = [name for name in got if name not in expected]
    if not missing and not unexpected:
        return None
    first = next(iter(expected))
    prefixes = {name[: -len(first)] for name in got if name.endswith(first) and name != first}
    for prefix in prefixes:
        if set(got) == {prefix + name for name in expected}:
            return (
                f"every name in your dict starts with {prefix!r} ({prefix + first!r}): the names of one EncoderLayer "
                f"start at its own modules, {first!r}, as ab.EncoderLayer(...).state_dict() shows (the whole "
                "Encoder adds 'layers.i.' in front)"
            )
    if not unexpected and set(missing) == {name for name in expected if name.endswith(".bias")}:
        return (
            f"your dict has no biases ({len(missing)} missing, e.g. {missing[0]!r}): every nn.Linear and LayerNorm of "
            "the layer has a weight and a bias, and the checkpoint has both (attention.self.query.bias, ...)"
        )
    for name in unexpected:
        origin = _origin(got[name], checkpoint)
        if origin is not None and _layer_of(origin[0]) not in (None, layer):
            return _other_layer_hint(_layer_of(origin[0]), layer, f"{name!r} holds {origin[0]!r}")
    ours_of = {theirs: ours for ours, theirs in expected.items()}
    text = "load_state_dict(strict=True) would refuse your dict: "
    if unexpected:
        origin = _origin(got[unexpected[0]], checkpoint)
        told = [repr(name) for name in unexpected[:4]]
        if origin is not None and not origin[1] and origin[0] in ours_of:
            told[0] += (
                f" (it holds the checkpoint's {origin[0]!r}, which the book's layer calls {ours_of[origin[0]]!r})"
            )
        more = f" and {len(unexpected) - 4} more" if len(unexpected) > 4 else ""
        text += "unexpected key" + ("s " if len(unexpected) > 1 else " ") + ", ".join(told) + more
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        text += ("; " if unexpected else "") + "missing key" + ("s " if len(missing) > 1 else " ")
        text += ", ".join(repr(name) for name in missing[:4]) + more
    return text + ". Rename every tensor you take to the name the book's layer gives it"


def _other_layer_hint(source: int, layer: int, what: str) -> str:
    """The hint for a tensor taken from encoder layer ``source`` where layer ``layer`` was asked for."""
    asked = f"encoder.layer.{layer}."
    if str(source).startswith(str(layer)):
        return (
            f"you were asked for layer {layer}, but {what}, of layer {source}: 'encoder.layer.{source}.' also starts "
            f"with 'encoder.layer.{layer}', so match the prefix with its dot, {asked!r}"
        )
    if source == layer + 1:
        where = "one past the layer asked for"
    elif source == layer - 1:
        where = "one before the layer asked for"
    else:
        where = "another layer"
    return (
        f"you were asked for layer {layer}, but {what}, of layer {source}, {where}: the checkpoint counts its layers "
        f"from 0, as the book does, so layer {layer}'s names start with {asked!r}"
    )


def _swap_hint(name: str, theirs: str, source: str, *, shapes: str) -> str:
    """The hint for our ``name`` holding the checkpoint's ``source`` of the same layer where ``theirs`` belongs."""
    modules = {_module_of(theirs).rsplit(".", 1)[0], _module_of(source).rsplit(".", 1)[0]}
    said = f"{name!r} holds the checkpoint's {_module_of(source)!r}{shapes} where {_module_of(theirs)!r} belongs"
    if modules <= {"attention.self.query", "attention.self.key", "attention.self.value"}:
        return f"{said}: the projections go by their names, query -> q_proj, key -> k_proj, value -> v_proj"
    if modules == {"attention.output.LayerNorm", "output.LayerNorm"}:
        return (
            f"{said}: the layer norms are swapped. attention.output.LayerNorm is norm1, the one after attention; "
            "output.LayerNorm is norm2, the one after the feed-forward"
        )
    if modules == {"intermediate.dense", "output.dense"}:
        return (
            f"{said}: the feed-forward's two maps are swapped. intermediate.dense is feed_forward.linear1 (d_model -> "
            "d_ff, the first); output.dense is feed_forward.linear2 (d_ff -> d_model)"
        )
    if "attention.output.dense" in modules:
        return (
            f"{said}: attention.output.dense is attention's output projection W_O (self_attn.out_proj); output.dense, "
            "outside attention, is the feed-forward's second map (feed_forward.linear2)"
        )
    return said


def _tensors_problem(got: dict, expected: dict[str, str], checkpoint: dict, *, layer: int) -> str | None:
    """What is wrong with the dict's tensors (the names being right), naming the first wrong one by where it came
    from: transposed, another layer's, another module's of this layer, or numbers of its own; None when all agree."""
    for name, theirs in expected.items():
        tensor, right = got[name], checkpoint[theirs]
        values = tensor.detach().to(right.dtype) if tensor.is_floating_point() else tensor
        if tensor.shape == right.shape and torch.equal(values, right):
            continue
        origin = _origin(tensor, checkpoint)
        shapes = f" (shape {tuple(tensor.shape)}; the layer needs {tuple(right.shape)})"
        if origin == (theirs, True):
            square = f" (shape {tuple(tensor.shape)}: square, so its shape does not show it)"
            return (
                f"{name!r} is the checkpoint's {theirs!r} transposed{square if tensor.shape == right.shape else shapes}:"
                " nn.Linear stores its weight as (out_features, in_features), and so does the checkpoint; copy each "
                "tensor as it is, without .T"
            )
        if origin is not None and _layer_of(origin[0]) not in (None, layer):
            return _other_layer_hint(_layer_of(origin[0]), layer, f"{name!r} holds {origin[0]!r}")
        if origin is not None and not origin[1] and _layer_of(origin[0]) == layer:
            return _swap_hint(name, theirs, origin[0], shapes=shapes if tensor.shape != right.shape else "")
        if origin is not None:
            return f"{name!r} holds the checkpoint's {origin[0]!r}{' transposed' if origin[1] else ''}{shapes}: it is {theirs!r}"
        if tensor.shape != right.shape:
            return f"{name!r} has shape {tuple(tensor.shape)} but the layer needs {tuple(right.shape)}, the shape of {theirs!r}: copy it as it is"
        return f"{name!r} has the right shape but not the numbers of {theirs!r}: copy the tensor as it is, unchanged"
    return None


def _check_layer_case(answer, generator, *, num_layers: int, d_model: int, num_heads: int, d_ff: int, layer: int):
    checkpoint = _bert_checkpoint(generator, num_layers=num_layers, d_model=d_model, d_ff=d_ff)
    expected = _expected_layer(checkpoint, layer)
    got = _require_state_dict(call(answer, {name: tensor.clone() for name, tensor in checkpoint.items()}, layer))
    case = f"For a checkpoint of {num_layers} layers (d_model={d_model}, d_ff={d_ff}) and layer={layer}: "
    problem = _names_problem(got, expected, checkpoint, layer=layer) or _tensors_problem(
        got, expected, checkpoint, layer=layer
    )
    if problem is not None:
        raise ExerciseFailure(case + problem)
    model = EncoderLayer(d_model, num_heads, d_ff, activation="gelu", layer_norm_eps=1e-12)
    try:
        model.load_state_dict(got, strict=True)
    except RuntimeError as error:  # the checks above should have said why; this is the last word
        raise ExerciseFailure(case + str(error).splitlines()[0]) from None


def _check_load_layer(answer) -> None:
    generator = random_generator()
    middle = int(torch.randint(2, 4, (), generator=generator))  # 2 or 3: a layer with one on either side
    _check_layer_case(answer, generator, num_layers=5, d_model=8, num_heads=2, d_ff=12, layer=middle)
    # Twelve layers, as BERT-base has: 'encoder.layer.1' also starts 'encoder.layer.10' and 'encoder.layer.11'.
    _check_layer_case(answer, generator, num_layers=12, d_model=6, num_heads=3, d_ff=10, layer=1)


def _load_output_dense_confused(checkpoint, layer):
    return _renamed(
        checkpoint, layer, {"self_attn.out_proj": "output.dense", "feed_forward.linear2": "attention.output.dense"}
    )


register(
    "7.4",
    "Load a pretrained layer by matching names",
    _check_load_layer,
    answer="load_layer",
    solution=_load_layer_solution,
    mistakes=[
        Mistake("query, key and value rotated", _load_qkv_rotated, "query -> q_proj, key -> k_proj, value -> v_proj"),
        Mistake("weights transposed", _load_transposed, "stores its weight as (out_features, in_features)"),
        Mistake("layer norms swapped", _load_norms_swapped, "the layer norms are swapped"),
        Mistake("feed-forward maps swapped", _load_feed_forward_swapped, "the feed-forward's two maps are swapped"),
        Mistake("attention's output and the feed-forward's confused", _load_output_dense_confused, "W_O"),
        Mistake("biases dropped", _load_without_biases, "has no biases"),
        Mistake("the next layer", _load_next_layer, "one past the layer asked for"),
        Mistake("a layer norm left with its checkpoint name", _load_layer_norm_unmapped, "calls 'norm1.weight'"),
        Mistake("names with the Encoder's prefix", _load_with_encoder_prefix, "starts with 'layers."),
    ],
)


# ---------------------------------------------------------------------------------
# Properties (see _core's docstring): what an answer breaks, probed one idea at a time.


class _ScriptedEncoder(nn.Module):
    """Token t -> the vector with t at every feature; records the padding mask it is given."""

    def __init__(self, d_model: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d_model))
        self.masks: list = []

    def forward(self, tokens, padding_mask=None, *args, **kwargs):
        self.masks.append(padding_mask)
        return tokens.float()[..., None] * self.scale  # (batch, T, d_model)


def _scripted_classifier(answer, d_model: int = 4):
    encoder = _ScriptedEncoder(d_model)
    model = answer(encoder, d_model, d_model)
    head = _find_head(model, encoder, d_model, num_classes=d_model)
    with torch.no_grad():
        head.weight.copy_(torch.eye(d_model))
        head.bias.zero_()
    model.eval()
    return model, encoder


def _classifier_inputs():
    tokens = torch.tensor([[2, 6, 1, 0], [1, 3, 5, 7]])
    return tokens, tokens != 0


def _encoder_mask_probe(answer):
    model, encoder = _scripted_classifier(answer)
    tokens, padding_mask = _classifier_inputs()
    with torch.no_grad():
        model(tokens.clone(), padding_mask.clone())
    given = encoder.masks[-1] if encoder.masks else None
    if isinstance(given, torch.Tensor) and torch.equal(given.bool(), padding_mask):
        return None
    if isinstance(given, torch.Tensor) and torch.equal(given.bool(), ~padding_mask):
        return (
            "your model gives the encoder the inverted padding mask: True marks a REAL token; pass padding_mask itself"
        )
    return "your model calls the encoder without the padding mask: pass it, encoder(tokens, padding_mask), or the real tokens attend to the padding"


def _classifier_pooling_probe(answer):
    model, _ = _scripted_classifier(answer)
    tokens, padding_mask = _classifier_inputs()
    with torch.no_grad():
        logits = probe_tensor(model(tokens.clone(), padding_mask.clone()), (2, 4))
    if torch.allclose(logits[:, 0], torch.tensor([3.0, 4.0], dtype=torch.float64), atol=1e-5):
        return None
    if torch.allclose(logits.exp().sum(-1), torch.ones(2, dtype=torch.float64), atol=1e-4):
        return "your outputs are log-probabilities (log_softmax): return the raw logits; F.cross_entropy applies the softmax itself"
    if torch.allclose(logits.sum(-1), torch.ones(2, dtype=torch.float64), atol=1e-4) and (logits >= 0).all():
        return "your outputs are probabilities (softmax): return the raw logits; F.cross_entropy applies the softmax itself"
    first = float(logits[0, 0])
    seen = {
        9.0: "their sum (divide by the number of real tokens)",
        2.25: "an average over all 4 positions, padding included",
        2.0: "the first token alone",
        1.0: "the last real token alone",
        6.0: "the largest of them (a max, not a mean)",
    }
    what = next((text for value, text in seen.items() if abs(first - value) < 1e-5), f"{first:.4g}")
    return (
        "with an encoder that turns token t into the vector (t, t, t, t) and an identity head, sentence 0 (real tokens 2, 6 "
        f"and 1, then padding) must give the logits of their mean, 3; yours gives {what}: average the real tokens' "
        "vectors, then the head"
    )


add_properties(
    "7.2",
    [
        Property("the encoder reads the padding mask", _encoder_mask_probe),
        Property("mean pooling over the real tokens, then the head (raw logits)", _classifier_pooling_probe),
    ],
)


# 7.3 has no property probe: its checker's features give every usual slip a layer of its own (the role-based hints
# above name the mistake), and the record of the answer's fit and score calls names the rest (_misuse).
