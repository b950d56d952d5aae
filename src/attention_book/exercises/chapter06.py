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
from ..layers import DecoderLayer
from ..multihead import MultiHeadAttention
from ..transformer import LanguageModel
from ._core import (
    ExerciseFailure,
    Inconclusive,
    Mistake,
    Property,
    add_properties,
    call,
    diagnose,
    name_sizes,
    probe_from_check,
    probe_pair,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)
from ._probes import determinism_probe

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


def _masks_without_causal_mask(source_padding, T_out):
    _, cross_mask = _decoder_masks_solution(source_padding, T_out)
    return torch.ones(T_out, T_out, dtype=torch.bool), cross_mask


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


def _check_mask_order(self_mask, cross_mask, *, expected, where: str) -> None:
    """(cross_mask, self_mask) returned the other way round: say so before the shapes are explained."""
    expected_self, expected_cross = expected
    if (
        isinstance(self_mask, torch.Tensor)
        and isinstance(cross_mask, torch.Tensor)
        and tuple(self_mask.shape) == tuple(expected_cross.shape)
        and tuple(cross_mask.shape) == tuple(expected_self.shape)
        and expected_self.shape != expected_cross.shape
    ):
        raise ExerciseFailure(
            f"for sources {where} the first mask you return has the cross mask's shape {tuple(self_mask.shape)} and the "
            f"second the self mask's {tuple(cross_mask.shape)}: return (self_mask, cross_mask), in this order"
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
        name_sizes(batch=len(lengths), T_in=width, T_out=T)
        self_mask, cross_mask = _pair_of_masks(call(answer, padding.clone(), T), f"for sources {where}")
        expected_self, expected_cross = _decoder_masks_solution(padding, T)
        _check_mask_order(self_mask, cross_mask, expected=(expected_self, expected_cross), where=where)
        for got, name in ((self_mask, "self_mask"), (cross_mask, "cross_mask")):
            if not isinstance(got, torch.Tensor):
                raise ExerciseFailure(f"{name} {where} should be a torch.Tensor, but is a {type(got).__name__}")
        if tuple(cross_mask.shape) == (len(lengths), width, T) and width != T:
            raise ExerciseFailure(
                f"cross_mask {where} has shape {tuple(cross_mask.shape)}: the queries (rows) are the T_out output "
                f"positions and the keys (columns) the T_in source tokens, so it should be {tuple(expected_cross.shape)}; "
                "the source padding masks the columns: source_padding[:, None, :]"
            )
        require_tensor_like(self_mask, expected_self, f"self_mask {where}", axes=("query (T_out)", "key (T_out)"))
        require_tensor_like(
            cross_mask, expected_cross, f"cross_mask {where}", axes=("batch", "query (T_out)", "key (T_in)")
        )
        _check_boolean(self_mask, f"self_mask {where}")
        _check_boolean(cross_mask, f"cross_mask {where}")
        diagnose(
            self_mask.float(),
            expected_self.float(),
            f"self_mask {where}",
            known_mistakes={
                "it is the upper triangle: row i is the query at position i and may look at keys j <= i, "
                "which is the LOWER triangle (torch.tril), not torch.triu": _masks_upper_triangle(padding, T)[
                    0
                ].float(),
                "the diagonal is missing: a token may attend to itself (j = i), so use tril(), not tril(-1); "
                "without it the first row is all False": _masks_without_diagonal(padding, T)[0].float(),
                "the mask is inverted: True means 'may attend'": _masks_inverted(padding, T)[0].float(),
                "there is no causal mask at all (every entry True): position i may only look at keys j <= i, "
                "on and below the diagonal, torch.ones(T, T, dtype=torch.bool).tril()": _masks_without_causal_mask(
                    padding, T
                )[0].float(),
            },
        )
        diagnose(
            cross_mask.float(),
            expected_cross.float(),
            f"cross_mask {where}",
            known_mistakes={
                "the cross-attention must not be causal: the whole source is known before decoding starts, so every "
                "output position may read every real source token": _masks_causal_cross_attention(padding, T)[
                    1
                ].float(),
                "the source padding is ignored: no output position may read a padded source token, so column j must "
                "be False where source_padding[b, j] is False": _masks_padding_ignored(padding, T)[1].float(),
                "the mask is inverted: True means 'may attend'": _masks_inverted(padding, T)[1].float(),
            },
        )


register(
    "6.1",
    "The two masks of a decoder layer",
    _check_decoder_masks,
    answer="decoder_masks",
    solution=_decoder_masks_solution,
    mistakes=[
        Mistake("upper triangle", _masks_upper_triangle, "LOWER triangle"),
        Mistake("diagonal excluded", _masks_without_diagonal, "the diagonal is missing"),
        Mistake("causal cross-attention", _masks_causal_cross_attention, "the cross-attention must not be causal"),
        Mistake("source padding ignored", _masks_padding_ignored, "the source padding is ignored"),
        Mistake("padding on the queries", _masks_padding_on_queries, "the source padding masks the columns"),
        Mistake("float masks", _masks_as_numbers, "return a boolean mask"),
        Mistake("inverted", _masks_inverted, "the mask is inverted"),
        Mistake("no causal mask", _masks_without_causal_mask, "there is no causal mask at all"),
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


def _wired(
    layer,
    x,
    memory,
    *,
    residual=True,
    norm_first=None,
    causal=True,
    cross_source="memory",
    swap=False,
    slip=None,
):
    """A decoder layer wired with one deliberate change (for the known mistakes and the slips probe). ``slip`` is one
    of: "cross queries" (queries from the memory), "inverted mask", "self over memory", "normalised residual"
    (pre-norm adds norm(x)), "norm inside" (post-norm adds norm(sublayer(x))), "norms 3 and 1", "no ff residual"."""
    norm_first = layer.norm_first if norm_first is None else norm_first
    T = x.shape[1]
    lower = torch.ones(T, T, dtype=torch.bool).tril()
    future = (~lower if slip == "inverted mask" else lower) if causal else None

    def self_block(h):
        source = memory if slip == "self over memory" else h
        return layer.self_attn(h, source, source, mask=future)[0]

    def cross_block(h):
        if slip == "cross queries":
            return layer.cross_attn(memory, h, h)[0]
        source = memory if cross_source == "memory" else h
        return layer.cross_attn(h, source, source)[0]

    first, second = (cross_block, self_block) if swap else (self_block, cross_block)
    norms = (
        (layer.norm3, layer.norm2, layer.norm1) if slip == "norms 3 and 1" else (layer.norm1, layer.norm2, layer.norm3)
    )
    blocks = [(first, norms[0]), (second, norms[1]), (layer.feed_forward, norms[2])]
    for index, (block, norm) in enumerate(blocks):
        keep = residual and not (slip == "no ff residual" and index == 2)
        if norm_first:
            start = norm(x) if slip == "normalised residual" else x
            x = (start if keep else 0) + block(norm(x))
        elif slip == "norm inside":
            x = (x if keep else 0) + norm(block(x))
        else:
            x = norm((x if keep else 0) + block(x))
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


def _random_layer(norm_first: bool, generator: torch.Generator, d_model: int, *, heads: int) -> DecoderLayer:
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
    name_sizes(
        batch=2, d_model=d_model, **{"T_out (the decoder's positions)": T_out, "T_in (the memory's positions)": T_in}
    )
    for norm_first in (False, True):
        layer = _random_layer(norm_first, generator, d_model, heads=heads)
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
    answer="decoder_layer",
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


def _loop_starts_at_one(model, tokens, vocab_size):
    """The right test, except that the loop skips t = 0 (a leak into the first position goes unseen)."""
    with torch.no_grad():
        original = model(tokens)
        for t in range(1, tokens.shape[1] - 1):
            changed = tokens.clone()
            changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % vocab_size
            if not torch.allclose(model(changed)[:, : t + 1], original[:, : t + 1], atol=1e-6):
                return True
    return False


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
    into_first = causal.clone()
    into_first[0, 1] = True  # only the first position reads one token ahead
    from_last = causal.clone()
    from_last[T - 2, T - 1] = True  # only the last token leaks, into the position just before it
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))
        cases = [
            ("a correctly masked (causal) model", _OneLayerModel(vocab_size, causal).eval(), False),
            (
                "a model without any mask (every position sees every token)",
                _OneLayerModel(vocab_size, torch.ones(T, T, dtype=torch.bool)).eval(),
                True,
            ),
            (
                "a model whose mask lets each position see one token ahead",
                _OneLayerModel(vocab_size, one_ahead).eval(),
                True,
            ),
            (
                "a model in which a single token in the middle (position 5) leaks into one earlier position (3)",
                _OneLayerModel(vocab_size, middle).eval(),
                True,
            ),
            (
                "a model in which only the FIRST position (0) sees the token after it",
                _OneLayerModel(vocab_size, into_first).eval(),
                True,
            ),
            (
                f"a model in which only the LAST token (position {T - 1}) leaks, into position {T - 2}",
                _OneLayerModel(vocab_size, from_last).eval(),
                True,
            ),
            (
                "a causal two-layer ab.LanguageModel",
                LanguageModel(vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=T).eval(),
                False,
            ),
            (
                "a two-layer ab.LanguageModel built with causal=False",
                LanguageModel(
                    vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=T, causal=False
                ).eval(),
                True,
            ),
        ]
    tokens = torch.randint(0, vocab_size, (1, T), generator=generator)
    tokens[0, T - 1] = vocab_size - 1  # the last token id: a change that does not wrap around leaves the vocabulary
    return cases, tokens, vocab_size


def _as_bool(result, what: str) -> bool:
    if isinstance(result, torch.Tensor) and result.numel() == 1 and result.dtype == torch.bool:
        return bool(result)
    if isinstance(result, (bool,)) or type(result).__name__ == "bool_":
        return bool(result)
    raise ExerciseFailure(f"for {what} your function returned {result!r}; it should return True or False")


class _Recorder(nn.Module):
    """Passes tokens on to a model and records every input it is given."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.inputs: list[torch.Tensor] = []

    def forward(self, tokens):
        self.inputs.append(tokens.detach().clone())
        return self.model(tokens)


def _changes(recorder: _Recorder, tokens: torch.Tensor) -> list[torch.Tensor]:
    """The positions each recorded input changes (an input equal to the original is left out)."""
    changed = []
    for given in recorder.inputs:
        if given.shape == tokens.shape:
            where = (given != tokens)[0].nonzero().flatten()
            if len(where):
                changed.append(where)
    return changed


def _said_leak_wrongly(what: str, changes: list[torch.Tensor], T: int) -> str:
    """Why an answer said that a model which does not see the future does: what it changed."""
    if any(not torch.equal(where, torch.arange(int(where[0]), T)) for where in changes):
        return (
            f"you said that {what} sees the future, but it does not: your test changes tokens that are not all the ones "
            "after some position t (an earlier token, or only some of the later ones), and a change anywhere reaches the "
            "later positions: change only tokens AFTER t (all of them, t + 1 to the end) and compare the outputs at "
            "positions up to t"
        )
    return (
        f"you said that {what} sees the future, but it does not: your test changes the tokens after t, but compares "
        "outputs those changes may reach. Position t may depend on tokens 0..t, itself included: compare only the "
        "outputs at positions up to t (outputs[:, : t + 1]), never those after it"
    )


def _missed(what: str, changes: list[torch.Tensor], T: int, tokens: torch.Tensor, recorder: _Recorder) -> str:
    """Why an answer missed a leak: which changes it never made, or how it compared."""
    for given in recorder.inputs:
        moved = given != tokens
        if moved.any():
            first = int(moved[0].nonzero()[0])
            if not moved[0, first:].all():
                return (
                    f"you missed {what}: your test leaves some of the later tokens as they were (a change to a value they "
                    "may already have shows nothing); make each changed token differ from the original, e.g. "
                    "(token + 1) % vocab_size"
                )
    starts = {int(where[0]) for where in changes}
    if not starts:
        return (
            f"you missed {what}: your test never gave the model a changed token (it answered without changing the "
            "tokens after any position t). For every position t, change the tokens after t and compare the outputs at "
            "positions up to t"
        )
    missing = sorted(set(range(1, T)) - starts)
    if missing == [1]:
        return (
            f"you missed {what}: a leak into position 0 goes unseen when the loop over t starts at 1. Test every "
            "position t from 0 to T - 2: change the tokens after t and compare the outputs at 0..t"
        )
    if missing:
        return (
            f"you missed {what}: your test changes the tokens after t only for t in {sorted(s - 1 for s in starts)}; a "
            "leak can come from any token and reach any earlier position, so test every position t from 0 to T - 2 "
            "(changing only the last token, or looking only at the first position, misses it)"
        )
    return (
        f"you missed {what}: your test changes the right tokens but does not see the outputs up to t move. Compare the "
        "outputs themselves (the logits, not their argmax) with a small tolerance, torch.allclose(..., atol=1e-6)"
    )


def _check_sees_the_future(answer) -> None:
    cases, tokens, vocab_size = _future_cases(random_generator())
    said = [_as_bool(call(answer, _Recorder(model), tokens.clone(), vocab_size), what) for what, model, _ in cases]
    if all(s != leaks for s, (_, _, leaks) in zip(said, cases)):
        raise ExerciseFailure(
            "every one of your answers is the opposite of the truth (a causal model 'sees the future', one without a "
            "mask does not): your function answers the opposite question; return True when some output sees a later "
            "token"
        )
    T = tokens.shape[1]
    for got, (what, model, leaks) in zip(said, cases):
        if got == leaks:
            continue
        recorder = _Recorder(model)
        call(answer, recorder, tokens.clone(), vocab_size)
        changes = _changes(recorder, tokens)
        message = (
            _missed(what, changes, T, tokens=tokens, recorder=recorder)
            if leaks
            else _said_leak_wrongly(what, changes, T)
        )
        raise ExerciseFailure(message)


register(
    "6.3",
    "A test that catches a model seeing the future",
    _check_sees_the_future,
    answer="sees_the_future",
    solution=_sees_the_future_solution,
    mistakes=[
        Mistake("perturbs only the last token", _perturbs_only_the_last_token, "test every position t from 0 to T - 2"),
        Mistake(
            "compares the changed position too",
            _compares_the_changed_position_too,
            "compare only the outputs at positions up to t",
        ),
        Mistake(
            "checks only the first position", _checks_only_the_first_position, "test every position t from 0 to T - 2"
        ),
        Mistake("changes the past", _changes_the_past, "change only tokens AFTER t"),
        Mistake("always False", _never_sees_the_future, "your test never gave the model a changed token"),
        Mistake("loop starts at t = 1", _loop_starts_at_one, "a leak into position 0 goes unseen"),
    ],
)

# ---------------------------------------------------------------------------------
# 6.4 The position-wise feed-forward


def _feed_forward_solution(x, W1, b1, W2, b2):
    """relu(x W1 + b1) W2 + b2 for x (batch, T, d_model), W1 (d_model, d_ff), W2 (d_ff, d_model)."""
    hidden = torch.relu(x @ W1 + b1)  # (batch, T, d_ff): every position on its own
    return hidden @ W2 + b2  # (batch, T, d_model)


def _ff_without_activation(x, W1, b1, W2, b2):
    return (x @ W1 + b1) @ W2 + b2


def _ff_relu_on_output(x, W1, b1, W2, b2):
    return torch.relu(_feed_forward_solution(x, W1, b1, W2=W2, b2=b2))


def _ff_without_biases(x, W1, b1, W2, b2):
    return torch.relu(x @ W1) @ W2


def _ff_mixing_positions(x, W1, b1, W2, b2):
    """Normalises over the positions: the output of a token depends on the others."""
    out = _feed_forward_solution(x, W1, b1, W2=W2, b2=b2)
    return out - out.mean(dim=1, keepdim=True)


def _ff_bias_inside(x, W1, b1, W2, b2):
    return torch.relu(x @ W1) @ W2 + b1 @ W2 + b2  # the first bias added after the ReLU


_FF_HINTS = {
    "no_activation": "there is no ReLU between the two layers: two linear maps in a row are one linear map; "
    "compute relu(x W1 + b1) W2 + b2",
    "relu_on_output": "the ReLU belongs between the layers only; your output is also clipped at 0, so it can "
    "never be negative",
    "no_biases": "the biases b1 and b2 are missing",
    "bias_after_relu": "b1 is added before the ReLU, inside it: relu(x W1 + b1)",
    "mixing": "each position must be transformed on its own (position-wise): the output of token t may depend "
    "only on x[:, t], but yours changes when other tokens change",
}


def _check_feed_forward(answer) -> None:
    generator = random_generator()
    # (batch, T, d_model, d_ff): several tokens; a single token; d_ff == d_model (where a transposed W fits).
    for batch, T, d_model, d_ff in [(2, 5, 4, 7), (3, 1, 6, 10), (1, 4, 5, 5)]:
        x = torch.randn(batch, T, d_model, generator=generator)
        W1 = torch.randn(d_model, d_ff, generator=generator) / d_model**0.5
        W2 = torch.randn(d_ff, d_model, generator=generator) / d_ff**0.5
        b1, b2 = torch.randn(d_ff, generator=generator), torch.randn(d_model, generator=generator)
        args = (x, W1, b1, W2, b2)
        where = f"for x of shape {(batch, T, d_model)} and d_ff={d_ff}"
        got = call(answer, *(a.clone() for a in args))
        known = {
            _FF_HINTS["no_activation"]: _ff_without_activation(*args),
            _FF_HINTS["relu_on_output"]: _ff_relu_on_output(*args),
            _FF_HINTS["no_biases"]: _ff_without_biases(*args),
            _FF_HINTS["bias_after_relu"]: _ff_bias_inside(*args),
            _FF_HINTS["mixing"]: _ff_mixing_positions(*args) if T > 1 else None,
        }
        if d_ff == d_model:
            known[
                "W1 and W2 are used transposed (nn.Linear's convention); this exercise uses x W1 with W1 of "
                "shape (d_model, d_ff)"
            ] = _feed_forward_solution(x, W1.T, b1, W2=W2.T, b2=b2)
        diagnose(got, _feed_forward_solution(*args), f"the output {where}", known_mistakes=known)
        # Position-wise: changing the other tokens leaves token 0's output alone.
        if T > 1:
            changed = x.clone()
            changed[:, 1:] = torch.randn(batch, T - 1, d_model, generator=generator)
            again = call(answer, changed, W1, b1, W2, b2)
            if not torch.allclose(again[:, 0], got[:, 0], atol=1e-5):
                raise ExerciseFailure(f"{where}: {_FF_HINTS['mixing']}")


register(
    "6.4",
    "The position-wise feed-forward",
    _check_feed_forward,
    answer="feed_forward",
    solution=_feed_forward_solution,
    mistakes=[
        Mistake("no activation", _ff_without_activation, "there is no ReLU between the two layers"),
        Mistake("ReLU on the output too", _ff_relu_on_output, "the ReLU belongs between the layers only"),
        Mistake("no biases", _ff_without_biases, "the biases b1 and b2 are missing"),
        Mistake("mixes positions", _ff_mixing_positions, "position-wise"),
        Mistake("b1 after the ReLU", _ff_bias_inside, "b1 is added before the ReLU"),
    ],
)

# ---------------------------------------------------------------------------------
# 6.5 Greedy decoding without teacher forcing


@torch.no_grad()
def _greedy_solution(model, source: torch.Tensor, max_len: int, bos: int, eos: int) -> torch.Tensor:
    """Feed the model its own predictions: (batch, L) tokens without BOS, EOS after a sequence ends, L <= max_len."""
    memory = model.encode(source)  # (batch, T_in, d_model)
    generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)  # (batch, 1): BOS
    finished = torch.zeros(source.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(generated, memory)  # (batch, t, vocab)
        next_token = logits[:, -1].argmax(dim=-1)  # (batch,): the prediction after the last token
        next_token = torch.where(finished, torch.full_like(next_token, eos), next_token)
        generated = torch.cat([generated, next_token[:, None]], dim=1)  # the model reads its own output
        finished |= next_token == eos
        if finished.all():
            break
    return generated[:, 1:]


class _ScriptedModel(nn.Module):
    """A stand-in encoder-decoder whose next token is a fixed function of the source and the prefix.

    The token after a prefix is ``3 + (7 * source_sum + 5 * prefix_sum + 3 * len) % (vocab - 3)``,
    except that sequence b says EOS (2) when its prefix has exactly ``stop[b]`` tokens (BOS included) and never
    again; a decoder that does not read its own output, reads the wrong position, or keeps reading the model
    after EOS (instead of writing EOS) gets other tokens.
    """

    def __init__(self, stop: list[int], vocab_size: int = 11):
        super().__init__()
        self.stop, self.vocab_size = stop, vocab_size
        self.calls = 0

    def encode(self, source, source_padding=None):
        return source.float().sum(dim=1, keepdim=True)[..., None].expand(-1, 1, 4)  # (batch, 1, 4)

    def decode(self, generated, memory, source_padding=None):
        self.calls += 1
        if self.calls > 200 or generated.shape[1] > 64:  # every check here has max_len <= 9: a loop that does not end
            raise ExerciseFailure(
                f"your decoder called the model {self.calls} times, with inputs up to {generated.shape[1]} tokens, where "
                "max_len is at most 9 here: stop after max_len steps (a loop over range(max_len)), or earlier once every "
                "sequence has written EOS"
            )
        batch, t = generated.shape
        logits = torch.zeros(batch, t, self.vocab_size)
        source_sum = memory[:, 0, 0].long()
        for b in range(batch):
            for i in range(t):
                prefix = generated[b, : i + 1]
                if len(prefix) == self.stop[b]:  # EOS once; after it the model says other tokens (never EOS again),
                    token = 2  # so a decoder that keeps reading the model after EOS shows
                else:
                    token = 3 + int(7 * source_sum[b] + 5 * prefix.sum() + 3 * len(prefix)) % (self.vocab_size - 3)
                logits[b, i, token] = 1.0
        return logits

    def forward(self, source, target_in, source_padding=None, target_padding=None):
        raise ExerciseFailure(
            "you called model(source, target): that is teacher forcing; call model.encode once, then model.decode step by step"
        )


def _greedy_bos_only(model, source, max_len, bos, eos):
    """Feeds BOS alone at every step (never its own output)."""
    memory = model.encode(source)
    start = torch.full((source.shape[0], 1), bos, dtype=torch.long)
    tokens = [model.decode(start, memory)[:, -1].argmax(dim=-1) for _ in range(max_len)]
    return torch.stack(tokens, dim=1)


def _greedy_first_position(model, source, max_len, bos, eos):
    memory = model.encode(source)
    generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)
    finished = torch.zeros(source.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        next_token = model.decode(generated, memory)[:, 0].argmax(dim=-1)  # the first position's prediction
        next_token = torch.where(finished, torch.full_like(next_token, eos), next_token)
        generated = torch.cat([generated, next_token[:, None]], dim=1)
        finished |= next_token == eos
        if finished.all():
            break
    return generated[:, 1:]


def _greedy_keeps_bos(model, source, max_len, bos, eos):
    result = _greedy_solution(model, source, max_len, bos=bos, eos=eos)
    return torch.cat([torch.full((source.shape[0], 1), bos, dtype=torch.long), result], dim=1)[:, : result.shape[1] + 1]


def _greedy_ignores_eos(model, source, max_len, bos, eos):
    memory = model.encode(source)
    generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)
    for _ in range(max_len):
        next_token = model.decode(generated, memory)[:, -1].argmax(dim=-1)
        generated = torch.cat([generated, next_token[:, None]], dim=1)
    return generated[:, 1:]


def _greedy_stops_at_first_eos(model, source, max_len, bos, eos):
    memory = model.encode(source)
    generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)
    for _ in range(max_len):
        next_token = model.decode(generated, memory)[:, -1].argmax(dim=-1)
        generated = torch.cat([generated, next_token[:, None]], dim=1)
        if (next_token == eos).any():
            break
    return generated[:, 1:]


_GREEDY_HINTS = {
    "bos_only": "every step's prediction reads only BOS (a decoder input that never grows, or the logits at "
    "position 0): take the prediction at the LAST position, logits[:, -1], and append each predicted token to the "
    "decoder's input, so the next step reads the model's own output (no teacher forcing)",
    "keeps_bos": "your output starts with BOS: return the generated tokens without the leading BOS",
    "ignores_eos": "a sequence that has produced EOS must stay finished: every later position is EOS (the model's "
    "further predictions are ignored), and decoding stops once every sequence has finished",
    "first_eos": "you stopped when the FIRST sequence produced EOS; stop only when EVERY sequence has, and fill "
    "the finished ones with EOS meanwhile",
}


def _check_greedy(answer) -> None:
    generator = random_generator()
    bos, eos = 1, 2
    # Four sources: one ends after its first token, one hits max_len without EOS, two end in between.
    max_len = int(torch.randint(6, 9, (), generator=generator))
    for stop in ([2, max_len + 5, 4, 5], [max_len + 5], [3, 3]):
        source = torch.randint(3, 11, (len(stop), 5), generator=generator)
        model = _ScriptedModel(stop)
        where = f"for {len(stop)} source sequences, max_len={max_len}, EOS after {[min(s - 1, max_len) for s in stop]} tokens"
        got = call(answer, model, source.clone(), max_len, bos, eos)
        expected = _greedy_solution(model, source, max_len, bos=bos, eos=eos)
        known = {
            _GREEDY_HINTS["bos_only"]: _greedy_bos_only(model, source, max_len, bos=bos, eos=eos),
            _GREEDY_HINTS["keeps_bos"]: _greedy_keeps_bos(model, source, max_len, bos=bos, eos=eos),
            _GREEDY_HINTS["ignores_eos"]: _greedy_ignores_eos(model, source, max_len, bos=bos, eos=eos),
            _GREEDY_HINTS["first_eos"]: _greedy_stops_at_first_eos(model, source, max_len, bos=bos, eos=eos),
        }
        if isinstance(got, torch.Tensor) and got.shape[0] == expected.shape[0] and got.shape[1] != expected.shape[1]:
            for hint, wrong in known.items():
                if wrong.shape == got.shape and torch.equal(got.long(), wrong):
                    raise ExerciseFailure(f"the tokens {where} are wrong: {hint}")
            raise ExerciseFailure(
                f"the tokens {where} have length {got.shape[1]}, but decoding should stop after {expected.shape[1]} "
                f"steps: {_GREEDY_HINTS['ignores_eos'] if got.shape[1] > expected.shape[1] else _GREEDY_HINTS['first_eos']}"
            )
        diagnose(
            got.float() if isinstance(got, torch.Tensor) else got,
            expected.float(),
            f"the tokens {where}",
            known_mistakes={hint: wrong.float() for hint, wrong in known.items()},
            atol=0.0,
            rtol=0.0,
        )


register(
    "6.5",
    "Greedy decoding without teacher forcing",
    _check_greedy,
    answer="greedy",
    solution=_greedy_solution,
    mistakes=[
        Mistake("decodes from BOS alone", _greedy_bos_only, "every step's prediction reads only BOS"),
        Mistake("first position's prediction", _greedy_first_position, "every step's prediction reads only BOS"),
        Mistake("keeps BOS", _greedy_keeps_bos, "your output starts with BOS"),
        Mistake("ignores EOS", _greedy_ignores_eos, "must stay finished"),
        Mistake("stops at the first EOS", _greedy_stops_at_first_eos, "stopped when the FIRST sequence produced EOS"),
    ],
)

# ---------------------------------------------------------------------------------
# 6.6 An evaluation loop


def _accuracy_solution(model: nn.Module, batches) -> float:
    """Accuracy of model(inputs).argmax(-1) over all (inputs, labels) batches: eval mode, no gradients,
    the model's mode restored afterwards."""
    was_training = model.training
    model.eval()  # dropout off
    correct = total = 0
    with torch.no_grad():  # no graph: nothing here is trained
        for inputs, labels in batches:
            correct += int((model(inputs).argmax(dim=-1) == labels).sum())
            total += len(labels)
    model.train(was_training)  # give the model back as it was
    return correct / total


class _WatchedModel(nn.Module):
    """A linear classifier with heavy dropout that records, at every call, its mode and whether autograd was on."""

    def __init__(self, d: int, classes: int, generator: torch.Generator):
        super().__init__()
        self.linear = nn.Linear(d, classes)
        with torch.no_grad():
            self.linear.weight.copy_(torch.randn(classes, d, generator=generator))
            self.linear.bias.zero_()
        self.dropout = nn.Dropout(0.5)
        self.seen_training, self.seen_grad = [], []

    def forward(self, x):
        self.seen_training.append(self.training)
        self.seen_grad.append(torch.is_grad_enabled())
        return self.linear(self.dropout(x))


def _accuracy_in_train_mode(model, batches):
    with torch.no_grad():
        correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y in batches)
    return correct / sum(len(y) for _, y in batches)


