"""Chapter 6: the Transformer block, encoder, decoder and the models built from them.

Layer and parameter names follow ``torch.nn.TransformerEncoderLayer`` and
``torch.nn.TransformerDecoderLayer`` where they can (``self_attn``, ``linear1``,
``linear2``, ``norm1``...), so ``from_torch`` is a copy of weights and a test can
prove the two compute the same function. Everything is batch first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._validation import require_count, require_exact_rank, require_floating, require_padding_mask, require_tensor
from .attention import causal_mask
from .modes import evaluating
from .multihead import MultiHeadAttention
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding

__all__ = [
    "FeedForward",
    "EncoderLayer",
    "DecoderLayer",
    "Encoder",
    "Decoder",
    "DecoderCache",
    "EncoderDecoder",
    "EncoderClassifier",
    "TokenClassifier",
    "LanguageModel",
    "residual",
    "run_stack",
    "key_padding_mask",
    "mean_pool",
    "greedy_decode",
    "beam_search",
    "sequence_log_prob",
]

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(name: str):
    if name not in _ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(_ACTIVATIONS)}, but {name!r} was given")
    return _ACTIVATIONS[name]


def _check_divisible(d_model: int, num_heads: int) -> None:
    if not isinstance(d_model, int) or not isinstance(num_heads, int) or num_heads < 1 or d_model % num_heads:
        raise ValueError(f"d_model={d_model!r} is not divisible by num_heads={num_heads!r}")


def residual(x: torch.Tensor, sublayer, norm: nn.LayerNorm, dropout: nn.Dropout, norm_first: bool) -> torch.Tensor:
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
    cross-attention if any, feed-forward, norms, dropouts), so a seed gives the same
    initial weights as before this base class existed.
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
        _check_divisible(d_model, num_heads)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout, activation)
        sublayers = 3 if cross_attention else 2
        for i in range(1, sublayers + 1):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model, eps=layer_norm_eps))
        for i in range(1, sublayers + 1):
            setattr(self, f"dropout{i}", nn.Dropout(dropout))


def _layer_from_torch(cls, layer: nn.Module, expected: type) -> nn.Module:
    """``cls`` (our EncoderLayer or DecoderLayer) built with ``layer``'s sizes and settings, and its weights copied."""
    if not isinstance(layer, expected):
        raise ValueError(f"expected a torch.nn.{expected.__name__}, but a {type(layer).__name__} was given")
    ours = cls(
        layer.self_attn.embed_dim,
        layer.self_attn.num_heads,
        layer.linear1.out_features,
        dropout=layer.dropout.p,
        norm_first=layer.norm_first,
        activation=_torch_activation_name(layer),
    )
    with torch.no_grad():
        ours.self_attn = MultiHeadAttention.from_torch(layer.self_attn)
        if hasattr(ours, "cross_attn"):
            ours.cross_attn = MultiHeadAttention.from_torch(layer.multihead_attn)
        _copy_linear(ours.feed_forward.linear1, layer.linear1)
        _copy_linear(ours.feed_forward.linear2, layer.linear2)
        for i in range(1, 4 if hasattr(ours, "cross_attn") else 3):
            _copy_norm(getattr(ours, f"norm{i}"), getattr(layer, f"norm{i}"))
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
        require_exact_rank(x, "x", 3, "(batch, T, d_model)")
        x = residual(x, lambda h: self.self_attn(h, h, h, mask=mask)[0], self.norm1, self.dropout1, self.norm_first)
        return residual(x, self.feed_forward, self.norm2, self.dropout2, self.norm_first)

    @property
    def last_weights(self) -> torch.Tensor | None:
        return self.self_attn.last_weights

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> "EncoderLayer":
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

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0, norm_first: bool = False,
                 activation: str = "relu", layer_norm_eps: float = 1e-5):
        super().__init__(d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps, cross_attention=True)


    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        causal: bool = True,
    ) -> torch.Tensor:
        require_tensor(x, "x")
        require_exact_rank(x, "x", 3, "(batch, T_out, d_model)")
        require_tensor(memory, "memory")
        require_exact_rank(memory, "memory", 3, "(batch, T_in, d_model)")
        self_mask = mask
        if causal:
            future = causal_mask(x.shape[1], device=x.device)  # (T_out, T_out)
            self_mask = future if self_mask is None else self_mask & future

        x = residual(x, lambda h: self.self_attn(h, h, h, mask=self_mask)[0], self.norm1, self.dropout1, self.norm_first)
        x = residual(x, lambda h: self.cross_attn(h, memory, memory, mask=memory_mask)[0], self.norm2, self.dropout2, self.norm_first)
        return residual(x, self.feed_forward, self.norm3, self.dropout3, self.norm_first)

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

        x = residual(x, self_attention, self.norm1, self.dropout1, self.norm_first)
        x = residual(x, lambda h: self.cross_attn.attend(h, *memory_keys_values, mask=memory_mask)[0],
                     self.norm2, self.dropout2, self.norm_first)
        return residual(x, self.feed_forward, self.norm3, self.dropout3, self.norm_first), grown

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> "DecoderLayer":
        """Our copy of a ``torch.nn.TransformerDecoderLayer`` (read as batch first).

        PyTorch's layer applies no causal mask unless given one; call ours with
        ``causal=False`` and the same mask to compare, or pass PyTorch a causal mask.
        """
        return _layer_from_torch(cls, layer, nn.TransformerDecoderLayer)


