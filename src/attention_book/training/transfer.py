"""Chapter 7's recipes: a small encoder from scratch, masked-language-model pretraining,
the pretrained encoder's features (run once), a linear probe on them, fine-tuning its top
layers, and early stopping by checkpoints (:class:`KeepBest`).

Chapter 7 writes each idea out in cells first (the masking, one fine-tuning step, the
probe's training loop) and checks these functions against them. The transfer study
(:mod:`attention_book.training.transfer_study`) runs these same functions at every size.
Everything that trains goes through :func:`~attention_book.fit` on
:class:`~attention_book.data.batches.LengthBatches`; every function is seeded.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import describe_shape, require_count, require_labels, require_texts
from ..data.batches import LengthBatches, index_batches, trim_padding
from ..data.pieces import PieceVocabulary, mask_tokens
from ..modes import evaluating
from ..pretrained import PretrainedEncoder
from ..transformer import Encoder, EncoderClassifier, TokenClassifier, mean_pool, run_stack
from .loop import History, fit
from .losses import classification_loss, masked_token_loss

__all__ = [
    "SMALL_MODEL",
    "train_from_scratch",
    "classifier_accuracy",
    "train_mlm",
    "ReviewFeatures",
    "encode_reviews",
    "throughput",
    "LinearProbe",
    "train_linear_probe",
    "probe_accuracy",
    "probe_every_layer",
    "TopLayersClassifier",
    "fine_tune_top_layers",
    "fine_tuned_accuracy",
    "KeepBest",
    "checkpoint_steps",
]

SMALL_MODEL = dict(d_model=64, num_heads=4, d_ff=128, num_layers=2, dropout=0.0)
"""The small encoder trained from scratch and by masked language modelling (about 0.35M parameters)."""


def _adamw(parameters, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=0.01)


# ---------------------------------------------------------------------------------
# Early stopping by checkpoints


def checkpoint_steps(steps: int, count: int) -> set[int]:
    """``count`` evenly spaced steps of a run of ``steps`` (the last one among them)."""
    require_count(steps, "steps")
    require_count(count, "count")
    return {max(1, round(steps * (k + 1) / count)) for k in range(count)}


class KeepBest:
    """Early stopping by checkpoints, through :func:`~attention_book.fit`'s ``on_step`` hook.

    At each of ``steps`` (e.g. :func:`checkpoint_steps`) the hook scores the model being
    trained with ``score(model)`` (a validation accuracy) and keeps a copy of its weights if
    the score is the best so far; :meth:`restore` puts the best weights back after training.
    ``step`` and ``score`` then say which checkpoint won and what it scored.
    """

    def __init__(self, steps: set[int], score: Callable[[nn.Module], float]):
        self.steps, self.scorer = set(steps), score
        self.step, self.score, self.state = 0, -1.0, None

    def hook(self, model: nn.Module) -> Callable[[int, dict, float], None]:
        """The ``on_step(step, batch, loss)`` hook for ``fit`` while it trains ``model``."""

        def on_step(step: int, batch: dict, loss: float) -> None:
            if step in self.steps:
                value = self.scorer(model)
                if value > self.score:
                    self.step, self.score, self.state = step, value, copy.deepcopy(model.state_dict())

        return on_step

    def restore(self, model: nn.Module) -> None:
        if self.state is None:
            raise RuntimeError(
                f"no checkpoint was scored: training never reached any of the steps {sorted(self.steps)}"
            )
        model.load_state_dict(self.state)


def _fit_steps(
    model, batches, loss_fn, optimizer, epochs: int, steps: int | None, keep_best, progress, description
) -> History:
    """``fit`` for ``epochs`` passes, or for ``steps`` steps when given; with ``keep_best``, the best checkpoint is kept."""
    if steps is not None:
        epochs = -(-require_count(steps, "steps") // len(batches))
    history = fit(
        model,
        batches,
        loss_fn,
        epochs=epochs,
        max_steps=steps,
        optimizer=optimizer,
        clip_norm=None,
        progress=progress,
        description=description,
        on_step=keep_best.hook(model) if keep_best is not None else None,
    )
    if keep_best is not None:
        keep_best.restore(model)
    return history


# ---------------------------------------------------------------------------------
# (a) A small encoder trained from scratch


def train_from_scratch(
    vocabulary: PieceVocabulary,
    texts: Sequence[str],
    labels: torch.Tensor,
    epochs: int = 20,
    batch_size: int = 32,
    lr: float = 1e-3,
    max_tokens: int = 48,
    seed: int = 0,
    encoder: Encoder | None = None,
    progress: bool = False,
    steps: int | None = None,
    keep_best: KeepBest | None = None,
    **model_options,
) -> tuple[EncoderClassifier, History]:
    """Train a small :class:`EncoderClassifier` (mean pooling) on labelled texts, all parameters from scratch.

    ``encoder`` (optional) replaces the randomly initialised encoder, e.g. one pretrained
    with :func:`train_mlm`; it is copied, never changed. ``steps`` (optional) trains for that
    many mini-batches instead of ``epochs`` passes; ``keep_best`` (optional) scores
    checkpoints along the way and returns the best one (early stopping). Returns (model, history).
    """
    texts = require_texts(texts)
    labels = require_labels(labels, len(texts))
    require_count(epochs, "epochs")
    require_count(batch_size, "batch_size")
    torch.manual_seed(seed)
    model = EncoderClassifier(
        len(vocabulary), 2, pooling="mean", **{**SMALL_MODEL, "max_len": max_tokens, **model_options}
    )
    if encoder is not None:
        model.encoder = copy.deepcopy(encoder)
    tokens, padding_mask = vocabulary.encode(texts, max_tokens)
    batches = LengthBatches(
        {"tokens": tokens, "padding_mask": padding_mask, "label": labels},
        batch_size,
        torch.Generator().manual_seed(seed),
    )
    optimizer = _adamw(model.parameters(), lr)
    history = _fit_steps(
        model, batches, classification_loss, optimizer, epochs, steps, keep_best, progress, "from scratch"
    )
    return model, history


@torch.no_grad()
def classifier_accuracy(
    model: nn.Module, vocabulary: PieceVocabulary, texts: Sequence[str], labels: torch.Tensor, max_tokens: int = 48
) -> float:
    """Accuracy of a small classifier (from :func:`train_from_scratch`) on labelled texts."""
    texts = require_texts(texts)
    labels = require_labels(labels, len(texts))
    tokens, padding_mask = vocabulary.encode(texts, max_tokens)
    correct = 0
    with evaluating(model):
        for batch in LengthBatches({"tokens": tokens, "padding_mask": padding_mask, "label": labels}, 256):
            correct += int((model(batch["tokens"], batch["padding_mask"]).argmax(-1) == batch["label"]).sum())
    return correct / len(texts)


# ---------------------------------------------------------------------------------
# Masked language modelling


def train_mlm(
    vocabulary: PieceVocabulary,
    texts: Sequence[str],
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 2e-3,
    max_tokens: int = 48,
    seed: int = 0,
    progress: bool = False,
    **encoder_options,
) -> tuple[TokenClassifier, History]:
    """Pretrain a small encoder by masked language modelling on unlabelled ``texts``.

    Every step masks a fresh 15 % of the batch's pieces (:func:`mask_tokens`, BERT's
    80/10/10) and scores the model only there (:func:`masked_token_loss`). The model is a
    :class:`TokenClassifier` with one class per piece. Returns (model, history);
    ``history.tokens_seen`` counts the real pieces it read.
    """
    texts = require_texts(texts)
    require_count(steps, "steps")
    torch.manual_seed(seed)
    model = TokenClassifier(
        len(vocabulary), len(vocabulary), **{**SMALL_MODEL, "max_len": max_tokens, **encoder_options}
    )
    tokens, padding_mask = vocabulary.encode(texts, max_tokens)
    generator = torch.Generator().manual_seed(seed)
    batches = LengthBatches({"tokens": tokens, "padding_mask": padding_mask}, batch_size, generator)

    def loss(model: nn.Module, batch: dict) -> torch.Tensor:
        corrupted, targets = mask_tokens(batch["tokens"], batch["padding_mask"], generator, vocab_size=len(vocabulary))
        return masked_token_loss(
            model, {"tokens": corrupted, "padding_mask": batch["padding_mask"], "targets": targets}
        )

    history = _fit_steps(model, batches, loss, _adamw(model.parameters(), lr), 1, steps, None, progress, "masked LM")
    return model, history


# ---------------------------------------------------------------------------------
# The pretrained encoder, run once per text


@dataclass
class ReviewFeatures:
    """What the pretrained encoder computed for a list of texts, kept for reuse.

    pooled: (N, layers + 1, d) mean-pooled vectors of the embedding output and every layer.
    states: (N, T, d) the token vectors ``hidden_states[split_layer]``, i.e. the output of
        the first ``split_layer`` layers, which the layers above take as input; padded.
    padding_mask: (N, T) True for real tokens.
    seconds: how long the encoding took.
    """

    pooled: torch.Tensor
    states: torch.Tensor
    padding_mask: torch.Tensor
    split_layer: int
    seconds: float

    def __len__(self) -> int:
        return self.pooled.shape[0]

    def layer(self, index: int = -1) -> torch.Tensor:
        """Frozen features of one layer: (N, d). 0 = the embedding output, -1 = the last layer."""
        return self.pooled[:, index]

    def take(self, n: int) -> ReviewFeatures:
        """The features of the first ``n`` texts (as ``TextSplit.take``)."""
        require_count(n, "n", 1, len(self))
        return self.rows(0, n)

    def rows(self, start: int, stop: int) -> ReviewFeatures:
        """The features of texts ``start`` to ``stop - 1``."""
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= len(self)):
            raise ValueError(f"need 0 <= start < stop <= {len(self)}, but start={start!r} and stop={stop!r}")
        part = slice(start, stop)
        return ReviewFeatures(
            self.pooled[part], self.states[part], self.padding_mask[part], self.split_layer, self.seconds
        )

    def select(self, rows: torch.Tensor) -> ReviewFeatures:
        """The features of the texts at ``rows`` (a tensor of indices), in that order."""
        rows = torch.as_tensor(rows, dtype=torch.long)
        if rows.dim() != 1 or len(rows) == 0 or int(rows.min()) < 0 or int(rows.max()) >= len(self):
            raise ValueError(f"rows must be a non-empty 1-d tensor of indices below {len(self)}, but got {rows!r}")
        return ReviewFeatures(
            self.pooled[rows], self.states[rows], self.padding_mask[rows], self.split_layer, self.seconds
        )


Observer = Callable[[list, torch.Tensor, list], None]


@torch.no_grad()
def encode_reviews(
    model: PretrainedEncoder,
    texts: Sequence[str],
    max_tokens: int = 48,
    split_layer: int = 4,
    batch_size: int = 64,
    observe: Observer | None = None,
) -> ReviewFeatures:
    """Run the pretrained encoder once over ``texts`` (in batches of similar length).

    Keeps every layer's mean-pooled vector and the token vectors that enter the layers
    above ``split_layer`` (``hidden_states[split_layer]``), so that fine-tuning the top
    ``num_layers - split_layer`` layers starts from them. ``observe(weights, padding_mask,
    labels)``, if given, sees every batch's attention weights (one (batch, heads, T, T)
    tensor per layer) in the same pass, e.g. ``HeadPatternCounter.add``.
    """
    texts = require_texts(texts)
    require_count(split_layer, "split_layer", 0, model.num_layers)
    start = time.perf_counter()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    pooled = torch.zeros(len(texts), model.num_layers + 1, model.d_model)
    states = torch.zeros(len(texts), max_tokens, model.d_model)
    padding = torch.zeros(len(texts), max_tokens, dtype=torch.bool)
    with evaluating(model):
        for begin in range(0, len(order), batch_size):
            rows = order[begin : begin + batch_size]
            batch = model.encode([texts[i] for i in rows], max_tokens=max_tokens)
            hidden = model.hidden_states(batch.tokens, batch.padding_mask, batch.token_types)
            if observe is not None:
                observe(model.attention_weights(), batch.padding_mask, batch.labels)
            T = batch.tokens.shape[1]
            index = torch.tensor(rows)
            pooled[index] = torch.stack([mean_pool(h, batch.padding_mask) for h in hidden], dim=1).cpu()
            states[index, :T] = hidden[split_layer].cpu()
            padding[index, :T] = batch.padding_mask.cpu()
    T = int(padding.sum(dim=1).max())
    return ReviewFeatures(
        pooled, states[:, :T].contiguous(), padding[:, :T].contiguous(), split_layer, time.perf_counter() - start
    )


def throughput(features: ReviewFeatures) -> float:
    """Texts per second of the run that made ``features``."""
    return len(features) / features.seconds


# ---------------------------------------------------------------------------------
# (b) Frozen features + a linear head (logistic regression)


class LinearProbe(nn.Module):
    """Standardise each feature (with the training set's mean and spread), then one linear layer."""

    def __init__(self, mean: torch.Tensor, std: torch.Tensor, num_classes: int = 2):
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.linear = nn.Linear(mean.shape[-1], num_classes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear((features - self.mean) / self.std)  # (N, num_classes)


def _check_features(features, labels) -> torch.Tensor:
    if not isinstance(features, torch.Tensor) or features.dim() != 2 or not features.is_floating_point():
        shape = describe_shape(features) if isinstance(features, torch.Tensor) else type(features).__name__
        raise ValueError(f"features must be a float tensor (N, d), but got {shape}")
    return require_labels(labels, features.shape[0])


def train_linear_probe(
    features: torch.Tensor,
    labels: torch.Tensor,
    steps: int = 200,
    lr: float = 0.05,
    weight_decay: float = 1e-3,
    seed: int = 0,
) -> LinearProbe:
    """Logistic regression on frozen features: full-batch Adam on the cross-entropy plus
    ``weight_decay`` times the squared weights (the bias is not penalised)."""
    labels = _check_features(features, labels)
    require_count(steps, "steps")
    torch.manual_seed(seed)
    features = features.detach().float()
    probe = LinearProbe(features.mean(0), features.std(0).clamp_min(1e-6), max(2, int(labels.max()) + 1))
    standardised = (features - probe.mean) / probe.std  # what probe(features) computes first, done once

    def penalised_loss(probe: nn.Module, batch: dict) -> torch.Tensor:
        logits = probe.linear(batch["standardised"])
        return F.cross_entropy(logits, batch["label"]) + weight_decay * probe.linear.weight.pow(2).sum()

    full_batch = [{"standardised": standardised, "label": labels}]
    fit(probe, full_batch, penalised_loss, epochs=steps, lr=lr, clip_norm=None, progress=False)
    return probe


@torch.no_grad()
def probe_accuracy(probe: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> float:
    labels = _check_features(features, labels)
    with evaluating(probe):
        return float((probe(features).argmax(-1) == labels).float().mean())


def probe_every_layer(
    train: ReviewFeatures, train_labels: torch.Tensor, valid: ReviewFeatures, valid_labels: torch.Tensor, **options
) -> list[float]:
    """Validation accuracy of a linear probe on each layer's frozen features (embedding output first)."""
    return [
        probe_accuracy(train_linear_probe(train.layer(i), train_labels, **options), valid.layer(i), valid_labels)
        for i in range(train.pooled.shape[1])
    ]


# ---------------------------------------------------------------------------------
# (c) Fine-tuning the top layers of the pretrained encoder


class TopLayersClassifier(nn.Module):
    """Copies of the pretrained encoder's layers from ``split_layer`` up, mean pooling, a linear head.

    Its input is the token vectors that enter layer ``split_layer``
    (``ReviewFeatures.states``): the layers below stay as they were and are never re-run.
    With ``split_layer=0`` every layer is fine-tuned (the embeddings stay frozen).
    """

    def __init__(self, pretrained: PretrainedEncoder, split_layer: int, num_classes: int = 2):
        super().__init__()
        require_count(split_layer, "split_layer", 0, pretrained.num_layers - 1)
        self.layers = nn.ModuleList(copy.deepcopy(layer) for layer in pretrained.encoder.layers[split_layer:])
        self.layers.requires_grad_(True)
        self.head = nn.Linear(pretrained.d_model, num_classes)

    def forward(self, states: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        x = run_stack(self.layers, states, padding_mask)  # (batch, T, d)
        return self.head(mean_pool(x, padding_mask))  # (batch, num_classes)


def fine_tune_top_layers(
    pretrained: PretrainedEncoder,
    features: ReviewFeatures,
    labels: torch.Tensor,
    steps: int = 40,
    batch_size: int = 16,
    lr: float = 5e-5,
    head_lr: float = 1e-3,
    seed: int = 0,
    progress: bool = False,
    keep_best: KeepBest | None = None,
) -> tuple[TopLayersClassifier, History]:
    """Fine-tune the layers above ``features.split_layer`` and a new linear head on labelled examples.

    The pretrained layers learn with a small rate (``lr``), the new head with a larger
    one (``head_lr``). Runs for ``steps`` mini-batches, cycling through the examples;
    ``keep_best`` (optional) scores checkpoints along the way and returns the best one.
    Returns (model, history).
    """
    labels = require_labels(labels, len(features))
    require_count(steps, "steps")
    require_count(batch_size, "batch_size")
    torch.manual_seed(seed)
    model = TopLayersClassifier(pretrained, features.split_layer).to(features.states.device)
    optimizer = torch.optim.AdamW(
        [{"params": model.layers.parameters(), "lr": lr}, {"params": model.head.parameters(), "lr": head_lr}],
        weight_decay=0.01,
    )
    batches = LengthBatches(
        {"tokens": features.states, "padding_mask": features.padding_mask, "label": labels},
        batch_size,
        torch.Generator().manual_seed(seed),
    )
    history = _fit_steps(model, batches, classification_loss, optimizer, 1, steps, keep_best, progress, "fine-tuning")
    return model, history


@torch.no_grad()
def fine_tuned_accuracy(model: TopLayersClassifier, features: ReviewFeatures, labels: torch.Tensor) -> float:
    """Accuracy of a fine-tuned model (from :func:`fine_tune_top_layers`) on the features' texts."""
    labels = require_labels(labels, len(features))
    correct = 0
    with evaluating(model):
        for rows in index_batches(len(labels), 128, None, features.padding_mask.sum(dim=1)):
            batch = trim_padding({"states": features.states[rows], "padding_mask": features.padding_mask[rows]})
            correct += int((model(batch["states"], batch["padding_mask"]).argmax(-1) == labels[rows]).sum())
    return correct / len(labels)
