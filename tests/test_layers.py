"""Multi-head attention and Transformer layers compute exactly what PyTorch's own modules compute."""

import pytest
import torch
from torch import nn

import attention_book as ab

DEVICE = ab.default_device()
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def inputs(batch=2, T=6, d_model=16, seed=0):
    return torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def torch_mha(d_model=16, heads=4, bias=True):
    torch.manual_seed(0)
    return nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True).to(DEVICE).eval()


@pytest.mark.parametrize("bias", [True, False])
def test_from_torch_matches_multihead_attention_outputs_and_per_head_weights(bias):
    reference = torch_mha(bias=bias)
    ours = ab.MultiHeadAttention.from_torch(reference).eval()
    query, memory = inputs(T=5), inputs(T=7, seed=1)
    expected, expected_weights = reference(query, memory, memory, average_attn_weights=False)
    out, weights = ours(query, memory, memory)
    torch.testing.assert_close(out, expected, **TOLERANCE)
    torch.testing.assert_close(weights, expected_weights, **TOLERANCE)
    assert weights.shape == (2, 4, 5, 7)


def test_from_torch_matches_with_causal_mask():
    reference = torch_mha()
    ours = ab.MultiHeadAttention.from_torch(reference).eval()
    x = inputs()
    allowed = ab.causal_mask(6, device=DEVICE)
    expected, expected_weights = reference(x, x, x, attn_mask=~allowed, average_attn_weights=False)
    out, weights = ours(x, x, x, mask=allowed)
    torch.testing.assert_close(out, expected, **TOLERANCE)
    torch.testing.assert_close(weights, expected_weights, **TOLERANCE)


def test_from_torch_matches_with_padding_mask():
    reference = torch_mha()
    ours = ab.MultiHeadAttention.from_torch(reference).eval()
    x = inputs()
    real = ab.padding_mask([6, 4], 6).to(DEVICE)  # (batch, T)
    expected, expected_weights = reference(x, x, x, key_padding_mask=~real, average_attn_weights=False)
    out, weights = ours(x, x, x, mask=real[:, None, :])
    torch.testing.assert_close(out, expected, **TOLERANCE)
    torch.testing.assert_close(weights, expected_weights, **TOLERANCE)


def test_fast_path_without_weights_gives_the_same_output():
    ours = ab.MultiHeadAttention.from_torch(torch_mha()).eval()
    x = inputs()
    allowed = ab.causal_mask(6, device=DEVICE)
    with_weights, _ = ours(x, x, x, mask=allowed)
    fast, weights = ours(x, x, x, mask=allowed, need_weights=False)
    assert weights is None
    torch.testing.assert_close(fast, with_weights, **TOLERANCE)


def test_last_weights_are_kept_for_plotting():
    layer = ab.MultiHeadAttention(16, 4).to(DEVICE)
    x = inputs()
    _, weights = layer(x, x, x)
    torch.testing.assert_close(layer.last_weights, weights.detach())


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_from_torch(norm_first, activation):
    torch.manual_seed(0)
    reference = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
    ).to(DEVICE).eval()
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
    reference = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.1, batch_first=True, norm_first=norm_first).to(DEVICE).eval()
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


def test_encoder_is_causal_when_asked():
    torch.manual_seed(0)
    encoder = ab.Encoder(vocab_size=12, d_model=16, num_heads=2, d_ff=32, num_layers=2, causal=True).to(DEVICE).eval()
    tokens = torch.randint(0, 12, (1, 7)).to(DEVICE)
    changed = tokens.clone()
    changed[0, 4:] = (changed[0, 4:] + 1) % 12
    torch.testing.assert_close(encoder(tokens)[:, :4], encoder(changed)[:, :4])
    assert all(w.shape == (1, 2, 7, 7) for w in encoder.attention_weights())


def test_encoder_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    encoder = ab.Encoder(vocab_size=12, d_model=16, num_heads=2, d_ff=32, num_layers=2).to(DEVICE).eval()
    short = torch.tensor([[5, 6, 7]], device=DEVICE)
    padded = torch.tensor([[5, 6, 7, 0, 0]], device=DEVICE)
    mask = torch.tensor([[True, True, True, False, False]], device=DEVICE)
    torch.testing.assert_close(encoder(padded, mask)[:, :3], encoder(short), **TOLERANCE)


def test_classifier_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    model = ab.EncoderClassifier(12, 3, d_model=16, num_heads=2, d_ff=32, num_layers=1).to(DEVICE).eval()
    short = torch.tensor([[5, 6, 7]], device=DEVICE)
    padded = torch.tensor([[5, 6, 7, 0]], device=DEVICE)
    torch.testing.assert_close(model(padded, torch.tensor([[True, True, True, False]], device=DEVICE)), model(short))


def test_greedy_decode_stops_at_eos_and_pads_with_eos():
    class Scripted(nn.Module):
        """Emits tokens 5, 6, EOS for sequence 0 and EOS at once for sequence 1."""

        def encode(self, source, padding=None):
            return torch.zeros(source.shape[0], source.shape[1], 4)

        def decode(self, generated, memory, source_padding=None):
            step = generated.shape[1] - 1
            script = torch.tensor([[5, 6, ab.EOS, 9], [ab.EOS, 9, 9, 9]])
            logits = torch.zeros(generated.shape[0], generated.shape[1], 10)
            logits[torch.arange(2), -1, script[:, step]] = 1.0
            return logits

    out = ab.greedy_decode(Scripted(), torch.zeros(2, 3, dtype=torch.long), max_len=6, bos=ab.BOS, eos=ab.EOS)
    assert out.tolist() == [[5, 6, ab.EOS], [ab.EOS, ab.EOS, ab.EOS]]
