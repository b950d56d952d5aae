"""Figures on the website: legible where they are shown, openable at full size; one search box.

The legibility tests multiply two measurements: the smallest text of each figure, in pixels
of its PNG (stamped into the PNG by the chapters' kernels while matplotlib draws it; see
tools/site/figure_audit.py), and the factor by which the page shrinks that PNG (measured in
Chromium). Their product is the height of the figure's smallest text on the screen, which
must be at least 8 px at the 1280 px layout (rows in tests/artifacts/figure_legibility.csv)
and at least 7 px on a 390 px phone (issue 29; rows in
tests/artifacts/figure_legibility_phone.csv). A fast test without the site computes the same
from the stored notebooks, one chapter at a time, with the column widths figure_audit measured.
"""

from __future__ import annotations

import csv
import json
import re
import time
import urllib.parse
from pathlib import Path

import matplotlib
import pytest

from tests.book.site_support import ARTIFACTS, _load
from tests.helpers import ROOT, tool

matplotlib.use("Agg")

figure_audit = tool("figure_audit")  # tools/site/figure_audit.py

CHAPTER_NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
CHAPTER_PAGES = [f"notebooks/{path.stem}.html" for path in CHAPTER_NOTEBOOKS]
PHONE_WIDTH = 390  # the window, in CSS pixels (the page column in it is figure_audit.PHONE_COLUMN_PX)

FIGURES_ON_PAGE = """
const visible = (e) => {
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && !e.closest("details:not([open])");
};
return Array.from(document.querySelectorAll("article .cell_output img")).filter(visible).map((image) => ({
  src: image.currentSrc,
  naturalWidth: image.naturalWidth,
  shownWidth: image.getBoundingClientRect().width,
  link: image.closest("a.figure-full-size") ? image.closest("a").href : null,
}));
"""


# Lazy images below the fold have no size until they load: load them all, then measure.
LOAD_EVERY_FIGURE = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.querySelectorAll("article .cell_output img"));
images.forEach((image) => { image.loading = "eager"; });
const start = Date.now();
(function poll() {
  if (images.every((image) => image.complete) || Date.now() - start > 30000) return done(images.length);
  setTimeout(poll, 100);
})();
"""


def _local(url: str) -> Path:
    assert url.startswith("file://"), url
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))


# ---------------------------------------------------------------------------------------
# The measurement itself, without a site


def test_the_smallest_text_is_measured_as_drawn_and_stamped_into_the_png():
    from IPython.core import pylabtools
    from matplotlib.figure import Figure

    figure = Figure(figsize=(4, 3), dpi=100)
    axes = figure.add_subplot()
    axes.set_title("title", fontsize=12)
    axes.text(0.5, 0.5, "small", fontsize=6)
    axes.text(0.5, 0.2, "hidden", fontsize=2, visible=False)  # not drawn: does not count
    axes.set_xticks([0, 1], ["a", "b"], fontsize=9)
    assert figure_audit.smallest_text_px(figure) == pytest.approx(6 * 100 / 72)

    original = pylabtools.print_figure
    try:
        figure_audit.install()
        png = pylabtools.print_figure(figure, "png")
    finally:
        pylabtools.print_figure = original
    width, smallest = figure_audit.read_png(png)
    assert smallest == pytest.approx(6 * 100 / 72, abs=0.01)
    assert 300 < width <= 400
    assert figure_audit.shown_px(10.0, 1320) == pytest.approx(5.0)
    assert figure_audit.shown_px(10.0, 500) == 10.0  # never enlarged


def test_an_svg_figure_reads_its_smallest_declared_font_size():
    svg = b'<svg width="810" style="font-size: 0.8em"><text font-size="20">a</text><text style="font-size: 9pt">b</text></svg>'
    assert figure_audit.read_svg(svg) == pytest.approx(12.0)
    assert figure_audit.read_svg(b'<svg width="10"><text>a</text></svg>') == 16.0


def test_an_unstamped_png_reads_as_unknown():
    import io

    from matplotlib.figure import Figure

    buffer = io.BytesIO()
    Figure(figsize=(1, 1)).savefig(buffer, format="png")
    assert figure_audit.read_png(buffer.getvalue()) == (100, None)


SVG_WIDTH = re.compile(r"""<svg\b[^>]*?\swidth\s*=\s*["']?\s*([0-9.]+)""")


