"""attention_book.key_value (chapter 2): the soft lookup and one attention head with W_Q, W_K, W_V."""

import pytest
import torch

import attention_book as ab

KEYS = torch.tensor([[10.0, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]])
VALUES = torch.tensor([[1.0, 0, 0], [10, 0, 0], [100, 5, 0], [1000, 6, 0]])


def test_query_matching_two_keys_returns_their_average():
    value, weights = ab.soft_lookup(torch.tensor([0.0, 0, 10]), KEYS, VALUES)
    torch.testing.assert_close(value, torch.tensor([550.0, 5.5, 0]), atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(weights, torch.tensor([0.0, 0.0, 0.5, 0.5]), atol=1e-6, rtol=0)


def test_soft_lookup_is_one_row_of_scaled_dot_product_attention():
    query = torch.tensor([1.0, 2.0, 0.5])
    value, weights = ab.soft_lookup(query, KEYS / 10, VALUES, temperature=0.5)
    out, expected = ab.scaled_dot_product_attention(query[None], KEYS / 10, VALUES, temperature=0.5)
    torch.testing.assert_close(value, out[0])
    torch.testing.assert_close(weights, expected[0])


def test_single_head_is_attention_over_its_own_projections():
    torch.manual_seed(0)
    head = ab.SingleHeadAttention(6, d_k=4, d_v=3)
    x, context = torch.randn(2, 5, 6), torch.randn(2, 7, 6)
    out, weights = head(x, context)
    expected, expected_weights = ab.scaled_dot_product_attention(
        head.q_proj(x), head.k_proj(context), head.v_proj(context)
    )
    assert out.shape == (2, 5, 3) and weights.shape == (2, 5, 7)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(head.last_weights, weights.detach())
    self_out, _ = head(x)  # one input: self-attention
    torch.testing.assert_close(self_out, head(x, x)[0])


def test_single_head_applies_the_mask():
    torch.manual_seed(0)
    head = ab.SingleHeadAttention(4, d_k=4)
    _, weights = head(torch.randn(1, 3, 4), mask=ab.causal_mask(3))
    assert (weights[0].triu(1) == 0).all()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: ab.soft_lookup(torch.zeros(1, 3), KEYS, VALUES), r"query must have 1 dimensions"),
        (lambda: ab.soft_lookup(torch.zeros(3), KEYS[0], VALUES), r"keys must have 2 dimensions"),
        (lambda: ab.SingleHeadAttention(4, d_k=2)(torch.zeros(1, 3, 5)), r"x_query has 5 features .* d_model=4"),
    ],
)
def test_bad_input_says_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()
