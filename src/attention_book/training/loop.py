"""The book's one training loop, with a progress bar and one record of what it did.

The loop knows nothing about tasks: a *loss function* ``loss_fn(model, batch) ->
scalar tensor`` and a *metric* ``metric_fn(model, batch) -> (correct, total)`` say
what to compute (ready-made ones: :mod:`attention_book.training.losses`). Every model
the book trains goes through :func:`fit`: chapters 2 and 4-6 with a ``DataLoader`` and
Adam, chapter 7's recipes (:mod:`attention_book.training.transfer`) with length-sorted
batches and their own AdamW.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .._validation import require_count
from ..modes import evaluating

__all__ = [
    "set_seed",
    "History",
    "fit",
    "evaluate",
    "move_batch",
    "evaluating",
]

LossFn = Callable[[nn.Module, dict], torch.Tensor]
MetricFn = Callable[[nn.Module, dict], tuple[int, int]]
StepHook = Callable[[int, dict, float], None]


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices) so that runs repeat exactly."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class History:
    """What ``fit`` did: the loss, learning rate and gradient norm (before clipping) of every
    step, the validation metric after each epoch, how many steps, examples and (where the
    batches have a padding mask) real tokens it trained on, and how long it took."""

    step_loss: list[float] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    valid_metric: list[float] = field(default_factory=list)
    seconds: float = 0.0
    steps: int = 0
    learning_rate: list[float] = field(default_factory=list)
    examples_seen: int = 0
    tokens_seen: int = 0
    stopped: str = ""  # why training ended: target reached, step limit or all epochs
    gradient_norm: list[float] = field(default_factory=list)  # of all parameters together, before clipping

    def plot(
        self, ax=None, title: str = "Training", metric: str = "validation metric", legend_loc: str = "center right"
    ):
        """Loss per step (left axis) and validation metric per epoch (right axis, if any, named ``metric``),
        with a legend naming both, placed at ``legend_loc`` (matplotlib's ``loc``)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(5.6, 3.2))
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
                label=metric,
            )
            right.set_ylabel(metric)
            right.set_ylim(0, 1.02)
            lines = ax.get_lines() + right.get_lines()
            right.legend(lines, [line.get_label() for line in lines], loc=legend_loc, fontsize=9)
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
    optimizer: torch.optim.Optimizer | None = None,
    on_step: StepHook | None = None,
) -> History:
    """Train ``model``; returns a :class:`History`.

    Each step: move the batch to the device, compute ``loss_fn(model, batch)``, zero the
    gradients, backpropagate, clip the gradient norm to ``clip_norm`` (None: no clipping),
    take an optimizer step, then call ``on_step(step, batch, loss)`` if given. Stops after
    ``epochs`` passes over ``train_loader``, after ``max_steps`` steps, or as soon as the
    validation metric reaches ``target`` (checked after each epoch). The model is left in
    evaluation mode.

    What it does unless told otherwise (every default, named):

    - **optimizer**: ``torch.optim.Adam`` with ``lr=1e-3``, ``weight_decay=0`` and PyTorch's
      defaults ``betas=(0.9, 0.999)``, ``eps=1e-8`` (the 2017 Transformer used
      ``betas=(0.9, 0.98)``, ``eps=1e-9``). Pass ``optimizer`` to use another (e.g. AdamW with
      one learning rate per parameter group); then ``lr`` and ``weight_decay`` must stay at
      their defaults, and the rates set in it are used.
    - **gradient clipping**: on, at ``clip_norm=1.0``: when the norm of all gradients taken
      together (one vector of every parameter's gradient) exceeds 1, every gradient is scaled
      down by the same factor so that the norm is 1 (``torch.nn.utils.clip_grad_norm_``). The
      norm before clipping is kept for every step in ``History.gradient_norm``.
    - **schedule**: none (``schedule=None``): the learning rate stays constant.
      ``schedule="linear"`` warms it up linearly from 0 over the first ``warmup_fraction``
      (default 0.1) of the planned steps (``epochs`` times the batches per epoch, or
      ``max_steps`` if fewer), then lowers it linearly to 0 at the last planned step. This is
      *not* the 2017 Transformer's schedule, which warms up linearly and then decays as the
      inverse square root of the step. The rate of every step (of the first parameter group)
      is kept in ``History.learning_rate``.
    - **early stopping**: none (``target=None``). With ``valid_loader`` and ``metric_fn``
      the metric is measured on the validation data after every epoch (kept in
      ``History.valid_metric``); with ``target`` as well, training stops after the first
      epoch whose validation metric reaches it. The test data never enter ``fit``.
    - **regularisation**: none of its own; dropout is whatever the model was built with.
    - **device**: the device of the model's first parameter, unless ``device`` is given.
    - **progress**: a tqdm progress bar with the running loss (``progress=False`` hides it).
    """
    _check_stopping(epochs=epochs, max_steps=max_steps, target=target, valid_loader=valid_loader, metric_fn=metric_fn)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    optimizer = _optimizer(model.to(device), optimizer, lr=lr, weight_decay=weight_decay)
    base_rates = [group["lr"] for group in optimizer.param_groups]
    history = History()
    start = time.perf_counter()
    total, planned = _planned_steps(train_loader, epochs, max_steps)
    rate = _schedule(schedule, planned, warmup_fraction)
    bar = tqdm(total=total, desc=description, disable=not progress, leave=True)
    for epoch in range(epochs):
        model.train()
        for batch in train_loader:
            batch = move_batch(batch, device)
            for group, base in zip(optimizer.param_groups, base_rates):
                group["lr"] = base * rate(history.steps)
            value = _train_step(model, batch, loss_fn, optimizer=optimizer, clip_norm=clip_norm, history=history)
            if on_step is not None:
                on_step(history.steps, batch, value)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.3f}")
            if max_steps is not None and history.steps >= max_steps:
                history.stopped = f"{history.steps} steps done"
                break
        if valid_loader is not None:
            score = _validate(
                model, valid_loader, metric_fn, device=device, epoch=epoch, target=target, history=history
            )
            bar.set_postfix(loss=f"{history.step_loss[-1]:.3f}", valid=f"{score:.3f}")
        if history.stopped:
            break
    history.stopped = history.stopped or f"{epochs} epochs done"
    _finish(bar, history.stopped)
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def _check_stopping(*, epochs: int, max_steps: int | None, target, valid_loader, metric_fn) -> None:
    """Refuse stopping rules of :func:`fit` that cannot mean what was meant."""
    require_count(epochs, "epochs")
    if max_steps is not None:
        require_count(max_steps, "max_steps")
    if (target is not None or valid_loader is not None) and (valid_loader is None or metric_fn is None):
        raise ValueError("a validation target needs both valid_loader and metric_fn")


