"""The widgets on the built website (issue 20): drawn from the state each chapter saved, with
every presentation-only control working in headless Chromium with the network off, opened
from file:// (no server), and the controls that need a kernel disabled with a note."""

from __future__ import annotations

import pytest

# Each widget kind, the chapters that show it, and its presentation-only controls: sliders
# (input[type=range]), menus (select) and buttons, by name. Moving each must redraw.
PRESENTATION_CONTROLS = {
    "attention": ["temperature", "query", "causal", "scaled"],
    "key_value": ["query_1"],
    "soft_hard": ["beta"],
    "heads": ["head", "layer"],
    "positional": ["length", "measure"],
    "decoding": ["back", "step", "head"],
}
# Chapter 1's sentence, chapter 2's query, chapter 3's scores and chapter 5's d_model and base
# compute in the page (issue 35; tests/book/test_site_static_compute.py types into them): they
# are not listed here.
MODEL_BOUND = {
    "heads": ["sentence"],
    "decoding": ["source"],
}
# Chapter 4's head viewer and chapter 6's decoding steppers run the chapter's model in the page (its
# saved ONNX copy, onnxruntime-web; test_site_static_compute.py types into them); chapter 7's model is
# too large to save with the page: the site serves it beside the pages and the page loads it on the
# first sentence typed (issue 46; test_site_static_compute.py and test_page_minilm.py type into it).
RUNS_IN_PAGE = {"04_multi_head": ["heads"], "06_encoder_decoder": ["decoding"], "07_transfer_learning": ["heads"]}
CHAPTER_WIDGETS = {
    "01_attention_math": "attention",
    "02_key_value_store": "key_value",
    "03_soft_vs_hard": "soft_hard",
    "04_multi_head": "heads",
    "05_positional_encoding": "positional",
    "06_encoder_decoder": "decoding",
    "07_transfer_learning": "heads",
}

# Runs in the page: waits for the widgets, then moves each named control of each widget and
# reports whether the picture (the SVG's markup) changed and a new frame was drawn.
POKE_SCRIPT = r"""
const done = arguments[arguments.length - 1];
const controls = arguments[0];
const start = Date.now();
function wait() {
  const views = document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]').length;
  const drawn = document.querySelectorAll('.ab-widget[data-frames]').length;
  if ((drawn && drawn >= document.querySelectorAll('.ab-widget').length && Date.now() - start > 500) || Date.now() - start > 30000) {
    run();
  } else {
    setTimeout(wait, 100);
  }
}
function poke(widget, name) {
  const element = widget.querySelector(`[name="${name}"]`);
  if (!element) return "missing";
  if (element.tagName === "BUTTON") {
    element.click();
  } else if (element.type === "range") {
    const min = Number(element.min), max = Number(element.max), now = Number(element.value);
    element.value = now === min ? max : min;
    element.dispatchEvent(new Event("input", { bubbles: true }));
    element.dispatchEvent(new Event("change", { bubbles: true }));
  } else if (element.type === "checkbox") {
    element.click();
  } else if (element.tagName === "SELECT") {
    element.selectedIndex = (element.selectedIndex + 1) % element.options.length;
    element.dispatchEvent(new Event("change", { bubbles: true }));
  } else {
    return "not a presentation control";
  }
  return "moved";
}
function run() {
  const report = [];
  for (const widget of document.querySelectorAll('.ab-widget')) {
    const kind = widget.dataset.kind;
    const entry = { kind, controls: {}, disabled: {}, note: (widget.querySelector('.ab-note') || {}).textContent || "" };
    for (const name of (controls.presentation[kind] || [])) {
      const before = widget.querySelector('.ab-picture svg').innerHTML;
      const frames = Number(widget.dataset.frames);
      const outcome = poke(widget, name);
      const after = widget.querySelector('.ab-picture svg').innerHTML;
      entry.controls[name] = { outcome, changed: before !== after, frames: Number(widget.dataset.frames) - frames };
    }
    for (const name of (controls.bound[kind] || [])) {
      const element = widget.querySelector(`[name="${name}"]`);
      entry.disabled[name] = element ? element.disabled : "missing";
    }
    report.push(entry);
  }
  done(report);
}
wait();
"""


def poke_widgets(driver, url: str, bound: dict | None = None) -> list[dict]:
    """Open ``url`` and move every presentation-only control of every widget on it; report whether
    the ``bound`` controls (default: MODEL_BOUND) are disabled."""
    driver.get(url)
    bound = MODEL_BOUND if bound is None else bound
    return driver.execute_async_script(POKE_SCRIPT, {"presentation": PRESENTATION_CONTROLS, "bound": bound})


def problems_of(report: list[dict], page: str, expected_kind: str) -> list[str]:
    problems = []
    kinds = [entry["kind"] for entry in report]
    if expected_kind not in kinds:
        problems.append(f"{page}: no {expected_kind} widget drawn (found {kinds})")
    for entry in report:
        for name, result in entry["controls"].items():
            if result["outcome"] == "missing" and name == "layer":
                continue  # a one-layer model shows its layer as a label, not a menu
            if result["outcome"] != "moved" or not result["changed"] or result["frames"] < 1:
                problems.append(f"{page}: {entry['kind']} widget, control {name!r}: {result}")
        for name, disabled in entry["disabled"].items():
            if disabled is not True:
                problems.append(
                    f"{page}: {entry['kind']} widget, model-bound control {name!r} is not disabled ({disabled})"
                )
        if entry["disabled"] and "open the chapter in Colab" not in entry["note"]:
            problems.append(f"{page}: {entry['kind']} widget has no note saying where its disabled controls work")
    return problems


