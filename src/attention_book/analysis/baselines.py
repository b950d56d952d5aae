"""Baselines a score is read against: the best a model blind to word order can do.

Chapter 5's word-order task is built so that this ceiling is exactly 50 %; exercise 5.x
asks the reader to compute it.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import torch

__all__ = ["best_invariant_accuracy"]


def best_invariant_accuracy(
    tokens: torch.Tensor, labels: torch.Tensor, padding_mask: torch.Tensor | None = None
) -> float:
    """The best accuracy a model that sees only the bag of tokens can reach on this labelled set.

    Sequences with the same multiset of tokens look identical to such a model, so it can
    at best give each multiset its most common label. ``tokens`` (N, T) ids, ``labels``
    (N,), ``padding_mask`` (N, T) True for real tokens (default: every token is real).
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2:
        raise ValueError(
            f"tokens must be a (N, T) tensor of ids, but {getattr(tokens, 'shape', type(tokens).__name__)} was given"
        )
    if not isinstance(labels, torch.Tensor) or labels.shape != tokens.shape[:1]:
        raise ValueError(f"labels must be a tensor of shape ({tokens.shape[0]},), one per sequence")
    if padding_mask is None:
        padding_mask = torch.ones_like(tokens, dtype=torch.bool)
    groups: dict[tuple, Counter] = defaultdict(Counter)
    for row, keep, label in zip(tokens.tolist(), padding_mask.tolist(), labels.tolist()):
        bag = tuple(sorted(token for token, real in zip(row, keep) if real))
        groups[bag][label] += 1
    return sum(max(counts.values()) for counts in groups.values()) / len(labels)
