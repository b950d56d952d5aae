"""``python -m attention_book.grade``: grade a class's notebooks in parallel, resumably.

    python -m attention_book.grade [--workers N] [--timeout SECONDS] --out gradebook.csv \\
        [--feedback DIR] [--chapter N] [--summary FILE] SUBMISSION...

A SUBMISSION is a notebook or a folder (every ``.ipynb`` under it). Each graded notebook's rows are
added to the gradebook as soon as it is done; a second run skips every notebook whose rows are there
with the same content hash, so a run that was interrupted resumes where it stopped.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from .engine import Row, grade_file, prepare_worker
from .gradebook import append_rows, class_summary, read_gradebook, totals, write_feedback, write_gradebook
from .sandbox import Limits
from .submission import content_hash


def find_submissions(arguments: list[str]) -> list[tuple[Path, str]]:
    """(path, the name the gradebook gives it) of every submission: a folder stands for the
    notebooks under it (checkpoints skipped), a file for itself, whatever its name."""
    found: list[tuple[Path, str]] = []
    for argument in arguments:
        path = Path(argument)
        if path.is_dir():
            notebooks = sorted(p for p in path.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
            found.extend((notebook, notebook.as_posix()) for notebook in notebooks)
        else:
            found.append((path, path.as_posix()))
    unique = dict((name, path) for path, name in found)
    return [(path, name) for name, path in unique.items()]


def _grade_one(path: Path, name: str, chapter: str | None, limits: Limits) -> list[Row]:
    return grade_file(path, name=name, chapter=chapter, limits=limits)


def _lost(path: Path, name: str, chapter: str | None) -> list[Row]:
    """The rows of a notebook during which the grader's own worker process was killed, twice."""
    try:
        sha = content_hash(path.read_bytes())
    except OSError:
        sha = ""
    message = "the grader's worker process was killed while grading this notebook (twice): does a cell kill other processes?"  # fmt: skip
    return [Row(name, chapter or "", "", points=0, max_points=0, status="error", feedback=message, sha256=sha)]


def _executor(workers: int) -> ProcessPoolExecutor:
    context = multiprocessing.get_context("fork")
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=prepare_worker)


def _run_round(todo, workers, chapter, limits, out, progress) -> list[tuple[Path, str]]:
    """Grade ``todo``; returns the submissions whose worker died (to be graded again, alone)."""
    broken: list[tuple[Path, str]] = []
    with _executor(workers) as pool:
        futures = {pool.submit(_grade_one, path, name, chapter, limits): (path, name) for path, name in todo}
        for future in as_completed(futures):
            try:
                rows = future.result()
            except BrokenProcessPool:
                broken.append(futures[future])
                continue
            append_rows(out, rows)
            progress.update(1)
    return broken


def grade_class(submissions, out: Path, *, workers: int, chapter: str | None, limits: Limits, quiet=False) -> dict:
    """Grade every submission not already in ``out`` unchanged; returns counts for the report."""
    from tqdm.auto import tqdm

    kept = read_gradebook(out)
    current = {name: content_hash(path.read_bytes()) if path.is_file() else "" for path, name in submissions}
    done = {row.submission for row in kept if current.get(row.submission) == row.sha256 and row.sha256}
    kept = [row for row in kept if row.submission in done]
    write_gradebook(out, kept)  # drops the rows of notebooks changed since (or half-written)
    todo = [(path, name) for path, name in submissions if name not in done]
    with tqdm(total=len(todo), unit="notebook", desc="grading", disable=quiet or None) as progress:
        broken = (
            _run_round(todo, max(1, min(workers, len(todo))), chapter, limits=limits, out=out, progress=progress)
            if todo
            else []
        )
        for path, name in broken:  # a worker died: each of these again in a worker of its own
            if _run_round([(path, name)], 1, chapter, limits=limits, out=out, progress=progress):
                append_rows(out, _lost(path, name, chapter))
                progress.update(1)
    rows = read_gradebook(out)
    write_gradebook(out, rows)
    return {"graded": len(todo), "skipped": len(done), "rows": rows}


def parser() -> argparse.ArgumentParser:
    described = argparse.ArgumentParser(
        prog="python -m attention_book.grade",
        description="Grade students' notebooks of the book's chapters: a gradebook (CSV) and a feedback page each.",
    )
    described.add_argument("submissions", nargs="+", metavar="SUBMISSION", help="a notebook, or a folder of them")
    described.add_argument("--out", required=True, type=Path, help="the gradebook to write (CSV); rerun to resume")
    described.add_argument("--feedback", type=Path, help="a folder for one feedback page per submission (.md, .html)")
    described.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="notebooks graded at once")
    described.add_argument("--timeout", type=float, default=120.0, help="seconds for a notebook's cells, and per check")
    described.add_argument("--memory-mb", type=int, default=4096, help="memory a notebook may use (MB)")
    described.add_argument("--chapter", help="the chapter this assignment is: other chapters' notebooks get an error")
    described.add_argument("--summary", type=Path, help="append a Markdown table of the totals to this file")
    described.add_argument("--quiet", action="store_true", help="no progress bar")
    return described


def main(argv: list[str] | None = None) -> int:
    arguments = parser().parse_args(argv)
    if arguments.workers < 1 or arguments.timeout <= 0 or arguments.memory_mb < 64:
        parser().error("--workers must be at least 1, --timeout above 0 and --memory-mb at least 64")
    if not hasattr(os, "fork"):
        parser().error("grading forks a process per notebook: run it on Linux (on Windows, in WSL)")
    submissions = find_submissions(arguments.submissions)
    if not submissions:
        parser().error(f"no notebooks found in {' '.join(arguments.submissions)}")
    limits = Limits(timeout=arguments.timeout, memory_bytes=arguments.memory_mb * 2**20)
    start = time.perf_counter()
    report = grade_class(
        submissions, arguments.out, workers=arguments.workers, chapter=arguments.chapter, limits=limits,
        quiet=arguments.quiet,
    )  # fmt: skip
    rows = [row for row in report["rows"] if row.submission in {name for _, name in submissions}]
    pages = write_feedback(arguments.feedback, rows) if arguments.feedback else 0
    if arguments.summary:
        with arguments.summary.open("a", encoding="utf-8") as handle:
            handle.write(class_summary(rows))
    points, most = totals(rows)
    print(
        f"graded {report['graded']} notebook(s), skipped {report['skipped']} unchanged, in "
        f"{time.perf_counter() - start:.1f} s: {points} of {most} points in all -> {arguments.out}"
        + (f"; {pages} feedback page(s) in {arguments.feedback}" if arguments.feedback else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
