"""Write the Colab edition of the chapters: the same notebooks in the markdown every front end renders.

Usage (the Makefile's ``exercises`` target runs it, before the student notebooks)::

    python tools/notebooks/colab_edition.py notebooks notebooks/colab
    python tools/notebooks/colab_edition.py --check notebooks notebooks/colab

The chapters in ``notebooks/`` are written in MyST, which only the website (jupyter-book)
renders. Colab, JupyterLab without jupyterlab-myst, Notebook 7 and VS Code render CommonMark
with HTML, so for every chapter ``SRC/NN_name.ipynb`` this writes ``DST/NN_name.ipynb``, the
same notebook (code, outputs and widget state unchanged) whose markdown cells are rewritten by
:func:`portable_markdown`:

* a ``{dropdown}`` (the quiz answers) becomes ``<details><summary>Answer</summary> ... </details>``,
  folded until the reader opens it, with blank lines around its body so the markdown inside
  still renders;
* an admonition (``{note}``, ``{tip}``, ``{admonition} Title`` ...) becomes a quoted block that
  starts with its title in bold;
* ``{cite}`key``` becomes "(Vaswani et al., 2017)" and ``{cite:t}`key``` "Vaswani et al. (2017)",
  linked to the website's references page (names and years from ``book/references.bib``);
* ``{term}`text``` becomes the text in bold, linked to its entry on the website's glossary page;
* relative links and images become absolute: a file of the repository by its raw GitHub URL
  (the Colab badge's image), a page of the book by its URL on the website.

The website's address is ``html.baseurl`` in ``_config.yml``; the repository's is
``repository.url``. The header's Colab badge (written by tools/notebooks/sync_headers.py) already points at
the Colab edition. tools/notebooks/generate_exercises.py applies the same conversion to the student
notebooks, which Colab opens too.

The output is deterministic, so a test compares the committed notebooks with freshly generated
ones (tests/book/test_colab_edition.py). ``--check`` writes nothing; it exits with status 1 and
names every notebook that is out of date. Notebooks in DST whose chapter no longer exists are
removed (or, with ``--check``, reported).
"""

from __future__ import annotations

import argparse
import codecs
import copy
import posixpath
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTER_PATTERN = re.compile(r"^(\d\d)_.+\.ipynb$")
COLAB_FOLDER = "notebooks/colab"