class _Embedding(nn.Module):
    """Token embedding (+ optional token types) + positions (+ optional layer norm)."""

    def __init__(self, vocab_size, d_model, max_len, positional, dropout, num_token_types, embedding_norm, layer_norm_eps, scale):
        super().__init__()
        self.vocab_size = vocab_size
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0
        if positional == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.positions = LearnedPositionalEncoding(max_len, d_model)
        elif positional is None or positional == "none":
            self.positions = None
        else:
            raise ValueError(f"positional must be 'sinusoidal', 'learned' or None, but {positional!r} was given")
        self.max_len = max_len
        self.token_types = nn.Embedding(num_token_types, d_model) if num_token_types else None
        self.norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if embedding_norm else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, tokens: torch.Tensor, token_types: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
        """Token ids (batch, T) at positions offset, ..., offset + T - 1 -> vectors (batch, T, d_model)."""
        require_tensor(tokens, "tokens")
        require_exact_rank(tokens, "tokens", 2, "(batch, T) of token ids")
        if tokens.is_floating_point():
            raise ValueError(f"tokens must be integer ids, but have dtype {tokens.dtype}")
        if tokens.numel():
            low, high = (int(bound) for bound in torch.aminmax(tokens))  # one pass over the ids
            if low < 0 or high >= self.vocab_size:
                raise ValueError(
                    f"token ids must lie in [0, {self.vocab_size}) for this vocabulary, but range from {low} to {high}"
                )
        require_count(offset, "offset", 0)
        if offset + tokens.shape[1] > self.max_len:
            where = f"a token at position {offset + tokens.shape[1] - 1}" if offset else f"{tokens.shape[1]} tokens"
            raise ValueError(f"the sequence has {where} but the model allows at most max_len={self.max_len} positions")
        x = self.tokens(tokens) * self.scale  # (batch, T, d_model)
        if self.token_types is not None:
            types = torch.zeros_like(tokens) if token_types is None else token_types
            x = x + self.token_types(types)
        if self.positions is not None:
            x = self.positions(x, offset)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


