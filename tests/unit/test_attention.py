"""attention_book.attention (chapter 1): softmax, scaled dot-product attention and the masks.

Equality with PyTorch's own functions, the properties the book teaches, and clear errors.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab

DEVICE = ab.default_device()


def random_qkv(batch=2, heads=3, T_q=5, T_k=7, d_k=8, d_v=4, seed=0):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, T_q, d_k, generator=generator)
    k = torch.randn(batch, heads, T_k, d_k, generator=generator)
    v = torch.randn(batch, heads, T_k, d_v, generator=generator)
    return q.to(DEVICE), k.to(DEVICE), v.to(DEVICE)


def test_matches_torch_without_mask():
    q, k, v = random_qkv()
    out, _ = ab.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-5, rtol=1e-5)


def test_matches_torch_with_boolean_mask():
    q, k, v = random_qkv()
    mask = torch.rand(5, 7, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[:, 0] = True  # every query may attend somewhere
    mask = mask.to(DEVICE)
    out, _ = ab.scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-5)


def test_matches_torch_causal():
    q, k, v = random_qkv(T_q=6, T_k=6)
    out, _ = ab.scaled_dot_product_attention(q, k, v, mask=ab.causal_mask(6, device=DEVICE))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)


def test_temperature_divides_the_scores():
    q, k, v = random_qkv()
    out, weights = ab.scaled_dot_product_attention(q, k, v, temperature=2.0)
    expected = torch.softmax(q @ k.transpose(-2, -1) / (math.sqrt(8) * 2.0), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(out, expected @ v)
    torch.testing.assert_close(
        ab.attention_scores(q, k, temperature=2.0), q @ k.transpose(-2, -1) / (math.sqrt(8) * 2.0)
    )


def test_weight_rows_sum_to_one_and_masked_positions_get_zero():
    q, k, v = random_qkv()
    mask = torch.rand(2, 1, 5, 7, generator=torch.Generator().manual_seed(2)) > 0.5
    mask[..., 3] = True
    _, weights = ab.scaled_dot_product_attention(q, k, v, mask=mask.to(DEVICE))
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 5, device=DEVICE))
    assert (weights.cpu()[~mask.expand(2, 3, 5, 7)] == 0).all()


def test_query_that_may_attend_to_nothing_gets_zero_weights_not_nan():
    q, k, v = random_qkv(T_q=2, T_k=3)
    mask = torch.tensor([[True, True, True], [False, False, False]], device=DEVICE)
    out, weights = ab.scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all()
    assert (weights[..., 1, :] == 0).all()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=1, max_size=12),
    st.floats(0.05, 10.0),
)
def test_softmax_is_a_distribution_for_any_scores(scores, temperature):
    weights = ab.softmax(torch.tensor(scores) / temperature)
    assert (weights >= 0).all()
    assert math.isclose(weights.sum().item(), 1.0, rel_tol=1e-5)


def test_softmax_equals_torch_softmax_on_extreme_scores():
    scores = torch.tensor([[1000.0, 999.0, -1000.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(ab.softmax(scores), torch.softmax(scores, dim=-1))


def test_causal_mask_is_lower_triangular():
    assert ab.causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]


def test_padding_mask_marks_real_tokens():
    assert ab.padding_mask([2, 3], 4).tolist() == [[True, True, False, False], [True, True, True, False]]


# -- a query against a small store (chapter 2 starts here) -------------------------------

KEYS = torch.tensor([[10.0, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]])
VALUES = torch.tensor([[1.0, 0, 0], [10, 0, 0], [100, 5, 0], [1000, 6, 0]])


def test_query_matching_one_key_returns_its_value():
    out, _ = ab.scaled_dot_product_attention(torch.tensor([[0.0, 10, 0]]), KEYS, VALUES)
    torch.testing.assert_close(out, torch.tensor([[10.0, 0, 0]]), atol=1e-3, rtol=1e-4)


# -- bad input ---------------------------------------------------------------------------

q = torch.randn(2, 5, 8)
k = torch.randn(2, 7, 8)
v = torch.randn(2, 7, 4)

CASES = [
    (
        "query is 1-D",
        lambda: ab.scaled_dot_product_attention(torch.randn(8), k, v),
        r"q must have at least 2 dimensions .* shape \(8\)",
    ),
    (
        "q and k differ in d_k",
        lambda: ab.scaled_dot_product_attention(q, torch.randn(2, 7, 6), v),
        r"same number of features d_k.*q has 8.*k has 6",
    ),
    (
        "k and v differ in tokens",
        lambda: ab.scaled_dot_product_attention(q, k, torch.randn(2, 6, 4)),
        r"k has 7 tokens.*v has 6",
    ),
    (
        "integer queries",
        lambda: ab.scaled_dot_product_attention(q.long(), k, v),
        r"q must hold floating-point numbers.*torch.int64",
    ),
    (
        "mask of wrong shape",
        lambda: ab.scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 6, dtype=torch.bool)),
        r"mask of shape \(5, 6\) cannot be broadcast.*\(2, 5, 7\)",
    ),
    (
        "mask of wrong dtype",
        lambda: ab.scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 7)),
        r"mask must be a boolean tensor.*torch.float32",
    ),
    (
        "zero temperature",
        lambda: ab.scaled_dot_product_attention(q, k, v, temperature=0.0),
        r"temperature must be positive.*0.0",
    ),
    (
        "negative temperature",
        lambda: ab.scaled_dot_product_attention(q, k, v, temperature=-1),
        r"temperature must be positive.*-1",
    ),
    ("not a tensor", lambda: ab.scaled_dot_product_attention([[1.0]], k, v), r"q must be a torch.Tensor.*list"),
    ("causal mask of length 0", lambda: ab.causal_mask(0), r"T\b.*must be a positive integer.*\b0\b"),
    ("padding lengths longer than T", lambda: ab.padding_mask([2, 9], 5), r"between 0 and T=5.*9"),
]


@pytest.mark.parametrize("call, pattern", [(c, p) for _, c, p in CASES], ids=[name for name, _, _ in CASES])
def test_bad_input_raises_a_clear_value_error(call, pattern):
    with pytest.raises(ValueError) as raised:
        call()
    assert re.search(pattern, str(raised.value)), f"message was: {raised.value}"
