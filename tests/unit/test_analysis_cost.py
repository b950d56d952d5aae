"""attention_book.analysis.cost (chapters 1, 4): exact cost counts, timings, the log-log slope, parameter counts."""

import math

import pytest
from torch import nn

from attention_book.analysis.cost import attention_cost, loglog_slope, parameter_count, time_attention


def test_attention_cost_counts_grow_with_the_square_of_the_length():
    cost = attention_cost(100, 64)
    assert cost == {"score_multiply_adds": 100 * 100 * 64, "output_multiply_adds": 100 * 100 * 64,
                    "weight_entries": 100 * 100, "weight_bytes": 100 * 100 * 4}
    doubled = attention_cost(200, 64, d_v=32, bytes_per_number=2)
    assert doubled["score_multiply_adds"] == 4 * cost["score_multiply_adds"]
    assert doubled["output_multiply_adds"] == 200 * 200 * 32 and doubled["weight_bytes"] == 200 * 200 * 2
    with pytest.raises(ValueError, match="T must be a positive integer"):
        attention_cost(0, 64)


def test_loglog_slope_recovers_the_exponent():
    lengths = [64, 128, 256, 512]
    assert loglog_slope(lengths, [T**2 * 1e-9 for T in lengths]) == pytest.approx(2.0)
    assert loglog_slope(lengths, [math.sqrt(T) for T in lengths]) == pytest.approx(0.5)


def test_time_attention_gives_one_positive_time_per_length():
    seconds = time_attention([8, 16], d_k=4, repeats=2)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)


def test_parameter_count_counts_only_trainable_numbers():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    assert parameter_count(model) == 3 * 4 + 4 + 4 * 2 + 2
    model[0].requires_grad_(False)
    assert parameter_count(model) == 4 * 2 + 2
    assert parameter_count(nn.ReLU()) == 0
    assert parameter_count(nn.Embedding(10, 3)) == sum(p.numel() for p in nn.Embedding(10, 3).parameters()) == 30
