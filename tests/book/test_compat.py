"""`make compat` (tools/compat/compat.py): where its versions come from, the README's matrix, and pip
refusing an unsupported ipywidgets.

The environments themselves are built and run by `make compat` (minutes each, gigabytes of wheels),
never here; these tests read files and run one offline ``pip install --dry-run`` (a few seconds).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile

import tomllib

from tests.helpers import ROOT, tool

compat = tool("compat")  # tools/compat/compat.py


def test_the_colab_like_versions_come_from_colabs_pip_freeze_with_its_source():
    text = compat.COLAB_FREEZE.read_text(encoding="utf-8")
    assert "github.com/googlecolab/backend-info/blob/" in text.splitlines()[1], "the freeze's header names its source"
    constraints, urls, python = compat.colab_freeze(text)
    assert python == compat.environments()["colab"].python
    pins = dict(line.split("==", 1) for line in constraints)
    assert pins["ipywidgets"] == "7.7.1" and pins["torch"], "Colab's ipywidgets and torch (from its wheel URL)"
    assert not [name for name in pins if name.lower().startswith(compat.CUDA_PIECES)]
    assert "en_core_web_sm" in urls


def test_the_floors_are_pyprojects_lower_bounds():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    pinned = compat.floors((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert len(pinned) == len(dependencies)
    for requirement, pin in zip(dependencies, pinned):
        name, floor = pin.split("==")
        assert requirement.startswith(name) and f">={floor}" in requirement.replace(" ", "")
    lowest = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert f">={compat.environments()['floors'].python}" == lowest.replace(" ", "")


def _result(name: str, **changes) -> dict:
    result = {
        "environment": name,
        "title": name,
        "source": "somewhere",
        "python_wanted": "3.10",
        "versions": {"python": "3.10.13", "torch": "2.1.0", "numpy": "1.24.1", "ipywidgets": "7.7.0"},
        "build": {"passed": True, "seconds": 1.0, "problem": ""},
        "checks": {"unit": {"passed": True, "seconds": 1.0}, "chapters": {"passed": False, "seconds": 2.0}},
        "passed": False,
        "minutes": 3.5,
        "date": "2026-11-28",
    }
    result.update(changes)
    return result


def test_the_matrix_has_a_row_per_environment_and_says_what_failed():
    table = compat.matrix([_result("floors"), _result("newest", versions={"python": "3.11.7"}, python_wanted="3.12")])
    lines = table.splitlines()
    assert lines[0] == "| environment | Python | torch | numpy | ipywidgets | result | date |"
    assert "| 3.10.13 | 2.1.0 | 1.24.1 | 7.7.0 | failed: chapters in 3.5 min | 2026-11-28 |" in lines[2]
    assert "3.11.7 (wanted 3.12, not found here)" in lines[3], "a Python other than the one wanted is labelled"


def test_the_readme_has_the_matrix_markers_once():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(compat.MARK_START) == 1 and text.count(compat.MARK_END) == 1
    assert text.index(compat.MARK_START) < text.index(compat.MARK_END)
    between = text[text.index(compat.MARK_START) : text.index(compat.MARK_END)]
    assert "| environment | Python | torch | numpy | ipywidgets | result | date |" in between


def _wheel(folder, name: str, version: str) -> None:
    """A wheel with metadata only: enough for pip's resolver to consider that version."""
    info = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")


def test_pip_refuses_the_package_beside_ipywidgets_6_with_a_message_naming_our_range(tmp_path):
    """An unsupported version is refused by the installer, before any chapter runs: offline, with this
    environment's packages for the rest and an ipywidgets 6.0.1 that exists only as metadata."""
    source = compat.source_copy(tmp_path / "source")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "ipywidgets", "6.0.1")
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links", str(wheels)]
    command += ["--no-build-isolation", str(source), compat.UNSUPPORTED]
    environment = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, cwd=tmp_path)
    assert result.returncode != 0, result.stdout[-2000:]
    assert "conflicting dependencies" in result.stderr, result.stderr[-3000:]
    assert re.search(r"attention-book \S+ depends on ipywidgets<9 and >=7\.7", result.stdout + result.stderr)
    assert "The user requested ipywidgets==6.0.1" in result.stdout + result.stderr


def test_the_site_build_never_reads_the_virtual_environments():
    """make compat leaves whole virtual environments in .compat/ (as make setup does in .venv and the Colab test in
    .colab-venv); their packages ship Markdown files that Sphinx would read (and fail on) unless _config.yml
    excludes the folders: a make test after a make compat once failed so."""
    import yaml

    excluded = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["exclude_patterns"]
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()
    for folder in (".venv", ".colab-venv", ".compat"):
        assert f"{folder}/" in ignored and folder in excluded, folder


def test_running_one_environment_keeps_the_other_rows_of_the_readme(tmp_path):
    """A fresh clone that runs only `make compat COMPAT=colab` has no result for the floors or the newest:
    their rows stay as the README had them, and the colab row is replaced."""
    readme = tmp_path / "README.md"
    rows = [
        "| Colab-like (old source) | 3.12.0 | 2.0.0 | 1.26.0 | 7.7.1 | passed (unit) in 30.0 min | 2026-11-01 |",
        "| floors (pyproject.toml's lower bounds) | 3.11.7 | 2.6.0 | 1.24.1 | 7.7.0 | passed (unit) in 12.4 min | 2026-11-02 |",
        "| newest (the newest on PyPI) | 3.13.0 | 2.15.0 | 2.5.5 | 8.1.9 | passed (unit) in 26.5 min | 2026-11-03 |",
    ]
    table = "\n".join(compat.matrix([]).splitlines() + rows)
    readme.write_text(f"before\n{compat.MARK_START}\n{table}\n{compat.MARK_END}\nafter\n", encoding="utf-8")
    (tmp_path / "colab").mkdir()
    (tmp_path / "colab" / "result.json").write_text(json.dumps(_result("colab")), encoding="utf-8")
    compat.write_readme(readme, folder=tmp_path)
    text = readme.read_text(encoding="utf-8")
    assert rows[0] not in text and "failed: chapters in 3.5 min" in text, "the colab row is the new result"
    assert rows[1] in text and rows[2] in text, "the rows of the environments not run are kept"
    assert text.startswith("before\n") and text.endswith("after\n") and text.count("| 2026-11-0") == 2
