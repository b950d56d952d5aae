"""Chapter 2's KeyValueExplorer, driven headless the way a student drives it."""

import html

import pytest
import torch

import attention_book as ab
from attention_book.widgets import WidgetInputError
from attention_book.widgets.key_value_explorer import KeyValueExplorer, parse_query


@pytest.fixture
def explorer():
    return KeyValueExplorer(device="cpu")


def test_default_store_is_the_sanity_check_and_starts_on_key_two(explorer):
    assert explorer.state["query"] == [0.0, 10.0, 0.0]
    assert explorer.state["weights"] == pytest.approx([0.0, 1.0, 0.0, 0.0], abs=1e-6)
    assert explorer.state["value"] == pytest.approx([10.0, 0.0, 0.0], abs=1e-4)


def test_typed_query_matching_two_keys_returns_their_average(explorer):
    explorer.query_text.value = "0, 0, 10"
    assert explorer.error is None
    assert explorer.state["weights"] == pytest.approx([0.0, 0.0, 0.5, 0.5], abs=1e-6)
    assert explorer.state["value"] == pytest.approx([550.0, 5.5, 0.0], abs=1e-3)
    assert [slider.value for slider in explorer.sliders] == [0.0, 0.0, 10.0]


def test_moving_a_slider_updates_the_lookup_and_the_text(explorer):
    explorer.sliders[0].value = 10.0  # query [10, 10, 0]: keys 1 and 2 match equally
    assert explorer.state["query"] == [10.0, 10.0, 0.0]
    assert explorer.state["value"] == pytest.approx([5.5, 0.0, 0.0], abs=1e-4)
    assert explorer.query_text.value == "10, 10, 0"


def test_state_matches_the_reference_soft_lookup(explorer):
    explorer.set_query("1.5, -2, 3.25")
    keys = torch.tensor([[10.0, 0, 0], [0, 10, 0], [0, 0, 10], [0, 0, 10]])
    values = torch.tensor([[1.0, 0, 0], [10, 0, 0], [100, 5, 0], [1000, 6, 0]])
    value, weights = ab.soft_lookup(torch.tensor([1.5, -2.0, 3.25]), keys, values)
    assert explorer.state["weights"] == pytest.approx(weights.tolist(), abs=1e-6)
    assert explorer.state["value"] == pytest.approx(value.tolist(), rel=1e-5)
    assert sum(explorer.state["weights"]) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "text, fragment",
    [("", "type 3 numbers"), ("0, ten, 0", "'ten' is not a number"), ("1, 2", "needs 3 numbers"), ("0, 99, 0", "sliders go")],
)
def test_bad_text_shows_a_message_and_the_widget_stays_usable(explorer, text, fragment):
    explorer.query_text.value = text
    assert explorer.error is not None and fragment in explorer.error
    assert html.escape(explorer.error) in explorer.message.value  # shown in the widget, not raised
    assert explorer.state["query"] == [0.0, 10.0, 0.0]  # the last good state is kept
    explorer.sliders[2].value = 10.0
    assert explorer.error is None and explorer.message.value == ""
    assert explorer.state["query"] == [0.0, 10.0, 10.0]


def test_parse_query_accepts_brackets_spaces_and_commas():
    assert parse_query("[0 10, 0]", 3, 15) == [0.0, 10.0, 0.0]
    with pytest.raises(WidgetInputError):
        parse_query("nan, 0, 0", 3, 15)


def test_custom_store_with_labels_and_different_value_size():
    keys = [[4.0, 0.0], [0.0, 4.0], [4.0, 4.0]]
    values = [[1.0], [2.0], [3.0]]
    widget = KeyValueExplorer(keys, values, key_labels=["cat", "dog", "both"], device="cpu", query=[4, 0])
    assert len(widget.sliders) == 2
    expected_value, expected_weights = ab.soft_lookup(torch.tensor([4.0, 0.0]), torch.tensor(keys), torch.tensor(values))
    assert widget.state["weights"] == pytest.approx(expected_weights.tolist(), abs=1e-6)
    assert widget.state["value"] == pytest.approx(expected_value.tolist(), abs=1e-5)
    with pytest.raises(ValueError, match="every key needs one value"):
        KeyValueExplorer(keys, values[:2])
    with pytest.raises(ValueError, match="key_labels has 2 labels"):
        KeyValueExplorer(keys, values, key_labels=["a", "b"])


def test_static_page_gets_a_png_and_the_device_menu_lists_cpu(explorer):
    bundle = explorer._repr_mimebundle_()
    assert "image/png" in bundle
    assert "cpu" in explorer.device_dropdown.options
    assert explorer.png().startswith(b"\x89PNG")


def test_every_control_change_is_timed(explorer):
    before = len(explorer.timings_ms)
    for i in range(5):
        explorer.sliders[i % 3].value = float(i + 1)  # each a real change
    assert len(explorer.timings_ms) == before + 5