def test_every_widget_responds_on_the_static_site_from_file_urls_with_the_network_off(site, browser):
    problems = []
    for chapter, kind in CHAPTER_WIDGETS.items():
        page = site / "notebooks" / f"{chapter}.html"
        if not page.is_file():
            problems.append(f"{page.name} was not built")
            continue
        bound = {name: controls for name, controls in MODEL_BOUND.items() if name not in RUNS_IN_PAGE.get(chapter, [])}
        problems += problems_of(poke_widgets(browser, page.as_uri(), bound), page.name, kind)
    assert not problems, "\n".join(problems)


def test_the_site_serves_anywidget_and_marks_itself_as_having_no_kernel(site):
    assert (site / "_static" / "anywidget" / "index.js").is_file()
    offline = (site / "_static" / "widgets_offline.js").read_text()
    assert "paths.anywidget" in offline and "__attentionBookStaticPage = true" in offline


@pytest.mark.parametrize(
    "report, expected",
    [
        (
            [
                {
                    "kind": "heads",
                    "controls": {"head": {"outcome": "moved", "changed": False, "frames": 1}},
                    "disabled": {},
                    "note": "",
                }
            ],
            1,
        ),
        (
            [
                {
                    "kind": "heads",
                    "controls": {"head": {"outcome": "moved", "changed": True, "frames": 1}},
                    "disabled": {"sentence": False},
                    "note": "",
                }
            ],
            2,
        ),
        (
            [
                {
                    "kind": "heads",
                    "controls": {"head": {"outcome": "moved", "changed": True, "frames": 1}},
                    "disabled": {"sentence": True},
                    "note": "open the chapter in Colab or Jupyter",
                }
            ],
            0,
        ),
    ],
)
def test_the_check_reports_a_picture_that_did_not_change_and_an_enabled_sentence_box(report, expected):
    assert len(problems_of(report, "page", "heads")) == expected


def test_hovering_a_cell_highlights_its_row_and_column_and_leaving_restores_it(site, browser):
    """bertviz-style hover on the static page: the real mouse (WebDriver actions) over one cell
    of chapter 4's attention map dims every cell outside its row and column and bolds its labels."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get((site / "notebooks" / "04_multi_head.html").as_uri())
    cell = WebDriverWait(browser, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, '.ab-widget .ab-picture rect[data-row="1"][data-col="2"]')
    )
    grid = cell.find_element(By.XPATH, "..")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", cell)

    def state():
        return browser.execute_script(
            """
            const g = arguments[0];
            const cells = [...g.querySelectorAll('rect[data-row][data-col]')].map((r) => [
                Number(r.dataset.row), Number(r.dataset.col), r.getAttribute('opacity') || '1']);
            const bold = [...g.querySelectorAll('text[data-row]')].filter((t) => t.getAttribute('font-weight') === 'bold')
                .map((t) => Number(t.dataset.row));
            return {cells, bold};""",
            grid,
        )

    before = state()
    assert len(before["cells"]) >= 9 and all(opacity == "1" for _, _, opacity in before["cells"])
    ActionChains(browser).move_to_element(cell).perform()
    hovered = state()
    wrong = [(i, j, o) for i, j, o in hovered["cells"] if (o == "1") != (i == 1 or j == 2)]
    assert not wrong, f"cells dimmed or lit wrongly while hovering row 1, column 2: {wrong[:5]}"
    assert hovered["bold"] == [1]
    ActionChains(browser).move_by_offset(0, -400).perform()  # off the map
    after = state()
    assert all(opacity == "1" for _, _, opacity in after["cells"]) and after["bold"] == []


PHONE_LAYOUT = """
return {
  width: window.innerWidth,
  pageWidth: document.documentElement.scrollWidth,
  widgets: Array.from(document.querySelectorAll('.ab-widget')).map((w) => {
    const box = w.querySelector('.ab-picture');
    const svg = box.querySelector('svg');
    return {kind: w.dataset.kind, scale: svg.getBoundingClientRect().width / svg.viewBox.baseVal.width,
            scrolls: box.scrollWidth > box.clientWidth + 1, fits: w.getBoundingClientRect().right <= window.innerWidth + 1,
            pictureRight: svg.getBoundingClientRect().right};
  }),
};
"""


def test_on_a_390_px_phone_no_page_scrolls_sideways_and_widgets_keep_legible_labels(site, browser):
    """At 390 px the page fits, every widget box fits, and its picture is drawn to the box's width
    (nothing scrolls sideways inside the widget); tests/book/test_site_phone.py checks its labels."""
    problems = []
    browser.set_window_size(390, 844)
    try:
        for chapter, kind in CHAPTER_WIDGETS.items():
            browser.get((site / "notebooks" / f"{chapter}.html").as_uri())
            browser.execute_async_script(POKE_SCRIPT, {"presentation": {}, "bound": {}})  # until the widgets have drawn
            layout = browser.execute_script(PHONE_LAYOUT)
            if layout["width"] != 390:
                problems.append(f"{chapter}: the window is {layout['width']} px wide, not 390")
            if layout["pageWidth"] > layout["width"]:
                problems.append(
                    f"{chapter}: the page is {layout['pageWidth']} px wide at {layout['width']} px: it scrolls sideways"
                )
            if not layout["widgets"]:
                problems.append(f"{chapter}: no {kind} widget on the page")
            for widget in layout["widgets"]:
                if widget["scrolls"] or not widget["fits"] or widget["pictureRight"] > layout["width"] + 1:
                    problems.append(f"{chapter}: {widget}")
    finally:
        browser.set_window_size(1280, 1500)
    assert not problems, "\n".join(problems)
