"""Build the website: ``python tools/site/build_book.py [BUILD_DIR]`` (what ``make book`` runs).

Three steps:

1. Copy the JavaScript the site serves itself (MathJax 3, RequireJS, the Jupyter widgets
   HTML manager, onnxruntime-web) from ``node_modules`` (installed by ``npm ci`` from
   package-lock.json) into ``vendor/``, which ``_config.yml`` lists in ``html_static_path``, and
   write there chapter 7's pretrained model for its page, loaded only when a reader types
   (``vendor/page-models/``, from the installed weights package).
2. Write an effective table of contents: ``_toc.yml`` minus chapters whose notebook does
   not exist yet, so the book builds while it is being written.
3. Run ``jupyter-book build`` with Sphinx warnings as errors; notebooks execute with the
   cache in ``BUILD_DIR/.jupyter_cache``, in kernels that stamp each figure's PNG with the
   size of its smallest text (tools/site/figure_audit.py; the legibility test reads it).

It prints the path of ``BUILD_DIR/html/index.html`` and how long the build took, and
exits non-zero if anything failed.

``--other-machine`` executes the chapters under :data:`OTHER_MACHINE`, a second numerical
configuration that stands in for a reader's CPU (ATen's portable kernels instead of AVX2 or
AVX-512, MKL limited to SSE4.2, one thread): training runs then round differently and end
with other weights, as they do on another CPU, a GPU or Colab. ``make test`` builds the site
so, while nbval runs the chapters in the native configuration: every chapter runs, with every
assert, under both (BOOK_DESIGN.md, "The same book on every machine").
``--train-seeds`` trains every seed of chapters 4 and 6 rather than loading seeds 1-4
(``ATTENTION_BOOK_SEEDS=train``, which the chapters offer readers); ``make test`` adds it, so a
reader on another machine who trains every seed is held to every statement too.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import figure_audit

HERE = Path(__file__).resolve().parent  # tools/site/: the JavaScript and CSS copied below
ROOT = HERE.parents[1]
NODE_MODULES = ROOT / "node_modules"
VENDOR = ROOT / "vendor"
SOURCE_SUFFIXES = (".md", ".ipynb", ".rst")

OTHER_MACHINE = {
    "ATEN_CPU_CAPABILITY": "default",  # ATen's portable kernels, not the AVX2/AVX-512 ones
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",  # MKL's matrix products without AVX
    "OMP_NUM_THREADS": "1",  # one thread: other summation orders in the kernels
}
"""The environment of the second numerical configuration (``--other-machine``)."""

NUMERICS_VARIABLES = (
    *OTHER_MACHINE,
    "MKL_NUM_THREADS",
    "ATTENTION_BOOK_SEEDS",
    "ATTENTION_BOOK_DEVICE",
    "ATTENTION_BOOK_PAGE_MODELS",
)
"""Environment variables that change what a chapter computes: part of the execution cache's key."""

# What the site needs from each npm package, as (source in node_modules, destination in
# vendor/). Destinations match mathjax_path and nb_ipywidgets_js in _config.yml.
MATHJAX_ENTRY = "tex-mml-chtml.js"


def _copy_mathjax(destination: Path) -> None:
    """MathJax's CommonHTML bundle plus the components and fonts it loads on demand.

    Left out: the speech-rule engine (``sre``, only used by the accessibility explorer,
    which is off by default) and the other combined bundles.
    """
    source = NODE_MODULES / "mathjax" / "es5"
    destination.mkdir(parents=True)
    shutil.copy2(source / MATHJAX_ENTRY, destination / MATHJAX_ENTRY)
    for folder in ("input", "output", "ui", "a11y", "adaptors"):
        if (source / folder).is_dir():
            shutil.copytree(source / folder, destination / folder, ignore=shutil.ignore_patterns("svg", "svg.js"))
    shutil.copy2(NODE_MODULES / "mathjax" / "LICENSE", destination / "LICENSE")


