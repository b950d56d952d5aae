"""Grading a class (issue 41): 200 submissions of a chapter graded as an instructor grades them.

For each chapter measured, 200 student notebooks are made from the committed student notebook,
as a class hands them in (a quarter solved, a quarter half done, a quarter with one wrong answer, a
quarter blank; each with the student's name in a comment, so no two are the same file), and
``python -m attention_book.grade --workers 2`` grades them from a fresh process, as an instructor
runs it. Measured:

* the wall time in all, and per submission (wall / 200);
* a worker's seconds per submission (wall x workers / 200), what one notebook costs;
* the fixed part of that: forking the student process, a fresh IPython shell and the notebook's
  import lines, timed on a notebook whose answers are all deleted (no check runs);
* the chapter's exercise cells' own run time: the solved notebook's import lines, answer cells and
  check cells run in one warm process, as a student's kernel runs them;
* what a Jupyter kernel start and the package import cost, for comparison (nbclient, one notebook
  with one ``import attention_book`` cell): the grader pays it once per worker, not per notebook.

The aim (issue 41): a worker's seconds per submission at most the exercise cells' own time + 2 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SUBMISSIONS = 200
WORKERS = 2
AIM_OVERHEAD_SECONDS = 2.0


def _class(name: str, count: int, folder: Path) -> None:
    from tests.unit.grade_support import solved, student_notebook, with_cell, write

    kinds = [
        lambda: solved(name),
        lambda: solved(name, only={0, 1}),
        lambda: with_cell(solved(name), "def _typo():\n    return 1\n", after=0),
        lambda: student_notebook(name),
    ]
    for index in range(count):
        notebook = kinds[index % len(kinds)]()
        first = next(cell for cell in notebook["cells"] if cell["cell_type"] == "code")
        first["source"] = f"# student {index:03d}\n" + "".join(first["source"])
        write(folder, f"student{index:03d}/{name}", notebook)


def _cells_own_time(name: str) -> float:
    """The solved notebook's import lines, answer cells and check cells in one warm process."""
    from attention_book.grade.submission import read_notebook
    from tests.unit.grade_support import solved

    notebook = solved(name)
    handle = tempfile.NamedTemporaryFile("w", suffix=".ipynb", delete=False)
    with handle:
        json.dump(notebook, handle)
    script = f"""
import json, time, sys
sys.path.insert(0, {str(ROOT)!r})
from attention_book.grade.submission import code_to_run, cell_source, _section_start
notebook = json.load(open({handle.name!r}))
cells = [c for c in notebook["cells"] if isinstance(c, dict)]
start = _section_start(cells)
imports = code_to_run(notebook)[0][1]
exec(imports, namespace := {{}})  # warm: the kernel had imported these before the exercises
sources = [cell_source(c) for c in cells[start:] if c.get("cell_type") == "code"]
begin = time.perf_counter()
for source in sources:
    exec(source, namespace)
print(json.dumps(time.perf_counter() - begin))
"""
    read_notebook(json.dumps(notebook).encode())  # the notebook is one the grader reads
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    finally:
        Path(handle.name).unlink()
    return float(done.stdout.strip().splitlines()[-1])


def _fixed_part(name: str, folder: Path) -> float:
    """Seconds to grade a notebook with every answer cell deleted (fork, shell, import lines)."""
    from attention_book.grade import Limits, grade_file
    from attention_book.grade.engine import prepare_worker
    from tests.unit.grade_support import solution_cells, student_notebook, write

    prepare_worker()
    notebook = student_notebook(name)
    doomed = {id(cell) for cell in solution_cells(notebook)}
    notebook["cells"] = [cell for cell in notebook["cells"] if id(cell) not in doomed]
    path = write(folder, f"empty-{name}", notebook)
    grade_file(path, limits=Limits())  # the first fork pays for page faults once
    times = []
    for _ in range(5):
        start = time.perf_counter()
        grade_file(path, limits=Limits())
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _kernel_start_and_import() -> float:
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import attention_book")])
    start = time.perf_counter()
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    return time.perf_counter() - start


def bench_chapter(name: str, count: int = SUBMISSIONS, workers: int = WORKERS) -> dict:
    with tempfile.TemporaryDirectory(prefix="grading-bench-") as scratch:
        folder = Path(scratch)
        _class(name, count, folder / "class")
        command = [sys.executable, "-m", "attention_book.grade", "--quiet", "--workers", str(workers)]
        command += ["--out", str(folder / "gradebook.csv"), str(folder / "class")]
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True, cwd=folder)
        wall = time.perf_counter() - start
        rows = (folder / "gradebook.csv").read_text().splitlines()
        fixed = _fixed_part(name, folder)
    own = _cells_own_time(name)
    per_worker = wall * workers / count
    return {
        "chapter": name.removesuffix(".ipynb"),
        "submissions": count,
        "workers": workers,
        "rows": len(rows) - 1,
        "wall_s": wall,
        "per_submission_s": wall / count,
        "worker_s_per_submission": per_worker,
        "fixed_s": fixed,
        "cells_own_s": own,
        "aim_s": own + AIM_OVERHEAD_SECONDS,
        "within_aim": per_worker <= own + AIM_OVERHEAD_SECONDS,
    }


def bench_grading(chapters=("01_attention_math.ipynb", "06_encoder_decoder.ipynb"), count: int = SUBMISSIONS) -> dict:
    return {
        "kernel_start_and_import_s": _kernel_start_and_import(),
        "chapters": [bench_chapter(name, count) for name in chapters],
    }


def grading_lines(results: dict) -> list[str]:
    grading = results["grading"]
    lines = [
        f"## Grading a class ({grading['chapters'][0]['submissions']} submissions per chapter, "
        f"`python -m attention_book.grade --workers {grading['chapters'][0]['workers']}`)",
        "",
        "A quarter of the notebooks solved, a quarter half done, a quarter with a harmless extra cell, a quarter "
        "blank. *Worker s / submission* is wall x workers / submissions, what one notebook costs; *fixed part* is "
        "that cost for a notebook with no answers (fork, a fresh IPython shell, the notebook's import lines); "
        "*cells' own time* is the solved notebook's answer and check cells run in a warm process, as in a "
        "student's kernel. Aim: worker seconds per submission at most the cells' own time + 2 s.",
        "",
        "| chapter | submissions | wall s | s / submission | worker s / submission | fixed part s | cells' own time s "
        "| aim s | within aim |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in grading["chapters"]:
        lines.append(
            f"| {r['chapter']} | {r['submissions']} | {r['wall_s']:.1f} | {r['per_submission_s']:.2f} | "
            f"{r['worker_s_per_submission']:.2f} | {r['fixed_s']:.2f} | {r['cells_own_s']:.2f} | {r['aim_s']:.2f} | "
            f"{'yes' if r['within_aim'] else 'NO'} |"
        )
    lines += [
        "",
        f"For comparison, a Jupyter kernel started by nbclient and `import attention_book` take "
        f"{grading['kernel_start_and_import_s']:.1f} s: the grader pays that once per worker process, and forks "
        "a fresh student process (with torch and the package already imported) for each notebook instead.",
        "",
    ]
    return lines
