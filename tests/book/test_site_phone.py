"""The built site on a 390 px phone and a 1280 px laptop, in headless Chromium (issue 29).

Reuses the site the other site tests build (the session fixture ``site``) and their offline
browser. At 390 px: no widget picture and no display equation is wider than the screen, and every
label a widget draws is at least 9 px. At 1280 px: every widget label is at least 9 px too, and no
code or output block of a chapter is wider than its column. On every chapter page: no ``assert`` line in code a reader sees unfolded, and every
figure has alt text that is not a file name.
"""

from __future__ import annotations

import re

import pytest

CHAPTERS = [
    "01_attention_math",
    "02_key_value_store",
    "03_soft_vs_hard",
    "04_multi_head",
    "05_positional_encoding",
    "06_encoder_decoder",
    "07_transfer_learning",
]
MIN_LABEL_PX = 9

# In the page, once the widgets have drawn: sizes as the reader's screen shows them.
_PHONE = r"""
const done = arguments[arguments.length - 1];
const minimum = arguments[0];
const start = Date.now();
(function poll() {
  const widgets = [...document.querySelectorAll('.ab-widget')];
  const drawn = widgets.length && widgets.every((w) => Number(w.dataset.frames) > 0);
  if (!drawn && Date.now() - start < 30000) return setTimeout(poll, 200);
  setTimeout(() => {  // a frame for the resize observer to fit the labels
    const screen = window.innerWidth;
    const pictures = widgets.map((w) => {
      const svg = w.querySelector('.ab-picture svg');
      const box = svg.getBoundingClientRect();
      const scale = box.width / svg.viewBox.baseVal.width;
      const small = [...svg.querySelectorAll('text')]
        .filter((t) => t.textContent.trim() && t.checkVisibility())
        .map((t) => ({ text: t.textContent.slice(0, 30), px: parseFloat(getComputedStyle(t).fontSize) * scale }))
        .filter((t) => t.px < minimum - 0.01);
      return { kind: w.dataset.kind, left: box.left, right: box.right, small };
    });
    const equations = [...document.querySelectorAll('mjx-container[display="true"]')].map((m) => {
      const box = m.getBoundingClientRect();
      return { text: (m.getAttribute('aria-label') || m.textContent).slice(0, 40), left: box.left, right: box.right };
    }).filter((m) => m.right > screen + 1 || m.left < -1);
    done({ screen, page: document.documentElement.scrollWidth, pictures, equations });
  }, 300);
})();
"""

_DESKTOP_BLOCKS = r"""
return [...document.querySelectorAll('div.cell_input pre, div.cell_output pre, div.cell_output .output')]
  .filter((node) => node.checkVisibility())
  .map((node) => ({ kind: node.closest('.cell_input') ? 'code' : 'output', over: node.scrollWidth - node.clientWidth,
                    text: node.textContent.slice(0, 60) }))
  .filter((block) => block.over > 1);
"""

_UNFOLDED_ASSERTS = r"""
return [...document.querySelectorAll('div.cell_input pre')]
  .filter((node) => !node.closest('details') && !node.closest('.toggle-hidden, .tag_hide-input'))
  .flatMap((node) => node.textContent.split('\n').filter((line) => /^\s*assert\b/.test(line)));
"""

_ALT_TEXTS = r"""
return [...document.querySelectorAll('article img')]
  .filter((img) => !img.closest('a[href*="colab.research.google.com"]'))
  .map((img) => ({ src: img.getAttribute('src'), alt: img.getAttribute('alt') || '' }));
"""


def _phone_layout(site, browser, chapter, width=390, height=844):
    browser.set_window_size(width, height)
    try:
        browser.get((site / "notebooks" / f"{chapter}.html").as_uri())
        browser.set_script_timeout(60)
        return browser.execute_async_script(_PHONE, MIN_LABEL_PX)
    finally:
        browser.set_window_size(1280, 1500)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_at_390_px_widget_pictures_and_display_equations_fit_the_screen(site, browser, chapter):
    layout = _phone_layout(site, browser, chapter)
    problems = []
    if layout["page"] > layout["screen"]:
        problems.append(f"the page scrolls sideways ({layout['page']} px at {layout['screen']} px)")
    if not layout["pictures"]:
        problems.append("no widget on the page")
    for picture in layout["pictures"]:
        if picture["right"] > layout["screen"] + 1 or picture["left"] < -1:
            problems.append(f"the {picture['kind']} picture spans {picture['left']:.0f}-{picture['right']:.0f} px")
    for equation in layout["equations"]:
        problems.append(
            f"a display equation spans {equation['left']:.0f}-{equation['right']:.0f} px: {equation['text']!r}"
        )
    assert not problems, f"{chapter} at 390 px:\n" + "\n".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_at_390_px_every_widget_label_is_at_least_9_px(site, browser, chapter):
    layout = _phone_layout(site, browser, chapter)
    problems = []
    for picture in layout["pictures"]:
        if picture["small"]:
            sizes = sorted({round(label["px"], 1) for label in picture["small"]})
            problems.append(
                f"{len(picture['small'])} labels of the {picture['kind']} under {MIN_LABEL_PX} px "
                f"({sizes[:5]} px), e.g. {picture['small'][0]['text']!r}"
            )
    assert not problems, f"{chapter} at 390 px:\n" + "\n".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_at_1280_px_every_widget_label_is_at_least_9_px_too(site, browser, chapter):
    """The desktop layout: dense token labels are named every k-th (the rest on pointing) rather than shrunk."""
    layout = _phone_layout(site, browser, chapter, width=1280, height=900)
    small = [
        f"{len(picture['small'])} labels of the {picture['kind']} under {MIN_LABEL_PX} px, "
        f"e.g. {picture['small'][0]['text']!r} at {picture['small'][0]['px']:.1f} px"
        for picture in layout["pictures"]
        if picture["small"]
    ]
    assert layout["pictures"] and not small, f"{chapter} at 1280 px:\n" + "\n".join(small)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_at_1280_px_no_code_or_output_block_is_wider_than_its_column(site, browser, chapter):
    browser.set_window_size(1280, 900)
    try:
        browser.get((site / "notebooks" / f"{chapter}.html").as_uri())
        wide = browser.execute_script(_DESKTOP_BLOCKS)
        assert not wide, f"{chapter}: {len(wide)} blocks wider than their column, e.g. {wide[:3]}"
    finally:
        browser.set_window_size(1280, 1500)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_assert_in_code_a_reader_sees_unfolded_and_every_figure_has_alt_text(site, browser, chapter):
    browser.get((site / "notebooks" / f"{chapter}.html").as_uri())
    asserts = browser.execute_script(_UNFOLDED_ASSERTS)
    images = browser.execute_script(_ALT_TEXTS)
    problems = [f"unfolded: {line.strip()[:90]}" for line in asserts]
    for image in images:
        alt = image["alt"].strip()
        name = image["src"].rsplit("/", 1)[-1]
        if not alt or name in alt or re.fullmatch(r"[\w./-]+\.(png|svg|jpe?g|gif)", alt):
            problems.append(f"{name}: alt text {alt[:60]!r}")
    assert images, f"{chapter}: no figures found"
    assert not problems, f"{chapter}:\n" + "\n".join(problems)