def _accuracy_with_gradients(model, batches):
    was_training = model.training
    model.eval()
    correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y in batches)
    model.train(was_training)
    return correct / sum(len(y) for _, y in batches)


def _accuracy_not_restored(model, batches):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y in batches)
    return correct / sum(len(y) for _, y in batches)


def _accuracy_always_back_to_train(model, batches):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x).argmax(-1) == y).sum()) for x, y in batches)
    model.train()
    return correct / sum(len(y) for _, y in batches)


def _accuracy_mean_of_batches(model, batches):
    was_training = model.training
    model.eval()
    with torch.no_grad():
        accuracies = [float((model(x).argmax(-1) == y).float().mean()) for x, y in batches]
    model.train(was_training)
    return sum(accuracies) / len(accuracies)


def _check_accuracy(answer) -> None:
    generator = random_generator()
    d, classes = 6, 3
    # Batches of unequal sizes (the last one a single example), so that a mean of batch accuracies is off.
    sizes = [16, 9, 1]
    name_sizes(batch=sizes[0], classes=classes, d=d)
    for start_in_training in (True, False):
        model = _WatchedModel(d, classes, generator)
        model.train(start_in_training)
        batches = []
        for size in sizes:
            x = torch.randn(size, d, generator=generator)
            with torch.no_grad():
                clean = model.linear(x).argmax(-1)
            labels = torch.where(
                torch.rand(size, generator=generator) < 0.7,
                clean,
                torch.randint(0, classes, (size,), generator=generator),
            )
            batches.append((x, labels))
        with torch.no_grad():
            correct = sum(int((model.linear(x).argmax(-1) == y).sum()) for x, y in batches)
        expected = correct / sum(sizes)
        mode = "training" if start_in_training else "evaluation"
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))
            result = call(answer, model, batches)
        if model.seen_training and any(model.seen_training):
            raise ExerciseFailure(
                "the model ran in TRAINING mode during evaluation, so dropout zeroed half its inputs at random: call "
                "model.eval() before the loop"
            )
        if any(model.seen_grad):
            raise ExerciseFailure(
                "the evaluation ran with autograd on, building a graph for every batch: wrap the loop in "
                "torch.no_grad() (or torch.inference_mode())"
            )
        if model.training != start_in_training:
            raise ExerciseFailure(
                f"the model was in {mode} mode before your function and is in "
                f"{'training' if model.training else 'evaluation'} mode after it: restore the mode it HAD "
                "(was_training = model.training ... model.train(was_training)), not always train() or eval()"
            )
        if isinstance(result, torch.Tensor) and result.numel() == 1:
            result = result.item()
        if not isinstance(result, (int, float)) or isinstance(result, bool):
            raise ExerciseFailure(f"your function returned {result!r}; return the accuracy, a float between 0 and 1")
        batch_mean = sum(float((model.linear(x).argmax(-1) == y).float().mean()) for x, y in batches) / len(batches)
        if abs(result - expected) > 1e-6:  # a float32 mean (torch) is right too
            if abs(result - batch_mean) < 1e-6:
                raise ExerciseFailure(
                    f"you averaged the accuracies of the batches ({sizes} examples): a batch of 1 then counts as much "
                    "as one of 16. Count the correct predictions and divide by the number of examples"
                )
            raise ExerciseFailure(
                f"for batches of {sizes} examples (model in {mode} mode) the accuracy is {expected:.4f}, but you returned {result:.4f}"
            )