def _stored_svg_rows(notebook: Path) -> list[dict]:
    """figure_audit.report's rows for the SVG outputs of a notebook (drawn by the browser at their
    own width: their declared font sizes, see figure_audit.read_svg)."""
    rows = []
    for index, cell in enumerate(json.loads(notebook.read_text(encoding="utf-8"))["cells"]):
        for output in cell.get("outputs", []):
            svg = output.get("data", {}).get("image/svg+xml")
            if svg is None:
                continue
            svg = "".join(svg) if isinstance(svg, list) else svg
            found = SVG_WIDTH.search(svg)
            width = round(float(found.group(1))) if found else figure_audit.COLUMN_PX
            smallest = figure_audit.read_svg(svg.encode("utf-8"))
            rows.append(
                {
                    "cell": index,
                    "width": width,
                    "smallest_px": smallest,
                    "shown_px": round(figure_audit.shown_px(smallest, width), 2),
                    "phone_px": round(figure_audit.shown_px(smallest, width, figure_audit.PHONE_COLUMN_PX), 2),
                }
            )
    return rows


@pytest.mark.parametrize("notebook", CHAPTER_NOTEBOOKS, ids=lambda path: path.stem)
def test_every_stored_figure_of_a_chapter_is_legible_on_the_page_and_on_a_phone(notebook):
    """From the stored outputs, no site: each figure's smallest text, once the PNG (or SVG) is fitted
    to the page column (660 px) and to a 390 px phone's (342 px), is at least MIN_PX and PHONE_MIN_PX."""
    rows = sorted(figure_audit.report(notebook) + _stored_svg_rows(notebook), key=lambda row: row["cell"])
    assert rows, f"{notebook.name} stores no figure (executed?)"
    problems = []
    for row in rows:
        where = f"{notebook.stem} cell {row['cell']}: {row['width']} px wide"
        if row["smallest_px"] is None:
            problems.append(
                f"{where}, no smallest-text stamp (re-execute with make chapter NB=notebooks/{notebook.name})"
            )
        elif row["shown_px"] < figure_audit.MIN_PX or row["phone_px"] < figure_audit.PHONE_MIN_PX:
            problems.append(
                f"{where}, smallest {row['phone_px']} px on a phone (at least {figure_audit.PHONE_MIN_PX}), "
                f"{row['shown_px']} px on the page (at least {figure_audit.MIN_PX})"
            )
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------------------------------
# On the built site, in Chromium at 1280 px


def test_every_figure_is_legible_at_the_desktop_layout_and_opens_at_full_size(site, browser):
    browser.set_window_size(1280, 1500)
    rows, problems = [], []
    for page in CHAPTER_PAGES:
        url = (site / page).as_uri()
        _load(browser, url)
        for figure in browser.execute_script(FIGURES_ON_PAGE):
            path = _local(figure["src"])
            if path.suffix == ".svg":  # drawn by the browser: its declared font sizes, at its own width
                width, smallest = figure["naturalWidth"], figure_audit.read_svg(path.read_bytes())
            else:
                width, smallest = figure_audit.read_png(path.read_bytes())
            assert width == figure["naturalWidth"], (page, figure)
            scale = figure["shownWidth"] / figure["naturalWidth"]
            shown = None if smallest is None else smallest * scale
            rows.append([page, path.name, width, round(figure["shownWidth"]), round(scale, 3), smallest, shown])
            if smallest is None:
                problems.append(
                    f"{page} {path.name}: no smallest-text stamp (built from a cache made before "
                    "tools/site/figure_audit.py? remove _build/.jupyter_cache and rebuild)"
                )
            elif shown < figure_audit.MIN_PX:
                problems.append(
                    f"{page} {path.name}: {width} px wide, shown at {scale:.2f}, so its smallest text "
                    f"({smallest:.1f} px) is {shown:.1f} px on the page; split or re-lay-out the figure"
                )
            if figure["link"] is None or _local(figure["link"]) != path:
                problems.append(f"{page} {path.name}: not linked to itself at full size ({figure['link']})")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTIFACTS / "figure_legibility.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["page", "image", "png_width", "shown_width", "scale", "smallest_text_png_px", "smallest_text_shown_px"]
        )
        writer.writerows(rows)
    assert len(rows) >= 20, f"only {len(rows)} figures found on the chapter pages"
    assert not problems, "\n".join(problems)


