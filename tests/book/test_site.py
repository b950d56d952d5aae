"""The website: it builds from a clean tree, works offline, and renders in a real browser.

The session-scoped fixture `site` (tests/book/conftest.py) builds the site once with tools/site/build_book.py (what
`make book` runs) into _build/, executing the chapters under the second numerical configuration
(``--other-machine``: nbval runs them natively); the chapters' execution cache in
_build/.jupyter_cache is kept, so a second run only re-executes chapters that changed. Every other site test
reads that build. Artifacts (build log, link-check report, screenshots) go to
tests/artifacts/.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
import yaml
from bs4 import BeautifulSoup

from tests.book.site_support import (
    ARTIFACTS,
    _check_page,
    _load,
    _pages,
)
from tests.helpers import ROOT, tool

build_book = tool("build_book")  # tools/site/build_book.py

CHAPTERS = [
    "notebooks/01_attention_math",
    "notebooks/02_key_value_store",
    "notebooks/03_soft_vs_hard",
    "notebooks/04_multi_head",
    "notebooks/05_positional_encoding",
    "notebooks/06_encoder_decoder",
    "notebooks/07_transfer_learning",
]
PARTS = {"Foundations": CHAPTERS[0:3], "Building blocks": CHAPTERS[3:5], "Models": CHAPTERS[5:7]}
BOOK_PAGES = [
    "book/intro",
    "book/setup",
    "book/exercises",
    "book/notation",
    "book/glossary",
    "book/references",
    "book/credits",
]


def _toc_files(toc: dict) -> list[str]:
    files = [toc["root"]]

    def walk(entries):
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []) + entry.get("chapters", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return files


def first_chapter() -> Path:
    """The first chapter notebook that exists: the browser and Colab-like tests use it."""
    chapters = sorted((ROOT / "notebooks").glob("0*.ipynb"))
    if not chapters:
        pytest.fail("no chapter notebook exists yet (notebooks/0*.ipynb): the site and Colab tests need one")
    return chapters[0]


# ---------------------------------------------------------------------------------------
# Table of contents (no build needed)


def test_toc_lists_the_seven_chapters_in_order_in_their_parts():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = _toc_files(toc)
    assert [f for f in files if f.startswith("notebooks/")] == CHAPTERS
    parts = {part.get("caption"): [entry["file"] for entry in part["chapters"]] for part in toc["parts"]}
    for caption, chapters in PARTS.items():
        assert parts.get(caption) == chapters, f"part {caption!r} should list {chapters}, lists {parts.get(caption)}"


def test_toc_lists_every_book_page_with_the_introduction_as_root():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    assert toc["root"] == "book/intro"
    assert set(BOOK_PAGES) <= set(_toc_files(toc))
    for page in BOOK_PAGES:
        assert (ROOT / f"{page}.md").is_file(), f"{page}.md is listed in _toc.yml but missing"


def test_effective_toc_leaves_out_only_chapters_that_do_not_exist():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    effective, skipped = build_book.effective_toc(toc)
    existing = [c for c in CHAPTERS if (ROOT / f"{c}.ipynb").exists()]
    assert [f for f in _toc_files(effective) if f.startswith("notebooks/")] == existing
    assert sorted(skipped) == sorted(set(CHAPTERS) - set(existing))


def test_vendored_javascript_is_not_under_a_static_folder():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    sphinx = config["sphinx"]["config"]
    assert all("_static" not in Path(path).parts for path in sphinx["html_static_path"])
    assert not (ROOT / "_static").exists(), "jupyter-book injects every .js/.css under _static/ into every page"
    assert "://" not in sphinx["mathjax_path"]
    assert all("://" not in path for path in sphinx["nb_ipywidgets_js"])


def test_npm_assets_are_pinned_in_package_json_and_the_lock_file():
    package = json.loads((ROOT / "package.json").read_text())
    lock = json.loads((ROOT / "package-lock.json").read_text())
    for name in ("mathjax", "requirejs", "@jupyter-widgets/html-manager", "onnxruntime-web"):
        version = package["dependencies"][name]
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} must be pinned exactly, got {version!r}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version
    assert package["dependencies"]["mathjax"].startswith("3.")
    assert package["dependencies"]["@jupyter-widgets/html-manager"].startswith("1."), (
        "ipywidgets 8 needs html-manager 1.x"
    )


# ---------------------------------------------------------------------------------------
# The build


def test_site_builds_with_a_page_for_every_existing_chapter_and_book_page(site):
    assert (site / "index.html").is_file()
    for page in BOOK_PAGES + [c for c in CHAPTERS if (ROOT / f"{c}.ipynb").exists()]:
        assert (site / f"{page}.html").is_file(), f"no page for {page}"
    assert not list(site.rglob("notebooks/exercises/*.html")), "student notebooks must not be on the site"


# The site's size (issue 46). What opening its pages can fetch (the pages, their sources, images and the
# scripts every page or a first typed input loads: MathJax, the widget manager, onnxruntime-web) must stay
# under SITE_MEGABYTES; the models in _static/page-models/, which no page loads unless a reader types a
# sentence of their own (chapter 7's MiniLM), are counted apart, under PAGE_MODEL_MEGABYTES, and no page may
# link them. No page may weigh more than PAGE_MEGABYTES: a model is never saved inside one.
SITE_MEGABYTES = 60
PAGE_MODEL_MEGABYTES = 35
PAGE_MEGABYTES = 2.5


def site_sizes(site: Path) -> tuple[int, int, dict[str, int]]:
    """(bytes of the site without its page models, bytes of its page models, bytes of each HTML page)."""
    models = site / "_static" / build_book.PAGE_MODELS
    files = [path for path in site.rglob("*") if path.is_file()]
    on_demand = sum(path.stat().st_size for path in files if models in path.parents)
    rest = sum(path.stat().st_size for path in files if models not in path.parents)
    pages = {str(path.relative_to(site)): path.stat().st_size for path in files if path.suffix == ".html"}
    return rest, on_demand, pages


def test_the_site_keeps_its_size_and_loads_its_large_models_only_when_a_reader_types(site):
    rest, on_demand, pages = site_sizes(site)
    print(f"\nsite: {rest / 1e6:.1f} MB, and {on_demand / 1e6:.1f} MB of models loaded on demand")
    assert rest <= SITE_MEGABYTES * 1e6, f"the site weighs {rest / 1e6:.1f} MB without its page models"
    assert 0 < on_demand <= PAGE_MODEL_MEGABYTES * 1e6, f"the page models weigh {on_demand / 1e6:.1f} MB"
    heavy = {page: size for page, size in pages.items() if size > PAGE_MEGABYTES * 1e6}
    assert not heavy, f"pages over {PAGE_MEGABYTES} MB: {heavy}"
    linked = re.compile(
        rf"""<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)\s*=\s*["'][^"']*{build_book.PAGE_MODELS}/"""
    )
    loading = [page for page in _pages(site) if linked.search(page.read_text(encoding="utf-8"))]
    assert not loading, f"pages that load a page model with the page itself: {loading}"


