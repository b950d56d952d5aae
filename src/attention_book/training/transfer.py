"""Chapter 7's recipes: a small encoder from scratch, masked-language-model pretraining,
the pretrained encoder's features (run once), a linear probe on them, and fine-tuning
its top layers.

Chapter 7 writes each idea out in cells first (the masking, one fine-tuning step, the
probe's training loop) and checks these functions against them; the functions then run
the experiment at every size. Everything that trains goes through :func:`~attention_book.fit`
on :class:`~attention_book.data.batches.LengthBatches`; every function is seeded.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import inspect
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from .._validation import describe_shape, require_count, require_labels, require_texts
from ..data.batches import LengthBatches, index_batches, trim_padding
from ..data.pieces import MASK, SPECIAL_PIECES, PieceVocabulary, mask_tokens
from ..data.tasks import IGNORE
from ..modes import evaluating
from ..pretrained import STORED_FOLDER, PretrainedEncoder, record_stored_file, stored_file
from ..transformer import Encoder, EncoderClassifier, TokenClassifier, mean_pool, run_stack
from .loop import History, fit
from .losses import classification_loss, masked_token_loss

__all__ = [
    "SMALL_MODEL",
    "train_from_scratch",
    "classifier_accuracy",
    "train_mlm",
    "masked_token_accuracy",
    "fill_mask",
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
    "STUDY_ARMS",
    "PROBE_WEIGHT_DECAYS",
    "StudyPlan",
    "StudyData",
    "prepare_study",
    "study_subset",
    "run_study",
    "mean_interval",
    "summarize_study",
    "paired_difference",
    "FULL_STUDY",
    "STUDY_FILE",
    "STUDY_COMMAND",
    "load_study",
    "store_study",
    "study_fingerprint",
]

SMALL_MODEL = dict(d_model=64, num_heads=4, d_ff=128, num_layers=2, dropout=0.0)
"""The small encoder trained from scratch and by masked language modelling (about 0.35M parameters)."""


def _adamw(parameters, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=0.01)


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
    **model_options,
) -> tuple[EncoderClassifier, History]:
    """Train a small :class:`EncoderClassifier` (mean pooling) on labelled texts, all parameters from scratch.

    ``encoder`` (optional) replaces the randomly initialised encoder, e.g. one pretrained
    with :func:`train_mlm`; it is copied, never changed. Returns (model, history).
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
    history = fit(
        model,
        batches,
        classification_loss,
        epochs=epochs,
        optimizer=_adamw(model.parameters(), lr),
        clip_norm=None,
        progress=progress,
        description="from scratch",
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

    history = fit(
        model,
        batches,
        loss,
        epochs=-(-steps // len(batches)),
        max_steps=steps,
        optimizer=_adamw(model.parameters(), lr),
        clip_norm=None,
        progress=progress,
        description="masked LM",
    )
    return model, history


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

    def penalised_loss(probe: nn.Module, batch: dict) -> torch.Tensor:
        return (
            F.cross_entropy(probe(batch["features"]), batch["label"]) + weight_decay * probe.linear.weight.pow(2).sum()
        )

    full_batch = [{"features": features, "label": labels}]
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
) -> tuple[TopLayersClassifier, History]:
    """Fine-tune the layers above ``features.split_layer`` and a new linear head on labelled examples.

    The pretrained layers learn with a small rate (``lr``), the new head with a larger
    one (``head_lr``). Runs for ``steps`` mini-batches, cycling through the examples.
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
    history = fit(
        model,
        batches,
        classification_loss,
        epochs=-(-steps // len(batches)),
        max_steps=steps,
        optimizer=optimizer,
        clip_norm=None,
        progress=progress,
        description="fine-tuning",
    )
    return model, history


@torch.no_grad()
def fine_tuned_accuracy(model: TopLayersClassifier, features: ReviewFeatures, labels: torch.Tensor) -> float:
    labels = require_labels(labels, len(features))
    correct = 0
    with evaluating(model):
        for rows in index_batches(len(labels), 128, None, features.padding_mask.sum(dim=1)):
            batch = trim_padding({"states": features.states[rows], "padding_mask": features.padding_mask[rows]})
            correct += int((model(batch["states"], batch["padding_mask"]).argmax(-1) == labels[rows]).sum())
    return correct / len(labels)


# ---------------------------------------------------------------------------------
# The study: four ways to build a classifier, at every label count, over several seeds
#
# Everything is chosen on the validation split (the probe's weight decay, every run's
# number of steps); the test split is scored once, after all choices are made.

STUDY_ARMS = ("scratch", "frozen", "fine-tuned", "MLM then fine-tuned")
"""The four arms of the study, in the order the chapter shows them."""

PROBE_WEIGHT_DECAYS = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1)
"""The linear probe's penalties tried on the validation split (on the *mean* loss: scikit-learn's
default ``C=1`` is ``1 / (2 n)``, 5e-3 at n = 100 and 5e-5 at n = 10,202)."""


@dataclass
class StudyPlan:
    """The grid of a transfer study: label counts, repeats, step budgets and what validation chooses from.

    ``sizes``: labelled training examples per run. ``repeats``: runs per size and arm;
    repeat ``r`` trains with seed ``r`` on its own random subset of the training split
    (:func:`study_subset`). ``small_steps[n]`` and ``fine_tune_steps[n]``: the most steps a
    small encoder (scratch, MLM) or the fine-tuned top layers take at size ``n``; the
    validation split is scored ``checkpoints`` / ``fine_tune_checkpoints`` times along the
    way and the best checkpoint is kept (early stopping). ``mlm_steps``: masked-language-model
    pretraining on the training split's text (labels unused), once per repeat, or once for
    all repeats with ``shared_mlm``. ``arm_sizes`` may limit an arm to some of the sizes.
    """

    sizes: tuple[int, ...]
    repeats: int = 5
    small_steps: dict[int, int] = field(default_factory=dict)
    fine_tune_steps: dict[int, int] = field(default_factory=dict)
    mlm_steps: int = 1000
    checkpoints: int = 8
    fine_tune_checkpoints: int = 3
    probe_weight_decays: tuple[float, ...] = PROBE_WEIGHT_DECAYS
    probe_steps: int = 300
    batch_size: int = 32
    small_lr: float = 1e-3
    fine_tune_lr: float = 3e-4
    head_lr: float = 2e-3
    max_tokens: int = 48
    split_layer: int = 5
    arms: tuple[str, ...] = STUDY_ARMS
    arm_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    shared_mlm: bool = False

    def __post_init__(self):
        self.sizes = tuple(require_count(n, "size") for n in self.sizes)
        require_count(self.repeats, "repeats")
        unknown = [arm for arm in [*self.arms, *self.arm_sizes] if arm not in STUDY_ARMS]
        if unknown:
            raise ValueError(f"arms must be among {STUDY_ARMS}, but {unknown} was given")
        for arm, sizes in self.arm_sizes.items():
            if not set(sizes) <= set(self.sizes):
                raise ValueError(f"arm_sizes[{arm!r}] must be among the sizes {self.sizes}, but is {sizes}")
        for name in ("small_steps", "fine_tune_steps"):
            steps = getattr(self, name)
            missing = [n for n in self.sizes if n not in steps]
            needed = (
                "scratch" in self.arms or "MLM then fine-tuned" in self.arms
                if name == "small_steps"
                else "fine-tuned" in self.arms
            )
            if needed and missing:
                raise ValueError(f"{name} must give a step budget for every size, but {missing} are missing")

    def as_dict(self) -> dict:
        return {
            "sizes": list(self.sizes),
            "repeats": self.repeats,
            "arms": list(self.arms),
            "small_steps": {str(n): s for n, s in self.small_steps.items()},
            "fine_tune_steps": {str(n): s for n, s in self.fine_tune_steps.items()},
            "mlm_steps": self.mlm_steps,
            "checkpoints": self.checkpoints,
            "fine_tune_checkpoints": self.fine_tune_checkpoints,
            "probe_weight_decays": list(self.probe_weight_decays),
            "probe_steps": self.probe_steps,
            "batch_size": self.batch_size,
            "small_lr": self.small_lr,
            "fine_tune_lr": self.fine_tune_lr,
            "head_lr": self.head_lr,
            "max_tokens": self.max_tokens,
            "split_layer": self.split_layer,
            "arm_sizes": {arm: list(sizes) for arm, sizes in self.arm_sizes.items()},
            "shared_mlm": self.shared_mlm,
        }

    def sizes_of(self, arm: str) -> tuple[int, ...]:
        """The label counts ``arm`` is run at."""
        return tuple(self.arm_sizes.get(arm, self.sizes))


@dataclass
class StudyData:
    """What every run of the study reads, computed once: tokens for the small encoders,
    the pretrained encoder's features, and the labels, per split (``test`` may be None)."""

    vocabulary: PieceVocabulary
    texts: dict[str, list[str]]
    labels: dict[str, torch.Tensor]
    tokens: dict[str, tuple[torch.Tensor, torch.Tensor]]
    features: dict[str, ReviewFeatures] | None

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(self.texts)