register(
    "6.6",
    "An evaluation loop",
    _check_accuracy,
    answer="accuracy",
    solution=_accuracy_solution,
    mistakes=[
        Mistake("left in train mode", _accuracy_in_train_mode, "ran in TRAINING mode"),
        Mistake("no torch.no_grad()", _accuracy_with_gradients, "with autograd on"),
        Mistake("mode not restored", _accuracy_not_restored, "restore the mode it HAD"),
        Mistake("always back to train()", _accuracy_always_back_to_train, "restore the mode it HAD"),
        Mistake("mean of batch accuracies", _accuracy_mean_of_batches, "you averaged the accuracies of the batches"),
    ],
)


# ---------------------------------------------------------------------------------
# Properties (see _core's docstring): what an answer breaks, probed one idea at a time.


def _masks_for(answer, *, lengths=(4, 2), T_in=4, T_out=5):
    padding = torch.arange(T_in)[None, :] < torch.tensor(lengths)[:, None]
    self_mask, cross_mask = probe_pair(answer(padding.clone(), T_out))
    if not (
        isinstance(self_mask, torch.Tensor)
        and self_mask.dtype == torch.bool
        and isinstance(cross_mask, torch.Tensor)
        and cross_mask.dtype == torch.bool
    ):
        raise Inconclusive("the checker names the dtype")
    return (
        padding,
        probe_tensor(self_mask, (T_out, T_out)).bool(),
        probe_tensor(cross_mask, (len(lengths), T_out, T_in)).bool(),
    )