REMOTE = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
CSS_REMOTE = re.compile(r"""(?:@import\s+(?:url\()?|url\()\s*['"]?\s*((?:https?:)?//[^'")\s]+)""", re.I)


def _remote(url: str | None) -> bool:
    return bool(url) and bool(REMOTE.match(url.strip())) and not url.strip().startswith("file:")


def test_no_page_loads_a_script_stylesheet_font_or_image_from_the_network(site):
    problems: list[str] = []
    stylesheets: set[Path] = set()
    for page in _pages(site):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        name = page.relative_to(site)
        for tag in soup.find_all("script", src=True):
            if _remote(tag["src"]):
                problems.append(f"{name}: script {tag['src']}")
        for tag in soup.find_all("link", href=True):
            rel = {r.lower() for r in tag.get("rel", [])}
            if rel & {"stylesheet", "preload", "modulepreload", "prefetch", "icon", "shortcut"} and _remote(
                tag["href"]
            ):
                problems.append(f"{name}: <link rel={' '.join(rel)}> {tag['href']}")
            elif "stylesheet" in rel:
                stylesheets.add((page.parent / tag["href"].split("?")[0]).resolve())
        for tag in soup.find_all(["img", "source", "iframe", "embed", "object"]):
            for attribute in ("src", "data", "srcset"):
                if _remote(tag.get(attribute)):
                    problems.append(f"{name}: <{tag.name}> {tag[attribute]}")
        for tag in soup.find_all("style"):
            problems += [f"{name}: <style> {url}" for url in CSS_REMOTE.findall(tag.get_text())]
        for tag in soup.find_all(style=True):
            problems += [f"{name}: style attribute {url}" for url in CSS_REMOTE.findall(tag["style"])]
    checked: set[Path] = set()
    while stylesheets:
        sheet = stylesheets.pop()
        if sheet in checked or not sheet.is_file():
            continue
        checked.add(sheet)
        text = re.sub(r"/\*.*?\*/", "", sheet.read_text(encoding="utf-8", errors="replace"), flags=re.S)
        problems += [f"{sheet.relative_to(site)}: {url}" for url in CSS_REMOTE.findall(text)]
        for local in re.findall(r"""@import\s+(?:url\()?\s*['"]([^'"]+\.css)""", text):
            stylesheets.add((sheet.parent / local).resolve())
    assert checked, "found no stylesheets to check"
    assert not problems, "pages load from the network:\n" + "\n".join(sorted(set(problems)))


