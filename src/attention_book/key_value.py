"""Chapter 2: attention as a soft key-value store.

A Python ``dict`` returns the one value whose key equals the query. Attention
returns a blend of *all* values, weighted by how well each key matches the query.
In self-attention the queries, keys and values are learned projections of the
same tokens: ``Q = X W_Q``, ``K = X W_K``, ``V = X W_V``.
"""

from __future__ import annotations

import torch
from torch import nn

from ._validation import describe_shape, require_exact_rank, require_tensor
from .attention import scaled_dot_product_attention

__all__ = ["soft_lookup", "SingleHeadAttention"]


def soft_lookup(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Look up one query in a small store: returns ``(value, weights)``.

    Args:
        query: shape (d_k,).
        keys: shape (n, d_k), one key per row.
        values: shape (n, d_v), one value per row.

    Returns:
        value: shape (d_v,), the weighted average of the values.
        weights: shape (n,), how much each key matched.
    """
    require_tensor(query, "query")
    require_exact_rank(query, "query", rank=1, layout="(d_k,)")
    require_exact_rank(keys, "keys", rank=2, layout="(n, d_k)")
    require_exact_rank(values, "values", rank=2, layout="(n, d_v)")
    out, weights = scaled_dot_product_attention(query[None, :], keys, values, temperature=temperature)
    return out[0], weights[0]  # (1, d_v) -> (d_v,); (1, n) -> (n,)


class SingleHeadAttention(nn.Module):
    """One attention head with learned projections W_Q, W_K (d_model -> d_k) and W_V (d_model -> d_v).

    ``forward(x_query, x_context=None, mask=None)``: with one input it is self-attention
    (the tokens ask and answer); with ``x_context`` it is cross-attention (``x_query``
    asks, ``x_context`` answers). Returns ``(out, weights)`` with shapes
    (batch, T_q, d_v) and (batch, T_q, T_k); the weights are also kept in
    ``last_weights`` for plotting.
    """

    def __init__(self, d_model: int, d_k: int, d_v: int | None = None, bias: bool = False):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        self.d_model = d_model
        self.q_proj = nn.Linear(d_model, d_k, bias=bias)  # W_Q
        self.k_proj = nn.Linear(d_model, d_k, bias=bias)  # W_K
        self.v_proj = nn.Linear(d_model, d_v, bias=bias)  # W_V
        self.last_weights: torch.Tensor | None = None

    def forward(
        self, x_query: torch.Tensor, x_context: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x_context = x_query if x_context is None else x_context
        for name, tensor in (("x_query", x_query), ("x_context", x_context)):
            require_tensor(tensor, name)
            if tensor.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} has {tensor.shape[-1]} features (shape {describe_shape(tensor)}) "
                    f"but the layer expects d_model={self.d_model}"
                )
        q = self.q_proj(x_query)  # (batch, T_q, d_k)
        k = self.k_proj(x_context)  # (batch, T_k, d_k)
        v = self.v_proj(x_context)  # (batch, T_k, d_v)
        out, weights = scaled_dot_product_attention(q, k, v, mask=mask)
        self.last_weights = weights.detach()
        return out, weights
