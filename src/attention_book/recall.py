"""Chapter 2: a key-value store that a small attention model learns by itself.

The task (:class:`~attention_book.tasks.AssociativeRecall`) shows the model a few
key-value pairs and then asks for one key: ``a 3 c 7 e 1 ? c`` -> ``7``.

:class:`RecallModel` solves it with two attention layers, and each one has a job
that you can read off its attention map:

1. **Binding** (``pair_attention``, self-attention): every token may look at itself
   and the token just before it. A value token looks back at its key and copies
   the key into its own vector, so after this layer the value token at position
   ``2i + 1`` carries both "I belong to key k_i" and "my value is v_i".
2. **Lookup** (``lookup_attention``, cross-attention): only the last token (the
   asked key) asks; every token answers. Its query matches the value token that
   carries the asked key, and the value that comes back is read out as the answer.

Helpers to inspect the trained model (``attention_maps``, ``lookup_hit_rate``,
``plot_recall_attention``) live here too, so the chapter's cells stay short.
"""

from __future__ import annotations

import torch
from torch import nn

from .chapter01_helpers import format_vector  # re-exported: chapter 2 prints with it too
from .key_value import SingleHeadAttention
from .plotting import plot_attention
from .positional import LearnedPositionalEncoding
from .tasks import AssociativeRecall, Vocabulary

__all__ = [
    "previous_token_mask",
    "RecallModel",
    "attention_maps",
    "lookup_hit_rate",
    "plot_recall_attention",
    "plot_lookups",
    "format_vector",
]


def previous_token_mask(T: int, device: torch.device | str | None = None) -> torch.Tensor:
    """``(T, T)`` boolean mask, True where key j is the query's own position or the one before it.

    Row i may attend to columns ``i - 1`` and ``i`` (row 0 only to column 0).
    """
    if not isinstance(T, int) or isinstance(T, bool) or T < 1:
        raise ValueError(f"T must be a positive integer (a sequence length), but {T!r} was given")
    positions = torch.arange(T, device=device)
    offset = positions[:, None] - positions[None, :]  # (T, T): query position - key position
    return (offset == 0) | (offset == 1)


class RecallModel(nn.Module):
    """Embedding + learned positions, a binding layer, a lookup layer and a linear read-out.

    Args:
        vocab_size: number of token ids (``len(task.vocab)``).
        max_len: longest sequence the model will see (``2 * num_pairs + 2``).
        d_model: width of every vector (queries, keys and values too).
        look_back_only: if True (default), the binding layer may only look at the
            previous token and itself (:func:`previous_token_mask`). With False it is
            unrestricted self-attention: it still learns the task, but only after a long
            plateau (thousands of steps instead of tens).

    ``forward(tokens)``: tokens (batch, T) -> logits (batch, vocab_size), read out at the
    last position. After a forward pass, ``pair_attention.last_weights`` (batch, T, T)
    and ``lookup_attention.last_weights`` (batch, 1, T) hold the two attention maps.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int = 32, look_back_only: bool = True):
        super().__init__()
        self.max_len, self.look_back_only = max_len, look_back_only
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        self.positions = LearnedPositionalEncoding(max_len, d_model)
        self.pair_norm = nn.LayerNorm(d_model)
        self.pair_attention = SingleHeadAttention(d_model, d_k=d_model)  # layer 1: self-attention
        self.lookup_norm = nn.LayerNorm(d_model)
        self.lookup_attention = SingleHeadAttention(d_model, d_k=d_model)  # layer 2: the last token asks
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.is_floating_point():
            raise ValueError(
                f"tokens must be a (batch, T) tensor of token ids, but has shape {tuple(tokens.shape)} "
                f"and dtype {tokens.dtype}"
            )
        T = tokens.shape[1]
        x = self.positions(self.token_embedding(tokens))  # (batch, T, d_model)
        mask = previous_token_mask(T, tokens.device) if self.look_back_only else None
        bound, _ = self.pair_attention(self.pair_norm(x), mask=mask)  # (batch, T, d_model)
        x = x + bound  # residual: every token keeps its own identity and adds what it read
        context = self.lookup_norm(x)  # (batch, T, d_model)
        asked = context[:, -1:]  # (batch, 1, d_model): the last token, the key we ask for
        found, _ = self.lookup_attention(asked, context)  # (batch, 1, d_model)
        answer = x[:, -1] + found[:, 0]  # (batch, d_model)
        return self.readout(answer)  # (batch, vocab_size)


@torch.no_grad()
def attention_maps(model: RecallModel, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run ``model`` on ``tokens`` (batch, T); return (binding weights (batch, T, T), lookup weights (batch, T)).

    The weights come back on the CPU, ready to plot.
    """
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    model(tokens.to(device))
    model.train(was_training)
    binding = model.pair_attention.last_weights.cpu()  # (batch, T, T)
    lookup = model.lookup_attention.last_weights[:, 0].cpu()  # (batch, 1, T) -> (batch, T)
    return binding, lookup