def _causal_self_mask_probe(answer):
    _, self_mask, _ = _masks_for(answer)
    T = self_mask.shape[0]
    lower = torch.ones(T, T, dtype=torch.bool).tril()
    if torch.equal(self_mask, ~lower):
        return (
            f"your self_mask (T_out = {T}) is True on the future positions and False on the allowed ones: the mask is "
            "inverted (the opposite convention). True means 'may attend': query i may attend to keys j <= i"
        )
    named = {
        "it is the upper triangle: row i is the query at position i and may look at keys j <= i, which is the LOWER "
        "triangle (torch.tril), not torch.triu": lower.T,
        "the diagonal is missing: a token may attend to itself (j = i), so use tril(), not tril(-1); without it the "
        "first row is all False": torch.ones(T, T, dtype=torch.bool).tril(-1),
        "there is no causal mask at all (every entry True): position i may only look at keys j <= i, on and below "
        "the diagonal, torch.ones(T, T, dtype=torch.bool).tril()": torch.ones(T, T, dtype=torch.bool),
    }
    for cause, mask in named.items():
        if torch.equal(self_mask, mask):
            return f"your self_mask (T_out = {T}): {cause}"
    if torch.equal(self_mask, torch.ones(T, T, dtype=torch.bool).tril(1)):
        return (
            f"your self_mask (T_out = {T}) lets each position see one token ahead (tril(1)): query i may attend to keys "
            "j <= i, so use tril() (diagonal 0)"
        )
    for i in range(T):
        for j in range(T):
            if bool(self_mask[i, j]) != (j <= i):
                allowed = "may" if self_mask[i, j] else "may not"
                return (
                    f"in your self_mask (T_out = {T}) query {i} {allowed} attend to key {j}: True means 'may attend', and "
                    "position i may see itself and every earlier position, j <= i (on and below the diagonal), never a "
                    "later one"
                )
    return None


