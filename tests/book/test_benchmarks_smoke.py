"""The benchmark code runs (tiny sizes), so `make bench` cannot rot between releases."""

import json
import subprocess
import sys

from tests.helpers import ROOT


def test_benchmark_smoke_run_writes_a_table(tmp_path):
    completed = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = (tmp_path / "RESULTS.md").read_text()
    for heading in (
        "## Machine",
        "## Widget update latency",
        "## Training to target",
        "## Attention: ours vs PyTorch",
        "## Peak extra memory",
    ):
        assert heading in report
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(row["ratio_sdpa_weights"] > 0 for row in results["attention"])
    # At T = 1024 the (4, T, T) weights are 16 MB: the probe must see them, and see the fused kernel avoid them.
    # (At T = 512, 4 MB, a fresh process's other allocations, 0.6 to 5 MB under load, could exceed the matrix.)
    (memory,) = [row for row in results["memory"] if row["device"] == "cpu"]
    assert memory["peak_weights_mb"] > memory["weights_matrix_mb"] > memory["peak_fast_mb"], memory
    assert [row["threads"] for row in results["training"]] == [results["machine"]["torch_threads"]]
    measured = [row for row in results["widgets"] if "median_ms" in row]
    assert measured, "no widget could be measured"
    assert all(row["updates"] == 3 for row in measured)
