"""Chapters 4-7: the Transformer's stacks and the models built from them.

Floor 1 (model code): the embedding, :class:`Encoder` and :class:`Decoder` (stacks of the
layers in :mod:`attention_book.layers`), the decoder's KV cache, and the models: the
sequence-to-sequence :class:`EncoderDecoder`, two classifiers and the GPT-style
:class:`LanguageModel`. Writing an output token by token is in :mod:`attention_book.decoding`.
Everything is batch first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from ._validation import require_count, require_exact_rank, require_floating, require_padding_mask, require_tensor
from .layers import DecoderLayer, EncoderLayer, key_padding_mask, run_stack
from .modes import evaluating
from .positional import LearnedPositionalEncoding, SinusoidalPositionalEncoding

__all__ = [
    "Encoder",
    "Decoder",
    "DecoderCache",
    "EncoderDecoder",
    "EncoderClassifier",
    "TokenClassifier",
    "LanguageModel",
    "mean_pool",
]


class _Embedding(nn.Module):
    """Token embedding (+ optional token types) + positions (+ optional layer norm)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        *,
        positional: str | None,
        dropout: float = 0.0,
        num_token_types: int = 0,
        embedding_norm: bool = False,
        layer_norm_eps: float = 1e-5,
        scale: bool = False,
    ):
        super().__init__()
        self.vocab_size = vocab_size
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.scale = math.sqrt(d_model) if scale else 1.0
        if positional == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(max_len, d_model)
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
        require_exact_rank(tokens, "tokens", rank=2, layout="(batch, T) of token ids")
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
        self.d_model, self.causal = d_model, causal
        self.embedding = _Embedding(
            vocab_size,
            d_model,
            max_len,
            positional=positional,
            dropout=dropout,
            num_token_types=num_token_types,
            embedding_norm=embedding_norm,
            layer_norm_eps=layer_norm_eps,
            scale=scale_embeddings,
        )
        layer_options = dict(
            dropout=dropout, norm_first=norm_first, activation=activation, layer_norm_eps=layer_norm_eps
        )
        self.layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff, **layer_options) for _ in range(num_layers))
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
        require_count(start, "start", minimum=0, maximum=len(self.layers))
        return run_stack(
            self.layers[start:], x, padding_mask, causal=self.causal, final_norm=self.final_norm, keep_all=keep_all
        )

    def hidden_states(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The embedding output and every layer's output: ``num_layers + 1`` tensors (batch, T, d_model)."""
        return self.run_layers(self.embedding(tokens, token_types), padding_mask, keep_all=True)

    def attention_weights(self) -> list[torch.Tensor | None]:
        return [layer.self_attn.last_weights for layer in self.layers]


def mean_pool(hidden: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Average the vectors of the real tokens: (batch, T, d) and (batch, T) bool -> (batch, d).

    Padded positions (``padding_mask`` False) take no part, so a sentence gets the same
    vector however much padding its batch needed. :class:`EncoderClassifier` pools this
    way, and so does all-MiniLM-L6-v2 to turn token vectors into a sentence vector (chapter 7).
    """
    require_tensor(hidden, "hidden")
    require_exact_rank(hidden, "hidden", rank=3, layout="(batch, T, d_model)")
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
        self.embedding = _Embedding(
            vocab_size, d_model, max_len, positional=positional, dropout=dropout, layer_norm_eps=layer_norm_eps
        )
        layer_options = dict(
            dropout=dropout, norm_first=norm_first, activation=activation, layer_norm_eps=layer_norm_eps
        )
        self.layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff, **layer_options) for _ in range(num_layers))
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

    def start(self, memory: torch.Tensor, memory_padding_mask: torch.Tensor | None = None) -> DecoderCache:
        """An empty cache for writing one token at a time: the encoder output's keys and values, once per layer."""
        require_tensor(memory, "memory")
        require_exact_rank(memory, "memory", rank=3, layout="(batch, T_in, d_model)")
        return DecoderCache(
            memory=[layer.cross_attn.keys_values(memory) for layer in self.layers],
            memory_mask=key_padding_mask(memory_padding_mask, memory.shape[:2]),  # (batch, 1, 1, T_in)
            past=[None] * len(self.layers),
        )

    def step(self, tokens: torch.Tensor, cache: DecoderCache) -> torch.Tensor:
        """The next position: tokens (batch, 1), the token fed at position ``cache.position``.

        Returns (batch, 1, d_model), what :meth:`forward` returns at that position when fed every
        token so far, but computing only the new position (the KV cache keeps the rest).
        """
        if not isinstance(cache, DecoderCache):
            raise ValueError(f"cache must come from Decoder.start(memory), but a {type(cache).__name__} was given")
        require_tensor(tokens, "tokens")
        if tokens.dim() != 2 or tokens.shape[1] != 1:
            raise ValueError(
                f"step() takes one token per sequence, shape (batch, 1), but was given shape {tuple(tokens.shape)}"
            )
        x = self.embedding(tokens, offset=cache.position)  # (batch, 1, d_model)
        for index, layer in enumerate(self.layers):
            x, cache.past[index] = layer.step(
                x, memory_keys_values=cache.memory[index], past=cache.past[index], memory_mask=cache.memory_mask
            )
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
        sizes = dict(
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            num_layers=num_layers,
            max_len=max_len,
            dropout=dropout,
            norm_first=norm_first,
        )
        self.encoder = Encoder(source_vocab_size, **sizes)
        self.decoder = Decoder(target_vocab_size, **sizes)
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
        hidden = self.decoder(
            target_in, memory, padding_mask=target_padding, memory_padding_mask=source_padding
        )  # (batch, T_out, d_model)
        return self.output(hidden)  # (batch, T_out, vocab)

    def forward(
        self,
        source: torch.Tensor,
        target_in: torch.Tensor,
        source_padding: torch.Tensor | None = None,
        target_padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        memory = self.encode(source, source_padding)
        return self.decode(target_in, memory, source_padding=source_padding, target_padding=target_padding)


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
            require_padding_mask(chosen, tuple(tokens.shape), "tokens", name="chosen", meaning="True = predict here")
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
            vocab_size,
            d_model=d_model,
            num_heads=num_heads,
            d_ff=d_ff,
            num_layers=num_layers,
            max_len=max_len,
            dropout=dropout,
            norm_first=norm_first,
            positional=positional,
            causal=causal,
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
        require_exact_rank(prompt, "prompt", rank=2, layout="(batch, T) of token ids")
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
