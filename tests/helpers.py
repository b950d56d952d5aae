"""What several test folders share: the repository root and the scripts under tools/ (in role folders).

Test modules live one folder below tests/ (unit/, widgets/, book/) and may move again: they
import :data:`ROOT` from here (``from tests.helpers import ROOT``) instead of counting parent
folders of their own ``__file__``, which breaks silently when a file moves.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
"""The repository root (the folder holding pyproject.toml, src/, notebooks/ and tools/)."""

TOOLS = ROOT / "tools"
SAMPLE_EXERCISES = ROOT / "tests" / "sample_exercises"


def tool_path(name: str) -> Path:
    """The script ``tools/<group>/<name>.py``, whichever role folder holds it (tools/README.md)."""
    found = sorted(TOOLS.glob(f"*/{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one tools/*/{name}.py, found {[str(p) for p in found]}")
    return found[0]


def tool(name: str) -> ModuleType:
    """Import the script ``tools/<group>/<name>.py`` as a module (e.g. ``tool("generate_exercises")``).

    Its folder goes on ``sys.path``, as when the script runs, so it imports its neighbours as it does
    then (generate_exercises imports colab_edition; build_book imports figure_audit)."""
    folder = str(tool_path(name).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return importlib.import_module(name)


def expected_hint(exercise_id: str, answer, registered_hint: str) -> str:
    """What ``check``'s line must contain for a wrong answer (issue 32): the name of the first property the
    answer breaks, or, where no property's probe finds one, the hint registered for it (the fallback)."""
    from attention_book.exercises import get
    from attention_book.exercises._core import broken_property

    broken = broken_property(get(exercise_id), answer)
    return f"{broken[0].name}: " if broken else registered_hint
