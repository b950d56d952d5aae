"""``make widgets`` (tools/notebooks/update_widgets.py): a JavaScript edit reaches the saved notebooks
without executing them, and nothing else in them changes (issue 43)."""

from __future__ import annotations

import json
import shutil
import sys
import time

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "tools" / "notebooks"))
import update_widgets  # tools/notebooks/update_widgets.py


def test_only_the_saved_module_changes_in_every_notebook(tmp_path):
    for folder in update_widgets.FOLDERS:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for path in update_widgets.notebooks(ROOT):
        shutil.copy2(path, tmp_path / path.relative_to(ROOT))
    copies = update_widgets.notebooks(tmp_path)
    before = {path: path.read_text(encoding="utf-8") for path in copies}
    source = "// an edited module\nexport default { render: () => {} };\n"
    start = time.perf_counter()
    changed = update_widgets.update(copies, source)
    assert time.perf_counter() - start < 120
    assert changed and update_widgets.update(copies, source) == []  # a second run finds nothing to do
    for path in copies:
        old, new = json.loads(before[path]), json.loads(path.read_text(encoding="utf-8"))
        for state in update_widgets.saved_modules(old):
            state["_esm"] = source
        assert new == old, f"{path.name}: something besides _esm changed"
        old_lines, new_lines = before[path].splitlines(), path.read_text(encoding="utf-8").splitlines()
        differing = [a for a, b in zip(old_lines, new_lines) if a != b]
        assert len(old_lines) == len(new_lines) and all('"_esm": ' in line for line in differing), path.name
