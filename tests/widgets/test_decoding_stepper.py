"""Chapter 6's DecodingStepper: greedy decoding and each step's attention, checked against the model."""

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


def test_the_output_is_what_greedy_decode_writes_and_it_starts_on_the_last_step(stepper, model, task):
    labels = task.vocab.decode(task.source[0])
    expected = _greedy_labels(model, task.vocab, labels)
    assert stepper.data["source"] == labels and stepper.data["output"] == expected
    assert stepper.view["step"] == len(expected)
    assert stepper.data["fed"] == ["<bos>", *expected[:-1]]
    assert stepper.data["stopped_at_limit"] == (expected[-1] != "<eos>")


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("head", [AVERAGE, 0, 1])
def test_each_step_shows_the_rows_the_decoder_computed_at_that_step(stepper, model, task, layer, head):
    """Row t of one pass over everything fed equals what decoding step t alone computes (causality)."""
    output = task.vocab.encode(stepper.data["output"])
    memory = model.encode(task.source[:1])
    stepper.set_view(layer=layer, head=head)
    for step in range(1, len(output) + 1):
        stepper.set_view(step=step)
        fed = torch.cat([torch.tensor([ab.BOS]), output[: step - 1]])
        with torch.no_grad():
            logits = model.decode(fed[None], memory)
        decoder_layer = model.decoder.layers[layer]
        own_self, own_cross = decoder_layer.self_attn.last_weights[0], decoder_layer.cross_attn.last_weights[0]
        if head == AVERAGE:
            own_self, own_cross = own_self.mean(0), own_cross.mean(0)
        else:
            own_self, own_cross = own_self[head], own_cross[head]
        shown = stepper.shown()
        assert shown["self_row"] == pytest.approx(own_self[-1].tolist(), abs=2e-3)
        assert shown["cross_row"] == pytest.approx(own_cross[-1].tolist(), abs=2e-3)
        assert shown["probabilities"] == pytest.approx(torch.softmax(logits[0, -1], -1).tolist(), abs=1e-3)
        assert shown["written"] == stepper.data["output"][:step]


def test_a_typed_source_is_decoded_and_shown_whole(stepper, model, task):
    stepper.set_input("source", "J A C A F")
    assert stepper.error == {} and stepper.data["output"] == _greedy_labels(
        model, task.vocab, ["J", "A", "C", "A", "F"]
    )
    assert stepper.view["step"] == len(stepper.data["output"])


@pytest.mark.parametrize(
    "text, fragment",
    [("", "type a source"), ("A Z", "unknown token 'Z'"), ("<bos> A", "special token"), ("A" * 11, "at most")],
)
def test_a_bad_source_is_an_error_next_to_the_source_box(stepper, text, fragment):
    before = stepper.data["source"]
    stepper.set_input("source", text)
    assert stepper.error["control"] == "source" and fragment in stepper.error["message"]
    assert stepper.data["source"] == before


def test_stopping_at_max_len_without_eos_is_said(task):
    stepper = DecodingStepper(_model(), task.source[0], task.vocab, device="cpu", max_len=3, step=2)
    assert len(stepper.data["output"]) <= 3 and stepper.view["step"] == 2
    if "<eos>" not in stepper.data["output"]:
        assert stepper.data["stopped_at_limit"] and stepper.data["max_len"] == 3


def test_the_model_trains_after_the_widget_and_the_weights_it_left_clone_into_autograd(stepper, model, task):
    """The widget computes under inference_mode (see AttentionWidget.update): what it leaves must not
    get in the way of training the model afterwards, and its weights become usable by clone()."""
    left = model.decoder.layers[0].self_attn.last_weights
    assert left.is_inference()
    scale = torch.ones((), requires_grad=True)
    (left.clone() * scale).sum().backward()  # the documented way to use them with autograd
    assert scale.grad is not None
    model.train()
    batch = next(iter(torch.utils.data.DataLoader(task, batch_size=4)))
    loss = ab.seq2seq_loss(model, batch)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_parse_source_accepts_commas_spaces_and_run_together_symbols():
    vocab = ab.SequenceTask("sort", 1, num_symbols=4).vocab
    assert parse_source("a, b c", vocab, 5) == ["A", "B", "C"] and parse_source("ABC", vocab, 5) == ["A", "B", "C"]


