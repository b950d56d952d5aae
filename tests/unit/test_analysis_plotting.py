"""attention_book.analysis.plotting (every chapter and widget): the one heatmap, one colour map, attention figures."""

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import attention_book as ab
from attention_book.analysis.plotting import heatmap


def _colour_bars(figure) -> list:
    """The axes of a figure that hold a colour bar (matplotlib marks them with ``_colorbar``)."""
    return [ax for ax in figure.axes if getattr(ax, "_colorbar", None) is not None]


def test_heatmap_draws_one_image_in_the_books_colour_map_and_returns_its_axes():
    matrix = torch.rand(3, 5)
    ax = heatmap(matrix, title="scores", xlabel="keys", ylabel="queries")
    assert len(ax.images) == 1
    image = ax.images[0]
    assert image.get_cmap().name == ab.ATTENTION_CMAP == "viridis"
    np.testing.assert_allclose(image.get_array(), matrix.numpy())
    assert (ax.get_title(), ax.get_xlabel(), ax.get_ylabel()) == ("scores", "keys", "queries")
    assert ab.heatmap is heatmap


def test_heatmap_has_a_colour_bar_only_when_it_is_labelled():
    plain = heatmap(torch.rand(2, 2))
    assert _colour_bars(plain.figure) == [] and len(plain.figure.axes) == 1
    labelled = heatmap(torch.rand(2, 2), colorbar_label="weight")
    (bar,) = _colour_bars(labelled.figure)
    assert bar._colorbar.ax.get_ylabel() == "weight"
    assert len(labelled.figure.axes) == 2


def test_heatmap_draws_into_given_axes_with_the_given_range():
    figure, (left, right) = plt.subplots(1, 2)
    ax = heatmap(np.eye(3), ax=right, vmin=-1.0, vmax=2.0)
    assert ax is right and len(left.images) == 0
    assert ax.images[0].get_clim() == (-1.0, 2.0)


def test_heatmap_needs_a_matrix():
    with pytest.raises(ValueError, match=r"2-D matrix, but got shape \(2, 2, 2\)"):
        heatmap(torch.zeros(2, 2, 2))


def test_plot_attention_labels_rows_as_queries_and_columns_as_keys():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    ax = ab.plot_attention(weights, ["a", "b", "c"], ["w", "x", "y", "z"], title="demo")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["w", "x", "y", "z"]
    assert ax.get_title() == "demo" and "keys" in ax.get_xlabel() and "queries" in ax.get_ylabel()
    assert ax.images[0].get_cmap().name == ab.ATTENTION_CMAP
    assert len(_colour_bars(ax.figure)) == 1
    assert len(ax.texts) == 12  # small matrices get their weights written in the cells


def test_plot_attention_without_a_colour_bar_or_annotations():
    ax = ab.plot_attention(torch.rand(2, 3), colorbar=False, annotate=False)
    assert _colour_bars(ax.figure) == [] and len(ax.texts) == 0
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]


def test_plot_attention_rejects_labels_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"query_labels has 2 labels but the weights have 3 rows \(queries\)"):
        ab.plot_attention(torch.rand(3, 3), ["a", "b"], ["x", "y", "z"])


def test_plot_attention_grid_has_one_panel_per_layer_and_head():
    figure = ab.plot_attention_grid(torch.rand(2, 3, 4, 4), list("abcd"), list("abcd"), title="grid")
    assert len(figure.axes) == 6
    assert figure.axes[0].get_title() == "head 0"
    assert all(len(ax.images) == 1 and ax.images[0].get_cmap().name == ab.ATTENTION_CMAP for ax in figure.axes)
    as_list = ab.plot_attention_grid([torch.rand(1, 2, 3, 3), torch.rand(1, 2, 3, 3)])  # a batch axis of 1 per layer
    assert len(as_list.axes) == 4
    with pytest.raises(ValueError, match="layers, heads, T_q, T_k"):
        ab.plot_attention_grid(torch.rand(3, 4, 4))


