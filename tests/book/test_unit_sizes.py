"""Units a reader can hold, and stored files with one writer each (CONTRIBUTING.md, "Units a reader can hold").

Every module under src/attention_book is parsed with ``ast`` (nothing is imported):

* a module is at most 500 lines, except under ``exercises/`` and ``widgets/`` (one checker or
  widget per idea, each of them small, but many per chapter);
* a function or method is at most 60 lines, everywhere in the package, counted from its
  ``def`` line to its last line without its docstring: documentation is never a reason to
  split a function (``fit`` names every default it uses in its docstring);
* every file in ``src/attention_book/stored/`` is registered in ``_files.STORED_FILES`` with
  its one writer, ``stored/README.md`` has the same table, and the modules that record a
  stored file (call ``record_stored_file``), anywhere in the repository's Python, are
  exactly the registered writers.

An exception names one file, the date it was granted and why; an exception that is no
longer needed fails too, so it is removed when the file is fixed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from attention_book import _files
from tests.helpers import ROOT

PACKAGE = ROOT / "src" / "attention_book"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
LONG_MODULES_ALLOWED_UNDER = ("exercises", "widgets")
# path -> why (with the date). Only for work landing in another change.
EXCEPTIONS: dict[str, str] = {}


def package_modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def module_length(path: Path) -> int:
    return len(path.read_text().splitlines())


def function_length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's last line, less its docstring's lines."""
    length = node.end_lineno - node.lineno + 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        length -= first.end_lineno - first.lineno + 1
    return length


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function or method longer than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and function_length(node) > limit:
            found.append((node.name, node.lineno, function_length(node)))
    return found


def test_no_module_of_the_package_is_over_500_lines_outside_exercises_and_widgets():
    too_long = [
        f"{relative(path)}: {module_length(path)} lines"
        for path in package_modules()
        if path.relative_to(PACKAGE).parts[0] not in LONG_MODULES_ALLOWED_UNDER
        and module_length(path) > MAX_MODULE_LINES
        and relative(path) not in EXCEPTIONS
    ]
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by idea): {too_long}"


def test_no_function_of_the_package_is_over_60_lines():
    too_long = [
        f"{relative(path)}:{line} {name} ({length} lines)"
        for path in package_modules()
        if relative(path) not in EXCEPTIONS
        for name, line, length in long_functions(path)
    ]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (extract steps): {too_long}"


def test_the_size_checks_catch_a_long_function_but_not_a_long_docstring(tmp_path):
    path = tmp_path / "long.py"
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    documented = '    """One line.\n\n' + "    More.\n" * MAX_FUNCTION_LINES + '    """\n    return 1\n'
    path.write_text(f"def short():\n{documented}\n\ndef long():\n{body}")
    assert [name for name, _, _ in long_functions(path)] == ["long"]
    tree = ast.parse(path.read_text())
    assert [function_length(node) for node in tree.body] == [2, MAX_FUNCTION_LINES + 1]


def test_every_exception_names_an_existing_file_that_still_needs_it():
    for path, why in EXCEPTIONS.items():
        assert re.match(r"\d{4}-\d\d-\d\d: ", why), f"{path}: an exception starts with its date"
        full = ROOT / path
        assert full.is_file(), f"{path} is gone: remove its exception"
        needs_it = module_length(full) > MAX_MODULE_LINES or long_functions(full)
        assert needs_it, f"{path} is within the limits now: remove its exception"


# ---------------------------------------------------------------------------------------
# Stored files: one registry, one writer per file

STORED = PACKAGE / "stored"
NOT_STORED_RESULTS = {"SHA256SUMS", "README.md"}


def recording_modules() -> set[str]:
    """Every Python file of the repository (not notebooks) that calls ``record_stored_file``."""
    found = set()
    for folder in ("src", "tools", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == PACKAGE / "_files.py":
                continue  # where it is defined
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    called = node.func
                    name = getattr(called, "id", None) or getattr(called, "attr", None)
                    if name == "record_stored_file":
                        found.add(relative(path))
    return found


def test_every_stored_file_is_registered_and_every_registered_file_is_stored():
    shipped = {path.name for path in STORED.iterdir()} - NOT_STORED_RESULTS
    assert shipped == set(_files.STORED_FILES), (
        "stored/ and STORED_FILES (attention_book/_files.py) disagree: "
        f"unregistered {sorted(shipped - set(_files.STORED_FILES))}, "
        f"missing {sorted(set(_files.STORED_FILES) - shipped)}"
    )
    recorded = {line.split()[1] for line in (STORED / "SHA256SUMS").read_text().splitlines()}
    assert recorded == shipped, "SHA256SUMS must list exactly the stored files"


def test_each_stored_file_has_one_writer_and_no_other_module_records_a_stored_file():
    writers = {entry.writer for entry in _files.STORED_FILES.values()}
    for entry in _files.STORED_FILES.values():
        assert (ROOT / entry.writer).is_file(), f"{entry.name}: its writer {entry.writer} is gone"
    recording = recording_modules()
    assert recording == writers, (
        "the modules that record stored files must be the registered writers, one per file: "
        f"unregistered writers {sorted(recording - writers)}, "
        f"registered writers that record nothing {sorted(writers - recording)}"
    )
    for path in recording:
        text = (ROOT / path).read_text()
        for entry in _files.STORED_FILES.values():
            assert entry.writer == path or entry.name not in text, (
                f"{path} names {entry.name}, which {entry.writer} writes: one writer per file"
            )


def test_the_stored_readme_has_the_registrys_table():
    readme = (STORED / "README.md").read_text()
    for entry in _files.STORED_FILES.values():
        row = next((line for line in readme.splitlines() if line.startswith(f"| `{entry.name}`")), None)
        assert row is not None, f"stored/README.md has no row for {entry.name}"
        for part in (entry.writer, entry.command, entry.rerun_when):
            assert part in row, f"stored/README.md's row for {entry.name} does not say {part!r}"
