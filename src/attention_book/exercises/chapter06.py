"""Exercises of chapter 6, "The encoder-decoder Transformer".

6.1 The two masks of a decoder layer: causal self-attention, cross-attention over a padded source.
6.2 One decoder layer (post-norm or pre-norm), wired from the parts of a given layer.
6.3 A test that catches a model whose outputs can see future tokens.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.causal_mask`, :class:`~attention_book.DecoderLayer`, models with
known masks) and recognises typical wrong answers by what they compute.
"""

from __future__ import annotations

import torch
from torch import nn

from ..attention import causal_mask
from ..multihead import MultiHeadAttention
from ..transformer import DecoderLayer, LanguageModel
from ._core import ExerciseFailure, Mistake, call, diagnose, random_generator, register, require_tensor_like

# ---------------------------------------------------------------------------------
# 6.1 The two masks of a decoder layer


def _decoder_masks_solution(source_padding: torch.Tensor, T_out: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(self_mask (T_out, T_out), cross_mask (batch, T_out, T_in)), boolean, True = may attend."""
    self_mask = torch.ones(T_out, T_out, dtype=torch.bool).tril()  # (T_out, T_out): key j <= query i
    batch, T_in = source_padding.shape
    cross_mask = source_padding[:, None, :].expand(batch, T_out, T_in)  # (batch, T_out, T_in): real source tokens
    return self_mask, cross_mask


def _masks_upper_triangle(source_padding, T_out):
    self_mask, cross_mask = _decoder_masks_solution(source_padding, T_out)
    return self_mask.T, cross_mask


def _masks_without_diagonal(source_padding, T_out):
    _, cross_mask = _decoder_masks_solution(source_padding, T_out)
    return torch.ones(T_out, T_out, dtype=torch.bool).tril(-1), cross_mask


def _masks_causal_cross_attention(source_padding, T_out):
    self_mask, cross_mask = _decoder_masks_solution(source_padding, T_out)
    T_in = source_padding.shape[1]
    return self_mask, cross_mask & torch.ones(T_out, T_in, dtype=torch.bool).tril()


def _masks_padding_ignored(source_padding, T_out):
    self_mask, cross_mask = _decoder_masks_solution(source_padding, T_out)
    return self_mask, torch.ones_like(cross_mask)


def _masks_padding_on_queries(source_padding, T_out):
    self_mask, _ = _decoder_masks_solution(source_padding, T_out)
    batch, T_in = source_padding.shape
    return self_mask, source_padding[:, :, None].expand(batch, T_in, T_out)


def _masks_as_numbers(source_padding, T_out):
    self_mask, cross_mask = _decoder_masks_solution(source_padding, T_out)
    return self_mask.float(), cross_mask.float()


def _masks_inverted(source_padding, T_out):
    self_mask, cross_mask = _decoder_masks_solution(source_padding, T_out)
    return ~self_mask, ~cross_mask


def _pair_of_masks(result, what: str):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ExerciseFailure(f"{what}: return a pair (self_mask, cross_mask), but a {type(result).__name__} came back")
    return result


def _check_boolean(mask: torch.Tensor, what: str) -> None:
    if mask.dtype != torch.bool:
        raise ExerciseFailure(
            f"{what} has dtype {mask.dtype}: return a boolean mask (True = may attend), for example with "
            "torch.ones(..., dtype=torch.bool) and &, not numbers 0 and 1"
        )


def _check_decoder_masks(answer) -> None:
    generator = random_generator()
    T_in = int(torch.randint(6, 10, (), generator=generator))
    T_out = T_in + int(torch.randint(1, 3, (), generator=generator))  # the output is longer than the source
    short = int(torch.randint(1, T_in - 2, (), generator=generator))  # at least two padded source positions
    cases = [([T_in, short, T_in - 1], T_in, T_out), ([1], 1, 1), ([3, 2], 3, 2)]
    for lengths, width, T in cases:
        padding = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]  # (batch, T_in)
        where = f"(sources of lengths {lengths} padded to T_in={width}, T_out={T})"
        self_mask, cross_mask = _pair_of_masks(call(answer, padding.clone(), T), f"for sources {where}")
        expected_self, expected_cross = _decoder_masks_solution(padding, T)
        for got, name in ((self_mask, "self_mask"), (cross_mask, "cross_mask")):
            if not isinstance(got, torch.Tensor):
                raise ExerciseFailure(f"{name} {where} should be a torch.Tensor, but is a {type(got).__name__}")
        if tuple(cross_mask.shape) == (len(lengths), width, T) and width != T:
            raise ExerciseFailure(
                f"cross_mask {where} has shape {tuple(cross_mask.shape)}: the queries (rows) are the T_out output "
                f"positions and the keys (columns) the T_in source tokens, so it should be {tuple(expected_cross.shape)}; "
                "the source padding masks the columns: source_padding[:, None, :]"
            )
        require_tensor_like(self_mask, expected_self, f"self_mask {where}")
        require_tensor_like(cross_mask, expected_cross, f"cross_mask {where}")
        _check_boolean(self_mask, f"self_mask {where}")
        _check_boolean(cross_mask, f"cross_mask {where}")
        diagnose(
            self_mask.float(),
            expected_self.float(),
            f"self_mask {where}",
            known_mistakes={
                "it is the upper triangle: row i is the query at position i and may look at keys j <= i, "
                "which is the LOWER triangle (torch.tril), not torch.triu": _masks_upper_triangle(padding, T)[0].float(),
                "the diagonal is missing: a token may attend to itself (j = i), so use tril(), not tril(-1); "
                "without it the first row is all False": _masks_without_diagonal(padding, T)[0].float(),
                "the mask is inverted: True means 'may attend'": _masks_inverted(padding, T)[0].float(),
            },
        )
        diagnose(
            cross_mask.float(),
            expected_cross.float(),
            f"cross_mask {where}",
            known_mistakes={
                "the cross-attention must not be causal: the whole source is known before decoding starts, so every "
                "output position may read every real source token": _masks_causal_cross_attention(padding, T)[1].float(),
                "the source padding is ignored: no output position may read a padded source token, so column j must "
                "be False where source_padding[b, j] is False": _masks_padding_ignored(padding, T)[1].float(),
                "the mask is inverted: True means 'may attend'": _masks_inverted(padding, T)[1].float(),
            },
        )


register(
    "6.1",
    "The two masks of a decoder layer",
    _check_decoder_masks,
    solution=_decoder_masks_solution,
    mistakes=[
        Mistake("upper triangle", _masks_upper_triangle, "LOWER triangle"),
        Mistake("diagonal excluded", _masks_without_diagonal, "the diagonal is missing"),
        Mistake("causal cross-attention", _masks_causal_cross_attention, "the cross-attention must not be causal"),
        Mistake("source padding ignored", _masks_padding_ignored, "the source padding is ignored"),
        Mistake("padding on the queries", _masks_padding_on_queries, "the source padding masks the columns"),
        Mistake("float masks", _masks_as_numbers, "return a boolean mask"),
        Mistake("inverted", _masks_inverted, "the mask is inverted"),
    ],
)

# ---------------------------------------------------------------------------------
# 6.2 One decoder layer from its parts


def _decoder_layer_solution(layer: DecoderLayer, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
    """One decoder layer: causal self-attention, cross-attention to ``memory``, feed-forward; post- or pre-norm."""
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # (T, T): may attend to j <= i

    def self_block(h):
        return layer.self_attn(h, h, h, mask=future)[0]  # (batch, T, d_model)

    def cross_block(h):
        return layer.cross_attn(h, memory, memory)[0]  # queries from the decoder, keys and values from the encoder

    if layer.norm_first:  # pre-norm: x + sublayer(norm(x))
        x = x + self_block(layer.norm1(x))
        x = x + cross_block(layer.norm2(x))
        return x + layer.feed_forward(layer.norm3(x))
    x = layer.norm1(x + self_block(x))  # post-norm: norm(x + sublayer(x))
    x = layer.norm2(x + cross_block(x))
    return layer.norm3(x + layer.feed_forward(x))


def _wired(layer, x, memory, *, residual=True, norm_first=None, causal=True, cross_source="memory", swap=False):
    """A decoder layer wired with one deliberate change (for the known mistakes)."""
    norm_first = layer.norm_first if norm_first is None else norm_first
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril() if causal else None

    def self_block(h):
        return layer.self_attn(h, h, h, mask=future)[0]

    def cross_block(h):
        source = memory if cross_source == "memory" else h
        return layer.cross_attn(h, source, source)[0]

    first, second = (cross_block, self_block) if swap else (self_block, cross_block)
    blocks = [(first, layer.norm1), (second, layer.norm2), (layer.feed_forward, layer.norm3)]
    for block, norm in blocks:
        if norm_first:
            x = (x if residual else 0) + block(norm(x))
        else:
            x = norm((x if residual else 0) + block(x))
    return x


def _layer_without_residuals(layer, x, memory):
    return _wired(layer, x, memory, residual=False)


def _layer_always_post_norm(layer, x, memory):
    return _wired(layer, x, memory, norm_first=False)


def _layer_always_pre_norm(layer, x, memory):
    return _wired(layer, x, memory, norm_first=True)


def _layer_cross_attending_to_itself(layer, x, memory):
    return _wired(layer, x, memory, cross_source="x")


def _layer_without_causal_mask(layer, x, memory):
    return _wired(layer, x, memory, causal=False)


def _layer_cross_attention_first(layer, x, memory):
    return _wired(layer, x, memory, swap=True)


class _SealedDecoderLayer(DecoderLayer):
    """A DecoderLayer whose parts work but which cannot be called as a whole."""

    def forward(self, *args, **kwargs):
        raise ExerciseFailure(
            "you called the whole layer, layer(x, memory): build the layer from its parts instead "
            "(layer.self_attn, layer.cross_attn, layer.feed_forward, layer.norm1/2/3)"
        )


def _random_layer(norm_first: bool, generator: torch.Generator, d_model: int, heads: int) -> DecoderLayer:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))
        layer = _SealedDecoderLayer(d_model, heads, 2 * d_model, norm_first=norm_first).eval()
        with torch.no_grad():
            for norm in (layer.norm1, layer.norm2, layer.norm3):  # not the identity, so a norm in the wrong place shows
                norm.weight.copy_(1.0 + 0.5 * torch.randn(d_model))
                norm.bias.copy_(0.5 * torch.randn(d_model))
    return layer


def _check_decoder_layer(answer) -> None:
    generator = random_generator()
    d_model, heads = 16, 4
    T_out = int(torch.randint(4, 7, (), generator=generator))
    T_in = T_out + int(torch.randint(1, 4, (), generator=generator))
    for norm_first in (False, True):
        layer = _random_layer(norm_first, generator, d_model, heads)
        x = torch.randn(2, T_out, d_model, generator=generator)
        memory = torch.randn(2, T_in, d_model, generator=generator)
        with torch.no_grad():
            expected = DecoderLayer.forward(layer, x, memory)  # the reference: causal by default
            got = call(answer, layer, x.clone(), memory.clone())
        kind = "pre-norm, norm_first=True" if norm_first else "post-norm, norm_first=False"

        def wrong(mistake):
            with torch.no_grad():
                return mistake(layer, x, memory)

        diagnose(
            got,
            expected,
            f"the output of a {kind} layer (batch 2, T_out={T_out}, T_in={T_in}, d_model={d_model})",
            known_mistakes={
                "the residual connections are missing: each sub-layer's input must be added to its output, "
                "x + sublayer(...)": wrong(_layer_without_residuals),
                "the layer norm is in the wrong place: this layer has norm_first=True (pre-norm), so normalise the "
                "input of each sub-layer and add the result to the un-normalised x: x = x + sublayer(norm(x))": (
                    wrong(_layer_always_post_norm) if norm_first else None
                ),
                "the layer norm is in the wrong place: this layer has norm_first=False (post-norm, as in the "
                "original Transformer), so normalise after adding: x = norm(x + sublayer(x))": (
                    None if norm_first else wrong(_layer_always_pre_norm)
                ),
                "the cross-attention attends to the decoder's own tokens: its keys and values must come from the "
                "encoder output, layer.cross_attn(h, memory, memory)": wrong(_layer_cross_attending_to_itself),
                "the self-attention is not causal: pass mask=causal_mask(T_out) (True on and below the diagonal), "
                "or each position reads the tokens after it": wrong(_layer_without_causal_mask),
                "the sub-layers are in the wrong order: first causal self-attention (norm1), then cross-attention "
                "(norm2), then the feed-forward (norm3)": wrong(_layer_cross_attention_first),
            },
        )


register(
    "6.2",
    "One decoder layer from its parts",
    _check_decoder_layer,
    solution=_decoder_layer_solution,
    mistakes=[
        Mistake("no residual connections", _layer_without_residuals, "the residual connections are missing"),
        Mistake("always post-norm", _layer_always_post_norm, "this layer has norm_first=True"),
        Mistake("always pre-norm", _layer_always_pre_norm, "this layer has norm_first=False"),
        Mistake("cross-attention to itself", _layer_cross_attending_to_itself, "attends to the decoder's own tokens"),
        Mistake("no causal mask", _layer_without_causal_mask, "the self-attention is not causal"),
        Mistake("sub-layers swapped", _layer_cross_attention_first, "the sub-layers are in the wrong order"),
    ],
)

# ---------------------------------------------------------------------------------
# 6.3 A test that catches a model seeing the future


def _sees_the_future_solution(model, tokens: torch.Tensor, vocab_size: int) -> bool:
    """True if some output position t changes when only tokens after t change."""
    with torch.no_grad():
        original = model(tokens)  # (1, T, vocab)
        T = tokens.shape[1]
        for t in range(T - 1):
            changed = tokens.clone()
            changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % vocab_size  # a different token after t
            outputs = model(changed)
            if not torch.allclose(outputs[:, : t + 1], original[:, : t + 1], atol=1e-6):
                return True
    return False


def _perturbs_only_the_last_token(model, tokens, vocab_size):
    with torch.no_grad():
        changed = tokens.clone()
        changed[:, -1] = (changed[:, -1] + 1) % vocab_size
        return not torch.allclose(model(changed)[:, :-1], model(tokens)[:, :-1], atol=1e-6)


def _compares_the_changed_position_too(model, tokens, vocab_size):
    with torch.no_grad():
        original = model(tokens)
        for t in range(tokens.shape[1]):
            changed = tokens.clone()
            changed[:, t:] = (changed[:, t:] + 1) % vocab_size  # changes position t itself
            if not torch.allclose(model(changed)[:, : t + 1], original[:, : t + 1], atol=1e-6):
                return True
    return False


def _checks_only_the_first_position(model, tokens, vocab_size):
    with torch.no_grad():
        changed = tokens.clone()
        changed[:, 1:] = (changed[:, 1:] + 1) % vocab_size
        return not torch.allclose(model(changed)[:, :1], model(tokens)[:, :1], atol=1e-6)


def _changes_the_past(model, tokens, vocab_size):
    with torch.no_grad():
        changed = tokens.clone()
        changed[:, 0] = (changed[:, 0] + 1) % vocab_size
        return not torch.allclose(model(changed)[:, 1:], model(tokens)[:, 1:], atol=1e-6)


def _never_sees_the_future(model, tokens, vocab_size):
    return False


class _OneLayerModel(nn.Module):
    """Embedding + learned positions + one attention layer with a fixed mask + read-out: (1, T) -> (1, T, vocab)."""

    def __init__(self, vocab_size: int, allowed: torch.Tensor, d_model: int = 16):
        super().__init__()
        self.allowed = allowed  # (T, T) boolean
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Parameter(torch.randn(allowed.shape[0], d_model))
        self.attention = MultiHeadAttention(d_model, 2)
        self.readout = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens) + self.positions[: tokens.shape[1]]  # (batch, T, d_model)
        x = x + self.attention(x, x, x, mask=self.allowed)[0]
        return self.readout(x)  # (batch, T, vocab)


def _future_cases(generator: torch.Generator) -> tuple[list, torch.Tensor, int]:
    """(description, model, sees the future?) for a random length T and vocabulary size."""
    T = int(torch.randint(7, 11, (), generator=generator))
    vocab_size = int(torch.randint(12, 21, (), generator=generator))
    causal = causal_mask(T)
    one_ahead = torch.ones(T, T, dtype=torch.bool).tril(1)
    middle = causal.clone()
    middle[3, 5] = True  # only position 3 may read the token at position 5
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))
        cases = [
            ("a correctly masked (causal) model", _OneLayerModel(vocab_size, causal).eval(), False),
            ("a model without any mask (every position sees every token)", _OneLayerModel(vocab_size, torch.ones(T, T, dtype=torch.bool)).eval(), True),
            ("a model whose mask lets each position see one token ahead", _OneLayerModel(vocab_size, one_ahead).eval(), True),
            ("a model in which a single token in the middle (position 5) leaks into one earlier position (3)", _OneLayerModel(vocab_size, middle).eval(), True),
            ("a causal two-layer ab.LanguageModel", LanguageModel(vocab_size, 16, 2, 32, 2, max_len=T).eval(), False),
            ("a two-layer ab.LanguageModel built with causal=False", LanguageModel(vocab_size, 16, 2, 32, 2, max_len=T, causal=False).eval(), True),
        ]
    tokens = torch.randint(0, vocab_size, (1, T), generator=generator)
    return cases, tokens, vocab_size


def _as_bool(result, what: str) -> bool:
    if isinstance(result, torch.Tensor) and result.numel() == 1 and result.dtype == torch.bool:
        return bool(result)
    if isinstance(result, (bool,)) or type(result).__name__ == "bool_":
        return bool(result)
    raise ExerciseFailure(f"for {what} your function returned {result!r}; it should return True or False")


def _check_sees_the_future(answer) -> None:
    cases, tokens, vocab_size = _future_cases(random_generator())
    for what, model, leaks in cases:
        got = _as_bool(call(answer, model, tokens.clone(), vocab_size), what)
        if got == leaks:
            continue
        if not leaks:
            raise ExerciseFailure(
                f"you said that {what} sees the future, but it does not. Position t may depend on tokens 0..t, itself "
                "included, and later positions depend on earlier tokens: change only tokens AFTER t and compare only "
                "the outputs at positions up to t"
            )
        if "middle" in what:
            raise ExerciseFailure(
                f"you missed {what}: a leak can come from any token and reach any earlier position. For every position t, "
                "change the tokens after t and compare the outputs at positions up to t; changing only the last token, "
                "or looking only at the first position, misses it"
            )
        raise ExerciseFailure(
            f"you missed {what}. Change the tokens after some position t and see whether the outputs at positions "
            "up to t move (compare with a tolerance, e.g. torch.allclose)"
        )


register(
    "6.3",
    "A test that catches a model seeing the future",
    _check_sees_the_future,
    solution=_sees_the_future_solution,
    mistakes=[
        Mistake("perturbs only the last token", _perturbs_only_the_last_token, "a single token in the middle"),
        Mistake("compares the changed position too", _compares_the_changed_position_too, "change only tokens AFTER t"),
        Mistake("checks only the first position", _checks_only_the_first_position, "a single token in the middle"),
        Mistake("changes the past", _changes_the_past, "change only tokens AFTER t"),
        Mistake("always False", _never_sees_the_future, "you missed a model without any mask"),
    ],
)
