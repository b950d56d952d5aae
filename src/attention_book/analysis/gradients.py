"""How much gradient reaches the bottom of a deep stack: post-norm against pre-norm (chapter 6)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .._validation import require_count
from ..transformer import Encoder

__all__ = ["gradient_at_bottom"]


def gradient_at_bottom(depth: int, norm_first: bool, seeds: Sequence[int] = (0, 1, 2), d_model: int = 32) -> float:
    """Norm of the loss's gradient with respect to the stack's input, at initialisation.

    A stack of ``depth`` encoder layers (post-norm or pre-norm) with a linear read-out
    predicts random targets from random tokens (batch 16, T = 16); the loss is
    cross-entropy. Returns the norm of d loss / d x, where x is the input of the first
    layer (after the embedding), averaged over ``seeds``.
    """
    require_count(depth, "depth")
    norms = []
    for seed in seeds:
        generator = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            stack = Encoder(
                20, d_model=d_model, num_heads=2, d_ff=2 * d_model, num_layers=depth, max_len=16, norm_first=norm_first
            )
            readout = nn.Linear(d_model, 20)
        tokens = torch.randint(3, 20, (16, 16), generator=generator)
        targets = torch.randint(3, 20, (16, 16), generator=generator)
        x = stack.embedding(tokens).detach().requires_grad_(True)  # (16, 16, d_model): input of layer 1
        hidden = stack.run_layers(x)  # every layer, and the final norm of a pre-norm stack
        loss = F.cross_entropy(readout(hidden).flatten(0, 1), targets.flatten())
        (gradient,) = torch.autograd.grad(loss, x)
        norms.append(gradient.norm().item())
    return float(np.mean(norms))