def prepare_study(
    pretrained: PretrainedEncoder,
    vocabulary: PieceVocabulary,
    splits: dict[str, tuple[Sequence[str], torch.Tensor]],
    max_tokens: int = 48,
    split_layer: int = 5,
    observe: dict[str, Observer] | None = None,
    pretrained_features: bool = True,
) -> StudyData:
    """Tokenize every split for the small encoders and run the pretrained encoder over it once.

    ``splits`` maps "train", "validation" and optionally "test" to (texts, labels).
    ``observe`` may give an observer per split for :func:`encode_reviews`. With
    ``pretrained_features=False`` the pretrained encoder is not run (enough for the
    scratch and MLM arms, which read tokens only).
    """
    if "train" not in splits or "validation" not in splits:
        raise ValueError(f"splits must hold 'train' and 'validation', but holds {sorted(splits)}")
    texts, labels, tokens, features = {}, {}, {}, {}
    for name, (split_texts, split_labels) in splits.items():
        texts[name] = require_texts(split_texts)
        labels[name] = require_labels(split_labels, len(texts[name]))
        tokens[name] = vocabulary.encode(texts[name], max_tokens)
        if pretrained_features:
            features[name] = encode_reviews(
                pretrained,
                texts[name],
                max_tokens=max_tokens,
                split_layer=split_layer,
                observe=(observe or {}).get(name),
            )
    return StudyData(vocabulary, texts, labels, tokens, features if pretrained_features else None)


