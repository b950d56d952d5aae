"""Chapters 4-7: the Transformer's layers, the residual block, the MLP and the loop over layers.

Floor 1 (model code). Layer and parameter names follow ``torch.nn.TransformerEncoderLayer``
and ``torch.nn.TransformerDecoderLayer`` (``self_attn``, ``linear1``, ``linear2``,
``norm1``...), so ``from_torch`` is a copy of weights and a test can prove the two compute
the same function. :func:`run_stack` is the book's one loop over a stack of layers.
Everything is batch first. The stacks and models built from these layers are in
:mod:`attention_book.transformer`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validation import require_exact_rank, require_padding_mask, require_tensor
from .attention import causal_mask
from .multihead import MultiHeadAttention

__all__ = ["residual", "FeedForward", "EncoderLayer", "DecoderLayer", "run_stack", "key_padding_mask"]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(name: str):
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, but {name!r} was given")
    return _ACTIVATIONS[name]


def residual(x: torch.Tensor, sublayer, *, norm: nn.LayerNorm, dropout: nn.Dropout, norm_first: bool) -> torch.Tensor:
    """One sublayer wrapped in a residual connection and a layer norm: the only place pre- and post-norm differ.

    Post-norm (the original Transformer, BERT): ``norm(x + dropout(sublayer(x)))``.
    Pre-norm (GPT-2 and most models since): ``x + dropout(sublayer(norm(x)))``.
    """
    if norm_first:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class FeedForward(nn.Module):
    """The position-wise MLP ``linear2(activation(linear1(x)))``, applied to every token alike.

    (batch, T, d_model) -> (batch, T, d_ff) -> (batch, T, d_model).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation_name = activation
        self.activation = _activation(activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


def _torch_activation_name(layer: nn.Module) -> str:
    flag = getattr(layer, "activation_relu_or_gelu", 0)
    if flag == 1 or layer.activation is F.relu or isinstance(layer.activation, nn.ReLU):
        return "relu"
    if flag == 2 or layer.activation is F.gelu or isinstance(layer.activation, nn.GELU):
        return "gelu"
    raise ValueError("only relu and gelu activations can be converted from PyTorch layers")


def _copy_linear(target: nn.Linear, source: nn.Linear) -> None:
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)


def _copy_norm(target: nn.LayerNorm, source: nn.LayerNorm) -> None:
    target.weight.copy_(source.weight)
    target.bias.copy_(source.bias)
    target.eps = source.eps


class _Layer(nn.Module):
    """What the encoder and decoder layers share: attention, feed-forward, one norm and dropout per sublayer.

    Modules are created in the order PyTorch's layers create theirs (self-attention,
    cross-attention if any, feed-forward, norms, dropouts), so the parameters come in
    PyTorch's order and a seed gives the same initial weights.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        cross_attention: bool = False,
    ):
        super().__init__()
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        # One norm and one dropout per sublayer: self-attention, (cross-attention,) feed-forward.
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        if cross_attention:
            self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        if cross_attention:
            self.dropout3 = nn.Dropout(dropout)


def _layer_from_torch(cls, layer: nn.Module, expected: type) -> nn.Module:
    """``cls`` (our EncoderLayer or DecoderLayer) built with ``layer``'s sizes and settings, and its weights copied."""
    if not isinstance(layer, expected):
        raise ValueError(f"expected a torch.nn.{expected.__name__}, but a {type(layer).__name__} was given")
    ours = cls(
        d_model=layer.self_attn.embed_dim,
        num_heads=layer.self_attn.num_heads,
        d_ff=layer.linear1.out_features,
        dropout=layer.dropout.p,
        norm_first=layer.norm_first,
        activation=_torch_activation_name(layer),
    )
    with torch.no_grad():
        ours.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        _copy_linear(ours.feed_forward.linear1, layer.linear1)
        _copy_linear(ours.feed_forward.linear2, layer.linear2)
        _copy_norm(ours.norm1, layer.norm1)
        _copy_norm(ours.norm2, layer.norm2)
        if hasattr(ours, "cross_attn"):
            ours.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
            _copy_norm(ours.norm3, layer.norm3)
    return ours.to(layer.linear1.weight.device)


