"""A folded code cell's toggle names what it holds (tools/site/sphinx_offline.py's LabelToggles), checked
on a one-page Sphinx build with myst-nb, the way the book's pages are made, without executing."""

from __future__ import annotations

import subprocess
import sys

import nbformat

from tests.helpers import ROOT, tool

sphinx_offline = tool("sphinx_offline")


def test_labels_follow_the_cell():
    assert sphinx_offline.toggle_label(["colab-setup", "hide-input"], "# Setup")[0] == "Show the Colab setup cell"
    assert (
        sphinx_offline.toggle_label(["hide-input"], "# Checks the prose: x\nassert 1")[0]
        == "Show the checks of the text"
    )
    assert sphinx_offline.toggle_label(["hide-input"], "# BEGIN SOLUTION\ndef f():\n    pass")[0] == "Show the solution"
    assert sphinx_offline.toggle_label(["hide-cell"], "# Provenance of the stored run\nprint(1)")[0] == (
        "Show the provenance"
    )
    assert sphinx_offline.toggle_label(["hide-input"], "x = 1") is None


def test_a_built_page_shows_the_labels(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'tools' / 'site')!r})\n"
        "extensions = ['myst_nb', 'sphinx_offline']\n"
        "nb_execution_mode = 'off'\n"
        "html_static_path = []\n"
    )
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Page"),
        nbformat.v4.new_code_cell("# Setup: on Colab ...\nimport os", metadata={"tags": ["colab-setup", "hide-input"]}),
        nbformat.v4.new_code_cell("# Checks the prose: one\nassert 1 == 1", metadata={"tags": ["hide-input"]}),
        nbformat.v4.new_code_cell(
            "# BEGIN SOLUTION\ndef f():\n    return 1\n# END SOLUTION", metadata={"tags": ["hide-input"]}
        ),
        nbformat.v4.new_code_cell("y = 2", metadata={"tags": ["hide-input"]}),
    ]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, source / "index.ipynb")
    completed = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(source), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    page = (tmp_path / "html" / "index.html").read_text()
    for label in (
        "Show the Colab setup cell",
        "Show the checks of the text",
        "Show the solution",
        "Show code cell source",
    ):
        assert page.count(label) == 1, (label, page.count(label))
    assert "BEGIN SOLUTION" not in page


def test_the_rocket_opens_the_colab_edition_of_a_chapter():
    base = "https://colab.research.google.com/github/o/r/blob/main/"
    binder = "https://mybinder.org/v2/gh/o/r/main?urlpath=lab/tree/"
    context = {
        "header_buttons": [
            {
                "label": "launch-buttons",
                "buttons": [
                    {"text": "Binder", "url": binder + "notebooks/04_multi_head.ipynb"},
                    {"text": "Colab", "url": base + "notebooks/04_multi_head.ipynb"},
                ],
            },
            {"label": "other", "buttons": [{"text": "Colab", "url": base + "notebooks/04_multi_head.ipynb"}]},
        ]
    }
    sphinx_offline.launch_the_colab_edition(None, "notebooks/04_multi_head", "page.html", context, None)
    binder_button, colab_button = context["header_buttons"][0]["buttons"]
    assert colab_button["url"] == base + "notebooks/colab/04_multi_head.ipynb"
    assert binder_button["url"] == binder + "notebooks/colab/04_multi_head.ipynb"
    assert context["header_buttons"][1]["buttons"][0]["url"] == base + "notebooks/04_multi_head.ipynb"
