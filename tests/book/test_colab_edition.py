"""The Colab edition (tools/notebooks/colab_edition.py): the notebooks Colab opens read as the website does.

Colab, JupyterLab without jupyterlab-myst, Notebook 7 and VS Code render markdown cells as
CommonMark with HTML; only the website renders MyST. Every notebook that Colab opens (the
chapters' badges open ``notebooks/colab/``, "Do the exercises in Colab" opens
``notebooks/exercises/``) is rendered here with markdown-it-py in CommonMark mode, and must
show no MyST role or directive, every quiz answer folded in ``<details>``, and only absolute
links and images. The committed Colab edition must be what the tool writes from today's chapters.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest
from markdown_it import MarkdownIt

from tests.helpers import ROOT, tool

colab = tool("colab_edition")  # tools/notebooks/colab_edition.py
generate = tool("generate_exercises")

CHAPTERS = colab.chapters(ROOT / "notebooks")
OPENED_BY_COLAB = sorted((ROOT / "notebooks" / "colab").glob("[0-9][0-9]_*.ipynb")) + sorted(
    (ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb")
)
BOOK = colab.Book(
    site="https://example.org/book/",
    raw="https://raw.example.org/o/r/main/",
    citations={
        "vaswani2017attention": ("Vaswani et al.", "2017"),
        "martins2016softmax": ("Martins and Astudillo", "2016"),
    },
    terms={"query": "term-query", "contextual embedding": "term-contextual-embedding"},
)
RAW_ROLE = re.compile(r"\{[a-z][\w:-]*\}(<code>|`)")
RAW_DIRECTIVE = re.compile(r'class="language-\{|^\s*(```+|:::+)\s*\{', re.M)


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _commonmark(source: str) -> tuple[str, list]:
    """The HTML that a CommonMark front end makes of a markdown cell, and markdown-it's tokens."""
    parser = MarkdownIt("commonmark")
    tokens = parser.parse(source)
    return parser.renderer.render(tokens, parser.options, {}), tokens


class _Targets(HTMLParser):
    """Every href and src in a piece of HTML, and <details> blocks with their summaries."""

    def __init__(self):
        super().__init__()
        self.targets: list[str] = []
        self.summaries: list[str] = []
        self._in_summary = False
        self.depth = 0
        self.max_depth = 0

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.targets.append(value)
        if tag == "details":
            self.depth += 1
            self.max_depth = max(self.max_depth, self.depth)
        if tag == "summary":
            self._in_summary = True
            self.summaries.append("")

    def handle_endtag(self, tag):
        if tag == "details":
            self.depth -= 1
        if tag == "summary":
            self._in_summary = False

    def handle_data(self, data):
        if self._in_summary:
            self.summaries[-1] += data


def _problems_of_rendered(html: str) -> list[str]:
    problems = []
    if RAW_ROLE.search(html):
        problems.append(f"a MyST role is shown raw: {RAW_ROLE.search(html).group(0)!r}")
    if RAW_DIRECTIVE.search(html):
        problems.append("a MyST directive is shown as a code block")
    targets = _Targets()
    targets.feed(html)
    for target in targets.targets:
        if not re.match(r"^(https?://|#|mailto:)", target):
            problems.append(f"a link or image that is not absolute: {target!r}")
    return problems


def _dropdowns(notebook) -> int:
    return sum(
        len(re.findall(r"^`{3,}\{dropdown\}", cell.source, re.M))
        for cell in notebook.cells
        if cell.cell_type == "markdown"
    )


# ---------------------------------------------------------------------------------
# The notebooks Colab opens


