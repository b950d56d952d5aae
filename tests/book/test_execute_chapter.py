"""``make chapter`` (tools/notebooks/execute_chapter.py): a chapter executed the way its stored outputs must be,
with every figure stamped for the figure test (a chapter executed any other way failed CI) and streams merged."""

from __future__ import annotations

import sys

import nbformat
import pytest

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "tools" / "notebooks"))
sys.path.insert(0, str(ROOT / "tools" / "site"))
import execute_chapter  # tools/notebooks/execute_chapter.py
import figure_audit  # tools/site/figure_audit.py


def test_consecutive_streams_of_one_name_are_merged_and_nothing_else():
    outputs = [
        {"output_type": "stream", "name": "stdout", "text": "a\n"},
        {"output_type": "stream", "name": "stdout", "text": "b\n"},
        {"output_type": "stream", "name": "stderr", "text": "c\n"},
        {"output_type": "display_data", "data": {"text/plain": "x"}, "metadata": {}},
        {"output_type": "stream", "name": "stdout", "text": "d\n"},
    ]
    merged = execute_chapter.merge_streams(outputs)
    assert [output.get("text") for output in merged] == ["a\nb\n", "c\n", None, "d\n"]


def test_a_missing_or_wrong_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"expected a chapter notebook \(\.ipynb\), got .*chapter\.txt"):
        execute_chapter.execute(tmp_path / "chapter.txt")


def test_a_figure_comes_out_stamped_and_the_streams_merged(tmp_path):
    notebook = tmp_path / "tiny.ipynb"
    code = (
        "import matplotlib.pyplot as plt\n"
        "for i in range(3):\n    print(i, flush=True)\n"
        "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([0, 1]); ax.set_xlabel('step', fontsize=9)\nplt.show()"
    )
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)]), notebook)
    execute_chapter.execute(notebook)
    rows = figure_audit.report(notebook)
    assert len(rows) == 1 and rows[0]["smallest_px"] is not None, rows
    cell = nbformat.read(notebook, as_version=4).cells[0]
    streams = [output for output in cell.outputs if output.output_type == "stream"]
    assert len(streams) == 1 and streams[0].text == "0\n1\n2\n"
    assert execute_chapter.main([str(notebook)]) == 0
