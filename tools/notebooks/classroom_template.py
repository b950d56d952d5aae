"""Write a GitHub Classroom assignment template for each chapter's exercises.

Usage (the Makefile's ``classroom`` target)::

    python tools/notebooks/classroom_template.py                  # every chapter -> _build/classroom/
    python tools/notebooks/classroom_template.py 1 3              # chapters 1 and 3 (or 01_attention_math)
    python tools/notebooks/classroom_template.py --out DIR --package "attention-book @ git+https://...@TAG"

For every student notebook ``notebooks/exercises/NN_name.ipynb`` this writes ``OUT/NN_name/``, the
content of a repository an instructor pushes to GitHub, marks as a template and creates a Classroom
assignment from (the steps: the book's teaching guide):

* ``NN_name.ipynb``: the student notebook, copied unchanged;
* ``README.md``: for the student: how to work (Colab or their own machine), how to hand in (push),
  where the score is (the Actions run's summary page, the feedback artifact, Classroom's points);
* ``requirements.txt``: what the grading workflow installs, for working on one's own machine;
* ``.gitignore``: the grader's outputs, when a student grades the notebook locally;
* ``.github/workflows/classroom.yml``: on every push (and by hand), on ubuntu-latest: install CPU
  PyTorch and the book's package, grade the notebook once (``python -m attention_book.grade``, its
  totals and the feedback page on the run's summary page), upload the feedback as an artifact, then
  one ``classroom-resources/autograding-command-grader`` step per exercise (its points from the
  exercise registry; the command ``python -m attention_book.grade.classroom passed gradebook.csv N.M``
  exits 0 iff that exercise passed) and ``classroom-resources/autograding-grading-reporter``, which
  writes the points on the job's check run, where Classroom reads them. The reporter looks for the
  check run ``run-autograding-tests`` (the job's id) and reads each step's result from the
  environment variable ``<STEP ID in capitals>_RESULTS``.

The package installed is the book's repository named in ``_config.yml`` (``--package`` names another,
e.g. a release tag, so that the grading does not change during a course). A chapter's folder is
replaced whole. tests/book/test_classroom.py lints every workflow with actionlint and runs chapter 1's
commands on a partly solved notebook.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import nbformat
import sync_headers  # tools/notebooks/sync_headers.py: the repository's URL and chapter 7's data packages

from attention_book.exercises import REGISTRY, load_all  # the exercises' titles and points

ROOT = Path(__file__).resolve().parents[2]

EXERCISES = ROOT / "notebooks" / "exercises"
DEFAULT_OUT = ROOT / "_build" / "classroom"
TORCH_CPU = "python -m pip install torch --index-url https://download.pytorch.org/whl/cpu"
WORKFLOW = Path(".github") / "workflows" / "classroom.yml"
GRADE_TIMEOUT_MINUTES = 2  # each exercise's command only reads gradebook.csv (a few seconds, importing torch)


def default_package() -> str:
    url, branch = sync_headers.repository()
    return f"attention-book @ git+{url}@{branch}"


def chapter_exercises(chapter: int) -> list[str]:
    load_all()
    ids = [exercise_id for exercise_id in REGISTRY if exercise_id.split(".")[0] == str(chapter)]
    return sorted(ids, key=lambda exercise_id: tuple(int(part) for part in exercise_id.split(".")))


def chapter_title(notebook: Path) -> str:
    """The chapter's title ("1. Attention as a weighted sum") from the student notebook's header cell."""
    first = nbformat.read(notebook, as_version=4).cells[0].source.strip().splitlines()[0]
    return first.removeprefix("# ").removesuffix(": exercises").strip()


def install_commands(chapter: int, package: str) -> list[str]:
    commands = [TORCH_CPU, f'python -m pip install "{package}"']
    extra = sync_headers.EXTRA_PACKAGES.get(chapter, [])
    if extra:
        commands.append("python -m pip install --no-deps " + " ".join(extra))
    return commands


def step_id(exercise_id: str) -> str:
    """The step id of an exercise's grader: ``exercise-1-1`` (ids take letters, digits, - and _)."""
    return "exercise-" + exercise_id.replace(".", "-")


def grade_command(notebook_name: str, chapter: int) -> str:
    return (
        f"python -m attention_book.grade {notebook_name} --chapter {chapter} --out gradebook.csv "
        '--feedback feedback --summary "$GITHUB_STEP_SUMMARY" --quiet'
    )