def test_math_and_widgets_use_the_copies_served_by_the_site(site):
    pages_with_math = 0
    for page in _pages(site):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        sources = [tag["src"].split("?")[0] for tag in soup.find_all("script", src=True)]
        if soup.select(".math"):
            pages_with_math += 1
            assert any(src.endswith("_static/mathjax/tex-mml-chtml.js") for src in sources), page
        if soup.find("script", type="application/vnd.jupyter.widget-state+json"):
            for needed in ("_static/widgets_offline.js", "_static/require.js", "_static/html-manager/embed-amd.js"):
                assert any(src.endswith(needed) for src in sources), f"{page} lacks {needed}"
        for src in sources:
            assert (page.parent / src).resolve().is_file(), f"{page}: {src} does not exist"
    assert pages_with_math >= 1
    assert (site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


# Widget models a reader would operate; a view containing one is a "widget cell" that must
# also leave a figure. Display-only widgets (a finished tqdm bar: HBox, FloatProgress, HTML)
# render fine from their saved state.
INTERACTIVE_MODEL = re.compile(
    r"Slider|Dropdown|Text|Button|Checkbox|Toggle|Select|Radio|Combobox|Play|Picker|Tab|Accordion|Upload"
)


def _models_under(model_id: str, state: dict) -> set[str]:
    """Model names reachable from a widget model through its IPY_MODEL_ references."""
    seen: set[str] = set()
    names: set[str] = set()
    stack = [model_id]
    while stack:
        current = stack.pop()
        if current in seen or current not in state:
            continue
        seen.add(current)
        names.add(state[current]["model_name"])
        stack += re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[current]["state"]))
    return names


def test_no_chapter_shows_an_empty_widget_box(site):
    """A widget on a static page shows only its saved state: any widget view left on a page
    must have its state saved with it, and an interactive widget's cell must also leave a
    figure (attention_book's widgets put a PNG in their output, which the site shows)."""
    problems = []
    for page in sorted((site / "notebooks").glob("*.html")):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        state_tag = soup.find("script", type="application/vnd.jupyter.widget-state+json")
        state = json.loads(state_tag.string)["state"] if state_tag else {}
        for cell in soup.select("div.cell"):
            source = cell.select_one(".cell_input pre")
            snippet = repr(source.get_text()[:60].strip()) if source else "?"
            interactive = False
            for view in cell.find_all("script", type="application/vnd.jupyter.widget-view+json"):
                model = json.loads(view.string)["model_id"]
                if model not in state:
                    problems.append(f"{page.name}: cell {snippet}: widget {model} has no saved state (an empty box)")
                interactive |= any(INTERACTIVE_MODEL.search(name) for name in _models_under(model, state))
            if interactive and not cell.select(".cell_output img, .cell_output svg"):
                problems.append(f"{page.name}: cell {snippet} shows an interactive widget but no static figure")
    assert not problems, "\n".join(problems)


