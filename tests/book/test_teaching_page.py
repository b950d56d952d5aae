"""The "Teaching with this book" page (book/teaching.md, issue 41) shows what the grader really writes.

Its sample gradebook and feedback page are graded again here from the three notebooks the page
describes (Alice solved all, Bob handed in the blank notebook, Carol solved three, got 1.3 wrong and
left 1.5 and 1.6 out), with the command the page shows, and must equal the page's blocks.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.helpers import ROOT
from tests.unit.grade_support import solved, student_notebook, with_cell, write

PAGE = ROOT / "book" / "teaching.md"


def sample_block(marker: str) -> str:
    match = re.search(rf"<!-- {marker}:.*?-->\n```[a-z]*\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.DOTALL)
    assert match, f"book/teaching.md has no block after <!-- {marker}: ... -->"
    return match.group(1)


def test_the_sample_gradebook_and_feedback_are_what_the_grader_writes(tmp_path):
    folder = tmp_path / "class"
    write(folder, "alice/01_attention_math.ipynb", solved())
    write(folder, "bob/01_attention_math.ipynb", student_notebook())
    carol = with_cell(solved(only={0, 1, 3}), "def scaling_matters(d_k):\n    return None\n", after=2)
    write(folder, "carol/01_attention_math.ipynb", carol)
    command = [
        sys.executable,
        "-m",
        "attention_book.grade",
        "--out",
        "gradebook.csv",
        "--feedback",
        "feedback",
        "class",
    ]
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    gradebook = [line.rsplit(",", 1)[0] for line in (tmp_path / "gradebook.csv").read_text().splitlines()]
    assert sample_block("sample-gradebook") == "\n".join(gradebook) + "\n"
    feedback = (tmp_path / "feedback" / "class__carol__01_attention_math.md").read_text()
    assert sample_block("sample-feedback") == feedback
    assert (tmp_path / "feedback" / "class__carol__01_attention_math.html").is_file()


def test_the_page_is_in_the_table_of_contents():
    assert "- file: book/teaching" in (ROOT / "_toc.yml").read_text()
