"""Issue 35: on the built website (no kernel, file:// URLs, network off) chapter 1's typed
sentence, chapter 2's typed query, chapter 3's typed scores and chapter 5's d_model and base
compute in the page's JavaScript. Typing into each redraws the picture with the Python widget's numbers, and bad
input shows the Python widget's message next to the control, the picture marked stale.

The picture is read back as drawn: bar heights (weights, to 1e-4), and the numbers written
in it with two decimals (to 0.005). tests/widgets/test_static_math.py compares the same
JavaScript with Python at 1e-4 over 20 or more inputs per control.

Chapter 4's sentence and chapter 6's source run the chapter's trained model in the page (saved
by the widget as ONNX, run by onnxruntime-web's WebAssembly build): their tests read every cell
of the drawn maps (data-value) and compare them with the Python widget around a torch model that
holds the weights read back from the page's ONNX model, and a browser without WebAssembly must
find those two boxes disabled with a note saying why, the rest of the page working.

Chapter 7's pretrained model is too large for the page: the site serves it beside the pages and the page
loads it on the first sentence typed (issue 46; tests/book/test_page_minilm.py types 24 sentences into a
bare page). Here its menu must draw the sentences computed when the book was built, at once, as the Python
widget does, and two typed sentences must run the model the site serves.
"""

from __future__ import annotations

import json
import re

from attention_book.widgets.attention_explorer import AttentionExplorer
from attention_book.widgets.key_value_explorer import KeyValueExplorer
from attention_book.widgets.positional_explorer import PositionalEncodingExplorer
from attention_book.widgets.soft_hard_explorer import SoftHardExplorer
from tests.book.test_site_widgets import POKE_SCRIPT
from tests.widgets.test_static_math import QUERIES as STATIC_QUERIES
from tests.widgets.test_static_math import SCORES as STATIC_SCORES
from tests.widgets.test_static_math import SENTENCES_GIVEN

# Types `value` into the control `name` of the page's `kind` widget (as a reader does: the value,
# then input and change events) and reads the picture back.
TYPE_AND_READ = r"""
const [kind, name, value] = arguments;
const widget = document.querySelector(`.ab-widget[data-kind="${kind}"]`);
const input = widget.querySelector(`[name="${name}"]`);
const frames = Number(widget.dataset.frames);
const enabled = !input.disabled;
if (enabled) {
  input.value = value;
  input.dispatchEvent(new Event("input", { bubbles: true }));
  input.dispatchEvent(new Event("change", { bubbles: true }));
}
const svg = widget.querySelector(".ab-picture svg");
const bars = Array.from(svg.querySelectorAll("g")).map((g) =>
  Array.from(g.querySelectorAll(":scope > rect[data-col]")).map((r) => Number(r.getAttribute("height")))).filter((b) => b.length);
return {
  enabled, frames: Number(widget.dataset.frames) - frames, bars,
  texts: Array.from(svg.querySelectorAll("text, tspan")).map((t) => t.textContent),
  error: widget.querySelector(`[data-error-for="${name}"]`).textContent,
  stale: widget.querySelector(".ab-picture").classList.contains("ab-stale"),
  note: (widget.querySelector(".ab-note") || {}).textContent || "",
  view: Object.fromEntries(Array.from(widget.querySelectorAll("input[type=range], select")).map((e) => [e.name, e.value])),
};
"""


def typeable(*lists: list[str]) -> list[str]:
    """The inputs of ``lists`` in order, each once, less those a text box cannot hold (a line break:
    the browser drops it from an <input type="text">, so no reader can type it)."""
    seen: list[str] = []
    for text in (text for inputs in lists for text in inputs):
        if text not in seen and "\n" not in text and "\r" not in text:
            seen.append(text)
    return seen


# At least 20 inputs per control (issue 35), good and bad: a few of the chapter's own, then those
# tests/widgets/test_static_math.py gives the JavaScript and Python in node.
SCORES = typeable(
    ["a=1, b=2, c=3", "x=0.5, y=-1, z=0.5, w=4", "7", "a=25", "1,,2", "river=1.9, bank=1.5"], STATIC_SCORES
)
QUERIES = typeable(["10, 0, 0", "0 0 10", "[3, -4.5, 7]", "1, 2", "a b c", "0, 10, 0"], STATIC_QUERIES)
# chapter 5's sliders: d_model's value, then the base's (its slider holds log10 of the base); a
# slider can give no bad value
POSITIONAL = [
    *[("d_model", str(d)) for d in (8, 256, 2, 4, 16, 30, 64, 100, 128, 198, 250)],
    *[("base", str(b)) for b in (2, 3.5, 6, 1, 1.5, 2.5, 3, 4, 4.5, 5, 5.5)],
]


