"""Issue 46: chapter 7's pretrained model on the website, typed into offline from file://.

The page is a bare one (tests/book/bare_page.py): chapter 7's head viewer saved as the site build saves it
(MiniLM with its menu, ATTENTION_BOOK_PAGE_MODELS=1), the widgets' module, and what the site serves beside
its pages (widgets_offline.js, onnxruntime-web, the page model build_book writes); no site build is needed.
Headless Chromium with no network types 24 sentences, good and bad, into the sentence box. For each good one
every drawn weight of every layer and head (the cells' data-value) must lie within 1e-2 of what the Python
head viewer sends for MiniLM (and within one rounding step of the page's own model, pretrained_page's
page_encoder), the tokens must be the Python tokenizer's, and a bad one must show the Python message. The
menu draws at once with nothing loaded, the first typed sentence says that the model is loading, and a
browser without WebAssembly says why the box is off while the menu still works.
"""

from __future__ import annotations

import os

import pytest
import torch

from attention_book.widgets.pretrained_page import SCRIPT_MEGABYTES
from tests.book.bare_page import saved_state, write_bare_page, write_vendor
from tests.book.site_support import BROWSER_MISSING, _browser_paths, headless_chromium
from tests.book.test_site_static_compute import HEAD_READERS, SHOW_ALL_HEADS, TYPE_AND_WAIT
from tests.book.test_site_widgets import POKE_SCRIPT

FIRST = "The plot is thin, but the acting is not bad at all."
MENU = ["The acting is bad.", "We had a picnic on the bank of the river.", "Great!"]
TYPED = [
    "A cat sat on the mat.",
    "The river bank was muddy after the storm.",
    "I paid the cheque into the bank on Monday.",  # not in this page's menu: computed here
    "Zyxqvtrw blorf snarkle!",
    "Café naïve résumé, ÉCOLE straße.",
    "Hello [MASK] world, [CLS] again",
    "don't won't it's o'clock: 3.14 + $100 = 100%?",
    "猫が好き and 中文",
    "🐱 and 🐶 are friends 👍",
    "supercalifragilisticexpialidocious",
    "a",
    "THE END",
    "Great!",  # a menu sentence typed: drawn from the saved weights
    " ".join(["word"] * 38),  # 40 pieces with [CLS] and [SEP]: the longest the viewer shows
    "«Quoted» — “curly” … ellipsis",
    "x y z",
    "Ελληνικά και русский",
    "tab\tseparated\u3000ideographic space",
    # bad: empty, blank, 41 pieces, far too long (cut at 512 by the tokenizer, as in Python)
    "",
    "   ",
    " ".join(["word"] * 39),
    "word " * 600,
    "\u3000\t ",
    "The last one after the errors.",
]
# Picks `layer` in the layer menu and reads the grid back, with the first map's row labels.
READ_LAYER = (
    HEAD_READERS
    + r"""
const [layer] = arguments;
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const menu = widget.querySelector('select[name="layer"]');
menu.value = JSON.stringify(layer);
menu.dispatchEvent(new Event("change", { bubbles: true }));
const first = widget.querySelector(".ab-picture svg > g > g");
return {
  heads: headGrid(widget),
  labels: Array.from(first.querySelectorAll("text.ab-row-label, text[data-row]")).map((t) => t.textContent),
  ...headState(widget),
};
"""
)
LOADED = "return Array.from(document.scripts).filter((s) => s.src.includes('page-models')).length"


def shortened(label: str, limit: int = 10) -> str:
    """kit.js's shorten (JavaScript counts UTF-16 units)."""
    units = label.encode("utf-16-le")
    return label if len(units) // 2 <= limit else units[: 2 * (limit - 1)].decode("utf-16-le", "ignore") + "…"


