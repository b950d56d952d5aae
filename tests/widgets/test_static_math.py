"""The website's own computations (issue 35) against the Python widgets they mirror.

On the book's website there is no kernel: chapter 1's typed sentence, chapter 2's typed
query, chapter 3's typed scores and chapter 5's d_model and base are computed by the widgets' JavaScript
(attentionData, keyValueData, softHardData, positionalData and the parsers they call; chapter
1's drawn vectors by drawnVector, the same generator as drawn_vector, bit for bit). The Python widgets stay the reference: each input
below goes through the Python widget (its ``update``, as a typed value does in Jupyter) and
through the JavaScript (node, loading the module the widgets serve), and both must give the
same numbers and, for bad input, the same message for the same control. Numbers agree within
1e-4; chapters 2 and 5 compute in float32 in Python (float64 here), so there a number may also
differ by 1e-5 of itself: float32 holds a score of 58 to 4e-6, exp() carries that into the
weights, and a returned value of 60 from values up to 1000 moves by up to 3e-4 (measured 2.6e-4).

Each comparison runs twice: with the numbers unrounded on both sides (``rounded`` keeping 12
decimals: the arithmetic), and as sent to the browser (rounded to 3 or 4 decimals on both
sides: then a number may differ by one step of the last decimal, where float32 and float64
fall on either side of a rounding boundary).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess

import pytest

from attention_book.widgets import _base
from attention_book.widgets import attention_explorer as ae_module
from attention_book.widgets import key_value_explorer as kv_module
from attention_book.widgets import positional_explorer as pe_module
from attention_book.widgets import soft_hard_explorer as sh_module
from attention_book.widgets._base import widget_module_source
from attention_book.widgets.attention_explorer import AttentionExplorer, drawn_vector
from attention_book.widgets.key_value_explorer import KeyValueExplorer
from attention_book.widgets.positional_explorer import PositionalEncodingExplorer
from attention_book.widgets.soft_hard_explorer import SoftHardExplorer

SCORES = [
    # good
    "river=1.9, bank=1.5, the=0.2",
    "1.9, 1.5, 0.2",
    "[1, 2, 3]",
    "(0.5)",
    "a=1, b=1, c=1, d=0.5",
    "x=-20, y=20",
    "1e1, -1e1, 0",
    "1_0, 2",
    "  the = 0.2 ,  river=1.9  ",
    "a=b=3, c=2",
    "0, 0, 0, 0, 0, 0, 0, 0, 0, 0",
    "+.5, -.25, 5.",
    "é=1.5, ü=0.2, 猫=-3",
    "7",
    "k=19.999999, l=-0.0000001, m=3.14159265",
    "=4, =5",
    # bad: empty, unparsable, out of range, too many
    "",
    "   ",
    "[]",
    ",",
    "1,,2",
    "1, 2,",
    "abc",
    "a=x",
    "a=1, b=nan",
    "a=inf",
    "a=21",
    "-20.5",
    "1,2,3,4,5,6,7,8,9,10,11",
    "a=1e400",
    "it's=1, b=bad'q",
    "a=0x10",
    "1__0",
    "a=\t",
    "a=25.1234567",
    "q=1, r=\\x",
    "a=\u00a0",
    "weird\x01=99",
]

POSITIONAL = [
    # good: (d_model, base)
    ("64", "10000.0"),
    ("2", "10"),
    ("256", "1000000"),
    ("128", "10000"),
    ("16", "100"),
    ("8", "31622.776601683792"),
    (" 32 ", "1e4"),
    ("+48", "5000.5"),
    ("1_0", "10"),
    ("100", "999999.9"),
    ("62", "1000000.5"),
    ("4", "9.995"),
    ("0_6", "17782.794100389227"),
    # bad
    ("", "10000"),
    ("abc", "10000"),
    ("3", "10000"),
    ("0", "10000"),
    ("258", "10000"),
    ("-2", "10000"),
    ("64.0", "10000"),
    ("1e2", "10000"),
    ("64", ""),
    ("64", "abc"),
    ("64", "5"),
    ("64", "2000000"),
    ("64", "inf"),
    ("64", "nan"),
    ("64", "-10000"),
    ("999999999999999999999999", "10000"),
    ("64", "1234565"),
    ("64", "0.0001"),
    ("64", "0.00001"),
    ("7", "abc"),
    ("64", "1,000"),
]

QUERIES = [
    # good
    "0, 10, 0",
    "[0, 0, 10]",
    "(1 2 3)",
    "10,-10,10",
    "0.25, 0.75, -0.25",
    "1e1 0 0",
    "  3,4  ,5 ",
    "-0, 0, 0",
    "9.99, -9.99, 0.001",
    "1_0, 0, 0",
    "1,,2,3",
    "0.3 0.3 0.3",
    "-7.5, 2.5, 10",
    # bad
    "",
    "  ",
    "[]",
    "a b c",
    "1, 2",
    "1 2 3 4",
    "1, nan, 2",
    "inf 0 0",
    "11, 0, 0",
    "0 0 -10.125",
    "0x1 0 0",
    "1e400 0 0",
    "0 0 10.005",
    "2 'x' 3",
]

# A second store: 2 components, fractional numbers, a slider range of +-13 (not the default 10).
OTHER_STORE = {
    "keys": [[1.5, -2.0], [0.3, 0.7], [-1.0, 2.5], [8.2, 1.0]],
    "values": [[0.1, 2.0], [3.3, -1.0], [5.0, 5.0], [0.0, -0.7]],
}
OTHER_QUERIES = ["1, 2", "13, -13", "0.3,0.1", "-12.75 4", "13.5, 0", "1 2 3", "", "x, 1", "0 -13.001", "[2.2, -0.4]"]

# Chapter 1's sentence box, with the chapter's given vectors (only these words have one)
SENTENCES_GIVEN = [
    # good: reorders, repeats, odd spacing
    "the river bank",
    "bank the river bank",
    "bank",
    "the the the",
    "river bank",
    "  bank\triver  ",
    "bank bank bank bank bank bank bank bank bank bank",
    "river the bank the river",
    "the\u3000river\u00a0bank",
    "bank\nthe",
    "the river bank river the",
    "river",
    # bad: empty, too long, unknown words (ASCII, accented, CJK, emoji, quotes, near misses)
    "",
    "   \t ",
    "the " * 11,
    "a b c d e f g h i j k l",
    "the dog",
    "the dog cat dog",
    "Bank",
    "the river bank.",
    "café bank",
    "猫 the",
    "bank 🐱",
    "it's bank",
    'say "hi"',
    "the\x01 river",
    "river\u200bbank",
]
# ... and with drawn vectors (every word gets one from drawn_vector's generator)
SENTENCES_DRAWN = [
    "the cat sat on the mat",
    "mat the on sat cat the",
    "zebra",
    "a a a a",
    "café naïve Ünïcödé",
    "猫 が 座った",
    "🐱 🐶 🐱",
    "x1 x2 x3 x4 x5 x6 x7 x8 x9 x10",
    "  leading   and trailing  ",
    'it\'s "quoted" words',
    "THE The the",
    "tab\tseparated\nlines",
    "ﬁ ß İ",
    "",
    " ",
    "ünïcode 猫 🐱 a",
    "repeat repeat",
    "Ω",
    "1 2 3 10 100",
    "one two three four five six seven eight nine ten eleven",
    "\u3000",
    "\t\n",
    "1 2 3 4 5 6 7 8 9 10 11 12",
]

RUNNER = r"""
const chunks = [];
process.stdin.on("data", (chunk) => chunks.push(chunk));
process.stdin.on("end", async () => {
  const module = await import(process.argv[1]);
  const cases = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const answers = cases.map(({ fn, inputs, saved, exact, changed, args }) => {
    try {
      if (args) return { data: module[fn](...args) };
      return { data: module[fn](inputs, saved, { exact }) };
    } catch (error) {
      if (!(error instanceof module.WidgetInputError)) return { crash: String(error && error.stack) };
      return { error: { control: error.control || changed, message: error.message } };  // as render.js shows it
    }
  });
  process.stdout.write(JSON.stringify(answers));
});
"""


@pytest.fixture(scope="module")
def run_js(tmp_path_factory):
    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to run the widgets' JavaScript")
    folder = tmp_path_factory.mktemp("static-math")
    module = folder / "widgets.mjs"
    module.write_text(widget_module_source(), encoding="utf-8")

    def run(cases: list[dict]) -> list[dict]:
        completed = subprocess.run(
            [node, "-e", RUNNER, module.as_uri()],
            input=json.dumps(cases),
            capture_output=True,
            text=True,
            timeout=120,
            encoding="utf-8",
        )
        assert completed.returncode == 0, completed.stderr
        return json.loads(completed.stdout)

    return run


def unrounded(monkeypatch):
    """The Python widgets' numbers before rounding them for the browser (12 decimals kept)."""
    for module in (sh_module, pe_module, kv_module, ae_module):
        monkeypatch.setattr(module, "rounded", lambda values, digits=4: _base.rounded(values, 12))


