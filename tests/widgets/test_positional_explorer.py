"""Chapter 5's PositionalEncodingExplorer: the table and the similarities the browser draws."""

import pytest
import torch

import attention_book as ab
from attention_book.widgets import PositionalEncodingExplorer as ExportedExplorer
from attention_book.widgets.positional_explorer import MAX_LENGTH, PositionalEncodingExplorer


@pytest.fixture
def explorer():
    return PositionalEncodingExplorer(device="cpu")


def test_the_widgets_package_exports_the_explorer():
    assert ExportedExplorer is PositionalEncodingExplorer


def test_starts_with_64_dimensions_32_positions_and_dot_products(explorer):
    assert explorer.view == {"length": 32, "measure": "dot product"} and explorer.data["d_model"] == 64
    assert len(explorer.data["pe"]) == MAX_LENGTH  # every position the slider reaches


def test_the_table_is_the_package_encoding(explorer):
    torch.testing.assert_close(
        torch.tensor(explorer.data["pe"]), ab.sinusoidal_encoding(MAX_LENGTH, 64), atol=1e-3, rtol=0
    )


@pytest.mark.parametrize("measure", ["dot product", "cosine"])
def test_the_similarity_shown_equals_the_full_matrix(explorer, measure):
    explorer.set_view(length=20, measure=measure)
    table = ab.sinusoidal_encoding(20, 64)
    expected = table @ table.T
    if measure == "cosine":
        norms = table.norm(dim=-1)
        expected = expected / (norms[:, None] * norms[None, :])
    torch.testing.assert_close(explorer.shown()["similarity"], expected, atol=5e-3, rtol=0)


def test_d_model_and_base_recompute_and_a_larger_base_makes_longer_wavelengths(explorer):
    longest = explorer.data["wavelengths"][1]
    explorer.set_input("base", "100000")
    assert explorer.data["wavelengths"][1] > longest
    explorer.set_input("d_model", "16")
    assert explorer.data["d_model"] == 16 and len(explorer.data["pe"][0]) == 16


@pytest.mark.parametrize(
    "name, value, fragment",
    [("d_model", "7", "even"), ("d_model", "x", "whole number"), ("base", "1", "between"), ("base", "y", "a number")],
)
def test_bad_settings_are_errors_next_to_their_control(explorer, name, value, fragment):
    explorer.set_input(name, value)
    assert explorer.error["control"] == name and fragment in explorer.error["message"]
    assert explorer.data["d_model"] == 64


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"d_model": 7}, "even"),
        ({"length": 1}, "length must be"),
        ({"base": 1.0}, "base must be"),
        ({"measure": "angle"}, "measure must be"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(kwargs, words):
    with pytest.raises(ValueError, match=words):
        PositionalEncodingExplorer(device="cpu", **kwargs)
