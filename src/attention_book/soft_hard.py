"""Chapter 3: soft, hard and sparse attention.

Three ways to turn a row of scores into weights:

* ``hardmax``: all weight on the largest score (one-hot; its L0 norm is 1).
* ``softmax``: every score gets some weight (a distribution; its L1 norm is 1).
* ``sparsemax``: the Euclidean projection of the scores onto the probability
  simplex (Martins & Astudillo, 2016): sums to 1 like softmax, but gives exact
  zeros to low scores, and is still differentiable almost everywhere.

An inverse temperature ``beta`` multiplies the scores: beta -> 0 gives uniform
softmax weights, beta -> infinity gives the hardmax.
"""

from __future__ import annotations

import torch

from ._validation import describe_shape, require_floating, require_tensor
from .attention import softmax

__all__ = ["hardmax", "sparsemax", "entropy", "top_k_weights"]


def _check_scores(scores: torch.Tensor, dim: int) -> None:
    require_tensor(scores, "scores")
    require_floating(scores, "scores")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension, but a scalar was given")
    if not -scores.dim() <= dim < scores.dim():
        raise ValueError(f"dim={dim} is out of range for scores of shape {describe_shape(scores)}")


def hardmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """One-hot weights on the largest score along ``dim``; tied maxima share it equally.

    Same shape as ``scores``. Its gradient is zero almost everywhere, which is why
    hard attention cannot be trained by plain gradient descent.
    """
    _check_scores(scores, dim)
    is_max = scores == scores.amax(dim=dim, keepdim=True)  # bool, same shape
    is_max = is_max.to(scores.dtype)
    return is_max / is_max.sum(dim=dim, keepdim=True)


def sparsemax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax along ``dim``: weights that sum to 1 with exact zeros for low scores.

    Sort the scores z in decreasing order; the support size k is the largest k with
    ``1 + k z_(k) > sum_{j<=k} z_(j)``; the threshold is
    ``tau = (sum_{j<=k} z_(j) - 1) / k``; the weights are ``max(z - tau, 0)``.
    """
    _check_scores(scores, dim)
    z = scores.movedim(dim, -1)  # (..., n)
    n = z.shape[-1]
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)  # (..., n)
    k = torch.arange(1, n + 1, device=z.device, dtype=z.dtype)  # (n,)
    cumulative = z_sorted.cumsum(dim=-1)  # (..., n)
    in_support = 1 + k * z_sorted > cumulative  # (..., n), True for a prefix
    support_size = in_support.sum(dim=-1, keepdim=True)  # (..., 1), at least 1
    tau = (cumulative.gather(-1, support_size - 1) - 1) / support_size.to(z.dtype)  # (..., 1)
    weights = torch.clamp(z - tau, min=0)  # (..., n)
    return weights.movedim(-1, dim)


def entropy(weights: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats, ``-sum a log a`` with ``0 log 0 = 0``.

    0 for a one-hot row, ``log n`` for a uniform row over n entries.
    """
    require_tensor(weights, "weights")
    require_floating(weights, "weights")
    terms = torch.where(weights > 0, weights * torch.log(weights.clamp_min(1e-30)), torch.zeros_like(weights))
    return -terms.sum(dim=dim)


def top_k_weights(scores: torch.Tensor, k: int, dim: int = -1) -> torch.Tensor:
    """Softmax over only the ``k`` largest scores along ``dim``; the rest get exactly 0."""
    _check_scores(scores, dim)
    n = scores.shape[dim]
    if not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k must be an integer between 1 and {n} (the number of scores), but {k!r} was given")
    kth_largest = scores.topk(k, dim=dim).values.narrow(dim, k - 1, 1)  # (..., 1, ...)
    kept = scores >= kth_largest
    return softmax(scores.masked_fill(~kept, float("-inf")), dim=dim)
