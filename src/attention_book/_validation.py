"""Input checks shared by the reference implementation (floor 0: every module of chapters 1-7 uses them).

Every public function checks its inputs here, so that a wrong shape produces a
``ValueError`` that says what was expected and what was given, instead of a
traceback from deep inside a matrix multiplication.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def describe_shape(tensor: torch.Tensor) -> str:
    """``(2, 3, 4)``-style text for error messages."""
    return "(" + ", ".join(str(size) for size in tensor.shape) + ")"


def require_tensor(value: object, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, but a {type(value).__name__} was given")
    return value


def require_floating(tensor: torch.Tensor, name: str) -> None:
    if not tensor.is_floating_point():
        raise ValueError(
            f"{name} must hold floating-point numbers, but has dtype {tensor.dtype}; convert it with {name}.float()"
        )


def require_rank(tensor: torch.Tensor, name: str, minimum: int, layout: str) -> None:
    if tensor.dim() < minimum:
        raise ValueError(
            f"{name} must have at least {minimum} dimensions {layout}, but has shape {describe_shape(tensor)}"
        )


def require_exact_rank(tensor: torch.Tensor, name: str, rank: int, layout: str) -> None:
    if tensor.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions {layout}, but has shape {describe_shape(tensor)}")


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The shape that ``shapes`` broadcast to under PyTorch's rules, or None when they do not.

    The same answer as ``torch.broadcast_shapes`` without raising, and in plain Python:
    the check runs on every attention call, and torch's version costs about 0.1 ms there.
    """
    rank = max((len(shape) for shape in shapes), default=0)
    result = [1] * rank
    for shape in shapes:
        for axis, size in enumerate(shape, start=rank - len(shape)):
            if size != 1:
                if result[axis] not in (1, size):
                    return None
                result[axis] = size
    return tuple(result)


def require_positive(value: float, name: str) -> None:
    if not value > 0:
        raise ValueError(f"{name} must be positive, but {value!r} was given")


def check_mask(mask: torch.Tensor | None, target_shape: tuple[int, ...], layout: str) -> torch.Tensor | None:
    """Check a boolean attention mask (True = may attend) against a score shape."""
    if mask is None:
        return None
    require_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise ValueError(
            f"mask must be a boolean tensor (True = may attend), but has dtype {mask.dtype}; "
            "build one with causal_mask(T) or padding_mask(lengths, T), or compare, e.g. mask = m > 0"
        )
    if broadcast_shape(mask.shape, target_shape) != tuple(target_shape):
        raise ValueError(
            f"mask of shape {describe_shape(mask)} cannot be broadcast to the attention scores "
            f"of shape {tuple(target_shape)} {layout}"
        )
    return mask


def require_count(value: object, name: str, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer (not a bool) of at least ``minimum`` (and at most ``maximum``), or a ValueError naming it."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        if maximum is not None:
            kind = f"an integer from {minimum} to {maximum}"
        else:
            kind = {0: "a non-negative integer", 1: "a positive integer"}.get(
                minimum, f"an integer of at least {minimum}"
            )
        raise ValueError(f"{name} must be {kind}, but {value!r} was given")
    return value


def require_texts(texts: object, name: str = "texts") -> list[str]:
    """A non-empty list (or other sequence) of strings, returned as a list."""
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"{name} must be a list of strings, but a {type(texts).__name__} was given")
    if not texts:
        raise ValueError(f"{name} is empty")
    return list(texts)


def require_labels(labels: object, count: int, name: str = "labels") -> torch.Tensor:
    """A 1-D tensor of ``count`` integer class ids, returned as int64."""
    if not isinstance(labels, torch.Tensor) or labels.dim() != 1 or labels.is_floating_point():
        raise ValueError(f"{name} must be a 1-D tensor of integer class ids, but got {labels!r:.80}")
    if len(labels) != count:
        raise ValueError(f"there are {count} examples but {len(labels)} {name}")
    return labels.long()


def require_padding_mask(
    padding_mask: object,
    shape: Sequence[int],
    like: str,
    name: str = "padding_mask",
    meaning: str = "True = real token",
) -> torch.Tensor:
    """A boolean mask of exactly ``shape``; ``like`` names what it must match, ``meaning`` what True says."""
    require_tensor(padding_mask, name)
    if padding_mask.dtype != torch.bool or tuple(padding_mask.shape) != tuple(shape):
        raise ValueError(
            f"{name} must be a boolean tensor shaped like {like} {tuple(shape)} ({meaning}), "
            f"but has shape {describe_shape(padding_mask)} and dtype {padding_mask.dtype}"
        )
    return padding_mask


def require_split_options(seed: object, validation: object, test: object) -> None:
    """A data set's seeded split: an integer seed and two fractions that leave a training split (chapter 7)."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise ValueError(f"seed must be an integer, but {seed!r} was given")
    for name, fraction in (("validation", validation), ("test", test)):
        if not isinstance(fraction, (int, float)) or isinstance(fraction, bool) or not 0 < fraction < 1:
            raise ValueError(f"{name} must be a fraction between 0 and 1, but {fraction!r} was given")
    if validation + test >= 1:
        raise ValueError(f"validation + test must leave something to train on, but they add up to {validation + test}")