def python_answer(widget, inputs: dict, changed: str) -> dict:
    """What the Python widget does with these inputs (as typed in Jupyter): data, or the error shown."""
    widget.inputs = dict(inputs)
    widget.error = {}
    widget.update(changed)
    if widget.error:
        return {"error": dict(widget.error)}
    return {"data": json.loads(widget.payload)}


def differences(js, py, path="data", *, atol=1e-4, rtol=0.0, step=None) -> list[str]:
    """Where two payloads differ: numbers beyond the tolerance (or one rounding ``step``), anything else unequal."""
    if isinstance(py, dict):
        if not isinstance(js, dict) or set(js) != set(py):
            return [f"{path}: keys {sorted(js) if isinstance(js, dict) else js!r} != {sorted(py)}"]
        return [
            d for key in py for d in differences(js[key], py[key], f"{path}.{key}", atol=atol, rtol=rtol, step=step)
        ]
    if isinstance(py, list):
        if not isinstance(js, list) or len(js) != len(py):
            return [f"{path}: {js!r:.80} != {py!r:.80} (lengths)"]
        found = []
        for i, (a, b) in enumerate(zip(js, py)):
            found += differences(a, b, f"{path}[{i}]", atol=atol, rtol=rtol, step=step)
            if len(found) > 5:
                break
        return found
    if isinstance(py, bool) or isinstance(py, str) or py is None:
        return [] if js == py else [f"{path}: {js!r} != {py!r}"]
    if isinstance(py, int) and isinstance(js, int):
        return [] if js == py else [f"{path}: {js} != {py}"]
    limit = atol + rtol * abs(py)
    if step is not None:
        limit = max(limit, step * 1.0001)
    return [] if math.isclose(js, py, rel_tol=0, abs_tol=limit) else [f"{path}: {js!r} != {py!r}"]


