"""Input checks shared by the reference implementation.

Every public function checks its inputs here, so that a wrong shape produces a
``ValueError`` that says what was expected and what was given, instead of a
traceback from deep inside a matrix multiplication.
"""

from __future__ import annotations

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
            f"{name} must hold floating-point numbers, but has dtype {tensor.dtype}; "
            f"convert it with {name}.float()"
        )


def require_rank(tensor: torch.Tensor, name: str, minimum: int, layout: str) -> None:
    if tensor.dim() < minimum:
        raise ValueError(
            f"{name} must have at least {minimum} dimensions {layout}, "
            f"but has shape {describe_shape(tensor)}"
        )


def require_exact_rank(tensor: torch.Tensor, name: str, rank: int, layout: str) -> None:
    if tensor.dim() != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {layout}, but has shape {describe_shape(tensor)}"
        )


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
    try:
        broadcast = torch.broadcast_shapes(mask.shape, target_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(target_shape):
        raise ValueError(
            f"mask of shape {describe_shape(mask)} cannot be broadcast to the attention scores "
            f"of shape {tuple(target_shape)} {layout}"
        )
    return mask