def _cross_mask_probe(answer):
    padding, _, cross_mask = _masks_for(answer)
    expected = padding[:, None, :].expand_as(cross_mask)
    T_out, T_in = cross_mask.shape[1:]
    named = {
        "the cross-attention must not be causal: the whole source is known before decoding starts, so every output "
        "position may read every real source token": expected & torch.ones(T_out, T_in, dtype=torch.bool).tril(),
        "the source padding is ignored: no output position may read a padded source token, so column j must be False "
        "where source_padding[b, j] is False": torch.ones_like(cross_mask),
    }
    for cause, mask in named.items():
        if torch.equal(cross_mask, mask):
            return f"in your cross_mask {cause}"
    if torch.equal(cross_mask, ~expected):
        return (
            "your cross_mask is True at the padded source tokens and False at the real ones: the mask is inverted (the "
            "opposite convention). True means 'may attend', so cross_mask[b, i, j] = source_padding[b, j], which is True "
            "for a real token"
        )
    for b in range(padding.shape[0]):
        for i in range(cross_mask.shape[1]):
            for j in range(padding.shape[1]):
                if bool(cross_mask[b, i, j]) != bool(padding[b, j]):
                    what = "a padded" if not padding[b, j] else "a real"
                    allowed = "may" if cross_mask[b, i, j] else "may not"
                    return (
                        f"in your cross_mask, output position {i} of sentence {b} {allowed} read source token {j}, {what} token: "
                        "the whole source is known before decoding, so every output position may read every REAL source "
                        "token and no padded one (cross_mask[b, i, j] = source_padding[b, j])"
                    )
    return None


add_properties(
    "6.1",
    [
        Property("the causal self-attention mask (query i sees keys j <= i)", _causal_self_mask_probe),
        Property("the cross-attention mask (every output position reads every real source token)", _cross_mask_probe),
    ],
)


def _probe_layer(norm_first: bool, seed: int = 71) -> DecoderLayer:
    return _random_layer(norm_first, torch.Generator().manual_seed(seed), d_model=16, heads=4)


def _layer_run(answer, layer, x, *, memory):
    with torch.no_grad():
        return probe_tensor(answer(layer, x.clone(), memory.clone()), tuple(x.shape))


def _memory_order_probe(answer):
    generator = torch.Generator().manual_seed(72)
    x, memory = torch.randn(2, 5, 16, generator=generator), torch.randn(2, 5, 16, generator=generator)
    for norm_first in (False, True):
        layer = _probe_layer(norm_first)
        got = _layer_run(answer, layer, x, memory=memory)
        again = _layer_run(answer, layer, x, memory=memory.flip(1))
        if not torch.allclose(got, again, atol=1e-5):
            return (
                f"reversing the order of the memory's {memory.shape[1]} positions moved the output by up to "
                f"{float((got - again).abs().max()):.3g}: the cross-attention's queries come from the decoder (h), its keys and values "
                "from the whole memory, unmasked and in any order: layer.cross_attn(h, memory, memory)"
            )
    return None


def _layer_causality_probe(answer):
    generator = torch.Generator().manual_seed(73)
    x, memory = torch.randn(2, 6, 16, generator=generator), torch.randn(2, 4, 16, generator=generator)
    for norm_first in (False, True):
        layer = _probe_layer(norm_first)
        got = _layer_run(answer, layer, x, memory=memory)
        changed = x.clone()
        changed[:, 3:] = torch.randn(2, 3, 16, generator=generator)
        again = _layer_run(answer, layer, changed, memory=memory)
        if torch.isnan(got).any():
            return "the output contains nan: a query whose every key is masked gets 0/0; True in the causal mask means 'may attend' (the lower triangle)"
        moved = float((again[:, :3] - got[:, :3]).abs().max())
        if moved > 1e-5:
            return (
                f"changing the decoder's tokens 3 to 5 moved the outputs at positions 0 to 2 by up to {moved:.3g}: the "
                "self-attention must be causal, mask=causal_mask(T_out) (True on and below the diagonal)"
            )
    return None


def _silence(layer: DecoderLayer, keep_feed_forward: bool = False) -> DecoderLayer:
    """Switch sub-layers off: their last linear map (and its bias) zero, so they output 0."""
    with torch.no_grad():
        for attention in (layer.self_attn, layer.cross_attn):
            for module in attention.modules():
                if (
                    isinstance(module, nn.Linear)
                    and module.out_features == 16
                    and module is list(m for m in attention.modules() if isinstance(m, nn.Linear))[-1]
                ):
                    module.weight.zero_()
                    if module.bias is not None:
                        module.bias.zero_()
        if not keep_feed_forward:
            last = [m for m in layer.feed_forward.modules() if isinstance(m, nn.Linear)][-1]
            last.weight.zero_()
            last.bias.zero_()
    return layer