ADMONITIONS = {
    "note": "Note",
    "tip": "Tip",
    "hint": "Hint",
    "important": "Important",
    "warning": "Warning",
    "caution": "Caution",
    "attention": "Attention",
    "danger": "Danger",
    "error": "Error",
    "seealso": "See also",
}
FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,}|:{3,})\s*(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\{(?P<name>[a-zA-Z][\w:-]*)\}\s*(?P<argument>.*)$")
ROLE = re.compile(r"(?<![`\w])\{(?P<name>[a-z][\w:-]*)\}`(?P<content>[^`]+)`")
LINK = re.compile(r"(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")


class PortableError(ValueError):
    """MyST that the conversion does not know (the message names it), so the output would show it raw."""


@dataclass(frozen=True)
class Book:
    """What the conversion needs to know about the book: where things live and what cites and terms mean."""

    site: str  # the website, ending in "/"
    raw: str  # raw GitHub URL of the repository's branch, ending in "/"
    citations: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (authors, year)
    terms: dict[str, str] = field(default_factory=dict)  # lower-case glossary term -> anchor

    def references(self) -> str:
        return self.site + "book/references.html"

    def glossary(self, term: str) -> str:
        anchor = self.terms.get(term.strip().lower())
        if anchor is None:
            raise PortableError(f"{{term}}`{term}`: no such entry in book/glossary.md")
        return f"{self.site}book/glossary.html#{anchor}"


# ---------------------------------------------------------------------------------
# What the book knows: site, repository, bibliography, glossary


def _latex_to_text(text: str) -> str:
    try:
        text = codecs.decode(text, "ulatex")  # latexcodec (installed with sphinxcontrib-bibtex)
    except (LookupError, ValueError):
        pass
    return text.replace("{", "").replace("}", "").strip()


def author_label(last_names: list[str]) -> str:
    """'Vaswani et al.' for three or more authors, 'Martins and Astudillo' for two (as the website)."""
    if not last_names:
        return "Anonymous"
    if len(last_names) == 1:
        return last_names[0]
    if len(last_names) == 2:
        return f"{last_names[0]} and {last_names[1]}"
    return f"{last_names[0]} et al."


def read_bibliography(path: Path) -> dict[str, tuple[str, str]]:
    """{key: (author label, year)} of every entry in a BibTeX file."""
    from pybtex.database import parse_file  # installed with sphinxcontrib-bibtex (the book extra)

    data = parse_file(str(path), bib_format="bibtex")
    entries: dict[str, tuple[str, str]] = {}
    for key, entry in data.entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [_latex_to_text(" ".join(person.prelast_names + person.last_names)) for person in people]
        if not names and "organization" in entry.fields:
            names = [_latex_to_text(entry.fields["organization"])]
        entries[key] = (author_label(names), _latex_to_text(entry.fields.get("year", "n.d.")))
    return entries


def glossary_anchor(term: str) -> str:
    """The HTML id Sphinx gives a glossary term ('CLS token' -> 'term-CLS-token')."""
    return "term-" + re.sub(r"[^\w]+", "-", term.strip()).strip("-")


def read_glossary(path: Path) -> dict[str, str]:
    """{lower-case term: anchor} of the entries of the ``{glossary}`` directive in a MyST page."""
    terms: dict[str, str] = {}
    inside = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^`{3,}\{glossary\}", line):
            inside = True
            continue
        if inside and re.match(r"^`{3,}\s*$", line):
            break
        if inside and line.strip() and not line.startswith((" ", "\t", ":")):
            terms[line.strip().lower()] = glossary_anchor(line)
    return terms


def site_and_raw(config_path: Path) -> tuple[str, str]:
    """(website URL, raw GitHub URL of the branch), both ending in '/', from _config.yml."""
    config = yaml.safe_load(config_path.read_text(encoding="utf-8"))
    url = config["repository"]["url"].rstrip("/")
    url = url[: -len(".git")] if url.endswith(".git") else url
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    if not match:
        raise PortableError(f"repository.url in _config.yml must look like https://github.com/OWNER/REPO, got {url!r}")
    owner, name = match.groups()
    branch = config["repository"].get("branch", "main")
    site = (config.get("html") or {}).get("baseurl") or f"https://{owner}.github.io/{name}/"
    return site.rstrip("/") + "/", f"https://raw.githubusercontent.com/{owner}/{name}/{branch}/"


@cache
def book(root: Path = ROOT) -> Book:
    site, raw = site_and_raw(root / "_config.yml")
    return Book(
        site,
        raw,
        read_bibliography(root / "book" / "references.bib"),
        terms=read_glossary(root / "book" / "glossary.md"),
    )


# ---------------------------------------------------------------------------------
# Markdown


def _cite(name: str, content: str, where: Book) -> str:
    keys = [key.strip() for key in content.split(",") if key.strip()]
    unknown = [key for key in keys if key not in where.citations]
    if unknown:
        raise PortableError(f"{{{name}}}`{content}`: {', '.join(unknown)} not in book/references.bib")
    url = where.references()
    if name == "cite:t":
        return "; ".join(f"[{where.citations[key][0]} ({where.citations[key][1]})]({url})" for key in keys)
    inner = "; ".join(f"{where.citations[key][0]}, {where.citations[key][1]}" for key in keys)
    return f"([{inner}]({url}))"


def _term(content: str, where: Book) -> str:
    match = re.fullmatch(r"\s*(?P<text>.*?)\s*<(?P<target>[^<>]+)>\s*", content)
    text, target = (match.group("text"), match.group("target")) if match else (content, content)
    return f"[**{text}**]({where.glossary(target)})"


def _roles(text: str, where: Book) -> str:
    """Replace the roles of one line of prose (outside code spans)."""
    out: list[str] = []
    position = 0
    # Walk code spans so that a role written inside `` ... `` (showing the syntax) stays as written.
    for span in re.finditer(r"(?<!\{)(?<![\w}])(`+)(?!`).*?(?<!`)\1(?!`)|(?P<role>\{[a-z][\w:-]*\}`[^`]+`)", text):
        out.append(text[position : span.start()])
        piece = span.group(0)
        if span.group("role"):
            role = ROLE.fullmatch(piece)
            name, content = role.group("name"), role.group("content")
            if name in ("cite", "cite:p", "cite:ps", "cite:ts", "cite:t"):
                piece = _cite("cite:t" if name.startswith("cite:t") else "cite", content, where)
            elif name == "term":
                piece = _term(content, where)
            else:
                raise PortableError(f"the role {{{name}}} has no portable form")
        out.append(piece)
        position = span.end()
    out.append(text[position:])
    return "".join(out)


def _absolute(target: str, folder: str, where: Book, *, image: bool) -> str:
    """An absolute URL for a link or image target written in a notebook in ``folder`` (relative to the root)."""
    if re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith(("#", "/")):
        return target
    path, _, anchor = target.partition("#")
    resolved = posixpath.normpath(posixpath.join(folder, path))
    if resolved.startswith(".."):
        raise PortableError(f"the link {target!r} leaves the repository")
    suffix = f"#{anchor}" if anchor else ""
    if not image and re.search(r"\.(md|ipynb)$", resolved):  # a page of the book: its page on the website
        return where.site + re.sub(r"\.(md|ipynb)$", ".html", resolved) + suffix
    return where.raw + resolved + suffix


def _links(text: str, folder: str, where: Book) -> str:
    def replace(match: re.Match) -> str:
        inner = _links(match.group("text"), folder, where)  # a badge: an image inside a link
        target = _absolute(match.group("target"), folder, where, image=bool(match.group("bang")))
        return f"{match.group('bang')}[{inner}]({target}{match.group('title') or ''})"

    return LINK.sub(replace, text)


def _prose(lines: list[str], folder: str, where: Book) -> list[str]:
    converted = [_links(_roles(line, where), folder, where) for line in lines]
    # A term the author already set in bold ("**{term}`query`**") is bold once, not twice.
    return [re.sub(r"\*\*\[\*\*([^\]*]+)\*\*\]\(([^)\s]+)\)\*\*", r"**[\1](\2)**", line) for line in converted]


def _directive(name: str, argument: str, body: list[str], *, folder: str, where: Book) -> list[str]:
    # Directive options (":open:", ":class: tip") come first in the body.
    while body and re.match(r"^:[\w-]+:", body[0]):
        body = body[1:]
    content = _convert(body, folder, where)
    while content and not content[0].strip():
        content.pop(0)
    while content and not content[-1].strip():
        content.pop()
    if name == "dropdown":
        summary = _prose([argument.strip() or "Answer"], folder, where)[0]
        return [f"<details><summary>{summary}</summary>", "", *content, "", "</details>"]
    if name in ADMONITIONS or name == "admonition":
        title = argument.strip() if name == "admonition" else ADMONITIONS[name]
        if name != "admonition" and argument.strip():  # "{note} text" puts the first line in the argument
            content = [argument.strip(), *content]
        title = _prose([title], folder, where)[0] if title else ""
        quoted = [f"**{title}.**", ""] if title else []
        return [f"> {line}".rstrip() for line in quoted + content]
    raise PortableError(f"the directive {{{name}}} has no portable form")


def _convert(lines: list[str], folder: str, where: Book) -> list[str]:
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = FENCE.match(line)
        if not fence:
            target = re.match(r"^\((?P<label>[^()\s]+)\)=\s*$", line)  # a MyST target: an HTML anchor
            out.extend([f'<a id="{target.group("label")}"></a>'] if target else _prose([line], folder, where))
            index += 1
            continue
        marker = fence.group("fence")
        closing = re.compile(rf"^ {{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = lines[index + 1 : end]
        directive = DIRECTIVE.match(fence.group("info").strip())
        if directive:
            out.extend(
                _directive(directive.group("name"), directive.group("argument"), body, folder=folder, where=where)
            )
        elif marker[0] == ":":
            raise PortableError(f"a colon fence without a directive: {line!r}")
        else:  # a code block: kept as written
            out.extend(lines[index : end + 1])
        index = end + 1
    return out


def portable_markdown(source: str, folder: str = "notebooks", where: Book | None = None) -> str:
    """The CommonMark (with HTML) form of a MyST markdown cell of a notebook in ``folder``."""
    where = where or book()
    lines = _convert(source.split("\n"), folder, where)
    return "\n".join(lines)


def portable_notebook(notebook, folder: str, where: Book | None = None):
    """A copy of ``notebook`` (in ``folder``, relative to the root) with every markdown cell portable."""
    notebook = copy.deepcopy(notebook)
    problems = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type == "markdown":
            try:
                cell.source = portable_markdown(cell.source, folder, where)
            except PortableError as error:
                problems.append(f"cell {index}: {error}")
    if problems:
        raise PortableError("\n  ".join(problems))
    return notebook


# ---------------------------------------------------------------------------------
# The command line (the same shape as tools/notebooks/generate_exercises.py)


def render(notebook) -> str:
    text = nbformat.writes(notebook)
    return text if text.endswith("\n") else text + "\n"


def chapters(source_dir: Path) -> list[Path]:
    return sorted(path for path in source_dir.glob("[0-9][0-9]_*.ipynb") if CHAPTER_PATTERN.match(path.name))


def _relative_folder(path: Path) -> str:
    absolute = path.resolve()
    for parent in absolute.parents:
        if (parent / "pyproject.toml").is_file():
            return absolute.parent.relative_to(parent).as_posix()
    return path.parent.as_posix()


def expected_outputs(
    source_dir: Path, target_dir: Path, where: Book | None = None
) -> tuple[dict[Path, str], dict[Path, str]]:
    written: dict[Path, str] = {}
    problems: dict[Path, str] = {}
    for chapter_path in chapters(source_dir):
        target = target_dir / chapter_path.name
        chapter = nbformat.read(chapter_path, as_version=4)
        try:
            # Relative paths in a chapter are written from the chapter's folder; the copy in
            # DST resolves them from there too (the result is absolute either way).
            notebook = portable_notebook(chapter, _relative_folder(chapter_path), where)
        except PortableError as error:
            problems[target] = f"{chapter_path}:\n  {error}"
            continue
        written[target] = render(notebook)
    return written, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/notebooks/colab_edition.py",
        description="Write the Colab edition of the chapters (MyST turned into portable markdown).",
    )
    parser.add_argument("source", type=Path, help="folder with the chapters NN_*.ipynb (e.g. notebooks)")
    parser.add_argument("target", type=Path, help="folder for the Colab edition (e.g. notebooks/colab)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 and name the notebooks that are out of date"
    )
    arguments = parser.parse_args(argv)
    if not arguments.source.is_dir():
        parser.error(f"{arguments.source} is not a folder")

    outputs, problems = expected_outputs(arguments.source, arguments.target)
    command = f"python tools/notebooks/colab_edition.py {arguments.source} {arguments.target}"
    return sync_notebooks(
        outputs, problems, arguments.target, check=arguments.check, label="colab edition", command=command
    )


def sync_notebooks(
    outputs: dict[Path, str], problems: dict[Path, str], target: Path, *, check: bool, label: str, command: str
) -> int:
    """Bring the notebooks derived from the chapters (``outputs``: path -> text) into ``target``, or with
    ``check`` only name those that are out of date; notebooks whose chapter is gone are removed (or
    named). Shared by this tool and tools/notebooks/generate_exercises.py. Returns 1 when a check finds work to
    do or a notebook could not be made (``problems``), else 0."""
    known = set(outputs) | set(problems)
    orphans = sorted(set(chapters(target)) - known) if target.is_dir() else []
    stale = [path for path, text in outputs.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    if check:
        for path in stale:
            print(f"{path}: {'out of date' if path.is_file() else 'missing'}")
        for path in orphans:
            print(f"{path}: its chapter no longer exists")
    else:
        target.mkdir(parents=True, exist_ok=True)
        for path in stale:
            with open(path, "w", encoding="utf-8", newline="\n") as file:
                file.write(outputs[path])
            print(f"{label}: wrote {path}")
        for path in orphans:
            path.unlink()
            print(f"{label}: removed {path} (its chapter no longer exists)")
    for path, problem in problems.items():
        print(f"{label}: cannot write {path}: {problem}", file=sys.stderr)
    if check and (stale or orphans):
        print(f"run: {command}")
        return 1
    if problems:
        return 1
    if check or not (stale or orphans):
        print(f"{label}: {len(outputs)} notebook(s) in {target} are up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
