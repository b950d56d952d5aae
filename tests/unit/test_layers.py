"""attention_book.layers (chapters 4-7): the residual block, the layers and the one loop over them.

Layers compute exactly what PyTorch's own modules compute; the one layer loop
(``run_stack`` / ``Encoder.run_layers``) equals running the layers by hand.
"""

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.layers import key_padding_mask, residual, run_stack

DEVICE = ab.default_device()
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def inputs(batch=2, T=6, d_model=16, seed=0):
    return torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


# ---------------------------------------------------------------------------------
# residual(): the only place pre- and post-norm differ


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_is_post_norm_or_pre_norm_as_asked(norm_first):
    torch.manual_seed(0)
    sublayer, norm = nn.Linear(8, 8), nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 3, 8)
    out = residual(x, sublayer, norm=norm, dropout=nn.Dropout(0.0), norm_first=norm_first)
    post, pre = norm(x + sublayer(x)), x + sublayer(norm(x))
    torch.testing.assert_close(out, pre if norm_first else post)
    assert not torch.allclose(pre, post)  # the two formulas really differ here


def test_residual_applies_dropout_to_the_sublayer_only():
    x = torch.randn(4, 5, 8)
    dropout = nn.Dropout(1.0).train()  # drops every sublayer output
    torch.testing.assert_close(residual(x, lambda h: h * 3, norm=nn.Identity(), dropout=dropout, norm_first=True), x)
    torch.testing.assert_close(
        residual(x, lambda h: h * 3, norm=nn.LayerNorm(8), dropout=dropout, norm_first=False), nn.LayerNorm(8)(x)
    )


# ---------------------------------------------------------------------------------
# Layers: equal to PyTorch's


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_from_torch(norm_first, activation):
    torch.manual_seed(0)
    reference = (
        nn.TransformerEncoderLayer(
            16, 4, 32, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
        )
        .to(DEVICE)
        .eval()
    )
    ours = ab.EncoderLayer.from_torch(reference).eval()
    x = inputs()
    real = ab.padding_mask([6, 3], 6).to(DEVICE)
    expected = reference(x, src_key_padding_mask=~real)
    out = ours(x, mask=real[:, None, None, :])
    # PyTorch's fast path may leave padded positions as they are; compare real tokens.
    torch.testing.assert_close(out[real], expected[real], **TOLERANCE)
    torch.testing.assert_close(ours(x), reference(x), **TOLERANCE)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_from_torch(norm_first):
    torch.manual_seed(0)
    reference = (
        nn.TransformerDecoderLayer(16, 4, 32, dropout=0.1, batch_first=True, norm_first=norm_first).to(DEVICE).eval()
    )
    ours = ab.DecoderLayer.from_torch(reference).eval()
    target, memory = inputs(T=5), inputs(T=7, seed=1)
    memory_real = ab.padding_mask([7, 4], 7).to(DEVICE)
    future = ab.causal_mask(5, device=DEVICE)
    expected = reference(target, memory, tgt_mask=~future, memory_key_padding_mask=~memory_real)
    out = ours(target, memory, memory_mask=memory_real[:, None, None, :])  # causal by default
    torch.testing.assert_close(out, expected, **TOLERANCE)
    torch.testing.assert_close(ours(target, memory, causal=False), reference(target, memory), **TOLERANCE)


def test_decoder_layer_keeps_self_and_cross_attention_weights():
    layer = ab.DecoderLayer(16, 4, 32).to(DEVICE)
    layer(inputs(T=5), inputs(T=7, seed=1))
    assert layer.self_attn.last_weights.shape == (2, 4, 5, 5)
    assert layer.cross_attn.last_weights.shape == (2, 4, 5, 7)
    assert (layer.self_attn.last_weights.triu(1) == 0).all()


# ---------------------------------------------------------------------------------
# The one loop over layers: run_stack, Encoder.run_layers, Encoder.hidden_states


def _encoder(norm_first=False, causal=False, num_layers=3, seed=0):
    torch.manual_seed(seed)
    return ab.Encoder(
        12, d_model=16, num_heads=2, d_ff=32, num_layers=num_layers, norm_first=norm_first, causal=causal
    ).eval()