def study_subset(size: int, repeat: int, total: int) -> torch.Tensor:
    """The training rows of one run: ``size`` of ``total``, a random sample of its own per repeat (seeded).

    The full size gives every row (in a repeat-specific order).
    """
    require_count(size, "size", 1, total)
    return torch.randperm(total, generator=torch.Generator().manual_seed(10_000 + repeat))[:size]


@torch.no_grad()
def _small_accuracy(model: nn.Module, tokens: torch.Tensor, padding_mask: torch.Tensor, labels: torch.Tensor) -> float:
    correct = 0
    with evaluating(model):
        for rows in index_batches(len(labels), 256, None, padding_mask.sum(dim=1)):
            batch = trim_padding({"tokens": tokens[rows], "padding_mask": padding_mask[rows]})
            correct += int((model(batch["tokens"], batch["padding_mask"]).argmax(-1) == labels[rows]).sum())
    return correct / len(labels)


def _checkpoint_steps(total: int, count: int) -> set[int]:
    return {max(1, round(total * (k + 1) / count)) for k in range(count)}


def _train_keeping_best(model, batches, loss_fn, optimizer, steps, checkpoints, score, description):
    """Train for ``steps``; score the validation split at ``checkpoints`` evenly spaced steps and
    put the best checkpoint's weights back. Returns (best step, best validation score, history)."""
    best = {"score": -1.0, "step": 0, "state": None}
    marks = _checkpoint_steps(steps, checkpoints)

    def on_step(step: int, batch: dict, loss: float) -> None:
        if step in marks:
            value = score(model)
            if value > best["score"]:
                best.update(score=value, step=step, state=copy.deepcopy(model.state_dict()))

    history = fit(
        model,
        batches,
        loss_fn,
        epochs=-(-steps // len(batches)),
        max_steps=steps,
        optimizer=optimizer,
        clip_norm=None,
        progress=False,
        description=description,
        on_step=on_step,
    )
    model.load_state_dict(best["state"])
    return best["step"], best["score"], history


def _study_small(data: StudyData, rows: torch.Tensor, plan: StudyPlan, steps: int, seed: int, encoder: Encoder | None):
    tokens, padding_mask = data.tokens["train"]
    torch.manual_seed(seed)
    model = EncoderClassifier(len(data.vocabulary), 2, pooling="mean", **{**SMALL_MODEL, "max_len": plan.max_tokens})
    if encoder is not None:
        model.encoder = copy.deepcopy(encoder)
    batches = LengthBatches(
        {"tokens": tokens[rows], "padding_mask": padding_mask[rows], "label": data.labels["train"][rows]},
        plan.batch_size,
        torch.Generator().manual_seed(seed),
    )
    valid = (*data.tokens["validation"], data.labels["validation"])
    step, score, _ = _train_keeping_best(
        model,
        batches,
        classification_loss,
        _adamw(model.parameters(), plan.small_lr),
        steps,
        plan.checkpoints,
        lambda m: _small_accuracy(m, *valid),
        "small encoder",
    )
    return model, step, score


def _study_fine_tune(
    pretrained: PretrainedEncoder, data: StudyData, rows: torch.Tensor, plan: StudyPlan, steps: int, seed: int
):
    features = data.features["train"]
    torch.manual_seed(seed)
    model = TopLayersClassifier(pretrained, features.split_layer)
    optimizer = torch.optim.AdamW(
        [
            {"params": model.layers.parameters(), "lr": plan.fine_tune_lr},
            {"params": model.head.parameters(), "lr": plan.head_lr},
        ],
        weight_decay=0.01,
    )
    batches = LengthBatches(
        {
            "tokens": features.states[rows],
            "padding_mask": features.padding_mask[rows],
            "label": data.labels["train"][rows],
        },
        plan.batch_size,
        torch.Generator().manual_seed(seed),
    )
    step, score, _ = _train_keeping_best(
        model,
        batches,
        classification_loss,
        optimizer,
        steps,
        plan.fine_tune_checkpoints,
        lambda m: fine_tuned_accuracy(m, data.features["validation"], data.labels["validation"]),
        "fine-tuning",
    )
    return model, step, score


def run_study(pretrained: PretrainedEncoder, data: StudyData, plan: StudyPlan, progress: bool = True) -> dict:
    """Run every arm at every size ``plan.repeats`` times; choose on validation, then score test once.

    Returns a JSON-ready dict: ``plan``, ``seconds`` per arm, and per arm and size
    (as a string) the lists ``validation`` and ``test`` (one accuracy per repeat; ``test``
    only when ``data`` has a test split) and ``chosen`` (the probe's weight decay, or the
    step the validation split chose), plus ``baseline`` (always "fresh") per split.
    """
    from tqdm.auto import tqdm

    total = len(data.labels["train"])
    if data.features is None and any(arm in ("frozen", "fine-tuned") for arm in plan.arms):
        raise ValueError(
            "the frozen and fine-tuned arms need the pretrained encoder's features: prepare_study(..., pretrained_features=True)"
        )
    if (
        data.features is not None
        and any(arm == "fine-tuned" for arm in plan.arms)
        and data.features["train"].split_layer != plan.split_layer
    ):
        raise ValueError(
            f"the plan fine-tunes from layer {plan.split_layer}, but the features were stored at layer {data.features['train'].split_layer}"
        )
    too_big = [n for n in plan.sizes if n > total]
    if too_big:
        raise ValueError(f"sizes must be at most the {total} training examples, but {too_big} were given")
    splits = [name for name in ("validation", "test") if name in data.labels]
    results: dict = {
        "plan": plan.as_dict(),
        "seconds": {},
        "arms": {},
        "baseline": {name: float(data.labels[name].float().mean()) for name in ("train", *splits)},
    }
    runs = sum(len(plan.sizes_of(arm)) for arm in plan.arms) * plan.repeats
    bar = tqdm(total=runs, desc="transfer study", disable=not progress)
    finals: dict[str, dict[int, list]] = {}  # arm -> size -> the chosen model of every repeat
    for arm in plan.arms:
        start = time.perf_counter()
        results["arms"][arm] = {str(n): {"validation": [], "chosen": []} for n in plan.sizes_of(arm)}
        finals[arm] = {n: [] for n in plan.sizes_of(arm)}
        pretrained_small = {}
        if arm == "MLM then fine-tuned":
            for repeat in range(1 if plan.shared_mlm else plan.repeats):
                bar.set_postfix_str(f"MLM pretraining, run {repeat + 1}")
                mlm, _ = train_mlm(
                    data.vocabulary,
                    data.texts["train"],
                    steps=plan.mlm_steps,
                    batch_size=plan.batch_size,
                    max_tokens=plan.max_tokens,
                    seed=repeat,
                )
                pretrained_small[repeat] = mlm.encoder
            if plan.shared_mlm:
                pretrained_small = {repeat: pretrained_small[0] for repeat in range(plan.repeats)}
        for n in plan.sizes_of(arm):
            record = results["arms"][arm][str(n)]
            if arm == "frozen":  # one penalty for the size: the best mean validation accuracy over the repeats
                train_x, valid_x = data.features["train"].layer(-1), data.features["validation"].layer(-1)
                scores = {decay: [] for decay in plan.probe_weight_decays}
                probes = {decay: [] for decay in plan.probe_weight_decays}
                for repeat in range(plan.repeats):
                    rows = study_subset(n, repeat, total)
                    for decay in plan.probe_weight_decays:
                        probe = train_linear_probe(
                            train_x[rows],
                            data.labels["train"][rows],
                            steps=plan.probe_steps,
                            weight_decay=decay,
                            seed=repeat,
                        )
                        probes[decay].append(probe)
                        scores[decay].append(probe_accuracy(probe, valid_x, data.labels["validation"]))
                    bar.update(1)
                decay = max(plan.probe_weight_decays, key=lambda d: sum(scores[d]))
                record["validation"] = scores[decay]
                record["chosen"] = [decay] * plan.repeats
                record["validation_by_weight_decay"] = {f"{d:g}": scores[d] for d in plan.probe_weight_decays}
                finals[arm][n] = probes[decay]
                continue
            for repeat in range(plan.repeats):
                rows = study_subset(n, repeat, total)
                bar.set_postfix_str(f"{arm}, {n:,} examples, repeat {repeat + 1}")
                if arm == "fine-tuned":
                    model, step, score = _study_fine_tune(pretrained, data, rows, plan, plan.fine_tune_steps[n], repeat)
                else:
                    model, step, score = _study_small(
                        data, rows, plan, plan.small_steps[n], repeat, pretrained_small.get(repeat)
                    )
                record["validation"].append(score)
                record["chosen"].append(step)
                finals[arm][n].append(model)
                bar.update(1)
        results["seconds"][arm] = time.perf_counter() - start
    bar.close()
    if "test" in data.labels:  # every choice is made: score the test split, once per chosen model
        for arm, by_size in finals.items():
            for n, models in by_size.items():
                results["arms"][arm][str(n)]["test"] = [_test_accuracy(arm, model, data) for model in models]
    return results


def _test_accuracy(arm: str, model: nn.Module, data: StudyData) -> float:
    if arm == "frozen":
        return probe_accuracy(model, data.features["test"].layer(-1), data.labels["test"])
    if arm == "fine-tuned":
        return fine_tuned_accuracy(model, data.features["test"], data.labels["test"])
    return _small_accuracy(model, *data.tokens["test"], data.labels["test"])


# Two-sided 95 % quantiles of Student's t distribution, by degrees of freedom.
_T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95 % t-interval over independent runs (at least 2)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"an interval needs at least 2 values, but {len(values)} were given")
    n = len(values)
    mean = sum(values) / n
    spread = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    degrees = n - 1
    quantile = _T_975.get(degrees) or _T_975[max(d for d in _T_975 if d <= degrees)]
    half = quantile * spread / n**0.5
    return mean, mean - half, mean + half