def test_colab_opens_every_chapter_and_its_exercises_in_the_portable_form():
    names = [chapter.name for chapter in CHAPTERS]
    assert [path.name for path in (ROOT / "notebooks" / "colab").glob("[0-9][0-9]_*.ipynb")] and sorted(
        path.name for path in (ROOT / "notebooks" / "colab").glob("[0-9][0-9]_*.ipynb")
    ) == names, "run `make exercises`"
    assert sorted(path.name for path in (ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb")) == names
    url, branch = tool("sync_headers").repository()
    owner_repo = url.removeprefix("https://github.com/")
    for chapter in CHAPTERS:
        header = nbformat.read(chapter, as_version=4).cells[0].source
        colab_edition = (
            f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/notebooks/colab/{chapter.name}"
        )
        exercises = (
            f"https://colab.research.google.com/github/{owner_repo}/blob/{branch}/notebooks/exercises/{chapter.name}"
        )
        assert f"]({colab_edition})" in header, f"{_rel(chapter)}: the Colab badge does not open the Colab edition"
        assert f"[Do the exercises in Colab]({exercises})" in header


@pytest.mark.parametrize("path", OPENED_BY_COLAB, ids=_rel)
def test_a_commonmark_front_end_shows_no_myst_folds_every_answer_and_links_absolutely(path):
    notebook = nbformat.read(path, as_version=4)
    chapter = nbformat.read(ROOT / "notebooks" / path.name, as_version=4)
    problems = []
    answers = 0
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "markdown":
            continue
        html, _ = _commonmark(cell.source)
        problems += [f"cell {index}: {problem}" for problem in _problems_of_rendered(html)]
        targets = _Targets()
        targets.feed(html)
        if targets.depth != 0:
            problems.append(f"cell {index}: a <details> block is not closed")
        answers += sum(1 for summary in targets.summaries if summary.strip() == "Answer")
        # the answer's text is inside the fold: nothing of it between </summary> and <details>
        for block in re.findall(r"<details>(.*?)</details>", html, re.S):
            if "<summary>" not in block:
                problems.append(f"cell {index}: a <details> block without a summary")
    expected = _dropdowns(chapter)
    if answers != expected:
        problems.append(f"{expected} answers in the chapter, {answers} folded under 'Answer' here")
    assert expected >= 5, f"{path.name}: the chapter has {expected} quiz answers"
    assert not problems, f"{_rel(path)}:\n" + "\n".join(problems)


def test_the_committed_colab_edition_is_what_the_tool_writes_from_the_chapters():
    outputs, problems = colab.expected_outputs(ROOT / "notebooks", ROOT / "notebooks" / "colab")
    assert not problems, problems
    stale = [
        _rel(path) for path, text in outputs.items() if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, (
        f"out of date: {stale}; run `make exercises` (python tools/notebooks/colab_edition.py notebooks notebooks/colab)"
    )


def test_every_glossary_term_and_citation_of_the_chapters_is_known():
    where = colab.book()
    for chapter in CHAPTERS:
        for cell in nbformat.read(chapter, as_version=4).cells:
            if cell.cell_type == "markdown":
                colab.portable_markdown(cell.source, "notebooks", where)  # raises on an unknown key or term


def test_glossary_anchors_match_the_built_site(site):
    """The anchors the tool computes are the ids Sphinx gave the glossary's terms."""
    ids = set(re.findall(r'id="(term-[^"]+)"', (site / "book" / "glossary.html").read_text(encoding="utf-8")))
    computed = set(colab.book().terms.values())
    assert computed and computed == ids, (
        f"missing on the site: {sorted(computed - ids)}; not computed: {sorted(ids - computed)}"
    )


# ---------------------------------------------------------------------------------
# The conversion on small pieces of MyST


def test_a_dropdown_becomes_a_folded_details_block_whose_markdown_still_renders():
    source = "**1.** Why?\n\n```{dropdown} Answer\nBecause $x$ is **bold** and `code`.\n\n- a list\n```\nAfter."
    converted = colab.portable_markdown(source, "notebooks", BOOK)
    assert "<details><summary>Answer</summary>\n\nBecause" in converted
    html, _ = _commonmark(converted)
    assert "<strong>bold</strong>" in html and "<li>a list</li>" in html
    assert html.index("<details>") < html.index("Because") < html.index("</details>") < html.index("After.")


def test_an_admonition_becomes_a_quoted_block_with_its_title():
    converted = colab.portable_markdown("```{note}\n**Rows or columns?** Rows.\n```", "notebooks", BOOK)
    assert converted == "> **Note.**\n>\n> **Rows or columns?** Rows."
    titled = colab.portable_markdown("```{admonition} Why it matters\nText.\n```", "notebooks", BOOK)
    assert titled.startswith("> **Why it matters.**")
    html, _ = _commonmark(titled)
    assert "<blockquote>" in html


def test_citations_read_as_on_the_website_and_link_to_the_references_page():
    one = colab.portable_markdown("as shown {cite}`vaswani2017attention`.", "notebooks", BOOK)
    assert one == "as shown ([Vaswani et al., 2017](https://example.org/book/book/references.html))."
    two = colab.portable_markdown("{cite}`vaswani2017attention,martins2016softmax`", "notebooks", BOOK)
    assert two == "([Vaswani et al., 2017; Martins and Astudillo, 2016](https://example.org/book/book/references.html))"
    textual = colab.portable_markdown("{cite:t}`martins2016softmax` showed", "notebooks", BOOK)
    assert textual == "[Martins and Astudillo (2016)](https://example.org/book/book/references.html) showed"
    with pytest.raises(colab.PortableError, match="nobody2020"):
        colab.portable_markdown("{cite}`nobody2020`", "notebooks", BOOK)


def test_terms_are_bold_links_to_the_glossary_once_bold_and_roles_in_code_stay():
    assert (
        colab.portable_markdown("a {term}`query`", "notebooks", BOOK)
        == "a [**query**](https://example.org/book/book/glossary.html#term-query)"
    )
    assert (
        colab.portable_markdown("**{term}`query`**", "notebooks", BOOK)
        == "**[query](https://example.org/book/book/glossary.html#term-query)**"
    )
    targeted = colab.portable_markdown("{term}`Contextual embeddings <contextual embedding>`", "notebooks", BOOK)
    assert (
        targeted == "[**Contextual embeddings**](https://example.org/book/book/glossary.html#term-contextual-embedding)"
    )
    shown = "write `` {term}`query` `` to link"
    assert colab.portable_markdown(shown, "notebooks", BOOK) == shown
    with pytest.raises(colab.PortableError, match="glossary"):
        colab.portable_markdown("{term}`nothing`", "notebooks", BOOK)
    with pytest.raises(colab.PortableError, match="numref"):
        colab.portable_markdown("{numref}`fig-x`", "notebooks", BOOK)


def test_links_and_images_become_absolute_and_code_blocks_stay_as_written():
    source = (
        "[![Open In Colab](../img/colab-badge.svg)](https://colab.research.google.com/x)\n"
        "See the [glossary](../book/glossary.md#term-query) and [chapter 2](02_key_value_store.ipynb).\n"
        "```python\nx = {cite}`not a role in code`\n```"
    )
    converted = colab.portable_markdown(source, "notebooks", BOOK)
    assert (
        "[![Open In Colab](https://raw.example.org/o/r/main/img/colab-badge.svg)](https://colab.research.google.com/x)"
        in converted
    )
    assert "(https://example.org/book/book/glossary.html#term-query)" in converted
    assert "(https://example.org/book/notebooks/02_key_value_store.html)" in converted
    assert "x = {cite}`not a role in code`" in converted
    from_exercises = colab.portable_markdown("![b](../../img/colab-badge.svg)", "notebooks/exercises", BOOK)
    assert from_exercises == "![b](https://raw.example.org/o/r/main/img/colab-badge.svg)"


def test_the_command_line_writes_checks_and_removes_orphans(tmp_path, capsys):
    (tmp_path / "pyproject.toml").write_text("")
    source, target = tmp_path / "notebooks", tmp_path / "notebooks" / "colab"
    source.mkdir()
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("Q?\n\n```{dropdown} Answer\nA.\n```"),
        nbformat.v4.new_code_cell("x = 1"),
    ]
    nbformat.write(notebook, source / "03_x.ipynb")
    arguments = [str(source), str(target)]
    assert colab.main(["--check", *arguments]) == 1
    assert "03_x.ipynb: missing" in capsys.readouterr().out
    assert colab.main(arguments) == 0
    written = (target / "03_x.ipynb").read_text()
    assert "<details><summary>Answer</summary>" in written and "{dropdown}" not in written
    assert colab.main(["--check", *arguments]) == 0
    nbformat.write(notebook, target / "04_gone.ipynb")
    assert colab.main(["--check", *arguments]) == 1
    assert "its chapter no longer exists" in capsys.readouterr().out
    assert colab.main(arguments) == 0 and not (target / "04_gone.ipynb").exists()
