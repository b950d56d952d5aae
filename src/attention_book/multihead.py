"""Chapter 4: multi-head attention.

``n_h`` heads (``num_heads``) attend in parallel, each in its own ``d_model / n_h``-dimensional
subspace; their outputs are concatenated and mixed by an output projection.
Parameter and module names follow ``torch.nn.MultiheadAttention`` so that
:meth:`MultiHeadAttention.from_torch` is a plain copy of weights.

The shapes, step by step (``d_head = d_model / n_h`` for the usual "narrow" heads; the book
writes d_head as d_k)::

    x                         (batch, T, d_model)
    q = q_proj(x)             (batch, T, n_h * d_head)
    split_heads(q, n_h)       (batch, n_h, T, d_head)     view as (batch, T, n_h, d_head), then swap T and n_h
    attend, head by head      (batch, n_h, T, T) weights, (batch, n_h, T, d_head) outputs
    merge_heads(...)          (batch, T, n_h * d_head)    swap back, then concatenate the heads
    out_proj(...)             (batch, T, d_model)

"Wide" heads (``d_head=d_model``, each head as large as the model) are an option of
:class:`MultiHeadAttention`; they cost about ``n_h`` times the parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._validation import check_mask, describe_shape, require_count, require_exact_rank, require_floating, require_tensor
from .attention import scaled_dot_product_attention

__all__ = ["split_heads", "merge_heads", "MultiHeadAttention"]


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(batch, T, d_model) -> (batch, heads, T, d_model / heads).

    Head i gets the features ``i * d_head`` to ``(i + 1) * d_head - 1`` of every token: a
    contiguous block, so that head i of ``split_heads(x @ W)`` is ``x`` times the columns
    of ``W`` in that block.
    """
    require_tensor(x, "x")
    require_exact_rank(x, "x", rank=3, layout="(batch, T, d_model)")
    require_count(num_heads, "num_heads", 1)
    batch, T, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    x = x.reshape(batch, T, num_heads, d_model // num_heads)  # (batch, T, heads, d_head)
    return x.transpose(1, 2)  # (batch, heads, T, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(batch, heads, T, d_head) -> (batch, T, heads * d_head): the inverse of split_heads."""
    require_tensor(x, "x")
    require_exact_rank(x, "x", rank=4, layout="(batch, heads, T, d_head)")
    batch, heads, T, d_head = x.shape
    x = x.transpose(1, 2)  # (batch, T, heads, d_head)
    return x.reshape(batch, T, heads * d_head)  # (batch, T, d_model)


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention, batch first.

    Args:
        d_model: features per token, in and out.
        num_heads: number of heads; must divide ``d_model`` (unless ``d_head`` is given).
        bias: whether the four projections have biases.
        dropout: dropout on the attention weights during training.
        d_head: features per head. The default ``d_model / num_heads`` gives the usual
            "narrow" heads, whose projections together are as large as one full-width head;
            ``d_head=d_model`` gives "wide" heads, ``num_heads`` times as many parameters.

    ``forward(query, key, value, mask=None, need_weights=True)`` takes tensors of shape
    (batch, T_q, d_model), (batch, T_k, d_model), (batch, T_k, d_model) and a boolean
    mask (True = may attend) of shape (T_q, T_k), (batch, T_q, T_k) or
    (batch, heads, T_q, T_k), or anything that broadcasts to it; for a padding mask of
    shape (batch, T_k) pass ``mask[:, None, :]``. Returns ``(out, weights)``: out is
    (batch, T_q, d_model); weights is (batch, heads, T_q, T_k), or None when
    ``need_weights=False``, in which case PyTorch's fused kernel
    (``torch.nn.functional.scaled_dot_product_attention``) does the work.
    The weights of the last forward pass are kept in ``last_weights``.

    Initialisation: the four projections keep ``nn.Linear``'s default, weights and biases
    uniform in ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` (fan_in = d_model for W_Q, W_K, W_V and
    ``num_heads * d_head`` for W_O). PyTorch's ``nn.MultiheadAttention`` differs: it draws its
    stacked ``in_proj_weight`` (3 d_model, d_model) from Xavier (Glorot) uniform,
    ``[-sqrt(6 / (d_model + 3 d_model)), +...]``, and sets both biases to zero; its ``out_proj``
    weight keeps Linear's default. ``from_torch`` copies the weights, so after loading the two
    agree whatever the initialisation.
    """

    def __init__(
        self, d_model: int, num_heads: int, bias: bool = True, dropout: float = 0.0, d_head: int | None = None
    ):
        super().__init__()
        require_count(d_model, "d_model", 1)
        require_count(num_heads, "num_heads", 1)
        if d_head is not None and (isinstance(d_head, bool) or not isinstance(d_head, int) or d_head < 1):
            raise ValueError(f"d_head must be a positive integer or None, but {d_head!r} was given")
        if d_head is None and d_model % num_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: each head gets "
                f"d_model / num_heads features, so choose e.g. num_heads in "
                f"{[h for h in range(1, d_model + 1) if d_model % h == 0][:8]}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), but {dropout!r} was given")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads if d_head is None else d_head
        self.dropout = dropout
        inner = num_heads * self.d_head  # all heads side by side: d_model for narrow heads
        self.q_proj = nn.Linear(d_model, inner, bias=bias)  # W_Q of all heads at once, (d_model -> n_h * d_head)
        self.k_proj = nn.Linear(d_model, inner, bias=bias)  # W_K
        self.v_proj = nn.Linear(d_model, inner, bias=bias)  # W_V
        self.out_proj = nn.Linear(inner, d_model, bias=bias)  # W_O, (n_h * d_head -> d_model)
        self.last_weights: torch.Tensor | None = None

    def _check_tokens(self, tensor, name: str) -> None:
        """One input of d_model features per token: (batch, tokens, d_model), floating point."""
        require_tensor(tensor, name)
        require_exact_rank(tensor, name, rank=3, layout="(batch, tokens, d_model)")
        require_floating(tensor, name)
        if tensor.shape[-1] != self.d_model:
            raise ValueError(
                f"{name} has {tensor.shape[-1]} features (shape {describe_shape(tensor)}) "
                f"but the layer expects d_model={self.d_model}"
            )

    def _check_inputs(self, query, key, value, *, mask):
        for name, tensor in (("query", query), ("key", key), ("value", value)):
            self._check_tokens(tensor, name)
        if key.shape[:2] != value.shape[:2]:
            raise ValueError(
                f"key {describe_shape(key)} and value {describe_shape(value)} must have the same "
                "batch size and number of tokens"
            )
        if query.shape[0] != key.shape[0]:
            raise ValueError(
                f"query {describe_shape(query)} and key {describe_shape(key)} must have the same batch size"
            )
        if mask is not None:
            require_tensor(mask, "mask")
            if mask.dim() == 3:  # (batch, T_q, T_k): one mask per sequence, shared by the heads
                mask = mask[:, None]  # (batch, 1, T_q, T_k)
        return mask

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = self._check_inputs(query, key, value, mask=mask)
        # Queries first, then keys and values: the order in which autograd adds up the gradients
        # of a shared input, so that training gives the same weights to the last bit.
        q = split_heads(self.q_proj(query), self.num_heads)  # (batch, heads, T_q, d_head)
        k, v = self._keys_values(key, value)  # (batch, heads, T_k, d_head) each
        if need_weights:
            return self._weighted(q, k, v, mask=mask)
        if mask is not None:
            check_mask(mask, (q.shape[0], self.num_heads, q.shape[2], k.shape[2]), "(batch, heads, T_q, T_k)")
        dropout = self.dropout if self.training else 0.0
        heads_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return self.out_proj(merge_heads(heads_out)), None  # (batch, T_q, d_model)

    def keys_values(self, key: torch.Tensor, value: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Every head's keys and values: ``key`` and ``value`` (batch, T_k, d_model; value defaults
        to key) projected and split, (batch, heads, T_k, d_head) each.

        :meth:`forward` computes them on every call. A decoder that writes one token at a time
        computes them once per position and keeps them (a "KV cache"), then calls :meth:`attend`.
        """
        value = key if value is None else value
        self._check_inputs(key, key, value, mask=None)
        return self._keys_values(key, value)

    def attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention of ``query`` (batch, T_q, d_model) to keys and values made by :meth:`keys_values`.

        Returns ``(out, weights)`` as :meth:`forward` does, and keeps the weights in ``last_weights``;
        ``forward(query, key, value, mask)`` is ``attend(query, *keys_values(key, value), mask)``.
        """
        self._check_tokens(query, "query")
        for name, tensor in (("keys", keys), ("values", values)):
            require_tensor(tensor, name)
            expected = (query.shape[0], self.num_heads, keys.shape[-2], self.d_head)
            if tuple(tensor.shape) != expected:
                raise ValueError(
                    f"{name} must have shape (batch, heads, T_k, d_head) = {expected}, as keys_values() makes "
                    f"them, but has shape {describe_shape(tensor)}"
                )
        if mask is not None and mask.dim() == 3:  # (batch, T_q, T_k): shared by the heads
            mask = mask[:, None]
        return self._weighted(split_heads(self.q_proj(query), self.num_heads), keys, values, mask=mask)

    def _keys_values(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = split_heads(self.k_proj(key), self.num_heads)  # (batch, heads, T_k, d_head)
        v = split_heads(self.v_proj(value), self.num_heads)  # (batch, heads, T_k, d_head)
        return k, v

    def _weighted(self, q, k, v, *, mask):
        """Attention with its weights (kept in ``last_weights``) for split queries, keys and values."""
        heads_out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        self.last_weights = weights.detach()  # (batch, heads, T_q, T_k)
        if self.training and self.dropout:
            heads_out = F.dropout(weights, self.dropout) @ v  # (batch, heads, T_q, d_head)
        return self.out_proj(merge_heads(heads_out)), weights  # (batch, T_q, d_model)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of ``module``'s weights in our layout; computes the same function on batch-first inputs.

        Supports the common configuration: query, key and value of the same size, no
        ``bias_k`` / ``bias_v``, no ``add_zero_attn``.
        """
        if not isinstance(module, nn.MultiheadAttention):
            raise ValueError(f"expected a torch.nn.MultiheadAttention, but a {type(module).__name__} was given")
        if not module._qkv_same_embed_dim or module.bias_k is not None or module.add_zero_attn:
            raise ValueError(
                "only nn.MultiheadAttention with kdim = vdim = embed_dim, no bias_k/bias_v and "
                "add_zero_attn=False can be converted"
            )
        has_bias = module.in_proj_bias is not None
        ours = cls(module.embed_dim, module.num_heads, bias=has_bias, dropout=module.dropout)
        d = module.embed_dim
        with torch.no_grad():
            # in_proj_weight stacks W_Q, W_K, W_V: (3 d_model, d_model)
            for index, projection in enumerate((ours.q_proj, ours.k_proj, ours.v_proj)):
                projection.weight.copy_(module.in_proj_weight[index * d : (index + 1) * d])
                if has_bias:
                    projection.bias.copy_(module.in_proj_bias[index * d : (index + 1) * d])
            ours.out_proj.weight.copy_(module.out_proj.weight)
            if has_bias:
                ours.out_proj.bias.copy_(module.out_proj.bias)
        return ours.to(module.in_proj_weight.device, module.in_proj_weight.dtype)