def exercise_command(exercise_id: str) -> str:
    return f"python -m attention_book.grade.classroom passed gradebook.csv {exercise_id}"


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _exercise_steps(chapter: int) -> list[str]:
    lines = []
    for exercise_id in chapter_exercises(chapter):
        exercise = REGISTRY[exercise_id]
        name = f"Exercise {exercise_id}: {exercise.title}"
        lines += [
            f"      - name: {_quoted(name)}",
            f"        id: {step_id(exercise_id)}",
            "        uses: classroom-resources/autograding-command-grader@v1",
            "        with:",
            f"          test-name: {_quoted(name)}",
            f"          command: {exercise_command(exercise_id)}",
            f"          timeout: {GRADE_TIMEOUT_MINUTES}",
            f"          max-score: {exercise.points}",
        ]
    return lines


def _reporter_step(chapter: int) -> list[str]:
    ids = [step_id(exercise_id) for exercise_id in chapter_exercises(chapter)]
    lines = [
        "      - name: Autograding Reporter",
        "        uses: classroom-resources/autograding-grading-reporter@v1",
        "        env:",
    ]
    lines += [f'          {ident.upper()}_RESULTS: "${{{{ steps.{ident}.outputs.result }}}}"' for ident in ids]
    lines += ["        with:", f"          runners: {','.join(ids)}"]
    return lines


def workflow(notebook: Path, package: str) -> str:
    """The text of ``.github/workflows/classroom.yml`` for one chapter's student notebook."""
    chapter = sync_headers.chapter_number(notebook)
    stem = notebook.stem
    install = "\n".join(f"          {command}" for command in install_commands(chapter, package))
    head = f"""\
# GitHub Classroom's autograding of chapter {chapter}'s exercises ({chapter_title(notebook)}).
# Written by tools/notebooks/classroom_template.py of the book ({sync_headers.repository()[0]}).
# Every push grades {notebook.name} once with the book's grader, shows the points and the feedback on
# the run's summary page, uploads the feedback, and reports each exercise's points to GitHub Classroom.
name: Autograding Tests

on:
  push:
  workflow_dispatch:
  repository_dispatch:  # as in the workflow Classroom itself writes

permissions:
  checks: write  # the reporter writes the points on this job's check run, where Classroom reads them
  actions: read  # the reporter looks up this workflow run
  contents: read  # checkout

jobs:
  run-autograding-tests:  # the reporter looks for the check run of exactly this name
    runs-on: ubuntu-latest
    if: github.actor != 'github-classroom[bot]'  # not the commit that creates the student's repository
    timeout-minutes: 30
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - name: Install PyTorch (CPU) and the book's package
        run: |
{install}
      - name: Grade the notebook
        run: {grade_command(notebook.name, chapter)}
      - name: Show the feedback on the run's summary page
        run: cat feedback/{stem}.md >> "$GITHUB_STEP_SUMMARY"
      - name: Upload the feedback
        uses: actions/upload-artifact@v4
        with:
          name: feedback
          path: |
            feedback/
            gradebook.csv
          if-no-files-found: error
"""
    return head + "\n".join(_exercise_steps(chapter) + _reporter_step(chapter)) + "\n"


def readme(notebook: Path, package: str) -> str:
    """The student's README.md."""
    chapter = sync_headers.chapter_number(notebook)
    title = chapter_title(notebook)
    rows = [f"| {i} | {REGISTRY[i].title} | {REGISTRY[i].points} |" for i in chapter_exercises(chapter)]
    total = sum(REGISTRY[i].points for i in chapter_exercises(chapter))
    install = "\n".join(install_commands(chapter, package) + ["python -m pip install jupyterlab"])
    grade = grade_command(notebook.name, chapter).replace(' --summary "$GITHUB_STEP_SUMMARY"', "")
    table = "\n".join(["| Exercise | Title | Points |", "| --- | --- | --- |", *rows])
    return README.format(
        chapter=chapter, title=title, name=notebook.name, stem=notebook.stem, table=table, total=total,
        install=install, grade=grade, first=chapter_exercises(chapter)[0],
    )  # fmt: skip


