"""Write the student (exercise) notebooks from the chapters.

Usage (the Makefile's ``exercises`` target)::

    python tools/notebooks/generate_exercises.py notebooks notebooks/exercises
    python tools/notebooks/generate_exercises.py --check notebooks notebooks/exercises

For every chapter ``SRC/NN_name.ipynb`` this writes ``DST/NN_name.ipynb`` where

* code between a line ``# BEGIN SOLUTION`` and a line ``# END SOLUTION`` keeps every
  top-level ``def``/``class`` statement's decorators, signature and docstring (classes keep
  their structure: methods are stubbed the same way), and each function body becomes
  ``raise NotImplementedError("Exercise N.M: not implemented yet")``, so the cell still
  defines the names and a stub raises only when it is called. N.M is the exercise of the
  next ``check("N.M", ...)`` cell. The ``hide-input`` tag is removed from those cells.
* check cells (tagged ``nbval-check-output``, the tag nbval reads) keep their stored, passing output,
  each line labelled ``[not run yet; a passing answer prints:]`` (nbval_sanitize.cfg removes the label), and
  execution count, so ``pytest --nbval-lax DST/NN_name.ipynb`` fails on exactly the
  exercises that are not solved yet; every other output is cleared.
* the header cell (tag ``chapter-header``) gets the title "N. Title: exercises" and one Colab
  badge pointing at the exercise notebook itself (what ``tools/notebooks/sync_headers.py`` writes), and a
  banner cell (tag ``exercise-banner``) after the setup cell explains how to validate.
* every markdown cell is rewritten in portable markdown (``tools/notebooks/colab_edition.py``): quiz answers
  in ``<details>``, citations and glossary terms as links to the website, links and images absolute.

When DST is ``SRC/exercises``, the Colab edition ``SRC/colab`` is written (or checked) too
(``tools/notebooks/colab_edition.py``), so this one command keeps both up to date.

The output is deterministic (sorted keys, no timestamps, cell ids copied from the chapter),
so a test can compare the committed notebooks with freshly generated ones. ``--check``
writes nothing; it exits with status 1 and names every notebook that is out of date.
Exercise notebooks in DST whose chapter no longer exists are removed (or, with ``--check``,
reported).
"""

from __future__ import annotations

import argparse
import ast
import copy
import hashlib
import re
import sys
import textwrap
from pathlib import Path

import colab_edition  # tools/notebooks/colab_edition.py: the student notebooks are portable markdown too
import nbformat

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
CHECK_TAG = "nbval-check-output"
# The stored output of a check cell in a student notebook starts with this label, so a student who
# opens the notebook never sees a pass mark they did not earn: the line is shown as what a passing
# answer will print. nbval_sanitize.cfg's [expected-line] section removes the label before nbval
# compares, so `pytest --nbval-lax --nbval-sanitize-with nbval_sanitize.cfg` still fails exactly on
# the unfinished exercises and passes once they are done.
EXPECTED_LABEL = "[not run yet; a passing answer prints:] "
HEADER_TAG = "chapter-header"
SETUP_TAG = "colab-setup"
BANNER_TAG = "exercise-banner"
HIDE_TAG = "hide-input"
CHECK_CALL = re.compile(r"""\bcheck\(\s*(['"])([^'"]+)\1""")
EXERCISE_HEADING = re.compile(r"^#+\s*Exercise\s+(\d+\.\d+)", re.MULTILINE)
EXERCISES_SUFFIX = ": exercises"


class GenerateError(ValueError):
    """A chapter cannot be turned into an exercise notebook (the message says why and where)."""


# ---------------------------------------------------------------------------------
# Solution regions and stubs


def solution_regions(source: str) -> list[tuple[int, int]]:
    """Line index pairs (begin_marker, end_marker) of the solution regions in ``source``."""
    regions: list[tuple[int, int]] = []
    begin: int | None = None
    for index, line in enumerate(source.splitlines()):
        stripped = line.strip()
        if stripped == BEGIN:
            if begin is not None:
                raise GenerateError(f"line {index + 1}: '{BEGIN}' inside another solution region")
            begin = index
        elif stripped == END:
            if begin is None:
                raise GenerateError(f"line {index + 1}: '{END}' without '{BEGIN}'")
            regions.append((begin, index))
            begin = None
    if begin is not None:
        raise GenerateError(f"line {begin + 1}: '{BEGIN}' without '{END}'")
    return regions


