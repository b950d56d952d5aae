"""``python -m attention_book.grade`` on a folder of submissions, as an instructor runs it (issue 41):
the gradebook, the feedback pages, parallel workers, resuming after a crash, a worker killed."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import pytest

from attention_book.grade.cli import main
from attention_book.grade.gradebook import feedback_markdown, page_name, read_gradebook
from tests.helpers import ROOT
from tests.unit.grade_support import solved, student_notebook, with_cell, write


def run_grader(*arguments, cwd, check=True):
    command = [sys.executable, "-m", "attention_book.grade", *map(str, arguments)]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if check:
        assert done.returncode == 0, done.stdout + done.stderr
    return done


def totals(gradebook):
    result: dict[str, int] = {}
    with open(gradebook, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            result[row["submission"]] = result.get(row["submission"], 0) + int(row["points"])
    return result


def class_folder(tmp_path):
    folder = tmp_path / "class"
    write(folder, "alice/01_attention_math.ipynb", solved())
    write(folder, "bob/01_attention_math.ipynb", student_notebook())
    write(folder, "carol/01_attention_math.ipynb", solved(only={1, 3}))
    return folder


def test_a_folder_of_solved_blank_and_half_done_notebooks(tmp_path):
    folder = class_folder(tmp_path)
    done = run_grader("--out", "g.csv", "--feedback", "feedback", "--workers", "2", "class", cwd=tmp_path)
    assert totals(tmp_path / "g.csv") == {
        "class/alice/01_attention_math.ipynb": 6,
        "class/bob/01_attention_math.ipynb": 0,
        "class/carol/01_attention_math.ipynb": 2,
    }
    assert "graded 3 notebook(s), skipped 0 unchanged" in done.stdout and "8 of 18 points" in done.stdout
    pages = sorted(path.name for path in (tmp_path / "feedback").iterdir())
    assert pages == sorted(f"class__{who}__01_attention_math.{kind}" for who in ("alice", "bob", "carol") for kind in ("md", "html"))  # fmt: skip
    carol = (tmp_path / "feedback" / "class__carol__01_attention_math.md").read_text()
    assert "**2 of 6 points**" in carol and "| 1.2 | 1 / 1 | passed |" in carol and "not implemented yet" in carol
    assert folder.is_dir() and not list(folder.rglob("*.csv"))  # nothing written beside the submissions


def test_a_second_run_skips_what_is_unchanged_and_grades_what_changed(tmp_path):
    folder = class_folder(tmp_path)
    run_grader("--out", "g.csv", "class", cwd=tmp_path)
    write(folder, "bob/01_attention_math.ipynb", solved(only={0}))
    write(folder, "dave/01_attention_math.ipynb", solved())
    done = run_grader("--out", "g.csv", "class", cwd=tmp_path)
    assert "graded 2 notebook(s), skipped 2 unchanged" in done.stdout
    assert totals(tmp_path / "g.csv")["class/bob/01_attention_math.ipynb"] == 1
    assert len(read_gradebook(tmp_path / "g.csv")) == 4 * 6  # no stale rows of bob's first version


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path):
    folder = class_folder(tmp_path)
    write(folder, "zed/01_attention_math.ipynb", with_cell(solved(), "while True:\n    pass\n"))
    command = [sys.executable, "-m", "attention_book.grade", "--workers", "1", "--out", "g.csv", "class"]
    grader = subprocess.Popen(command, cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(totals_or_empty(tmp_path / "g.csv")) < 3:
        time.sleep(0.2)
    os.killpg(grader.pid, signal.SIGKILL)  # the instructor's laptop loses power while zed's notebook runs
    grader.wait()
    assert len(totals_or_empty(tmp_path / "g.csv")) == 3, "the first three notebooks were not recorded"
    done = run_grader("--out", "g.csv", "--timeout", "3", "class", cwd=tmp_path)
    assert "graded 1 notebook(s), skipped 3 unchanged" in done.stdout
    rows = [row for row in read_gradebook(tmp_path / "g.csv") if row.submission.startswith("class/zed")]
    assert [row.status for row in rows] == ["passed"] * 6  # its loop is the last cell, after every answer


def totals_or_empty(gradebook):
    return totals(gradebook) if gradebook.exists() else {}


def test_a_notebook_that_kills_the_grader_worker_costs_no_one_else_their_grade(tmp_path):
    folder = class_folder(tmp_path)
    write(folder, "mallory/01_attention_math.ipynb", with_cell(solved(), "import os\nos.kill(os.getppid(), 9)"))
    run_grader("--out", "g.csv", "--workers", "2", "class", cwd=tmp_path)
    scores = totals(tmp_path / "g.csv")
    assert scores["class/alice/01_attention_math.ipynb"] == 6 and scores["class/carol/01_attention_math.ipynb"] == 2
    mallory = [row for row in read_gradebook(tmp_path / "g.csv") if "mallory" in row.submission]
    assert len(mallory) == 1 and mallory[0].status == "error" and "worker process was killed" in mallory[0].feedback


def test_a_file_that_is_no_notebook_is_one_row_and_the_run_goes_on(tmp_path):
    folder = class_folder(tmp_path)
    write(folder, "erin/notes.txt", "my answers are in my head")
    run_grader("--out", "g.csv", "class", folder / "erin" / "notes.txt", "--summary", "summary.md", cwd=tmp_path)
    rows = [row for row in read_gradebook(tmp_path / "g.csv") if row.submission.endswith("notes.txt")]
    assert len(rows) == 1 and rows[0].status == "error" and "not valid JSON" in rows[0].feedback
    summary = (tmp_path / "summary.md").read_text()
    assert "| class/alice/01_attention_math.ipynb | 1 | 6 / 6 |" in summary and "notes.txt" in summary


@pytest.mark.parametrize(
    "arguments, expected",
    [
        (["--workers", "0", "--out", "g.csv", "x.ipynb"], "--workers must be at least 1"),
        (["--out", "g.csv", "{tmp}"], "no notebooks found"),
        (["x.ipynb"], "the following arguments are required: --out"),
    ],
)
def test_bad_arguments_are_refused_with_a_message(tmp_path, capsys, arguments, expected):
    with pytest.raises(SystemExit) as stopped:
        main([argument.replace("{tmp}", str(tmp_path)) for argument in arguments])
    assert stopped.value.code == 2 and expected in capsys.readouterr().err


def test_the_console_script_is_declared():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'attention-book-grade = "attention_book.grade.cli:main"' in text


def test_feedback_page_names_and_an_ungradable_file():
    assert page_name("class/alice/01_attention_math.ipynb") == "class__alice__01_attention_math"
    assert page_name("../up/a b.ipynb") == "up__a_b"
    from attention_book.grade import Row

    page = feedback_markdown("x.txt", [Row("x.txt", "", "", 0, 0, "error", "the file is empty", "")])
    assert "could not be graded: the file is empty" in page
