"""Chapter 7 helpers: the transfer-learning experiment, a tiny masked-language-model run,
and the measurements of the pretrained model's heads and contextual vectors.

None of this is the lesson itself (the chapter writes the ideas out); it keeps the
chapter's cells short and its budget small:

* :class:`PieceVocabulary` maps the word pieces that occur in the training reviews to
  a compact vocabulary, for the small models trained from scratch;
* :func:`train_from_scratch` trains a small :class:`~attention_book.EncoderClassifier`;
* :func:`mask_tokens`, :class:`MaskedLanguageModel`, :func:`train_mlm`: BERT's
  pretraining objective, run for a few seconds on unlabelled review text;
* :func:`encode_reviews` runs the pretrained encoder over texts **once**, keeping the
  mean-pooled vectors of every layer (frozen features) and the token vectors entering
  the top layers (so fine-tuning those layers never re-runs the bottom ones);
* :func:`train_linear_probe` (logistic regression on frozen features) and
  :func:`fine_tune_top_layers`;
* :class:`HeadPatternCounter` and :func:`head_pattern_scores` measure, for every head,
  how much weight it gives to the previous token, the next token, itself, [CLS], [SEP]
  and punctuation, and what a head without preferences would give;
* :func:`word_vectors` and :func:`contextual_similarity_by_layer` measure how the
  vectors of one word change with its sentence.

Every function that trains takes a seed and runs on the CPU, so that the chapter's
numbers repeat on every run. Batches group texts of similar length (less padding to
compute; see ``_batches``).
"""

from __future__ import annotations

import copy
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from ._validation import describe_shape
from .plotting import ATTENTION_CMAP, to_numpy
from .pretrained import PretrainedEncoder, mean_pool
from .transformer import Encoder, EncoderClassifier

__all__ = [
    "PieceVocabulary",
    "build_vocabulary",
    "TrainingRun",
    "train_from_scratch",
    "classifier_accuracy",
    "mask_tokens",
    "MaskedLanguageModel",
    "train_mlm",
    "masked_token_accuracy",
    "fill_mask",
    "ReviewFeatures",
    "encode_reviews",
    "LinearProbe",
    "train_linear_probe",
    "probe_accuracy",
    "probe_every_layer",
    "TopLayersClassifier",
    "fine_tune_top_layers",
    "fine_tuned_accuracy",
    "HEAD_PATTERNS",
    "HeadPatternCounter",
    "head_pattern_scores",
    "strongest_heads",
    "plot_head_scores",
    "plot_heads",
    "word_vectors",
    "contextual_similarity_by_layer",
    "plot_contextual_similarity",
    "plot_learning_curves",
    "format_results",
    "throughput",
]

SPECIAL_PIECES = ("[PAD]", "[UNK]", "[MASK]")
PAD_ID, UNK_ID, MASK_ID = 0, 1, 2


def _check_count(value, name: str, minimum: int = 1) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer of at least {minimum}, but {value!r} was given")


def _check_texts(texts, name: str = "texts") -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"{name} must be a list of strings, but a {type(texts).__name__} was given")
    if not texts:
        raise ValueError(f"{name} is empty")
    return list(texts)


def _check_labels(labels, count: int) -> torch.Tensor:
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point():
        raise ValueError(f"labels must be a 1-D tensor of integer class ids, but got {labels!r:.80}")
    if len(labels) != count:
        raise ValueError(f"there are {count} examples but {len(labels)} labels")
    return labels.long()


# ---------------------------------------------------------------------------------
# A compact vocabulary of word pieces, for the small models