def has_solution(source: str) -> bool:
    return any(line.strip() == BEGIN for line in source.splitlines())


def _stub_statement(exercise_id: str | None) -> str:
    label = f"Exercise {exercise_id}: " if exercise_id else ""
    return f'raise NotImplementedError("{label}not implemented yet")'


def _docstring_end(node: ast.AST) -> int | None:
    """The last line (1-based) of the docstring of a def/class, or None without one."""
    body = node.body  # type: ignore[attr-defined]
    first = body[0] if body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno
    return None


def _body_indent(lines: list[str], node: ast.AST) -> str:
    first = node.body[0]  # type: ignore[attr-defined]
    line = lines[first.lineno - 1]
    return line[: len(line) - len(line.lstrip())]


def _stub_node(lines: list[str], node: ast.AST, stub: str) -> list[str]:
    """The lines of one def/class with every function body replaced by ``stub`` (a statement)."""
    start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])  # type: ignore[attr-defined]
    body = node.body  # type: ignore[attr-defined]
    if body[0].lineno == node.lineno:  # a one-line `def f(x): return x` or `class A: pass`
        if isinstance(node, ast.ClassDef):
            return lines[start - 1 : node.end_lineno]
        rebuilt = copy.deepcopy(node)
        rebuilt.body = [ast.parse(stub).body[0]]  # type: ignore[attr-defined]
        return ast.unparse(rebuilt).splitlines()
    indent = _body_indent(lines, node)
    docstring_end = _docstring_end(node)
    # Keep decorators, the signature and the docstring as written; comments between the
    # signature and the first statement belong to the body and go with it.
    head_end = docstring_end if docstring_end is not None else _signature_end(lines, node)
    kept = lines[start - 1 : head_end]
    if not isinstance(node, ast.ClassDef):
        return kept + [indent + "# Your code here.", indent + stub]
    out = list(kept)
    members = body[1:] if docstring_end is not None else body
    previous_end = head_end
    for member in members:
        member_start = min([member.lineno] + [d.lineno for d in getattr(member, "decorator_list", [])])
        out.extend(lines[previous_end : member_start - 1])  # blank lines and comments between members
        if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.extend(_stub_node(lines, member, stub))
        else:  # class attributes, annotations, `pass`: structure, kept as written
            out.extend(lines[member_start - 1 : member.end_lineno])
        previous_end = member.end_lineno
    return out


def _signature_end(lines: list[str], node: ast.AST) -> int:
    """The line (1-based) that ends a def/class header: the last code line before the body."""
    end = node.body[0].lineno - 1  # type: ignore[attr-defined]
    while end > node.lineno and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    return end


def stub_region(code: str, exercise_id: str | None) -> str:
    """The student version of the code inside one solution region."""
    stub = _stub_statement(exercise_id)
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError as error:
        raise GenerateError(f"the solution does not parse: {error}") from error
    if textwrap.dedent(code) != code:
        raise GenerateError("the solution region must not be indented")
    lines = code.splitlines()
    out: list[str] = []
    previous_end = 0
    for node in tree.body:
        node_start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        out.extend(lines[previous_end : node_start - 1])
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.extend(_stub_node(lines, node, stub))
        else:  # imports and the like: not an answer, kept as written
            out.extend(lines[node_start - 1 : node.end_lineno])
        previous_end = node.end_lineno
    out.extend(lines[previous_end:])
    return "\n".join(out)


def stub_source(source: str, exercise_id: str | None) -> str:
    """``source`` with each solution region replaced by stubs (the markers stay)."""
    lines = source.splitlines()
    out: list[str] = []
    previous = 0
    for begin, end in solution_regions(source):
        out.extend(lines[previous : begin + 1])
        region = "\n".join(lines[begin + 1 : end])
        stubbed = stub_region(region, exercise_id)
        if stubbed:
            out.extend(stubbed.split("\n"))
        previous = end
    out.extend(lines[previous:])
    result = "\n".join(out)
    return result + "\n" if source.endswith("\n") else result


