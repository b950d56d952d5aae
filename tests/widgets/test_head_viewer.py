"""Chapters 4 and 7's HeadViewer: every layer's and head's weights, checked against the model."""

import json

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


def words_encoder():
    return word_encoder(["<pad>", *WORDS], max_len=MAX_LEN)


@pytest.fixture
def encode():
    return words_encoder()


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


# -- the website's copy of the model (issue 35): page_model, ONNX ------------------------------
# Chapter 4's model (notebooks/04_multi_head.ipynb, two_relation_model(2)) with the weights of its
# stored seed 0, and its task's word encoder.
CHAPTER4_SENTENCES = [
    "a1 c3 b0 a2 d1 c0 b3 d2",  # the chapter's example
    "a1",
    "a1 a1",
    "h3 h3 h3",
    "b2 a1 b0 a3",
    "  c1   c2\tc3\n",
    "d0 d1 d2 d3 e0 e1 e2 e3",
    "g1 f2 e3 d0 c1 b2 a3 h0",
]


def chapter4_viewer() -> HeadViewer:
    task = ab.TwoRelationTask(10, seed=1)

    def build():
        return ab.TokenClassifier(
            len(task.vocabulary), task.num_classes, d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=task.length
        )

    model, _ = ab.StoredRuns("chapter04").run("two heads", 0, build=build, train=None, live=False)
    return HeadViewer(model, task.encode, CHAPTER4_SENTENCES[0], device="cpu")


def random_sentences(words, count, max_len, seed=0) -> list[str]:
    generator = torch.Generator().manual_seed(seed)
    sentences = []
    for _ in range(count):
        length = int(torch.randint(1, max_len + 1, (1,), generator=generator))
        picks = torch.randint(0, len(words), (length,), generator=generator).tolist()
        sentences.append(" ".join(words[i] for i in picks))
    return sentences


def onnx_weights(page: dict, text: str, encode):
    import base64

    import onnxruntime

    session = onnxruntime.InferenceSession(base64.b64decode(page["onnx"]), providers=["CPUExecutionProvider"])
    tokens, _ = encode(text)
    return session.run([page["output"]], {page["input"]: tokens.numpy()})[0]


@pytest.mark.parametrize("which", ["chapter 4", "two layers, four heads"])
def test_the_page_model_gives_the_torch_models_weights_within_1e_5(page_models, which, model, encode):
    pytest.importorskip("onnxruntime")
    import json

    if which == "chapter 4":
        viewer = chapter4_viewer()
        words = [w for w, _ in viewer.encode.word_rules["words"]]
        sentences = CHAPTER4_SENTENCES + random_sentences(words, 16, 8)
    else:
        viewer = HeadViewer(model, encode, SENTENCE, device="cpu")
        sentences = [SENTENCE, "the", "the cat"] + random_sentences(WORDS, 18, MAX_LEN, seed=1)
    page = json.loads(viewer.page_model)
    lengths = set()
    for text in sentences:
        expected = own_weights(viewer.model, viewer.encode, text).numpy()
        got = onnx_weights(page, text, viewer.encode)
        assert got.shape == expected.shape, text
        assert abs(got - expected).max() <= 1e-5, (text, abs(got - expected).max())
        lengths.add(expected.shape[-1])
    assert len(sentences) >= 20 and len(lengths) >= 6  # T is free in the exported graph


def test_the_page_model_carries_what_the_website_needs_to_encode_and_round(page_models):
    import base64
    import json

    viewer = chapter4_viewer()
    page = json.loads(viewer.page_model)
    assert set(page) == {"onnx", "input", "output", "vocab_size", "max_len", "rules", "max_tokens", "digits"}
    assert page["rules"] == viewer.encode.word_rules and page["rules"]["max_len"] == 8
    assert page["rules"]["words"][:2] == [["a0", 0], ["a1", 1]] and not page["rules"]["lowercase"]
    assert (page["vocab_size"], page["max_len"], page["max_tokens"], page["digits"]) == (32, 8, 40, 3)
    size = len(base64.b64decode(page["onnx"]))
    assert 10_000 < size < 60_000, size  # chapter 4's model: about 31 KB


def test_the_unknown_word_message_names_the_vocabulary_the_rules_describe():
    encode = word_encoder(["<pad>", *WORDS], max_len=MAX_LEN)
    with pytest.raises(ValueError) as raised:
        encode("the zebra")
    assert str(raised.value).endswith(f"({encode.word_rules['known']})")
    assert word_encoder({"b": 3, "a": 7}, lowercase=True).word_rules == {
        "words": [["b", 3], ["a", 7]],
        "max_len": None,
        "lowercase": True,
        "known": "2 words, e.g. b, a",
    }


