"""Training or evaluation mode, switched for a block of code and always switched back.

Floor 0 (used by every floor): model code (:meth:`PretrainedEncoder.embed`), the training
loop and every measurement run a model in evaluation mode (no dropout) and must leave it
as they found it, even when the block raises. Chapters 2 to 7 use it through
``ab.evaluating``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import nn

__all__ = ["evaluating"]


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """``with evaluating(model): ...`` runs the block in ``model.eval()`` and restores the previous mode.

    The modes of all submodules are restored one by one, so a model that was partly in
    training mode (a frozen encoder under a trained head) comes back exactly as it was.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"evaluating() needs a torch.nn.Module, but a {type(model).__name__} was given")
    modes = [(module, module.training) for module in model.modules()]
    if any(training for _, training in modes):  # nested calls (a decoding loop inside a measurement) skip this
        model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            if module.training != training:
                module.training = training