def _residual_probe(answer):
    generator = torch.Generator().manual_seed(74)
    x, memory = 3.0 * torch.randn(2, 4, 16, generator=generator) + 1.0, torch.randn(2, 5, 16, generator=generator)
    for norm_first in (False, True):
        layer = _silence(_probe_layer(norm_first))
        with torch.no_grad():
            if norm_first:
                expected, rule = x.double(), "x + sublayer(norm(x)) three times, which gives x back"
            else:
                expected = layer.norm3(layer.norm2(layer.norm1(x))).double()
                rule = "norm(x + sublayer(x)) three times, which gives norm3(norm2(norm1(x)))"
        got = _layer_run(answer, layer, x, memory=memory)
        if torch.allclose(got, expected, atol=1e-4):
            continue
        kind = "pre-norm (norm_first=True)" if norm_first else "post-norm (norm_first=False)"
        if torch.allclose(got, torch.zeros_like(got), atol=1e-5) or (
            not norm_first and torch.allclose(got, layer.norm3(torch.zeros_like(x)).double(), atol=1e-4)
        ):
            detail = "the input does not come through at all: the residual connections are missing"
        elif norm_first and torch.allclose(got, layer.norm3(layer.norm2(layer.norm1(x))).double(), atol=1e-4):
            detail = "yours normalises the running x itself; in pre-norm only the sub-layer's INPUT is normalised, x = x + sublayer(norm(x))"
        elif not norm_first and torch.allclose(got, layer.norm2(layer.norm1(x)).double(), atol=1e-4):
            detail = (
                "yours ends after norm2: the third sub-layer, the feed-forward with its residual and norm3, is missing"
            )
        elif not norm_first and torch.allclose(got, layer.norm1(layer.norm1(layer.norm1(x))).double(), atol=1e-4):
            detail = (
                "yours uses norm1 three times: each sub-layer has its own norm, norm1, norm2 and norm3 in this order"
            )
        elif not norm_first and torch.allclose(got, x.double(), atol=1e-4):
            detail = "yours gives x back unnormalised: in post-norm the norm comes after the addition, x = norm(x + sublayer(x))"
        else:
            detail = (
                f"yours differs by up to {float((got - expected).abs().max()):.3g}: each sub-layer adds its output to its own input "
                "(the residual), and the norms are norm1, norm2, norm3 in this order"
            )
        return (
            f"with every sub-layer switched off (its output weights zero), a {kind} layer must compute {rule}; {detail}"
        )
    return None


def _feed_forward_reaches_probe(answer):
    generator = torch.Generator().manual_seed(75)
    x, memory = torch.randn(2, 4, 16, generator=generator), torch.randn(2, 5, 16, generator=generator)
    for norm_first in (False, True):
        layer = _silence(_probe_layer(norm_first), keep_feed_forward=True)
        with torch.no_grad():
            if norm_first:
                expected = x + layer.feed_forward(layer.norm3(x))
            else:
                h = layer.norm2(layer.norm1(x))
                expected = layer.norm3(h + layer.feed_forward(h))
        got = _layer_run(answer, layer, x, memory=memory)
        if not torch.allclose(got, expected.double(), atol=1e-4):
            return (
                "with both attentions switched off, the output must still carry the feed-forward sub-layer (norm3 and "
                f"layer.feed_forward, the third sub-layer); yours differs by up to {float((got - expected.double()).abs().max()):.3g}"
            )
    return None


_LAYER_SLIPS = {
    "the residual connections are missing: each sub-layer's input must be added to its output, x + sublayer(...)": {
        "residual": False
    },
    "the cross-attention attends to the decoder's own tokens: its keys and values must come from the encoder output, "
    "layer.cross_attn(h, memory, memory)": {"cross_source": "x"},
    "the self-attention is not causal: pass mask=causal_mask(T_out) (True on and below the diagonal), or each position "
    "reads the tokens after it": {"causal": False},
    "the sub-layers are in the wrong order: first causal self-attention (norm1), then cross-attention (norm2), then the "
    "feed-forward (norm3)": {"swap": True},
    "the cross-attention's queries come from the memory: its queries come from the decoder (h), its keys and values "
    "from the memory, layer.cross_attn(h, memory, memory)": {"slip": "cross queries"},
    "your causal mask is the opposite convention (True on the future positions): True means 'may attend', so pass "
    "the lower triangle with its diagonal, causal_mask(T_out)": {"slip": "inverted mask"},
    "the self-attention reads the memory: the self-attention reads the decoder's own tokens, layer.self_attn(h, h, h, "
    "mask=...); only the cross-attention reads the memory": {"slip": "self over memory"},
    "you add the normalised x back: in pre-norm only the sub-layer's INPUT is normalised and the result is added to the "
    "un-normalised x, x = x + sublayer(norm(x))": {"slip": "normalised residual"},
    "you normalise the sub-layer's output before adding it: post-norm normalises after adding, x = norm(x + sublayer(x))": {
        "slip": "norm inside"
    },
    "norm1 and norm3 are swapped: the norms are norm1, norm2, norm3 in the order of the sub-layers (self-attention, "
    "cross-attention, feed-forward)": {"slip": "norms 3 and 1"},
    "the feed-forward sub-layer has no residual: add its input to its output like the others": {
        "slip": "no ff residual"
    },
}


def _layer_slips_probe(answer):
    """Both kinds of layer, a memory as long as the decoder (so that every slip runs): the answer must not compute
    exactly one of the usual slips."""
    generator = torch.Generator().manual_seed(80)
    x, memory = torch.randn(2, 5, 16, generator=generator), torch.randn(2, 5, 16, generator=generator)
    for norm_first in (False, True):
        layer = _probe_layer(norm_first)
        got = _layer_run(answer, layer, x, memory=memory)
        with torch.no_grad():
            if torch.allclose(got, _decoder_layer_solution(layer, x, memory).double(), atol=1e-5):
                continue
            for cause, change in _LAYER_SLIPS.items():
                if torch.allclose(got, _wired(layer, x, memory, **change).double(), atol=1e-5):
                    return f"for a {'pre' if norm_first else 'post'}-norm layer: {cause}"
        if not norm_first:
            with torch.no_grad():
                if torch.allclose(got, _wired(layer, x, memory, norm_first=True).double(), atol=1e-5):
                    return (
                        "the layer norm is in the wrong place: this layer has norm_first=False (post-norm, as in the "
                        "original Transformer), so normalise after adding: x = norm(x + sublayer(x))"
                    )
        elif torch.allclose(got, _wired(layer, x, memory, norm_first=False).double(), atol=1e-5):
            return (
                "the layer norm is in the wrong place: this layer has norm_first=True (pre-norm), so normalise the input "
                "of each sub-layer and add the result to the un-normalised x: x = x + sublayer(norm(x))"
            )
    return None


def _memory_used_probe(answer):
    """The output must depend on the memory at all (the cross-attention's keys and values)."""
    generator = torch.Generator().manual_seed(81)
    x = torch.randn(2, 5, 16, generator=generator)
    layer = _probe_layer(False)
    got = _layer_run(answer, layer, x, memory=torch.randn(2, 4, 16, generator=generator))
    other = _layer_run(answer, layer, x, memory=torch.randn(2, 4, 16, generator=generator))
    if torch.allclose(got, other, atol=1e-6):
        return (
            "your output does not change when the memory does: the cross-attention's keys and values must come from the "
            "encoder output, layer.cross_attn(h, memory, memory), not from the decoder's own tokens"
        )
    return None


def _layer_pair(answer):
    generator = torch.Generator().manual_seed(82)
    with torch.no_grad():
        return answer(
            _probe_layer(True), torch.randn(2, 4, 16, generator=generator), torch.randn(2, 3, 16, generator=generator)
        )


add_properties(
    "6.2",
    [
        Property("no randomness (the same inputs give the same output)", determinism_probe(_layer_pair)),
        Property("the wiring (each sub-layer as the chapter wires it)", _layer_slips_probe),
        Property("the memory is read at all (the output depends on it)", _memory_used_probe),
        Property("the cross-attention reads the memory (its keys and values, in any order)", _memory_order_probe),
        Property("causality (no output position sees a later decoder token)", _layer_causality_probe),
        Property("the residual connections and the norms' places", _residual_probe),
        Property("the feed-forward sub-layer", _feed_forward_reaches_probe),
    ],
)


