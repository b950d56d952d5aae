"""Chapter 3: soft, hard and sparse attention.

Three ways to turn a row of scores into weights:

* ``hardmax``: all weight on the largest score (one-hot; its L0 norm is 1).
* ``softmax``: every score gets some weight (a distribution; its L1 norm is 1).
* ``sparsemax``: the Euclidean projection of the scores onto the probability
  simplex (Martins & Astudillo, 2016): sums to 1 like softmax, but gives exact
  zeros to low scores, and is still differentiable almost everywhere.

An inverse temperature ``beta`` multiplies the scores: beta -> 0 gives uniform
softmax weights, beta -> infinity gives the hardmax. ``entropy`` measures how spread
out a row of weights is, and ``top_k_weights`` keeps only the k largest scores.

Every function works along one dimension ``dim`` (default: the last, the keys) of a
tensor of any shape, e.g. scores of shape ``(batch, T_q, T_k)``.
"""

from __future__ import annotations

import torch

from ._validation import describe_shape, require_count, require_floating, require_tensor
from .attention import softmax

__all__ = ["hardmax", "sparsemax", "entropy", "top_k_weights"]


def _check_scores(scores: torch.Tensor, dim: int) -> None:
    require_tensor(scores, "scores")
    require_floating(scores, "scores")
    if scores.dim() == 0:
        raise ValueError("scores must have at least one dimension, but a scalar was given")
    if not -scores.dim() <= dim < scores.dim():
        raise ValueError(f"dim={dim} is out of range for scores of shape {describe_shape(scores)}")
    if scores.shape[dim] == 0:
        raise ValueError(
            f"scores must have at least one entry along dim={dim}, but have shape {describe_shape(scores)}"
        )


def hardmax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """One-hot weights on the largest score along ``dim``; tied maxima share it equally.

    Same shape as ``scores``. Sharing among ties makes it the limit of
    ``softmax(beta * scores)`` as beta -> infinity (``torch.argmax`` would instead pick
    the first of the tied maxima). Its derivative is zero almost everywhere, which is why
    hard attention cannot be trained by plain gradient descent; the result does not even
    require grad.
    """
    _check_scores(scores, dim)
    is_max = scores == scores.amax(dim=dim, keepdim=True)  # bool, same shape
    is_max = is_max.to(scores.dtype)
    return is_max / is_max.sum(dim=dim, keepdim=True)


def sparsemax(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sparsemax along ``dim``: weights that sum to 1 with exact zeros for low scores.

    Sort the scores z in decreasing order; the support size k is the largest k with
    ``1 + k z_(k) > sum_{j<=k} z_(j)``; the threshold is
    ``theta = (sum_{j<=k} z_(j) - 1) / k``; the weights are ``max(z - theta, 0)``. (The sparsemax
    paper calls the threshold tau; this book keeps tau for the temperature 1 / beta.)

    Differentiable almost everywhere (autograd follows the sort, the sum and the clamp).
    Entries equal to ``-inf`` (masked) get weight 0; a slice that is entirely ``-inf``
    gets all zeros, as in :func:`~attention_book.softmax`.
    """
    _check_scores(scores, dim)
    z = scores.movedim(dim, -1)  # (..., n)
    n = z.shape[-1]
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)  # (..., n)
    k = torch.arange(1, n + 1, device=z.device, dtype=z.dtype)  # (n,)
    cumulative = z_sorted.cumsum(dim=-1)  # (..., n)
    in_support = 1 + k * z_sorted > cumulative  # (..., n), True for a prefix
    support_size = in_support.sum(dim=-1, keepdim=True).clamp_min(1)  # (..., 1); 0 only for all -inf or nan
    theta = (cumulative.gather(-1, support_size - 1) - 1) / support_size.to(z.dtype)  # (..., 1)
    weights = torch.clamp(z - theta, min=0)  # (..., n)
    all_masked = torch.isneginf(z).all(dim=-1, keepdim=True)  # (..., 1)
    weights = weights.masked_fill(all_masked, 0.0)  # a row of -inf: zeros (theta is -inf there, z - theta nan)
    return weights.movedim(-1, dim)


def entropy(weights: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Shannon entropy in nats, ``-sum a log a`` with ``0 log 0 = 0``.

    0 for a one-hot row, ``log n`` for a uniform row over n entries; ``exp(entropy)``
    is the "effective number" of entries the weights are spread over. Shape: ``weights``
    with ``dim`` removed.
    """
    require_tensor(weights, "weights")
    require_floating(weights, "weights")
    if weights.dim() == 0:
        raise ValueError("weights must have at least one dimension, but a scalar was given")
    if not -weights.dim() <= dim < weights.dim():
        raise ValueError(f"dim={dim} is out of range for weights of shape {describe_shape(weights)}")
    terms = torch.where(weights > 0, weights * torch.log(weights.clamp_min(1e-30)), torch.zeros_like(weights))
    return 0.0 - terms.sum(dim=dim)  # rather than -sum: a one-hot row gives 0.0, not -0.0


def top_k_weights(scores: torch.Tensor, k: int, dim: int = -1) -> torch.Tensor:
    """Softmax over only the ``k`` largest scores along ``dim``; the rest get exactly 0.

    Scores tied with the k-th largest are all kept, so ``k=1`` gives :func:`hardmax`
    (ties share) and ``k=n`` gives the softmax. Gradients reach the kept scores only.
    """
    _check_scores(scores, dim)
    n = scores.shape[dim]
    require_count(k, "k", minimum=1, maximum=n)
    kth_largest = scores.topk(k, dim=dim).values.narrow(dim, k - 1, 1)  # (..., 1, ...)
    kept = scores >= kth_largest
    return softmax(scores.masked_fill(~kept, float("-inf")), dim=dim)
