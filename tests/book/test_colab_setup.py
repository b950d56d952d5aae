"""A Colab-like run: a fresh environment with only what Colab preinstalls, no attention_book.

The first chapter's setup cell, forced on with ATTENTION_BOOK_FORCE_SETUP=1 and pointed at
a copy of this checkout with ATTENTION_BOOK_INSTALL_SOURCE, must install the package without
upgrading Colab's ipywidgets 7.7.1; then the whole chapter must execute and display its widget.
Then every widget is built there with a stand-in for google.colab.output: each must enable
Colab's custom widget manager and send its URL with the view (what Colab needs to draw a
third-party widget), and the widgets' ES module must export render. The environment is cached in .colab-venv/ (about
75 s to create, once); each run uninstalls attention_book from it first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import ROOT

COLAB_VENV = ROOT / ".colab-venv"
# What Colab has before the setup cell runs (torch as pinned for this machine, see the
# Makefile's TORCH_SPEC), plus setuptools/wheel (also on Colab) to build the package.
COLAB_PACKAGES = [
    os.environ.get("TORCH_SPEC", "torch==2.13.0"),
    "numpy",
    "matplotlib",
    "seaborn",
    "spacy",
    # Colab's widgets: ipywidgets 7.7.1 (what Colab ships; the package must not upgrade it) and
    # the newest front-end packages that ipywidgets 7.7.1 accepts.
    "ipywidgets==7.7.1",
    "widgetsnbextension==3.6.10",
    "jupyterlab-widgets==3.0.15",
    "tqdm",
    "safetensors",
    "tokenizers",
    "ipykernel",
    "nbclient",
    "setuptools",
    "wheel",
]

RUNNER = textwrap.dedent(
    """
    import sys
    import nbformat
    from nbclient import NotebookClient

    source, workdir, destination = sys.argv[1:4]
    notebook = nbformat.read(source, as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": workdir}}).execute()
    nbformat.write(notebook, destination)
    """
)


# Runs in the Colab-like venv with a stand-in for google.colab.output: builds one of each
# widget and displays it the way IPython does under ipywidgets 7 (_ipython_display_).
COLAB_WIDGETS = textwrap.dedent(
    """
    import json, sys, types
    enabled = []
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: enabled.append(1)
    output._widgets = types.SimpleNamespace(_installed_url="https://colab.example/manager.min.js")
    colab = types.ModuleType("google.colab")
    colab.output = output
    google = types.ModuleType("google")
    google.colab = colab
    sys.modules.update({"google": google, "google.colab": colab, "google.colab.output": output})

    import IPython.display
    import ipywidgets
    import torch
    import attention_book as ab
    from attention_book.data.tasks import word_encoder
    from attention_book.widgets import (AttentionExplorer, DecodingStepper, HeadViewer, KeyValueExplorer,
                                        PositionalEncodingExplorer, SoftHardExplorer)
    from attention_book.widgets._base import widget_module_source

    shown = []
    IPython.display.display = lambda *args, **kwargs: shown.append((args, kwargs))
    torch.manual_seed(0)
    words = ["<pad>", "the", "cat", "sat"]
    encoder = ab.Encoder(len(words), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8).eval()
    task = ab.SequenceTask("reverse", 1, min_len=4, max_len=4, num_symbols=6, seed=0)
    seq2seq = ab.EncoderDecoder(len(task.vocab), len(task.vocab), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=6).eval()
    widgets = [AttentionExplorer(device="cpu"), KeyValueExplorer(device="cpu"), SoftHardExplorer(device="cpu"),
               PositionalEncodingExplorer(device="cpu"), HeadViewer(encoder, word_encoder(words, max_len=8), "the cat sat", device="cpu"),
               DecodingStepper(seq2seq, task.source[:1], task.vocab, device="cpu")]
    displayed = {}
    for widget in widgets:
        shown.clear()
        if hasattr(widget, "_ipython_display_"):  # ipywidgets 7: how IPython displays a widget
            widget._ipython_display_()
        else:
            data, metadata = widget._repr_mimebundle_()
            IPython.display.display(data, metadata=metadata, raw=True)
        (data,), options = shown[-1]
        metadata = options.get("metadata") or {}
        manager = metadata.get("application/vnd.jupyter.widget-view+json", {}).get("colab", {}).get("custom_widget_manager", {})
        json.dumps(widget.get_state(), allow_nan=False)  # the state the front end receives is strict JSON
        displayed[widget.kind] = {"mime": sorted(data), "manager": manager.get("url")}
    print(json.dumps({"ipywidgets": ipywidgets.__version__, "enabled": len(enabled), "displayed": displayed,
                      "module": widget_module_source()}))
    """
)


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        output = (result.stdout + result.stderr).splitlines()
        pytest.fail(f"{' '.join(map(str, command[:4]))} ... failed:\n" + "\n".join(output[-40:]))
    return result


@pytest.fixture(scope="module")
def colab_venv() -> Path:
    stamp = COLAB_VENV / ".installed"
    wanted = json.dumps(COLAB_PACKAGES)
    if not (stamp.is_file() and stamp.read_text() == wanted and _python(COLAB_VENV).exists()):
        shutil.rmtree(COLAB_VENV, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(COLAB_VENV)])
        _run([str(_python(COLAB_VENV)), "-m", "pip", "install", "--quiet", *COLAB_PACKAGES])
        _run([str(_python(COLAB_VENV)), "-m", "ipykernel", "install", "--sys-prefix", "--name", "python3"])
        stamp.write_text(wanted)
    # The setup cell of an earlier run installed the package here: start without it.
    _run([str(_python(COLAB_VENV)), "-m", "pip", "uninstall", "--yes", "--quiet", "attention-book"])
    return COLAB_VENV


def _find_spec(venv: Path) -> str:
    code = "import importlib.util as u; s = u.find_spec('attention_book'); print(s.origin if s else '')"
    return _run([str(_python(venv)), "-c", code], cwd="/").stdout.strip()


def _checkout_copy(destination: Path) -> Path:
    """What `pip install <checkout>` needs, copied so the build leaves no files in the repository."""
    destination.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, destination / name)
    shutil.copytree(ROOT / "src", destination / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    return destination


def test_first_chapter_installs_the_package_and_runs_in_a_colab_like_environment(colab_venv, tmp_path):
    chapters = sorted((ROOT / "notebooks").glob("0*.ipynb"))
    if not chapters:
        pytest.fail("no chapter notebook exists yet (notebooks/0*.ipynb): the Colab-like test needs one")
    chapter = chapters[0]
    assert _find_spec(colab_venv) == "", "attention_book must not be installed before the setup cell runs"

    checkout = _checkout_copy(tmp_path / "checkout")
    runner = tmp_path / "run_notebook.py"
    runner.write_text(RUNNER)
    executed = tmp_path / chapter.name
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ATTENTION_BOOK_", "VIRTUAL_ENV", "PYTHON"))
    }
    env.update(
        ATTENTION_BOOK_FORCE_SETUP="1",
        ATTENTION_BOOK_INSTALL_SOURCE=str(checkout),
        # Build with the venv's setuptools instead of fetching a fresh copy. (pip reads
        # PIP_NO_BUILD_ISOLATION=0 as "do not isolate"; either way the install works.)
        PIP_NO_BUILD_ISOLATION="0",
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter-data"),  # no kernels from the user's own setup
        PATH=f"{colab_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    _run(
        [str(_python(colab_venv)), str(runner), str(chapter), str(chapter.parent), str(executed)], env=env, timeout=600
    )

    installed = _find_spec(colab_venv)
    assert Path(installed).resolve().is_relative_to(colab_venv.resolve()), (
        f"the setup cell did not install attention_book into the venv: {installed!r}"
    )
    import nbformat

    notebook = nbformat.read(executed, as_version=4)
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    assert not errors
    assert all(cell.execution_count for cell in notebook.cells if cell.cell_type == "code" and cell.source.strip())
    views = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in output.get("data", {})
    ]
    assert views, "the chapter displayed no widget"

    report = json.loads(
        _run([str(_python(colab_venv)), "-c", COLAB_WIDGETS], cwd=tmp_path, env=env, timeout=300).stdout.splitlines()[
            -1
        ]
    )
    assert report["ipywidgets"] == "7.7.1", "installing the package upgraded Colab's ipywidgets"
    assert report["enabled"] >= 1, "no widget enabled Colab's custom widget manager"
    for kind, shown in report["displayed"].items():
        assert "application/vnd.jupyter.widget-view+json" in shown["mime"], kind
        assert shown["manager"] == "https://colab.example/manager.min.js", (
            f"{kind} was displayed without Colab's widget manager"
        )
    assert sorted(report["displayed"]) == sorted(
        ["attention", "key_value", "soft_hard", "positional", "heads", "decoding"]
    )

    node = shutil.which("node")
    if node:  # the ES module the browser runs: it must load and export render
        module = tmp_path / "widgets.mjs"
        module.write_text(report["module"])
        check = "import(process.argv[1]).then((m) => console.log(typeof m.default.render))"
        assert _run([node, "-e", check, module.as_uri()]).stdout.strip() == "function"