def compare(cases, python_answers, js_answers, **tolerance) -> tuple[list[str], int, int]:
    problems, good, bad = [], 0, 0
    for case, py, js in zip(cases, python_answers, js_answers):
        label = json.dumps(case["inputs"], ensure_ascii=False)
        if "crash" in js:
            problems.append(f"{label}: the JavaScript failed: {js['crash']}")
        elif "error" in py or "error" in js:
            bad += 1
            if py.get("error") != js.get("error"):
                problems.append(
                    f"{label}: Python {py.get('error') or 'computes'}; JavaScript {js.get('error') or 'computes'}"
                )
        else:
            good += 1
            problems += [f"{label}: {d}" for d in differences(js["data"], py["data"], **tolerance)]
    return problems, good, bad


def check(run_js, widget, fn, saved, inputs_list, changed, monkeypatch, *, rtol=0.0, minimum=20):
    for exact in (True, False):
        with monkeypatch.context() as patch:
            if exact:
                unrounded(patch)
            python_answers = [python_answer(widget, inputs, changed) for inputs in inputs_list]
        cases = [
            {"fn": fn, "inputs": inputs, "saved": saved, "exact": exact, "changed": changed} for inputs in inputs_list
        ]
        js_answers = run_js(cases)
        # Rounded payloads: one step of the last decimal kept (3 for the sums, 4 for weights).
        tolerance = {"atol": 1e-4, "rtol": rtol} if exact else {"atol": 1e-4, "rtol": rtol, "step": 1e-3}
        problems, good, bad = compare(cases, python_answers, js_answers, **tolerance)
        assert not problems, f"exact={exact}:\n" + "\n".join(problems[:30])
        assert good + bad >= minimum and good >= 5 and bad >= 5, (good, bad)


