"""Chapter 7's stored transfer study: intervals over its repeats, the stored file, and the
fingerprint of the code that made it.

:mod:`attention_book.training.transfer_study` runs the grid; this module reads what a run
returned (:func:`summarize_study`, :func:`paired_difference`), stores the full run in the
package where the chapter loads it (:func:`store_study`, :func:`load_study`), and says which
code made it (:func:`study_fingerprint`), which ``tests/unit/test_stored_study.py`` compares with
today's code.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
from collections.abc import Sequence

from .._files import STORED_FOLDER, record_stored_file, stored_file
from . import transfer, transfer_study

__all__ = [
    "mean_interval",
    "summarize_study",
    "paired_difference",
    "STUDY_FILE",
    "STUDY_COMMAND",
    "load_study",
    "store_study",
    "study_fingerprint",
    "code_fingerprint",
]

# Two-sided 95 % quantiles of Student's t distribution, by degrees of freedom.
_T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
}


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean and its 95 % t-interval over independent runs (at least 2)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        raise ValueError(f"an interval needs at least 2 values, but {len(values)} were given")
    n = len(values)
    mean = sum(values) / n
    spread = (sum((v - mean) ** 2 for v in values) / (n - 1)) ** 0.5
    degrees = n - 1
    quantile = _T_975.get(degrees) or _T_975[max(d for d in _T_975 if d <= degrees)]
    half = quantile * spread / n**0.5
    return mean, mean - half, mean + half


def summarize_study(results: dict, split: str = "test") -> dict[str, dict[int, tuple[float, float, float]]]:
    """Per arm and size: (mean, low, high) of the accuracy on ``split`` over the repeats."""
    if split not in ("validation", "test"):
        raise ValueError(f"split must be 'validation' or 'test', but {split!r} was given")
    summary = {}
    for arm, by_size in results["arms"].items():
        summary[arm] = {int(n): mean_interval(record[split]) for n, record in by_size.items() if split in record}
    return summary


def paired_difference(
    results: dict, arm: str, other: str, size: int, split: str = "test"
) -> tuple[float, float, float]:
    """(mean, low, high) of ``arm`` minus ``other`` at ``size``, paired by repeat (same subset and seed)."""
    ours, theirs = results["arms"][arm][str(size)][split], results["arms"][other][str(size)][split]
    return mean_interval([a - b for a, b in zip(ours, theirs, strict=True)])


STUDY_FILE = "transfer_study.json"
STUDY_COMMAND = "make study"


def load_study() -> dict:
    """The stored full run of the study (SHA-256 checked), as ``run_study`` returned it, with its provenance."""
    return json.loads(stored_file(STUDY_FILE).read_text())


def store_study(results: dict) -> str:
    """Write ``results`` into the package's ``stored/`` folder and record its SHA-256 (returned)."""
    path = STORED_FOLDER / STUDY_FILE
    path.write_text(json.dumps(results, indent=1) + "\n")
    return record_stored_file(STUDY_FILE)


def _code_only(tree: ast.AST) -> ast.AST:
    """The tree without what does not change what the code computes: docstrings and type annotations."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None  # annotations are never evaluated (from __future__ import annotations)
        elif isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    return tree


def study_fingerprint() -> dict:
    """What the stored study was computed by: the names and a SHA-256 of the code that
    :func:`~attention_book.training.transfer_study.run_study` reaches in the study's module and in the
    recipes' module (itself, the functions, classes and constants it names, and theirs in turn), with
    docstrings, comments, layout and type annotations left out (none changes what the code computes,
    and a formatter or linter rewrites them).

    ``stored/transfer_study.json`` keeps it (``code``); a test fails when the code no longer gives the
    same fingerprint, so the page never shows numbers that today's functions would not make. (Library
    code outside these two modules, such as ``fit``, is pinned by the test's live re-run of one cell.)
    """
    return code_fingerprint((transfer, transfer_study), ("run_study", "prepare_study", "FULL_STUDY"))


def code_fingerprint(modules: Sequence, roots: Sequence[str]) -> dict:
    """The names reached from ``roots`` among the top-level functions, classes and constants of
    ``modules`` (each name, the names it uses, and theirs in turn), and a SHA-256 of their code
    without docstrings, comments, layout and type annotations: ``{"sha256": ..., "reaches": [...]}``.

    A name defined in two of the modules counts as the later module's. Chapter 7's stored studies
    keep the fingerprint of the code that made them (:func:`study_fingerprint`, and the entity
    study's in :mod:`attention_book.training.entity_study`).
    """
    top: dict[str, ast.AST] = {}
    for module in modules:
        for node in _code_only(ast.parse(inspect.getsource(module))).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                top[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                top.update({target.id: node for target in targets if isinstance(target, ast.Name)})
    reached, waiting = set(), list(roots)
    while waiting:
        name = waiting.pop()
        if name in reached or name not in top:
            continue
        reached.add(name)
        waiting.extend(found.id for found in ast.walk(top[name]) if isinstance(found, ast.Name))
        waiting.extend(found.attr for found in ast.walk(top[name]) if isinstance(found, ast.Attribute))
    digest = hashlib.sha256()
    for name in sorted(reached):
        digest.update(name.encode() + b"\0" + _canonical_dump(top[name]).encode() + b"\0")
    return {"sha256": digest.hexdigest(), "reaches": sorted(reached)}


def _canonical_dump(node) -> str:
    """``ast.dump`` without the fields that are empty or None: Python 3.12 adds ``type_params=[]`` to every
    function and class, and 3.13 leaves such fields out of ``ast.dump``, so the same code would otherwise
    give another fingerprint on another Python (as it did: 3.11 here, 3.12 on Colab and the GPU machine)."""
    if isinstance(node, ast.AST):
        fields = (
            f"{name}={_canonical_dump(value)}"
            for name, value in ast.iter_fields(node)
            if value is not None and value != []
        )
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return "[" + ", ".join(_canonical_dump(item) for item in node) + "]"
    return repr(node)