# The widget manager's webpack bundles set their public path (where their font files are)
# to `${url.origin}${url.pathname}` of their module's URL. A file:// URL's origin is the
# string "null", so on a site opened from disk every font request would fail. The URL's
# href (already cut back to its folder by the bundle) is the same thing without that flaw.
PUBLIC_PATH = re.compile(r"(\w)\.p=`\$\{(\w)\.origin\}\$\{\2\.pathname\}`")


def _copy_html_manager(destination: Path) -> None:
    """The AMD embed bundle of @jupyter-widgets/html-manager and the font files it loads."""
    source = NODE_MODULES / "@jupyter-widgets" / "html-manager" / "dist"
    destination.mkdir(parents=True)
    for path in source.iterdir():
        if path.suffix in {".woff", ".woff2", ".ttf", ".eot", ".svg"}:
            shutil.copy2(path, destination / path.name)
    bundle, replaced = PUBLIC_PATH.subn(r"\1.p=\2.href", (source / "embed-amd.js").read_text(encoding="utf-8"))
    if replaced == 0:
        raise SystemExit(
            "tools/site/build_book.py: the public-path code in @jupyter-widgets/html-manager's embed-amd.js "
            "has changed; update PUBLIC_PATH for the version pinned in package.json"
        )
    (destination / "embed-amd.js").write_text(bundle, encoding="utf-8")
    (destination / "LICENSE.txt").write_bytes((source / "embed.js.LICENSE.txt").read_bytes())


def _copy_anywidget(destination: Path) -> None:
    """anywidget's front end as an AMD module (the attention_book widgets are anywidgets).

    It comes with the anywidget Python package (installed by pyproject.toml, MIT licence),
    which puts it where the classic notebook looks: <prefix>/share/jupyter/nbextensions.
    tools/site/widgets_offline.js points RequireJS's "anywidget" at this copy, so the widget
    manager never falls back to a CDN.
    """
    source = Path(sys.prefix) / "share" / "jupyter" / "nbextensions" / "anywidget" / "index.js"
    if not source.is_file():
        raise SystemExit(f"anywidget's front end is missing ({source}); run `make setup` (pip install -e .)")
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source, destination / "index.js")


# onnxruntime-web (MIT licence): chapter 4's head viewer and chapter 6's decoding steppers run
# their exported model in the page (export_page_model in attention_book.widgets.head_viewer and
# decoding_stepper; widgets/js/onnx.js, loadOnnxRuntime). Pages
# opened from file:// may neither import an ES module file nor fetch one (Chromium refuses
# both), but they may run a classic <script>: so the runtime's ES module (the build with the
# WebAssembly loader bundled in) and its WebAssembly binary (gzip-compressed, base64) travel
# as two strings in one classic script, which widgets.js loads on first use, imports from a
# blob: URL and hands the binary to directly. One path for file:// and http(s) alike.
ONNXRUNTIME_MODULE = "ort.wasm.bundle.min.mjs"
ONNXRUNTIME_WASM = "ort-wasm-simd-threaded.wasm"  # run with one thread: pages are not cross-origin isolated
ONNXRUNTIME_SCRIPT = "ort-wasm-inline.js"


def _copy_onnxruntime(destination: Path) -> None:
    """onnxruntime-web's WebAssembly runtime as one classic script (see ONNXRUNTIME_SCRIPT above)."""
    package = NODE_MODULES / "onnxruntime-web"
    version = json.loads((package / "package.json").read_text(encoding="utf-8"))["version"]
    module = (package / "dist" / ONNXRUNTIME_MODULE).read_text(encoding="utf-8")
    wasm = gzip.compress((package / "dist" / ONNXRUNTIME_WASM).read_bytes(), compresslevel=9, mtime=0)
    destination.mkdir(parents=True, exist_ok=True)
    (destination / ONNXRUNTIME_SCRIPT).write_text(
        f"/* ONNX Runtime Web {version} (Copyright (c) Microsoft Corporation, MIT licence): {ONNXRUNTIME_MODULE} and\n"
        f"   {ONNXRUNTIME_WASM} (gzip, base64), written by tools/site/build_book.py for widgets.js. */\n"
        "window.__attentionBookOnnxRuntime = {\n"
        f"  version: {json.dumps(version)},\n"
        f"  module: {json.dumps(module)},\n"
        f"  wasmGzipBase64: {json.dumps(base64.b64encode(wasm).decode('ascii'))},\n"
        "};\n",
        encoding="utf-8",
    )


