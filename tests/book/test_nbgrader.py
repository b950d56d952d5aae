"""The nbgrader course (`make nbgrader`, tools/notebooks/nbgrader_course.py), and nbgrader grading it.

* Every chapter's source notebook is checked cell by cell against nbgrader's metadata schema (version 3)
  and against the student notebook and the exercise registry: one solution cell and one locked test
  cell per exercise, worth the registry's points; every other cell locked; outputs cleared; and what
  nbgrader's own ClearSolutions makes of it is the student notebook, stub for stub.
* End to end with nbgrader itself, on chapter 3 (the student notebook that executes fastest: about
  8 s, where chapter 2 takes 10 s and the others 18 s to 2 min): the course script, ``nbgrader
  generate_assignment``, five submissions (solved; wrong answers; blank; a test cell edited to print
  a pass and another deleted; solution cells that redefine ``check`` and ``assert_passes``), ``nbgrader
  autograde``, and the points in nbgrader's gradebook equal, test cell by test cell, those of
  attention_book.grade.grade_file.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from attention_book.exercises import REGISTRY, get, load_all
from tests.helpers import ROOT, tool

course = tool("nbgrader_course")  # tools/notebooks/nbgrader_course.py
generate = tool("generate_exercises")

CHAPTERS = sorted(generate.chapters(ROOT / "notebooks"))
ASSIGNMENT = "ch03_soft_vs_hard"
NOTEBOOK = "03_soft_vs_hard.ipynb"
# The wrong answers: plausible mistakes, each caught by its exercise's checker.
WRONG = {
    "answer_3_1": "def hardmax(scores):\n    return torch.softmax(scores, dim=-1)  # a softmax, not a hardmax\n",
    "answer_3_3": (
        "def beta_for_top_weight(scores, target=0.9):\n"
        "    # the two-key formula, used for any number of keys (and ties divide by zero)\n"
        "    top, second = torch.topk(scores, 2).values.tolist()\n"
        "    return float(torch.log(torch.tensor(target / (1 - target)))) / (top - second)\n"
    ),
}
TAMPER = '\n\ncheck = lambda *a: print("✓")\nassert_passes = lambda *a, **k: None\n'
# What each submission must score, test cell by test cell (so the comparison below is not vacuous).
EXPECTED = {
    "solved": {"3.1": 1, "3.2": 1, "3.3": 1, "3.4": 1},
    "wrong": {"3.1": 0, "3.2": 1, "3.3": 0, "3.4": 0},
    "blank": {"3.1": 0, "3.2": 0, "3.3": 0, "3.4": 0},
    "edited": {"3.1": 0, "3.2": 1, "3.3": 0, "3.4": 0},
    "tampered": {"3.1": 0, "3.2": 0, "3.3": 1, "3.4": 0},
}


def _grader(cell) -> dict:
    return cell.metadata["nbgrader"]


def _without_markers(source: str, markers: tuple[str, str]) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip() not in markers).rstrip()


@pytest.fixture(scope="module")
def course_files():
    """{path in the course folder: text} for every chapter, as `make nbgrader` writes it."""
    return course.course_files(ROOT / "notebooks", ROOT / "notebooks" / "exercises")


def _source_notebook(course_files, chapter: Path):
    return nbformat.reads(course_files[Path("source") / f"ch{chapter.stem}" / chapter.name], as_version=4)


def test_the_course_has_a_config_and_one_assignment_per_chapter(course_files):
    expected = {Path("source") / f"ch{chapter.stem}" / chapter.name for chapter in CHAPTERS}
    assert set(course_files) == {Path("nbgrader_config.py")} | expected
    config = course_files[Path("nbgrader_config.py")]
    assert "c.ClearSolutions.code_stub" in config and "c.Execute.timeout" in config
    assert course.course_files(ROOT / "notebooks", ROOT / "notebooks" / "exercises") == course_files  # deterministic


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_every_cell_has_the_nbgrader_metadata_of_its_role(course_files, chapter):
    notebook = _source_notebook(course_files, chapter)
    student = nbformat.read(ROOT / "notebooks" / "exercises" / chapter.name, as_version=4)
    load_all()
    number = str(generate.chapter_number(chapter))
    exercises = [key for key, exercise in REGISTRY.items() if exercise.chapter == number]
    exercises.sort(key=lambda key: int(key.split(".")[1]))
    assert len(notebook.cells) == len(student.cells)
    solutions = [cell for cell in notebook.cells if _grader(cell)["solution"]]
    tests = [cell for cell in notebook.cells if _grader(cell)["grade"]]
    locked = [cell for cell in notebook.cells if not _grader(cell)["solution"] and not _grader(cell)["grade"]]
    assert [_grader(cell)["grade_id"] for cell in solutions] == [f"answer_{key.replace('.', '_')}" for key in exercises]
    assert [_grader(cell)["grade_id"] for cell in tests] == [f"test_{key.replace('.', '_')}" for key in exercises]
    assert len(solutions) + len(tests) + len(locked) == len(notebook.cells)
    for cell in solutions:
        assert _grader(cell) == {**_grader(cell), "grade": False, "locked": False, "schema_version": 3}
        assert cell.source.count(course.BEGIN) == cell.source.count(course.END) >= 1
        assert not any(line.strip() in (generate.BEGIN, generate.END) for line in cell.source.splitlines())
    for cell, key in zip(tests, exercises):
        assert _grader(cell) == {**_grader(cell), "solution": False, "locked": True, "points": get(key).points}
        call = f'assert_passes("{key}", {get(key).answer_expression})'
        assert cell.source == f"from attention_book.grade import assert_passes\n{call}"
    for cell in locked:
        assert _grader(cell)["locked"] is True and "points" not in _grader(cell)
    assert any(cell.source.strip() == f"summary({number})" for cell in locked)
    for cell in notebook.cells:
        assert _grader(cell)["schema_version"] == 3
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    ids = [_grader(cell)["grade_id"] for cell in notebook.cells]
    assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda path: path.stem)
def test_nbgrader_reads_the_notebook_and_releases_the_student_notebook(course_files, chapter):
    """nbgrader's validator accepts the metadata; its ClearSolutions, with the course's stub, gives
    back the student notebook's solution cells; without the markers the cells are the chapter's code."""
    pytest.importorskip("nbgrader")
    from nbgrader.nbgraderformat import MetadataValidator
    from nbgrader.preprocessors import ClearSolutions

    notebook = _source_notebook(course_files, chapter)
    MetadataValidator().validate_nb(notebook)
    student = nbformat.read(ROOT / "notebooks" / "exercises" / chapter.name, as_version=4)
    chapter_notebook = nbformat.read(chapter, as_version=4)
    released, _ = ClearSolutions(code_stub={"python": course.CODE_STUB}).preprocess(copy.deepcopy(notebook), {})
    solutions = [
        cell.source
        for cell in chapter_notebook.cells
        if cell.cell_type == "code" and generate.has_solution(cell.source)
    ]
    places = [index for index, cell in enumerate(notebook.cells) if _grader(cell)["solution"]]
    assert [index for index, cell in enumerate(student.cells) if generate.has_solution(cell.source)] == places
    assert len(solutions) == len(places)
    for index, solution in zip(places, solutions):
        exercise = _grader(notebook.cells[index])["grade_id"].removeprefix("answer_").replace("_", ".")
        stub = student.cells[index].source.replace(
            f'"Exercise {exercise}: not implemented yet"', '"not implemented yet"'
        )
        assert released.cells[index].source == _without_markers(stub, (generate.BEGIN, generate.END))
        code = _without_markers(notebook.cells[index].source, (course.BEGIN, course.END))
        assert code == _without_markers(solution, (generate.BEGIN, generate.END))


def test_a_chapter_that_breaks_the_pattern_is_named_with_its_cell():
    student = nbformat.read(ROOT / "notebooks" / "exercises" / NOTEBOOK, as_version=4)
    chapter = nbformat.read(ROOT / "notebooks" / NOTEBOOK, as_version=4)
    check_index = next(index for index, cell in enumerate(student.cells) if generate.is_check_cell(cell))
    without_check = copy.deepcopy(student)
    del without_check.cells[check_index]
    with pytest.raises(
        course.CourseError, match=rf"x\.ipynb, cell {check_index - 1}: a solution cell with no check cell"
    ):
        course.course_notebook(without_check, chapter, 3, "x.ipynb")
    one_line = copy.deepcopy(chapter)
    cell = next(cell for cell in one_line.cells if generate.has_solution(cell.source))
    cell.source = "# BEGIN SOLUTION\ndef hardmax(scores): return scores\n# END SOLUTION"
    with pytest.raises(course.CourseError, match=r"x\.ipynb, cell \d+: `def hardmax` is written on one line"):
        course.course_notebook(student, one_line, 3, "x.ipynb")
    with pytest.raises(course.CourseError, match=r"exercises registered but without cells \['2.1'"):
        course.course_notebook(student, chapter, 2, "x.ipynb")


def test_the_script_refuses_a_chapter_that_does_not_exist_and_writes_nothing(tmp_path, capsys):
    assert course.main([str(tmp_path / "course"), "--chapter", "3", "--chapter", "9"]) == 1
    assert "no chapter 9 in" in capsys.readouterr().err
    assert not (tmp_path / "course").exists()


# ---------------------------------------------------------------------------------
# End to end: nbgrader generate_assignment and autograde, against attention_book.grade

# The submissions are autograded by two nbgrader processes at once, each in a copy of the course
# folder with a gradebook of its own (SQLite is not for two writers): half the wall time on 2 cores.
GROUPS = (("solved", "wrong", "blank"), ("edited", "tampered"))


def _nbgrader(*arguments: str, cwd: Path) -> subprocess.Popen:
    # nbgrader runs the `alembic` command of its environment: the interpreter's bin folder goes first on PATH.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "OMP_NUM_THREADS": "1"}  # one torch thread per kernel, as in make test
    command = [sys.executable, "-m", "nbgrader", *arguments, "--log-level=WARN"]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process: subprocess.Popen, timeout: float) -> str:
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"{' '.join(process.args[2:])} failed:\n{output[-4000:]}"
    return output


def _submissions(folder: Path) -> dict[str, nbformat.NotebookNode]:
    """The five students' notebooks, each made from the released notebook as a student would."""
    released = nbformat.read(folder / "release" / ASSIGNMENT / NOTEBOOK, as_version=4)
    source = nbformat.read(folder / "source" / ASSIGNMENT / NOTEBOOK, as_version=4)
    markers = (course.BEGIN, course.END)
    answers = {
        _grader(c)["grade_id"]: _without_markers(c.source, markers) for c in source.cells if _grader(c)["solution"]
    }
    stubs = {_grader(c)["grade_id"]: c.source for c in released.cells if _grader(c)["solution"]}

    def edited(sources: dict[str, str | None]):  # grade id -> new source, or None: the cell deleted
        notebook = copy.deepcopy(released)
        for cell in notebook.cells:
            cell.source = sources.get(_grader(cell)["grade_id"], cell.source)
        notebook.cells = [cell for cell in notebook.cells if cell.source is not None]
        return notebook

    return {
        "solved": edited(answers),
        "wrong": edited({**WRONG, "answer_3_2": answers["answer_3_2"]}),
        "blank": released,
        # a test cell edited to print a pass (3.1, unsolved) and one deleted (3.2, solved)
        "edited": edited({"test_3_1": 'print("✓ passed")', "answer_3_2": answers["answer_3_2"], "test_3_2": None}),
        "tampered": edited({"answer_3_1": stubs["answer_3_1"] + TAMPER, "answer_3_3": answers["answer_3_3"] + TAMPER}),
    }