def test_plot_attention_grid_draws_one_colour_bar_for_the_shared_scale_when_asked():
    figure = ab.plot_attention_grid(torch.rand(1, 2, 4, 4), list("abcd"), list("abcd"), colorbar=True)
    assert len(figure.axes) == 3 and figure.axes[-1].get_ylabel() == "attention weight"
    assert all(ax.images[0].get_clim() == (0.0, 1.0) for ax in figure.axes[:2])


def test_plot_attention_grid_fits_the_page_with_text_of_9_pt_or_more():
    """Chapter 4 asks for cells of 3 in: the grid shrinks them to stay PAGE_INCHES wide (legible on a phone)."""
    from attention_book.analysis.plotting import PAGE_INCHES

    figure = ab.plot_attention_grid(
        torch.rand(1, 2, 8, 8), list("abcdefgh"), list("abcdefgh"), cell_size=3.0, colorbar=True
    )
    assert figure.get_figwidth() <= PAGE_INCHES
    ticks = [
        label for ax in figure.axes[:2] for label in ax.get_xticklabels() + ax.get_yticklabels() if label.get_text()
    ]
    assert ticks and min(label.get_fontsize() for label in ticks) >= 9


def test_plot_attention_writes_an_exact_zero_as_0_and_a_tiny_weight_as_0_00():
    """Chapter 3's convention in every heatmap: a masked or sparse weight of exactly 0 reads differently."""
    import torch

    from attention_book.analysis.plotting import plot_attention

    ax = plot_attention(torch.tensor([[1.0, 0.0], [0.999, 0.001]]), ["a", "b"], ["c", "d"])
    assert [text.get_text() for text in ax.texts] == ["1.00", "0", "1.00", "0.00"]


def test_seed_band_draws_the_mean_and_the_whole_range_of_the_seeds():
    import matplotlib.pyplot as plt
    import numpy as np

    from attention_book.analysis.plotting import seed_band

    runs = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 1.0], [0.0, 3.0, 2.0]])
    figure, ax = plt.subplots()
    line = seed_band(ax, [10, 20, 30], runs, label="model")
    assert np.allclose(line.get_ydata(), runs.mean(axis=0))
    (band,) = ax.collections
    corners = band.get_paths()[0].vertices
    for x, low, high in zip([10, 20, 30], runs.min(axis=0), runs.max(axis=0), strict=True):
        ys = corners[np.isclose(corners[:, 0], x), 1]
        assert np.isclose(ys.min(), low) and np.isclose(ys.max(), high)
    assert ax.get_legend_handles_labels()[1] == ["model"]
    plt.close(figure)


def test_seed_band_can_draw_the_median_of_the_seeds_as_numpy_takes_it_under_a_later_log_scale():
    import matplotlib.pyplot as plt
    import numpy as np

    from attention_book.analysis.plotting import seed_band

    runs = np.array([[1e-1, 1e-9], [1e-3, 1e-3], [2e-3, 1e-20], [1.0, 1e-5]])  # (seeds=4, x=2)
    figure, ax = plt.subplots()
    line = seed_band(ax, [5, 10], runs, label="model", estimator="median")
    ax.set_yscale("log")
    assert np.allclose(line.get_ydata(), np.median(runs, axis=0))
    plt.close(figure)


def test_seed_band_names_the_shape_it_needs():
    import matplotlib.pyplot as plt
    import numpy as np
    import pytest

    from attention_book.analysis.plotting import seed_band

    figure, ax = plt.subplots()
    with pytest.raises(ValueError, match=r"runs of shape \(seeds, 2\) for 2 x values, but got \(2, 3\)"):
        seed_band(ax, [1, 2], np.ones((2, 3)), label="x")
    with pytest.raises(ValueError, match="interval must be one of"):
        seed_band(ax, [1, 2], np.ones((2, 2)), label="x", interval="sd")
    with pytest.raises(ValueError, match="estimator must be 'mean' or 'median'"):
        seed_band(ax, [1, 2], np.ones((2, 2)), label="x", estimator="max")
    plt.close(figure)
