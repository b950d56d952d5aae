"""Attention figures: labels on both axes, one colour map, clear errors."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

import attention_book as ab


def test_plot_attention_labels_rows_as_queries_and_columns_as_keys():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = ab.plot_attention(weights, ["a", "b", "c"], ["w", "x", "y", "z"], title="demo")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "demo" and "keys" in ax.get_xlabel() and "queries" in ax.get_ylabel()
    assert ax.images[0].get_cmap().name == ab.ATTENTION_CMAP
    plt.close("all")


def test_plot_attention_rejects_labels_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"query_labels has 2 labels but the weights have 3 rows \(queries\)"):
        ab.plot_attention(torch.rand(3, 3), ["a", "b"], ["x", "y", "z"])


def test_plot_attention_grid_has_one_panel_per_layer_and_head():
    figure = ab.plot_attention_grid(torch.rand(2, 3, 4, 4), list("abcd"), list("abcd"), title="grid")
    assert len(figure.axes) == 6
    assert figure.axes[0].get_title() == "head 0"
    plt.close(figure)