def fill_source(student: str, chapter: str) -> str:
    """Put the chapter's solution regions back into a student cell (the inverse of stubbing)."""
    student_regions = solution_regions(student)
    chapter_regions = solution_regions(chapter)
    if len(student_regions) != len(chapter_regions):
        raise GenerateError("the student cell and the chapter cell have different numbers of solution regions")
    student_lines, chapter_lines = student.splitlines(), chapter.splitlines()
    out: list[str] = []
    previous = 0
    for (begin, end), (chapter_begin, chapter_end) in zip(student_regions, chapter_regions):
        out.extend(student_lines[previous : begin + 1])
        out.extend(chapter_lines[chapter_begin + 1 : chapter_end])
        previous = end
    out.extend(student_lines[previous:])
    result = "\n".join(out)
    return result + "\n" if student.endswith("\n") else result


# ---------------------------------------------------------------------------------
# Notebooks


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and CHECK_TAG in cell.get("metadata", {}).get("tags", [])


def checked_exercise(cell) -> str | None:
    match = CHECK_CALL.search(cell.source)
    return match.group(2) if match else None


def _tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


def _set_tags(cell, tags: list[str]) -> None:
    if tags:
        cell.metadata["tags"] = tags
    else:
        cell.metadata.pop("tags", None)


def _exercise_of_solution(cells, index: int) -> str | None:
    """The exercise id of the solution cell at ``index``: the next check call, else the heading above."""
    for cell in cells[index + 1 :]:
        if has_solution(cell.source) and cell.cell_type == "code":
            break
        if is_check_cell(cell) and checked_exercise(cell):
            return checked_exercise(cell)
    for cell in reversed(cells[:index]):
        if cell.cell_type == "markdown":
            match = EXERCISE_HEADING.search(cell.source)
            if match:
                return match.group(1)
    return None


def chapter_number(path: Path) -> int:
    return int(path.name[:2])


def _image_one_level_deeper(markdown: str) -> str:
    """Relative image paths in badge markdown, seen from one folder deeper."""

    def deeper(match: re.Match) -> str:
        target = match.group(2)
        if re.match(r"^[a-z]+:|^/", target):
            return match.group(0)
        return f"{match.group(1)}../{target})"

    return re.sub(r"(!\[[^\]]*\]\()([^)\s]+)\)", deeper, markdown)


def exercise_header(source: str, chapter_path: str, exercise_path: str) -> str:
    """The header of the exercise notebook: '# N. Title: exercises' and a Colab badge to itself.

    The badge is the chapter's own, re-pointed: its "Do the exercises in Colab" link already
    names the exercise notebook, and the image lies one folder further up. This is what
    ``tools/notebooks/sync_headers.py`` writes for an exercise notebook.
    """
    lines = source.strip().splitlines()
    title = lines[0].rstrip() if lines and lines[0].startswith("# ") else f"# {Path(chapter_path).stem}"
    if not title.endswith(EXERCISES_SUFFIX):
        title += EXERCISES_SUFFIX
    body = "\n".join(lines[1:])
    own_link = re.search(r"\[Do the exercises in Colab\]\(([^)\s]+)\)", body)
    badge = re.search(r"\[!\[[^\]]*\]\([^)\s]+\)\]\(([^)\s]+)\)", body)
    if badge is None:
        return title
    badge_markdown = _image_one_level_deeper(badge.group(0))
    if own_link:
        target = own_link.group(1)
    else:  # no exercise link in the chapter header: point the chapter's link at the exercises
        target = badge.group(1).replace(chapter_path, exercise_path)
    badge_markdown = badge_markdown.replace(f"]({badge.group(1)})", f"]({target})")
    return f"{title}\n\n{badge_markdown}"


