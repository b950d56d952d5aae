"""Chapter 5's widget: the sinusoidal position table and how similar positions are to each other.

Sliders set the width ``d_model`` (even: sines and cosines come in pairs), the number of
positions and the base of the wavelengths (10,000 in the paper); a menu picks how two
positions are compared. The figure shows, side by side:

* the table ``PE`` itself (:func:`~attention_book.sinusoidal_encoding`): one row per
  position, one column per dimension, sines in even columns and cosines in odd ones;
* the position-to-position matrix: the dot product ``PE[i] . PE[j]`` (which depends only
  on the distance ``|i - j|``) or the cosine similarity (the same, divided by the lengths
  of both vectors, ``d_model / 2`` each for an even width).

Both are computed with torch on the device chosen in the widget's menu.
"""

from __future__ import annotations

import io
import math

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image, ImageDraw, ImageFont

from ..analysis.plotting import ATTENTION_CMAP
from ..positional import sinusoidal_encoding, sinusoidal_frequencies
from ._base import AttentionWidget, WidgetInputError

__all__ = ["PositionalEncodingExplorer", "MEASURES", "MAX_D_MODEL", "MAX_LENGTH", "BASE_RANGE"]

MEASURES = ("dot product", "cosine")
MAX_D_MODEL = 256
MAX_LENGTH = 128
BASE_RANGE = (10.0, 1_000_000.0)


def _short(number: float) -> str:
    """6.3, 63.0, 47,124: a wavelength in a few characters."""
    return f"{number:,.0f}" if number >= 100 else f"{number:.1f}"