class _RecordingModel(nn.Module):
    """Reads tokens (1, T) -> (1, T, vocab); position t reads tokens 0..t, and token 1 too when ``leak`` (into 0).
    Records whether any token it was given lies outside 0 .. vocab_size - 1 (and then reads it as clamped)."""

    def __init__(self, vocab_size: int, T: int, leak: bool):
        super().__init__()
        allowed = causal_mask(T)
        if leak:
            allowed[0, 1] = True
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(76)
            self.inner = _OneLayerModel(vocab_size, allowed).eval()
        self.vocab_size = vocab_size
        self.outside: list[int] = []

    def forward(self, tokens):
        bad = (tokens < 0) | (tokens >= self.vocab_size)
        if bad.any():
            self.outside.append(int(tokens[bad][0]))
        return self.inner(tokens.clamp(0, self.vocab_size - 1))


def _vocabulary_probe(answer):
    vocab_size, T = 12, 6
    tokens = torch.tensor([[3, 11, 5, 11, 0, 11]])
    for leak in (True, False):
        model = _RecordingModel(vocab_size, T, leak)
        with torch.no_grad():
            answer(model, tokens.clone(), vocab_size)
        if model.outside:
            return (
                f"your test fed the model the token {model.outside[0]}, but token ids run from 0 to vocab_size - 1 = "
                f"{vocab_size - 1} (an embedding has no row {model.outside[0]}): change a token with (token + 1) % vocab_size, "
                "which wraps around the vocabulary"
            )
    return None


def _changed_token_probe(answer):
    """The same leak, once on tokens whose later ids are 0 and once on other tokens: an answer that finds it only
    on the second changes tokens to values they may already have (setting them to 0, say)."""
    vocab_size, T = 12, 6

    def says(tokens) -> bool | None:
        model = _RecordingModel(vocab_size, T, leak=True)
        with torch.no_grad():
            said = answer(model, torch.tensor([tokens]), vocab_size)
        if isinstance(said, torch.Tensor) and said.numel() == 1:
            said = bool(said)
        return said if isinstance(said, bool) else None

    tokens = [3, 0, 0, 0, 0, 0]
    if says(tokens) is False and says([3, 5, 7, 9, 4, 6]) is True:
        return (
            f"you missed a model in which position 0 reads token 1 on the tokens {tokens}, and found it on others: a change that leaves a "
            "token as it was (setting the later tokens to 0, when they are 0 already) shows nothing; make each changed token "
            "differ from the original, e.g. (token + 1) % vocab_size"
        )
    return None


add_properties(
    "6.3",
    [
        Property("changed tokens stay in the vocabulary (0 .. vocab_size - 1)", _vocabulary_probe),
        Property("a change must change the tokens (a different token at each changed position)", _changed_token_probe),
    ],
)


def _ff_inputs(d: int = 4):
    generator = torch.Generator().manual_seed(77)
    return torch.randn(2, 5, d, generator=generator)


def _ff_position_wise_probe(answer):
    generator = torch.Generator().manual_seed(78)
    x = _ff_inputs()
    W1, W2 = torch.randn(4, 6, generator=generator), torch.randn(6, 4, generator=generator)
    b1, b2 = torch.randn(6, generator=generator), torch.randn(4, generator=generator)
    got = probe_tensor(answer(x.clone(), W1, b1, W2, b2), (2, 5, 4))
    changed = x.clone()
    changed[:, 0] = 3.0 * torch.randn(2, 4, generator=generator)
    again = probe_tensor(answer(changed, W1, b1, W2, b2), (2, 5, 4))
    moved = float((again[:, 1:] - got[:, 1:]).abs().max())
    if moved > 1e-5:
        return (
            f"changing token 0 alone moved the outputs of tokens 1 to 4 by up to {moved:.3g}: the feed-forward is position-wise, "
            "each token's output depends on that token alone (no softmax, mean or sum over the positions)"
        )
    permutation = torch.tensor([3, 0, 4, 1, 2])
    permuted = probe_tensor(answer(x[:, permutation].clone(), W1, b1, W2, b2), (2, 5, 4))
    if torch.allclose(permuted, got[:, permutation], atol=1e-5):
        return None
    return (
        "permuting the positions of x (order 3, 0, 4, 1, 2) did not just permute your outputs the same way (they moved by up "
        f"to {float((permuted - got[:, permutation]).abs().max()):.3g}): the feed-forward is position-wise, each token's output "
        "depends on that token alone (no softmax, mean or sum over the positions)"
    )


def _ff_formula_probe(answer):
    x = _ff_inputs()
    eye = torch.eye(4)
    zero4 = torch.zeros(4)
    got = probe_tensor(answer(x.clone(), eye, zero4, eye, zero4), (2, 5, 4))
    relu = torch.relu(x).double()
    if not torch.allclose(got, relu, atol=1e-5):
        twice = probe_tensor(answer(x.clone(), 2 * eye, zero4, 2 * eye, zero4), (2, 5, 4))
        if torch.allclose(got, twice, atol=1e-6):
            return (
                "doubling W1 and W2 did not change your output: it ignores the W1, b1, W2, b2 it is given (a layer of its "
                "own, nn.Linear, has its own weights); compute relu(x @ W1 + b1) @ W2 + b2 with the given ones"
            )
        x64 = x.double()
        activations = {
            "you used GELU where the chapter's feed-forward has ReLU": torch.nn.functional.gelu(x64),
            "you used sigmoid where the feed-forward has ReLU, max(0, .)": torch.sigmoid(x64),
            "you used tanh where the feed-forward has ReLU, max(0, .)": torch.tanh(x64),
            "you used a softmax where the feed-forward has ReLU, max(0, .), applied to each number on its own": torch.softmax(
                x64, dim=-1
            ),
            "you used a leaky ReLU where the feed-forward has ReLU, max(0, .)": torch.nn.functional.leaky_relu(x64),
            "your output is normalised (a layer norm): the feed-forward is relu(x W1 + b1) W2 + b2 alone; the layer "
            "around it normalises": torch.nn.functional.layer_norm(relu, (4,)),
        }
        for cause, wrong in activations.items():
            if torch.allclose(got, wrong, atol=1e-5):
                return f"with W1 = W2 = I and zero biases the feed-forward is relu(x); {cause}"
        if torch.allclose(got, x.double() + relu, atol=1e-5):
            return "with W1 = W2 = I and zero biases the feed-forward is relu(x), but yours is x + relu(x): the residual is added by the layer around it, not inside the feed-forward"
        if torch.allclose(got, x.double(), atol=1e-5):
            return "with W1 = W2 = I and zero biases the feed-forward is relu(x), but yours gives x back: the ReLU between the two linear maps is missing"
        negative = x < 0
        sample = float(x[negative][0])
        return (
            f"with W1 = W2 = I and zero biases the feed-forward is relu(x), but for an input of {sample:.3g} yours gives "
            f"{float(got[negative][0]):.3g} (relu gives 0): use the ReLU, max(0, .), between the two layers"
        )
    b1 = torch.tensor([1.0, -1.0, 2.0, -2.0])
    got = probe_tensor(answer(x.clone(), torch.zeros(4, 4), b1, eye, zero4), (2, 5, 4))
    if torch.allclose(got, torch.zeros_like(got), atol=1e-7):
        return (
            f"with W1 = 0 the hidden layer is relu(b1) = {torch.relu(b1).tolist()} for every token, but yours gives zeros: "
            "b1 is missing (and b2?); the biases b1 and b2 are missing: relu(x W1 + b1) W2 + b2"
        )
    if torch.allclose(got, b1.double().expand_as(got), atol=1e-5):
        return (
            f"with W1 = 0 the hidden layer is relu(b1) = {torch.relu(b1).tolist()}, but yours gives b1 = {b1.tolist()} "
            "itself: b1 is added before the ReLU, inside it: relu(x W1 + b1); yours adds it after"
        )
    if not torch.allclose(got, torch.relu(b1).double().expand_as(got), atol=1e-5):
        return f"with W1 = 0 the hidden layer is relu(b1) = {torch.relu(b1).tolist()} for every token (b1 = {b1.tolist()} is added BEFORE the ReLU); yours gives {[round(float(v), 3) for v in got[0, 0]]}"
    b2 = torch.tensor([0.5, -1.5, 2.5, 0.0])
    got = probe_tensor(answer(x.clone(), eye, zero4, torch.zeros(4, 4), b2), (2, 5, 4))
    if not torch.allclose(got, b2.double().expand_as(got), atol=1e-5):
        return f"with W2 = 0 every output is b2 = {b2.tolist()} (added after the second layer, no ReLU on it); yours gives {[round(float(v), 3) for v in got[0, 0]]}"
    return None