class Encoder(nn.Module):
    """Token ids -> contextual vectors: embedding, positions, ``num_layers`` encoder layers.

    ``forward(tokens, padding_mask=None, token_types=None)``: tokens (batch, T) ids;
    padding_mask (batch, T) bool, True for real tokens. Returns (batch, T, d_model).
    With ``causal=True`` every layer uses a causal mask (a decoder-only, GPT-style stack).
    ``attention_weights()`` returns the last weights of every layer, each
    (batch, heads, T, T).

    The defaults describe the book's small models; a BERT-style configuration is
    ``positional="learned", num_token_types=2, embedding_norm=True,
    activation="gelu", layer_norm_eps=1e-12`` (post-norm).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 128,
        num_layers: int = 2,
        max_len: int = 128,
        dropout: float = 0.0,
        norm_first: bool = False,
        positional: str | None = "sinusoidal",
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        num_token_types: int = 0,
        embedding_norm: bool = False,
        scale_embeddings: bool = False,
        causal: bool = False,
    ):
        super().__init__()
        _check_divisible(d_model, num_heads)
        self.d_model, self.causal = d_model, causal
        self.embedding = _Embedding(
            vocab_size, d_model, max_len, positional, dropout, num_token_types, embedding_norm, layer_norm_eps, scale_embeddings
        )
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps)
            for _ in range(num_layers)
        )
        # Pre-norm stacks end with a layer norm, since their residual stream is never normalised.
        self.final_norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else None

    def forward(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.embedding(tokens, token_types)  # (batch, T, d_model)
        return self.run_layers(x, padding_mask)

    def run_layers(
        self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, start: int = 0, keep_all: bool = False
    ) -> torch.Tensor | list[torch.Tensor]:
        """Vectors x (batch, T, d_model) through ``layers[start:]`` (and the final norm of a pre-norm stack).

        ``padding_mask`` (batch, T) is True for real tokens. With ``keep_all`` the input and
        every layer's output come back as a list of ``len(layers) - start + 1`` tensors.
        This is the one loop over the layers: the forward pass, the pretrained model's
        hidden states and fine-tuning the top layers (chapter 7) all run through it.
        """
        require_count(start, "start", 0, len(self.layers))
        return run_stack(self.layers[start:], x, padding_mask, self.causal, self.final_norm, keep_all)

    def hidden_states(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The embedding output and every layer's output: ``num_layers + 1`` tensors (batch, T, d_model)."""
        return self.run_layers(self.embedding(tokens, token_types), padding_mask, keep_all=True)

    def attention_weights(self) -> list[torch.Tensor | None]:
        return [layer.self_attn.last_weights for layer in self.layers]


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
    require_exact_rank(x, "x", 3, "(batch, T, d_model)")
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