# Chapter 7's pretrained model (MiniLM, 22.7M parameters) is too large to save inside its page as chapters 4
# and 6 save theirs: it is written here, quantised, as one classic script in page-models/ (about 31 MB, from
# the installed weights package: tools/site/page_models.py), which the page adds only when a reader types a
# sentence of their own. No page links it: a page opened loads what it loaded before (tests/book/test_site.py).
PAGE_MODELS = "page-models"


def _write_page_models(destination: Path) -> None:
    """The models the pages load on demand (one today: chapter 7's MiniLM), into ``destination``."""
    from page_models import write_page_script  # tools/site/page_models.py

    start = time.perf_counter()
    path = write_page_script(destination)
    seconds = time.perf_counter() - start
    print(f"build_book: wrote {path} ({path.stat().st_size / 1e6:.1f} MB) in {seconds:.0f} s")


def vendor_assets() -> None:
    """(Re)create vendor/ from node_modules; fails with a hint when npm ci has not run."""
    needed = [
        NODE_MODULES / "mathjax" / "es5" / MATHJAX_ENTRY,
        NODE_MODULES / "requirejs" / "require.js",
        NODE_MODULES / "@jupyter-widgets" / "html-manager" / "dist" / "embed-amd.js",
        NODE_MODULES / "onnxruntime-web" / "dist" / ONNXRUNTIME_MODULE,
    ]
    missing = [str(path.relative_to(ROOT)) for path in needed if not path.is_file()]
    if missing:
        raise SystemExit(
            "The site's JavaScript is not installed (missing: " + ", ".join(missing) + ").\n"
            "Run `make node` (npm ci) first; `make book` does it for you."
        )
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    VENDOR.mkdir()
    (VENDOR / "README.txt").write_text(
        "Generated by tools/site/build_book.py from node_modules (see package.json); not committed.\n"
    )
    _copy_mathjax(VENDOR / "mathjax")
    shutil.copy2(NODE_MODULES / "requirejs" / "require.js", VENDOR / "require.js")
    shutil.copy2(HERE / "widgets_offline.js", VENDOR / "widgets_offline.js")
    shutil.copy2(HERE / "sidebar_toggles.js", VENDOR / "sidebar_toggles.js")
    for own in ("figure_links.js", "site.css"):  # the book's own few lines of JS and CSS
        shutil.copy2(HERE / own, VENDOR / own)
    _copy_html_manager(VENDOR / "html-manager")
    _copy_anywidget(VENDOR / "anywidget")
    _copy_onnxruntime(VENDOR / "onnxruntime-web")
    _write_page_models(VENDOR / PAGE_MODELS)


def source_exists(entry: str) -> bool:
    """Whether a toc entry (a path without suffix, relative to the root) has a source file."""
    base = ROOT / entry
    return base.is_file() or any(base.with_suffix(suffix).is_file() for suffix in SOURCE_SUFFIXES)