def _nbgrader_points(folder: Path, students: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """{student: {exercise: points}} from nbgrader's gradebook, one entry per test cell."""
    from nbgrader.api import Gradebook

    points = {}
    with Gradebook(f"sqlite:///{folder / 'gradebook.db'}") as gradebook:
        for student in students:
            submission = gradebook.find_submission_notebook(Path(NOTEBOOK).stem, ASSIGNMENT, student)
            grades = {grade.name.removeprefix("test_").replace("_", "."): grade for grade in submission.grades}
            assert {key: grade.max_score for key, grade in grades.items()} == {key: get(key).points for key in grades}
            assert not any(grade.needs_manual_grade for grade in grades.values()), student
            points[student] = {key: grade.score for key, grade in grades.items()}
    return points


@pytest.mark.nbval
def test_nbgrader_autograde_gives_the_points_of_our_grader(tmp_path):
    pytest.importorskip("nbgrader")
    from attention_book.grade import Limits, grade_file

    folder = tmp_path / "course"
    assert course.main([str(folder), "--chapter", "3"]) == 0  # what `make nbgrader` runs, for one chapter
    written = sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*") if path.is_file())
    assert written == ["nbgrader_config.py", f"source/{ASSIGNMENT}/{NOTEBOOK}"]
    _finish(_nbgrader("generate_assignment", ASSIGNMENT, cwd=folder), timeout=300)
    submissions = _submissions(folder)
    folders = [folder, tmp_path / "course-b"]
    shutil.copytree(folder, folders[1])
    paths = {}
    for students, root in zip(GROUPS, folders):
        for student in students:
            paths[student] = root / "submitted" / student / ASSIGNMENT / NOTEBOOK
            paths[student].parent.mkdir(parents=True)
            nbformat.write(submissions[student], paths[student])
    autogrades = [_nbgrader("autograde", ASSIGNMENT, cwd=root) for root in folders]
    try:  # our grader meanwhile, on the same files
        rows = {student: grade_file(path, limits=Limits(timeout=120)) for student, path in paths.items()}
    finally:
        outputs = [_finish(process, timeout=600) for process in autogrades]
    assert {
        student: {row.exercise: row.points for row in student_rows} for student, student_rows in rows.items()
    } == EXPECTED
    theirs = {}
    for students, root in zip(GROUPS, folders):
        theirs.update(_nbgrader_points(root, students))
    assert theirs == EXPECTED, "\n".join(output[-3000:] for output in outputs)
    # nbgrader ran the test cells as the instructor wrote them: the edited one's source put back, the
    # deleted one added back (c.OverwriteCells.add_missing_cells in the course's nbgrader_config.py).
    graded = nbformat.read(folders[1] / "autograded" / "edited" / ASSIGNMENT / NOTEBOOK, as_version=4)
    tests = {_grader(cell)["grade_id"]: cell for cell in graded.cells if _grader(cell).get("grade")}
    assert tests["test_3_1"].source.startswith("from attention_book.grade import assert_passes")
    assert "not implemented yet" in "".join(output.get("text", "") for output in tests["test_3_1"].outputs)
    assert "was missing from the submission" in tests["test_3_2"].source
