"""Chapter 1's AttentionExplorer, driven headless the way a student drives it."""

import math

import pytest
import torch

import attention_book as ab
from attention_book.widgets import AttentionExplorer as ExportedExplorer
from attention_book.widgets import WidgetInputError
from attention_book.widgets.attention_explorer import AttentionExplorer, drawn_vector

TOKENS = ["the", "river", "bank"]
VECTORS = [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]


@pytest.fixture
def explorer():
    return AttentionExplorer(TOKENS, VECTORS, device="cpu")


def test_the_widgets_package_exports_the_explorer():
    assert ExportedExplorer is AttentionExplorer


def test_starts_on_the_last_token_with_scaled_scores_and_matches_the_hand_computation(explorer):
    state = explorer.state
    assert state["query_token"] == "bank" and state["query_index"] == 2
    # bank = [1, 1] scores 0, 1, 2 against the, river, bank, divided by sqrt(2)
    assert state["scores"] == pytest.approx([0.0, 1 / math.sqrt(2), 2 / math.sqrt(2)], abs=1e-6)
    exps = [math.exp(s) for s in state["scores"]]
    assert state["weights"] == pytest.approx([e / sum(exps) for e in exps], abs=1e-6)
    assert sum(state["weights"]) == pytest.approx(1.0, abs=1e-6)


def test_the_output_is_the_weighted_average_of_the_token_vectors(explorer):
    explorer.query_dropdown.value = 1  # river
    weights = torch.tensor(explorer.state["weights"])
    expected = weights @ torch.tensor(VECTORS)
    assert explorer.state["output"] == pytest.approx(expected.tolist(), abs=1e-6)


def test_state_matches_the_reference_attention_for_every_query_and_temperature(explorer):
    X = torch.tensor(VECTORS)
    for temperature in (0.3, 1.0, 4.0):
        explorer.temperature_slider.value = temperature
        for i in range(3):
            explorer.query_dropdown.value = i
            out, weights = ab.scaled_dot_product_attention(X[i : i + 1], X, X, temperature=explorer.temperature_slider.value)
            assert explorer.state["weights"] == pytest.approx(weights[0].tolist(), abs=1e-6)
            assert explorer.state["output"] == pytest.approx(out[0].tolist(), abs=1e-6)


def test_without_the_scale_the_scores_are_plain_dot_products(explorer):
    explorer.scale_checkbox.value = False
    assert explorer.state["scaled"] is False
    assert explorer.state["scores"] == pytest.approx([0.0, 1.0, 2.0], abs=1e-6)


def test_low_temperature_approaches_argmax_and_high_temperature_the_plain_average(explorer):
    explorer.temperature_slider.value = explorer.temperature_slider.base ** explorer.temperature_slider.min
    assert max(explorer.state["weights"]) > 0.99
    explorer.temperature_slider.value = explorer.temperature_slider.base ** explorer.temperature_slider.max
    assert explorer.state["weights"] == pytest.approx([1 / 3] * 3, abs=0.07)


def test_causal_attention_gives_later_tokens_zero_weight(explorer):
    explorer.causal_checkbox.value = True
    explorer.query_dropdown.value = 1  # river may look at the and river only
    assert explorer.state["causal"] is True
    assert explorer.state["weights"][2] == 0.0
    assert math.isinf(explorer.state["scores"][2])
    assert sum(explorer.state["weights"]) == pytest.approx(1.0, abs=1e-6)
    explorer.query_dropdown.value = 0  # the first token sees only itself
    assert explorer.state["weights"] == pytest.approx([1.0, 0.0, 0.0])


def test_editing_the_sentence_reorders_tokens_and_updates_the_query_menu(explorer):
    explorer.sentence_text.value = "bank the river bank"
    assert explorer.error is None
    assert explorer.state["tokens"] == ["bank", "the", "river", "bank"]
    assert [label for label, _ in explorer.query_dropdown.options] == ["1: bank", "2: the", "3: river", "4: bank"]
    weights = explorer.state["weights"]
    assert weights[0] == pytest.approx(weights[3], abs=1e-7)  # the same token twice gets the same weight