def test_a_character_vocabulary_with_spaces_reads_a_date_as_typed():
    from attention_book.data.dates import DateTask
    from attention_book.widgets._base import WidgetInputError

    dates = DateTask(2, split="test", seed=0)
    assert parse_source("March 3, 1998", dates.vocab, 32) == list("March 3, 1998")
    spaced_out = " ".join("3 Mar 1998")  # how the page's text box shows the tokens after decoding
    assert parse_source(spaced_out, dates.vocab, 32) == list("3 Mar 1998")
    with pytest.raises(WidgetInputError, match="unknown character '!'"):
        parse_source("3/3/98!", dates.vocab, 32)
    with pytest.raises(WidgetInputError, match="at most 5 characters"):
        parse_source("3/3/98", dates.vocab, 5)
    torch.manual_seed(0)
    model = ab.EncoderDecoder(
        len(dates.vocab), len(dates.vocab), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=32
    )
    stepper = DecodingStepper(model, dates.encode("tuesday 3rd of march 1998"), dates.vocab, device="cpu", max_len=11)
    assert stepper.inputs["source"] == "tuesday 3rd of march 1998"
    assert stepper.data["source"] == list("tuesday 3rd of march 1998")
    stepper.set_input("source", "3. März 1998")
    assert stepper.data["source"] == list("3. März 1998") and not stepper.error


