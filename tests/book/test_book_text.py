"""The text a reader sees: no stray control characters, and a notation page that names real code.

* A markdown cell written as JSON by hand can hold ``\\t`` where ``\\\\t`` was meant:
  ``$T \\times T$`` then renders as "T<tab>imes T". No markdown cell of any chapter or
  student notebook may contain a TAB or another control character (newlines aside).
* book/notation.md has an "in code" column; every identifier in it must exist in the
  package (a function, class, parameter, attribute or variable name under src/), so the
  page cannot promise names that the code does not have.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks" / "exercises").glob("*.ipynb"))
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_control_characters_in_markdown(notebook):
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    found = []
    for number, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        for match in CONTROL.finditer(text):
            context = text[max(0, match.start() - 30) : match.end() + 30].replace("\n", " ")
            found.append(f"cell {number}: {match.group()!r} in ...{context}...")
    assert not found, f"{notebook.name} has control characters in markdown:\n" + "\n".join(found)


def test_control_character_check_catches_a_tab():
    assert CONTROL.search("$T \times T$")  # the bug this test exists for
    assert not CONTROL.search("$T \\times T$\nnext line")


def _package_names() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "src" / "attention_book").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
    return names


def _code_column() -> list[tuple[str, str]]:
    """(symbol, identifier) for every identifier in the notation table's last column."""
    text = (ROOT / "book" / "notation.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| symbol")]
    found = []
    for row in rows:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        for snippet in re.findall(r"`([^`]+)`", cells[-1]):
            found += [(cells[0], identifier) for identifier in re.findall(r"[A-Za-z_]\w*", snippet)]
    return found


def test_notation_table_has_a_code_column():
    identifiers = {identifier for _, identifier in _code_column()}
    assert {"q_proj", "num_heads", "scaled_dot_product_attention"} <= identifiers


def test_every_identifier_in_the_notation_table_exists_in_the_package():
    names = _package_names()
    missing = [f"{symbol}: `{identifier}`" for symbol, identifier in _code_column() if identifier not in names]
    assert not missing, "book/notation.md names identifiers the package does not have:\n" + "\n".join(missing)


def test_the_identifier_check_would_catch_an_invented_name():
    assert "attn_weights" not in _package_names() and "context_vec" not in _package_names()
