"""The HeadViewer (chapters 4, 6, 7), driven headless the way a student drives it."""

import html

import pytest
import torch

import attention_book as ab
from attention_book.data.tasks import word_encoder
from attention_book.widgets import HeadViewer as ExportedViewer
from attention_book.widgets.head_viewer import ALL_HEADS, HeadViewer

WORDS = "the cat sat on a mat while dog ran to park and it was sunny".split()
SENTENCE = "the cat sat on a mat while it was sunny"
MAX_LEN = 12


def small_model(**options) -> ab.Encoder:
    torch.manual_seed(0)
    return ab.Encoder(len(WORDS) + 1, d_model=32, num_heads=4, d_ff=64, num_layers=2, max_len=MAX_LEN, **options).eval()


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


def test_starts_with_the_grid_of_all_heads_of_layer_0(viewer, model, encode):
    state = viewer.state
    assert state["head"] == ALL_HEADS and state["layer"] == 0
    assert state["labels"] == SENTENCE.split()
    assert (state["num_layers"], state["num_heads"]) == (2, 4)
    assert state["weights"].shape == (4, 10, 10)
    torch.testing.assert_close(state["weights"], own_weights(model, encode, SENTENCE)[0])


def test_choosing_head_2_shows_head_2s_weights(viewer, model, encode):
    viewer.head_dropdown.value = 2
    assert viewer.state["head"] == 2 and viewer.state["weights"].shape == (10, 10)
    expected = own_weights(model, encode, SENTENCE)
    torch.testing.assert_close(viewer.state["weights"], expected[0, 2])
    assert not torch.allclose(expected[0, 2], expected[0, 1])  # so the comparison can tell heads apart


def test_choosing_another_layer_shows_that_layers_weights(viewer, model, encode):
    expected = own_weights(model, encode, SENTENCE)
    viewer.layer_dropdown.value = 1
    torch.testing.assert_close(viewer.state["weights"], expected[1])  # the grid of layer 1
    viewer.head_dropdown.value = 3
    torch.testing.assert_close(viewer.state["weights"], expected[1, 3])
    assert not torch.allclose(expected[1, 3], expected[0, 3])


def test_every_shown_row_is_a_distribution(viewer):
    for head in [ALL_HEADS, 0, 1, 2, 3]:
        viewer.head_dropdown.value = head
        weights = viewer.state["weights"]
        assert (weights >= 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_a_new_sentence_reruns_the_model_but_a_new_head_does_not(viewer, model, encode):
    calls = []
    model.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].shape))
    viewer.head_dropdown.value = 1
    viewer.layer_dropdown.value = 1
    assert calls == []  # only redrawn from the last run
    viewer.sentence_text.value = "a dog ran to the park"
    assert calls == [(1, 6)]
    assert viewer.state["labels"] == ["a", "dog", "ran", "to", "the", "park"]
    torch.testing.assert_close(viewer.state["weights"], own_weights(model, encode, "a dog ran to the park")[1, 1])
    viewer.set_text("a dog ran to the park")  # pressing Enter again runs it again
    assert len(calls) == 3  # that run and own_weights above


def test_refresh_shows_what_a_further_trained_model_does_now(viewer, model, encode):
    viewer.head_dropdown.value = 0
    with torch.no_grad():
        model.layers[0].self_attn.q_proj.weight.mul_(3.0)  # "training" changes the weights
    viewer.refresh()
    torch.testing.assert_close(viewer.state["weights"], own_weights(model, encode, SENTENCE)[0, 0])


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "the sentence is empty"),
        ("   ", "the sentence is empty"),
        ("the zebra sat", "unknown word 'zebra'"),
        ("the cat sat on " * 4, f"at most {MAX_LEN}"),
    ],
)
def test_bad_input_shows_a_message_and_the_next_good_input_works(viewer, model, encode, text, fragment):
    viewer.head_dropdown.value = 2
    before = viewer.state
    viewer.sentence_text.value = text
    assert viewer.error is not None and fragment in viewer.error
    assert html.escape(viewer.error) in viewer.message.value  # shown in the widget, not raised
    assert viewer.state is before  # the last good picture stays
    viewer.sentence_text.value = "it was sunny"
    assert viewer.error is None and viewer.message.value == ""
    torch.testing.assert_close(viewer.state["weights"], own_weights(model, encode, "it was sunny")[0, 2])


