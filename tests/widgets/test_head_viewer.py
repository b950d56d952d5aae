"""Chapters 4 and 7's HeadViewer: every layer's and head's weights, checked against the model."""

import pytest
import torch

import attention_book as ab
from attention_book.data.tasks import word_encoder
from attention_book.widgets import HeadViewer as ExportedViewer
from attention_book.widgets.head_viewer import ALL_HEADS, HeadViewer

WORDS = "the cat sat on a mat while dog ran to park and it was sunny".split()
SENTENCE = "the cat sat on a mat while it was sunny"
MAX_LEN = 12


def small_model(num_layers=2) -> ab.Encoder:
    torch.manual_seed(0)
    return ab.Encoder(len(WORDS) + 1, d_model=32, num_heads=4, d_ff=64, num_layers=num_layers, max_len=MAX_LEN).eval()


@pytest.fixture
def model():
    return small_model()


@pytest.fixture
def encode():
    return word_encoder(["<pad>", *WORDS], max_len=MAX_LEN)


@pytest.fixture
def viewer(model, encode):
    return HeadViewer(model, encode, SENTENCE, device="cpu")


def own_weights(model, encode, text) -> torch.Tensor:
    """What the model itself reports for ``text``: (layers, heads, T, T)."""
    tokens, _ = encode(text)
    with torch.no_grad():
        model(tokens)
    return torch.stack([w[0] for w in model.attention_weights()])


def test_the_widgets_package_exports_the_viewer():
    assert ExportedViewer is HeadViewer


def test_sends_every_layer_and_head_as_the_model_reports_them(viewer, model, encode):
    torch.testing.assert_close(
        torch.tensor(viewer.data["weights"]), own_weights(model, encode, SENTENCE), atol=1e-3, rtol=0
    )
    assert viewer.data["labels"] == SENTENCE.split() and viewer.view == {"layer": 0, "head": ALL_HEADS}


def test_choosing_a_layer_and_a_head_shows_them_without_running_the_model(viewer, model, encode):
    passes = viewer.forward_passes
    viewer.set_view(layer=1, head=2)
    torch.testing.assert_close(viewer.shown()["weights"], own_weights(model, encode, SENTENCE)[1, 2], atol=1e-3, rtol=0)
    assert viewer.forward_passes == passes


def test_every_row_sent_is_a_distribution(viewer):
    sums = torch.tensor(viewer.data["weights"]).sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums), atol=5e-3, rtol=0)


def test_a_new_sentence_runs_the_model_again(viewer, model, encode):
    passes = viewer.forward_passes
    viewer.set_text("the dog ran to the park")
    assert viewer.forward_passes == passes + 1 and viewer.data["labels"] == "the dog ran to the park".split()
    torch.testing.assert_close(
        torch.tensor(viewer.data["weights"]), own_weights(model, encode, "the dog ran to the park"), atol=1e-3, rtol=0
    )


def test_refresh_shows_what_a_further_trained_model_does_now(viewer, model):
    before = viewer.data["weights"]
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))
    viewer.refresh()
    assert viewer.data["weights"] != before


@pytest.mark.parametrize("text, fragment", [("", "empty"), ("the zebra", "zebra")])
def test_bad_input_is_an_error_next_to_the_sentence_and_the_next_good_input_works(viewer, text, fragment):
    viewer.set_text(text)
    assert viewer.error["control"] == "sentence" and fragment in viewer.error["message"]
    viewer.set_text("the cat")
    assert viewer.error == {} and viewer.data["labels"] == ["the", "cat"]


def test_a_sentence_longer_than_the_model_allows_is_an_error_even_if_encode_lets_it_through(model):
    viewer = HeadViewer(model, word_encoder(["<pad>", *WORDS], max_len=40), "the cat", device="cpu")
    viewer.set_text(" ".join(["the"] * 20))
    assert "cannot read" in viewer.error["message"]


def test_a_one_layer_model_sends_one_layer(encode):
    viewer = HeadViewer(small_model(num_layers=1), encode, SENTENCE, device="cpu")
    assert viewer.data["num_layers"] == 1 and len(viewer.data["weights"]) == 1


def test_the_model_runs_in_eval_mode_and_keeps_its_training_flag(encode):
    model = small_model().train()
    HeadViewer(model, encode, SENTENCE, device="cpu")
    assert model.training


@pytest.mark.parametrize(
    "arguments, pattern",
    [
        ({"layer": 2}, "layer must be"),
        ({"head": 4}, "head must be"),
        ({"text": ""}, "first sentence"),
        ({"title": 3}, "title must be"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(model, encode, arguments, pattern):
    options = {"text": SENTENCE, **arguments}
    with pytest.raises(ValueError, match=pattern):
        HeadViewer(model, encode, device="cpu", **options)