@pytest.mark.parametrize(
    "arguments, pattern",
    [
        (dict(source=torch.tensor([[3.0, 4.0]])), "dtype"),
        (dict(source=torch.tensor([[3, 40]])), "must be symbols"),
        (dict(source=torch.tensor([[ab.PAD, ab.PAD]])), "only padding"),
        (dict(max_len=0), "max_len"),
        (dict(max_len=50), "max_len"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(task, arguments, pattern):
    options = dict(model=_model(), source=task.source[:1], vocab=task.vocab, device="cpu")
    options.update(arguments)
    with pytest.raises(ValueError, match=pattern):
        DecodingStepper(**options)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_gives_the_same_decoding_as_cpu(stepper):
    on_cpu = stepper.data["output"]
    stepper.device_name = "cuda"
    assert stepper.data["output"] == on_cpu and stepper.status.endswith("on cuda")


# -- the website's copy of the model (issue 35): page_model, ONNX ------------------------------
def chapter6_steppers() -> dict:
    """Chapter 6's two steppers (notebooks/06_encoder_decoder.ipynb) around its stored seed-0 models."""
    from attention_book.data.dates import DateTask

    runs = ab.StoredRuns("chapter06")
    sort_vocab = ab.SequenceTask("sort", 4, min_len=3, max_len=8, num_symbols=10, seed=1).vocab
    dates = DateTask(10, split="test", seed=3)

    def build(vocab, max_len):
        return lambda: ab.EncoderDecoder(
            len(vocab), len(vocab), d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=max_len
        )

    sorting, _ = runs.run("sorting", 0, build=build(sort_vocab, 10), train=None, live=False)
    date_model, _ = runs.run("dates", 0, build=build(dates.vocab, 32), train=None, live=False)
    return {
        "sorting": DecodingStepper(sorting, sort_vocab.encode(list("CAFB")), sort_vocab, device="cpu"),
        "dates": DecodingStepper(date_model, dates.encode("11. März 1997"), dates.vocab, device="cpu", step=7),
    }


SORT_SOURCES = ["C A F B", "CAFB", "a b c", "J I H G F E D C", "B B B", "E", "c, a, f", "JJ", "D C B A"]
DATE_SOURCES = [
    "11. März 1997",
    "tuesday 3rd of march 1998",
    "1/2/2003",
    "12 december 1999",
    "3 / 3",
    "march 3, 1998",
    "2000-01-01",
    "sunday 31st of december 2000",
    "x",
    "9 9 9 9 9 9 9 9 9 9 9 9 9 9 9 9",
]


def page_decode(page: dict, labels: list[str]) -> dict:
    """The greedy loop the website runs around the exported model (js/06_decoding.js, decodingData), in Python."""
    import base64

    import numpy as np
    import onnxruntime

    session = onnxruntime.InferenceSession(base64.b64decode(page["onnx"]), providers=["CPUExecutionProvider"])
    tokens = [*page["specials"]["names"], *page["symbols"]]
    source = np.array([[tokens.index(label) for label in labels]], dtype=np.int64)
    bos, eos, pad = page["specials"]["bos"], page["specials"]["eos"], page["specials"]["pad"]
    written = []
    for _ in range(page["max_len"]):
        fed = [bos, *written]
        target = np.array([fed + [pad] * (page["target_len"] - len(fed))], dtype=np.int64)
        logits, own, cross = session.run(None, {"source": source, "target": target})
        written.append(int(np.argmax(logits[len(fed) - 1])))
        if written[-1] == eos:
            break
    L = len(written)
    return {"output": written, "logits": logits[:L], "self": own[:, :, :L, :L], "cross": cross[:, :, :L]}


@pytest.mark.parametrize("which", ["sorting", "dates"])
def test_the_page_model_with_the_greedy_loop_around_it_gives_the_steppers_decoding(page_models, which):
    pytest.importorskip("onnxruntime")
    import json

    stepper = chapter6_steppers()[which]
    page = json.loads(stepper.page_model)
    assert page["symbols"] == list(stepper.vocab.symbols) and page["max_len"] == stepper.max_len
    sources = SORT_SOURCES if which == "sorting" else DATE_SOURCES
    checked = 0
    for text in sources:
        stepper.set_input("source", text)
        if stepper.error:
            continue
        data = stepper.data
        got = page_decode(page, data["source"])
        assert [stepper.vocab.tokens[i] for i in got["output"]] == data["output"], text
        probabilities = torch.softmax(torch.from_numpy(got["logits"]), dim=-1)
        assert (probabilities - torch.tensor(data["probabilities"])).abs().max() <= 1e-4 + 5e-5, text
        for layer in range(stepper.num_layers):
            for head in range(stepper.num_heads):
                for name, mine in (("self", got["self"]), ("cross", got["cross"])):
                    sent = torch.tensor(data[name][layer][str(head)])
                    assert (torch.from_numpy(mine[layer, head]) - sent).abs().max() <= 5e-4 + 1e-5, (text, name)
        checked += 1
    assert checked >= 6


@pytest.mark.parametrize("which", ["sorting", "dates"])
def test_the_page_model_gives_the_torch_models_logits_and_weights_within_1e_5(page_models, which):
    pytest.importorskip("onnxruntime")
    import base64
    import json

    import numpy as np
    import onnxruntime

    stepper = chapter6_steppers()[which]
    page = json.loads(stepper.page_model)
    session = onnxruntime.InferenceSession(base64.b64decode(page["onnx"]), providers=["CPUExecutionProvider"])
    generator = torch.Generator().manual_seed(0)
    first, size = len(stepper.vocab.tokens) - len(stepper.vocab.symbols), len(stepper.vocab)
    cases = 0
    for _ in range(24):
        t_in = int(torch.randint(1, page["max_source"] + 1, (1,), generator=generator))
        t_out = int(torch.randint(1, page["target_len"] + 1, (1,), generator=generator))
        source = torch.randint(first, size, (1, t_in), generator=generator)
        target = torch.randint(first, size, (1, t_out), generator=generator)
        target[0, 0] = ab.BOS
        with torch.no_grad():
            logits = stepper.model(source, target)[0]
        layers = stepper.model.decoder.layers
        own = torch.stack([layer.self_attn.last_weights[0] for layer in layers])
        cross = torch.stack([layer.cross_attn.last_weights[0] for layer in layers])
        padded = np.full((1, page["target_len"]), ab.PAD, dtype=np.int64)
        padded[0, :t_out] = target[0].numpy()
        got = session.run(None, {"source": source.numpy(), "target": padded})
        assert np.abs(got[0][:t_out] - logits.numpy()).max() <= 1e-5
        assert np.abs(got[1][:, :, :t_out, :t_out] - own.numpy()).max() <= 1e-5
        assert np.abs(got[2][:, :, :t_out] - cross.numpy()).max() <= 1e-5
        cases += 1
    assert cases >= 20