def summarize_study(results: dict, split: str = "test") -> dict[str, dict[int, tuple[float, float, float]]]:
    """Per arm and size: (mean, low, high) of the accuracy on ``split`` over the repeats."""
    if split not in ("validation", "test"):
        raise ValueError(f"split must be 'validation' or 'test', but {split!r} was given")
    summary = {}
    for arm, by_size in results["arms"].items():
        summary[arm] = {int(n): mean_interval(record[split]) for n, record in by_size.items() if split in record}
    return summary


def paired_difference(
    results: dict, arm: str, other: str, size: int, split: str = "test"
) -> tuple[float, float, float]:
    """(mean, low, high) of ``arm`` minus ``other`` at ``size``, paired by repeat (same subset and seed)."""
    ours, theirs = results["arms"][arm][str(size)][split], results["arms"][other][str(size)][split]
    return mean_interval([a - b for a, b in zip(ours, theirs, strict=True)])


FULL_STUDY = StudyPlan(
    sizes=(100, 300, 1000, 3000, 10202),
    small_steps={100: 40, 300: 80, 1000: 160, 3000: 320, 10202: 640},
    fine_tune_steps={100: 20, 300: 40, 1000: 60, 3000: 100, 10202: 160},
    mlm_steps=500,
    checkpoints=4,
    fine_tune_checkpoints=2,
    shared_mlm=True,
)
"""The grid of the stored run, recomputed by ``python benchmarks/run.py --only transfer``.

Step budgets grow with the label count but stay small: at 10,202 examples the small
encoders get 640 steps of 32 (two passes), fine-tuning (one pretrained layer on CPU) 160.
Within each budget the validation split picks the checkpoint (4 for the small encoders, 2
for fine-tuning). Every arm runs at every size; the MLM arm pretrains once (500 steps over
the training reviews' text, shared by its 5 repeats). On a 2-core CPU the whole grid takes
a few hours; ``--transfer-arms`` and ``--transfer-sizes`` run a part of it, which
``tools/merge_transfer_parts.py`` adds to the stored run (the stored run was completed so)."""