def test_every_figure_is_legible_on_a_390_px_phone(site, browser):
    """At a 390 px wide window each figure's shown width (measured) times its stamped smallest
    text, over its PNG width, is at least figure_audit.PHONE_MIN_PX."""
    window = PHONE_WIDTH
    browser.set_window_size(window, 844)
    rows, problems = [], []
    try:
        for page in CHAPTER_PAGES:
            _load(browser, (site / page).as_uri())
            browser.execute_async_script(LOAD_EVERY_FIGURE)
            viewport = browser.execute_script("return window.innerWidth")
            assert viewport <= window, f"{page}: the window is {viewport} px wide, not {window}"
            for figure in browser.execute_script(FIGURES_ON_PAGE):
                path = _local(figure["src"])
                if path.suffix == ".svg":
                    width, smallest = figure["naturalWidth"], figure_audit.read_svg(path.read_bytes())
                else:
                    width, smallest = figure_audit.read_png(path.read_bytes())
                assert width == figure["naturalWidth"], (page, figure)
                scale = figure["shownWidth"] / width
                shown = None if smallest is None else smallest * scale
                rows.append(
                    [
                        page,
                        path.name,
                        viewport,
                        width,
                        round(figure["shownWidth"]),
                        round(scale, 3),
                        smallest,
                        None if shown is None else round(shown, 2),
                    ]
                )
                if smallest is None:
                    problems.append(f"{page} {path.name}: no smallest-text stamp (rebuild without the old cache)")
                elif shown < figure_audit.PHONE_MIN_PX:
                    problems.append(
                        f"{page} {path.name}: {width} px wide, shown {figure['shownWidth']:.0f} px wide on a "
                        f"{viewport} px phone, so its smallest text ({smallest:.1f} px) is {shown:.1f} px"
                    )
    finally:
        browser.set_window_size(1280, 1500)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with (ARTIFACTS / "figure_legibility_phone.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            [
                "page",
                "image",
                "viewport_width",
                "png_width",
                "shown_width",
                "scale",
                "smallest_text_png_px",
                "smallest_text_shown_px",
            ]
        )
        writer.writerows(rows)
    assert len(rows) >= 20, f"only {len(rows)} figures found on the chapter pages"
    assert not problems, "\n".join(problems)


def test_clicking_a_figure_opens_it_at_full_size_in_a_new_tab(site, browser):
    # On a phone, where the page shrinks every figure (at 1280 px the figures now fit the column).
    browser.set_window_size(PHONE_WIDTH, 844)
    page = next(page for page in CHAPTER_PAGES if "03_" in page)
    _load(browser, (site / page).as_uri())
    browser.execute_async_script(LOAD_EVERY_FIGURE)
    figures = browser.execute_script(FIGURES_ON_PAGE)
    widest = max(figures, key=lambda figure: figure["naturalWidth"])
    assert widest["shownWidth"] < widest["naturalWidth"], "pick a figure that the page shrinks"
    tabs = set(browser.window_handles)
    image = browser.find_element("css selector", f'a.figure-full-size img[src$="{Path(_local(widest["src"])).name}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", image)
    image.click()
    deadline = time.time() + 10
    while set(browser.window_handles) == tabs and time.time() < deadline:
        time.sleep(0.1)
    new = set(browser.window_handles) - tabs
    assert new, "clicking the figure opened no new tab"
    original = browser.current_window_handle
    browser.switch_to.window(new.pop())
    try:
        size = browser.execute_script(
            "const i = document.querySelector('img'); return i && [i.naturalWidth, location.href]"
        )
        assert size and size[0] == widest["naturalWidth"] and _local(size[1]) == _local(widest["src"]), size
    finally:
        browser.close()
        browser.switch_to.window(original)
        browser.set_window_size(1280, 1500)


SEARCH_BOXES = """
const shown = (e) => {
  const r = e.getBoundingClientRect();
  return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== "hidden";
};
return {
  fields: Array.from(document.querySelectorAll(".search-button-field, input[type=search]")).filter(shown).length,
  fieldsInDocument: Array.from(document.querySelectorAll(".search-button-field")).filter((e) => getComputedStyle(e).display !== "none" && !e.closest("#pst-header")).length,
  buttons: Array.from(document.querySelectorAll("button.search-button")).filter(shown).length,
  header: (() => { const h = document.querySelector("#pst-header"); return h ? h.getBoundingClientRect().height : 0; })(),
};
"""


@pytest.mark.parametrize("width", [1280, 390])
def test_one_search_box(site, browser, width):
    browser.set_window_size(width, 900)
    try:
        _load(browser, (site / CHAPTER_PAGES[0]).as_uri())
        browser.execute_script(
            "document.querySelector('.bd-sidebar-primary .sidebar-primary-items__start, .bd-sidebar-primary')?.scrollTo(0, 0)"
        )
        report = browser.execute_script(SEARCH_BOXES)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / f"site_search_{width}px.png"))
        if width >= 992:
            # No header bar holding a second field; the sidebar's field is the one.
            assert report["header"] == 0, report
            assert report["fields"] == 1, report
        else:
            # Phones: the magnifier in the article header opens the search.
            assert report["fields"] == 0 and report["buttons"] == 1, report
    finally:
        browser.set_window_size(1280, 1500)