def test_a_sentence_longer_than_the_model_allows_is_a_message_even_if_encode_lets_it_through(model):
    lenient = word_encoder(["<pad>", *WORDS])  # no max_len: the model's own check must be caught
    viewer = HeadViewer(model, lenient, "the cat", device="cpu")
    viewer.sentence_text.value = " ".join(["cat"] * (MAX_LEN + 1))
    assert viewer.error is not None and "cannot read this sentence" in viewer.error and "max_len" in viewer.error
    viewer.sentence_text.value = "the dog"
    assert viewer.error is None and viewer.state["labels"] == ["the", "dog"]


def test_changing_layer_or_head_after_an_error_keeps_working(viewer):
    viewer.sentence_text.value = "zebra"
    assert viewer.error is not None
    viewer.sentence_text.value = SENTENCE  # back to a good sentence
    viewer.layer_dropdown.value = 1
    assert viewer.error is None and viewer.state["layer"] == 1


def test_displaying_leaves_a_png_and_the_device_menu_lists_cpu(viewer):
    bundle = viewer._repr_mimebundle_()
    assert "image/png" in bundle and "application/vnd.jupyter.widget-view+json" in bundle
    assert "open this chapter" in bundle["text/plain"]
    assert "cpu" in viewer.device_dropdown.options
    grid = viewer.png()
    assert grid.startswith(b"\x89PNG")
    viewer.head_dropdown.value = 0
    single = viewer.png()
    assert single.startswith(b"\x89PNG") and single != grid
    assert viewer.image.value == single  # the live picture is the same


def test_every_control_change_is_timed(viewer):
    before = len(viewer.timings_ms)
    for head in [0, 1, ALL_HEADS]:
        viewer.head_dropdown.value = head
    viewer.layer_dropdown.value = 1
    assert len(viewer.timings_ms) == before + 4
    assert viewer.median_update_ms() > 0


def test_the_model_runs_in_eval_mode_and_keeps_its_training_flag(encode):
    model = small_model(dropout=0.5).train()
    viewer = HeadViewer(model, encode, SENTENCE, device="cpu", head=1)
    assert model.training  # restored after each run
    model.eval()
    torch.testing.assert_close(viewer.state["weights"], own_weights(model, encode, SENTENCE)[0, 1])  # no dropout


def test_a_classifier_is_read_through_its_encoder(encode):
    torch.manual_seed(0)
    classifier = ab.EncoderClassifier(len(WORDS) + 1, 2, d_model=32, num_heads=2, d_ff=64, num_layers=3, max_len=MAX_LEN)
    viewer = HeadViewer(classifier, encode, "the cat sat", device="cpu", title="A classifier's heads", layer=2, head=1)
    assert viewer.title == "A classifier's heads" and "A classifier&#x27;s heads" in viewer.box.children[0].value
    assert (viewer.state["num_layers"], viewer.state["num_heads"]) == (3, 2)
    tokens, _ = encode("the cat sat")
    with torch.no_grad():
        classifier(tokens)
    torch.testing.assert_close(viewer.state["weights"], classifier.encoder.attention_weights()[2][0, 1])


def test_the_model_moves_to_the_device_chosen_and_stays_there(model, encode):
    viewer = HeadViewer(model, encode, SENTENCE)  # default: where the model is
    assert viewer.device_dropdown.value == "cpu"
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here to move the model to")
    viewer.device_dropdown.value = "cuda"
    assert next(model.parameters()).device.type == "cuda" and viewer.error is None
    on_gpu = viewer.state["weights"]
    assert on_gpu.device.type == "cpu"  # the weights shown are copied back
    viewer.head_dropdown.value = 0
    assert next(model.parameters()).device.type == "cuda"
    viewer.device_dropdown.value = "cpu"
    torch.testing.assert_close(viewer.state["weights"], own_weights(model, encode, SENTENCE)[0, 0], atol=1e-4, rtol=1e-3)


