"""Train every seed of the chapters that store their extra seeds, and store them in the package.

    python tools/stored/store_seed_runs.py                       # chapters 4 and 6 (what `make seeds` runs)
    python tools/stored/store_seed_runs.py notebooks/06_encoder_decoder.ipynb

Each chapter is executed (not saved) with ATTENTION_BOOK_SEEDS=store: its ``ab.StoredRuns`` then
trains every seed with the code on the page and writes
``src/attention_book/stored/<chapter>_seeds.safetensors``, recording its SHA-256 in
``stored/SHA256SUMS``. Run it after changing a chapter's model, data or training recipe, then
re-execute the chapter (``make book`` does) and commit both. See attention_book.training.stored_runs.

The chapter runs to its end even where a cell fails: new runs of seeds 1-4 can move a number
that a cell asserts, and the runs are worth keeping to fix that cell with. Every failing cell
is listed and the command exits non-zero, so a failure is never silent.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ["notebooks/04_multi_head.ipynb", "notebooks/06_encoder_decoder.ipynb"]


def store(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    os.environ["ATTENTION_BOOK_SEEDS"] = "store"  # the kernel inherits it
    client = NotebookClient(
        notebook,
        timeout=1800,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    failed = [
        (number, output)
        for number, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    stored = [
        line
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
        for line in output.get("text", "").splitlines()
        if line.startswith("stored ")
    ]
    if not stored:
        raise SystemExit(f"{path}: the chapter ran but stored nothing (does it call seed_runs.save()?)")
    print(f"{path.name}: {'; '.join(stored)} ({seconds:.0f} s)")
    for number, output in failed:
        print(f"  cell {number} failed with these runs: {output.get('ename')}: {output.get('evalue', '')[:500]}")
    if failed:
        raise SystemExit(
            f"{path.name}: the runs are stored, but {len(failed)} cell(s) fail with them: fix the chapter, "
            "then re-execute it"
        )
    return seconds


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or [ROOT / c for c in CHAPTERS]
    problems = []
    for path in paths:
        if not path.is_file():
            raise SystemExit(f"no such notebook: {path}")
        try:
            store(path.resolve())
        except SystemExit as problem:  # store the other chapters too, then say what failed
            problems.append(str(problem))
    if problems:
        raise SystemExit("\n".join(problems))


if __name__ == "__main__":
    main(sys.argv[1:])