def saved_payload(page, kind: str) -> dict:
    """The payload the chapter saved for its widget of ``kind`` (the page's widget state)."""
    text = page.read_text(encoding="utf-8")
    for block in re.findall(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', text, re.S):
        for model in json.loads(block)["state"].values():
            if model.get("state", {}).get("kind") == kind:
                return json.loads(model["state"]["payload"])
    raise AssertionError(f"{page.name} saves no {kind} widget")


def numbers_in(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", text)]


def open_page(browser, page):
    browser.get(page.as_uri())
    browser.execute_async_script(POKE_SCRIPT, {"presentation": {}, "bound": {}})  # until the widgets have drawn


def check_error(read, widget, label) -> list[str]:
    expected = f"⚠ {widget.error['message']}"
    if read["error"] != expected or not read["stale"] or read["frames"]:
        return [
            f"{label}: shows {read['error']!r} (stale {read['stale']}, {read['frames']} redraws); Python says {expected!r}"
        ]
    return []


def test_typed_scores_redraw_chapter_3_with_the_python_weights(site, browser):
    page = site / "notebooks" / "03_soft_vs_hard.html"
    open_page(browser, page)
    reference = SoftHardExplorer(device="cpu")
    problems = []
    for text in SCORES:
        read = browser.execute_script(TYPE_AND_READ, "soft_hard", "scores", text)
        assert read["enabled"] and "open the chapter" not in read["note"], read
        reference.set_input("scores", text)
        label = f"scores {text!r}"
        if reference.error:
            problems += check_error(read, reference, label)
            continue
        reference.set_view(beta=int(read["view"]["beta"]))
        shown = reference.shown()
        if read["error"] or read["stale"] or read["frames"] != 1:
            problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
        weights = [[h / 114 for h in bars] for bars in read["bars"]]  # barChart's plot: 130 - 16 px
        expected = [shown["softmax"], shown["sparsemax"], shown["hardmax"]]
        if len(weights) != 3 or any(
            len(a) != len(b) or max(abs(x - y) for x, y in zip(a, b)) > 1e-4 for a, b in zip(weights, expected)
        ):
            problems.append(f"{label}: bars {weights} != Python's {expected}")
        infos = [t for t in read["texts"] if t.startswith("entropy ") and "non-zero" in t]
        for info, method in zip(infos, ("softmax", "sparsemax", "hardmax")):
            entropy, nonzero = numbers_in(info)
            if abs(entropy - shown["entropy"][method]) > 0.0051 or nonzero != shown["nonzero"][method]:
                problems.append(
                    f"{label}: {method} reads {info!r}; Python: {shown['entropy'][method]}, {shown['nonzero'][method]}"
                )
    assert not problems, "\n".join(problems)
    assert len(SCORES) >= 20


def test_a_typed_query_redraws_chapter_2_with_the_python_lookup(site, browser):
    page = site / "notebooks" / "02_key_value_store.html"
    saved = saved_payload(page, "key_value")
    assert "keys" in saved, "chapter 2 was saved before its payload held the store: re-execute it"
    open_page(browser, page)
    reference = KeyValueExplorer(keys=saved["keys"], values=saved["values"], device="cpu")
    problems = []
    for text in QUERIES:
        read = browser.execute_script(TYPE_AND_READ, "key_value", "query", text)
        assert read["enabled"] and "open the chapter" not in read["note"], read
        reference.set_query(text)
        label = f"query {text!r}"
        if reference.error:
            problems += check_error(read, reference, label)
            continue
        shown = reference.shown()
        weights = [h / 164 for h in read["bars"][0]]  # barChart's plot: 180 - 16 px
        value = numbers_in(next(t for t in read["texts"] if t.startswith("=")))
        query = numbers_in(next(t for t in read["texts"] if t.startswith("query [")))
        if read["error"] or read["stale"] or read["frames"] != 1:
            problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
        if max(abs(a - b) for a, b in zip(weights, shown["weights"])) > 1e-4 or len(weights) != len(shown["weights"]):
            problems.append(f"{label}: weights {weights} != Python's {shown['weights']}")
        if (
            max(abs(a - b) for a, b in zip(value, shown["value"])) > 0.0051
            or max(abs(a - b) for a, b in zip(query, shown["query"])) > 0.051
        ):
            problems.append(f"{label}: value {value}, query {query} != Python's {shown['value']}, {shown['query']}")
    assert not problems, "\n".join(problems)


def test_d_model_and_base_redraw_chapter_5_with_the_python_table(site, browser):
    page = site / "notebooks" / "05_positional_encoding.html"
    open_page(browser, page)
    reference = PositionalEncodingExplorer(device="cpu")
    problems = []
    for name, value in POSITIONAL:
        read = browser.execute_script(TYPE_AND_READ, "positional", name, value)
        assert read["enabled"] and "open the chapter" not in read["note"], read
        reference.set_input(name, value if name == "d_model" else repr(10 ** float(value)))
        reference.set_view(length=int(read["view"]["length"]), measure=json.loads(read["view"]["measure"]))
        shown = reference.shown()
        label = f"{name} {value!r}"
        if read["error"] or read["stale"] or read["frames"] != 1:
            problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
        title = next(t for t in read["texts"] if t.startswith("PE: "))
        if numbers_in(title)[:2] != [shown["length"], shown["d_model"]]:
            problems.append(
                f"{label}: the table is titled {title!r}; Python: {shown['length']} positions, d_model {shown['d_model']}"
            )
        scale = numbers_in(next(t for t in read["texts"] if t.startswith("colours from")))
        similarity = shown["similarity"]
        expected = [float(similarity.min()), float(similarity.max())]
        if max(abs(a - b) for a, b in zip(scale, expected)) > 0.0051:
            problems.append(
                f"{label}: the similarity's colours run {scale}; Python's {shown['measure']} runs {expected}"
            )
    assert not problems, "\n".join(problems)


# Chapter 1's sentence box: reorders and repeats of the chapter's words, then bad input.
SENTENCES = typeable(
    [
        "bank the river bank",
        "river",
        "the dog",
        "river bank the river bank",
        "",
        "bank bank",
        "the " * 11,
        "猫 bank",
        "the  river\tbank",
    ],
    SENTENCES_GIVEN,
)
# The chapter-1 widget's picture as drawn: the query's bars as weights (each bar's height over
# the height of the axis' 1.0 tick), the score written above each bar, the output line, the
# query menu and the two boxes.
READ_ATTENTION = r"""
const widget = document.querySelector('.ab-widget[data-kind="attention"]');
const svg = widget.querySelector(".ab-picture svg");
const bars = Array.from(svg.querySelectorAll("rect[data-col]:not([data-row])"));
const chart = bars.length ? bars[0].parentNode : null;
const tick = (label) => Number(Array.from(chart.querySelectorAll(":scope > text")).find((t) => t.textContent === label).getAttribute("y"));
const unit = chart ? tick("0.0") - tick("1.0") : NaN;
return {
  weights: bars.map((bar) => Number(bar.getAttribute("height")) / unit),
  above: bars.map((bar) => bar.nextElementSibling.textContent),
  output: (Array.from(svg.querySelectorAll("text")).find((t) => t.textContent.startsWith("output h")) || {}).textContent,
  options: Array.from(widget.querySelectorAll('select[name="query"] option')).map((o) => o.textContent),
  query: Number(JSON.parse((widget.querySelector('select[name="query"]') || { value: "0" }).value)),
  temperature: Number(widget.querySelector('input[name="temperature"]').value),
  scaled: widget.querySelector('input[name="scaled"]').checked,
  causal: widget.querySelector('input[name="causal"]').checked,
};
"""


def test_a_typed_sentence_redraws_chapter_1_with_the_python_attention(site, browser):
    page = site / "notebooks" / "01_attention_math.html"
    saved = saved_payload(page, "attention")
    assert "drawn" in saved, "chapter 1 was saved before its payload held its vectors: re-execute it"
    open_page(browser, page)
    given = saved["vocabulary"]
    reference = AttentionExplorer(given["words"], given["vectors"], device="cpu")
    shown = browser.execute_script(READ_ATTENTION)
    reference.set_view(
        query=shown["query"], temperature=shown["temperature"], scaled=shown["scaled"], causal=shown["causal"]
    )
    problems = []
    for text in SENTENCES:
        read = browser.execute_script(TYPE_AND_READ, "attention", "sentence", text)
        assert read["enabled"] and "open the chapter" not in read["note"], read
        reference.set_input("sentence", text)
        label = f"sentence {text!r}"
        if reference.error:
            problems += check_error(read, reference, label)
            continue
        if read["error"] or read["stale"] or read["frames"] != 1:
            problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
        drawn = browser.execute_script(READ_ATTENTION)
        expected = reference.shown()
        tokens = reference.data["tokens"]
        if drawn["options"] and drawn["options"] != [f"{i + 1}: {t}" for i, t in enumerate(tokens)]:
            problems.append(f"{label}: the query menu offers {drawn['options']}; Python's tokens are {tokens}")
        if drawn["query"] != reference.view["query"]:
            problems.append(
                f"{label}: the page asks with token {drawn['query']}, Python with {reference.view['query']}"
            )
        weights = drawn["weights"]
        if len(weights) != len(tokens) or max(abs(a - b) for a, b in zip(weights, expected["weights"])) > 1e-4:
            problems.append(f"{label}: bars {weights} != Python's weights {expected['weights']}")
        scores = [None if t == "masked" else float(t) for t in drawn["above"]]
        wanted = [None if s == float("-inf") else s for s in expected["scores"]]
        if any((a is None) != (b is None) or (a is not None and abs(a - b) > 0.0051) for a, b in zip(scores, wanted)):
            problems.append(f"{label}: the bars are labelled {drawn['above']}; Python's scores are {wanted}")
        output = numbers_in(drawn["output"].split("=")[-1])
        if (
            len(output) != len(expected["output"])
            or max(abs(a - b) for a, b in zip(output, expected["output"])) > 0.0051
        ):
            problems.append(f"{label}: {drawn['output']!r}; Python's output is {expected['output']}")
    assert not problems, "\n".join(problems)


# -- chapter 4: the head viewer's sentence runs the chapter's model (ONNX) in the page ----------
# Types `value` into the head viewer's sentence box and waits for the answer (the first one
# loads onnxruntime-web and the model); reads back every head's matrix of the grid as drawn.
# Reads the head viewer's picture back: every head's matrix of the grid as drawn, and what it says.
HEAD_READERS = r"""
function headGrid(widget) {
  const grid = widget.querySelector(".ab-picture svg > g");  // the grid of all heads
  return Array.from(grid.querySelectorAll(":scope > g")).map((g) => {
    const matrix = [];
    for (const r of g.querySelectorAll("rect[data-row][data-col][data-value]")) {
      const i = Number(r.dataset.row), j = Number(r.dataset.col);
      (matrix[i] = matrix[i] || [])[j] = r.dataset.value === "" ? null : Number(r.dataset.value);
    }
    return matrix;
  }).filter((m) => m.length);
}
function headState(widget) {
  return {
    error: widget.querySelector('[data-error-for="sentence"]').textContent,
    stale: widget.querySelector(".ab-picture").classList.contains("ab-stale"),
    note: widget.querySelector(".ab-note").textContent,
    heading: widget.querySelector(".ab-picture svg > text").textContent,
  };
}
"""
TYPE_AND_WAIT = (
    HEAD_READERS
    + r"""
const done = arguments[arguments.length - 1];
const [value] = arguments;
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const input = widget.querySelector('[name="sentence"]');
const frames = Number(widget.dataset.frames);
delete widget.dataset.roundTripMs;  // set again by the answer (at once for bad input, later for the model's)
const start = performance.now();
if (input.disabled) {
  done({ enabled: false, note: widget.querySelector(".ab-note").textContent });
  return;
}
input.value = value;
input.dispatchEvent(new Event("input", { bubbles: true }));
input.dispatchEvent(new Event("change", { bubbles: true }));
function read() {
  done({
    enabled: true, ms: performance.now() - start, frames: Number(widget.dataset.frames) - frames, heads: headGrid(widget),
    ...headState(widget),
  });
}
(function wait() {
  if (widget.dataset.roundTripMs !== undefined) read();
  else setTimeout(wait, 2);
})();
"""
)
SHOW_ALL_HEADS = r"""
const menu = document.querySelector('.ab-widget[data-kind="heads"] select[name="head"]');
menu.value = JSON.stringify("all");
menu.dispatchEvent(new Event("change", { bubbles: true }));
"""
HEAD_SENTENCES = [
    "a1 c3 b0 a2 d1 c0 b3 d2",
    "a1",
    "a1 a1",
    "b2 a1 b0 a3",
    "h3 h3 h3",
    "  c1   c2\tc3\n",
    "d0 d1 d2 d3 e0 e1 e2 e3",
    "g1 f2 e3 d0 c1 b2 a3 h0",
    "e2 e2 f1",
    "a0 b0 c0 d0 e0",
    "h0 g1 f2 e3",
    "c2\u3000d3",
    "b1 b1 b1 b1 b1 b1 b1",
    "f3 a2",
    "g0 g0 h1 h1 a2 a2",
    "d2 c1 b0",
    # bad: empty, unknown words, upper case (not lowered), too long, far too long
    "",
    "   ",
    "zz",
    "a1 zz yy a1",
    "A1 b2",
    "a1 é",
    "a1 b1 c1 d1 e1 f1 g1 h1 a2",
    " ".join(["a1"] * 45),
    "a1 a4",
]


def saved_state(page, kind: str) -> dict:
    """The widget state the chapter saved for its widget of ``kind``."""
    text = page.read_text(encoding="utf-8")
    for block in re.findall(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', text, re.S):
        for model in json.loads(block)["state"].values():
            if model.get("state", {}).get("kind") == kind:
                return model["state"]
    raise AssertionError(f"{page.name} saves no {kind} widget")


def chapter4_reference(page_model: dict):
    """Chapter 4's model (two_relation_model(2) in the chapter) with the weights saved in the page's
    ONNX model (named as in the state dict), in the Python HeadViewer with the task's encoder."""
    import base64

    import onnx
    import torch
    from onnx import numpy_helper

    import attention_book as ab
    from attention_book.widgets.head_viewer import HeadViewer

    task = ab.TwoRelationTask(10, seed=1)
    assert page_model["rules"] == task.encode.word_rules, "the page's word rules are not chapter 4's encoder's"
    model = ab.TokenClassifier(
        len(task.vocabulary), task.num_classes, d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=task.length
    )
    graph = onnx.load_from_string(base64.b64decode(page_model["onnx"])).graph
    saved = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in graph.initializer}
    own = model.state_dict()
    assert saved and all(name in own and own[name].shape == value.shape for name, value in saved.items()), sorted(saved)
    with torch.no_grad():
        for name, value in saved.items():  # the rest does not reach the weights (the exporter left it out)
            own[name].copy_(value)
    return HeadViewer(model, task.encode, "a1", device="cpu"), model, task.encode


def test_a_typed_sentence_redraws_chapter_4_with_the_python_models_weights(site, browser):
    import torch

    page = site / "notebooks" / "04_multi_head.html"
    state = saved_state(page, "heads")
    assert state.get("page_model"), "chapter 4 was saved before its head viewer saved its model: re-execute it"
    reference, model, encode = chapter4_reference(json.loads(state["page_model"]))
    open_page(browser, page)
    browser.execute_script(SHOW_ALL_HEADS)
    problems, good, bad = [], 0, 0
    for text in HEAD_SENTENCES:
        read = browser.execute_async_script(TYPE_AND_WAIT, text)
        assert read["enabled"] and "open the chapter" not in read["note"], read
        reference.set_input("sentence", text)
        label = f"sentence {text!r}"
        if reference.error:
            bad += 1
            problems += check_error(read, reference, label)
            continue
        good += 1
        if read["error"] or read["stale"] or read["frames"] != 1:
            problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
        tokens, _ = encode(text)
        with torch.no_grad():
            model(tokens)
        exact = model.attention_weights()[0][0].double()  # layer 0: (heads, T, T), unrounded
        drawn = torch.tensor(read["heads"], dtype=torch.float64)
        sent = torch.tensor(reference.data["weights"][0], dtype=torch.float64)  # as Python rounds for the page
        if drawn.shape != sent.shape:
            problems.append(f"{label}: {tuple(drawn.shape)} drawn, Python sends {tuple(sent.shape)}")
            continue
        # Equal within 1e-4, except one step of the last decimal (1e-3) where the exact weight lies
        # within 1e-5 of a rounding boundary (float32 in torch and in WebAssembly may fall either side).
        on_edge = ((exact * 1000 - 0.5) - torch.round(exact * 1000 - 0.5)).abs() < 0.01
        allowed = torch.where(on_edge, torch.full_like(exact, 1.0001e-3), torch.full_like(exact, 1e-4))
        if ((drawn - sent).abs() > allowed).any() or (drawn - exact).abs().max() > 5.01e-4:
            problems.append(f"{label}: drawn {drawn.tolist()} != Python's {sent.tolist()}")
        if read["heading"] != f"layer 0, all {reference.num_heads} heads":
            problems.append(f"{label}: the heading says {read['heading']!r}")
    assert not problems, "\n".join(problems)
    assert good >= 15 and bad >= 8


def test_without_webassembly_chapters_4_6_and_7_say_why_typing_is_off_and_the_rest_works(site):
    from tests.book.site_support import headless_chromium

    # V8 without its compilers (as in a browser's locked-down mode) has no WebAssembly; Chromium 156
    # ignores --js-flags=--noexpose_wasm, the older way to hide it.
    with headless_chromium(
        names_resolve=False, console_log=True, timeout_s=60, extra_arguments=("--js-flags=--jitless",)
    ) as driver:
        for chapter, kind, box, control in (
            ("04_multi_head", "heads", "sentence", "head"),
            ("06_encoder_decoder", "decoding", "source", "step"),
            ("07_transfer_learning", "heads", "sentence", "head"),  # its menu still works: test_page_minilm.py
        ):
            open_page(driver, site / "notebooks" / f"{chapter}.html")
            assert driver.execute_script("return typeof WebAssembly") == "undefined"
            report = driver.execute_async_script(
                POKE_SCRIPT, {"presentation": {kind: [control]}, "bound": {kind: [box]}}
            )
            found = [entry for entry in report if entry["kind"] == kind]
            assert found, report
            for entry in found:
                assert entry["disabled"] == {box: True}, entry
                assert "needs WebAssembly" in entry["note"] and "open the chapter in Colab or Jupyter" in entry["note"]
                assert entry["controls"][control]["changed"], entry  # the presentation controls still redraw
        severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not severe, severe


# -- chapter 6: the decoding stepper's source runs the chapter's model (ONNX) in the page --------
# Types `value` into the `index`-th decoding stepper's source box, waits for the answer and reads
# back the heading, the rows' labels ("fed → written") and the two maps as drawn.
TYPE_SOURCE_AND_WAIT = r"""
const done = arguments[arguments.length - 1];
const [index, value] = arguments;
const widget = document.querySelectorAll('.ab-widget[data-kind="decoding"]')[index];
const input = widget.querySelector('[name="source"]');
const frames = Number(widget.dataset.frames);
delete widget.dataset.roundTripMs;
if (input.disabled) {
  done({ enabled: false, note: widget.querySelector(".ab-note").textContent });
  return;
}
input.value = value;
input.dispatchEvent(new Event("input", { bubbles: true }));
input.dispatchEvent(new Event("change", { bubbles: true }));
function matrix(g) {
  const rows = [];
  for (const r of g.querySelectorAll("rect[data-row][data-col][data-value]")) {
    const i = Number(r.dataset.row), j = Number(r.dataset.col);
    (rows[i] = rows[i] || [])[j] = r.dataset.value === "" ? null : Number(r.dataset.value);
  }
  return rows;
}
function read() {
  const svg = widget.querySelector(".ab-picture svg");
  const maps = Array.from(svg.querySelectorAll("g")).filter((g) => g.querySelector(":scope > rect[data-value]"));
  const menus = Object.fromEntries(Array.from(widget.querySelectorAll("select")).map((m) => [m.name, JSON.parse(m.value)]));
  done({
    enabled: true, frames: Number(widget.dataset.frames) - frames,
    error: widget.querySelector('[data-error-for="source"]').textContent,
    stale: widget.querySelector(".ab-picture").classList.contains("ab-stale"),
    note: widget.querySelector(".ab-note").textContent,
    heading: svg.querySelector("text").textContent,
    rows: Array.from(maps[0].querySelectorAll("text")).map((t) => t.textContent).filter((t) => t.includes("→")),
    cross: matrix(maps[0]), self: matrix(maps[1]), layer: menus.layer, head: menus.head,
  });
}
(function wait() {
  if (widget.dataset.roundTripMs !== undefined) read();
  else setTimeout(wait, 2);
})();
"""
SORT_TEXTS = [
    "C A F B", "CAFB", "a b c", "J I H G F E D C", "B B B", "E", "c, a, f", "JJ", "D C B A", "A J",
    "F F E E D", "H", "I G", "B D F H J", "C C", "J A",
    # bad: empty, unknown, a special token, too long
    "", "   ", "K", "C A Z", "<bos> A", "A B C D E F G H I J K", "12",
]  # fmt: skip
DATE_TEXTS = [
    "11. März 1997", "tuesday 3rd of march 1998", "1/2/2003", "12 december 1999", "3 / 3", "march 3, 1998",
    "2000-01-01", "sunday 31st of december 2000", "x", "1 1", "31.12.1999", "july 4 1976", "5th may 2010",
    "99", "monday", "2 2 2 2 2 2 2 2 2 2 2 2 2 2 2 2",
    # bad: empty, unknown characters, too long
    "", "  ", "11. März 1997 ✓", "ÿ", "tuesday the third of march in the year 1998",
]  # fmt: skip


def chapter6_reference(state: dict, which: str):
    """Chapter 6's model for ``which`` (sorting_model / date_model in the chapter) with the weights
    saved in the page's ONNX model, in the Python DecodingStepper, showing what the page saved."""
    import base64

    import onnx
    import torch
    from onnx import numpy_helper

    import attention_book as ab
    from attention_book.data.dates import DateTask
    from attention_book.widgets.decoding_stepper import DecodingStepper, parse_source

    page_model = json.loads(state["page_model"])
    if which == "sorting":
        vocab, max_len = ab.SequenceTask("sort", 4, min_len=3, max_len=8, num_symbols=10, seed=1).vocab, 10
    else:
        vocab, max_len = DateTask(4, split="test", seed=3).vocab, 32
    assert page_model["symbols"] == list(vocab.symbols), f"the page's {which} stepper has another vocabulary"
    model = ab.EncoderDecoder(len(vocab), len(vocab), d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=max_len)
    graph = onnx.load_from_string(base64.b64decode(page_model["onnx"])).graph
    saved = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in graph.initializer}
    own = {f"model.{key}": value for key, value in model.state_dict().items()}
    assert saved and all(n in own and own[n].shape == v.shape for n, v in saved.items()), sorted(saved)
    with torch.no_grad():
        for name, value in saved.items():
            own[name].copy_(value)
    source = vocab.encode(parse_source(state["inputs"]["source"], vocab, page_model["max_source"]))
    return DecodingStepper(model.eval(), source, vocab, device="cpu", step=state["view"]["step"])


def test_a_typed_source_redraws_chapter_6_with_the_python_steppers_decoding(site, browser):
    page = site / "notebooks" / "06_encoder_decoder.html"
    text = page.read_text(encoding="utf-8")
    states = [
        model["state"]
        for block in re.findall(r'<script type="application/vnd.jupyter.widget-state\+json">(.*?)</script>', text, re.S)
        for model in json.loads(block)["state"].values()
        if model.get("state", {}).get("kind") == "decoding"
    ]
    assert len(states) == 2 and all(s.get("page_model") for s in states), "re-execute chapter 6: no saved models"
    open_page(browser, page)
    problems, good, bad = [], 0, 0
    for index, (which, texts) in enumerate((("sorting", SORT_TEXTS), ("dates", DATE_TEXTS))):
        # the sorting stepper comes first in the chapter; the dates' vocabulary has the space
        state = next(s for s in states if (" " in json.loads(s["page_model"])["symbols"]) == (which == "dates"))
        reference = chapter6_reference(state, which)
        for typed in texts:
            read = browser.execute_async_script(TYPE_SOURCE_AND_WAIT, index, typed)
            assert read["enabled"] and "open the chapter" not in read["note"], read
            reference.set_input("source", typed)
            label = f"{which} {typed!r}"
            if reference.error:
                bad += 1
                problems += check_error(read, reference, label)
                continue
            good += 1
            data = reference.data
            if read["error"] or read["stale"] or read["frames"] != 1:
                problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
            rows = [f"{fed} → {out}" for fed, out in zip(data["fed"], data["output"])][: reference.view["step"]]
            if read["rows"] != rows:
                problems.append(f"{label}: the rows say {read['rows']}; Python wrote {rows}")
                continue
            key = "average" if read["head"] == -1 else str(read["head"])
            for name in ("cross", "self"):
                sent = data[name][read["layer"]][key]
                drawn = read[name]
                shown = reference.view["step"]  # rows of later steps are drawn empty
                expected = [
                    [x if i < shown and (name == "cross" or j <= i) else None for j, x in enumerate(row)]
                    for i, row in enumerate(sent)
                ]
                flat = [(a, b) for r1, r2 in zip(drawn, expected) for a, b in zip(r1, r2)]
                if len(drawn) != len(expected) or any((a is None) != (b is None) for a, b in flat):
                    problems.append(f"{label}: the {name} map has another shape or other empty cells")
                elif max((abs(a - b) for a, b in flat if a is not None), default=0) > 1.0001e-3:
                    problems.append(f"{label}: {name} drawn {drawn} != Python's {expected}")
                elif sum(abs(a - b) > 1e-4 for a, b in flat if a is not None) > 0.02 * len(flat) + 1:
                    problems.append(f"{label}: {name}: more than 2 % of the cells differ by one rounding step")
    assert not problems, "\n".join(problems)
    assert good >= 25 and bad >= 9, (good, bad)


# -- chapter 7: a model too large for the page; its menu's sentences were computed at build time --
# Chooses `value` in the head viewer's sentence menu and `layer` in its layer menu, waits for the
# answer and reads back every head's matrix of the grid as drawn.
CHOOSE_AND_READ = (
    HEAD_READERS
    + r"""
const done = arguments[arguments.length - 1];
const [value, layer] = arguments;
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const menu = widget.querySelector('select[name="example"]');
const box = widget.querySelector('[name="sentence"]');
if (!menu) {
  done({ menu: false, note: widget.querySelector(".ab-note").textContent });
  return;
}
const frames = Number(widget.dataset.frames);
delete widget.dataset.roundTripMs;
menu.value = JSON.stringify(value);
menu.dispatchEvent(new Event("change", { bubbles: true }));
function read() {
  const layers = widget.querySelector('select[name="layer"]');
  layers.value = JSON.stringify(layer);
  layers.dispatchEvent(new Event("change", { bubbles: true }));
  done({
    menu: true, frames: Number(widget.dataset.frames) - frames, heads: headGrid(widget), box: box.value, boxDisabled: box.disabled,
    chosen: JSON.parse(menu.value), options: Array.from(menu.options).map((o) => JSON.parse(o.value)),
    ...headState(widget),
  });
}
(function wait() {
  if (widget.dataset.roundTripMs !== undefined) read();
  else setTimeout(wait, 2);
})();
"""
)


def test_chapter_7s_menu_draws_the_pretrained_models_weights_and_typed_sentences_run_it(site, browser):
    import torch

    from attention_book.pretrained import load_minilm
    from attention_book.widgets.head_viewer import HeadViewer
    from attention_book.widgets.pretrained_page import SCRIPT_MEGABYTES, SCRIPT_NAME

    page = site / "notebooks" / "07_transfer_learning.html"
    state = saved_state(page, "heads")
    served = json.loads(state.get("page_model") or "{}")
    assert served.get("kind") == "pretrained", "chapter 7 was saved before its head viewer served MiniLM: re-execute"
    assert (site / "_static" / "page-models" / served["script"]).is_file() and served["script"] == SCRIPT_NAME
    assert state.get("page_examples"), "chapter 7 was saved before its head viewer saved its menu: re-execute it"
    examples = state["examples"]
    assert len(examples) >= 6 and list(json.loads(state["page_examples"])) == examples
    minilm = load_minilm()
    reference = HeadViewer(minilm, minilm.encode_sentence, examples[0], device="cpu")
    open_page(browser, page)
    browser.execute_script(SHOW_ALL_HEADS)
    problems = []
    # the last sentence first: the first is the one shown when the page opens
    for sentence in [*examples[1:], examples[0]]:
        labels, exact = reference._run(sentence, torch.device("cpu"))  # unrounded (layers, heads, T, T)
        reference.set_text(sentence)
        for layer in (0, reference.num_layers - 1):
            read = browser.execute_async_script(CHOOSE_AND_READ, sentence, layer)
            assert read["menu"], read
            label = f"{sentence!r}, layer {layer}"
            if read["error"] or read["stale"] or read["frames"] < 1:
                problems.append(f"{label}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
            if read["box"] != sentence or read["chosen"] != sentence or read["boxDisabled"]:
                problems.append(
                    f"{label}: the box shows {read['box']!r} (disabled {read['boxDisabled']}), "
                    f"the menu {read['chosen']!r}"
                )
            drawn = torch.tensor(read["heads"], dtype=torch.float64)
            sent = torch.tensor(reference.data["weights"][layer], dtype=torch.float64)
            if drawn.shape != sent.shape:
                problems.append(f"{label}: {tuple(drawn.shape)} drawn, Python sends {tuple(sent.shape)}")
                continue
            # As chapter 4's test: one step of the last decimal where the exact weight lies at a rounding boundary
            # (the page was built under the second numerical configuration, this test runs under this one).
            edge = exact[layer].double()
            on_edge = ((edge * 1000 - 0.5) - torch.round(edge * 1000 - 0.5)).abs() < 0.01
            allowed = torch.where(on_edge, torch.full_like(edge, 1.0001e-3), torch.full_like(edge, 1e-4))
            if ((drawn - sent).abs() > allowed).any():
                problems.append(f"{label}: drawn weights differ from Python's by {(drawn - sent).abs().max():.2e}")
            if read["heading"] != f"layer {layer}, all {reference.num_heads} heads":
                problems.append(f"{label}: the heading says {read['heading']!r}")
    assert read["options"] == [None, *examples]
    assert f"the first one loads the model ({SCRIPT_MEGABYTES} MB, once)" in read["note"]
    loaded = "return Array.from(document.scripts).filter((s) => s.src.includes('page-models')).length"
    assert browser.execute_script(loaded) == 0  # the menu loaded nothing
    browser.execute_script(
        'const m = document.querySelector(\'.ab-widget[data-kind="heads"] select[name="layer"]\');'
        "m.value = '0'; m.dispatchEvent(new Event('change', { bubbles: true }));"
    )
    for sentence in ("A cat sat on the mat.", "The river bank was muddy."):
        read = browser.execute_async_script(TYPE_AND_WAIT, sentence)
        reference.set_text(sentence)
        drawn = torch.tensor(read["heads"], dtype=torch.float64)
        sent = torch.tensor(reference.data["weights"][0], dtype=torch.float64)
        if read["error"] or read["frames"] != 1 or drawn.shape != sent.shape or (drawn - sent).abs().max() > 1e-2:
            problems.append(f"typed {sentence!r}: {read['error']!r}, {read['frames']} redraws, {tuple(drawn.shape)}")
    assert browser.execute_script(loaded) == 1
    assert not problems, "\n".join(problems)
