"""A small training loop for the book's models, with a progress bar and a history.

The loop knows nothing about tasks: a *loss function* ``loss_fn(model, batch) ->
scalar tensor`` and a *metric* ``metric_fn(model, batch) -> (correct, total)`` say
what to compute. Ready-made ones for the synthetic tasks are below.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from .tasks import BOS, EOS, PAD
from .transformer import greedy_decode

__all__ = [
    "set_seed",
    "History",
    "fit",
    "evaluate",
    "move_batch",
    "seq2seq_loss",
    "seq2seq_exact_match",
    "classification_loss",
    "classification_accuracy",
]

LossFn = Callable[[nn.Module, dict], torch.Tensor]
MetricFn = Callable[[nn.Module, dict], tuple[int, int]]


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) so that runs repeat exactly."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class History:
    """What ``fit`` saw: the loss of every step and the validation metric after each epoch."""

    step_loss: list[float] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    valid_metric: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0
    learning_rate: list[float] = field(default_factory=list)

    def plot(self, ax=None, title: str = "Training"):
        """Loss per step (left axis) and validation metric per epoch (right axis, if any)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot(range(1, len(self.step_loss) + 1), self.step_loss, color="#1f77b4", label="training loss")
        ax.set_xlabel("step")
        ax.set_ylabel("loss (cross-entropy)")
        ax.set_yscale("log")
        ax.set_title(title)
        if self.valid_metric:
            steps_per_epoch = max(1, self.steps // max(1, len(self.valid_metric)))
            right = ax.twinx()
            right.plot(
                [steps_per_epoch * (e + 1) for e in range(len(self.valid_metric))],
                self.valid_metric,
                "o-",
                color="#ff7f0e",
                label="validation metric",
            )
            right.set_ylabel("validation metric")
            right.set_ylim(0, 1.02)
        ax.figure.tight_layout()
        return ax


def move_batch(batch: dict, device: torch.device | str) -> dict:
    return {name: value.to(device) for name, value in batch.items()}


def fit(
    model: nn.Module,
    train_loader: Iterable[dict],
    loss_fn: LossFn,
    epochs: int = 1,
    lr: float = 1e-3,
    valid_loader: Iterable[dict] | None = None,
    metric_fn: MetricFn | None = None,
    device: torch.device | str | None = None,
    max_steps: int | None = None,
    target: float | None = None,
    progress: bool = True,
    weight_decay: float = 0.0,
    clip_norm: float | None = 1.0,
    description: str = "training",
    schedule: str | None = None,
    warmup_fraction: float = 0.1,
) -> History:
    """Train ``model`` with Adam; returns a :class:`History`.

    Stops after ``epochs`` epochs, after ``max_steps`` steps, or as soon as the
    validation metric reaches ``target`` (checked after each epoch).

    ``schedule=None`` keeps the learning rate at ``lr``. ``schedule="linear"`` warms it up
    from 0 to ``lr`` over the first ``warmup_fraction`` of the planned steps (``epochs``
    times the batches per epoch, or ``max_steps`` if fewer), then lowers it linearly to 0
    at the last planned step, the recipe of the original Transformer in simpler form. The
    rate of every step is kept in ``History.learning_rate``.
    """
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, but {epochs!r} was given")
    if (target is not None or valid_loader is not None) and (valid_loader is None or metric_fn is None):
        raise ValueError("a validation target needs both valid_loader and metric_fn")
    if schedule not in (None, "linear"):
        raise ValueError(f"schedule must be None or 'linear', but {schedule!r} was given")
    if not 0.0 <= warmup_fraction < 1.0:
        raise ValueError(f"warmup_fraction must lie in [0, 1), but {warmup_fraction!r} was given")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    history = History()
    start = time.perf_counter()
    total = epochs * len(train_loader) if hasattr(train_loader, "__len__") else None
    if max_steps is not None and total is not None:
        total = min(total, max_steps)
    planned = total if total is not None else max_steps
    if schedule is not None and not planned:
        raise ValueError("a learning-rate schedule needs to know the number of steps: give max_steps or a loader with a length")
    rate = _schedule(schedule, planned or 0, warmup_fraction)
    bar = tqdm(total=total, desc=description, disable=not progress, leave=True)
    done = False
    for epoch in range(epochs):
        model.train()
        for batch in train_loader:
            batch = move_batch(batch, device)
            for group in optimizer.param_groups:
                group["lr"] = lr * rate(history.steps)
            history.learning_rate.append(optimizer.param_groups[0]["lr"])
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            if clip_norm is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            optimizer.step()
            history.step_loss.append(loss.item())
            history.steps += 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if max_steps is not None and history.steps >= max_steps:
                done = True
                break
        if valid_loader is not None:
            score = evaluate(model, valid_loader, metric_fn, device)
            history.epoch.append(epoch + 1)
            history.valid_metric.append(score)
            bar.set_postfix(loss=f"{history.step_loss[-1]:.3f}", valid=f"{score:.3f}")
            if target is not None and score >= target:
                done = True
        if done:
            break
    bar.close()
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def _schedule(name: str | None, planned: int, warmup_fraction: float) -> Callable[[int], float]:
    """The factor (0 to 1) by which ``lr`` is multiplied at a step (counted from 0)."""
    if name is None:
        return lambda step: 1.0
    warmup = max(1, round(warmup_fraction * planned)) if warmup_fraction > 0 else 0

    def linear(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (planned - step) / max(1, planned - warmup))

    return linear


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable[dict], metric_fn: MetricFn, device: torch.device | str | None = None) -> float:
    """The fraction ``sum(correct) / sum(total)`` of ``metric_fn`` over ``loader``."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = total = 0
    for batch in loader:
        right, count = metric_fn(model, move_batch(batch, device))
        correct += int(right)
        total += int(count)
    model.train(was_training)
    if total == 0:
        raise ValueError("the evaluation loader produced no examples")
    return correct / total


def seq2seq_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Teacher-forced cross-entropy of an :class:`EncoderDecoder` on a SequenceTask batch."""
    logits = model(batch["source"], batch["target_in"], batch["source_padding"], batch["target_padding"])
    # (batch, T_out, vocab) -> (batch * T_out, vocab) against (batch * T_out,)
    return F.cross_entropy(logits.flatten(0, 1), batch["target_out"].flatten(), ignore_index=PAD)


def seq2seq_exact_match(model: nn.Module, batch: dict) -> tuple[int, int]:
    """Sequences whose greedy decoding (up to and including EOS) equals the answer exactly."""
    target = batch["target_out"]  # (batch, max_len + 1): answer, EOS, PAD...
    generated = greedy_decode(model, batch["source"], target.shape[1], bos=BOS, eos=EOS, source_padding=batch["source_padding"])
    width = generated.shape[1]
    padded = torch.full_like(target, EOS)
    padded[:, :width] = generated
    real = target != PAD  # compare up to and including EOS
    correct = ((padded == target) | ~real).all(dim=1)
    return int(correct.sum()), len(target)


def classification_loss(model: nn.Module, batch: dict) -> torch.Tensor:
    """Cross-entropy of a model mapping ``batch["tokens"]`` to logits against ``batch["label"]``."""
    return F.cross_entropy(model(batch["tokens"]), batch["label"])


def classification_accuracy(model: nn.Module, batch: dict) -> tuple[int, int]:
    predictions = model(batch["tokens"]).argmax(dim=-1)
    return int((predictions == batch["label"]).sum()), len(predictions)
