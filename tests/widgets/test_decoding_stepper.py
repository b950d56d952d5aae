"""Chapter 6's DecodingStepper, driven headless the way a student drives it."""

import html

import pytest
import torch

import attention_book as ab
from attention_book.widgets import DecodingStepper
from attention_book.widgets.decoding_stepper import AVERAGE, parse_source


def _model(num_layers=2, seed=0):
    """A small untrained encoder-decoder: its greedy decoding is arbitrary but deterministic."""
    torch.manual_seed(seed)
    return ab.EncoderDecoder(13, 13, d_model=32, num_heads=2, d_ff=64, num_layers=num_layers, max_len=10).eval()


@pytest.fixture
def task():
    return ab.SequenceTask("sort", 4, min_len=5, max_len=5, num_symbols=10, seed=3)


@pytest.fixture
def model():
    return _model()


@pytest.fixture
def stepper(model, task):
    return DecodingStepper(model, task.source[:1], task.vocab, device="cpu")


def _greedy_labels(model, vocab, labels, max_len=9):
    """What ab.greedy_decode writes for a source, up to and including the first EOS."""
    output = ab.greedy_decode(model, vocab.encode(labels)[None], max_len, bos=ab.BOS, eos=ab.EOS)[0].tolist()
    if ab.EOS in output:
        output = output[: output.index(ab.EOS) + 1]
    return [vocab.tokens[i] for i in output]


def _own_weights(model, memory, fed, layer):
    """Run the decoder on the tokens fed so far; return its self- and cross-attention (heads, step, *)."""
    with torch.no_grad():
        model.decode(fed[None], memory)
    decoder_layer = model.decoder.layers[layer]
    return decoder_layer.self_attn.last_weights[0], decoder_layer.cross_attn.last_weights[0]


def test_stepping_shows_the_tokens_that_greedy_decode_writes(stepper, model, task):
    labels = task.vocab.decode(task.source[0])
    expected = _greedy_labels(model, task.vocab, labels)
    assert stepper.state["source"] == labels
    assert stepper.state["output"] == expected
    assert stepper.step_slider.max == len(expected)
    assert stepper.state["step"] == len(expected)  # starts at the last step: the whole decoding is visible
    stepper.step_slider.value = 1
    for step in range(1, len(expected) + 1):
        assert stepper.state["step"] == step
        assert stepper.state["written"] == expected[:step]
        assert stepper.state["fed"] == ["<bos>"] + expected[: step - 1]
        assert stepper.vocab.tokens[stepper.state["chosen"]] == expected[step - 1]
        probabilities = stepper.state["probabilities"]
        assert max(range(len(probabilities)), key=probabilities.__getitem__) == stepper.state["chosen"]  # greedy
        stepper.next_button.click()
    assert stepper.state["step"] == len(expected)  # "next" stops at the last step
    stepper.back_button.click()
    assert stepper.state["step"] == len(expected) - 1


@pytest.mark.parametrize("layer, head", [(1, AVERAGE), (0, AVERAGE), (0, 1), (1, 0)])
def test_rows_shown_are_the_models_own_weights_at_that_step(stepper, model, task, layer, head):
    stepper.layer_dropdown.value = layer
    stepper.head_dropdown.value = head
    output = task.vocab.encode(stepper.state["output"])
    memory = model.encode(task.source[:1])
    for step in range(1, len(output) + 1):
        stepper.step_slider.value = step
        fed = torch.cat([torch.tensor([ab.BOS]), output[: step - 1]])
        self_weights, cross_weights = _own_weights(model, memory, fed, layer)  # (heads, step, step), (heads, step, T_in)
        pick = (lambda w: w.mean(0)) if head == AVERAGE else (lambda w: w[head])
        assert stepper.state["cross_row"] == pytest.approx(pick(cross_weights)[-1].tolist(), abs=1e-6)
        assert stepper.state["self_row"] == pytest.approx(pick(self_weights)[-1].tolist(), abs=1e-6)
        assert len(stepper.state["self_row"]) == step and sum(stepper.state["self_row"]) == pytest.approx(1.0)
        assert sum(stepper.state["cross_row"]) == pytest.approx(1.0)
        assert (stepper.state["layer"], stepper.state["head"]) == (layer, head)


def test_earlier_rows_equal_the_rows_of_earlier_steps(stepper):
    """Causality: the rows shown for steps 1..t at step t are those each step computed itself."""
    last = stepper.step_slider.max
    rows = {}
    for step in range(1, last + 1):
        stepper.step_slider.value = step
        rows[step] = stepper.state["cross_row"]
    stepper.step_slider.value = last
    for step in range(1, last + 1):
        assert stepper.state["cross_rows"][step - 1].tolist() == pytest.approx(rows[step], abs=1e-6)