def test_typed_scores_give_the_python_widgets_weights_and_messages(run_js, monkeypatch):
    widget = SoftHardExplorer(device="cpu")
    widget.unobserve(widget._on_inputs, names="inputs")
    saved = json.loads(widget.payload)
    check(run_js, widget, "softHardData", saved, [{"scores": text} for text in SCORES], "scores", monkeypatch)


def test_d_model_and_base_give_the_python_widgets_table_and_similarities(run_js, monkeypatch):
    widget = PositionalEncodingExplorer(device="cpu")
    widget.unobserve(widget._on_inputs, names="inputs")
    saved = json.loads(widget.payload)
    inputs = [{"d_model": d_model, "base": base} for d_model, base in POSITIONAL]
    check(run_js, widget, "positionalData", saved, inputs, "d_model", monkeypatch, rtol=1e-5)


@pytest.mark.parametrize("store, queries", [({}, QUERIES), (OTHER_STORE, OTHER_QUERIES)], ids=["sanity", "other"])
def test_a_typed_query_gives_the_python_widgets_lookup_and_messages(run_js, monkeypatch, store, queries):
    widget = KeyValueExplorer(device="cpu", **store)
    widget.unobserve(widget._on_inputs, names="inputs")
    saved = json.loads(widget.payload)
    check(
        run_js,
        widget,
        "keyValueData",
        saved,
        [{"query": text} for text in queries],
        "query",
        monkeypatch,
        rtol=1e-5,
        minimum=10 if store else 20,
    )


@pytest.mark.parametrize(
    "value, places, fixed, general",
    [
        (0.125, 2, "0.12", "0.125"),
        (0.375, 2, "0.38", "0.375"),
        (-10.125, 2, "-10.12", "-10.125"),
        (1234565.0, 2, "1234565.00", "1.23456e+06"),
        (1e-05, 3, "0.000", "1e-05"),
        (-0.0001, 2, "-0.00", "-0.0001"),
        (999999.5, 0, "1000000", "1e+06"),
        (2.5, 0, "2", "2.5"),
        (123.456, 1, "123.5", "123.456"),
        (0.0, 2, "0.00", "0"),
    ],
)
def test_python_number_formatting_is_mirrored(run_js, value, places, fixed, general):
    assert f"{value:.{places}f}" == fixed and f"{value:.6g}" == general  # the expectations are Python's
    cases = [
        {"fn": "pyFixed", "inputs": value, "saved": places, "exact": False},
        {"fn": "pyGeneral", "inputs": value, "saved": 6, "exact": False},
    ]
    answers = run_js(cases)
    assert [answer.get("data") for answer in answers] == [fixed, general], answers