def test_bad_sentences_show_a_message_and_keep_the_widget_usable(explorer):
    before = explorer.state
    for text, words in [("", "empty"), ("the river dog", "unknown token 'dog'"), (" ".join(["the"] * 11), "at most 10")]:
        explorer.sentence_text.value = text
        assert explorer.error is not None and words in explorer.error
        assert explorer.state is before
        assert explorer.message.value != ""
    explorer.sentence_text.value = "river bank"
    assert explorer.error is None and explorer.message.value == ""
    assert explorer.state["tokens"] == ["river", "bank"]


def test_drawn_vectors_are_seeded_and_new_words_get_vectors(monkeypatch):
    first = AttentionExplorer(device="cpu", seed=3)
    second = AttentionExplorer(device="cpu", seed=3)
    assert first.state["vectors"] == second.state["vectors"]
    assert first.state["tokens"] == "the cat sat on the mat".split()
    assert first.state["vectors"][0] == first.state["vectors"][4]  # 'the' twice: one vector
    assert first.state["vectors"][0] == pytest.approx(drawn_vector("the", 3, 4).tolist())
    first.sentence_text.value = "a dog barked"
    assert first.error is None and len(first.state["vectors"]) == 3
    assert AttentionExplorer(device="cpu", seed=4).state["vectors"] != first.state["vectors"]


def test_tokens_as_a_string_and_vectors_without_tokens():
    assert AttentionExplorer("the river bank", VECTORS, device="cpu").state["tokens"] == TOKENS
    assert AttentionExplorer(vectors=torch.eye(3), device="cpu").state["tokens"] == ["x1", "x2", "x3"]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"tokens": TOKENS, "vectors": VECTORS[:2]}, "3 tokens but 2 vectors"),
        ({"tokens": ["a", "a"], "vectors": [[1.0], [2.0]]}, "occurs twice with different vectors"),
        ({"tokens": [], "vectors": None}, "empty"),
        ({"tokens": ["w"] * 11}, "1 to 10 tokens"),
        ({"tokens": ["two words"]}, "without spaces"),
        ({"tokens": TOKENS, "vectors": [1.0, 2.0, 3.0]}, "shape (T, d)"),
        ({"tokens": TOKENS, "vectors": torch.zeros(3, 9)}, "1 to 8 numbers"),
        ({"tokens": TOKENS, "vectors": [[0.0, float("nan")], [1, 0], [1, 1]]}, "finite"),
        ({"dim": 0}, "dim must be"),
        ({"seed": 1.5}, "seed must be"),
        ({"tokens": TOKENS, "vectors": VECTORS, "query": 3}, "token index from 0 to 2"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(kwargs, words):
    with pytest.raises(ValueError, match=None) as error:
        AttentionExplorer(device="cpu", **kwargs)
    assert words in str(error.value)
    assert not isinstance(error.value, WidgetInputError)


def test_static_page_gets_a_png_and_the_device_menu_lists_cpu(explorer):
    bundle = explorer._repr_mimebundle_()
    assert "image/png" in bundle
    assert "cpu" in explorer.device_dropdown.options
    assert explorer.png().startswith(b"\x89PNG")


def test_sliders_update_on_release_and_controls_are_the_same_objects(explorer):
    assert explorer.temperature_slider.continuous_update is False
    assert explorer.sentence_text.continuous_update is False
    assert all(a is b for a, b in zip(explorer.controls(), explorer.controls()))


def test_every_control_change_is_timed(explorer):
    before = len(explorer.timings_ms)
    explorer.temperature_slider.value = 2.0
    explorer.query_dropdown.value = 0
    explorer.scale_checkbox.value = False
    explorer.causal_checkbox.value = True
    explorer.sentence_text.value = "bank river"
    assert len(explorer.timings_ms) == before + 5