def test_a_typed_source_is_decoded_and_the_steps_start_over(stepper, model, task):
    stepper.source_text.value = "j a c a f"  # lower case is accepted
    assert stepper.error is None
    assert stepper.state["source"] == ["J", "A", "C", "A", "F"]
    assert stepper.state["output"] == _greedy_labels(model, task.vocab, ["J", "A", "C", "A", "F"])
    assert stepper.state["step"] == 1
    assert stepper.step_slider.max == len(stepper.state["output"])
    stepper.source_text.value = "BAD"  # one-letter symbols may be typed without spaces
    assert stepper.state["source"] == ["B", "A", "D"]


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "type a source sequence"),
        ("A B Z", "unknown token 'Z'"),
        ("A <eos> B", "special token"),
        ("A B C D E F G H I J A", "at most 10 tokens"),
    ],
)
def test_bad_source_shows_a_message_and_the_widget_stays_usable(stepper, text, fragment):
    before = dict(stepper.state)
    stepper.source_text.value = text
    assert stepper.error is not None and fragment in stepper.error
    assert html.escape(stepper.error) in stepper.message.value  # shown in the widget, not raised
    assert stepper.state["source"] == before["source"]  # the last good state is kept
    stepper.step_slider.value = 1  # another control: the last good source is decoded, and shown in the box again
    assert stepper.error is None and stepper.message.value == ""
    assert stepper.state["step"] == 1 and stepper.state["source"] == before["source"]
    assert stepper.source_text.value == " ".join(before["source"])


def test_a_model_that_stops_at_once_has_a_single_step(task):
    model = _model()
    with torch.no_grad():
        model.output.bias[ab.EOS] = 100.0  # always writes <eos>
    stepper = DecodingStepper(model, task.source[:1], task.vocab, device="cpu")
    assert stepper.state["output"] == ["<eos>"]
    assert stepper.step_slider.max == 1 and stepper.state["step"] == 1
    stepper.next_button.click()
    assert stepper.state["step"] == 1 and stepper.error is None


def test_max_len_limits_the_output_and_the_model_is_left_as_it_was(task):
    model = _model()
    model.train()
    stepper = DecodingStepper(model, task.source[0], task.vocab, device="cpu", max_len=3, step=2)
    assert len(stepper.state["output"]) <= 3
    assert stepper.state["step"] == 2
    assert model.training  # the widget switches to eval mode only while it computes
    assert next(model.parameters()).device.type == "cpu"


def test_padding_at_the_end_of_the_source_is_dropped():
    task = ab.SequenceTask("sort", 10, min_len=3, max_len=8, num_symbols=10, seed=0)
    index = int((task.source_padding.sum(1) < 8).nonzero()[0])
    stepper = DecodingStepper(_model(), task.source[index : index + 1], task.vocab, device="cpu")
    assert stepper.state["source"] == task.vocab.decode(task.source[index])
    assert "<pad>" not in stepper.state["source"]


@pytest.mark.parametrize(
    "arguments, pattern",
    [
        (dict(source=torch.zeros(1, 3, 2, dtype=torch.long)), "shape"),
        (dict(source=torch.tensor([[3.0, 4.0]])), "dtype"),
        (dict(source=torch.tensor([[3, 40]])), "must be symbols"),
        (dict(source=torch.tensor([[ab.PAD, ab.PAD]])), "only padding"),
        (dict(max_len=0), "max_len"),
        (dict(max_len=50), "max_len"),
        (dict(model=ab.Encoder(13)), "encoder-decoder"),
        (dict(vocab=["A", "B"]), "Vocabulary"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(task, arguments, pattern):
    options = dict(model=_model(), source=task.source[:1], vocab=task.vocab, device="cpu")
    options.update(arguments)
    with pytest.raises(ValueError, match=pattern):
        DecodingStepper(**options)


def test_static_page_gets_a_png_and_the_device_menu_lists_cpu(stepper):
    bundle = stepper._repr_mimebundle_()
    assert "image/png" in bundle and bundle["text/plain"].startswith("<DecodingStepper")
    assert "cpu" in stepper.device_dropdown.options
    assert stepper.png().startswith(b"\x89PNG")


def test_every_control_change_is_timed(stepper):
    before = len(stepper.timings_ms)
    stepper.step_slider.value = 1
    stepper.next_button.click()
    stepper.layer_dropdown.value = 0
    stepper.head_dropdown.value = 1
    stepper.source_text.value = "C A B"
    assert len(stepper.timings_ms) == before + 5


def test_parse_source_accepts_commas_and_spaces():
    vocab = ab.SequenceTask("sort", 1, num_symbols=4).vocab
    assert parse_source("A, b  C", vocab, 5) == ["A", "B", "C"]
    assert parse_source("abcd", vocab, 5) == ["A", "B", "C", "D"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_gives_the_same_decoding_as_cpu(stepper):
    cpu_state = dict(stepper.state)
    stepper.device_dropdown.value = "cuda"
    assert stepper.error is None
    assert stepper.state["output"] == cpu_state["output"]
    assert stepper.state["cross_row"] == pytest.approx(cpu_state["cross_row"], abs=1e-4)