# Chapter 1's widgets on the website: its own vectors (as the chapter passes them), drawn vectors
# (seeds beyond 32 bits and negative ones included) and other given vectors, larger and 3-d.
EXPLORERS = {
    "chapter-1": (dict(tokens=["the", "river", "bank"], vectors=[[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]), SENTENCES_GIVEN),
    "drawn": (dict(seed=7, dim=8), SENTENCES_DRAWN),
    "drawn-big-seed": (dict(seed=-123456789012, dim=1), SENTENCES_DRAWN),
    "other-vectors": (
        dict(tokens="the river bank", vectors=[[0.3, -1.7, 2.5], [9.5, 0.1, -4.2], [-0.6, 0.6, 0.0]]),
        SENTENCES_GIVEN,
    ),
}


@pytest.mark.parametrize("name", EXPLORERS)
def test_a_typed_sentence_gives_the_python_widgets_attention_and_messages(run_js, monkeypatch, name):
    arguments, sentences = EXPLORERS[name]
    widget = AttentionExplorer(device="cpu", **arguments)
    widget.unobserve(widget._on_inputs, names="inputs")
    saved = json.loads(widget.payload)
    inputs = [{"sentence": text} for text in sentences]
    check(run_js, widget, "attentionData", saved, inputs, "sentence", monkeypatch, rtol=1e-5)


# Words in many scripts (the hash reads their UTF-8 bytes), seeds within and beyond 32 bits.
WORDS = [
    "the",
    "",
    "a",
    "bank",
    "café",
    "naïve",
    "Ünïcödé",
    "猫",
    "座った",
    "🐱",
    "👩‍👩‍👧",
    "مرحبا",
    "Привет",
    "ﬁ",
    "x" * 300,
]
WORDS += [f"w{i}" for i in range(60)]
SEEDS = [0, 1, 7, 2**31, 2**32 - 1, 2**32 + 5, -1, -123456789012]


def test_drawn_vectors_are_the_same_float32_numbers_in_javascript(run_js):
    cases, expected = [], []
    for word in WORDS:
        for seed in SEEDS:
            dim = 1 + (len(cases) % 8)
            # The payload carries the seed reduced to 32 bits (what the generator uses).
            cases.append({"fn": "drawnVector", "args": [word, seed % 2**32, dim]})
            expected.append(drawn_vector(word, seed, dim).tolist())
    answers = run_js(cases)
    different = [
        (case["args"], answer, want)
        for case, answer, want in zip(cases, answers, expected)
        if answer.get("data") != want  # bit for bit: JSON carries every float exactly
    ]
    assert not different, different[:5]
    assert len(cases) >= 500


def test_the_written_out_logarithm_is_the_same_in_both_languages(run_js):
    values = [2.0**-60, 1e-12, 3e-7, 0.001, 0.1, 0.25, 0.5, 0.70710678, 0.7071067811865476, 0.9, 0.999999, 1 - 2**-53]
    values += [k / 997 for k in range(1, 997, 7)]
    answers = run_js([{"fn": "naturalLog", "args": [x]} for x in values])
    for x, answer in zip(values, answers):
        assert answer["data"] == ae_module._natural_log(x), x
        assert math.isclose(answer["data"], math.log(x), rel_tol=4e-15, abs_tol=1e-16), x


SOURCES = {
    "sorting": [
        "C A F B", "CAFB", "cafb", "a b c", "C,A,F", " C , A ", "J I H G F E D C B A", "A", "AA", "aA",
        "", "   ", ",", "K", "C A Z", "<bos> A", "<eos>", "A B C D E F G H I J K", "12", "É", "c a ß", "C\u3000A",
    ],
    "dates": [
        "11. März 1997", "tuesday 3rd of march 1998", "1/2/2003", "3 /   3", "1 1", "  x  ", "a b c d",
        "", "   ", "✓", "11. März 1997 ✓", "ÿ", "tuesday the third of march in the year 1998", "MARCH", "\t1\t",
        "1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3",
    ],
}  # fmt: skip


@pytest.mark.parametrize("which", ["sorting", "dates"])
def test_a_typed_source_is_parsed_as_parse_source_parses_it(run_js, which):
    """js/06_decoding.js's parseSource (chapter 6's stepper on the website) against parse_source: the same
    tokens, or the same message, for every text."""
    import attention_book as ab
    from attention_book.data.dates import DateTask
    from attention_book.widgets._base import WidgetInputError
    from attention_book.widgets.decoding_stepper import parse_source

    if which == "sorting":
        vocab, max_source = ab.SequenceTask("sort", 4, min_len=3, max_len=8, num_symbols=10, seed=1).vocab, 10
    else:
        vocab, max_source = DateTask(4, split="test", seed=3).vocab, 32
    names = list(vocab.tokens[: len(vocab.tokens) - len(vocab.symbols)])
    page = {"symbols": list(vocab.symbols), "max_source": max_source, "specials": {"names": names}}
    texts = SOURCES[which]
    answers = run_js([{"fn": "parseSource", "args": [text, page], "changed": "source"} for text in texts])
    problems, bad = [], 0
    for text, js in zip(texts, answers):
        try:
            expected = {"data": parse_source(text, vocab, max_source)}
        except WidgetInputError as error:
            expected = {"error": {"control": "source", "message": str(error)}}
            bad += 1
        if js != expected:
            problems.append(f"{text!r}: JavaScript {js}, Python {expected}")
    assert not problems, "\n".join(problems)
    assert len(texts) >= 16 and bad >= 6
