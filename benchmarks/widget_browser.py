"""Input-to-picture latency of every control of every widget, in headless Chromium (issue 20).

Two places a reader meets the widgets:

* JupyterLab (from .venv, with `make lab`'s settings): a notebook with one widget of each kind
  (benchmarks/widget_cases.py) is run; each presentation-only control (slider, menu, checkbox,
  button) is moved and each model-bound control (sentence, source, typed numbers, d_model)
  gets a new value, alternating between two;
* the static site: the same notebook built by jupyter-book into a one-page book (the book's
  _config.yml and vendored JavaScript), opened from file:// with no kernel; the
  presentation-only controls work there, and so do chapter 2's query, chapter 3's scores and
  chapter 5's d_model, which widgets.js computes in the page, and the head viewer's sentence and
  the decoding stepper's source, which run the widget's model (saved as ONNX) with onnxruntime-web
  (issue 35; COMPUTED_ON_SITE). The first typed input of each of those two also loads
  onnxruntime-web (its WebAssembly) and the model: that first use is timed on its own, over fresh
  page loads (FIRST_USE). The site's page also holds chapter 7's case (widget_cases.minilm_head_viewer):
  MiniLM's head viewer, whose menu of sentences draws the weights the build saved and whose typed
  sentence runs MiniLM in the page, from the script the site serves beside it, loaded on the first
  sentence typed (issue 46: budgets MINILM_FIRST_MS for that first sentence, MINILM_MS for later ones).

Latency = from dispatching the input event to the first animation frame after the widget has
drawn the new picture (requestAnimationFrame, then a task: the frame has been painted). For
a model-bound control that includes the kernel's round trip (comm message, torch, reply). For a
presentation-only control the widget redraws inside the event handler, so the time to the
redrawn picture ("draw") is measured too: under 16.7 ms, the next frame shows it, and the
time to the painted frame is mostly the wait for that frame (up to one refresh interval).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from widget_cases import MODEL_INPUTS  # noqa: E402

from attention_book.widgets._base import PAGE_MODELS_VARIABLE  # noqa: E402

# Presentation-only controls of each widget kind, by name (see widgets.js).
PRESENTATION = {
    "attention": ["temperature", "query", "scaled", "causal"],
    "key_value": ["query_0", "query_1", "query_2"],
    "soft_hard": ["beta"],
    "heads": ["layer", "head"],
    "positional": ["length", "measure"],
    "decoding": ["step", "back", "next", "head"],
}

# On the site, a head viewer with a menu of sentences (chapter 7's case) is timed on its menu only:
# its other controls are those of the first head viewer, already timed.
PRESENTATION_SITE = {**PRESENTATION, "heads": [*PRESENTATION["heads"], "example"]}

SAVED_BY_THE_BUILD = "drawn from weights saved by the build (no kernel)"

# The model-bound controls that the website's page computes itself (widgets.js, STATIC_COMPUTE),
# typed into there as in JupyterLab.
COMPUTED_ON_SITE = {
    kind: [name, values]
    for kind, (name, values) in MODEL_INPUTS.items()
    if kind in ("attention", "key_value", "soft_hard", "positional", "heads", "decoding")
}
FIRST_USE_LOADS = 10  # page loads, each timing the first typed input of a widget that runs a model
MINILM_FIRST_MS = 3000.0  # chapter 7's first typed sentence, the model's load included: median to paint
MINILM_MS = 100.0  # chapter 7's later typed sentences: median to paint
MINILM_INDEX = 6  # chapter 7's case: the seventh widget of the site's page (_write_notebook)

# A laptop's browser window; each widget is scrolled into view before its controls are moved.
# Headless Chromium paints in software, on the two cores the kernel uses too: with a 4000 px tall
# window (every widget on screen at once) its GPU process took 40 ms of CPU per source edit of the
# decoding stepper against 11-12 ms at 900 px, and the edit took 51.5 and 53.3 ms (median of 30)
# against 47.8 and 48.0 ms.
WINDOW = (1280, 900)

NOTEBOOK_SETUP = (
    "import sys\n"
    f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
    "from widget_cases import widget_cases\n"
    "widgets = {name: build('cpu') for name, build, poke in widget_cases()}\n"
    "names = list(widgets)"
)

# Runs in the page: moves each control ``repeats`` times and times input -> painted picture.
MEASURE = r"""
const done = arguments[arguments.length - 1];
const [presentation, bound, repeats, live] = [arguments[0], arguments[1], arguments[2], arguments[3]];
const painted = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
function move(widget, name, i) {
  const element = widget.querySelector(`[name="${name}"]`);
  if (element.tagName === "BUTTON") { element.click(); return; }
  if (element.type === "range") {
    const min = Number(element.min), max = Number(element.max), step = Number(element.step) || 1;
    const stops = Math.round((max - min) / step);
    element.value = min + step * ((i * 7 + 3) % (stops + 1));
    element.dispatchEvent(new Event("input", { bubbles: true }));
    element.dispatchEvent(new Event("change", { bubbles: true }));
    return;
  }
  if (element.type === "checkbox") { element.click(); return; }
  const first = element.options[0].value === "null" ? 1 : 0;  // a menu's "choose…" line chooses nothing
  element.selectedIndex = first + ((element.selectedIndex - first + 1) % (element.options.length - first));
  element.dispatchEvent(new Event("change", { bubbles: true }));
}
// Resolves when the widget has drawn a new picture (it counts them in data-frames), or with false
// after 20 s. An observer, not a polling loop: polling would take CPU from the kernel, which on a
// two-core machine made the kernel's computation half again as slow as without the browser.
function redrawn(widget) {
  const frames = widget.dataset.frames;
  return new Promise((resolve) => {
    const observer = new MutationObserver(() => {
      if (widget.dataset.frames !== frames) { observer.disconnect(); clearTimeout(timer); resolve(true); }
    });
    const timer = setTimeout(() => { observer.disconnect(); resolve(false); }, 20000);
    observer.observe(widget, { attributes: true, attributeFilter: ["data-frames"] });
  });
}
async function typeInto(widget, name, value) {
  const element = widget.querySelector(`[name="${name}"]`);
  const drawnAgain = redrawn(widget);
  const start = performance.now();
  element.value = value;
  element.dispatchEvent(new Event("change", { bubbles: true }));
  if (!(await drawnAgain)) return null;
  const drawn = Number(widget.dataset.drawnAt) - start;  // the widget stamps when it redrew
  const drawing = Number(widget.dataset.drawMs);  // of which the widget spent drawing
  await painted();
  return [drawn, performance.now() - start, drawing];
}
(async () => {
  const rows = [];
  for (const [index, widget] of Array.from(document.querySelectorAll(".ab-widget")).entries()) {
    const kind = widget.dataset.kind;
    widget.scrollIntoView({ block: "center" });  // in view, as a reader has it when using it
    await sleep(300);
    const menu = Boolean(widget.querySelector('[name="example"]'));
    for (const name of presentation[kind] || []) {
      if (!widget.querySelector(`[name="${name}"]`) || (menu && name !== "example")) continue;
      const times = [];
      const handled = [];
      for (let i = 0; i < repeats + 2; i += 1) {
        await painted();
        const start = performance.now();
        move(widget, name, i);  // the widget redraws inside the event handler
        const drawn = performance.now() - start;
        await painted();
        if (i >= 2) {  // two warm-up moves
          times.push(performance.now() - start);
          handled.push(drawn);
        }
      }
      rows.push({ kind, index, control: name, bound: false, times, handled });
    }
    if (live && bound[kind] && !widget.querySelector(`[name="${bound[kind][0]}"]`).disabled) {
      const [name, values] = bound[kind];
      const times = [];
      const handled = [];
      const drawing = [];
      for (let i = 0; i < repeats + 2; i += 1) {
        const ms = await typeInto(widget, name, values[(i + 1) % 2]);
        if (ms === null) { times.push(null); break; }
        if (i >= 2) { handled.push(ms[0]); times.push(ms[1]); drawing.push(ms[2]); }
      }
      rows.push({ kind, index, control: name, bound: true, times, handled, drawing });
    }
  }
  done(rows);
})();
"""


# Runs in the page: a widget's first typed input after the page loaded, input to painted picture
# (onnxruntime-web's script, WebAssembly compilation, the model's session and the run).
FIRST_USE = r"""
const done = arguments[arguments.length - 1];
const [index, name, value] = arguments;
const widget = document.querySelectorAll(".ab-widget")[index];
widget.scrollIntoView({ block: "center" });
setTimeout(() => {
  const frames = widget.dataset.frames;
  const element = widget.querySelector(`[name="${name}"]`);
  const observer = new MutationObserver(() => {
    if (widget.dataset.frames === frames) return;
    observer.disconnect();
    requestAnimationFrame(() => setTimeout(() => done(performance.now() - start), 0));
  });
  observer.observe(widget, { attributes: true, attributeFilter: ["data-frames"] });
  setTimeout(() => { observer.disconnect(); done(null); }, 20000);
  const start = performance.now();
  element.value = value;
  element.dispatchEvent(new Event("change", { bubbles: true }));
}, 300);
"""


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _summarise(rows: list[dict], where: str, bound_kind: str = "model-bound (kernel round trip)") -> list[dict]:
    summary = []
    for row in rows:
        times = [t for t in row["times"] if t is not None]
        entry = {
            "where": where,
            "widget": row["kind"],
            "control": row["control"],
            "kind": bound_kind if row["bound"] else "presentation-only",
            "moves": len(times),
        }
        if times and None not in row["times"]:
            entry.update(median_ms=statistics.median(times), p95_ms=_percentile(times, 95))
            if row["handled"]:  # input event to picture redrawn (before the browser paints it)
                entry.update(
                    draw_median_ms=statistics.median(row["handled"]), draw_p95_ms=_percentile(row["handled"], 95)
                )
            if row.get("drawing") and "kernel" in bound_kind:  # of a kernel round trip, the part spent drawing
                entry.update(drawing_median_ms=statistics.median(row["drawing"]))
        else:
            entry["error"] = "no new picture within 20 s"
        summary.append(entry)
    return summary


def _write_notebook(folder: Path, *, site: bool = False) -> Path:
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Widget benchmark\n\nOne widget of each kind."),
        nbformat.v4.new_code_cell(NOTEBOOK_SETUP),
    ]
    notebook.cells += [nbformat.v4.new_code_cell(f"widgets[names[{i}]]") for i in range(6)]
    if site:  # chapter 7's case, which only the site draws differently (its widget MINILM_INDEX)
        notebook.cells.append(
            nbformat.v4.new_code_cell("from widget_cases import minilm_head_viewer\nminilm_head_viewer('cpu')")
        )
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "widgets.ipynb"
    nbformat.write(notebook, path)
    return path


def bench_lab(repeats: int, scratch: Path) -> list[dict]:
    from tests.book.lab_support import chromium, jupyter_lab, open_notebook, run_all, widgets_drawn

    folder = scratch / "lab"
    folder.mkdir()
    _write_notebook(folder)
    bound = {kind: [name, values] for kind, (name, values) in MODEL_INPUTS.items()}
    with jupyter_lab(folder, scratch) as (base, token), chromium(*WINDOW) as driver:
        open_notebook(driver, base, token, "widgets.ipynb")
        run_all(driver)
        drawn = widgets_drawn(driver, list(PRESENTATION))
        if drawn["missing"] or drawn["broken"]:
            raise RuntimeError(f"JupyterLab did not draw every widget: {drawn}")
        driver.set_script_timeout(600)
        rows = driver.execute_async_script(MEASURE, PRESENTATION, bound, repeats, True)
    return _summarise(rows, "JupyterLab")


def bench_site(repeats: int, scratch: Path) -> list[dict]:
    """Build a one-page book of the benchmark notebook with the book's configuration; time it offline."""
    from tests.book.lab_support import chromium

    book = scratch / "site"
    book.mkdir()
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "site" / "build_book.py"), "--vendor-only"], check=True, cwd=ROOT
    )
    for name in ("_config.yml", "tools", "vendor", "img"):
        source = ROOT / name
        (shutil.copytree if source.is_dir() else shutil.copy2)(source, book / name)
    (book / "book").mkdir()
    shutil.copy2(ROOT / "book" / "references.bib", book / "book" / "references.bib")
    (book / "_toc.yml").write_text("format: jb-book\nroot: widgets\n")
    _write_notebook(book, site=True)
    config = (book / "_config.yml").read_text().replace("execute_notebooks: cache", "execute_notebooks: force")
    (book / "_config.yml").write_text(config)
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    completed = subprocess.run(
        [str(jupyter_book), "build", str(book), "--path-output", str(book)],
        capture_output=True,
        text=True,
        env={**os.environ, PAGE_MODELS_VARIABLE: "1"},  # as the site build: the widgets save their models
    )
    if completed.returncode != 0:
        raise RuntimeError("the one-page book did not build:\n" + completed.stdout[-2000:] + completed.stderr[-2000:])
    page = book / "_build" / "html" / "widgets.html"
    with chromium(*WINDOW) as driver:
        driver.get(page.as_uri())
        from tests.book.test_site_widgets import POKE_SCRIPT  # waits until the widgets have drawn

        driver.execute_async_script(POKE_SCRIPT, {"presentation": {}, "bound": {}})
        driver.set_script_timeout(600)
        rows = driver.execute_async_script(MEASURE, PRESENTATION_SITE, COMPUTED_ON_SITE, repeats, True)
        # the head viewer (the page's fourth widget), the decoding stepper (sixth) and chapter 7's MiniLM
        for index, kind in ((3, "heads"), (5, "decoding"), (MINILM_INDEX, "heads")):
            name, values = COMPUTED_ON_SITE[kind]
            first = []
            for _ in range(FIRST_USE_LOADS):  # a fresh page each time: nothing loaded yet
                driver.get(page.as_uri())
                driver.execute_async_script(POKE_SCRIPT, {"presentation": {}, "bound": {}})
                first.append(driver.execute_async_script(FIRST_USE, index, name, values[1]))
            rows.append(
                {
                    "kind": kind,
                    "index": index,
                    "control": f"{name} (first use: WebAssembly and model loaded)",
                    "bound": True,
                    "times": first,
                    "handled": [],
                }
            )
    summary = _summarise(rows, "site (file://, no kernel)", bound_kind="computed in the page (no kernel)")
    for row, entry in zip(rows, summary):
        if entry["control"] == "example":  # a new picture, like a typed input's, from weights the build saved
            entry.update(control="sentence menu (chapter 7's case)", kind=SAVED_BY_THE_BUILD)
        elif row["index"] == MINILM_INDEX and row["bound"]:  # chapter 7's MiniLM, served beside the page
            first = "first use" in entry["control"]
            entry.update(
                widget="heads (ch 7, MiniLM)",
                control="sentence, first (script, WebAssembly and model loaded)" if first else "sentence",
                budget_ms=MINILM_FIRST_MS if first else MINILM_MS,
            )
    return summary


def bench_widgets_in_browser(repeats: int = 20) -> list[dict]:
    scratch = Path(tempfile.mkdtemp(prefix="widget-bench-"))
    try:
        return bench_site(repeats, scratch) + bench_lab(repeats, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(bench_widgets_in_browser(int(sys.argv[1]) if len(sys.argv) > 1 else 20), indent=1))