@contextlib.contextmanager
def _served(folder: Path):
    """``folder`` over HTTP on 127.0.0.1 (a free port) while the block runs; yields the base URL.

    LinkChecker, run as root, drops its privileges to the user nobody, who cannot read a
    checkout inside a private (0700) home folder, so it reached one page of the site
    there. Served by this (the test's) process, the files need no permission of nobody's.
    """

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _link_check(folder: Path, tmp_path: Path, report: Path) -> tuple[list[dict], list[str], set[str]]:
    """LinkChecker over HTTP from folder/index.html: (rows, broken links, local pages reached)."""
    linkchecker = shutil.which("linkchecker", path=str(Path(sys.executable).parent)) or shutil.which("linkchecker")
    assert linkchecker, "linkchecker is not installed (it is in the book extra)"
    config = tmp_path / "linkcheckerrc"
    config.write_text("[checking]\nthreads=2\n[filtering]\ncheckextern=0\n")
    with _served(folder) as base, report.open("w") as handle:
        subprocess.run(
            [linkchecker, "--config", str(config), "--no-status", "--verbose", "--output", "csv", base + "index.html"],
            stdout=handle,
            stderr=subprocess.PIPE,
            check=False,
            timeout=600,
        )
    rows = list(csv.DictReader((line for line in report.open() if not line.startswith("#")), delimiter=";"))
    broken = [
        f"{row['urlname']} (in {row['parentname']}): {row['result'] or row['warningstring']}"
        for row in rows
        if row["valid"] != "True"
    ]
    local = [row for row in rows if row["url"].startswith(base)]
    pages = {row["url"] for row in local if row["url"].endswith(".html") and row["valid"] == "True"}
    return rows, broken, pages


def test_every_internal_link_and_image_resolves(site, tmp_path):
    """LinkChecker crawls the site from index.html; external links are only syntax-checked.

    Its AnchorCheck plugin would also check #fragments, but it re-reads a page for every
    fragment and took about 140 s of the test run; the next test checks them instead.
    """
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = ARTIFACTS / "linkcheck.csv"
    rows, broken, pages = _link_check(site, tmp_path, report)
    print(f"linkchecker: {len(rows)} links checked, {len(pages)} pages")
    assert len(pages) >= len(BOOK_PAGES), f"linkchecker reached only {len(pages)} pages"
    assert not broken, f"{len(broken)} broken links (report: {report}):\n" + "\n".join(broken)


def test_the_link_check_works_in_a_private_folder_and_finds_a_broken_link(tmp_path):
    """The same check on a two-page site in a 0700 folder (as a clone in root's home): it
    reaches both pages and reports exactly the one broken link."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "index.html").write_text(
        '<html><body><a href="second.html">next</a> <a href="missing.html">gone</a></body></html>'
    )
    (private / "second.html").write_text('<html><body><a href="index.html">back</a></body></html>')
    rows, broken, pages = _link_check(private, tmp_path, tmp_path / "report.csv")
    assert {page.rsplit("/", 1)[-1] for page in pages} == {"index.html", "second.html"}, rows
    assert len(broken) == 1 and "missing.html" in broken[0], broken


def page_anchors(soup) -> set[str]:
    """The fragments a page can be linked to: every id, and the name of every <a name=...>."""
    return {tag["id"] for tag in soup.find_all(id=True)} | {
        tag["name"] for tag in soup.find_all("a", attrs={"name": True})
    }


def broken_fragments(pages: dict[Path, object]) -> list[str]:
    """Links ``page.html#fragment`` (to a page of the site, or ``#fragment`` on the same page) whose
    target has no element with that id. ``pages`` maps each page's path to its parsed soup."""
    anchors = {path.resolve(): page_anchors(soup) for path, soup in pages.items()}
    problems = []
    for path, soup in pages.items():
        for link in soup.find_all("a", href=True):
            href = link["href"].strip()
            if "#" not in href or _remote(href) or href.startswith(("mailto:", "javascript:")):
                continue
            target, fragment = href.split("#", 1)
            fragment = urllib.parse.unquote(fragment)
            if not fragment:
                continue
            target_path = (path.parent / urllib.parse.unquote(target)).resolve() if target else path.resolve()
            if target_path.suffix != ".html":
                continue
            if target_path not in anchors:
                problems.append(f"{path.name}: link {href!r} goes to a page that is not on the site")
            elif fragment not in anchors[target_path]:
                problems.append(f"{path.name}: link {href!r}: {target_path.name} has no element with id {fragment!r}")
    return problems