def effective_toc(toc: dict) -> tuple[dict, list[str]]:
    """The toc with entries whose file does not exist removed (and parts left empty by that)."""
    skipped: list[str] = []

    def keep(entries: list[dict]) -> list[dict]:
        kept = []
        for entry in entries:
            if "file" in entry and not source_exists(entry["file"]):
                skipped.append(entry["file"])
                continue
            entry = dict(entry)
            for key in ("sections", "chapters"):
                if key in entry:
                    entry[key] = keep(entry[key])
                    if not entry[key]:
                        del entry[key]
            kept.append(entry)
        return kept

    result = dict(toc)
    if "parts" in result:
        parts = []
        for part in result["parts"]:
            part = dict(part)
            part["chapters"] = keep(part.get("chapters", []))
            if part["chapters"]:
                parts.append(part)
        result["parts"] = parts
    for key in ("chapters", "sections"):
        if key in result:
            result[key] = keep(result[key])
    if not source_exists(result["root"]):
        raise SystemExit(f"the root page {result['root']} of _toc.yml does not exist")
    return result, skipped


def _fingerprints(environment: dict[str, str]) -> tuple[str, str]:
    """(what a chapter's outputs are computed from, the widgets' JavaScript saved into them), as two digests.

    The first covers attention_book's Python, the figure stamp (tools/site/figure_audit.py) and the
    :data:`NUMERICS_VARIABLES`; the second the widgets' JavaScript (``widgets/js/``), which a saved
    chapter only carries as text (``_esm``): a change of it alone needs no execution.
    """
    import hashlib

    package = ROOT / "src" / "attention_book"
    python, javascript = hashlib.sha256(), hashlib.sha256()
    for path in sorted(package.rglob("*")):
        if path.suffix in {".py", ".js"} and "__pycache__" not in path.parts:
            digest = javascript if path.suffix == ".js" else python
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    # The kernels' figure stamp (tools/site/figure_audit.py) is part of every stored figure too.
    audit = Path(__file__).resolve().with_name("figure_audit.py")
    python.update(b"figure_audit.py\0" + audit.read_bytes())
    for name in NUMERICS_VARIABLES:
        python.update(f"{name}={environment.get(name, '')}\0".encode())
    return python.hexdigest(), javascript.hexdigest()


def _refresh_cached_widgets(cache: Path) -> int:
    """Write the widgets' current JavaScript into every executed notebook of the cache (as ``make widgets``
    does to the saved chapters); returns how many changed. Nothing is executed."""
    from attention_book.widgets._base import widget_module_source

    sys.path.insert(0, str(ROOT / "tools" / "notebooks"))
    from update_widgets import refreshed  # tools/notebooks/update_widgets.py

    source, changed = widget_module_source(), 0
    for path in sorted(cache.glob("executed/*/*.ipynb")):
        raw = path.read_text(encoding="utf-8")
        text = refreshed(raw, source)
        if text != raw:
            path.write_text(text, encoding="utf-8")
            changed += 1
    return changed


def _drop_outputs_of_another_package(build_dir: Path, environment: dict[str, str]) -> None:
    """Empty the execution cache when the package or the numerical configuration changed since it was filled.

    jupyter-cache reuses a notebook's outputs while its code cells are unchanged, but a
    chapter's outputs also depend on attention_book (its widgets' saved state above all) and
    on the numerical configuration it ran under: the cache is kept only for the same package
    source and the same :data:`NUMERICS_VARIABLES`, whose fingerprints are stored beside it.
    When only the widgets' JavaScript changed, the cached chapters keep their outputs and get the
    new module written into their saved widgets (no chapter is executed); the pages are made again.
    """
    python, javascript = _fingerprints(environment)
    cache, stamp = build_dir / ".jupyter_cache", build_dir / ".jupyter_cache.package"
    pages = [path for path in (build_dir / ".doctrees", build_dir / "jupyter_execute") if path.exists()]
    stale = [cache, *pages] if cache.exists() else pages
    kept = stamp.read_text().split() if stamp.is_file() else []
    if stale and (not kept or kept[0] != python):
        print(
            "build_book: attention_book or the numerical configuration changed since the last build; "
            "executing every chapter again"
        )
        # Sphinx re-reads only sources that changed: without its saved environment it reads (and so
        # executes) every chapter again, instead of keeping pages made from the dropped outputs.
        for path in stale:
            shutil.rmtree(path, ignore_errors=True)
    elif stale and kept[1:] != [javascript]:
        changed = _refresh_cached_widgets(cache) if cache.exists() else 0
        print(
            f"build_book: only the widgets' JavaScript changed; wrote it into {changed} cached chapter(s), "
            "making the pages again without executing them"
        )
        for path in pages:  # Sphinx reads every chapter again, from the refreshed cache
            shutil.rmtree(path, ignore_errors=True)
    stamp.write_text(f"{python}\n{javascript}\n")


