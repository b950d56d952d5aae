"""Self-checking exercises.

In a chapter, an exercise cell defines an answer between ``# BEGIN SOLUTION`` and
``# END SOLUTION``; the next cell, tagged ``nbval-check-output``, calls
``check("N.M", answer)``, which prints one line: passed, or what is wrong with a hint.
``summary(N)`` prints which of chapter N's exercises pass.

Exercises live in one module per chapter (``chapter01.py``, ...), each calling
:func:`register`; they are imported on first use.
"""

from __future__ import annotations

from ._core import (
    FAIL_MARK,
    NOT_IMPLEMENTED,
    PASS_MARK,
    REGISTRY,
    RESULTS,
    CheckResult,
    Exercise,
    ExerciseFailure,
    Inconclusive,
    Mistake,
    Outcome,
    Property,
    call,
    check,
    diagnose,
    evaluate,
    get,
    load_all,
    name_sizes,
    probe_pair,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
    summary,
    worst_row_sum,
)

__all__ = [
    "CheckResult",
    "check",
    "evaluate",
    "Outcome",
    "summary",
    "register",
    "get",
    "Exercise",
    "ExerciseFailure",
    "Mistake",
    "Property",
    "Inconclusive",
    "name_sizes",
    "probe_pair",
    "probe_tensor",
    "worst_row_sum",
    "REGISTRY",
    "RESULTS",
    "diagnose",
    "call",
    "random_generator",
    "require_tensor_like",
    "load_all",
    "PASS_MARK",
    "FAIL_MARK",
    "NOT_IMPLEMENTED",
]
