"""attention_book.analysis.cost (chapters 1, 4): exact cost counts, timings, the log-log slope, parameter counts."""

import math

import pytest
import torch
from torch import nn

from attention_book.analysis.cost import attention_cost, loglog_slope, parameter_count, time_attention


def test_attention_cost_counts_grow_with_the_square_of_the_length():
    cost = attention_cost(100, 64)
    assert cost == {
        "score_multiply_adds": 100 * 100 * 64,
        "output_multiply_adds": 100 * 100 * 64,
        "weight_entries": 100 * 100,
        "weight_bytes": 100 * 100 * 4,
    }
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


def test_layer_costs_count_vaswani_table_1_with_projections():
    from attention_book.analysis.cost import layer_costs

    costs = layer_costs(128, 64, kernel_size=3)
    assert costs["self-attention"] == {
        "multiply_adds": 3 * 128 * 64**2 + 2 * 128**2 * 64,
        "sequential_steps": 1,
        "path_length": 1,
    }
    assert costs["simple RNN"] == {"multiply_adds": 2 * 128 * 64**2, "sequential_steps": 128, "path_length": 127}
    assert costs["LSTM"]["multiply_adds"] == 4 * costs["simple RNN"]["multiply_adds"] == 4_194_304
    assert costs["convolution (kernel 3)"] == {
        "multiply_adds": 3 * 128 * 64**2,
        "sequential_steps": 1,
        "path_length": 127,
    }
    assert layer_costs(1, 8)["convolution (kernel 3)"]["path_length"] == 0
    assert layer_costs(128, 8, kernel_size=5)["convolution (kernel 5)"]["path_length"] == 64


def test_convolution_path_is_the_layers_a_centred_kernel_needs_to_carry_the_first_token_to_the_last():
    import torch.nn.functional as F

    from attention_book.analysis.cost import layer_costs

    for kernel_size in (3, 5, 7):
        for T in (1, 2, 3, 8, 17, 64):
            reach = torch.zeros(1, 1, T)  # (1, 1, T): which positions the first token reached
            reach[..., 0] = 1
            layers = 0
            while reach[0, 0, -1] == 0:  # a centred kernel, padded as time_layers pads it
                reach = F.max_pool1d(reach, kernel_size, stride=1, padding=kernel_size // 2)
                layers += 1
            name = f"convolution (kernel {kernel_size})"
            assert layer_costs(T, 8, kernel_size)[name]["path_length"] == layers, (kernel_size, T)


def test_attention_is_cheaper_than_an_lstm_exactly_below_two_and_a_half_d():
    from attention_book.analysis.cost import layer_costs

    for d in (8, 64):
        for T in range(1, 4 * d):
            costs = layer_costs(T, d)
            assert (costs["self-attention"]["multiply_adds"] < costs["LSTM"]["multiply_adds"]) == (T < 2.5 * d)
            assert costs["self-attention"]["multiply_adds"] > costs["simple RNN"]["multiply_adds"]


def test_layer_costs_reject_bad_sizes():
    from attention_book.analysis.cost import layer_costs

    with pytest.raises(ValueError):
        layer_costs(0, 8)
    with pytest.raises(ValueError):
        layer_costs(8, 8, kernel_size=1)
    with pytest.raises(ValueError, match="odd"):
        layer_costs(8, 8, kernel_size=4)


def test_time_layers_gives_one_positive_time_per_layer_and_length():
    from attention_book.analysis.cost import time_layers

    seconds = time_layers([8, 16], d=4, repeats=2)
    assert list(seconds) == ["self-attention", "simple RNN", "LSTM", "convolution (kernel 3)"]
    assert all(len(times) == 2 and min(times) > 0 for times in seconds.values())
