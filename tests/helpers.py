"""What several test folders share: the repository root and the scripts under tools/.

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


def tool(name: str) -> ModuleType:
    """Import the script ``tools/<name>.py`` as a module (e.g. ``tool("generate_exercises")``)."""
    if not (TOOLS / f"{name}.py").is_file():
        raise FileNotFoundError(f"tools/{name}.py does not exist")
    if str(TOOLS) not in sys.path:
        sys.path.insert(0, str(TOOLS))
    return importlib.import_module(name)


def expected_hint(exercise_id: str, answer, registered_hint: str) -> str:
    """What ``check``'s line must contain for a wrong answer (issue 32): the name of the first property the
    answer breaks, or, where no property's probe finds one, the hint registered for it (the fallback)."""
    from attention_book.exercises import get
    from attention_book.exercises._core import broken_property

    broken = broken_property(get(exercise_id), answer)
    return f"{broken[0].name}: " if broken else registered_hint