def lookup_hit_rate(model: RecallModel, task: AssociativeRecall) -> float:
    """Fraction of the task's examples whose lookup puts its largest weight on the asked pair.

    The asked pair is the key token equal to the last token and the value token right after it.
    """
    tokens = task.tokens  # (N, T)
    _, lookup = attention_maps(model, tokens)  # (N, T)
    pairs = tokens[:, : 2 * task.num_pairs]  # (N, 2 pairs): k1 v1 k2 v2 ...
    key_position = (pairs[:, 0::2] == tokens[:, -1:]).float().argmax(dim=1) * 2  # (N,)
    top = lookup.argmax(dim=1)  # (N,)
    hits = (top == key_position) | (top == key_position + 1)
    return hits.float().mean().item()


def plot_recall_attention(model: RecallModel, tokens: torch.Tensor, vocab: Vocabulary, title: str | None = None):
    """Both attention maps of one example (tokens of shape (T,)): binding (T x T) and lookup (1 x T).

    Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    binding, lookup = attention_maps(model, tokens[None])
    labels = [vocab.tokens[i] for i in tokens.tolist()]
    figure, (top, bottom) = plt.subplots(
        2, 1, figsize=(6.4, 7.0), gridspec_kw={"height_ratios": [len(labels), 1.6]}, layout="constrained"
    )
    plot_attention(binding[0], labels, labels, ax=top, title="Layer 1 (binding): each token reads itself and the token before")
    plot_attention(
        lookup, [f"{labels[-1]} asks"], labels, ax=bottom, colorbar=False,
        title=f"Layer 2 (lookup): the asked key '{labels[-1]}' reads the store",
    )
    bottom.set_ylabel("query")
    if title:
        figure.suptitle(title)
    return figure


def plot_lookups(model: RecallModel, tokens: torch.Tensor, vocab: Vocabulary, title: str | None = None):
    """The lookup row (the last token's weights over all tokens) of several examples, one per panel.

    ``tokens``: (examples, T). Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    _, lookup = attention_maps(model, tokens)  # (examples, T)
    count = len(tokens)
    figure, axes = plt.subplots(count, 1, figsize=(6.4, 0.5 + 0.95 * count), layout="constrained", squeeze=False)
    for ax, row, weights in zip(axes[:, 0], tokens, lookup):
        labels = [vocab.tokens[i] for i in row.tolist()]
        plot_attention(weights, [f"{labels[-1]} asks"], labels, ax=ax, colorbar=False)
        ax.set_xlabel("")
        ax.set_ylabel("")
    axes[-1, 0].set_xlabel("keys: the tokens of each sequence")
    figure.supylabel("query: the asked key", fontsize=10)
    figure.colorbar(axes[0, 0].images[0], ax=axes[:, 0].tolist(), fraction=0.04, pad=0.02, label="attention weight")
    figure.suptitle(title or "Where the asked key looks, in held-out sequences")
    return figure
