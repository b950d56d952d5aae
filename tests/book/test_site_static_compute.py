"""Issue 35: on the built website (no kernel, file:// URLs, network off) chapter 1's typed
sentence, chapter 2's typed query, chapter 3's typed scores and chapter 5's d_model and base
compute in the page's JavaScript. Typing into each redraws the picture with the Python widget's numbers, and bad
input shows the Python widget's message next to the control, the picture marked stale.

The picture is read back as drawn: bar heights (weights, to 1e-4), and the numbers written
in it with two decimals (to 0.005). tests/widgets/test_static_math.py compares the same
JavaScript with Python at 1e-4 over 20 or more inputs per control.
"""

from __future__ import annotations

import json
import re

from attention_book.widgets.attention_explorer import AttentionExplorer
from attention_book.widgets.key_value_explorer import KeyValueExplorer
from attention_book.widgets.positional_explorer import PositionalEncodingExplorer
from attention_book.widgets.soft_hard_explorer import SoftHardExplorer
from tests.book.test_site_widgets import POKE_SCRIPT

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

SCORES = ["a=1, b=2, c=3", "x=0.5, y=-1, z=0.5, w=4", "7", "a=25", "1,,2", "river=1.9, bank=1.5"]
QUERIES = ["10, 0, 0", "0 0 10", "[3, -4.5, 7]", "1, 2", "a b c", "0, 10, 0"]
# chapter 5's sliders: d_model's value, then the base's (its slider holds log10 of the base)
POSITIONAL = [("d_model", "8"), ("d_model", "256"), ("base", "2"), ("base", "3.5"), ("d_model", "64"), ("base", "6")]


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
SENTENCES = [
    "bank the river bank",
    "river",
    "the dog",
    "river bank the river bank",
    "",
    "bank bank",
    "the " * 11,
    "猫 bank",
    "the  river\tbank",
]
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