def banner_source(number: int, chapter_path: str, exercise_path: str) -> str:
    return "\n".join(
        [
            f"**This is the exercise version of chapter {number}.** The solutions are removed: each function",
            "you are asked to write keeps its signature and docstring, and its body raises",
            "`NotImplementedError` until you replace it with your code. The chapter with worked",
            f"solutions is `{chapter_path}`.",
            "",
            "**How to work.** Run the cells from the top. At each exercise, write the body of the",
            "function (between `# BEGIN SOLUTION` and `# END SOLUTION`) and run the check cell under",
            "it: it tests your code on fresh random inputs and prints one line, either that the",
            "exercise passed or what is wrong with a hint.",
            "",
            "**On Colab** (or in Jupyter): run all cells (Runtime > Run all). The last cell,",
            f"`summary({number})`, prints a table of this chapter's exercises and which of them pass.",
            "",
            "**With pytest**, in a checkout of the book's repository:",
            "",
            "```bash",
            f"pytest --nbval-lax --nbval-sanitize-with nbval_sanitize.cfg {exercise_path}",
            "```",
            "",
            "runs the whole notebook and compares only the check cells (the cells tagged `nbval-check-output`)",
            f"with their stored output. Until you run it, a check cell shows `{EXPECTED_LABEL.strip()}` and the line",
            "a passing answer prints; the sanitizer (`nbval_sanitize.cfg`) removes that label before",
            "comparing, so pytest fails once for every exercise that does not pass yet, and passes when all",
            "of them do. In its report the line starting with ✗ is what your answer printed, with the",
            "hint; the line starting with ✓ is the passing line it expects.",
            "",
            "**If your course grades this notebook**, the grader runs your import lines and the Exercises",
            "section, not the chapter's experiments: define everything an answer needs in the exercise's cells.",
        ]
    )


def label_expected_output(cell) -> None:
    """Prefix every line of a check cell's stored text output with :data:`EXPECTED_LABEL` (in place)."""
    for output in cell.outputs:
        if output.get("output_type") == "stream":
            lines = output.text.splitlines(keepends=True)
            output.text = "".join(line if line.startswith(EXPECTED_LABEL) else EXPECTED_LABEL + line for line in lines)


def unlabel(text: str) -> str:
    """The inverse of the label: what nbval compares after the sanitizer has run."""
    return "".join(
        line[len(EXPECTED_LABEL) :] if line.startswith(EXPECTED_LABEL) else line
        for line in text.splitlines(keepends=True)
    )


def _cell_id(seed: str) -> str:
    return hashlib.sha1(seed.encode()).hexdigest()[:8]


def _clear(cell) -> None:
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None


def exercise_notebook(chapter, chapter_path: str, exercise_path: str):
    """The student notebook of ``chapter`` (a NotebookNode); the paths are shown to students.

    Raises GenerateError when the chapter breaks the exercise contract (e.g. a check cell
    without its stored passing output, or a solution cell whose exercise cannot be told).
    """
    notebook = copy.deepcopy(chapter)
    number = chapter_number(Path(chapter_path))
    problems: list[str] = []
    cells = notebook.cells
    for index, cell in enumerate(cells):
        if "id" not in cell and notebook.get("nbformat_minor", 0) >= 5:
            cell["id"] = _cell_id(f"{exercise_path}:{index}")
        if cell.cell_type != "code":
            continue
        if has_solution(cell.source):
            exercise_id = _exercise_of_solution(chapter.cells, index)
            if exercise_id is None:
                problems.append(
                    f"cell {index}: no check('N.M', ...) cell after this solution and no 'Exercise N.M' heading before it"
                )
            try:
                cell.source = stub_source(cell.source, exercise_id)
            except GenerateError as error:
                problems.append(f"cell {index}: {error}")
            _set_tags(cell, [tag for tag in _tags(cell) if tag != HIDE_TAG])
            _clear(cell)
        elif is_check_cell(cell):
            if not cell.get("outputs") or cell.get("execution_count") is None:
                problems.append(
                    f"cell {index}: the check cell has no stored output or execution count; execute the chapter first"
                )
            else:
                label_expected_output(cell)
        else:
            _clear(cell)
    if problems:
        raise GenerateError(f"{chapter_path}:\n  " + "\n  ".join(problems))

    header_index = next((i for i, cell in enumerate(cells) if HEADER_TAG in _tags(cell)), None)
    if header_index is not None:
        cells[header_index].source = exercise_header(cells[header_index].source, chapter_path, exercise_path)
    after = header_index + 1 if header_index is not None else 0
    while after < len(cells) and SETUP_TAG in _tags(cells[after]):
        after += 1
    banner = nbformat.v4.new_markdown_cell(banner_source(number, chapter_path, exercise_path))
    banner.metadata["tags"] = [BANNER_TAG]
    if notebook.get("nbformat_minor", 0) >= 5:
        banner["id"] = "exercise-banner"
    else:
        banner.pop("id", None)
    cells.insert(after, banner)
    # Widget state belongs to outputs that no longer exist.
    notebook.metadata.pop("widgets", None)
    # The grader (attention_book.grade) reads the chapter from here first, whatever the file is called.
    notebook.metadata["attention_book"] = {"chapter": number}
    # Colab and Jupyter open the student notebooks: answers folded, citations and terms as links,
    # every link and image absolute (the badge's image included).
    try:
        return colab_edition.portable_notebook(notebook, str(Path(exercise_path).parent.as_posix()))
    except colab_edition.PortableError as error:
        raise GenerateError(f"{chapter_path}:\n  {error}") from error