README = """\
# Chapter {title}: exercises

Your assignment is the notebook **`{name}`**: chapter {chapter}'s exercises of *Attention, from the
ground up*. Each exercise asks you to write a function; its check cell tests your code on fresh
random inputs and prints one line, either that the exercise passed or what is wrong, with a hint.

{table}

In all: {total} points.

## How to work

1. Open `{name}` and run its cells from the top. At each exercise, replace the body of the
   function between `# BEGIN SOLUTION` and `# END SOLUTION` (the line `raise NotImplementedError(...)`)
   with your code, and run the check cell under it. Keep the function's name and signature: the
   grader looks your answer up by that name.
2. Commit and push the notebook, saved, under the same name and in the same place (the top folder of
   this repository). Push as often as you like: every push is graded again, and your last push counts
   (up to the deadline your instructor set).

**In Colab**: in Colab's *File > Open notebook > GitHub*, find this repository (tick *Include private
repos* and allow Colab to see it), open `{name}`, and when you are done, *File > Save a copy in
GitHub* to this repository and branch, with the same file name. The notebook's first code cell
installs the book's package in Colab.

**On your own machine** (Python 3.10 or newer):

```bash
python -m venv .venv && source .venv/bin/activate
{install}
jupyter lab {name}
```

(`requirements.txt` lists the book's package and JupyterLab; install PyTorch first with the first
command above, the CPU build, which is a much smaller download than the default.)

## Your score

Every push runs the workflow **Autograding Tests** (the *Actions* tab of this repository). Open its
latest run:

* its **summary page** shows your points, which exercises passed, and then the feedback on each
  exercise: what is wrong and a hint, the same line the check cell prints;
* the artifact **feedback** (at the bottom of the summary page) holds that feedback as a web page
  (`feedback/{stem}.html`) and the gradebook row of each exercise (`gradebook.csv`);
* the job's step *Autograding Reporter* lists the points of each exercise and the total; these points
  are what GitHub Classroom records for your instructor. The run is marked failed (a red cross) until
  every exercise passes: that only means some points are still missing.

The grader runs your notebook's import lines and its Exercises section, not the whole chapter, and
checks each function in a process of its own. So an answer that uses something defined in a cell above
the Exercises section (other than an import) passes its check cell in your notebook but not here:
define what it needs in the exercise's own cell.

To see the same result before you push (on your own machine, with the package installed):

```bash
{grade}
python -m attention_book.grade.classroom passed gradebook.csv {first}
```

The first command writes `gradebook.csv` and `feedback/{stem}.md`; the second exits with status 0 if
exercise {first} passed (the command Classroom runs for each exercise).

Do not change `.github/workflows/classroom.yml`: it is how your work is graded, and your instructor
sees every change made to it.
"""


def requirements(notebook: Path, package: str) -> str:
    chapter = sync_headers.chapter_number(notebook)
    lines = [
        "# What the grading workflow (.github/workflows/classroom.yml) installs, for working on your own machine.",
        f"# First the CPU build of PyTorch: {TORCH_CPU}",
        "# then: python -m pip install -r requirements.txt",
    ]
    extra = sync_headers.EXTRA_PACKAGES.get(chapter, [])
    if extra:
        lines.append(f"# and then (without their dependencies): python -m pip install --no-deps {' '.join(extra)}")
    lines += [package, "jupyterlab  # to work in JupyterLab; the grader does not need it"]
    return "\n".join(lines) + "\n"


GITIGNORE = """\
# What the grader writes when you run it on your own machine (README.md)
gradebook.csv
gradebook.csv.partial
feedback/
.ipynb_checkpoints/
__pycache__/
.venv/
"""


def write_template(notebook: Path, out: Path, package: str) -> Path:
    """Write ``out/NN_name/`` for one student notebook (replacing what was there); returns the folder."""
    folder = out / notebook.stem
    if folder.exists():
        shutil.rmtree(folder)
    (folder / WORKFLOW).parent.mkdir(parents=True)
    shutil.copyfile(notebook, folder / notebook.name)
    (folder / "README.md").write_text(readme(notebook, package), encoding="utf-8")
    (folder / "requirements.txt").write_text(requirements(notebook, package), encoding="utf-8")
    (folder / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
    (folder / WORKFLOW).write_text(workflow(notebook, package), encoding="utf-8")
    return folder


def select(arguments: list[str], exercises: Path = EXERCISES) -> list[Path]:
    """The student notebooks named by chapter numbers (``1``, ``01``) or stems (``01_attention_math``); all if none."""
    notebooks = sorted(exercises.glob("[0-9][0-9]_*.ipynb"))
    if not arguments:
        return notebooks
    chosen = []
    for argument in arguments:
        found = [
            notebook
            for notebook in notebooks
            if notebook.stem == argument or (argument.isdigit() and int(argument) == int(notebook.name[:2]))
        ]
        if not found:
            known = ", ".join(notebook.stem for notebook in notebooks)
            raise SystemExit(f"no student notebook for chapter {argument!r} in {exercises} (there are: {known})")
        chosen += [notebook for notebook in found if notebook not in chosen]
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="*", help="chapter numbers or notebook names (default: every chapter)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the folder to write (default: _build/classroom)")
    parser.add_argument("--package", default=default_package(), help="the pip requirement of the book's package")
    arguments = parser.parse_args(argv)
    for notebook in select(arguments.chapters):
        if not chapter_exercises(sync_headers.chapter_number(notebook)):
            raise SystemExit(f"chapter {notebook.name[:2]} has no registered exercises")
        folder = write_template(notebook, arguments.out, arguments.package)
        print(f"{folder}: {len(chapter_exercises(sync_headers.chapter_number(notebook)))} exercises")
    return 0


if __name__ == "__main__":
    sys.exit(main())
