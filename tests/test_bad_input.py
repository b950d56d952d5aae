"""Bad input raises ValueError saying what was expected and what was given."""

import re

import pytest
import torch

import attention_book as ab

q = torch.randn(2, 5, 8)
k = torch.randn(2, 7, 8)
v = torch.randn(2, 7, 4)

CASES = [
    ("query is 1-D", lambda: ab.scaled_dot_product_attention(torch.randn(8), k, v), r"q must have at least 2 dimensions .* shape \(8\)"),
    ("q and k differ in d_k", lambda: ab.scaled_dot_product_attention(q, torch.randn(2, 7, 6), v), r"same number of features d_k.*q has 8.*k has 6"),
    ("k and v differ in tokens", lambda: ab.scaled_dot_product_attention(q, k, torch.randn(2, 6, 4)), r"k has 7 tokens.*v has 6"),
    ("integer queries", lambda: ab.scaled_dot_product_attention(q.long(), k, v), r"q must hold floating-point numbers.*torch.int64"),
    ("mask of wrong shape", lambda: ab.scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 6, dtype=torch.bool)), r"mask of shape \(5, 6\) cannot be broadcast.*\(2, 5, 7\)"),
    ("mask of wrong dtype", lambda: ab.scaled_dot_product_attention(q, k, v, mask=torch.ones(5, 7)), r"mask must be a boolean tensor.*torch.float32"),
    ("zero temperature", lambda: ab.scaled_dot_product_attention(q, k, v, temperature=0.0), r"temperature must be positive.*0.0"),
    ("negative temperature", lambda: ab.scaled_dot_product_attention(q, k, v, temperature=-1), r"temperature must be positive.*-1"),
    ("not a tensor", lambda: ab.scaled_dot_product_attention([[1.0]], k, v), r"q must be a torch.Tensor.*list"),
    ("heads do not divide d_model", lambda: ab.MultiHeadAttention(10, 3), r"d_model=10 is not divisible by num_heads=3"),
    ("query with wrong feature size", lambda: ab.MultiHeadAttention(8, 2)(torch.randn(1, 3, 5), torch.randn(1, 3, 8), torch.randn(1, 3, 8)), r"query has 5 features .* expects d_model=8"),
    ("unbatched input to multi-head attention", lambda: ab.MultiHeadAttention(8, 2)(torch.randn(3, 8), torch.randn(3, 8), torch.randn(3, 8)), r"query must have 3 dimensions \(batch, tokens, d_model\).*\(3, 8\)"),
    ("multi-head mask of wrong shape", lambda: ab.MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), torch.randn(1, 4, 8), torch.randn(1, 4, 8), mask=torch.ones(3, 3, dtype=torch.bool)), r"mask of shape \(3, 3\) cannot be broadcast"),
    ("fast-path mask of wrong dtype", lambda: ab.MultiHeadAttention(8, 2)(torch.randn(1, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8), mask=torch.ones(3, 3), need_weights=False), r"mask must be a boolean tensor"),
    ("causal mask of length 0", lambda: ab.causal_mask(0), r"T must be a positive integer.*0"),
    ("padding lengths longer than T", lambda: ab.padding_mask([2, 9], 5), r"between 0 and T=5.*9"),
    ("sequence longer than the positional table", lambda: ab.SinusoidalPositionalEncoding(8, max_len=4)(torch.randn(1, 6, 8)), r"6 tokens .* max_len=4"),
    ("token id outside the vocabulary", lambda: ab.Encoder(10, 8, 2, 16, 1)(torch.tensor([[1, 12]])), r"token ids must lie in \[0, 10\).*12"),
    ("float token ids", lambda: ab.Encoder(10, 8, 2, 16, 1)(torch.randn(1, 3)), r"tokens must be integer ids"),
    ("encoder layer with indivisible heads", lambda: ab.EncoderLayer(10, 4, 16), r"d_model=10 is not divisible by num_heads=4"),
    ("unknown activation", lambda: ab.FeedForward(8, 16, activation="relu6"), r"activation must be one of \['gelu', 'relu'\].*relu6"),
    ("hardmax of integers", lambda: ab.hardmax(torch.tensor([1, 2])), r"scores must hold floating-point numbers"),
    ("from_torch of the wrong module", lambda: ab.MultiHeadAttention.from_torch(torch.nn.Linear(2, 2)), r"expected a torch.nn.MultiheadAttention, but a Linear"),
    ("unknown task", lambda: ab.SequenceTask("shuffle", 10), r"kind must be one of .*'shuffle'"),
    ("unknown symbol", lambda: ab.SequenceTask("copy", 1).vocab.encode(["Z"]), r"unknown tokens \['Z'\]"),
]


@pytest.mark.parametrize("call, pattern", [(c, p) for _, c, p in CASES], ids=[name for name, _, _ in CASES])
def test_bad_input_raises_a_clear_value_error(call, pattern):
    with pytest.raises(ValueError) as raised:
        call()
    assert re.search(pattern, str(raised.value)), f"message was: {raised.value}"


def test_device_override_names_the_choices(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"ATTENTION_BOOK_DEVICE='tpu'.*expected one of \['cpu'"):
        ab.default_device()


def test_available_devices_lists_cpu_first():
    assert ab.available_devices()[0] == "cpu"