@pytest.fixture(scope="module")
def page(tmp_path_factory, minilm):
    from attention_book.widgets import HeadViewer
    from attention_book.widgets._base import PAGE_MODELS_VARIABLE

    if _browser_paths() is None:
        pytest.skip(BROWSER_MISSING)
    folder = tmp_path_factory.mktemp("bare-page")
    before = os.environ.get(PAGE_MODELS_VARIABLE)
    os.environ[PAGE_MODELS_VARIABLE] = "1"
    try:
        viewer = HeadViewer(minilm, minilm.encode_sentence, FIRST, device="cpu", examples=MENU)
    finally:
        os.environ.pop(PAGE_MODELS_VARIABLE) if before is None else os.environ.update({PAGE_MODELS_VARIABLE: before})
    write_vendor(folder)
    return write_bare_page(folder, [saved_state(viewer)])


def open_page(driver, page):
    driver.get(page.as_uri())
    driver.execute_async_script(POKE_SCRIPT, {"presentation": {}, "bound": {}})  # until the widget has drawn
    driver.execute_script(SHOW_ALL_HEADS)


def check_drawn(driver, text, reference, twin_reference) -> tuple[list[str], float]:
    """Every layer as drawn against the Python head viewer (MiniLM) and the page's own model; the largest
    difference from MiniLM's weights."""
    labels, exact = reference._run(text, torch.device("cpu"))
    sent = torch.tensor(reference._data(labels, exact)["weights"], dtype=torch.float64)
    twin = torch.tensor(twin_reference._data(*twin_reference._run(text, torch.device("cpu")))["weights"])
    problems, worst = [], 0.0
    for layer in range(reference.num_layers):
        read = driver.execute_script(READ_LAYER, layer)
        drawn = torch.tensor(read["heads"], dtype=torch.float64)
        if drawn.shape != sent[layer].shape:
            return [f"{text!r} layer {layer}: {tuple(drawn.shape)} drawn, Python sends {tuple(sent[layer].shape)}"], 1
        worst = max(worst, float((drawn - sent[layer]).abs().max()))
        # a menu sentence draws the weights saved when the book was built, any other the page model's
        ours, step = (sent[layer], 1e-9) if text in [FIRST, *MENU] else (twin[layer].double(), 1.0001e-3)
        if (drawn - ours).abs().max() > step:  # within one step of the last decimal
            problems.append(f"{text!r} layer {layer}: not the weights of the page's model")
        if read["labels"] != [shortened(label) for label in labels]:
            problems.append(f"{text!r}: the tokens drawn are {read['labels']}, Python's {labels}")
        if read["heading"] != f"layer {layer}, all 12 heads" or read["error"] or read["stale"]:
            problems.append(f"{text!r} layer {layer}: {read['heading']!r}, {read['error']!r}, stale {read['stale']}")
    return problems, worst


def test_typed_sentences_run_minilm_in_the_page_as_python_does(page, minilm):
    from attention_book.widgets import HeadViewer
    from attention_book.widgets._base import WidgetInputError
    from attention_book.widgets.pretrained_page import page_encoder

    reference = HeadViewer(minilm, minilm.encode_sentence, FIRST, device="cpu")
    twin = HeadViewer(page_encoder(minilm, max_tokens=40), minilm.encode_sentence, FIRST, device="cpu")
    problems, good, bad, worst = [], 0, 0, 0.0
    with headless_chromium(names_resolve=False, console_log=True, timeout_s=120) as driver:
        open_page(driver, page)
        assert driver.execute_script(LOADED) == 0  # nothing loaded before a sentence is typed
        for text in TYPED:
            read = driver.execute_async_script(TYPE_AND_WAIT, text)
            assert read["enabled"], read
            try:
                reference._encode(text)
            except WidgetInputError as error:
                bad += 1
                if read["error"] != f"⚠ {error}" or not read["stale"] or read["frames"]:
                    problems.append(f"{text!r}: shows {read['error']!r}; Python says {str(error)!r}")
                continue
            good += 1
            if read["error"] or read["stale"] or read["frames"] != 1:
                problems.append(f"{text!r}: {read['error']!r}, stale {read['stale']}, {read['frames']} redraws")
            found, largest = check_drawn(driver, text, reference, twin)
            problems += found
            worst = max(worst, largest)
            driver.execute_script(
                "const m = document.querySelector('select[name=\"layer\"]'); m.value = '0';"
                "m.dispatchEvent(new Event('change', { bubbles: true }));"
            )
        severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    print(f"\nlargest difference from MiniLM's weights over {good} sentences: {worst:.4f}")
    assert not problems, "\n".join(problems)
    assert worst <= 1e-2 and good >= 16 and bad >= 5 and good + bad >= 20
    assert not severe, severe


