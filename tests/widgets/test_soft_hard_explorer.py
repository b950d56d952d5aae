"""Chapter 3's SoftHardExplorer, driven headless the way a student drives it."""

import html
import io
import math

import ipywidgets as widgets
import numpy as np
import pytest
import torch
from PIL import Image

import attention_book as ab
from attention_book.widgets import SoftHardExplorer as ExportedExplorer
from attention_book.widgets import WidgetInputError
from attention_book.widgets.soft_hard_explorer import (
    BETA_MAX,
    BETA_MIN,
    DEFAULT_LABELS,
    DEFAULT_SCORES,
    SoftHardExplorer,
    format_scores,
    parse_scores,
    png_bytes,
)

METHODS = ("softmax", "sparsemax", "hardmax")


@pytest.fixture
def explorer():
    return SoftHardExplorer(device="cpu")


def _set_beta(widget, beta):
    widget.beta_slider.value = beta
    assert widget.error is None
    assert widget.state["beta"] == pytest.approx(beta, rel=1e-9)


def test_the_widgets_package_exports_the_explorer_and_its_first_control_is_the_beta_slider(explorer):
    assert ExportedExplorer is SoftHardExplorer
    slider = explorer.controls()[0]  # benchmarks/widget_cases.py moves the first slider
    assert slider is explorer.beta_slider and isinstance(slider, widgets.FloatLogSlider)
    assert slider.base ** slider.min == pytest.approx(BETA_MIN) and slider.base ** slider.max == pytest.approx(BETA_MAX)


def test_starts_at_beta_1_on_the_chapter_scores_and_matches_the_reference(explorer):
    state = explorer.state
    assert state["beta"] == 1.0
    assert state["labels"] == DEFAULT_LABELS and state["scores"] == pytest.approx(DEFAULT_SCORES)
    scores = torch.tensor(DEFAULT_SCORES, dtype=torch.float64)
    assert state["softmax"] == pytest.approx(ab.softmax(scores).tolist(), abs=1e-12)
    assert state["sparsemax"] == pytest.approx([0.0, 0.7, 0.3, 0.0, 0.0], abs=1e-12)
    assert state["hardmax"] == [0.0, 1.0, 0.0, 0.0, 0.0]


def test_large_beta_makes_the_softmax_row_one_hot(explorer):
    _set_beta(explorer, BETA_MAX)
    state = explorer.state
    assert max(state["softmax"]) > 1 - 1e-3
    assert state["softmax"] == pytest.approx(state["hardmax"], abs=1e-3)
    assert state["sparsemax"] == state["hardmax"]  # exactly: sparsemax is one-hot from beta = 2.5
    assert state["nonzero"] == {"softmax": 5, "sparsemax": 1, "hardmax": 1}  # softmax: tiny, never zero
    assert state["entropy"]["softmax"] < 1e-3


def test_beta_near_zero_makes_softmax_and_sparsemax_uniform_but_not_hardmax(explorer):
    _set_beta(explorer, BETA_MIN)
    state = explorer.state
    assert state["softmax"] == pytest.approx([0.2] * 5, abs=0.01)
    # sparsemax near beta = 0 is exactly uniform plus beta times the centred scores
    centred = [BETA_MIN * (score - sum(DEFAULT_SCORES) / 5) for score in DEFAULT_SCORES]
    assert state["sparsemax"] == pytest.approx([0.2 + c for c in centred], abs=1e-12)
    assert state["nonzero"]["sparsemax"] == 5
    assert state["entropy"]["softmax"] == pytest.approx(math.log(5), abs=1e-3)
    assert state["uniform_entropy"] == pytest.approx(math.log(5))
    assert state["hardmax"] == [0.0, 1.0, 0.0, 0.0, 0.0]  # beta never changes which score is largest


def test_sparsemax_has_exact_zeros_sums_to_1_and_every_entropy_matches_ab_entropy(explorer):
    for beta in [0.03, 0.3, 1.0, 2.0, 7.0]:
        _set_beta(explorer, beta)
        state = explorer.state
        scaled = beta * torch.tensor(DEFAULT_SCORES, dtype=torch.float64)
        torch.testing.assert_close(torch.tensor(state["sparsemax"], dtype=torch.float64), ab.sparsemax(scaled))
        assert sum(state["sparsemax"]) == pytest.approx(1.0, abs=1e-12)
        assert state["nonzero"]["sparsemax"] == sum(weight > 0 for weight in state["sparsemax"])
        if beta >= 0.3:
            assert 0.0 in state["sparsemax"]  # exact zeros, not tiny weights
        for name in METHODS:
            assert sum(state[name]) == pytest.approx(1.0, abs=1e-12)
            expected = ab.entropy(torch.tensor(state[name], dtype=torch.float64)).item()
            assert state["entropy"][name] == pytest.approx(expected, abs=1e-12)


def test_sparsemax_loses_keys_one_at_a_time_as_beta_grows(explorer):
    counts = []
    for beta in [0.1, 0.2, 0.3, 1.0, 3.0]:
        _set_beta(explorer, beta)
        counts.append(explorer.state["nonzero"]["sparsemax"])
    assert counts == [5, 4, 3, 2, 1]


def test_typed_scores_with_a_tie_share_the_hard_weight_and_relabel_the_bars(explorer):
    explorer.scores_text.value = "a=1, b=1, c=0"
    assert explorer.error is None
    state = explorer.state
    assert state["labels"] == ["a", "b", "c"] and state["scores"] == [1.0, 1.0, 0.0]
    assert state["hardmax"] == [0.5, 0.5, 0.0]
    _set_beta(explorer, BETA_MAX)
    assert explorer.state["softmax"] == pytest.approx([0.5, 0.5, 0.0], abs=1e-6)
    assert [tick.get_text() for tick in explorer.bars["softmax"][0].axes.get_xticklabels()] == ["a", "b", "c"]


