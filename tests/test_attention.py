"""Chapter 1-3 reference functions: equality with PyTorch and the properties the book teaches."""

import math

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


# -- soft vs hard (chapter 3) -------------------------------------------------------------


def test_hardmax_is_one_hot():
    weights = ab.hardmax(torch.tensor([[0.1, 2.0, -1.0], [5.0, 1.0, 4.0]]))
    assert weights.tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


def test_hardmax_ties_share_the_weight_equally():
    assert ab.hardmax(torch.tensor([1.0, 3.0, 3.0, 0.0])).tolist() == [0.0, 0.5, 0.5, 0.0]


def test_large_inverse_temperature_turns_softmax_into_hardmax():
    scores = torch.tensor([0.3, 1.2, -0.5, 1.0])
    torch.testing.assert_close(ab.softmax(200.0 * scores), ab.hardmax(scores))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False, width=32), min_size=1, max_size=16))
def test_sparsemax_sums_to_one_and_is_non_negative(scores):
    weights = ab.sparsemax(torch.tensor(scores))
    assert (weights >= 0).all()
    assert math.isclose(weights.sum().item(), 1.0, rel_tol=1e-5, abs_tol=1e-5)


def test_sparsemax_gives_exact_zeros_to_low_scores():
    weights = ab.sparsemax(torch.tensor([2.0, 1.8, -1.0, 0.0]))
    torch.testing.assert_close(weights, torch.tensor([0.6, 0.4, 0.0, 0.0]))
    assert (weights[2:] == 0).all()


def test_sparsemax_along_another_dimension():
    scores = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ab.sparsemax(scores, dim=0), ab.sparsemax(scores.T, dim=-1).T)


def test_entropy_of_uniform_and_one_hot():
    assert math.isclose(ab.entropy(torch.full((4,), 0.25)).item(), math.log(4), rel_tol=1e-6)
    assert ab.entropy(torch.tensor([0.0, 1.0, 0.0])).item() == 0.0


def test_top_k_keeps_k_weights():
    weights = ab.top_k_weights(torch.tensor([0.1, 3.0, 2.0, -1.0]), k=2)
    assert (weights > 0).sum() == 2 and weights[0] == 0 and weights[3] == 0


def test_hard_attention_passes_no_gradient_back_to_the_scores():
    scores = torch.tensor([0.5, 2.0, 1.0], requires_grad=True)
    assert not ab.hardmax(scores).requires_grad  # piecewise constant: derivative 0 almost everywhere
    soft = ab.softmax(scores) @ torch.tensor([1.0, 2.0, 3.0])
    soft.backward()
    assert (scores.grad != 0).any()


# -- the key-value store (chapter 2) ------------------------------------------------------

KEYS = torch.tensor([[10.0, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]])
VALUES = torch.tensor([[1.0, 0, 0], [10, 0, 0], [100, 5, 0], [1000, 6, 0]])


def test_query_matching_one_key_returns_its_value():
    out, _ = ab.scaled_dot_product_attention(torch.tensor([[0.0, 10, 0]]), KEYS, VALUES)
    torch.testing.assert_close(out, torch.tensor([[10.0, 0, 0]]), atol=1e-3, rtol=1e-4)


def test_query_matching_two_keys_returns_their_average():
    value, weights = ab.soft_lookup(torch.tensor([0.0, 0, 10]), KEYS, VALUES)
    torch.testing.assert_close(value, torch.tensor([550.0, 5.5, 0]), atol=1e-3, rtol=1e-4)
    torch.testing.assert_close(weights, torch.tensor([0.0, 0.0, 0.5, 0.5]), atol=1e-6, rtol=0)


# -- positions (chapter 5) ---------------------------------------------------------------


def test_sinusoidal_table_matches_its_closed_form():
    table = ab.sinusoidal_encoding(50, 16)
    for p in (0, 1, 7, 49):
        for i in range(8):
            angle = p / 10000 ** (2 * i / 16)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_sinusoidal_offset_is_a_rotation_of_each_frequency_pair():
    table = ab.sinusoidal_encoding(40, 8).double()
    k = 5
    for i in range(4):
        omega = 1 / 10000 ** (2 * i / 8)
        rotation = torch.tensor(
            [[math.cos(omega * k), -math.sin(omega * k)], [math.sin(omega * k), math.cos(omega * k)]],
            dtype=torch.float64,
        )
        pair = table[:, 2 * i : 2 * i + 2]  # (P, 2) rows (sin, cos)
        torch.testing.assert_close(pair[k:], pair[:-k] @ rotation, atol=1e-5, rtol=1e-5)


def test_rotary_scores_depend_only_on_offset():
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 8, generator=generator), torch.randn(1, 8, generator=generator)
    positioned_q = ab.apply_rotary(q.expand(10, 8))
    positioned_k = ab.apply_rotary(k.expand(10, 8))
    scores = positioned_q @ positioned_k.T  # (10, 10)
    torch.testing.assert_close(scores[3, 1], scores[7, 5])
    torch.testing.assert_close(scores[2, 6], scores[4, 8])