def _planned_steps(train_loader, epochs: int, max_steps: int | None) -> tuple[int | None, int | None]:
    """(the progress bar's total, the steps a schedule plans for); None where the loader has no length."""
    total = epochs * len(train_loader) if hasattr(train_loader, "__len__") else None
    if max_steps is not None and total is not None:
        total = min(total, max_steps)
    return total, total if total is not None else max_steps


def _optimizer(model: nn.Module, optimizer, *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """The optimizer given to :func:`fit`, or its own Adam with ``lr`` and ``weight_decay``; never both."""
    if optimizer is not None and (lr != 1e-3 or weight_decay != 0.0):
        raise ValueError("give either an optimizer or lr/weight_decay for fit's own Adam, not both")
    if optimizer is not None:
        return optimizer
    # foreach: one call updates every tensor (the same arithmetic as the loop over tensors, faster on CPU)
    return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay, foreach=True)


def _train_step(model: nn.Module, batch: dict, loss_fn, *, optimizer, clip_norm, history: History) -> float:
    """One optimizer step on ``batch``, recorded in ``history``; returns the loss."""
    history.learning_rate.append(optimizer.param_groups[0]["lr"])
    loss = loss_fn(model, batch)
    optimizer.zero_grad()
    loss.backward()
    parameters = [p for p in model.parameters() if p.grad is not None]
    if clip_norm is not None:
        norm = nn.utils.clip_grad_norm_(parameters, clip_norm)  # the norm before clipping
    else:
        norm = nn.utils.get_total_norm([p.grad for p in parameters])
    history.gradient_norm.append(float(norm))
    optimizer.step()
    value = loss.item()
    history.step_loss.append(value)
    history.steps += 1
    history.examples_seen += len(next(iter(batch.values())))
    if "padding_mask" in batch:
        history.tokens_seen += int(batch["padding_mask"].sum())
    return value


def _validate(model: nn.Module, valid_loader, metric_fn, *, device, epoch: int, target, history: History) -> float:
    """Measure the validation metric after ``epoch`` (counted from 0); say so if it reached ``target``."""
    score = evaluate(model, valid_loader, metric_fn, device=device)
    history.epoch.append(epoch + 1)
    history.valid_metric.append(score)
    if target is not None and score >= target:
        history.stopped = f"target reached: validation {score:.3f} >= {target} after epoch {epoch + 1}"
    return score


def _finish(bar, reason: str) -> None:
    """Close the progress bar as finished, saying why training stopped.

    A bar closed before its planned total (early stopping, a step limit) would otherwise
    be drawn in red, as if training had crashed: its total is set to the steps done.
    """
    if bar.disable:
        return
    if bar.total and bar.n < bar.total:
        bar.total = bar.n
        # The notebook's bar is an HBox of (label, progress widget, text); its ``pbar`` attribute is a
        # proxy of the tqdm object itself, not of the widget, so the widget is found among the children.
        children = getattr(getattr(bar, "container", None), "children", ())
        for widget in children:
            if hasattr(widget, "max") and hasattr(widget, "bar_style"):
                widget.max = max(bar.n, 1)
    bar.set_description_str(f"{bar.desc.rstrip(': ')} ({reason})", refresh=False)
    bar.refresh()
    bar.close()


def _schedule(name: str | None, planned: int | None, warmup_fraction: float) -> Callable[[int], float]:
    """The factor (0 to 1) by which ``lr`` is multiplied at a step (counted from 0)."""
    if name not in (None, "linear"):
        raise ValueError(f"schedule must be None or 'linear', but {name!r} was given")
    if not 0.0 <= warmup_fraction < 1.0:
        raise ValueError(f"warmup_fraction must lie in [0, 1), but {warmup_fraction!r} was given")
    if name is None:
        return lambda step: 1.0
    if not planned:
        raise ValueError(
            "a learning-rate schedule needs to know the number of steps: give max_steps or a loader with a length"
        )
    warmup = max(1, round(warmup_fraction * planned)) if warmup_fraction > 0 else 0

    def linear(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (planned - step) / max(1, planned - warmup))

    return linear


@torch.no_grad()
def evaluate(
    model: nn.Module, loader: Iterable[dict], metric_fn: MetricFn, device: torch.device | str | None = None
) -> float:
    """The fraction ``sum(correct) / sum(total)`` of ``metric_fn`` over ``loader``."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    correct = total = 0
    with evaluating(model):
        for batch in loader:
            right, count = metric_fn(model, move_batch(batch, device))
            correct += int(right)
            total += int(count)
    if total == 0:
        raise ValueError("the evaluation loader produced no examples")
    return correct / total