def _ff_pair(answer):
    generator = torch.Generator().manual_seed(83)
    W1, W2 = torch.randn(4, 6, generator=generator), torch.randn(6, 4, generator=generator)
    b1, b2 = torch.randn(6, generator=generator), torch.randn(4, generator=generator)
    return answer(_ff_inputs(), W1, b1, W2, b2)


add_properties(
    "6.4",
    [
        Property("no randomness (the same inputs give the same output)", determinism_probe(_ff_pair)),
        Property("position-wise (each token on its own)", _ff_position_wise_probe),
        Property("the formula relu(x W1 + b1) W2 + b2, piece by piece", _ff_formula_probe),
    ],
)

_BOS, _EOS = 1, 2


class _ListeningModel(_ScriptedModel):
    """The scripted model of 6.5, recording every decoder input it is given."""

    def __init__(self, stop: list[int]):
        super().__init__(stop)
        self.inputs: list[torch.Tensor] = []

    def decode(self, generated, memory, source_padding=None):
        self.inputs.append(generated.clone())
        return super().decode(generated, memory, source_padding)


def _next_token(model: _ScriptedModel, source: torch.Tensor, b: int, *, prefix: list[int]) -> int:
    """The scripted model's most likely token after ``prefix`` for sequence b (not recorded as an input)."""
    saved, model.stop = model.stop, [model.stop[b]]
    try:
        return int(
            _ScriptedModel.decode(model, torch.tensor([prefix]), model.encode(source[b : b + 1]))[0, -1].argmax()
        )
    finally:
        model.stop = saved


def _greedy_run(answer, stop, max_len):
    source = torch.tensor([[3, 4, 5, 6, 7], [9, 3, 8, 4, 6], [5, 5, 3, 10, 4]])[: len(stop)]
    model = _ListeningModel(stop)
    with torch.no_grad():
        got = answer(model, source.clone(), max_len, _BOS, _EOS)
    if not isinstance(got, torch.Tensor) or got.dim() != 2 or got.shape[0] != len(stop):
        raise Inconclusive("the checker explains the type or shape")
    return model, source, got.long()


def _eos_probe(answer):
    max_len = 7
    stop = [
        3,
        9,
        5,
    ]  # sequence 0 writes EOS as its 3rd token, sequence 1 never (within max_len 7), sequence 2 as its 5th
    model, source, got = _greedy_run(answer, stop, max_len)
    for b in range(got.shape[0]):
        row = got[b].tolist()
        if _EOS in row:
            first = row.index(_EOS)
            later = [token for token in row[first + 1 :] if token != _EOS]
            if later:
                return (
                    f"sequence {b} wrote EOS at step {first} and then {later[0]}: a sequence that has written EOS is finished, "
                    "so every later position must be EOS, whatever the model predicts there (this model predicts other "
                    "tokens after EOS); stop once every sequence has finished"
                )
    return None


def _own_output_probe(answer):
    max_len = 7
    stop = [3, 9, 5]
    model, source, got = _greedy_run(answer, stop, max_len)
    for b in range(got.shape[0]):
        row = got[b].tolist()
        if row and row[0] == _BOS:
            return "your output starts with BOS: return the generated tokens after it"
        prefix = [_BOS]
        for token in row:
            if _EOS in prefix[1:]:
                break
            wanted = _next_token(model, source, b, prefix=prefix)
            if token != wanted:
                fed = [t for t in (x[b].tolist() for x in model.inputs) if t[: len(prefix)] != prefix[: len(t)]]
                extra = (
                    f"; the decoder was given {fed[0]}, which is not BOS followed by its own predictions (teacher forcing, or "
                    "another input)"
                    if fed
                    else ""
                )
                return (
                    f"for sequence {b} after BOS + your tokens {prefix[1:]} the model's most likely next token is {wanted}, but you "
                    f"wrote {token}{extra}: greedy decoding feeds the model its own output, appends the prediction at the LAST "
                    "position (logits[:, -1].argmax(-1)) and decodes again"
                )
            prefix.append(token)
    return None


def _length_probe(answer):
    max_len = 7
    for stop in ([3, 9, 5], [2, 3]):
        model, source, got = _greedy_run(answer, stop, max_len)
        # The scripted model says EOS as token number stop[b] (its prefix, BOS included, then has stop[b] tokens).
        finished = [min(s, max_len) for s in stop]
        wanted = max(finished)
        if got.shape[1] != wanted:
            return (
                f"with max_len = {max_len} and sequences that write EOS as their token number {[s for s in stop]} (or never "
                f"within max_len), decoding should stop after {wanted} steps (when every sequence has written EOS, or at "
                f"max_len), but your output has {got.shape[1]}"
            )
    return None


def _greedy_twice(answer):
    with torch.no_grad():
        return answer(
            _ScriptedModel([3, 9, 5]), torch.tensor([[3, 4, 5, 6, 7], [9, 3, 8, 4, 6], [5, 5, 3, 10, 4]]), 7, _BOS, _EOS
        )


add_properties(
    "6.5",
    [
        Property("no randomness (greedy takes the most likely token, the argmax)", determinism_probe(_greedy_twice)),
        Property("the model reads its own output (no teacher forcing)", _own_output_probe),
        Property("after EOS, only EOS (a finished sequence stays finished)", _eos_probe),
        Property("when to stop (every sequence finished, or max_len)", _length_probe),
    ],
)


class _FractionModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 3)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]))
            self.linear.bias.zero_()

    def forward(self, x):
        return self.linear(x)


def _fraction_of_examples_probe(answer):
    generator = torch.Generator().manual_seed(79)
    batches = []
    for size in (8, 3, 1):
        x = torch.randn(size, 2, generator=generator)
        labels = torch.randint(0, 3, (size,), generator=generator)
        batches.append((x, labels))
    model = _FractionModel().eval()
    with torch.no_grad():
        hits = [int((model(x).argmax(-1) == y).sum()) for x, y in batches]
    expected = sum(hits) / 12
    result = answer(model, batches)
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if not isinstance(result, (int, float)) or isinstance(result, bool):
        raise Inconclusive("the checker names the type")
    if abs(result - expected) <= 1e-6:
        return None
    batch_mean = sum(hit / len(y) for hit, (_, y) in zip(hits, batches)) / len(batches)
    if abs(result - batch_mean) < 1e-6:
        return (
            f"you averaged the accuracies of the batches ({[len(y) for _, y in batches]} examples): a batch of 1 then "
            "counts as much as one of 8. Count the correct predictions and divide by the number of examples"
        )
    if result == sum(hits) // 12 and sum(hits) < 12:
        return (
            f"you returned {result:g} for {sum(hits)} right of 12: // is floor division; divide with / to get the "
            f"fraction {expected:.4g}"
        )
    if result > 1:
        return f"you returned {result:.4g}, more than 1: an accuracy is the fraction of examples predicted right, between 0 and 1 ({sum(hits)} of 12 = {expected:.4g} here)"
    return (
        f"with batches of 8, 3 and 1 examples of which {hits} are predicted right, the accuracy is {sum(hits)} / 12 = {expected:.4g}; "
        f"you returned {result:.4g}: count the correct predictions (argmax over the classes, the last axis) and divide by the number of examples"
    )


add_properties(
    "6.6",
    [
        Property("the accuracy over all examples (correct predictions / examples)", _fraction_of_examples_probe),
        Property(
            "evaluation mode (eval() for the loop, no gradients, the mode given back)",
            probe_from_check(_check_accuracy),
        ),
    ],
)