class PositionalEncodingExplorer(AttentionWidget):
    """Move d_model, the number of positions and the base; see the table and the similarity of positions.

    Args:
        d_model: width of each position vector, an even number from 2 to 256.
        length: number of positions shown, from 2 to 128.
        device: where the table and the similarities are computed ("cpu", "cuda", ...;
            default: the book's default device).
        base: the base of the wavelengths, from 10 to 1,000,000 (the paper's is 10,000).
        measure: "dot product" or "cosine".

    Bad arguments raise ValueError; a bad value set later (an odd d_model, say) is shown
    in the widget, which keeps its last good figure and stays usable.

    After every update, ``state`` holds ``d_model``, ``length``, ``base``, ``measure``,
    ``table`` (the (length, d_model) encoding, a CPU tensor), ``similarity`` (the
    (length, length) matrix, a CPU tensor) and ``wavelengths`` (the shortest and longest
    wavelength in positions).
    """

    title = "Positional encoding explorer: the sinusoidal table and the similarity of positions"
    figure_size = (9.6, 3.7)

    def __init__(
        self,
        d_model: int = 64,
        length: int = 32,
        device: str | torch.device | None = None,
        base: float = 10000.0,
        measure: str = "dot product",
    ):
        for name, value, low, high in (("d_model", d_model, 2, MAX_D_MODEL), ("length", length, 2, MAX_LENGTH)):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be an integer from {low} to {high}, but {value!r} was given")
        if d_model % 2:
            raise ValueError(f"d_model must be even (sines and cosines come in pairs), but {d_model} was given")
        if isinstance(base, bool) or not isinstance(base, (int, float)) or not BASE_RANGE[0] <= base <= BASE_RANGE[1]:
            raise ValueError(f"base must be a number from {BASE_RANGE[0]:,.0f} to {BASE_RANGE[1]:,.0f}, but {base!r} was given")
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {MEASURES}, but {measure!r} was given")
        super().__init__(device=device)
        layout = {"layout": widgets.Layout(width="300px"), "continuous_update": False}
        self.d_model_slider = widgets.IntSlider(value=d_model, min=2, max=MAX_D_MODEL, step=2, description="d_model", **layout)
        self.length_slider = widgets.IntSlider(value=length, min=2, max=MAX_LENGTH, step=1, description="positions", **layout)
        self.base_slider = widgets.FloatLogSlider(
            value=float(base), base=10, min=math.log10(BASE_RANGE[0]), max=math.log10(BASE_RANGE[1]), step=0.1,
            description="base", readout_format=",.0f", **layout,
        )
        self.measure_dropdown = widgets.Dropdown(
            options=list(MEASURES), value=measure, description="compare by", layout=widgets.Layout(width="240px")
        )
        self._build_figure()
        self._finish_init()

    # -- controls -----------------------------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        return [self.d_model_slider, self.length_slider, self.base_slider, self.measure_dropdown]

    # -- compute ------------------------------------------------------------------------
    def compute(self, device: torch.device) -> dict:
        d_model, length = int(self.d_model_slider.value), int(self.length_slider.value)
        base, measure = float(self.base_slider.value), str(self.measure_dropdown.value)
        if d_model % 2 or not 2 <= d_model <= MAX_D_MODEL:
            raise WidgetInputError(
                f"d_model must be an even number from 2 to {MAX_D_MODEL} (each frequency fills a sine and a cosine "
                f"column), but it is {d_model}"
            )
        if not 2 <= length <= MAX_LENGTH:
            raise WidgetInputError(f"the number of positions must lie between 2 and {MAX_LENGTH}, but it is {length}")
        if not (math.isfinite(base) and BASE_RANGE[0] <= base <= BASE_RANGE[1]):
            raise WidgetInputError(f"the base must lie between {BASE_RANGE[0]:,.0f} and {BASE_RANGE[1]:,.0f}, but it is {base}")
        table = sinusoidal_encoding(length, d_model, base).to(device)  # (length, d_model)
        similarity = table @ table.T  # (length, length): PE[i] . PE[j]
        if measure == "cosine":
            norms = table.norm(dim=-1)  # (length,)
            similarity = similarity / (norms[:, None] * norms[None, :])
        wavelengths = 2 * math.pi / sinusoidal_frequencies(d_model, base)  # (d_model / 2,), in positions
        return {
            "d_model": d_model,
            "length": length,
            "base": base,
            "measure": measure,
            "table": table.cpu(),
            "similarity": similarity.cpu(),
            "wavelengths": (float(wavelengths[0]), float(wavelengths[-1])),
        }

    # -- draw ---------------------------------------------------------------------------
    def _build_figure(self) -> None:
        """Lay out the figure once; afterwards an update redraws only what changes.

        The axes always span the unit square, whatever the number of positions and
        dimensions, so frames, axis labels, titles and colour bars never move: matplotlib
        draws them once into a cached background. An update draws the two images on top of
        it (blitting) and writes the few texts that change (tick labels, the sizes, the
        similarity scale) with Pillow, in the same font, which is many times faster than
        matplotlib's text rendering.
        """
        figure = self.figure
        figure.set_layout_engine("none")
        bottom, height = 0.16, 0.66
        self.table_axes = figure.add_axes((0.07, bottom, 0.45, height))
        table_bar = figure.add_axes((0.53, bottom, 0.012, height))
        self.similarity_axes = figure.add_axes((0.64, bottom, 0.26, height))
        self.similarity_bar = figure.add_axes((0.91, bottom, 0.012, height))
        style = {"cmap": ATTENTION_CMAP, "aspect": "auto", "interpolation": "nearest", "extent": (0.0, 1.0, 1.0, 0.0)}
        self.table_image = self.table_axes.imshow(np.zeros((2, 2)), vmin=-1.0, vmax=1.0, **style)
        # The similarity image shows (value - min) / (max - min), so its colour bar is fixed
        # and only the three numbers written next to it change.
        self.similarity_image = self.similarity_axes.imshow(np.zeros((2, 2)), vmin=0.0, vmax=1.0, **style)
        figure.colorbar(self.table_image, cax=table_bar, ticks=[-1, 0, 1])
        table_bar.tick_params(labelsize=8)
        figure.colorbar(self.similarity_image, cax=self.similarity_bar, ticks=[])
        for axes in (self.table_axes, self.similarity_axes):
            axes.set_xticks([])
            axes.set_yticks([])
        self.table_axes.set_xlabel("dimension (even columns: sin, odd columns: cos)", fontsize=9, labelpad=13)
        self.table_axes.set_ylabel("position p", fontsize=9, labelpad=20)
        self.table_axes.set_title("The encoding table PE: one row per position", fontsize=10, loc="left", pad=16)
        self.similarity_axes.set_xlabel("position j", fontsize=9, labelpad=13)
        self.similarity_axes.set_ylabel("position i (rows as on the left)", fontsize=8)
        self.similarity_axes.set_title("How similar positions i and j are", fontsize=10, loc="left", pad=16)
        for image in (self.table_image, self.similarity_image):
            image.set_animated(True)
        self._canvas = FigureCanvasAgg(figure)
        self._canvas.draw()
        self._background = self._canvas.copy_from_bbox(figure.bbox)
        self._labels: list[tuple[tuple[float, float], str, str, float]] = []  # (pixel xy, text, anchor, size)
        self._fonts: dict[float, ImageFont.FreeTypeFont] = {}

    @staticmethod
    def _ticks(count: int) -> list[int]:
        """At most five round tick values in [0, count): 0, step, 2 step, ..."""
        for step in (1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 40, 50, 64, 100, 128):
            if count <= 5 * step:
                return list(range(0, count, step))
        return [0]

    def _label(self, axes, xy: tuple[float, float], text: str, anchor: str, size: float = 8.0) -> None:
        """Queue a text at ``xy`` in the axes' coordinates (0 to 1), drawn by png()."""
        x, y = axes.transAxes.transform(xy)  # display pixels, origin at the bottom left
        self._labels.append(((float(x), float(self.figure.bbox.height - y)), text, anchor, size))

    def draw(self, state: dict) -> None:
        length, d_model = state["length"], state["d_model"]
        similarity = state["similarity"].numpy()
        low, high = float(similarity.min()), float(similarity.max())
        self.table_image.set_data(state["table"].numpy())
        self.similarity_image.set_data((similarity - low) / max(high - low, 1e-12))
        self._labels = []
        for tick in self._ticks(d_model):  # the centre of column `tick`, in axes coordinates
            self._label(self.table_axes, ((tick + 0.5) / d_model, -0.02), str(tick), "mt")
        for tick in self._ticks(length):
            where = (tick + 0.5) / length
            self._label(self.table_axes, (-0.012, 1.0 - where), str(tick), "rm")
            self._label(self.similarity_axes, (where, -0.02), str(tick), "mt")
        shortest, longest = state["wavelengths"]
        self._label(
            self.table_axes, (0.0, 1.015),
            f"{length} positions × d_model = {d_model}; wavelengths {_short(shortest)} to "
            f"{_short(longest)} positions (base {state['base']:,.0f})", "lb",
        )
        cosine = state["measure"] == "cosine"
        self._label(
            self.similarity_axes, (0.0, 1.015),
            "cosine similarity of PE[i] and PE[j]" if cosine else f"dot product PE[i] · PE[j] (at most {d_model // 2})",
            "lb",
        )
        for y, value in ((0.0, low), (0.5, (low + high) / 2), (1.0, high)):
            self._label(self.similarity_bar, (1.6, y), f"{value:.2f}" if cosine else f"{value:.1f}", "lm")

    def _font(self, size: float) -> ImageFont.FreeTypeFont:
        if size not in self._fonts:
            path = font_manager.findfont(font_manager.FontProperties(family=matplotlib.rcParams["font.family"]))
            self._fonts[size] = ImageFont.truetype(path, size * self.dpi / 72)
        return self._fonts[size]

    def png(self) -> bytes:
        """The figure as PNG: cached background, the two images (blitted), then the changing texts."""
        canvas = self._canvas
        canvas.restore_region(self._background)
        for image in (self.table_image, self.similarity_image):
            image.axes.draw_artist(image)
        picture = Image.fromarray(np.asarray(canvas.buffer_rgba()))  # a copy: the canvas stays as it was
        pen = ImageDraw.Draw(picture)
        for xy, text, anchor, size in self._labels:
            pen.text(xy, text, fill="black", font=self._font(size), anchor=anchor)
        buffer = io.BytesIO()
        picture.save(buffer, format="png", compress_level=1)
        return buffer.getvalue()
