"""The gradebook (one CSV row per submission and exercise, any chapter) and the feedback page of each submission."""

from __future__ import annotations

import csv
import html
import os
import re
from collections.abc import Iterable
from pathlib import Path

from .engine import COLUMNS, Row

STATUS_WORDS = {
    "passed": "passed",
    "failed": "not yet right",
    "not attempted": "not attempted",
    "error": "could not be graded",
    "timeout": "ran out of time",
}


def _exercise_key(exercise_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in exercise_id.split(".") if part.isdigit())


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda row: (row.submission, _exercise_key(row.exercise)))


def read_gradebook(path: Path) -> list[Row]:
    """The rows of an existing gradebook (none if there is no file; rows it cannot read are dropped,
    so their submissions are graded again)."""
    if not path.is_file():
        return []
    rows: list[Row] = []
    with path.open(newline="", encoding="utf-8") as handle:
        for record in csv.DictReader(handle):
            try:
                values = {column: record[column] for column in COLUMNS}
                values["points"], values["max_points"] = int(values["points"]), int(values["max_points"])
                rows.append(Row(**values))
            except (KeyError, TypeError, ValueError):
                continue
    return rows


def write_gradebook(path: Path, rows: Iterable[Row]) -> None:
    """Write the whole gradebook at once (a temporary file renamed over the old one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(row.as_dict() for row in sort_rows(rows))
    os.replace(partial, path)


def append_rows(path: Path, rows: Iterable[Row]) -> None:
    """Add one submission's rows at the end as soon as it is graded, so a crash loses nothing done."""
    new = not path.exists() or path.stat().st_size == 0
    with path.open("a", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(row.as_dict() for row in rows)
        handle.flush()
        os.fsync(handle.fileno())


def by_submission(rows: Iterable[Row]) -> dict[str, list[Row]]:
    grouped: dict[str, list[Row]] = {}
    for row in sort_rows(rows):
        grouped.setdefault(row.submission, []).append(row)
    return grouped


def page_name(submission: str) -> str:
    """A file name for a submission's feedback page: its path with the folders joined by ``__``."""
    stem = submission[: -len(".ipynb")] if submission.endswith(".ipynb") else submission
    stem = stem.replace("\\", "/").strip("/").replace("../", "").replace("/", "__")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem) or "submission"


def totals(rows: list[Row]) -> tuple[int, int]:
    return sum(row.points for row in rows), sum(row.max_points for row in rows)


def feedback_markdown(submission: str, rows: list[Row]) -> str:
    """The student's page: the total, then each exercise with its points, what happened and the hint."""
    points, most = totals(rows)
    chapter = rows[0].chapter if rows else ""
    lines = [f"# Feedback: {submission}", ""]
    if len(rows) == 1 and not rows[0].exercise:
        lines += [f"This file could not be graded: {rows[0].feedback}", ""]
        return "\n".join(lines)
    lines += [f"Chapter {chapter}: **{points} of {most} points**.", ""]
    lines += ["| Exercise | Points | Result | Feedback |", "| --- | --- | --- | --- |"]
    for row in rows:
        feedback = row.feedback.replace("|", "\\|")
        lines.append(f"| {row.exercise} | {row.points} / {row.max_points} | {STATUS_WORDS[row.status]} | {feedback} |")
    lines += [
        "",
        "Each exercise was checked on fresh random inputs by the book's grader, as `check` does in the notebook.",
    ]
    return "\n".join(lines) + "\n"


def feedback_html(submission: str, rows: list[Row]) -> str:
    """The same page as HTML, for a learning-management system that shows uploaded HTML."""
    points, most = totals(rows)
    title = html.escape(f"Feedback: {submission}")
    head = (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>{title}</title>"
        "<style>body{font-family:sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;line-height:1.4}"
        "table{border-collapse:collapse;width:100%}td,th{border:1px solid #bbb;padding:.4rem;text-align:left;"
        "vertical-align:top}.passed{color:#1a7f37}.other{color:#b35900}</style></head><body>"
    )
    body = [f"<h1>{title}</h1>"]
    if len(rows) == 1 and not rows[0].exercise:
        body.append(f"<p>This file could not be graded: {html.escape(rows[0].feedback)}</p>")
    else:
        body.append(f"<p>Chapter {html.escape(rows[0].chapter)}: <strong>{points} of {most} points</strong>.</p>")
        body.append("<table><tr><th>Exercise</th><th>Points</th><th>Result</th><th>Feedback</th></tr>")
        for row in rows:
            kind = "passed" if row.status == "passed" else "other"
            body.append(
                f"<tr><td>{html.escape(row.exercise)}</td><td>{row.points} / {row.max_points}</td>"
                f"<td class='{kind}'>{STATUS_WORDS[row.status]}</td><td>{html.escape(row.feedback)}</td></tr>"
            )
        body.append("</table>")
    return head + "".join(body) + "</body></html>\n"


def write_feedback(folder: Path, rows: Iterable[Row]) -> int:
    """One Markdown and one HTML page per submission in ``folder``; returns how many submissions."""
    folder.mkdir(parents=True, exist_ok=True)
    grouped = by_submission(rows)
    for submission, its_rows in grouped.items():
        name = page_name(submission)
        (folder / f"{name}.md").write_text(feedback_markdown(submission, its_rows), encoding="utf-8")
        (folder / f"{name}.html").write_text(feedback_html(submission, its_rows), encoding="utf-8")
    return len(grouped)


def class_summary(rows: Iterable[Row]) -> str:
    """A Markdown table of every submission's total (for a CI run's summary page)."""
    lines = ["| Submission | Chapter | Points | Passed | Not yet |", "| --- | --- | --- | --- | --- |"]
    for submission, its_rows in by_submission(rows).items():
        points, most = totals(its_rows)
        passed = ", ".join(row.exercise for row in its_rows if row.status == "passed") or "none"
        other = ", ".join(f"{row.exercise} ({row.status})" for row in its_rows if row.status != "passed") or "none"
        lines.append(f"| {submission} | {its_rows[0].chapter} | {points} / {most} | {passed} | {other} |")
    return "\n".join(lines) + "\n"