def test_every_internal_anchor_resolves(site):
    pages = {page: BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser") for page in _pages(site)}
    checked = sum(
        1
        for soup in pages.values()
        for link in soup.find_all("a", href=True)
        if "#" in link["href"] and not _remote(link["href"])
    )
    assert checked > 50, f"only {checked} links with a #fragment were found: the check would prove little"
    problems = broken_fragments(pages)
    assert not problems, f"{len(problems)} links to a missing anchor:\n" + "\n".join(problems[:40])


def test_the_anchor_check_finds_a_missing_anchor(tmp_path):
    (tmp_path / "a.html").write_text(
        '<p id="top"><a href="b.html#here">ok</a> <a href="b.html#gone">bad</a> <a href="#top">self</a></p>'
    )
    (tmp_path / "b.html").write_text('<h1 id="here">B</h1><a href="#nowhere">bad</a> <a href="c.html#x">no page</a>')
    pages = {path: BeautifulSoup(path.read_text(), "html.parser") for path in sorted(tmp_path.glob("*.html"))}
    problems = broken_fragments(pages)
    assert len(problems) == 3, problems
    assert any("'b.html#gone'" in p for p in problems) and any("'#nowhere'" in p for p in problems)
    assert any("not on the site" in p for p in problems)


# ---------------------------------------------------------------------------------------
# A real browser, offline


def test_index_renders_offline_in_chromium(site, browser):
    report = _check_page(browser, (site / "index.html").as_uri(), expect_figure=False)
    assert browser.current_url.endswith("book/intro.html")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "site_index.png"))
    print(f"index: {report['mjxContainers']} formulas typeset")


def test_a_chapter_renders_offline_in_chromium_with_maths_figures_and_widgets(site, browser):
    chapter = first_chapter()
    page = site / "notebooks" / f"{chapter.stem}.html"
    assert page.is_file(), f"{chapter.name} was not built into {page}"
    report = _check_page(browser, page.as_uri(), expect_figure=True)
    browser.save_screenshot(str(ARTIFACTS / "site_chapter.png"))
    from selenium.webdriver.common.by import By

    figure = browser.find_elements(By.CSS_SELECTOR, "article .cell_output img")
    if figure:
        browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", figure[0])
        time.sleep(0.3)
        browser.save_screenshot(str(ARTIFACTS / "site_chapter_figure.png"))
    print(
        f"{chapter.stem}: {report['mjxContainers']} formulas, {report['outputFigures']} figures, "
        f"{report['renderedWidgets']} widget elements"
    )


SCAFFOLDING_WORDS = re.compile(r"NBVAL|BEGIN SOLUTION|END SOLUTION")


def test_chapter_pages_show_no_test_scaffolding(site):
    """nbval's markers and the solution markers stay in the notebooks (nbval and the exercise
    generator read them) but not on the chapter pages a reader sees (tools/site/sphinx_offline.py).
    book/exercises.html is exempt: it explains those markers to students and instructors."""
    found = []
    for page in sorted((site / "notebooks").glob("*.html")):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for tag in soup(["script", "style"]):
            tag.decompose()
        article = soup.find("article") or soup
        found += [f"{page.name}: {match}" for match in SCAFFOLDING_WORDS.findall(article.get_text())]
    assert not found, "scaffolding shown on the site:\n" + "\n".join(found)
    assert not SCAFFOLDING_WORDS.search("x = 1\ncheck('1.1', f)")  # the pattern itself can match only markers


def _visible(driver, selector: str) -> list:
    from selenium.webdriver.common.by import By

    return [element for element in driver.find_elements(By.CSS_SELECTOR, selector) if element.is_displayed()]


