"""Grading a class's notebooks of chapters 1-7: ``python -m attention_book.grade --out gradebook.csv SUBMISSION...``.

A submitted notebook is data, never trusted code for grading: its cells run in a process of their
own, and every exercise's answer (found by the name the exercise registry gives it) is judged in
another process where none of the student's cells ran. See ``book/teaching.md`` for the guide.

* :func:`grade_file`: the gradebook rows of one notebook (:mod:`.engine`);
* :func:`grade_class`: many notebooks in parallel, resumable, with a gradebook and feedback (:mod:`.cli`);
* :func:`assert_passes`: one check in a fresh process, for nbgrader's locked test cells (:mod:`.isolated`).
"""

from __future__ import annotations

from .engine import COLUMNS, STATUSES, Row, grade_file
from .isolated import assert_passes
from .sandbox import Limits

__all__ = ["COLUMNS", "STATUSES", "Limits", "Row", "assert_passes", "grade_file"]
