"""The widgets' JavaScript held to the package's rules (issue 43; CONTRIBUTING.md, "JavaScript").

``src/attention_book/widgets/js/`` is formatted and linted by Biome, pinned in package.json and
installed by ``make node`` (``npm ci``), with the settings of ``biome.json``: width 120, Biome's
recommended rules, undeclared and unused names, and no function over 60 lines counted like the
Python rule of test_unit_sizes.py, from its first line to its last, nested functions included
(Biome's ``noExcessiveLinesPerFunction`` counts the lines between the braces, so its limit is 58). No file there is over 700 lines, and the files are
exactly those that ``widget_module_source()`` joins. ``make lint`` runs the same check; to fix
what it reports, ``make format`` (the layout) or the code (the rules).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from attention_book.widgets._base import MODULE_FILES
from tests.helpers import ROOT

JS = ROOT / "src" / "attention_book" / "widgets" / "js"
BIOME = ROOT / "node_modules" / ".bin" / "biome"
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 60
BIOME_MAX_LINES = MAX_FUNCTION_LINES - 2  # Biome counts neither the line that opens the body nor the one closing it


def biome(*arguments: str, cwd=ROOT) -> subprocess.CompletedProcess:
    if not BIOME.exists():
        pytest.fail("Biome is not installed: run `make node` (npm ci installs it from package-lock.json)")
    return subprocess.run([str(BIOME), *arguments], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_widgets_javascript_is_formatted_and_lint_clean():
    result = biome("check", "--colors=off", "--max-diagnostics=50")
    assert result.returncode == 0, f"run `make format`, then fix what is left:\n{result.stdout}{result.stderr}"


def test_the_check_covers_the_widgets_files_at_the_packages_width():
    config = json.loads((ROOT / "biome.json").read_text())
    assert config["formatter"]["lineWidth"] == 120  # as ruff's line-length in pyproject.toml
    assert "src/attention_book/widgets/js/*.js" in config["files"]["includes"]
    rule = config["linter"]["rules"]["complexity"]["noExcessiveLinesPerFunction"]
    assert rule["level"] == "error" and rule["options"] == {"maxLines": BIOME_MAX_LINES, "skipBlankLines": False}


def test_the_function_rule_catches_a_long_function(tmp_path):
    """The rule the check relies on fails a function of 61 lines and passes one of 60."""
    config = json.loads((ROOT / "biome.json").read_text())
    config.pop("$schema", None)
    config.pop("vcs", None)  # the temporary folder is no git checkout
    config["files"]["includes"] = ["*.js"]
    (tmp_path / "biome.json").write_text(json.dumps(config))
    for name, lines in (("short", MAX_FUNCTION_LINES), ("long", MAX_FUNCTION_LINES + 1)):
        body = "".join(f"  const x{i} = {i};\n" for i in range(lines - 3))  # and the first, return and last lines
        (tmp_path / f"{name}.js").write_text(f"export function {name}() {{\n{body}  return x0;\n}}\n")
    result = biome("lint", "--colors=off", "--only=complexity/noExcessiveLinesPerFunction", cwd=tmp_path)
    assert "long.js" in result.stdout + result.stderr and "short.js" not in result.stdout + result.stderr, (
        result.stdout + result.stderr
    )


def test_no_javascript_file_of_the_widgets_is_over_700_lines():
    too_long = {path.name: n for path in JS.glob("*.js") if (n := len(path.read_text().splitlines())) > MAX_FILE_LINES}
    assert not too_long, f"files over {MAX_FILE_LINES} lines (split them by idea): {too_long}"


def test_the_module_joins_every_file_of_the_folder_once():
    assert sorted(MODULE_FILES) == sorted(path.name for path in JS.glob("*.js"))
    assert len(set(MODULE_FILES)) == len(MODULE_FILES) and MODULE_FILES[-1] == "render.js"


def test_biome_is_pinned_in_package_json():
    package = json.loads((ROOT / "package.json").read_text())
    version = package["devDependencies"]["@biomejs/biome"]
    assert version[0].isdigit(), f"pin Biome to one version, not {version!r}"
    if shutil.which("node"):
        installed = json.loads((ROOT / "node_modules" / "@biomejs" / "biome" / "package.json").read_text())
        assert installed["version"] == version, "run `make node`: node_modules holds another Biome"
