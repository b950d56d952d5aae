"""Chapters, exercise notebooks and nbval.

* Every chapter (``notebooks/NN_*.ipynb``, and the sample ``tests/sample_exercises/00_sample.ipynb``)
  passes strict ``pytest --nbval`` with the repository's sanitizer: all outputs reproduce, or
  the cell is tagged ``nbval-ignore-output`` (with the reason in its metadata).
* Every generated exercise notebook fails ``--nbval-lax`` exactly on its check cells, each
  failure saying "not implemented yet".
* Filling the stubs back in gives the chapter's code (and, for the sample, passes nbval-lax).
* The committed exercise notebooks equal what the generator writes now; no check cell has lost
  its stored passing output; every chapter cell has been executed; nbval's instructions are
  cell tags (no ``# NBVAL_*`` comment lines, which readers would see), each ignore tag with its reason.

nbval runs in a subprocess per notebook (``python -m pytest --nbval ...``) so each failure names
the notebook and shows nbval's own report. Those tests carry the ``nbval`` marker; the rest
read notebooks without running them and take well under a second.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from attention_book.exercises import NOT_IMPLEMENTED, PASS_MARK, REGISTRY, load_all
from tests.helpers import ROOT, SAMPLE_EXERCISES, tool

generate = tool("generate_exercises")  # tools/notebooks/generate_exercises.py
SANITIZE = ROOT / "nbval_sanitize.cfg"
SAMPLE = SAMPLE_EXERCISES
# (folder of chapters, folder of their exercise notebooks)
SOURCES = [(ROOT / "notebooks", ROOT / "notebooks" / "exercises"), (SAMPLE, SAMPLE / "exercises")]
CHAPTERS = [chapter for source, _ in SOURCES for chapter in generate.chapters(source)]
EXERCISE_NOTEBOOKS = [
    pytest.param(chapter, target / chapter.name, id=(target / chapter.name).relative_to(ROOT).as_posix())
    for source, target in SOURCES
    for chapter in generate.chapters(source)
]
NOTEBOOK_TIMEOUT_S = 900


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _id(value) -> str:
    return value.relative_to(ROOT).as_posix() if isinstance(value, Path) else str(value)


def _read(path: Path):
    return nbformat.read(path, as_version=4)


def _code_cells(notebook) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


# ---------------------------------------------------------------------------------
# Running nbval


@dataclass
class NbvalRun:
    returncode: int
    output: str
    failures: dict[int, str]  # code-cell number (nbval's "Cell N") -> failure text
    passed: int

    def report(self) -> str:
        return self.output[-6000:]


def run_nbval(notebook: Path, mode: str, tmp_path: Path, extra_environment: dict[str, str] | None = None) -> NbvalRun:
    """``python -m pytest --nbval|--nbval-lax notebook`` in a subprocess, with the sanitizer."""
    report = tmp_path / f"{notebook.stem}-{mode}.xml"
    command = [
        sys.executable, "-m", "pytest", f"--{mode}", "--nbval-current-env",
        "--nbval-sanitize-with", str(SANITIZE), "--nbval-kernel-startup-timeout", "180",
        "-p", "no:cacheprovider", "--color=no", "-q", "-o", "addopts=", f"--junitxml={report}",
        str(notebook),
    ]  # fmt: skip
    # Never let the Colab setup cell install anything while testing.
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ATTENTION_BOOK_")}
    environment.update(extra_environment or {})
    result = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, timeout=NOTEBOOK_TIMEOUT_S
    )
    failures: dict[int, str] = {}
    passed = 0
    if report.is_file():
        for case in ElementTree.parse(report).getroot().iter("testcase"):
            match = re.search(r"Cell (\d+)", case.get("name", ""))
            problem = case.find("failure")
            if problem is None:
                problem = case.find("error")
            if problem is None:
                passed += case.find("skipped") is None
                continue
            cell = int(match.group(1)) if match else -1
            failures[cell] = f"{problem.get('message', '')}\n{problem.text or ''}"
    return NbvalRun(result.returncode, result.stdout + result.stderr, failures, passed)


@pytest.mark.nbval
@pytest.mark.parametrize("chapter", CHAPTERS, ids=_id)
def test_chapter_passes_nbval(chapter, tmp_path):
    run = run_nbval(chapter, "nbval", tmp_path)
    assert run.returncode == 0 and not run.failures, (
        f"{_rel(chapter)} fails `pytest --nbval --nbval-sanitize-with nbval_sanitize.cfg` "
        f"(re-execute it, or tag a cell whose output varies by nature nbval-ignore-output, with the reason in its metadata):\n{run.report()}"
    )
    assert run.passed == len(_code_cells(_read(chapter)))


STORED_SEED_CHAPTERS = [chapter for chapter in CHAPTERS if "StoredRuns(" in chapter.read_text(encoding="utf-8")]


@pytest.mark.parametrize("chapter", STORED_SEED_CHAPTERS, ids=_id)
def test_chapter_holds_with_every_seed_trained_on_another_machine(chapter, site):
    """``ATTENTION_BOOK_SEEDS=train``, which the chapters offer readers: no seed is loaded, every
    seed is trained. The test site is built so, under the second numerical configuration
    (``tools/site/build_book.py --other-machine --train-seeds``, tests/book/site_support.py), and the
    build fails on any error: every assert of the chapter held for a reader who trains every seed
    on another machine. Here the chapter's own report, on its built page, must say that every run
    was trained (nbval runs the chapter with the stored seeds on this machine). The page, not
    ``_build/jupyter_execute``: where jupyter-book reuses its execution cache, that folder holds
    the chapter as committed, while the page shows the cached outputs."""
    assert STORED_SEED_CHAPTERS, "no chapter loads stored seeds any more: remove this test"
    page = site / "notebooks" / f"{chapter.stem}.html"
    assert page.is_file(), f"the site has no page for {_rel(chapter)} at {page}"
    text = page.read_text(encoding="utf-8")
    trained, loaded = text.count("every run above trained here"), text.count("loaded, not trained here")
    assert trained + loaded, f"{_rel(chapter)}'s page shows no report of where its seeds came from"
    assert not loaded, (
        f"{_rel(chapter)}'s page was built with stored seeds loaded ({loaded} report(s) say so), "
        "not with every seed trained"
    )


def _check_cell_numbers(notebook) -> list[int]:
    return [number for number, cell in enumerate(_code_cells(notebook)) if generate.is_check_cell(cell)]


@pytest.mark.nbval
@pytest.mark.parametrize("chapter, exercises", EXERCISE_NOTEBOOKS)
def test_exercise_notebook_fails_exactly_on_its_exercises(chapter, exercises, tmp_path):
    assert exercises.is_file(), f"{_rel(exercises)} is missing: run `make exercises`"
    checks = _check_cell_numbers(_read(exercises))
    run = run_nbval(exercises, "nbval-lax", tmp_path)
    assert sorted(run.failures) == checks, (
        f"{_rel(exercises)} should fail on exactly its {len(checks)} check cells (code cells {checks}), "
        f"but failed on code cells {sorted(run.failures)}. A cell other than a check cell that calls an exercise's "
        f"function fails too: only check cells may call them.\n{run.report()}"
    )
    for number, failure in run.failures.items():
        assert NOT_IMPLEMENTED in failure, (
            f"{_rel(exercises)} cell {number} fails without '{NOT_IMPLEMENTED}':\n{failure}"
        )


# ---------------------------------------------------------------------------------
# Filling the stubs back in


def fill(exercises, chapter):
    """The exercise notebook with every solution region taken from the chapter again."""
    filled = nbformat.from_dict(exercises)  # a copy
    chapter_solutions = [cell.source for cell in _code_cells(chapter) if generate.has_solution(cell.source)]
    student_solutions = [cell for cell in _code_cells(filled) if generate.has_solution(cell.source)]
    assert len(chapter_solutions) == len(student_solutions)
    for cell, source in zip(student_solutions, chapter_solutions):
        cell.source = generate.fill_source(cell.source, source)
    return filled


@pytest.mark.parametrize("chapter, exercises", EXERCISE_NOTEBOOKS)
def test_filling_in_the_solutions_gives_back_the_chapter(chapter, exercises):
    """The filled exercise notebook runs exactly the chapter's code and expects the chapter's
    check outputs, so it passes nbval-lax because the chapter passes nbval (proved by running
    only the sample, below: running every chapter again would cost minutes)."""
    assert exercises.is_file(), f"{_rel(exercises)} is missing: run `make exercises`"
    chapter_nb, exercise_nb = _read(chapter), _read(exercises)
    filled = fill(exercise_nb, chapter_nb)
    assert [cell.source for cell in _code_cells(filled)] == [cell.source for cell in _code_cells(chapter_nb)]
    for mine, theirs in zip(_code_cells(filled), _code_cells(chapter_nb)):
        if generate.is_check_cell(theirs):
            # the same outputs, except that the student's are labelled as what a passing answer prints
            assert [generate.unlabel(output.get("text", "")) for output in mine.outputs] == [
                output.get("text", "") for output in theirs.outputs
            ]
            assert mine.execution_count == theirs.execution_count
        else:
            assert mine.outputs == [] and mine.execution_count is None
    # Stubs were really stubs: each solution cell of the student version differs from the chapter's.
    student = [cell.source for cell in _code_cells(exercise_nb) if generate.has_solution(cell.source)]
    solutions = [cell.source for cell in _code_cells(chapter_nb) if generate.has_solution(cell.source)]
    for stub, solution in zip(student, solutions):
        assert stub != solution and "NotImplementedError" in stub


@pytest.mark.nbval
def test_the_sample_exercise_notebook_passes_nbval_once_filled_in(tmp_path):
    chapter = SAMPLE / "00_sample.ipynb"
    filled = fill(_read(SAMPLE / "exercises" / chapter.name), _read(chapter))
    path = tmp_path / chapter.name
    nbformat.write(filled, path)
    run = run_nbval(path, "nbval-lax", tmp_path)
    assert run.returncode == 0 and not run.failures, run.report()
    assert run.passed == len(_code_cells(filled))


# ---------------------------------------------------------------------------------
# Committed notebooks


@pytest.mark.parametrize("source, target", SOURCES, ids=lambda path: _rel(path))
def test_committed_exercise_notebooks_equal_what_the_generator_writes(source, target):
    outputs, problems = generate.expected_outputs(source, target)
    assert not problems, "\n".join(problems.values())
    command = f"python tools/notebooks/generate_exercises.py {_rel(source)} {_rel(target)}"
    stale = [
        _rel(path) for path, text in outputs.items() if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"out of date: {stale}; run `{command}` (for notebooks/: `make exercises`)"
    orphans = sorted(set(generate.chapters(target)) - set(outputs)) if target.is_dir() else []
    assert not orphans, f"exercise notebooks without a chapter: {orphans}; run `{command}`"


def _all_notebooks() -> list[Path]:
    found = []
    for folder in (ROOT / "notebooks", ROOT / "tests"):
        found += [path for path in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in path.parts]
    return sorted(found)


@pytest.mark.parametrize("notebook", _all_notebooks(), ids=lambda path: _rel(path))
def test_check_cells_keep_their_stored_passing_output(notebook):
    for number, cell in enumerate(_code_cells(_read(notebook))):
        if not generate.is_check_cell(cell):
            continue
        where = f"{_rel(notebook)}, code cell {number}"
        assert cell.execution_count is not None, f"{where}: check cell without an execution count"
        assert cell.outputs, f"{where}: check cell without its stored output"
        if generate.checked_exercise(cell):
            text = "".join(output.get("text", "") for output in cell.outputs if output.output_type == "stream")
            assert len(text.splitlines()) == 1, f"{where}: a check cell prints exactly one line:\n{text}"
            if "exercises" in notebook.parts:  # a student notebook: no pass mark that was not earned
                assert text.startswith(generate.EXPECTED_LABEL + PASS_MARK), (
                    f"{where}: a student's check cell must show its stored pass line labelled "
                    f"{generate.EXPECTED_LABEL!r}, not as a pass:\n{text}"
                )
                text = generate.unlabel(text)
            assert text.startswith(PASS_MARK) and "passed." in text, (
                f"{where}: the stored output is not a pass:\n{text}"
            )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_id)
def test_every_chapter_code_cell_has_been_executed(chapter):
    """nbval silently passes a cell without an execution count: such a cell is not tested."""
    missing = [number for number, cell in enumerate(_code_cells(_read(chapter))) if cell.execution_count is None]
    assert not missing, f"{_rel(chapter)}: code cells {missing} have never been executed; execute the notebook in place"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_id)
def test_saved_widgets_carry_the_current_widget_javascript(chapter):
    """The site draws each widget from the state saved in the chapter, JavaScript included: a chapter
    whose saved module is older than src/attention_book/widgets/js/ would publish the old drawing code."""
    from attention_book.widgets._base import widget_module_source

    widgets = _read(chapter).metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    saved = [model["state"]["_esm"] for model in widgets.get("state", {}).values() if "_esm" in model.get("state", {})]
    stale = sum(source != widget_module_source() for source in saved)
    assert not stale, (
        f"{_rel(chapter)}: {stale} of {len(saved)} saved widgets hold an older widget module (widgets/js/); "
        "run `make widgets` (it rewrites the saved module in every notebook without executing them)"
    )


MARKER_LINE = re.compile(r"^\s*#\s*(NBVAL\w*|PYTEST_VALIDATE\w*)", re.IGNORECASE)
NBVAL_TAGS = {"nbval-ignore-output", "nbval-check-output", "nbval-raises-exception", "nbval-skip"}


def nbval_instruction_problems(notebook) -> list[str]:
    """What is wrong with how a notebook tells nbval what to do.

    nbval's instructions live in cell tags, never in comment lines (a reader would see those).
    A tag that looks like nbval's but is misspelt is ignored by nbval, so it is reported; an
    ignored output needs its reason in ``metadata.attention_book.ignore_output_because``.
    """
    problems = []
    for number, cell in enumerate(_code_cells(notebook)):
        for line in cell.source.splitlines():
            if MARKER_LINE.match(line):
                problems.append(f"code cell {number}: comment {line.strip()!r}; use the cell tag instead")
        tags = cell.metadata.get("tags", [])
        for tag in tags:
            if tag.lower().startswith("nbval") and tag not in NBVAL_TAGS:
                problems.append(f"code cell {number}: tag {tag!r} is not one nbval reads ({sorted(NBVAL_TAGS)})")
        reason = cell.metadata.get("attention_book", {}).get("ignore_output_because", "")
        if "nbval-ignore-output" in tags and len(reason.strip()) < 10:
            problems.append(
                f"code cell {number}: nbval-ignore-output without metadata.attention_book.ignore_output_because"
            )
    return problems


@pytest.mark.parametrize("chapter", CHAPTERS, ids=_id)
def test_nbval_instructions_are_cell_tags_with_reasons(chapter):
    problems = nbval_instruction_problems(_read(chapter))
    assert not problems, f"{_rel(chapter)}:\n" + "\n".join(problems)


def test_the_instruction_check_finds_a_comment_marker_a_misspelt_tag_and_a_missing_reason():
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("# NBVAL_IGNORE_OUTPUT\nprint(1)"),
        nbformat.v4.new_code_cell("print(2)", metadata={"tags": ["nbval_ignore_output"]}),
        nbformat.v4.new_code_cell("print(3)", metadata={"tags": ["nbval-ignore-output"]}),
        nbformat.v4.new_code_cell(
            "print(4)",
            metadata={"tags": ["nbval-ignore-output"], "attention_book": {"ignore_output_because": "timings vary"}},
        ),
    ]
    problems = nbval_instruction_problems(notebook)
    assert [problem.split(":")[0] for problem in problems] == ["code cell 0", "code cell 1", "code cell 2"], problems


def test_each_chapter_checks_exactly_its_registered_exercises():
    load_all()
    for chapter in CHAPTERS:
        number = str(int(chapter.name[:2]))
        checked = [
            generate.checked_exercise(cell) for cell in _code_cells(_read(chapter)) if generate.is_check_cell(cell)
        ]
        registered = sorted(key for key, exercise in REGISTRY.items() if exercise.chapter == number)
        assert sorted(key for key in checked if key) == registered, (
            f"{_rel(chapter)} checks {checked}, but chapter {number} registers {registered}"
        )
        assert len(set(checked)) == len(checked), f"{_rel(chapter)} checks an exercise twice"


# ---------------------------------------------------------------------------------
# nbval's own behaviour, which the book relies on (a tiny notebook, no torch)


def _output(output_type: str, **fields):
    return nbformat.from_dict({"output_type": output_type, "metadata": {}, **fields})


@pytest.mark.nbval
def test_nbval_ignores_widget_ids_and_pngs_and_the_sanitizer_blurs_what_varies(tmp_path):
    """A widget's output is a MIME bundle with a random model id and a PNG; nbval compares
    neither, only text/plain. Addresses, ids and timings are blurred by nbval_sanitize.cfg."""
    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    widget_like = nbformat.v4.new_code_cell(
        "import base64, os, uuid\n"
        "class W:\n"
        "    def _repr_mimebundle_(self, **kwargs):\n"
        "        return {'application/vnd.jupyter.widget-view+json': {'model_id': uuid.uuid4().hex, 'version_major': 2, 'version_minor': 0},\n"
        "                'image/png': base64.b64encode(os.urandom(64)).decode(), 'text/plain': '<W: open in Jupyter>'}\n"
        "W()"
    )
    widget_like.outputs = [
        _output(
            "execute_result",
            execution_count=1,
            data={
                "application/vnd.jupyter.widget-view+json": {
                    "model_id": "0" * 32,
                    "version_major": 2,
                    "version_minor": 0,
                },
                "image/png": "iVBORw0KGgo=",
                "text/plain": "<W: open in Jupyter>",
            },
        )
    ]
    varying = nbformat.v4.new_code_cell(
        "import random, time, uuid\n"
        "class Thing: pass\n"
        "print(Thing(), uuid.uuid4(), uuid.uuid4().hex)\n"
        "print(f'trained in {random.uniform(0.1, 9):.2f} s, {random.randint(2, 900)} ms per step')\n"
        "print(f'training: 100%|##| 10/10 [00:0{random.randint(1, 9)}<00:00, {random.uniform(10, 99):.2f}it/s]')\n"
        "print(f'id=\"arrow-{uuid.uuid4().hex}-0-0\"')"
    )
    varying.outputs = [
        _output(
            "stream",
            name="stdout",
            text=(
                "<__main__.Thing object at 0x7f00deadbeef> 123e4567-e89b-12d3-a456-426614174000 "
                "0123456789abcdef0123456789abcdef\n"
                "trained in 0.40 s, 12 ms per step\n"
                "training: 100%|##| 10/10 [00:03<00:00, 12.34it/s]\n"
                'id="arrow-fedcba9876543210fedcba9876543210-0-0"\n'
            ),
        )
    ]
    still_compared = nbformat.v4.new_code_cell("print('weights: 0.25 0.75')")
    still_compared.outputs = [_output("stream", name="stdout", text="weights: 0.25 0.70\n")]
    for number, cell in enumerate((widget_like, varying, still_compared), start=1):
        cell.execution_count = number
        notebook.cells.append(cell)
    path = tmp_path / "nbval_behaviour.ipynb"
    nbformat.write(notebook, path)
    run = run_nbval(path, "nbval", tmp_path)
    # The first two cells pass despite random ids, PNGs, addresses and timings; the third
    # must fail, proving the sanitizer does not blur real numbers.
    assert sorted(run.failures) == [2], run.report()
    assert run.passed == 2


# ---------------------------------------------------------------------------------
# The command the book gives students


def _student_commands() -> list[tuple[str, str]]:
    """Every ``pytest --nbval-lax ...`` command the README, the book's pages and the student notebooks
    show, as (where, command)."""
    texts = [
        (path, path.read_text(encoding="utf-8")) for path in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]
    ]
    texts += [
        (path, cell.source)
        for _, target in SOURCES
        for path in sorted(target.glob("*.ipynb"))
        for cell in _read(path).cells
    ]
    return [
        (_rel(path), command)
        for path, text in texts
        for command in re.findall(r"(?:\.venv/bin/)?pytest --nbval-lax[^`\"\\\n]*", text)
    ]


@pytest.mark.nbval
def test_the_command_students_are_given_passes_a_finished_notebook_as_written(tmp_path):
    """Run each shown command as written (only the notebook's path swapped for the filled-in sample):
    a correct answer must pass, which needs the sanitizer that strips the 'not run yet' label."""
    import shlex

    commands = _student_commands()
    assert len(commands) >= 3, commands  # README, book/exercises.md and the notebooks' banners
    chapter = SAMPLE / "00_sample.ipynb"
    filled = tmp_path / chapter.name
    nbformat.write(fill(_read(SAMPLE / "exercises" / chapter.name), _read(chapter)), filled)
    arguments_seen = set()
    for where, command in commands:
        words = shlex.split(command)
        notebook = [word for word in words if word.endswith(".ipynb")]
        assert len(notebook) == 1 and "exercises/" in notebook[0], where
        arguments_seen.add(tuple(word for word in words[1:] if word != notebook[0]))
    assert len(arguments_seen) == 1, f"the book shows students different commands: {arguments_seen}"
    arguments = list(arguments_seen.pop())
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", *arguments, "-p", "no:cacheprovider", "-o", "addopts=", str(filled)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=NOTEBOOK_TIMEOUT_S,
    )
    assert completed.returncode == 0, (
        f"`pytest {' '.join(arguments)} <a finished notebook>` fails, so students with right answers see failures:\n"
        + completed.stdout[-3000:]
    )