def test_sidebar_toggles_work_on_a_phone_and_on_a_desktop(site, browser):
    """At 390 px the chapter drawer and the contents drawer open and a link in the drawer works;
    at 1280 px the toggle collapses the sidebar and brings it back (tools/site/sidebar_toggles.js)."""
    from selenium.webdriver.common.by import By

    page = (site / "notebooks" / f"{first_chapter().stem}.html").as_uri()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        browser.set_window_size(390, 844)
        _load(browser, page)
        toggles = _visible(browser, ".primary-toggle")
        assert len(toggles) == 1, f"{len(toggles)} visible chapter toggles at 390 px"
        toggles[0].click()
        time.sleep(0.5)
        drawer = browser.find_element(By.ID, "pst-primary-sidebar-modal")
        assert drawer.get_attribute("open") is not None, "the chapter drawer did not open at 390 px"
        browser.save_screenshot(str(ARTIFACTS / "site_phone_chapters.png"))
        links = [link for link in drawer.find_elements(By.CSS_SELECTOR, "a.reference.internal") if link.is_displayed()]
        target = next(
            link
            for link in links
            if "notebooks/" in (link.get_attribute("href") or "") and link.get_attribute("href") != browser.current_url
        )
        href = target.get_attribute("href").split("#")[0]
        target.click()
        deadline = time.monotonic() + 10
        while browser.current_url.split("#")[0] != href and time.monotonic() < deadline:
            time.sleep(0.1)
        assert browser.current_url.split("#")[0] == href, "following a link in the drawer did not open its page"

        _load(browser, page)
        contents = _visible(browser, ".secondary-toggle")
        assert contents, "no visible page-contents toggle at 390 px"
        contents[0].click()
        time.sleep(0.5)
        assert browser.find_element(By.ID, "pst-secondary-sidebar-modal").get_attribute("open") is not None, (
            "the page-contents drawer did not open at 390 px"
        )
        browser.save_screenshot(str(ARTIFACTS / "site_phone_contents.png"))

        browser.set_window_size(1280, 1500)
        _load(browser, page)
        sidebar = browser.find_element(By.ID, "pst-primary-sidebar")
        assert sidebar.is_displayed()
        _visible(browser, ".primary-toggle")[0].click()
        time.sleep(0.5)
        assert not sidebar.is_displayed(), "at 1280 px the toggle did not collapse the sidebar"
        browser.save_screenshot(str(ARTIFACTS / "site_desktop_collapsed.png"))
        _visible(browser, ".primary-toggle")[0].click()
        time.sleep(0.5)
        assert sidebar.is_displayed(), "at 1280 px the toggle did not bring the sidebar back"
    finally:
        browser.set_window_size(1280, 1500)


def test_the_site_s_chapters_ran_as_on_another_machine(site):
    """The build that every site test reads executed the chapters under build_book's OTHER_MACHINE
    (the execution cache is keyed on the numerical configuration, so a cached chapter ran so too)."""
    log = (ARTIFACTS / "build.log").read_text(errors="replace")
    assert "chapters executed under the second numerical configuration" in log, log[-2000:]
    assert set(build_book.OTHER_MACHINE) <= set(build_book.NUMERICS_VARIABLES)


def test_the_execution_cache_is_kept_only_for_the_same_numerical_configuration(tmp_path, capsys):
    build = tmp_path / "_build"
    build.mkdir()
    build_book._drop_outputs_of_another_package(build, {})  # writes the stamp
    (build / ".jupyter_cache").mkdir()
    build_book._drop_outputs_of_another_package(build, {})
    assert (build / ".jupyter_cache").is_dir(), "the same package and configuration keep the cache"
    (build / ".doctrees").mkdir()
    build_book._drop_outputs_of_another_package(build, dict(build_book.OTHER_MACHINE))
    assert not (build / ".jupyter_cache").exists(), "outputs made under another configuration must not be reused"
    assert not (build / ".doctrees").exists(), "Sphinx must read (and so execute) every chapter again"
    assert "executing every chapter again" in capsys.readouterr().out


def test_a_change_of_the_widgets_javascript_alone_executes_no_chapter(tmp_path, capsys, monkeypatch):
    """Only the JavaScript changed: the cache stays, its chapters get the current module (as make widgets
    writes it into the saved chapters) and Sphinx makes the pages again from them."""
    from attention_book.widgets._base import widget_module_source

    build = tmp_path / "_build"
    executed = build / ".jupyter_cache" / "executed" / "abc"
    executed.mkdir(parents=True)
    state = {"model": {"state": {"_esm": "old module", "value": 3}}}
    notebook = {"cells": [], "metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {"state": state}}}}
    (executed / "base.ipynb").write_text(json.dumps(notebook, indent=1))
    (build / ".doctrees").mkdir()
    python, _ = build_book._fingerprints({})
    (build / ".jupyter_cache.package").write_text(f"{python}\nanother javascript\n")
    build_book._drop_outputs_of_another_package(build, {})
    assert "executing every chapter again" not in capsys.readouterr().out
    saved = json.loads((executed / "base.ipynb").read_text())
    widget = saved["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]["model"]["state"]
    assert widget == {"_esm": widget_module_source(), "value": 3}
    assert not (build / ".doctrees").exists(), "the pages must be made again from the refreshed cache"
    build_book._drop_outputs_of_another_package(build, {})  # nothing changed since: the stamp is current
    assert (build / ".jupyter_cache").is_dir()
