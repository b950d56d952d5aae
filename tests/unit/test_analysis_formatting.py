"""attention_book.analysis.formatting (all chapters, every widget): how the book prints numbers.

Printed outputs are compared by nbval, so every function must give the same text for the
same number on every machine: no ``-0.00``, fixed decimals, exact zeros kept visible.
"""

import numpy as np
import pytest
import torch

from attention_book.analysis.formatting import (
    format_bytes,
    format_exact,
    format_number,
    format_results,
    format_shape,
    format_short,
    format_vector,
    format_weight,
    format_weights,
    to_numpy,
)


def test_to_numpy_takes_tensors_with_grad_arrays_and_lists():
    values = torch.tensor([1.0, 2.0], requires_grad=True) * 2
    assert to_numpy(values).tolist() == [2.0, 4.0]
    assert to_numpy(torch.tensor([1, 2], dtype=torch.bfloat16)).dtype == np.float32
    assert to_numpy([1, 2]).tolist() == [1, 2]


@pytest.mark.parametrize(
    "value, digits, text",
    [
        (0.25, 2, "0.25"),
        (1 / 3, 3, "0.333"),
        (-1e-9, 2, "0.00"),
        (-0.0, 2, "0.00"),
        (-0.004, 2, "0.00"),
        (-0.005001, 2, "-0.01"),
        (0.0, 0, "0"),
        (-0.4, 0, "0"),
        (12.5, 1, "12.5"),
        (torch.tensor(0.5), 2, "0.50"),
    ],
)
def test_format_number_uses_fixed_decimals_and_never_writes_negative_zero(value, digits, text):
    assert format_number(value, digits) == text


@pytest.mark.parametrize(
    "value, text",
    [
        (10.0, "10"),
        (5.5, "5.5"),
        (0.25, "0.25"),
        (0.125, "0.12"),
        (1.0, "1"),
        (-0.001, "0"),
        (-0.0, "0"),
        (0.0, "0"),
        (-2.5, "-2.5"),
    ],
)
def test_format_short_drops_trailing_zeros(value, text):
    assert format_short(value) == text


def test_format_short_takes_the_number_of_decimals():
    assert format_short(1 / 3, digits=4) == "0.3333" and format_short(2.50001, digits=3) == "2.5"


@pytest.mark.parametrize(
    "value, text",
    [
        (1.9, "1.9"),
        (-0.4, "-0.4"),
        (0.125, "0.125"),
        (1 / 3, "0.333333"),
        (123456789.0, "1.23457e+08"),
        (2 / 3 * 1e-7, "6.66667e-08"),
        (-0.0, "0"),
        (0.0, "0"),
        (5.0, "5"),
    ],
)
def test_format_exact_keeps_six_significant_digits(value, text):
    assert format_exact(value) == text
    if value:
        assert float(format_exact(value)) == pytest.approx(value, rel=1e-5)


def test_format_weight_writes_an_exact_zero_as_0_and_a_tiny_weight_with_decimals():
    assert format_weight(0.0) == "0" and format_weight(-0.0) == "0"
    assert format_weight(1e-9) == "0.00" and format_weight(0.7) == "0.70" and format_weight(0.7, digits=3) == "0.700"


def test_format_weights_aligns_entries_and_keeps_exact_zeros_visible():
    assert format_weights(torch.tensor([0.0, 0.7, 0.3, 0.0, 0.0])) == "[   0, 0.70, 0.30,    0,    0]"
    assert (
        format_weights(torch.tensor([1e-74], dtype=torch.float64)) == "[0.00]"
    )  # float64 is not rounded to float32 first
    assert format_weights([[0.5], [0.5]], digits=1) == "[0.5, 0.5]"


def test_format_vector_rounds_and_never_prints_negative_zero():
    assert format_vector(torch.tensor([550.0, 5.5, -1e-9])) == "[550.00, 5.50, 0.00]"
    assert format_vector(np.array([[0.911, 0.666]]), digits=1) == "[0.9, 0.7]"  # flattened


def test_format_vector_writes_each_entry_with_the_chosen_number_formatter():
    values = torch.tensor([10.0, 5.5, -1e-9, 0.25])
    assert format_vector(values, number=format_short) == "[10, 5.5, 0, 0.25]"
    assert format_vector(torch.tensor([0.0, 0.7, 1e-9]), number=format_weight) == "[0, 0.70, 0.00]"
    assert format_vector([0.123], 3, lambda value, digits: f"<{value:.{digits}f}>") == "[<0.123>]"


@pytest.mark.parametrize(
    "count, text",
    [
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (16 * 1024**3, "16.0 GiB"),
        (3 * 1024**5, "3072.0 TiB"),
    ],
)
def test_format_bytes_uses_the_largest_binary_unit_that_keeps_the_number_at_least_1(count, text):
    assert format_bytes(count) == text


def test_format_shape():
    assert format_shape((2, 5, 8)) == "(2, 5, 8)" and format_shape(torch.zeros(3, 1).shape) == "(3, 1)"
    assert format_shape([4]) == "(4)" and format_shape(()) == "()"


def test_the_results_table_has_one_row_per_approach_and_a_dash_where_nothing_was_run():
    table = format_results({"(a) scratch": {100: 0.5, 1000: 0.625}, "(c) tuned": {1000: 0.75}})
    lines = table.splitlines()
    assert lines[0].split() == ["approach", "100", "1,000"]
    assert set(lines[1]) == {"-"} and len(lines[1]) == len(lines[0])
    assert lines[2].split() == ["(a)", "scratch", "50.0%", "62.5%"]
    assert lines[3].split() == ["(c)", "tuned", "-", "75.0%"]
