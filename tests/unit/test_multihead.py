"""attention_book.multihead (chapter 4): split/merge heads and MultiHeadAttention.

It computes exactly what ``torch.nn.MultiheadAttention`` computes (outputs and per-head
weights, with and without masks); narrow heads cost the same parameters whatever their
number, wide heads h times more; bad input is a clear ValueError.
"""

import re

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.analysis.cost import parameter_count

DEVICE = ab.default_device()
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def inputs(batch=2, T=6, d_model=16, seed=0):
    return torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def torch_mha(d_model=16, heads=4, bias=True):
    torch.manual_seed(0)
    return nn.MultiheadAttention(d_model, heads, bias=bias, batch_first=True).to(DEVICE).eval()


# ---------------------------------------------------------------------------------
# Equality with PyTorch


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


# ---------------------------------------------------------------------------------
# What self-attention does with order


def test_causal_output_at_t_ignores_later_tokens():
    torch.manual_seed(0)
    layer = ab.MultiHeadAttention(16, 4).to(DEVICE).eval()
    x = torch.randn(1, 8, 16, device=DEVICE)
    changed = x.clone()
    changed[:, 5:] = torch.randn(1, 3, 16, device=DEVICE)
    mask = ab.causal_mask(8, device=DEVICE)
    before, _ = layer(x, x, x, mask=mask)
    after, _ = layer(changed, changed, changed, mask=mask)
    torch.testing.assert_close(before[:, :5], after[:, :5])
    assert not torch.allclose(before[:, 5:], after[:, 5:])


def test_self_attention_without_positions_is_permutation_equivariant():
    torch.manual_seed(0)
    layer = ab.MultiHeadAttention(16, 4).to(DEVICE).eval()
    x = torch.randn(2, 6, 16, device=DEVICE)
    permutation = torch.tensor([3, 0, 5, 1, 4, 2], device=DEVICE)
    out, _ = layer(x, x, x)
    permuted_out, _ = layer(x[:, permutation], x[:, permutation], x[:, permutation])
    torch.testing.assert_close(permuted_out, out[:, permutation], atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------
# Narrow and wide heads (chapter 4)


def _two_relation_model(num_heads: int) -> ab.TokenClassifier:
    """Chapter 4's model: one encoder layer and a prediction at every position."""
    return ab.TokenClassifier(32, 16, d_model=32, num_heads=num_heads, d_ff=64, num_layers=1, max_len=8)


def test_the_model_has_the_same_parameters_for_any_number_of_narrow_heads():
    counts = {heads: parameter_count(_two_relation_model(heads)) for heads in (1, 2, 4, 8)}
    assert len(set(counts.values())) == 1


def test_wide_heads_have_h_times_the_projection_parameters():
    d_model, heads = 12, 3
    wide = ab.MultiHeadAttention(d_model, heads, d_head=d_model)
    assert wide.q_proj.weight.shape == (heads * d_model, d_model) and wide.out_proj.weight.shape == (
        d_model,
        heads * d_model,
    )
    assert parameter_count(wide) == 4 * heads * d_model**2 + 3 * heads * d_model + d_model
    assert parameter_count(ab.MultiHeadAttention(d_model, heads)) == 4 * d_model**2 + 4 * d_model
    x = torch.randn(2, 5, d_model)
    out, weights = wide(x, x, x)
    assert out.shape == (2, 5, d_model) and weights.shape == (2, heads, 5, 5)
    fast, _ = wide(x, x, x, need_weights=False)
    torch.testing.assert_close(fast, out)


def test_any_head_size_is_allowed_when_given_even_if_heads_do_not_divide_d_model():
    layer = ab.MultiHeadAttention(10, 3, d_head=5)
    x = torch.randn(1, 4, 10)
    assert layer(x, x, x)[0].shape == (1, 4, 10)
    with pytest.raises(ValueError, match="d_head must be a positive integer"):
        ab.MultiHeadAttention(10, 3, d_head=0)


def test_split_heads_checks_its_inputs_and_accepts_non_contiguous_tensors():
    x = torch.randn(2, 8, 5).transpose(1, 2)  # (2, 5, 8), not contiguous
    torch.testing.assert_close(ab.merge_heads(ab.split_heads(x, 4)), x)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        ab.split_heads(x, 0)
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        ab.split_heads([[1.0]], 1)
    with pytest.raises(ValueError, match="not divisible"):
        ab.split_heads(x, 3)


def test_split_heads_gives_head_i_a_contiguous_block_of_features():
    x = torch.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    heads = ab.split_heads(x, 4)  # (2, 4, 3, 2)
    assert heads.shape == (2, 4, 3, 2)
    for i in range(4):
        torch.testing.assert_close(heads[:, i], x[..., 2 * i : 2 * i + 2])


# ---------------------------------------------------------------------------------
# Bad input

CASES = [
    (
        "heads do not divide d_model",
        lambda: ab.MultiHeadAttention(10, 3),
        r"d_model=10 is not divisible by num_heads=3",
    ),
    (
        "query with wrong feature size",
        lambda: ab.MultiHeadAttention(8, 2)(torch.randn(1, 3, 5), torch.randn(1, 3, 8), torch.randn(1, 3, 8)),
        r"query has 5 features .* expects d_model=8",
    ),
    (
        "unbatched input",
        lambda: ab.MultiHeadAttention(8, 2)(torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8)),
        r"query must have 3 dimensions \(batch, tokens, d_model\).*\(3, 8\)",
    ),
    (
        "mask of wrong shape",
        lambda: ab.MultiHeadAttention(8, 2)(
            torch.randn(1, 3, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8), mask=torch.ones(3, 3, dtype=torch.bool)
        ),
        r"mask of shape \(3, 3\) cannot be broadcast",
    ),
    (
        "fast-path mask of wrong dtype",
        lambda: ab.MultiHeadAttention(8, 2)(
            torch.randn(1, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8), mask=torch.ones(3, 3), need_weights=False
        ),
        r"mask must be a boolean tensor",
    ),
    (
        "from_torch of the wrong module",
        lambda: ab.MultiHeadAttention.from_torch(torch.nn.Linear(2, 2)),
        r"expected a torch.nn.MultiheadAttention, but a Linear",
    ),
]


@pytest.mark.parametrize("call, pattern", [(c, p) for _, c, p in CASES], ids=[name for name, _, _ in CASES])
def test_bad_input_raises_a_clear_value_error(call, pattern):
    with pytest.raises(ValueError) as raised:
        call()
    assert re.search(pattern, str(raised.value)), f"message was: {raised.value}"