CHOOSE = r"""
const [value] = arguments;
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const menu = widget.querySelector('select[name="example"]');
const frames = Number(widget.dataset.frames);
menu.value = JSON.stringify(value);
menu.dispatchEvent(new Event("change", { bubbles: true }));
const box = widget.querySelector('[name="sentence"]');
return { frames: Number(widget.dataset.frames) - frames, box: box.value, disabled: box.disabled,
  note: widget.querySelector(".ab-note").textContent, heading: widget.querySelector(".ab-picture svg > text").textContent };
"""
FIRST_TYPED = r"""
const [value] = arguments;
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const input = widget.querySelector('[name="sentence"]');
input.value = value;
input.dispatchEvent(new Event("change", { bubbles: true }));
return widget.querySelector('[data-error-for="sentence"]').textContent;
"""


def test_the_menu_draws_at_once_and_the_first_typed_sentence_says_the_model_is_loading(page):
    with headless_chromium(names_resolve=False, console_log=True, timeout_s=120) as driver:
        open_page(driver, page)
        for sentence in [*MENU, FIRST]:
            chosen = driver.execute_script(CHOOSE, sentence)
            assert chosen["frames"] == 1 and chosen["box"] == sentence and not chosen["disabled"], chosen
        assert driver.execute_script(LOADED) == 0
        assert f"the first one loads the model ({SCRIPT_MEGABYTES} MB, once)" in chosen["note"], chosen["note"]
        assert driver.execute_script(FIRST_TYPED, "A new sentence.").startswith(
            f"loading the model ({SCRIPT_MEGABYTES} MB"
        )
        read = driver.execute_async_script(TYPE_AND_WAIT, "A new sentence.")
        assert driver.execute_script(LOADED) == 1 and not read["error"] and read["frames"] == 1, read


KEY_TYPED = r"""
const widget = document.querySelector('.ab-widget[data-kind="heads"]');
const input = widget.querySelector('[name="sentence"]');
input.value = "A";
input.dispatchEvent(new Event("input", { bubbles: true }));
return widget.querySelector('[data-error-for="sentence"]').textContent;
"""


def test_the_model_starts_loading_at_the_first_key_typed(page):
    with headless_chromium(names_resolve=False, console_log=True, timeout_s=120) as driver:
        open_page(driver, page)
        assert driver.execute_script(KEY_TYPED).startswith(f"loading the model ({SCRIPT_MEGABYTES} MB")
        assert driver.execute_script(LOADED) == 1  # added at once, before the sentence is sent
        read = driver.execute_async_script(TYPE_AND_WAIT, "A sentence typed while the model loads.")
        assert not read["error"] and read["frames"] == 1 and len(read["heads"]) == 12, read
        assert driver.execute_script(LOADED) == 1
        severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not severe, severe


def test_without_webassembly_the_box_says_why_and_the_menu_still_works(page):
    with headless_chromium(
        names_resolve=False, console_log=True, timeout_s=60, extra_arguments=("--js-flags=--jitless",)
    ) as driver:
        driver.get(page.as_uri())
        report = driver.execute_async_script(
            POKE_SCRIPT, {"presentation": {"heads": ["layer"]}, "bound": {"heads": ["sentence"]}}
        )
        assert driver.execute_script("return typeof WebAssembly") == "undefined"
        (entry,) = report
        assert entry["disabled"] == {"sentence": True}, entry
        assert "needs WebAssembly" in entry["note"] and "open the chapter in Colab or Jupyter" in entry["note"]
        assert entry["controls"]["layer"]["changed"], entry
        chosen = driver.execute_script(CHOOSE, MENU[1])
        assert chosen["frames"] == 1 and chosen["box"] == MENU[1] and chosen["disabled"], chosen
        assert driver.execute_script(LOADED) == 0
        severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not severe, severe
