"""Chapter 5's PositionalEncodingExplorer, driven headless the way a student drives it."""

import html
import io

import pytest
import torch
from PIL import Image

import attention_book as ab
from attention_book.widgets import PositionalEncodingExplorer as ExportedExplorer
from attention_book.widgets import WidgetInputError
from attention_book.widgets.positional_explorer import MEASURES, PositionalEncodingExplorer


@pytest.fixture
def explorer():
    return PositionalEncodingExplorer(device="cpu")


def test_the_widgets_package_exports_the_explorer():
    assert ExportedExplorer is PositionalEncodingExplorer


def test_starts_with_64_dimensions_32_positions_and_dot_products(explorer):
    state = explorer.state
    assert (state["d_model"], state["length"], state["base"], state["measure"]) == (64, 32, 10000.0, "dot product")
    assert state["table"].shape == (32, 64) and state["similarity"].shape == (32, 32)


def test_the_table_is_the_package_sinusoidal_encoding_for_every_slider_setting(explorer):
    for d_model, length, base in [(64, 32, 10000.0), (8, 50, 10000.0), (128, 7, 100.0), (2, 2, 1e6)]:
        explorer.base_slider.value = base
        explorer.d_model_slider.value = d_model
        explorer.length_slider.value = length
        state = explorer.state
        assert explorer.error is None
        assert (state["d_model"], state["length"]) == (d_model, length)
        assert state["base"] == pytest.approx(base)
        torch.testing.assert_close(state["table"], ab.sinusoidal_encoding(length, d_model, base=state["base"]))


def test_dot_products_are_symmetric_largest_on_the_diagonal_and_depend_only_on_the_distance(explorer):
    explorer.length_slider.value = 40
    similarity = explorer.state["similarity"].double()
    table = explorer.state["table"].double()
    torch.testing.assert_close(similarity, table @ table.T, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(similarity, similarity.T)
    diagonal = similarity.diagonal()
    torch.testing.assert_close(diagonal, torch.full_like(diagonal, 64 / 2), atol=1e-4, rtol=0)  # |PE[p]|^2 = d_model / 2
    off_diagonal = similarity - torch.diag(torch.full((40,), float("inf"), dtype=torch.float64))
    assert (off_diagonal.max(dim=1).values < diagonal - 1e-3).all()  # every position is most similar to itself
    for distance in range(40):
        band = torch.cat([similarity.diagonal(distance), similarity.diagonal(-distance)])
        assert band.max() - band.min() < 1e-3, f"dot products at distance {distance} differ"


def test_cosine_similarity_is_the_dot_product_divided_by_the_lengths(explorer):
    dot = explorer.state["similarity"].clone()
    explorer.measure_dropdown.value = "cosine"
    state = explorer.state
    assert state["measure"] == "cosine"
    torch.testing.assert_close(state["similarity"], dot / (state["d_model"] / 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(state["similarity"].diagonal(), torch.ones(32), atol=1e-5, rtol=0)
    assert state["similarity"].max() <= 1.0 + 1e-5


def test_a_larger_base_makes_the_longest_wavelength_longer(explorer):
    shortest, longest = explorer.state["wavelengths"]
    assert shortest == pytest.approx(2 * torch.pi)
    assert longest == pytest.approx(2 * torch.pi * 10000 ** (62 / 64))
    explorer.base_slider.value = 100.0
    assert explorer.state["wavelengths"][1] == pytest.approx(2 * torch.pi * 100 ** (62 / 64), rel=1e-3)


def test_an_odd_d_model_shows_a_message_and_the_widget_stays_usable(explorer):
    before = explorer.state
    explorer.d_model_slider.value = 33  # the slider steps by 2, but its value can be set to anything
    assert explorer.error is not None and "even" in explorer.error and "33" in explorer.error
    assert html.escape(explorer.error) in explorer.message.value
    assert explorer.state is before  # the last good figure and state are kept
    explorer.d_model_slider.value = 16
    assert explorer.error is None and explorer.message.value == ""
    assert explorer.state["d_model"] == 16


def test_the_sliders_cover_only_valid_ranges():
    explorer = PositionalEncodingExplorer(device="cpu")
    explorer.length_slider.value = 10_000  # clamped by the slider itself
    assert explorer.state["length"] == explorer.length_slider.max
    assert explorer.d_model_slider.step == 2 and explorer.d_model_slider.min == 2
    assert list(explorer.measure_dropdown.options) == list(MEASURES)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"d_model": 33}, "must be even"),
        ({"d_model": 0}, "from 2 to 256"),
        ({"d_model": 512}, "from 2 to 256"),
        ({"length": 1}, "from 2 to 128"),
        ({"length": 4.5}, "integer"),
        ({"base": 1.0}, "base must be"),
        ({"measure": "euclid"}, "measure must be one of"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(kwargs, words):
    with pytest.raises(ValueError) as error:
        PositionalEncodingExplorer(device="cpu", **kwargs)
    assert words in str(error.value)
    assert not isinstance(error.value, WidgetInputError)


def test_static_page_gets_a_png_and_the_device_menu_lists_cpu(explorer):
    bundle = explorer._repr_mimebundle_()
    assert "image/png" in bundle and "open this chapter" in bundle["text/plain"]
    assert "cpu" in explorer.device_dropdown.options
    picture = Image.open(io.BytesIO(explorer.png()))
    assert picture.format == "PNG" and picture.size[0] > 500


def test_the_picture_changes_with_the_sliders(explorer):
    first = explorer.png()
    explorer.length_slider.value = 90
    assert explorer.png() != first


def test_sliders_update_on_release_and_every_change_is_timed(explorer):
    assert all(control.continuous_update is False for control in explorer.controls()[:3])
    before = len(explorer.timings_ms)
    explorer.d_model_slider.value = 32
    explorer.length_slider.value = 16
    explorer.base_slider.value = 1000.0
    explorer.measure_dropdown.value = "cosine"
    assert len(explorer.timings_ms) == before + 4
    assert explorer.median_update_ms() > 0


def test_the_benchmark_builds_it_with_only_a_device():
    from attention_book import widgets

    explorer = widgets.PositionalEncodingExplorer(device="cpu")
    assert explorer.state is not None and explorer.error is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_computes_on_cuda_as_on_the_cpu():
    explorer = PositionalEncodingExplorer(device="cuda")
    assert "cuda" in explorer.device_dropdown.options
    on_cuda = explorer.state["similarity"]
    explorer.device_dropdown.value = "cpu"
    torch.testing.assert_close(explorer.state["similarity"], on_cuda, atol=1e-4, rtol=1e-5)
