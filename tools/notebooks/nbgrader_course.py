"""Write an nbgrader course folder: one assignment per chapter, for JupyterHub and nbgrader.

Usage (the Makefile's ``nbgrader`` target)::

    python tools/notebooks/nbgrader_course.py                  # every chapter -> _build/nbgrader
    python tools/notebooks/nbgrader_course.py COURSE --chapter 3

It writes ``COURSE/nbgrader_config.py`` and, for every chapter ``notebooks/NN_name.ipynb``,
``COURSE/source/chNN_name/NN_name.ipynb``: the student notebook (``notebooks/exercises/NN_name.ipynb``)
with the chapter's solutions filled in, in nbgrader's own format (cell metadata schema version 3).
Then, in COURSE, ``nbgrader generate_assignment chNN_name`` makes the students' version and
``nbgrader autograde chNN_name`` grades what they hand in (book/teaching.md, the instructor's guide).

* A solution cell becomes an nbgrader solution cell ("autograded answer"). The body of each function
  (and method) it defines lies between nbgrader's ``### BEGIN SOLUTION`` and ``### END SOLUTION``, so
  the released notebook keeps every signature and docstring, as the student notebook does; the stub
  nbgrader puts there (``nbgrader_config.py``) is the student notebook's.
* A check cell (``check("N.M", answer)``) becomes a locked, graded autograder-test cell worth the
  exercise registry's points; it calls :func:`attention_book.grade.assert_passes`, which judges the
  answer in a fresh Python process, so a student's cell that redefined ``check`` changes nothing.
* Every other cell is locked (read-only), the final ``summary(N)`` cell included. Outputs are cleared.

The output is deterministic (sorted keys, ids from the chapter's cell ids, no timestamps).
A chapter that breaks the exercise pattern stops the script with a message naming the file and cell.
"""

from __future__ import annotations

import argparse
import ast
import copy
import sys
from pathlib import Path

import generate_exercises as generate  # tools/notebooks/generate_exercises.py: the student notebooks
import nbformat

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_COURSE = ROOT / "_build" / "nbgrader"
BEGIN = "### BEGIN SOLUTION"
END = "### END SOLUTION"
SCHEMA_VERSION = 3
# What nbgrader puts between the markers in the released notebook: the student notebook's stub
# (without the exercise number, as nbgrader's stub is one for every cell).
CODE_STUB = '# Your code here.\nraise NotImplementedError("not implemented yet")'
TEST_SOURCE = 'from attention_book.grade import assert_passes\nassert_passes("{exercise}", {answer})'
CONFIG = f"""\
# nbgrader configuration of the attention-book course, written by `make nbgrader`
# (tools/notebooks/nbgrader_course.py), which rewrites this file: put settings of your own in
# nbgrader_config_local.py beside it (read last, so it overrides these).
c = get_config()  # noqa: F821 - nbgrader's config loader defines it

c.CourseDirectory.course_id = "attention-book"
# The stub the released notebooks show in place of each solution (as notebooks/exercises/ do).
c.ClearSolutions.code_stub = {{"python": {CODE_STUB!r}}}
# Seconds per cell when autograding: nbgrader runs the whole chapter, and a chapter's cell may
# train a small model on a CPU (each test cell's check has its own limit, 120 s, in assert_passes).
c.Execute.timeout = 600
# A test cell missing from a submission (deleted by editing the file: the released notebook marks it
# undeletable) is put back and run, as attention_book.grade judges the answer without it; without this,
# nbgrader gives it 0 points and flags it for manual grading. (nbgrader 0.9.6 fails on a submission
# that lost its solution cell too: that student's autograde stops with an error to look at.)
c.OverwriteCells.add_missing_cells = True

load_subconfig("nbgrader_config_local.py")  # noqa: F821 - silently skipped when absent
"""
BANNER = """\
**This is the exercise version of chapter {number}, as an nbgrader assignment.** Each function you \
are asked to write keeps its signature and docstring, and its body raises `NotImplementedError` \
until you replace `# Your code here.` and the line under it with your code. The chapter's other \
cells are read-only.

**How to work.** Run the cells from the top. Under each exercise, a read-only test cell judges your \
answer on fresh random inputs (`assert_passes`) and prints one line: that the exercise passed, or \
what is wrong with a hint; it raises an error when the answer does not pass yet. Before you submit, \
use *Validate* (or run all cells): the autograder runs the whole notebook from the top, as it was \
when you submitted it, and scores each test cell that passes."""


class CourseError(ValueError):
    """A chapter does not follow the exercise pattern (the message names the file and the cell)."""


# ---------------------------------------------------------------------------------
# Solution cells: the chapter's solution, the body of each function between nbgrader's markers