def mean_pool(hidden: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Average the vectors of the real tokens: (batch, T, d) and (batch, T) bool -> (batch, d).

    Padded positions (``padding_mask`` False) take no part, so a sentence gets the same
    vector however much padding its batch needed. :class:`EncoderClassifier` pools this
    way, and so does all-MiniLM-L6-v2 to turn token vectors into a sentence vector (chapter 7).
    """
    require_tensor(hidden, "hidden")
    require_exact_rank(hidden, "hidden", 3, "(batch, T, d_model)")
    require_floating(hidden, "hidden")
    if padding_mask is None:
        return hidden.mean(dim=1)
    require_padding_mask(padding_mask, tuple(hidden.shape[:2]), "hidden's (batch, T)")
    weights = padding_mask.to(hidden.dtype)[..., None]  # (batch, T, 1): 1 for real tokens
    total = (hidden * weights).sum(dim=1)  # (batch, d)
    count = weights.sum(dim=1).clamp_min(1.0)  # (batch, 1): real tokens per sentence
    return total / count


class Decoder(nn.Module):
    """Target ids + encoder memory -> vectors: embedding, positions, ``num_layers`` decoder layers.

    ``forward(tokens, memory, padding_mask=None, memory_padding_mask=None)`` returns
    (batch, T_out, d_model). Self-attention is always causal.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 128,
        num_layers: int = 2,
        max_len: int = 128,
        dropout: float = 0.0,
        norm_first: bool = False,
        positional: str | None = "sinusoidal",
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        _check_divisible(d_model, num_heads)
        self.embedding = _Embedding(vocab_size, d_model, max_len, positional, dropout, 0, False, layer_norm_eps, False)
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_eps)
            for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model, eps=layer_norm_eps) if norm_first else None

    def forward(
        self,
        tokens: torch.Tensor,
        memory: torch.Tensor,
        padding_mask: torch.Tensor | None = None,
        memory_padding_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = self.embedding(tokens)  # (batch, T_out, d_model)
        self_mask = key_padding_mask(padding_mask, tokens.shape)  # (batch, 1, 1, T_out)
        memory_mask = key_padding_mask(memory_padding_mask, memory.shape[:2])  # (batch, 1, 1, T_in)
        for layer in self.layers:
            x = layer(x, memory, mask=self_mask, memory_mask=memory_mask)
        return self.final_norm(x) if self.final_norm is not None else x

    def self_attention_weights(self) -> list[torch.Tensor | None]:
        return [layer.self_attn.last_weights for layer in self.layers]

    def cross_attention_weights(self) -> list[torch.Tensor | None]:
        return [layer.cross_attn.last_weights for layer in self.layers]

    def start(self, memory: torch.Tensor, memory_padding_mask: torch.Tensor | None = None) -> "DecoderCache":
        """An empty cache for writing one token at a time: the encoder output's keys and values, once per layer."""
        require_tensor(memory, "memory")
        require_exact_rank(memory, "memory", 3, "(batch, T_in, d_model)")
        return DecoderCache(
            memory=[layer.cross_attn.keys_values(memory) for layer in self.layers],
            memory_mask=key_padding_mask(memory_padding_mask, memory.shape[:2]),  # (batch, 1, 1, T_in)
            past=[None] * len(self.layers),
        )

    def step(self, tokens: torch.Tensor, cache: "DecoderCache") -> torch.Tensor:
        """The next position: tokens (batch, 1), the token fed at position ``cache.position``.

        Returns (batch, 1, d_model), what :meth:`forward` returns at that position when fed every
        token so far, but computing only the new position (the KV cache keeps the rest).
        """
        if not isinstance(cache, DecoderCache):
            raise ValueError(f"cache must come from Decoder.start(memory), but a {type(cache).__name__} was given")
        require_tensor(tokens, "tokens")
        if tokens.dim() != 2 or tokens.shape[1] != 1:
            raise ValueError(f"step() takes one token per sequence, shape (batch, 1), but was given shape {tuple(tokens.shape)}")
        x = self.embedding(tokens, offset=cache.position)  # (batch, 1, d_model)
        for index, layer in enumerate(self.layers):
            x, cache.past[index] = layer.step(x, cache.memory[index], cache.past[index], cache.memory_mask)
        cache.position += 1
        return self.final_norm(x) if self.final_norm is not None else x


@dataclass
class DecoderCache:
    """What a decoder keeps while it writes one token at a time (the "KV cache"); see :meth:`Decoder.step`.

    ``memory``: per layer, the cross-attention keys and values of the encoder output, each
    (batch, heads, T_in, d_head); ``past``: per layer, the self-attention keys and values of
    the positions fed so far, each (batch, heads, t, d_head), or None before the first step;
    ``position``: how many positions have been fed.
    """

    memory: list[tuple[torch.Tensor, torch.Tensor]]
    memory_mask: torch.Tensor | None
    past: list[tuple[torch.Tensor, torch.Tensor] | None]
    position: int = 0


class EncoderDecoder(nn.Module):
    """The sequence-to-sequence Transformer: encoder, decoder and a linear output layer.

    ``forward(source, target_in, source_padding=None, target_padding=None)`` returns
    logits (batch, T_out, target_vocab_size) for the next token at each target position
    (teacher forcing: ``target_in`` is the target shifted right, starting with BOS).
    """

    def __init__(
        self,
        source_vocab_size: int,
        target_vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 128,
        num_layers: int = 2,
        max_len: int = 128,
        dropout: float = 0.0,
        norm_first: bool = False,
    ):
        super().__init__()
        self.encoder = Encoder(source_vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout, norm_first)
        self.decoder = Decoder(target_vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout, norm_first)
        self.output = nn.Linear(d_model, target_vocab_size)

    def encode(self, source: torch.Tensor, source_padding: torch.Tensor | None = None) -> torch.Tensor:
        return self.encoder(source, source_padding)  # (batch, T_in, d_model)

    def decode(
        self,
        target_in: torch.Tensor,
        memory: torch.Tensor,
        source_padding: torch.Tensor | None = None,
        target_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        hidden = self.decoder(target_in, memory, target_padding, source_padding)  # (batch, T_out, d_model)
        return self.output(hidden)  # (batch, T_out, vocab)

    def forward(
        self,
        source: torch.Tensor,
        target_in: torch.Tensor,
        source_padding: torch.Tensor | None = None,
        target_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        memory = self.encode(source, source_padding)
        return self.decode(target_in, memory, source_padding, target_padding)


class EncoderClassifier(nn.Module):
    """An encoder with a classification head on a pooled sequence vector.

    ``pooling="mean"`` averages the real (unpadded) tokens; ``pooling="first"`` uses the
    first token, a [CLS] token that the data must put there. ``forward(tokens,
    padding_mask=None)`` returns logits (batch, num_classes).
    """

    def __init__(self, vocab_size: int, num_classes: int, pooling: str = "mean", **encoder_options):
        super().__init__()
        if pooling not in ("mean", "first"):
            raise ValueError(f"pooling must be 'mean' or 'first', but {pooling!r} was given")
        self.pooling = pooling
        self.encoder = Encoder(vocab_size, **encoder_options)
        self.head = nn.Linear(self.encoder.d_model, num_classes)

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.encoder(tokens, padding_mask)  # (batch, T, d_model)
        pooled = hidden[:, 0] if self.pooling == "first" else mean_pool(hidden, padding_mask)  # (batch, d_model)
        return self.head(pooled)  # (batch, num_classes)


class TokenClassifier(nn.Module):
    """An encoder and a linear layer that gives every position its own prediction.

    ``forward(tokens, padding_mask=None, chosen=None)``: logits (batch, T, num_classes);
    with a boolean ``chosen`` (batch, T), only at those positions: (n_chosen, num_classes),
    which saves most of the work when few positions are scored. Chapter 4's two-relation
    model (one layer, a class per answer) and chapter 7's masked language model (a class
    per word piece) are both this model.
    """

    def __init__(self, vocab_size: int, num_classes: int, **encoder_options):
        super().__init__()
        self.encoder = Encoder(vocab_size, **encoder_options)
        self.head = nn.Linear(self.encoder.d_model, num_classes)

    def forward(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, chosen: torch.Tensor | None = None
    ) -> torch.Tensor:
        hidden = self.encoder(tokens, padding_mask)  # (batch, T, d_model)
        if chosen is not None:
            require_padding_mask(chosen, tuple(tokens.shape), "tokens", "chosen", "True = predict here")
            hidden = hidden[chosen]  # (n_chosen, d_model)
        return self.head(hidden)

    def attention_weights(self) -> list[torch.Tensor | None]:
        return self.encoder.attention_weights()


class LanguageModel(nn.Module):
    """A decoder-only (GPT-style) model: a causal stack of layers and a linear output layer.

    There is no encoder to attend to, so each layer is self-attention and feed-forward
    only: the :class:`Encoder` stack with ``causal=True`` (position t attends to positions
    <= t). ``forward(tokens, padding_mask=None)``: tokens (batch, T) -> logits
    (batch, T, vocab_size); row t scores the token that comes after position t. Pre-norm
    by default, as in GPT-2 (which learns its positions; ``positional="learned"``).

    ``causal=False`` removes the mask. Position t can then read token t + 1, the very
    token it is trained to predict: the training loss becomes tiny while generation,
    where token t + 1 does not exist yet, fails (chapter 6 shows this).
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        d_ff: int = 128,
        num_layers: int = 2,
        max_len: int = 128,
        dropout: float = 0.0,
        norm_first: bool = True,
        positional: str | None = "sinusoidal",
        causal: bool = True,
    ):
        super().__init__()
        self.vocab_size, self.max_len, self.causal = vocab_size, max_len, causal
        self.stack = Encoder(
            vocab_size, d_model, num_heads, d_ff, num_layers, max_len, dropout, norm_first, positional, causal=causal
        )
        self.output = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.output(self.stack(tokens, padding_mask))  # (batch, T, vocab_size)

    def attention_weights(self) -> list[torch.Tensor | None]:
        return self.stack.attention_weights()

    @torch.no_grad()
    def generate(
        self,
        prompt: torch.Tensor,
        num_tokens: int,
        temperature: float = 1.0,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Extend ``prompt`` (batch, T_0) by ``num_tokens`` tokens, one at a time.

        Each new token is drawn from softmax(logits / temperature) of the last position
        (or is the argmax with ``greedy=True``); it is appended and fed back in. Only the
        last ``max_len`` tokens are read. Returns (batch, T_0 + num_tokens).
        """
        require_tensor(prompt, "prompt")
        require_exact_rank(prompt, "prompt", 2, "(batch, T) of token ids")
        if prompt.shape[1] < 1:
            raise ValueError("the prompt needs at least one token")
        require_count(num_tokens, "num_tokens", 0)
        if not temperature > 0:
            raise ValueError(f"temperature must be positive, but {temperature!r} was given")
        tokens = prompt
        with evaluating(self):
            for _ in range(num_tokens):
                logits = self(tokens[:, -self.max_len :])[:, -1]  # (batch, vocab_size)
                if greedy:
                    next_token = logits.argmax(dim=-1, keepdim=True)  # (batch, 1)
                else:
                    probabilities = torch.softmax(logits / temperature, dim=-1)  # (batch, vocab_size)
                    next_token = torch.multinomial(probabilities, 1, generator=generator)  # (batch, 1)
                tokens = torch.cat([tokens, next_token], dim=1)  # (batch, t + 1)
        return tokens


@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder,
    source: torch.Tensor,
    max_len: int,
    bos: int,
    eos: int,
    source_padding: torch.Tensor | None = None,
    return_logits: bool = False,
    cache: bool | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Generate up to ``max_len`` tokens per source sequence, each the most likely next token.

    Returns (batch, L) token ids without the leading BOS, L <= max_len; once a sequence
    has produced EOS, its remaining positions are EOS too. Decoding stops early when
    every sequence has finished. With ``return_logits=True`` also every step's logits,
    (batch, L, vocab).

    With ``cache=True`` each step feeds only the newest token (:meth:`Decoder.step`): the keys
    and values of the earlier positions are kept, not recomputed (a KV cache). Since the
    decoder is causal, that gives what ``cache=False`` gives, which feeds BOS and every token
    written so far at each step (``model.decode``; any model with ``encode`` and ``decode``).
    The default, None, uses the cache when the model's decoder is an :class:`ab.Decoder`.
    Either way each decoder layer's ``self_attn.last_weights`` (batch, heads, L, L) and
    ``cross_attn.last_weights`` (batch, heads, L, T_in) afterwards hold every step's weights,
    row t from step t + 1, the future weighted 0: what one teacher-forced pass leaves.
    """
    require_tensor(source, "source")
    require_exact_rank(source, "source", 2, "(batch, T_in) of token ids")
    require_count(max_len, "max_len", 1)
    cacheable = isinstance(getattr(model, "decoder", None), Decoder)
    cache = cacheable if cache is None else cache
    if cache and not cacheable:
        raise ValueError(
            f"cache=True needs an ab.EncoderDecoder, whose decoder can take one token at a time, but a "
            f"{type(model).__name__} was given; pass cache=False to feed every token at each step"
        )
    batch = source.shape[0]
    with evaluating(model):
        memory = model.encode(source, source_padding)  # (batch, T_in, d_model)
        generated = torch.full((batch, 1), bos, dtype=torch.long, device=source.device)  # (batch, 1): BOS
        finished = torch.zeros(batch, dtype=torch.bool, device=source.device)
        if cache:
            state = model.decoder.start(memory, source_padding)
            rows = [([], []) for _ in model.decoder.layers]  # per layer: each step's self- and cross-attention row

            def next_logits() -> torch.Tensor:
                logits = model.output(model.decoder.step(generated[:, -1:], state))[:, -1]  # (batch, vocab)
                for layer, (own, cross) in zip(model.decoder.layers, rows):
                    own.append(layer.self_attn.last_weights)  # (batch, heads, 1, t)
                    cross.append(layer.cross_attn.last_weights)  # (batch, heads, 1, T_in)
                return logits
        else:

            def next_logits() -> torch.Tensor:
                return model.decode(generated, memory, source_padding)[:, -1]  # (batch, vocab)

        step_logits = []
        for _ in range(max_len):
            logits = next_logits()
            next_token = logits.argmax(dim=-1)  # (batch,)
            next_token = torch.where(finished, torch.full_like(next_token, eos), next_token)
            generated = torch.cat([generated, next_token[:, None]], dim=1)  # (batch, t + 1)
            step_logits.append(logits)
            finished |= next_token == eos
            if finished.all():
                break
    steps = len(step_logits)
    if cache:  # the full-pass loop's last pass already left these
        for layer, (own, cross) in zip(model.decoder.layers, rows):
            # Row t attended to t + 1 positions; later positions get weight 0, as under a causal mask.
            layer.self_attn.last_weights = torch.cat([F.pad(row, (0, steps - row.shape[-1])) for row in own], dim=2)
            layer.cross_attn.last_weights = torch.cat(cross, dim=2)  # (batch, heads, L, T_in)
    if return_logits:
        return generated[:, 1:], torch.stack(step_logits, dim=1)  # (batch, L), (batch, L, vocab)
    return generated[:, 1:]


@torch.no_grad()
def sequence_log_prob(
    model: EncoderDecoder,
    source: torch.Tensor,
    output: torch.Tensor,
    bos: int,
    eos: int,
    source_padding: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probability the model gives a whole output sequence: sum over t of log p(y_t | y_<t, source).

    ``output`` (batch, L) is written as :func:`greedy_decode` writes it (no leading BOS;
    anything after the first EOS is ignored). One teacher-forced pass scores every position:
    the decoder is fed BOS and ``output`` shifted right. Returns (batch,) natural logs.
    """
    require_tensor(source, "source")
    require_exact_rank(source, "source", 2, "(batch, T_in) of token ids")
    require_tensor(output, "output")
    require_exact_rank(output, "output", 2, "(batch, L) of token ids")
    if output.shape[0] != source.shape[0] or output.shape[1] < 1:
        raise ValueError(
            f"output must hold at least one token for each of the {source.shape[0]} sources, "
            f"but has shape {tuple(output.shape)}"
        )
    start = torch.full_like(output[:, :1], bos)  # (batch, 1)
    target_in = torch.cat([start, output[:, :-1]], dim=1)  # (batch, L): BOS, y_1 ... y_{L-1}
    with evaluating(model):
        log_probs = torch.log_softmax(model(source, target_in, source_padding), dim=-1)  # (batch, L, vocab)
    chosen = log_probs.gather(-1, output[..., None])[..., 0]  # (batch, L): log p of each written token
    ended_before = torch.cumsum(output == eos, dim=1) - (output == eos).long()  # EOS tokens strictly before t
    return (chosen * (ended_before == 0)).sum(dim=1)  # (batch,): up to and including the first EOS


@torch.no_grad()
def beam_search(
    model: EncoderDecoder,
    source: torch.Tensor,
    max_len: int,
    bos: int,
    eos: int,
    beam_width: int = 4,
    source_padding: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the ``beam_width`` most probable partial outputs at every step instead of one.

    At each step every kept sequence is extended by every token of the vocabulary, scored
    by its total log-probability (the sum of log p of its tokens), and the ``beam_width``
    best of all these candidates are kept. A sequence that has written EOS stays in the
    beam unchanged (it is extended by EOS at no cost). Search stops when every kept
    sequence has ended or after ``max_len`` tokens. No length penalty: every candidate
    of a step has the same length, and a finished sequence keeps the score it ended with.

    Returns ``(tokens, log_prob)``: the best sequence per source, (batch, L) without the
    leading BOS and EOS-padded after its EOS as :func:`greedy_decode` writes it, and its
    total log-probability (batch,). ``beam_width=1`` is greedy decoding.
    """
    require_tensor(source, "source")
    require_exact_rank(source, "source", 2, "(batch, T_in) of token ids")
    require_count(max_len, "max_len", 1)
    require_count(beam_width, "beam_width", 1)
    batch, width = source.shape[0], beam_width
    device = source.device
    with evaluating(model):
        memory = model.encode(source, source_padding).repeat_interleave(width, dim=0)  # (batch * width, T_in, d_model)
        padding = None if source_padding is None else source_padding.repeat_interleave(width, dim=0)
        written = torch.full((batch * width, 1), bos, dtype=torch.long, device=device)  # (batch * width, 1)
        scores = torch.full((batch, width), float("-inf"), device=device)
        scores[:, 0] = 0.0  # one sequence to start from: the others would repeat it
        finished = torch.zeros(batch, width, dtype=torch.bool, device=device)
        first_row = torch.arange(batch, device=device)[:, None] * width  # (batch, 1): where each source's beams start
        for _ in range(max_len):
            logits = model.decode(written, memory, padding)[:, -1]  # (batch * width, vocab)
            vocab = logits.shape[-1]
            if not 0 <= eos < vocab:
                raise ValueError(f"eos must be a token id in [0, {vocab}) for this model, but {eos!r} was given")
            log_probs = torch.log_softmax(logits, dim=-1).view(batch, width, vocab)
            only_eos = torch.full((vocab,), float("-inf"), device=device)
            only_eos[eos] = 0.0  # a finished sequence can only go on with EOS, at no cost
            log_probs = torch.where(finished[..., None], only_eos, log_probs)
            candidates = scores[..., None] + log_probs  # (batch, width, vocab): every one-token extension
            scores, index = candidates.view(batch, width * vocab).topk(width, dim=-1)  # (batch, width) best of them
            parent, token = index // vocab, index % vocab  # which kept sequence, which new token
            rows = (first_row + parent).flatten()  # (batch * width,)
            written = torch.cat([written[rows], token.flatten()[:, None]], dim=1)  # (batch * width, t + 1)
            finished = finished.gather(1, parent) | (token == eos)
            if finished.all():
                break
        best = scores.argmax(dim=-1)  # (batch,)
        tokens = written.view(batch, width, -1)[torch.arange(batch, device=device), best]  # (batch, 1 + L)
    return tokens[:, 1:], scores.gather(1, best[:, None])[:, 0]