def test_bad_arguments_raise_value_errors_that_say_what_was_expected(model, encode):
    with pytest.raises(ValueError, match="no attention_weights"):
        HeadViewer(torch.nn.Linear(3, 3), encode, SENTENCE)
    with pytest.raises(ValueError, match="first sentence cannot be shown: unknown word 'zebra'"):
        HeadViewer(model, encode, "zebra", device="cpu")
    with pytest.raises(ValueError, match="layer must be an integer from 0 to 1"):
        HeadViewer(model, encode, SENTENCE, device="cpu", layer=2)
    with pytest.raises(ValueError, match="head must be 'all' or an integer from 0 to 3"):
        HeadViewer(model, encode, SENTENCE, device="cpu", head=4)
    with pytest.raises(ValueError, match="encode must be a function"):
        HeadViewer(model, "not a function", SENTENCE)
    with pytest.raises(ValueError, match="encode must return token ids of shape"):
        HeadViewer(model, lambda text: (torch.zeros(4), ["a"] * 4), SENTENCE, device="cpu")
    with pytest.raises(ValueError, match="2 tokens but 1 labels"):
        HeadViewer(model, lambda text: (torch.ones(1, 2, dtype=torch.long), ["a"]), SENTENCE, device="cpu")


def test_long_labels_and_many_tokens_still_draw(encode):
    words = [f"word{i}" for i in range(30)]
    torch.manual_seed(0)
    model = ab.Encoder(31, d_model=16, num_heads=8, d_ff=32, num_layers=1, max_len=40).eval()
    viewer = HeadViewer(model, word_encoder(["<pad>", *words]), " ".join(words), device="cpu")
    assert viewer.state["weights"].shape == (8, 30, 30)
    viewer.head_dropdown.value = 7  # too many tokens to write the numbers: only colours
    assert viewer.png().startswith(b"\x89PNG") and viewer.error is None


# ---------------------------------------------------------------------------------
# The models the chapters show in it


def test_the_two_relation_model_of_chapter_4_in_the_viewer():
    task = ab.TwoRelationTask(10, seed=1)
    torch.manual_seed(0)
    model = ab.TokenClassifier(len(task.vocabulary), task.num_classes, d_model=32, num_heads=2, d_ff=64, num_layers=1,
                               max_len=task.length)
    viewer = HeadViewer(model, task.encode, "a1 c3 b0 a2 d1 c0 b3 d2", device="cpu")
    assert viewer.error is None and (viewer.num_layers, viewer.num_heads) == (1, 2)
    assert viewer.state["weights"].shape == (2, 8, 8)
    tokens, _ = task.encode("a1 c3 b0 a2 d1 c0 b3 d2")
    with torch.no_grad():
        model(tokens)
    torch.testing.assert_close(viewer.state["weights"], model.attention_weights()[0][0])


def test_the_pretrained_model_of_chapter_7_in_the_viewer(minilm):
    sentence = "The film is not bad at all."
    viewer = HeadViewer(minilm, minilm.encode_sentence, sentence, device="cpu")
    assert viewer.error is None and (viewer.num_layers, viewer.num_heads) == (6, 12)
    tokens, labels = minilm.encode_sentence(sentence)
    with torch.no_grad():
        minilm(tokens)
    assert viewer.state["labels"] == labels
    torch.testing.assert_close(viewer.state["weights"], minilm.attention_weights()[0][0])  # layer 0, all heads
    viewer.set_text("word " * 50)  # too long for the viewer: a message, not an exception
    assert "at most 40 fit" in viewer.error