def test_no_page_model_for_other_models_other_encoders_or_a_failed_export(page_models, model, encode, monkeypatch):
    class Wrapped(torch.nn.Module):  # not one of the book's encoders: its forward may do anything
        def __init__(self):
            super().__init__()
            self.encoder = model

        def forward(self, tokens):
            return self.encoder(tokens)

    assert HeadViewer(Wrapped(), encode, SENTENCE, device="cpu").page_model == ""
    plain = lambda text: encode(text)  # no word_rules: its rules are unknown
    assert HeadViewer(model, plain, SENTENCE, device="cpu").page_model == ""
    monkeypatch.setattr("attention_book.widgets.head_viewer.PAGE_MODEL_PARAMETERS", 1000)
    assert HeadViewer(model, encode, SENTENCE, device="cpu").page_model == ""
    monkeypatch.undo()

    def fails(*args, **kwargs):
        raise RuntimeError("no exporter here")

    monkeypatch.setattr(torch.onnx, "export", fails)
    viewer = HeadViewer(model, encode, SENTENCE, device="cpu")  # works as before, only without a page model
    assert viewer.page_model == "" and viewer.data["labels"] == SENTENCE.split()


def test_no_page_model_outside_the_site_build(model, encode, monkeypatch):
    """In Jupyter and Colab a kernel runs the model: nothing is exported there."""
    from attention_book.widgets._base import PAGE_MODELS_VARIABLE

    monkeypatch.delenv(PAGE_MODELS_VARIABLE, raising=False)
    assert HeadViewer(model, encode, SENTENCE, device="cpu").page_model == ""


def test_refresh_exports_the_model_again(page_models, viewer, model):
    before = viewer.page_model
    with torch.no_grad():
        model.layers[0].self_attn.q_proj.weight.mul_(2.0)
    viewer.refresh()
    assert viewer.page_model and viewer.page_model != before


# -- a menu of sentences, saved for a website that cannot run the model (chapter 7) ---------------
EXAMPLES = [
    "the dog ran to the park",
    "it was sunny and the cat sat on a mat",
    "the cat sat on a mat while it was sunny",
]


def test_the_menu_offers_the_first_sentence_then_each_example_once(model, encode):
    viewer = HeadViewer(model, encode, SENTENCE, device="cpu", examples=EXAMPLES)
    assert viewer.examples == [SENTENCE, *EXAMPLES[:2]]  # the third is the first sentence
    assert HeadViewer(model, encode, SENTENCE, device="cpu").examples == []  # no examples, no menu


@pytest.mark.parametrize(
    "examples, pattern",
    [
        ("the dog ran", "a list of sentences, but a str"),
        (["the dog ran", 3], "each example must be a string, but a int"),
        (["the dog flew"], r"the example 'the dog flew' cannot be shown: unknown word 'flew'"),
        ([""], "the example '' cannot be shown: the sentence is empty"),
        (["the cat"] * 13, "examples holds 13 sentences; the menu offers at most 12"),
    ],
)
def test_a_bad_example_is_a_clear_error_naming_it(model, encode, examples, pattern):
    with pytest.raises(ValueError, match=pattern):
        HeadViewer(model, encode, SENTENCE, device="cpu", examples=examples)


class _Unexportable(torch.nn.Module):
    """A model the website cannot run (not one of the book's plain encoders), as chapter 7's MiniLM."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, tokens):
        return self.encoder(tokens)


def test_where_the_page_cannot_run_the_model_it_saves_every_menu_sentences_weights(page_models, model, encode):
    viewer = HeadViewer(_Unexportable(model), encode, SENTENCE, device="cpu", examples=EXAMPLES)
    assert viewer.page_model == ""
    answers = json.loads(viewer.page_examples)
    assert list(answers) == viewer.examples
    for sentence, answer in answers.items():
        viewer.set_text(sentence)  # what the kernel sends for the sentence, rounded as it rounds
        assert answer == viewer.data, sentence
        assert torch.allclose(torch.tensor(answer["weights"]), own_weights(model, encode, sentence), atol=5e-4)


def test_no_saved_sentences_where_the_page_runs_the_model_outside_the_site_build_or_without_examples(
    model, encode, monkeypatch
):
    from attention_book.widgets._base import PAGE_MODELS_VARIABLE

    monkeypatch.setenv(PAGE_MODELS_VARIABLE, "1")
    runs_in_page = HeadViewer(model, encode, SENTENCE, device="cpu", examples=EXAMPLES)
    assert runs_in_page.page_model and runs_in_page.page_examples == ""  # the page runs the model itself
    assert HeadViewer(_Unexportable(model), encode, SENTENCE, device="cpu").page_examples == ""
    monkeypatch.delenv(PAGE_MODELS_VARIABLE)
    assert HeadViewer(_Unexportable(model), encode, SENTENCE, device="cpu", examples=EXAMPLES).page_examples == ""


def test_refresh_saves_the_menu_sentences_weights_again(page_models, model, encode):
    viewer = HeadViewer(_Unexportable(model), encode, SENTENCE, device="cpu", examples=EXAMPLES)
    before = json.loads(viewer.page_examples)
    with torch.no_grad():
        model.layers[0].self_attn.q_proj.weight.mul_(2.0)
    viewer.refresh()
    after = json.loads(viewer.page_examples)
    assert after.keys() == before.keys() and after != before
    assert torch.allclose(
        torch.tensor(after[EXAMPLES[0]]["weights"]), own_weights(model, encode, EXAMPLES[0]), atol=5e-4
    )
