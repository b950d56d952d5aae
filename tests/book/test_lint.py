"""The code passes ruff: ``ruff check`` (the rule set in pyproject.toml) and ``ruff format --check``.

Over src/, tests/, tools/ and benchmarks/; the chapters (notebooks/) are excluded in
pyproject.toml. To fix what these tests report::

    .venv/bin/ruff check --fix src tests tools benchmarks
    .venv/bin/ruff format src tests tools benchmarks

ruff comes with the dev extra (``make setup``); a checkout without it fails here, with the
command that installs it, rather than skipping the check.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import ROOT

FOLDERS = ["src", "tests", "tools", "benchmarks"]


def ruff(*arguments: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("ruff") is None:
        pytest.fail(
            "ruff is not installed: run `make setup` (it is in the dev extra) or `pip install 'ruff>=0.17,<0.18'`"
        )
    return subprocess.run(
        [sys.executable, "-m", "ruff", *arguments, *FOLDERS], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_check_finds_nothing():
    result = ruff("check", "--no-cache", "--output-format", "concise")
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_the_code_is_formatted_as_ruff_format_writes_it():
    result = ruff("format", "--check", "--no-cache")
    assert result.returncode == 0, f"run `ruff format {' '.join(FOLDERS)}`:\n{result.stdout}{result.stderr}"


def test_the_chapters_are_excluded_from_the_lint():
    """The chapters are formatted with their prose by their own tools, not by this check."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--show-files", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    files = [line.replace(str(ROOT) + "/", "") for line in result.stdout.splitlines()]
    assert any(file.startswith("src/") for file in files), result.stdout + result.stderr
    assert not [file for file in files if file.startswith("notebooks/")]