class EncoderLayer(_Layer):
    """Self-attention then feed-forward, each wrapped in a residual connection and layer norm.

    Post-norm (``norm_first=False``, the original Transformer and BERT)::

        x = norm1(x + self_attn(x));  x = norm2(x + feed_forward(x))

    Pre-norm (``norm_first=True``, most models since GPT-2)::

        x = x + self_attn(norm1(x));  x = x + feed_forward(norm2(x))

    ``forward(x, mask=None)``: x is (batch, T, d_model); mask is boolean, True = may
    attend, shaped as for :class:`MultiHeadAttention` (for a (batch, T) padding mask
    pass ``padding[:, None, None, :]``). The attention weights of the last call are in
    ``self_attn.last_weights`` (batch, heads, T, T).
    """

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        require_tensor(x, "x")
        require_exact_rank(x, "x", rank=3, layout="(batch, T, d_model)")
        x = residual(
            x,
            lambda h: self.self_attn(h, h, h, mask=mask)[0],
            norm=self.norm1,
            dropout=self.dropout1,
            norm_first=self.norm_first,
        )
        return residual(x, self.feed_forward, norm=self.norm2, dropout=self.dropout2, norm_first=self.norm_first)

    @property
    def last_weights(self) -> torch.Tensor | None:
        return self.self_attn.last_weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Our copy of a ``torch.nn.TransformerEncoderLayer`` (read as batch first)."""
        return _layer_from_torch(cls, layer, nn.TransformerEncoderLayer)


class DecoderLayer(_Layer):
    """Causal self-attention, cross-attention to the encoder output ("memory"), feed-forward.

    ``forward(x, memory, mask=None, memory_mask=None, causal=True)``: x is
    (batch, T_out, d_model), memory is (batch, T_in, d_model). With ``causal=True``
    position t of x attends only to positions <= t (combined with ``mask`` if given);
    ``memory_mask`` (e.g. ``source_padding[:, None, None, :]``) limits which encoder positions
    may be attended. Weights of the last call: ``self_attn.last_weights`` and
    ``cross_attn.last_weights`` (batch, heads, T_out, T_in).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__(
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            dropout=dropout,
            norm_first=norm_first,
            activation=activation,
            layer_norm_eps=layer_norm_eps,
            cross_attention=True,
        )

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        causal: bool = True,
    ) -> torch.Tensor:
        require_tensor(x, "x")
        require_exact_rank(x, "x", rank=3, layout="(batch, T_out, d_model)")
        require_tensor(memory, "memory")
        require_exact_rank(memory, "memory", rank=3, layout="(batch, T_in, d_model)")
        self_mask = mask
        if causal:
            future = causal_mask(x.shape[1], device=x.device)  # (T_out, T_out)
            self_mask = future if self_mask is None else self_mask & future

        x = residual(
            x,
            lambda h: self.self_attn(h, h, h, mask=self_mask)[0],
            norm=self.norm1,
            dropout=self.dropout1,
            norm_first=self.norm_first,
        )
        x = residual(
            x,
            lambda h: self.cross_attn(h, memory, memory, mask=memory_mask)[0],
            norm=self.norm2,
            dropout=self.dropout2,
            norm_first=self.norm_first,
        )
        return residual(x, self.feed_forward, norm=self.norm3, dropout=self.dropout3, norm_first=self.norm_first)

    def step(
        self,
        x: torch.Tensor,
        memory_keys_values: tuple[torch.Tensor, torch.Tensor],
        past: tuple[torch.Tensor, torch.Tensor] | None,
        memory_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """The newest position only, x (batch, 1, d_model), given what the earlier positions left.

        ``past`` holds the self-attention keys and values of the earlier positions (None at the
        first); the new position's are appended, and it attends to all of them, so no causal
        mask is needed: there is no future yet. ``memory_keys_values`` are the cross-attention
        keys and values of the encoder output, computed once. Returns the new vector and the
        grown ``past``; the result equals row t of :meth:`forward` on all t + 1 positions.
        """
        grown = past

        def self_attention(h: torch.Tensor) -> torch.Tensor:
            nonlocal grown
            keys, values = self.self_attn.keys_values(h)  # (batch, heads, 1, d_head) each
            if past is not None:
                keys = torch.cat([past[0], keys], dim=2)  # (batch, heads, t + 1, d_head)
                values = torch.cat([past[1], values], dim=2)
            grown = (keys, values)
            return self.self_attn.attend(h, keys, values)[0]

        x = residual(x, self_attention, norm=self.norm1, dropout=self.dropout1, norm_first=self.norm_first)
        x = residual(
            x,
            lambda h: self.cross_attn.attend(h, *memory_keys_values, mask=memory_mask)[0],
            norm=self.norm2,
            dropout=self.dropout2,
            norm_first=self.norm_first,
        )
        x = residual(x, self.feed_forward, norm=self.norm3, dropout=self.dropout3, norm_first=self.norm_first)
        return x, grown

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """Our copy of a ``torch.nn.TransformerDecoderLayer`` (read as batch first).

        PyTorch's layer applies no causal mask unless given one; call ours with
        ``causal=False`` and the same mask to compare, or pass PyTorch a causal mask.
        """
        return _layer_from_torch(cls, layer, nn.TransformerDecoderLayer)


def run_stack(
    layers,
    x: torch.Tensor,
    padding_mask: torch.Tensor | None = None,
    causal: bool = False,
    final_norm: nn.Module | None = None,
    keep_all: bool = False,
) -> torch.Tensor | list[torch.Tensor]:
    """Run vectors x (batch, T, d_model) through a stack of encoder layers: the book's one loop over layers.

    ``padding_mask`` (batch, T) is True for real tokens; ``causal`` adds the causal mask;
    ``final_norm`` (a pre-norm stack's last layer norm) is applied to the output. With
    ``keep_all``, returns the input and every layer's output (the last one normalised).
    """
    require_tensor(x, "x")
    require_exact_rank(x, "x", rank=3, layout="(batch, T, d_model)")
    mask = key_padding_mask(padding_mask, x.shape[:2])
    if causal:
        future = causal_mask(x.shape[1], device=x.device)  # (T, T)
        mask = future if mask is None else mask & future
    states = [x]
    for layer in layers:
        x = layer(x, mask)
        states.append(x)
    if final_norm is not None:
        x = states[-1] = final_norm(x)
    return states if keep_all else x


def key_padding_mask(padding_mask: torch.Tensor | None, shape: tuple[int, ...] | torch.Size) -> torch.Tensor | None:
    """A (batch, T) padding mask (True = real token) as the (batch, 1, 1, T) mask every attention layer takes.

    ``shape`` is (batch, T) of the sequences it belongs to; None stays None (nothing is padded).
    """
    if padding_mask is None:
        return None
    require_padding_mask(padding_mask, tuple(shape), "the tokens")
    return padding_mask[:, None, None, :]  # (batch, 1, 1, T_k): broadcast over heads and queries
