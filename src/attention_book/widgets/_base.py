"""What every attention widget shares (the widgets of chapters 1-7).

A widget is an anywidget (one ES module, joined from ``js/`` next to this file) whose picture and
controls are drawn by the browser as SVG. The kernel computes with torch on the chosen
device and sends numbers, never pictures:

* ``data`` (sent as the JSON text ``payload``): what the kernel computed, for every presentation the browser may ask for
  (each temperature, query, mask, layer, head, decoding step), so that those controls
  respond in the browser within one frame, also on the static website where no kernel runs;
* ``view``: what is shown now (the browser writes it back, so a saved notebook keeps it);
* ``inputs``: the controls that need the model (a sentence, a source, typed numbers); the
  browser writes them, the kernel recomputes ``data`` or answers with ``error``;
* ``error``: ``{"control": name, "message": text}``, shown next to that control while the
  picture, left as it was, is marked stale;
* ``devices`` and ``device``: where torch runs; with one device the browser shows a label
  ("device: cpu; no GPU found") instead of a menu.

The widget state (all of the above and the module's source) is saved in the notebook, so
a reopened notebook and the book's website draw the last picture without a kernel.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from contextlib import contextmanager
from functools import cache
from importlib import resources
from typing import Any

import anywidget
import ipywidgets
import matplotlib
import numpy as np
import torch
import traitlets

from ..analysis.plotting import ATTENTION_CMAP
from ..device import available_devices, default_device

IPYWIDGETS_7 = ipywidgets.__version__.startswith("7.")

__all__ = [
    "AttentionWidget",
    "WidgetInputError",
    "widget_module_source",
    "rounded",
    "one_cpu_thread",
    "PAGE_MODELS_VARIABLE",
    "page_models_wanted",
    "onnx_base64",
    "onnx_bytes",
]


class WidgetInputError(ValueError):
    """Bad input typed into a widget: shown next to ``control`` in the widget, never raised to the user."""

    def __init__(self, message: str, control: str | None = None):
        super().__init__(message)
        self.control = control


# Set to "1" by the site build (tools/site/build_book.py): the head viewer and the decoding stepper
# then save their model as ONNX with the widget, so that the website runs it without a kernel
# (issue 35). In Jupyter and Colab a kernel runs the model, so nothing is exported there: no
# export time, no onnx package, no larger notebook.
PAGE_MODELS_VARIABLE = "ATTENTION_BOOK_PAGE_MODELS"


def page_models_wanted() -> bool:
    """Whether widgets save a copy of their model for the website (:data:`PAGE_MODELS_VARIABLE`)."""
    return os.environ.get(PAGE_MODELS_VARIABLE, "") == "1"


def onnx_bytes(module, inputs: tuple, *, input_names, output_names, dynamic_axes) -> bytes | None:
    """``module`` run on ``inputs``, exported to ONNX (opset 17); None if torch cannot export it (any error:
    the website then keeps the widget's typed input disabled).

    Torch 2.5 and later choose between two exporters (torch.export's, which cannot trace the
    embedding's check of the ids, is the default from 2.9): this asks for the TorchScript-based
    one, which needs the ``onnx`` package and nothing else. Weights keep their state-dict names,
    unfolded, so a test can rebuild the torch model of a saved page from them.
    """
    import inspect
    import io
    import warnings

    buffer = io.BytesIO()
    choose = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's deprecation and tracer warnings
            torch.onnx.export(
                module,
                inputs,
                buffer,
                **choose,
                input_names=input_names,
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                opset_version=17,
                do_constant_folding=False,
            )
    except Exception:  # any failure only means: no typing on the website
        return None
    return buffer.getvalue()


def onnx_base64(module, inputs: tuple, *, input_names, output_names, dynamic_axes) -> str | None:
    """:func:`onnx_bytes` as base64 text (what a widget saves for the website), or None."""
    import base64

    exported = onnx_bytes(module, inputs, input_names=input_names, output_names=output_names, dynamic_axes=dynamic_axes)
    return None if exported is None else base64.b64encode(exported).decode("ascii")


# The widgets' JavaScript, one unit per file in widgets/js/, in the order they are joined: the shared kit,
# the drawing pieces, Python's semantics, the ONNX loader, BERT's tokenizer (chapter 7), one file per widget
# in chapter order (its drawing, its page computation, its view rule), and render.js, which builds a widget
# and exports it.
MODULE_FILES = (
    "kit.js",
    "pictures.js",
    "python.js",
    "onnx.js",
    "wordpiece.js",
    "01_attention.js",
    "02_key_value.js",
    "03_soft_hard.js",
    "04_heads.js",
    "05_positional.js",
    "06_decoding.js",
    "render.js",
)
# A file's imports of its siblings (for the linter and the reader), dropped when the files are joined.
_SIBLING_IMPORT = re.compile(r'^import \{[^}]*\} from "\./[\w.]+\.js";\n', re.MULTILINE)


def join_module_files(texts: dict[str, str]) -> str:
    """The files of widgets/js (name -> text, in :data:`MODULE_FILES` order) as one ES module, their
    imports of each other dropped: what the browser loads, with no imports at all."""
    parts = []
    for name, text in texts.items():
        body = _SIBLING_IMPORT.sub("", text)
        if re.search(r"^import\b", body, re.MULTILINE):
            raise ValueError(f"widgets/js/{name}: only imports of the form 'import {{ a, b }} from \"./file.js\";'")
        parts.append(f"// ---- widgets/js/{name} ----\n{body.strip()}\n")
    return "\n".join(parts)


@cache
def widget_module_source() -> str:
    """The widgets' JavaScript as one ES module (what anywidget loads in the browser, saved as ``_esm``)."""
    folder = resources.files(__package__).joinpath("js")
    return join_module_files({name: folder.joinpath(name).read_text(encoding="utf-8") for name in MODULE_FILES})


@cache
def _palette(stops: int = 11) -> list[str]:
    colour_map = matplotlib.colormaps[ATTENTION_CMAP]
    return [matplotlib.colors.to_hex(colour_map(i / (stops - 1))) for i in range(stops)]


def rounded(values: Any, digits: int = 4) -> Any:
    """Numbers (a tensor, array or nested lists) as nested lists rounded to ``digits`` decimals for
    sending to the browser; non-finite numbers (a masked score's -inf) become None."""
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().double().numpy()
    array = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(array)
    if finite.all():
        return np.round(array, digits).tolist()
    return np.where(finite, np.round(np.where(finite, array, 0.0), digits), None).tolist()


@contextmanager
def one_cpu_thread(device: torch.device):
    """Run the block on one CPU thread (restored afterwards; nothing changes on a GPU).

    A widget's computation is a handful of small tensor operations that take well under a
    millisecond each on one thread; split over two threads on a busy machine (Colab's two
    shared cores, a laptop running other work) they took 10 to 50 times longer here.
    """
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class AttentionWidget(anywidget.AnyWidget):
    """Base class: numbers computed with torch on a chosen device, drawn by the browser.

    Subclasses set ``kind`` (which unit of ``js/`` draws it), give ``view`` and ``inputs``
    their first values and implement :meth:`compute` (inputs -> data, with torch on
    ``device``; raises :class:`WidgetInputError` for bad input).
    """

    _esm = traitlets.Unicode(widget_module_source()).tag(sync=True)
    kind = traitlets.Unicode("").tag(sync=True)
    title = traitlets.Unicode("attention").tag(sync=True)
    # The numbers travel as one JSON text: ipywidgets would otherwise walk every nested list
    # looking for binary buffers, which took longer than computing them.
    payload = traitlets.Unicode("{}").tag(sync=True)
    view = traitlets.Dict().tag(sync=True)
    inputs = traitlets.Dict().tag(sync=True)
    error = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    devices = traitlets.List(traitlets.Unicode()).tag(sync=True)
    device_name = traitlets.Unicode("cpu").tag(sync=True)
    palette = traitlets.List(traitlets.Unicode()).tag(sync=True)

    def __init__(self, device: str | torch.device | None = None, **kwargs):
        chosen = str(device if device is not None else default_device()).split(":")[0]
        options = available_devices()
        if chosen not in options:
            raise ValueError(f"device {chosen!r} is not available here; expected one of {options}")
        super().__init__(devices=options, palette=_palette(), **kwargs)
        self.device_name = chosen
        self.timings_ms: list[float] = []
        self.state: Any = None
        self.data: dict = {}  # the numbers last computed (sent to the browser as ``payload``)

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_name)

    def compute(self, device: torch.device) -> dict:
        raise NotImplementedError

    def _start(self) -> None:
        """Call at the end of a subclass ``__init__``: computes once, then listens."""
        self.update()
        if self.error:
            raise ValueError(self.error["message"])
        self.observe(self._on_inputs, names="inputs")
        self.observe(self._on_device, names="device_name")

    def _on_inputs(self, change: dict) -> None:
        old, new = change["old"] or {}, change["new"] or {}
        changed = [name for name in new if old.get(name) != new.get(name)]
        self.update(changed[0] if changed else None)

    def _on_device(self, change: dict) -> None:
        self.update("device")

    def update(self, changed: str | None = None) -> None:
        """Recompute with torch; bad input sets ``error`` and keeps the last good ``data``.

        The computation runs under ``torch.inference_mode()``, measured about 12 % faster than
        ``no_grad`` for the decoding stepper (23-26 against 27-28 ms). So the attention weights a
        widget leaves in a model's ``last_weights`` are inference tensors: to use one in a
        computation that autograd records, ``clone()`` it first (or run the model again).
        """
        start = time.perf_counter()
        try:
            with one_cpu_thread(self.device), torch.inference_mode():
                data = self.compute(self.device)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
        except WidgetInputError as error:
            self.error = {"control": error.control or changed or "", "message": str(error)}
            return
        elapsed = 1000 * (time.perf_counter() - start)
        self.timings_ms.append(elapsed)
        with self.hold_sync():
            self.state = data
            self.error = {}
            self.status = f"computed in {elapsed:.0f} ms on {self.device.type}"
            self.view = self.adjust_view(dict(self.view), data)
            self.data = data
            self.payload = json.dumps(data, separators=(",", ":"), allow_nan=False)

    def adjust_view(self, view: dict, data: dict) -> dict:
        """The view to show after new data (e.g. a query index kept within the new sentence)."""
        return view

    def set_view(self, **changes) -> None:
        """Change what is shown, as the browser's presentation controls do (no recomputation)."""
        unknown = sorted(set(changes) - set(self.view))
        if unknown:
            raise ValueError(f"unknown view setting(s) {unknown}; this widget's are {sorted(self.view)}")
        self.view = {**self.view, **changes}

    def set_input(self, name: str, value: str) -> None:
        """Type ``value`` into the model-bound control ``name``, as the browser does (recomputes)."""
        if name not in self.inputs:
            raise ValueError(f"unknown input {name!r}; this widget's are {sorted(self.inputs)}")
        if self.inputs.get(name) == value:
            self.update(name)
        else:
            self.inputs = {**self.inputs, name: value}

    def median_update_ms(self) -> float:
        return statistics.median(self.timings_ms) if self.timings_ms else float("nan")

    def _repr_mimebundle_(self, **kwargs):
        """anywidget's bundle (a widget view; on Colab with the custom widget manager's
        metadata), with a line of text for front ends that show no widgets."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data)
        data["text/plain"] = f"<{type(self).__name__}: open this chapter in Jupyter or Colab to interact>"
        return data, metadata

    if IPYWIDGETS_7:
        # ipywidgets 7 (Colab's) displays widgets through _ipython_display_, which IPython prefers
        # to _repr_mimebundle_ and which would drop the metadata that tells Colab's custom widget
        # manager to draw the view (manzt/anywidget#48, #63): display the full bundle instead.
        def _ipython_display_(self, **kwargs):
            from IPython.display import display

            data, metadata = self._repr_mimebundle_()
            display(data, metadata=metadata, raw=True)
            self._handle_displayed(**kwargs)