STUDY_FILE = "transfer_study.json"
STUDY_COMMAND = "python benchmarks/run.py --only transfer"


def load_study() -> dict:
    """The stored full run of the study (SHA-256 checked), as :func:`run_study` returned it, with ``machine`` and ``seconds``."""
    return json.loads(stored_file(STUDY_FILE).read_text())


def store_study(results: dict) -> str:
    """Write ``results`` into the package's ``stored/`` folder and record its SHA-256 (returned)."""
    path = STORED_FOLDER / STUDY_FILE
    path.write_text(json.dumps(results, indent=1) + "\n")
    return record_stored_file(STUDY_FILE)


def study_fingerprint() -> dict:
    """What the stored study was computed by: the names and a SHA-256 of this module's code that
    :func:`run_study` reaches (itself, the functions, classes and constants it names, and theirs in
    turn), docstrings, comments and layout left out.

    ``stored/transfer_study.json`` keeps it (``code``); a test fails when the code no longer gives
    the same fingerprint, so the page never shows numbers that today's functions would not make.
    (Library code outside this module, such as ``fit``, is pinned by the test's live re-run of one
    cell of the grid instead.)
    """
    tree = ast.parse(inspect.getsource(sys.modules[__name__]))
    for node in ast.walk(tree):  # docstrings (of functions, classes and methods) are not code
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    top: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            top.update({target.id: node for target in targets if isinstance(target, ast.Name)})
    reached, waiting = set(), ["run_study", "prepare_study", "FULL_STUDY"]
    while waiting:
        name = waiting.pop()
        if name in reached or name not in top:
            continue
        reached.add(name)
        waiting.extend(found.id for found in ast.walk(top[name]) if isinstance(found, ast.Name))
    digest = hashlib.sha256()
    for name in sorted(reached):
        digest.update(name.encode() + b"\0" + ast.dump(top[name]).encode() + b"\0")
    return {"sha256": digest.hexdigest(), "reaches": sorted(reached)}