def test_plain_numbers_get_key_labels_and_equal_scores_give_uniform_weights_at_every_beta(explorer):
    explorer.scores_text.value = "2, 2, 2, 2"
    assert explorer.state["labels"] == ["key 1", "key 2", "key 3", "key 4"]
    for beta in (BETA_MIN, 1.0, BETA_MAX):
        _set_beta(explorer, beta)
        for name in METHODS:
            assert explorer.state[name] == pytest.approx([0.25] * 4, abs=1e-12)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "type one score per key"),
        ("a=1, b=two", "'two' (entry 2) is not a number"),
        ("a=1, , c=2", "entry 2 is empty"),
        ("a=1, b=nan", "is not a finite number"),
        ("a=1, b=1e9", "keep scores between -20 and 20"),
        (", ".join(["1"] * 11), "11 scores were given; this widget shows 1 to 10 keys"),
    ],
)
def test_bad_scores_show_a_message_and_the_widget_stays_usable(explorer, text, fragment):
    before = explorer.state
    explorer.scores_text.value = text
    assert explorer.error is not None and fragment in explorer.error
    assert html.escape(explorer.error) in explorer.message.value  # shown in the widget, not raised
    assert explorer.state is before  # the last good state is kept
    explorer.beta_slider.value = 2.0  # still broken text: the message stays
    assert explorer.error is not None and explorer.state is before
    explorer.scores_text.value = "x=3, y=1"
    assert explorer.error is None and explorer.message.value == ""
    assert explorer.state["labels"] == ["x", "y"] and explorer.state["beta"] == 2.0


def test_parse_and_format_scores_round_trip():
    labels, scores = parse_scores("[river=1.9, bank = 1.5, 0.2]")
    assert labels == ["river", "bank", "key 3"] and scores == [1.9, 1.5, 0.2]
    assert parse_scores(format_scores(["a b", "c"], [0.1234567, -2.0])) == (["a b", "c"], [0.123457, -2.0])
    with pytest.raises(WidgetInputError, match="between -5 and 5"):
        parse_scores("6", limit=5)


def test_custom_scores_and_labels_and_a_starting_beta():
    widget = SoftHardExplorer(torch.tensor([3.0, 1.0]), ["yes", "no"], device="cpu", beta=0.5)
    assert widget.state["labels"] == ["yes", "no"] and widget.state["beta"] == 0.5
    assert widget.scores_text.value == "yes=3, no=1"
    assert widget.state["softmax"] == pytest.approx([1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(1.0))])
    assert SoftHardExplorer([1.0, 2.0, 0.0], device="cpu").state["labels"] == ["key 1", "key 2", "key 3"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scores": [[1.0, 2.0]]}, r"one row of 1 to 10 numbers .* shape \(1, 2\)"),
        ({"scores": list(range(11))}, r"one row of 1 to 10 numbers"),
        ({"scores": [1.0, float("inf")]}, r"finite numbers between -20 and 20"),
        ({"scores": ["a", "b"]}, r"scores must be a list of numbers or a 1-D tensor"),
        ({"scores": [1.0, 2.0], "labels": ["a"]}, r"labels has 1 labels but there are 2 scores"),
        ({"scores": [1.0, 2.0], "labels": "ab"}, r"labels must be a list of strings"),
        ({"scores": [1.0, 2.0], "labels": ["a", "b=c"]}, r"contain no ',' or '='"),
        ({"beta": 0.0}, r"beta must be a number from 0.01 to 100, but 0.0 was given"),
        ({"beta": 1000}, r"beta must be a number from 0.01 to 100"),
        ({"device": "tpu"}, r"device 'tpu' is not available here"),
    ],
)
def test_bad_arguments_raise_value_errors_that_say_what_was_expected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SoftHardExplorer(**kwargs)


def test_static_page_gets_a_png_and_the_device_menu_lists_cpu(explorer):
    bundle = explorer._repr_mimebundle_()
    assert "image/png" in bundle and "application/vnd.jupyter.widget-view+json" in bundle
    assert "open this chapter in Jupyter or Colab" in bundle["text/plain"]
    assert "cpu" in explorer.device_dropdown.options
    assert explorer.png().startswith(b"\x89PNG")


def test_the_picture_changes_with_beta_and_every_change_is_timed(explorer):
    first = explorer.png()
    before = len(explorer.timings_ms)
    for i, beta in enumerate([0.05, 0.5, 5.0, 50.0, 0.02]):
        explorer.beta_slider.value = beta
        assert len(explorer.timings_ms) == before + i + 1
    assert explorer.png() != first
    explorer.beta_slider.value = 1.0
    assert explorer.png() == first  # the same state draws the same picture


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_device_gives_the_same_weights():
    widget = SoftHardExplorer(device="cpu", beta=3.0)
    on_cpu = {name: widget.state[name] for name in METHODS}
    widget.device_dropdown.value = "cuda"
    assert widget.error is None
    for name in METHODS:
        assert widget.state[name] == pytest.approx(on_cpu[name], abs=1e-12)


def test_the_fast_png_encoder_writes_exactly_the_canvas_pixels(explorer):
    explorer.beta_slider.value = 3.0
    data = explorer.png()
    pixels = np.asarray(explorer._canvas.buffer_rgba())
    decoded = Image.open(io.BytesIO(data))
    assert decoded.mode == "RGBA" and decoded.size == (pixels.shape[1], pixels.shape[0])
    assert np.array_equal(np.asarray(decoded), pixels)
    with pytest.raises(ValueError, match="RGBA image"):
        png_bytes(np.zeros((2, 2, 3), dtype=np.uint8))