def build(build_dir: Path, *, builder: str = "html", other_machine: bool = False, train_seeds: bool = False) -> float:
    """Build the site into build_dir/html (chapters executed under :data:`OTHER_MACHINE` if
    ``other_machine``; with every seed trained, none loaded, if ``train_seeds``); returns the
    seconds the build took."""
    build_dir = build_dir.resolve()
    if build_dir.name != "_build":
        raise SystemExit(f"jupyter-book always writes to a folder named _build; got {build_dir}")
    start = time.perf_counter()
    vendor_assets()

    toc, skipped = effective_toc(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    for entry in skipped:
        print(f"build_book: {entry} does not exist yet; left out of this build")
    build_dir.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **(OTHER_MACHINE if other_machine else {})}
    if train_seeds:
        environment["ATTENTION_BOOK_SEEDS"] = "train"  # the chapters' StoredRuns train every seed
    # The head viewer and the decoding stepper save their model (ONNX) for the website's pages (issue
    # 35; attention_book.widgets._base.PAGE_MODELS_VARIABLE); in Jupyter and Colab they do not.
    environment["ATTENTION_BOOK_PAGE_MODELS"] = "1"
    _drop_outputs_of_another_package(build_dir, environment)
    toc_path = build_dir / "_toc.effective.yml"
    toc_path.write_text(
        "# Generated by tools/site/build_book.py from _toc.yml; do not edit.\n" + yaml.safe_dump(toc, sort_keys=False)
    )

    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    command = [
        str(jupyter_book) if jupyter_book.exists() else "jupyter-book",
        "build",
        str(ROOT),
        "--path-output",
        str(build_dir.parent),
        "--toc",
        str(toc_path),
        "--builder",
        builder,
        "--warningiserror",
        "--keep-going",
    ]
    # The chapters' kernels stamp each figure's PNG with its smallest text size (read by the
    # legibility test, tests/book/test_site_figures.py); see tools/site/figure_audit.py.
    environment["IPYTHONDIR"] = str(figure_audit.ipython_dir(build_dir / "ipython"))
    completed = subprocess.run(command, cwd=ROOT, env=environment)
    if completed.returncode != 0:
        raise SystemExit(f"jupyter-book build failed (exit code {completed.returncode})")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", nargs="?", default="_build", help="output folder (must be named _build)")
    parser.add_argument("--vendor-only", action="store_true", help="only refresh vendor/ from node_modules")
    parser.add_argument(
        "--other-machine",
        action="store_true",
        help="execute the chapters under the second numerical configuration (OTHER_MACHINE), as make test does",
    )
    parser.add_argument(
        "--train-seeds",
        action="store_true",
        help="train every seed of chapters 4 and 6 instead of loading seeds 1-4 (ATTENTION_BOOK_SEEDS=train), "
        "as make test does",
    )
    arguments = parser.parse_args(argv)
    if arguments.vendor_only:
        vendor_assets()
        return 0
    folder = ROOT / arguments.build_dir if not Path(arguments.build_dir).is_absolute() else Path(arguments.build_dir)
    seconds = build(folder, other_machine=arguments.other_machine, train_seeds=arguments.train_seeds)
    index = (ROOT / arguments.build_dir / "html" / "index.html").resolve()
    where = " (chapters executed under the second numerical configuration)" if arguments.other_machine else ""
    where += " (every seed trained, none loaded)" if arguments.train_seeds else ""
    print(f"Built in {seconds:.0f} s{where}: {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