def _body_spans(lines: list[str], node: ast.AST, where: str) -> list[tuple[int, int, str]]:
    """(first line, last line, indent), 1-based, of the solution bodies of one def or class."""
    body = node.body  # type: ignore[attr-defined]
    if isinstance(node, ast.ClassDef):
        return [span for member in body for span in _member_spans(lines, member, where)]
    if body[0].lineno == node.lineno:
        name = node.name  # type: ignore[attr-defined]
        raise CourseError(f"{where}: `def {name}` is written on one line: put its body on lines of its own")
    docstring_end = generate._docstring_end(node)
    first = docstring_end + 1 if docstring_end is not None else generate._signature_end(lines, node) + 1
    return [(first, node.end_lineno, generate._body_indent(lines, node))]


def _member_spans(lines: list[str], node: ast.AST, where: str) -> list[tuple[int, int, str]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return _body_spans(lines, node, where)
    return []  # class attributes, imports and the like: not an answer, kept as written (as stubs keep them)


def nbgrader_region(code: str, where: str) -> list[str]:
    """The lines of one solution region with every function body between nbgrader's markers."""
    lines = code.splitlines()
    try:
        tree = ast.parse(code)
    except SyntaxError as error:
        raise CourseError(f"{where}: the solution does not parse: {error}") from error
    spans = [span for node in tree.body for span in _member_spans(lines, node, where)]
    if not spans:
        raise CourseError(f"{where}: the solution region defines no function or class, so nbgrader has nothing to hide")
    out: list[str] = []
    previous = 0
    for first, last, indent in spans:
        out.extend(lines[previous : first - 1])
        out.extend([indent + BEGIN, *lines[first - 1 : last], indent + END])
        previous = last
    out.extend(lines[previous:])
    return out


def solution_source(student: str, chapter: str, where: str) -> str:
    """A student cell with the chapter's solution filled in, each region's markers turned into nbgrader's."""
    try:
        filled = generate.fill_source(student, chapter)
        regions = generate.solution_regions(filled)
    except generate.GenerateError as error:
        raise CourseError(f"{where}: {error}") from error
    lines = filled.splitlines()
    out: list[str] = []
    previous = 0
    for begin, end in regions:
        out.extend(lines[previous:begin])
        out.extend(nbgrader_region("\n".join(lines[begin + 1 : end]), where))
        previous = end + 1
    out.extend(lines[previous:])
    return "\n".join(out).rstrip("\n")


# ---------------------------------------------------------------------------------
# Notebooks


def _grader_metadata(grade_id: str, *, solution: bool = False, grade: bool = False, points: int = 0) -> dict:
    metadata = {
        "grade": grade,
        "grade_id": grade_id,
        "locked": not solution,
        "schema_version": SCHEMA_VERSION,
        "solution": solution,
    }
    if grade:
        metadata["points"] = points
    return metadata


def _exercise_plan(cells, where: str) -> dict[int, str]:
    """{cell index: exercise id} of every solution and check cell; each solution is followed by its check."""
    plan: dict[int, str] = {}
    pending: int | None = None
    for index, cell in enumerate(cells):
        if cell.cell_type == "code" and generate.has_solution(cell.source):
            if pending is not None:
                raise CourseError(f"{where}, cell {pending}: a solution cell with no check cell after it")
            pending = index
        elif generate.is_check_cell(cell):
            exercise_id = generate.checked_exercise(cell)
            if exercise_id is None:
                raise CourseError(f'{where}, cell {index}: a check cell without check("N.M", ...)')
            if pending is None:
                raise CourseError(f"{where}, cell {index}: the check of {exercise_id} has no solution cell before it")
            if exercise_id in plan.values():
                raise CourseError(f"{where}, cell {index}: a second check cell of exercise {exercise_id}")
            plan[pending] = plan[index] = exercise_id
            pending = None
    if pending is not None:
        raise CourseError(f"{where}, cell {pending}: a solution cell with no check cell after it")
    return plan


def _registered(exercise_id: str, where: str):
    from attention_book.exercises import get

    try:
        return get(exercise_id)
    except KeyError as error:
        raise CourseError(f"{where}: exercise {exercise_id} is not registered ({error.args[0]})") from None


def _check_coverage(plan: dict[int, str], number: int, where: str) -> None:
    """Every exercise the registry holds for the chapter has its cells, and no other."""
    from attention_book.exercises import REGISTRY, load_all

    load_all()
    registered = {exercise_id for exercise_id, exercise in REGISTRY.items() if exercise.chapter == str(number)}
    found = set(plan.values())
    if found != registered:
        missing, extra = sorted(registered - found), sorted(found - registered)
        raise CourseError(
            f"{where}: exercises registered but without cells {missing}; cells of other exercises {extra}"
        )


def _plain(cell) -> None:
    """Outputs and execution records cleared; nbval's tag dropped (there is no stored output to compare)."""
    if cell.cell_type == "code":
        cell.outputs = []
        cell.execution_count = None
    cell.metadata.pop("execution", None)
    tags = [tag for tag in cell.metadata.get("tags", []) if tag != generate.CHECK_TAG]
    if tags:
        cell.metadata["tags"] = tags
    else:
        cell.metadata.pop("tags", None)


def course_notebook(student, chapter, number: int, where: str):
    """The nbgrader source notebook of one chapter (a NotebookNode), from its student notebook."""
    notebook = copy.deepcopy(student)
    cells = notebook.cells
    plan = _exercise_plan(cells, where)
    _check_coverage(plan, number, where)
    solutions = [
        cell.source for cell in chapter.cells if cell.cell_type == "code" and generate.has_solution(cell.source)
    ]
    solution_cells = [index for index in sorted(plan) if generate.has_solution(cells[index].source)]
    if len(solutions) != len(solution_cells):
        raise CourseError(f"{where}: {len(solution_cells)} solution cells, but the chapter has {len(solutions)}")
    for index, cell in enumerate(cells):
        _plain(cell)
        slug = plan.get(index, "").replace(".", "_")
        if index in solution_cells:
            chapter_source = solutions[solution_cells.index(index)]
            cell.source = solution_source(cell.source, chapter_source, f"{where}, cell {index}")
            cell.metadata["nbgrader"] = _grader_metadata(f"answer_{slug}", solution=True)
        elif index in plan:
            exercise = _registered(plan[index], f"{where}, cell {index}")
            cell.source = TEST_SOURCE.format(exercise=exercise.id, answer=exercise.answer_expression)
            cell.metadata["nbgrader"] = _grader_metadata(f"test_{slug}", grade=True, points=exercise.points)
        else:
            if generate.BANNER_TAG in cell.metadata.get("tags", []):
                cell.source = BANNER.format(number=number)
            cell.metadata["nbgrader"] = _grader_metadata(f"cell_{cell.get('id') or index}")
    return notebook


def assignment_name(chapter_path: Path) -> str:
    """The nbgrader assignment of a chapter: ``03_soft_vs_hard.ipynb`` -> ``ch03_soft_vs_hard``."""
    return f"ch{chapter_path.stem}"


def course_files(chapter_dir: Path, exercise_dir: Path, numbers: list[int] | None = None) -> dict[Path, str]:
    """{path relative to the course folder: its text} of every file the course folder gets."""
    files = {Path("nbgrader_config.py"): CONFIG}
    chosen = [
        path for path in generate.chapters(chapter_dir) if not numbers or generate.chapter_number(path) in numbers
    ]
    if numbers and len(chosen) != len(set(numbers)):
        missing = sorted(set(numbers) - {generate.chapter_number(path) for path in chosen})
        raise CourseError(f"no chapter {', '.join(map(str, missing))} in {chapter_dir}")
    for chapter_path in chosen:
        student_path = exercise_dir / chapter_path.name
        if not student_path.is_file():
            raise CourseError(f"{student_path}: missing (run `make exercises`)")
        student = nbformat.read(student_path, as_version=4)
        chapter = nbformat.read(chapter_path, as_version=4)
        notebook = course_notebook(student, chapter, generate.chapter_number(chapter_path), where=str(student_path))
        files[Path("source") / assignment_name(chapter_path) / chapter_path.name] = generate.render(notebook)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/notebooks/nbgrader_course.py",
        description="Write an nbgrader course folder (nbgrader_config.py, source/<assignment>/) from the chapters.",
    )
    parser.add_argument(
        "course", nargs="?", type=Path, default=DEFAULT_COURSE, help="the course folder (default: _build/nbgrader)"
    )
    parser.add_argument("--chapter", type=int, action="append", help="only this chapter (repeatable; default: all)")
    parser.add_argument(
        "--chapters-dir", type=Path, default=ROOT / "notebooks", help="folder of the chapters NN_*.ipynb"
    )
    parser.add_argument(
        "--exercises-dir", type=Path, help="folder of the student notebooks (default: CHAPTERS_DIR/exercises)"
    )
    arguments = parser.parse_args(argv)
    exercise_dir = arguments.exercises_dir or arguments.chapters_dir / "exercises"
    try:
        files = course_files(arguments.chapters_dir, exercise_dir, arguments.chapter)
    except CourseError as error:
        print(f"nbgrader_course: {error}", file=sys.stderr)
        return 1
    for relative, text in files.items():
        path = arguments.course / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assignments = sorted({relative.parts[1] for relative in files if relative.parts[0] == "source"})
    print(f"wrote {arguments.course}: nbgrader_config.py and source/ of {', '.join(assignments)}")
    print(f"next, in that folder: nbgrader generate_assignment {assignments[0] if assignments else 'ASSIGNMENT'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