TOKENS = torch.tensor([[5, 6, 7, 8, 9], [3, 4, 5, 0, 0]])
REAL = torch.tensor([[True] * 5, [True, True, True, False, False]])


def _by_hand(encoder, x, padding_mask, start=0):
    """Every layer from ``start`` up, called one by one with the (batch, 1, 1, T) mask (and causal mask)."""
    mask = padding_mask[:, None, None, :]
    if encoder.causal:
        mask = mask & ab.causal_mask(x.shape[1])
    states = [x]
    for layer in encoder.layers[start:]:
        x = layer(x, mask)
        states.append(x)
    return states


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_run_stack_equals_running_the_layers_by_hand(norm_first, causal):
    encoder = _encoder(norm_first, causal)
    with torch.no_grad():
        x = encoder.embedding(TOKENS)
        states = _by_hand(encoder, x, REAL)
        expected = encoder.final_norm(states[-1]) if norm_first else states[-1]
        out = run_stack(encoder.layers, x, REAL, causal=causal, final_norm=encoder.final_norm)
        torch.testing.assert_close(out, expected)
        kept = run_stack(encoder.layers, x, REAL, causal=causal, final_norm=encoder.final_norm, keep_all=True)
    assert len(kept) == 4
    for mine, reference in zip(kept[:-1], states[:-1]):
        torch.testing.assert_close(mine, reference)
    torch.testing.assert_close(kept[-1], expected)  # the last one normalised


@pytest.mark.parametrize("start", [0, 1, 2, 3])
def test_run_layers_from_layer_k_continues_where_the_first_k_layers_stop(start):
    encoder = _encoder()
    with torch.no_grad():
        states = _by_hand(encoder, encoder.embedding(TOKENS), REAL)
        out = encoder.run_layers(states[start], REAL, start=start)
        kept = encoder.run_layers(states[start], REAL, start=start, keep_all=True)
    torch.testing.assert_close(out, states[-1])
    assert len(kept) == len(encoder.layers) - start + 1
    torch.testing.assert_close(kept[-1], states[-1])


def test_run_layers_rejects_a_start_beyond_the_stack():
    encoder = _encoder()
    x = torch.zeros(1, 2, 16)
    for start in (-1, 4, 1.0):
        with pytest.raises(ValueError, match="start"):
            encoder.run_layers(x, start=start)


@pytest.mark.parametrize("norm_first", [False, True])
def test_hidden_states_are_the_embedding_and_every_layers_output_ending_with_forward(norm_first):
    encoder = _encoder(norm_first)
    with torch.no_grad():
        hidden = encoder.hidden_states(TOKENS, REAL)
        forward = encoder(TOKENS, REAL)
        by_hand = _by_hand(encoder, encoder.embedding(TOKENS), REAL)
    assert len(hidden) == len(encoder.layers) + 1 == 4
    assert all(h.shape == (2, 5, 16) for h in hidden)
    torch.testing.assert_close(hidden[0], by_hand[0])
    torch.testing.assert_close(hidden[-1], forward)
    if norm_first:  # a pre-norm stack's last state is the final layer norm of the last layer's output
        torch.testing.assert_close(hidden[-1], encoder.final_norm(by_hand[-1]))
        assert not torch.allclose(hidden[-1], by_hand[-1])
    else:
        torch.testing.assert_close(hidden[-1], by_hand[-1])
    for mine, reference in zip(hidden[1:-1], by_hand[1:-1]):
        torch.testing.assert_close(mine, reference)


def test_key_padding_mask_broadcasts_over_heads_and_queries():
    mask = key_padding_mask(REAL, TOKENS.shape)
    assert mask.shape == (2, 1, 1, 5) and mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], REAL)
    assert key_padding_mask(None, (2, 5)) is None


@pytest.mark.parametrize(
    "padding_mask, message",
    [
        (torch.ones(2, 4, dtype=torch.bool), r"\(2, 5\)"),
        (torch.ones(2, 5), "boolean"),
        ([[True] * 5] * 2, "torch.Tensor"),
    ],
)
def test_key_padding_mask_rejects_a_mask_that_does_not_fit(padding_mask, message):
    with pytest.raises(ValueError, match=message):
        key_padding_mask(padding_mask, (2, 5))
