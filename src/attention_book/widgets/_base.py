"""What every attention widget shares (the widgets of chapters 1-7).

A widget is a row of controls, a picture redrawn after every change, a status line
("updated in 12 ms on cpu") and a message area for bad input. Subclasses say what
controls they have (:meth:`controls`), what to compute with torch on a device
(:meth:`compute`) and how to draw it (:meth:`draw`).

Two ways of being seen:

* live, in Jupyter or Colab: the ipywidgets box; sliders update when released
  (``continuous_update=False``), so dragging never queues a backlog;
* on the static website: displaying a widget also puts a PNG of its current
  figure in the same output (the ``image/png`` entry of its MIME bundle), which
  the book's build shows instead of the interactive view.
"""

from __future__ import annotations

import base64
import html
import io
import statistics
import struct
import time
import zlib
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..device import available_devices, default_device

__all__ = ["AttentionWidget", "WidgetInputError", "png_bytes"]


class WidgetInputError(ValueError):
    """Bad input typed into a widget: shown in the widget, never raised to the user."""


class AttentionWidget:
    """Base class: controls + figure + status + message, recomputed with torch on a chosen device."""

    title = "attention"
    figure_size = (7.0, 3.0)
    dpi = 80

    def __init__(self, device: str | torch.device | None = None):
        chosen = str(device if device is not None else default_device()).split(":")[0]
        options = available_devices()
        if chosen not in options:
            raise ValueError(f"device {chosen!r} is not available here; expected one of {options}")
        self.device_dropdown = widgets.Dropdown(options=options, value=chosen, description="device")
        self.status = widgets.HTML()
        self.message = widgets.HTML()
        self.image = widgets.Image(format="png")
        self.image.layout.max_width = "100%"
        self.figure = Figure(figsize=self.figure_size, dpi=self.dpi, layout="constrained")
        self.state: Any = None
        self.error: str | None = None
        self.timings_ms: list[float] = []
        self._building = True

    # -- to be provided by subclasses -------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        raise NotImplementedError

    def compute(self, device: torch.device) -> Any:
        raise NotImplementedError

    def draw(self, state: Any) -> None:
        raise NotImplementedError

    # -- shared behaviour ---------------------------------------------------------------
    def _finish_init(self) -> None:
        """Call at the end of a subclass ``__init__``: wires the controls and draws once."""
        for control in [*self.controls(), self.device_dropdown]:
            control.observe(self.update, names="value")
        self._building = False
        self.box = widgets.VBox(
            [
                widgets.HTML(f"<b>{html.escape(self.title)}</b>"),
                widgets.HBox(self.controls(), layout=widgets.Layout(flex_flow="row wrap")),
                self.image,
                widgets.HBox([self.device_dropdown, self.status]),
                self.message,
            ]
        )
        self.update()

    @property
    def device(self) -> torch.device:
        return torch.device(self.device_dropdown.value)

    def update(self, change: Any = None) -> None:
        """Recompute and redraw; bad input shows a message and keeps the last good figure."""
        if self._building:
            return
        start = time.perf_counter()
        try:
            state = self.compute(self.device)
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            self.draw(state)
            self.image.value = self.png()
        except WidgetInputError as error:
            self.error = str(error)
            self.message.value = f'<span style="color:#b00020">&#9888; {html.escape(self.error)}</span>'
            return
        self.state = state
        self.error = None
        self.message.value = ""
        elapsed = 1000 * (time.perf_counter() - start)
        self.timings_ms.append(elapsed)
        self.status.value = f"<small>updated in {elapsed:.0f} ms on {self.device.type}</small>"

    def cache_background(self, figure: Figure, dynamic: list, freeze_layout: bool = True) -> None:
        """Draw ``figure`` once without the ``dynamic`` artists and keep its pixels.

        Afterwards :meth:`png` only restores those pixels and draws the dynamic artists on
        top (blitting), which keeps an update well under 50 ms. ``freeze_layout`` turns the
        layout engine off after the first draw, so the cached background stays aligned.
        """
        self._dynamic = list(dynamic)
        for artist in self._dynamic:
            artist.set_animated(True)  # left out of full draws; png() draws them on the background
        self._canvas = FigureCanvasAgg(figure)
        self._canvas.draw()
        if freeze_layout:
            figure.set_layout_engine("none")
        self._background = self._canvas.copy_from_bbox(figure.bbox)

    def png(self) -> bytes:
        """The current figure as PNG: blitted onto the cached background when there is one."""
        if getattr(self, "_background", None) is None:
            buffer = io.BytesIO()
            self.figure.savefig(buffer, format="png", dpi=self.dpi)
            return buffer.getvalue()
        canvas = self._canvas
        canvas.restore_region(self._background)
        for artist in self._dynamic:
            artist.axes.draw_artist(artist)
        return png_bytes(np.asarray(canvas.buffer_rgba()))

    def median_update_ms(self) -> float:
        return statistics.median(self.timings_ms) if self.timings_ms else float("nan")

    def _repr_mimebundle_(self, **kwargs) -> dict:
        """The live widget for Jupyter, plus a PNG of the current figure for static pages."""
        bundle = self.box._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data = dict(data)
        data["image/png"] = base64.b64encode(self.png()).decode("ascii")
        data["text/plain"] = f"<{type(self).__name__}: open this chapter in Jupyter or Colab to interact>"
        return data


def png_bytes(rgba: np.ndarray) -> bytes:
    """Encode an (height, width, 4) uint8 RGBA image as PNG, quickly.

    Pillow tries five row filters on every row and keeps the best, which takes most of the
    time of an update; here every row is stored unfiltered and deflated at level 1 (fast), so
    encoding takes about half as long for a slightly larger file. Any PNG reader reads it.
    """
    height, width, channels = rgba.shape
    if channels != 4 or rgba.dtype != np.uint8:
        raise ValueError(f"expected an (height, width, 4) uint8 RGBA image, got shape {rgba.shape} and dtype {rgba.dtype}")
    rows = np.empty((height, width * 4 + 1), dtype=np.uint8)
    rows[:, 0] = 0  # filter type 0 ("none") at the start of every row
    rows[:, 1:] = rgba.reshape(height, width * 4)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8 bits per channel, colour type 6 (RGBA)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 1)) + chunk(b"IEND", b"")