def render(notebook) -> str:
    """The exact text written for a notebook (nbformat's JSON: sorted keys, indent 1)."""
    text = nbformat.writes(notebook)
    return text if text.endswith("\n") else text + "\n"


chapters = colab_edition.chapters  # the chapters NN_*.ipynb of a folder, as the Colab edition reads them


def _display_path(path: Path) -> str:
    """``path`` relative to the project root (the folder holding pyproject.toml), for students."""
    absolute = path.resolve()
    for parent in absolute.parents:
        if (parent / "pyproject.toml").is_file():
            return absolute.relative_to(parent).as_posix()
    return path.as_posix()


def expected_outputs(source_dir: Path, target_dir: Path) -> tuple[dict[Path, str], dict[Path, str]]:
    """What the generator writes: ({exercise notebook: its text}, {exercise notebook: problem})."""
    written: dict[Path, str] = {}
    problems: dict[Path, str] = {}
    for chapter_path in chapters(source_dir):
        target = target_dir / chapter_path.name
        chapter = nbformat.read(chapter_path, as_version=4)
        try:
            notebook = exercise_notebook(chapter, _display_path(chapter_path), _display_path(target))
        except GenerateError as error:
            problems[target] = str(error)
            continue
        written[target] = render(notebook)
    return written, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/notebooks/generate_exercises.py",
        description="Write exercise notebooks (solutions replaced by stubs) from the chapters.",
    )
    parser.add_argument("source", type=Path, help="folder with the chapters NN_*.ipynb (e.g. notebooks)")
    parser.add_argument("target", type=Path, help="folder for the exercise notebooks (e.g. notebooks/exercises)")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 and name the notebooks that are out of date"
    )
    arguments = parser.parse_args(argv)
    if not arguments.source.is_dir():
        parser.error(f"{arguments.source} is not a folder")

    outputs, problems = expected_outputs(arguments.source, arguments.target)
    command = f"python tools/notebooks/generate_exercises.py {arguments.source} {arguments.target}"
    status = colab_edition.sync_notebooks(
        outputs, problems, arguments.target, check=arguments.check, label="generate", command=command
    )
    # The Colab edition (tools/notebooks/colab_edition.py) is written from the same chapters at the same time, so
    # the usual command keeps both up to date: SRC/colab beside SRC/exercises.
    if arguments.target.resolve() == (arguments.source / "exercises").resolve():
        colab_arguments = [str(arguments.source), str(arguments.source / "colab")]
        status = max(status, colab_edition.main((["--check"] if arguments.check else []) + colab_arguments))
    return status


if __name__ == "__main__":
    sys.exit(main())
