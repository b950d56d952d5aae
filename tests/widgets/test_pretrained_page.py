"""Chapter 7's MiniLM for the website (attention_book.widgets.pretrained_page, issue 46).

The page's model is MiniLM quantised (rows of integers times a step): its attention weights must stay within
5e-3 of MiniLM's (half the 1e-2 the website allows) on chapter 7's menu and test reviews. The script the
site build writes (tools/site/page_models.py) holds it as an ONNX graph and the streams its weights are made
from: js/onnx.js makes them (in node here, as in the browser) bit for bit as torch does, and onnxruntime runs
the graph with them as the page's torch twin (page_encoder) computes. The head viewer saves where to find
the script only for MiniLM as load_minilm() loads it, with its own encode_sentence.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import numpy as np
import pytest
import torch

from attention_book.widgets.head_viewer import MAX_TOKENS, WEIGHT_DIGITS
from attention_book.widgets.pretrained_page import (
    SCRIPT_MEGABYTES,
    SCRIPT_NAME,
    minilm_page_model,
    page_encoder,
    tokenizer_rules,
)
from tests.helpers import tool

page_models = tool("page_models")  # tools/site/page_models.py: writes the script

MENU = [
    "The plot is thin, but the acting is not bad at all.",
    "The acting is bad.",
    "The acting is not bad at all.",
    "I liked the film, I liked the music and I liked the cast.",
    "We had a picnic on the bank of the river.",
    "I paid the cheque into the bank on Monday.",
    "A long, slow, beautifully shot film that never quite finds its story, and never needs to.",
    "Great!",
]


def weights_of(model, tokens) -> torch.Tensor:
    with torch.no_grad():
        model(tokens)
    return torch.stack([w[0] for w in model.attention_weights()])  # (layers, heads, T, T)


@pytest.fixture(scope="module")
def twin(minilm):
    return page_encoder(minilm, max_tokens=MAX_TOKENS)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    """The script as the site build writes it, and its parts."""
    path = page_models.write_page_script(tmp_path_factory.mktemp("page-models"))
    return path, page_models.read_page_script(path)


def test_the_page_model_keeps_every_attention_weight_within_5e_3_of_minilms(minilm, twin):
    from attention_book.data.reviews import load_reviews

    sentences = MENU + list(load_reviews().test.texts[:40])
    worst = 0.0
    for text in sentences:
        tokens, _ = minilm.encode_sentence(text[:150])  # reviews under the 40 pieces the viewer shows
        worst = max(worst, float((weights_of(twin, tokens) - weights_of(minilm, tokens)).abs().max()))
    assert worst <= 5e-3, worst


def test_the_script_is_one_utf16_file_of_the_size_the_page_announces(script):
    path, parts = script
    assert path.name == SCRIPT_NAME and path.read_bytes()[:2] == b"\xff\xfe"
    assert abs(path.stat().st_size / 1e6 - SCRIPT_MEGABYTES) < 1, path.stat().st_size
    text = path.read_bytes()[2:].decode("utf-16-le")
    assert f'window.__attentionBookPageModels["{SCRIPT_NAME}"]' in text
    rules = json.loads(parts["rules"])
    assert rules["max_len"] == 512 and len(rules["vocabulary"]) == 30522 and rules["file"] == "weights"
    assert rules["specials"] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    kinds = [tensor["kind"] for tensor in rules["tensors"]]
    # 5 full layers of 6 matrices, the last layer's queries and keys, the embedding's planes and steps
    assert kinds.count("matrix") == 32 and sorted(kinds[:3]) == ["high", "low", "steps"], kinds


RUNNER = r"""
const chunks = [];
process.stdin.on("data", (chunk) => chunks.push(chunk));
process.stdin.on("end", async () => {
  const module = await import(process.argv[1]);
  // an argument {bytes: base64} is a Uint8Array, also as a value of an object argument
  const bytes = (x) => (x && typeof x.bytes === "string" ? new Uint8Array(Buffer.from(x.bytes, "base64")) : x);
  const read = (x) =>
    x && typeof x === "object" && !x.bytes ? Object.fromEntries(Object.entries(x).map(([k, v]) => [k, bytes(v)])) : bytes(x);
  const answers = [];
  for (const { fn, args } of JSON.parse(Buffer.concat(chunks).toString("utf8"))) {
    const value = await module[fn](...args.map(read));
    answers.push(value instanceof Uint8Array ? Buffer.from(value).toString("base64") : value);
  }
  process.stdout.write(JSON.stringify(answers));
});
"""


@pytest.fixture(scope="module")
def node_answers(tmp_path_factory):
    """Runs the widgets' module in node: each case is {fn, args}; an argument (or an argument's value)
    {"bytes": base64} is a Uint8Array; an answer that is one comes back as base64."""
    from attention_book.widgets._base import widget_module_source

    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to run the widgets' JavaScript")
    module = tmp_path_factory.mktemp("module") / "widgets.mjs"
    module.write_text(widget_module_source(), encoding="utf-8")

    def run(cases: list[dict]) -> list:
        completed = subprocess.run(
            [node, "-e", RUNNER, module.as_uri()], input=json.dumps(cases), capture_output=True, text=True, timeout=300
        )
        assert completed.returncode == 0, completed.stderr[-3000:]
        return json.loads(completed.stdout)

    return run


def test_pack15_and_the_pages_unpack15_agree_on_every_length(node_answers):
    import base64
    import os

    data = [os.urandom(n) for n in range(0, 40)] + [bytes(range(256)) * 3]
    answers = node_answers([{"fn": "unpack15", "args": [page_models.pack15(d)]} for d in data])
    for d, answer in zip(data, answers):
        got = base64.b64decode(answer)
        assert got[: len(d)] == d and len(got) - len(d) < 2, len(d)


def test_the_page_makes_the_graphs_weights_and_onnxruntime_runs_them_as_the_twin(
    script, twin, minilm, tmp_path, node_answers
):
    """js/onnx.js's pageWeights (in node) makes the external data bit for bit as the exporter wrote it; the graph
    with it runs in onnxruntime as page_encoder does."""
    onnxruntime = pytest.importorskip("onnxruntime")
    import base64

    import onnx

    _, parts = script
    rules = json.loads(parts["rules"])
    streams = {name: {"bytes": base64.b64encode(parts[name]).decode("ascii")} for name in ("high", "low", "steps")}
    weights = base64.b64decode(node_answers([{"fn": "pageWeights", "args": [rules, streams]}])[0])
    exported = onnx.load_from_string(page_models.page_onnx(twin))
    expected = {tensor.name: tensor.raw_data for tensor in exported.graph.initializer}
    assert len(weights) == rules["size"]
    for tensor in rules["tensors"]:
        made = weights[tensor["offset"] : tensor["offset"] + len(expected[tensor["name"]])]
        assert made == expected[tensor["name"]], tensor["name"]
    (tmp_path / "page.onnx").write_bytes(parts["graph"])
    (tmp_path / rules["file"]).write_bytes(weights)
    session = onnxruntime.InferenceSession(str(tmp_path / "page.onnx"), providers=["CPUExecutionProvider"])
    for text in [*MENU, "[MASK] is a word", "x"]:
        tokens, _ = minilm.encode_sentence(text)
        got = session.run(["weights"], {"tokens": tokens.numpy()})[0]
        assert np.abs(got - weights_of(twin, tokens).numpy()).max() <= 1e-5, text


def test_the_head_viewer_serves_minilm_only_as_load_minilm_loads_it(page_models, minilm):
    from attention_book.widgets import HeadViewer

    viewer = HeadViewer(minilm, minilm.encode_sentence, MENU[0], device="cpu", examples=MENU[1:4])
    page = json.loads(viewer.page_model)
    assert page == minilm_page_model(minilm, minilm.encode_sentence, viewer_tokens=MAX_TOKENS, digits=WEIGHT_DIGITS)
    assert page["kind"] == "pretrained" and page["script"] == SCRIPT_NAME and page["megabytes"] == SCRIPT_MEGABYTES
    assert (page["max_tokens"], page["viewer_tokens"], page["digits"]) == (40, 40, 3)
    assert list(json.loads(viewer.page_examples)) == MENU[:4]  # the menu draws at once, before any download
    tuned = minilm.copy()
    with torch.no_grad():
        tuned.encoder.layers[0].norm1.bias.add_(0.01)  # fine-tuned: not the model the script holds
    limits = {"viewer_tokens": MAX_TOKENS, "digits": WEIGHT_DIGITS}
    assert minilm_page_model(tuned, tuned.encode_sentence, **limits) is None
    assert minilm_page_model(minilm, lambda text: minilm.encode_sentence(text), **limits) is None
    assert minilm_page_model(minilm, tuned.encode_sentence, **limits) is None
    assert minilm_page_model(minilm.encoder, minilm.encode_sentence, **limits) is None


def test_no_served_model_outside_the_site_build(minilm):
    from attention_book.widgets import HeadViewer

    viewer = HeadViewer(minilm, minilm.encode_sentence, MENU[0], device="cpu", examples=MENU[1:3])
    assert viewer.page_model == "" and viewer.page_examples == ""


def test_the_rules_refuse_a_tokenizer_the_page_would_not_mirror(tmp_path):
    from attention_book.pretrained import minilm_files

    spec = json.loads(minilm_files()["tokenizer"].read_text(encoding="utf-8"))
    rules = tokenizer_rules(minilm_files()["tokenizer"])
    assert rules["vocabulary"][:2] == ["[PAD]", "[unused0]"] and rules["prefix"] == "##"
    assert rules["max_word_characters"] == 100 and (rules["first"], rules["last"]) == ("[CLS]", "[SEP]")
    for key, value in (("normalizer", {**spec["normalizer"], "lowercase": False}), ("pre_tokenizer", None)):
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({**spec, key: value}), encoding="utf-8")
        with pytest.raises(ValueError, match=key):
            tokenizer_rules(path)