@dataclass
class PieceVocabulary:
    """Word pieces (from the pretrained model's WordPiece tokenizer) seen in the training texts.

    Ids: 0 = [PAD], 1 = [UNK] (a piece seen too rarely to be kept), 2 = [MASK], then the
    pieces from most to least frequent. No [CLS]/[SEP]: the small models pool by averaging.
    """

    tokenizer: object
    pieces: list[str]
    counts: list[int]
    index: dict[int, int] = field(repr=False)  # WordPiece id -> our id

    def __len__(self) -> int:
        return len(self.pieces)

    def __repr__(self) -> str:
        return f"PieceVocabulary({len(self):,} pieces, 3 special)"

    def encode(self, texts: Sequence[str], max_tokens: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
        """Texts -> (tokens (N, T), padding_mask (N, T)), at most ``max_tokens`` pieces each."""
        texts = _check_texts(texts)
        _check_count(max_tokens, "max_tokens")
        self.tokenizer.no_truncation()
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        rows = [[self.index.get(i, UNK_ID) for i in encoding.ids[:max_tokens]] or [UNK_ID] for encoding in encodings]
        T = max(len(row) for row in rows)
        tokens = torch.full((len(rows), T), PAD_ID, dtype=torch.long)
        for n, row in enumerate(rows):
            tokens[n, : len(row)] = torch.tensor(row)
        lengths = torch.tensor([len(row) for row in rows])
        return tokens, torch.arange(T)[None, :] < lengths[:, None]

    def decode(self, ids) -> list[str]:
        return [self.pieces[i] for i in torch.as_tensor(ids).tolist()]


def build_vocabulary(
    pretrained: PretrainedEncoder, texts: Sequence[str], min_count: int = 2, max_pieces: int | None = None
) -> PieceVocabulary:
    """The pieces of ``texts`` (tokenized by the pretrained model's WordPiece) seen at least ``min_count`` times.

    With ``max_pieces``, only that many of the most frequent ones (the rest become [UNK]).
    """
    texts = _check_texts(texts)
    _check_count(min_count, "min_count")
    if max_pieces is not None:
        _check_count(max_pieces, "max_pieces")
    tokenizer = pretrained.tokenizer
    tokenizer.no_truncation()
    counts = Counter(i for encoding in tokenizer.encode_batch(texts, add_special_tokens=False) for i in encoding.ids)
    kept = sorted((i for i, c in counts.items() if c >= min_count), key=lambda i: (-counts[i], i))[:max_pieces]
    pieces = list(SPECIAL_PIECES) + [tokenizer.id_to_token(i) for i in kept]
    kept_set = set(kept)
    frequencies = [0, sum(c for i, c in counts.items() if i not in kept_set), 0] + [counts[i] for i in kept]
    index = {i: n + len(SPECIAL_PIECES) for n, i in enumerate(kept)}
    return PieceVocabulary(tokenizer, pieces, frequencies, index)


# ---------------------------------------------------------------------------------
# Batches and a plain training loop (full control over seeds and what is timed)


def _batches(count: int, batch_size: int, generator: torch.Generator | None, lengths: torch.Tensor | None = None):
    """Index batches: shuffled with ``generator``, else in order.

    With ``lengths``, batches hold examples of similar length, so that little padding is
    computed: shuffled examples are sorted by length within pools of 32 batches, cut
    into batches, and the batches shuffled (without ``generator``: all sorted by length).
    """
    order = torch.randperm(count, generator=generator) if generator is not None else torch.arange(count)
    if lengths is None:
        for start in range(0, count, batch_size):
            yield order[start : start + batch_size]
        return
    pool = count if generator is None else 32 * batch_size
    batches = []
    for begin in range(0, count, pool):
        chunk = order[begin : begin + pool]
        chunk = chunk[torch.argsort(lengths[chunk], stable=True)]
        batches += [chunk[start : start + batch_size] for start in range(0, len(chunk), batch_size)]
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
    yield from batches


def _trim(tokens: torch.Tensor, padding_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop the columns that are padding in every row of the batch."""
    T = int(padding_mask.sum(dim=1).max())
    return tokens[:, :T], padding_mask[:, :T]


@dataclass
class TrainingRun:
    """What a training function did: the model, its loss per step, steps, examples seen, seconds."""

    model: nn.Module
    losses: list[float]
    steps: int
    examples_seen: int
    seconds: float
    tokens_seen: int = 0  # real (unpadded) tokens in the batches, for the language model


def _train_steps(model: nn.Module, optimizer, step_loss, steps: int, count: int, batch_size: int, generator, lengths):
    """Run ``steps`` optimizer steps over batches of ``count`` examples, passing over them as often as needed.

    ``step_loss(rows)`` returns the loss of the batch with those row indices. Returns the
    loss of every step and the seconds taken; the model is left in eval mode.
    """
    losses, start = [], time.perf_counter()
    model.train()
    while len(losses) < steps:
        for rows in _batches(count, batch_size, generator, lengths):
            loss = step_loss(rows)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) >= steps:
                break
    model.eval()
    return losses, time.perf_counter() - start


# ---------------------------------------------------------------------------------
# (a) A small encoder trained from scratch


def _padded_mean_loss(model: EncoderClassifier, tokens, padding_mask, labels):
    return F.cross_entropy(model(tokens, padding_mask), labels)


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
    **model_options,
) -> TrainingRun:
    """Train a small :class:`EncoderClassifier` (mean pooling) on labelled texts, all parameters from scratch.

    ``encoder`` (optional) replaces the randomly initialised encoder, e.g. by one
    pretrained with :func:`train_mlm`; it is copied, never changed.
    """
    texts = _check_texts(texts)
    labels = _check_labels(labels, len(texts))
    _check_count(epochs, "epochs")
    _check_count(batch_size, "batch_size")
    torch.manual_seed(seed)
    options = dict(d_model=64, num_heads=4, d_ff=128, num_layers=2, max_len=max_tokens, dropout=0.0)
    options.update(model_options)
    model = EncoderClassifier(len(vocabulary), 2, pooling="mean", **options)
    if encoder is not None:
        model.encoder = copy.deepcopy(encoder)
    tokens, padding_mask = vocabulary.encode(texts, max_tokens)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)

    def step_loss(rows):
        batch_tokens, batch_mask = _trim(tokens[rows], padding_mask[rows])
        return _padded_mean_loss(model, batch_tokens, batch_mask, labels[rows])

    steps = epochs * math.ceil(len(texts) / batch_size)  # every epoch is one pass over the texts
    losses, seconds = _train_steps(model, optimizer, step_loss, steps, len(texts), batch_size, generator, padding_mask.sum(dim=1))
    return TrainingRun(model, losses, len(losses), epochs * len(texts), seconds)


@torch.no_grad()
def classifier_accuracy(
    model: EncoderClassifier, vocabulary: PieceVocabulary, texts: Sequence[str], labels: torch.Tensor, max_tokens: int = 48
) -> float:
    """Accuracy of a small classifier (from :func:`train_from_scratch`) on labelled texts."""
    texts = _check_texts(texts)
    labels = _check_labels(labels, len(texts))
    model.eval()
    tokens, padding_mask = vocabulary.encode(texts, max_tokens)
    correct = 0
    for rows in _batches(len(texts), 256, None, padding_mask.sum(dim=1)):
        batch_tokens, batch_mask = _trim(tokens[rows], padding_mask[rows])
        correct += int((model(batch_tokens, batch_mask).argmax(-1) == labels[rows]).sum())
    return correct / len(texts)


# ---------------------------------------------------------------------------------
# Masked language modelling


def mask_tokens(
    tokens: torch.Tensor,
    padding_mask: torch.Tensor,
    generator: torch.Generator,
    mask_id: int = MASK_ID,
    vocab_size: int | None = None,
    rate: float = 0.15,
    first_id: int = len(SPECIAL_PIECES),
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's corruption: choose ``rate`` of the real tokens; of those, 80% become [MASK],
    10% a random piece, 10% stay. Returns (corrupted tokens, targets) with target -100
    (ignored by cross-entropy) at every position that was not chosen.
    """
    if not 0 < rate < 1:
        raise ValueError(f"rate must lie between 0 and 1, but {rate!r} was given")
    if padding_mask.shape != tokens.shape or padding_mask.dtype != torch.bool:
        raise ValueError(
            f"padding_mask must be a boolean tensor of the shape of tokens {describe_shape(tokens)}, "
            f"but has shape {describe_shape(padding_mask)} and dtype {padding_mask.dtype}"
        )
    draw = torch.rand(tokens.shape, generator=generator)
    chosen = (draw < rate) & padding_mask
    # Make sure every sequence predicts at least one token.
    none = ~chosen.any(dim=1)
    if none.any():
        first_real = padding_mask.float().argmax(dim=1)
        chosen[none, first_real[none]] = True
    action = torch.rand(tokens.shape, generator=generator)
    corrupted = tokens.clone()
    corrupted[chosen & (action < 0.8)] = mask_id
    if vocab_size is not None:
        swap = chosen & (action >= 0.8) & (action < 0.9)
        random_ids = torch.randint(first_id, vocab_size, tokens.shape, generator=generator)
        corrupted[swap] = random_ids[swap]
    targets = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return corrupted, targets


class MaskedLanguageModel(nn.Module):
    """An :class:`Encoder` plus a linear layer that predicts, at every position, which piece is there."""

    def __init__(self, vocab_size: int, **encoder_options):
        super().__init__()
        self.encoder = Encoder(vocab_size, **encoder_options)
        self.output = nn.Linear(self.encoder.d_model, vocab_size)

    def forward(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, chosen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits (batch, T, vocab); with a boolean ``chosen`` (batch, T), only at those positions: (n_chosen, vocab)."""
        hidden = self.encoder(tokens, padding_mask)  # (batch, T, d_model)
        if chosen is not None:
            hidden = hidden[chosen]  # (n_chosen, d_model): predicting only where needed saves most of the work
        return self.output(hidden)


def _mlm_loss(model, tokens, padding_mask, targets):
    chosen = targets != -100
    logits = model(tokens, padding_mask, chosen)  # (n_chosen, vocab)
    return F.cross_entropy(logits, targets[chosen])  # the loss counts the masked positions only


def train_mlm(
    vocabulary: PieceVocabulary,
    texts: Sequence[str],
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 2e-3,
    max_tokens: int = 48,
    seed: int = 0,
    **encoder_options,
) -> TrainingRun:
    """Pretrain a small encoder by masked language modelling on unlabelled ``texts``."""
    texts = _check_texts(texts)
    _check_count(steps, "steps")
    torch.manual_seed(seed)
    options = dict(d_model=64, num_heads=4, d_ff=128, num_layers=2, max_len=max_tokens, dropout=0.0)
    options.update(encoder_options)
    model = MaskedLanguageModel(len(vocabulary), **options)
    tokens, padding_mask = vocabulary.encode(texts, max_tokens)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    tokens_seen = []

    def step_loss(rows):
        batch_tokens, batch_mask = _trim(tokens[rows], padding_mask[rows])
        tokens_seen.append(int(batch_mask.sum()))
        corrupted, targets = mask_tokens(batch_tokens, batch_mask, generator, vocab_size=len(vocabulary))
        return _mlm_loss(model, corrupted, batch_mask, targets)

    losses, seconds = _train_steps(model, optimizer, step_loss, steps, len(texts), batch_size, generator, padding_mask.sum(dim=1))
    return TrainingRun(model, losses, len(losses), len(losses) * batch_size, seconds, sum(tokens_seen))


@torch.no_grad()
def masked_token_accuracy(
    model: MaskedLanguageModel | None, vocabulary: PieceVocabulary, texts: Sequence[str], seed: int = 1, max_tokens: int = 48
) -> float:
    """Top-1 accuracy at masked positions of ``texts`` (seeded masks). ``model=None``: always guess the commonest piece."""
    texts = _check_texts(texts)
    generator = torch.Generator().manual_seed(seed)
    commonest = 3 + int(torch.tensor(vocabulary.counts[3:]).argmax())
    correct = total = 0
    for rows in _batches(len(texts), 256, None):
        tokens, padding_mask = vocabulary.encode([texts[i] for i in rows], max_tokens)
        corrupted, targets = mask_tokens(tokens, padding_mask, generator)
        chosen = targets != -100
        if model is None:
            guesses = torch.full_like(targets, commonest)
        else:
            model.eval()
            guesses = torch.full_like(targets, -1)
            guesses[chosen] = model(corrupted, padding_mask, chosen).argmax(-1)
        correct += int((guesses[chosen] == targets[chosen]).sum())
        total += int(chosen.sum())
    return correct / total


@torch.no_grad()
def fill_mask(model: MaskedLanguageModel, vocabulary: PieceVocabulary, text: str, top: int = 5) -> list[tuple[str, float]]:
    """The ``top`` pieces the model puts where ``text`` says [MASK], with their probabilities."""
    if "[MASK]" not in text:
        raise ValueError(f"the text must contain [MASK] where a piece is to be guessed, but is {text!r}")
    before, after = text.split("[MASK]", 1)
    left = vocabulary.encode([before])[0][0] if before.strip() else torch.zeros(0, dtype=torch.long)
    right = vocabulary.encode([after])[0][0] if after.strip() else torch.zeros(0, dtype=torch.long)
    tokens = torch.cat([left, torch.tensor([MASK_ID]), right])[None, :]  # (1, T)
    model.eval()
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
    head_scores: dict[str, torch.Tensor] | None = None  # see head_pattern_scores, if measured
    even_spread: dict[str, float] | None = None  # the same scores for a head spreading its weight evenly

    def __len__(self) -> int:
        return self.pooled.shape[0]

    def layer(self, index: int = -1) -> torch.Tensor:
        """Frozen features of one layer: (N, d). 0 = the embedding output, -1 = the last layer."""
        return self.pooled[:, index]

    def take(self, n: int) -> "ReviewFeatures":
        """The features of the first ``n`` texts (as ``TextSplit.take``)."""
        _check_count(n, "n")
        if n > len(self):
            raise ValueError(f"n must be at most {len(self)} (the number of texts), but {n} was given")
        return self.rows(0, n)

    def rows(self, start: int, stop: int) -> "ReviewFeatures":
        """The features of texts ``start`` to ``stop - 1``."""
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start < stop <= len(self)):
            raise ValueError(f"need 0 <= start < stop <= {len(self)}, but start={start!r} and stop={stop!r}")
        part = slice(start, stop)
        return ReviewFeatures(self.pooled[part], self.states[part], self.padding_mask[part], self.split_layer, self.seconds)


@torch.no_grad()
def encode_reviews(
    model: PretrainedEncoder,
    texts: Sequence[str],
    max_tokens: int = 48,
    split_layer: int = 4,
    batch_size: int = 64,
    measure_heads: bool = False,
) -> ReviewFeatures:
    """Run the pretrained encoder once over ``texts`` (in batches of similar length).

    Keeps every layer's mean-pooled vector and the token vectors that enter the layers
    above ``split_layer`` (``hidden_states[split_layer]``), so that fine-tuning the top
    ``num_layers - split_layer`` layers starts from them. With ``measure_heads`` the same
    pass also measures what every head attends to (``head_scores``, as from
    :func:`head_pattern_scores`).
    """
    texts = _check_texts(texts)
    if not isinstance(split_layer, int) or not 0 <= split_layer <= model.num_layers:
        raise ValueError(f"split_layer must be from 0 to {model.num_layers}, but {split_layer!r} was given")
    start = time.perf_counter()
    model.eval()
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    pooled = torch.zeros(len(texts), model.num_layers + 1, model.d_model)
    states = torch.zeros(len(texts), max_tokens, model.d_model)
    padding = torch.zeros(len(texts), max_tokens, dtype=torch.bool)
    counter = HeadPatternCounter(model.num_layers, model.num_heads) if measure_heads else None
    for begin in range(0, len(order), batch_size):
        rows = order[begin : begin + batch_size]
        batch = model.encode([texts[i] for i in rows], max_tokens=max_tokens)
        hidden = model.hidden_states(batch.tokens, batch.padding_mask, batch.token_types)
        if counter is not None:
            counter.add(model.attention_weights(), batch.padding_mask, batch.labels)
        T = batch.tokens.shape[1]
        index = torch.tensor(rows)
        pooled[index] = torch.stack([mean_pool(h, batch.padding_mask) for h in hidden], dim=1).cpu()
        states[index, :T] = hidden[split_layer].cpu()
        padding[index, :T] = batch.padding_mask.cpu()
    T = int(padding.sum(dim=1).max())
    return ReviewFeatures(
        pooled,
        states[:, :T].contiguous(),
        padding[:, :T].contiguous(),
        split_layer,
        time.perf_counter() - start,
        counter.scores() if counter is not None else None,
        counter.even_spread() if counter is not None else None,
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
    return _check_labels(labels, features.shape[0])


def train_linear_probe(
    features: torch.Tensor, labels: torch.Tensor, steps: int = 200, lr: float = 0.05, weight_decay: float = 1e-3, seed: int = 0
) -> LinearProbe:
    """Logistic regression on frozen features: full-batch Adam on the cross-entropy, L2-regularised."""
    labels = _check_features(features, labels)
    _check_count(steps, "steps")
    torch.manual_seed(seed)
    features = features.detach().float()
    probe = LinearProbe(features.mean(0), features.std(0).clamp_min(1e-6), int(labels.max()) + 1 if len(labels) else 2)
    if probe.linear.out_features < 2:
        probe.linear = nn.Linear(features.shape[1], 2)
    optimizer = torch.optim.Adam(probe.parameters(), lr=lr)
    for _ in range(steps):
        loss = F.cross_entropy(probe(features), labels) + weight_decay * probe.linear.weight.pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return probe.eval()


@torch.no_grad()
def probe_accuracy(probe: nn.Module, features: torch.Tensor, labels: torch.Tensor) -> float:
    labels = _check_features(features, labels)
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
        layers = pretrained.encoder.layers[split_layer:]
        self.layers = nn.ModuleList(copy.deepcopy(layer) for layer in layers)
        self.layers.requires_grad_(True)
        self.head = nn.Linear(pretrained.d_model, num_classes)

    def forward(self, states: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
        mask = padding_mask[:, None, None, :]  # (batch, 1, 1, T)
        x = states
        for layer in self.layers:
            x = layer(x, mask)  # (batch, T, d)
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
) -> TrainingRun:
    """Fine-tune the layers above ``features.split_layer`` and a new linear head on labelled examples.

    The pretrained layers learn with a small rate (``lr``), the new head with a larger
    one (``head_lr``). Runs for ``steps`` mini-batches, cycling through the examples.
    """
    labels = _check_labels(labels, len(features))
    _check_count(steps, "steps")
    _check_count(batch_size, "batch_size")
    torch.manual_seed(seed)
    model = TopLayersClassifier(pretrained, features.split_layer).to(features.states.device)
    optimizer = torch.optim.AdamW(
        [{"params": model.layers.parameters(), "lr": lr}, {"params": model.head.parameters(), "lr": head_lr}],
        weight_decay=0.01,
    )
    generator = torch.Generator().manual_seed(seed)

    def step_loss(rows):
        states, padding_mask = _trim(features.states[rows], features.padding_mask[rows])
        return F.cross_entropy(model(states, padding_mask), labels[rows])

    lengths = features.padding_mask.sum(dim=1)
    losses, seconds = _train_steps(model, optimizer, step_loss, steps, len(labels), batch_size, generator, lengths)
    return TrainingRun(model, losses, len(losses), len(losses) * batch_size, seconds)


@torch.no_grad()
def fine_tuned_accuracy(model: TopLayersClassifier, features: ReviewFeatures, labels: torch.Tensor) -> float:
    labels = _check_labels(labels, len(features))
    model.eval()
    correct = 0
    for rows in _batches(len(labels), 128, None, features.padding_mask.sum(dim=1)):
        states, padding_mask = _trim(features.states[rows], features.padding_mask[rows])
        correct += int((model(states, padding_mask).argmax(-1) == labels[rows]).sum())
    return correct / len(labels)


# ---------------------------------------------------------------------------------
# What the pretrained heads do, measured


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
def head_pattern_scores(model: PretrainedEncoder, texts: Sequence[str], max_tokens: int = 48) -> dict[str, torch.Tensor]:
    """For every layer and head, the average weight a word piece gives to each pattern's keys.

    Averaged over the real word pieces of ``texts`` (not [CLS] or [SEP] as queries).
    Returns ``{pattern: (layers, heads) tensor}`` for :data:`HEAD_PATTERNS`.
    """
    texts = _check_texts(texts)
    counter = HeadPatternCounter(model.num_layers, model.num_heads)
    model.eval()
    for rows in _batches(len(texts), 64, None):
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


def plot_head_scores(scores: dict[str, torch.Tensor], patterns: Sequence[str] | None = None):
    """One (layers x heads) heatmap per pattern: how much weight each head gives to it."""
    patterns = list(patterns or scores)
    columns = min(3, len(patterns))
    rows = math.ceil(len(patterns) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.3 * columns, 2.5 * rows), layout="constrained", squeeze=False)
    for ax in axes.flat[len(patterns):]:
        ax.set_axis_off()
    for ax, pattern in zip(axes.flat, patterns):
        table = to_numpy(scores[pattern])
        image = ax.imshow(table, cmap=ATTENTION_CMAP, vmin=0, vmax=1, aspect="auto")
        ax.set_title(f"weight on {pattern}", fontsize=10)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(table.shape[1]))
        ax.set_yticks(range(table.shape[0]))
        ax.tick_params(labelsize=7)
    figure.colorbar(image, ax=list(axes.flat), fraction=0.02, pad=0.02, label="average attention weight")
    return figure


@torch.no_grad()
def plot_heads(model: PretrainedEncoder, text: str, heads: Sequence[tuple[str, int, int, float]]):
    """The weights of a few chosen heads on one sentence, side by side (rows = queries, columns = keys)."""
    tokens, labels = model.encode_sentence(text)
    model.eval()
    model(tokens)
    weights = model.attention_weights()
    figure, axes = plt.subplots(1, len(heads), figsize=(3.4 * len(heads), 3.9), layout="constrained", squeeze=False)
    for ax, (pattern, layer, head, score) in zip(axes[0], heads):
        matrix = to_numpy(weights[layer][0, head])
        image = ax.imshow(matrix, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
        ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
        ax.set_title(f"layer {layer}, head {head}\n{pattern}: {score:.2f} on average", fontsize=9)
        ax.set_xlabel("keys (attended to)", fontsize=8)
    axes[0][0].set_ylabel("queries (attending)", fontsize=8)
    figure.colorbar(image, ax=list(axes[0]), fraction=0.02, pad=0.02, label="attention weight")
    return figure


# ---------------------------------------------------------------------------------
# Contextual vectors


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
    model.eval()
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


def plot_contextual_similarity(similarity: dict[str, list[float]], word: str, ax=None):
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 3.2), layout="constrained")
    for (name, values), style in zip(similarity.items(), ("o-", "s--")):
        ax.plot(range(len(values)), values, style, label=f"{name} of {word!r}")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":", label="static embedding (always 1)")
    ax.set_xlabel("depth (layers applied; 0 = embedding output)")
    ax.set_ylabel("average cosine similarity")
    ax.set_title(f"How alike are two vectors of {word!r}?")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8, loc="lower left")
    return ax


# ---------------------------------------------------------------------------------
# The results


def plot_learning_curves(results: dict[str, dict[int, float]], baseline: float | None = None, ax=None):
    """Test accuracy against the number of labelled examples, one line per approach (log x axis)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6.2, 3.6), layout="constrained")
    markers = iter(("o", "s", "^", "D", "v"))
    for name, curve in results.items():
        sizes = sorted(curve)
        ax.plot(sizes, [curve[n] for n in sizes], marker=next(markers), label=name)
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=f"always 'fresh' ({baseline:.0%})")
    ax.set_xscale("log")
    all_sizes = sorted({n for curve in results.values() for n in curve})
    ax.set_xticks(all_sizes, [f"{n:,}" for n in all_sizes])
    ax.minorticks_off()
    ax.set_xlabel("labelled training examples")
    ax.set_ylabel("test accuracy")
    ax.set_title("Where pretraining pays off")
    ax.legend(fontsize=8)
    return ax


def format_results(results: dict[str, dict[int, float]], seconds: dict[str, dict[int, float]] | None = None) -> str:
    """A plain-text table: one row per approach, one column per number of labelled examples."""
    sizes = sorted({n for curve in results.values() for n in curve})
    width = max(len(name) for name in results) + 2
    header = "approach".ljust(width) + "".join(f"{n:>10,}" for n in sizes)
    lines = [header, "-" * len(header)]
    for name, curve in results.items():
        lines.append(name.ljust(width) + "".join(f"{curve[n]:>10.1%}" if n in curve else f"{'-':>10}" for n in sizes))
    return "\n".join(lines)
