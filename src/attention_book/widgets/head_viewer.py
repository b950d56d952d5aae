"""The head viewer (chapters 4, 6 and 7): a sentence in, every head's attention out.

Give it a model, a function that turns text into token ids, and a first sentence. It
runs the model on the sentence (on the device chosen in its dropdown) and shows the
attention weights of one layer: one heatmap per head in a grid ("all heads"), or one
head alone with its weights written in the cells. Rows are queries, columns are keys,
token labels on both axes, one colour map for the whole book.

The model can be any ``nn.Module`` that maps token ids of shape (1, T) to anything and
afterwards reports its attention weights through ``model.attention_weights()``: a list
with one (batch, heads, T, T) tensor per layer. :class:`~attention_book.Encoder` has
that method; for a model that holds one as ``model.encoder`` (e.g.
:class:`~attention_book.EncoderClassifier`) the viewer asks the encoder.

Typing a sentence re-runs the model (on Enter or when the box loses focus, not on every
keystroke); choosing a layer or a head only redraws. Bad input (an empty sentence, an
unknown word, a sentence longer than the model allows) is shown in the widget, which
keeps its last picture and stays usable.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from PIL import Image, ImageDraw, ImageFont
from torch import nn

from ..analysis.plotting import ATTENTION_CMAP
from ..data.tasks import Encode
from ..modes import evaluating
from ._base import AttentionWidget, WidgetInputError, png_bytes

__all__ = ["HeadViewer", "ALL_HEADS", "MAX_TOKENS"]

ALL_HEADS = "all"
MAX_TOKENS = 40  # beyond this the labels of a heatmap are unreadable
ANNOTATE_UP_TO = 10  # a single head's weights are written in its cells up to this many tokens
GRID_COLUMNS = 4  # heads per row of the grid

def _weights_source(model: nn.Module):
    """The module whose ``attention_weights()`` reports the model's weights."""
    for candidate in (model, getattr(model, "encoder", None)):
        if candidate is not None and callable(getattr(candidate, "attention_weights", None)):
            return candidate
    raise ValueError(
        f"the model ({type(model).__name__}) has no attention_weights() method, and no .encoder that has one; "
        "the head viewer reads each layer's weights through it (attention_book.Encoder has it)"
    )


def _model_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


def _short(label: str, limit: int = 10) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "\u2026"


@dataclass
class _View:
    """One prepared picture (a grid of heads, or a single head) for one sentence.

    matplotlib lays out and draws what stays the same (axes, token labels, colour bar) once;
    that picture is the ``background``. An update only colours the heatmap cells and writes
    the title (and a single head's numbers) onto a copy of it with PIL, which takes a few
    milliseconds, whereas redrawing matplotlib's images and texts would take tens.
    """

    figure: Figure
    background: Image.Image
    panels: list  # pixel boxes (left, top, right, bottom) of the heatmaps, one per head shown
    title_centre: tuple[float, float]
    title_pixels: float
    cell_centres: list = field(default_factory=list)  # (x, y) pixels, row by row; empty: no numbers
    # What the latest draw() asked for.
    matrices: list = field(default_factory=list)
    title: str = ""
    cell_texts: list = field(default_factory=list)


class HeadViewer(AttentionWidget):
    """Type a sentence; see the attention weights of every head of a chosen layer, or of one head.

    Args:
        model: an ``nn.Module`` mapping token ids (1, T) to anything that afterwards reports
            its weights through ``attention_weights()`` (a list of (batch, heads, T, T), one
            per layer), itself or as ``model.encoder``. It is run in eval mode without
            gradients, and moved to the device chosen in the widget (and left there).
        encode: ``encode(text) -> (tokens, labels)`` with tokens a LongTensor (1, T) and
            labels a list of T strings; it raises ValueError for text the model cannot read
            (see :func:`word_encoder`).
        text: the first sentence.
        device: where the model runs (default: where the model already is).
        title: the heading above the widget.
        layer: the layer shown first (default 0).
        head: the head shown first, or ``"all"`` for the grid of all heads (default).

    After every update ``state`` holds ``text``, ``labels`` (one per token), ``layer``,
    ``head`` (an int or ``"all"``), ``num_layers``, ``num_heads`` and ``weights``: a CPU
    tensor (heads, T, T) for all heads or (T, T) for one head, rows = queries, columns = keys.
    ``forward_passes`` counts how often the model has run (a layer or head change reuses the
    last run; a new sentence or device runs the model again).
    """

    title = "Head viewer: the attention of every head"

    def __init__(
        self,
        model: nn.Module,
        encode: Encode,
        text: str,
        device: str | torch.device | None = None,
        title: str | None = None,
        *,
        layer: int = 0,
        head: int | str = ALL_HEADS,
    ):
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, but a {type(model).__name__} was given")
        if not callable(encode):
            raise ValueError(f"encode must be a function text -> (tokens, labels), but a {type(encode).__name__} was given")
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, but a {type(text).__name__} was given")
        if title is not None and not isinstance(title, str):
            raise ValueError(f"title must be a string, but a {type(title).__name__} was given")
        self.model = model
        self.encode = encode
        self._source = _weights_source(model)
        super().__init__(device=device if device is not None else _model_device(model))
        if title is not None:
            self.title = title
        self.forward_passes = 0
        self._cache_key: tuple[str, str] | None = None
        self._cache: tuple[list[str], torch.Tensor] | None = None
        self._views: dict[tuple, _View] = {}
        # Run once now, so that a bad first sentence or model is an error here, not a message.
        try:
            labels, weights = self._run(text, self.device)
        except WidgetInputError as error:
            raise ValueError(f"the first sentence cannot be shown: {error}") from None
        self.num_layers, self.num_heads = weights.shape[0], weights.shape[1]
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be an integer from 0 to {self.num_layers - 1}, but {layer!r} was given")
        if head != ALL_HEADS and (isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < self.num_heads):
            raise ValueError(f"head must be {ALL_HEADS!r} or an integer from 0 to {self.num_heads - 1}, but {head!r} was given")

        self.sentence_text = widgets.Text(
            value=text, description="sentence", continuous_update=False,  # updates on Enter or leaving the box
            placeholder="type a sentence and press Enter", layout=widgets.Layout(width="460px"),
        )
        self.layer_dropdown = widgets.Dropdown(
            options=list(range(self.num_layers)), value=layer, description="layer",
            layout=widgets.Layout(width="170px"),
        )
        self.head_dropdown = widgets.Dropdown(
            options=[("all heads", ALL_HEADS)] + [(f"head {i}", i) for i in range(self.num_heads)], value=head,
            description="head", layout=widgets.Layout(width="170px"),
        )
        self._finish_init()

    # -- controls -----------------------------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        return [self.sentence_text, self.layer_dropdown, self.head_dropdown]

    def set_text(self, text: str) -> None:
        """Type ``text`` into the sentence box and press Enter: the model runs on it (again)."""
        if text == self.sentence_text.value:
            self.refresh()
        else:
            self.sentence_text.value = text

    def refresh(self) -> None:
        """Run the model again on the current sentence (e.g. after training it further) and redraw."""
        self._cache_key = self._cache = None
        self.update()

    # -- running the model ----------------------------------------------------------------
    def _encode(self, text: str) -> tuple[torch.Tensor, list[str]]:
        if not text.strip():
            raise WidgetInputError("the sentence is empty: type a few words and press Enter")
        try:
            result = self.encode(text)
        except ValueError as error:
            raise WidgetInputError(str(error)) from None
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise WidgetInputError(f"encode must return (tokens, labels), but returned a {type(result).__name__}")
        tokens, labels = result
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[0] != 1 or tokens.is_floating_point():
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise WidgetInputError(f"encode must return token ids of shape (1, T) as a LongTensor, but returned {shape}")
        labels = [str(label) for label in labels]
        if len(labels) != tokens.shape[1]:
            raise WidgetInputError(f"encode returned {tokens.shape[1]} tokens but {len(labels)} labels")
        if not labels:
            raise WidgetInputError("the sentence gave no tokens: type a few words")
        if len(labels) > MAX_TOKENS:
            raise WidgetInputError(f"the sentence has {len(labels)} tokens; this viewer shows at most {MAX_TOKENS}")
        return tokens, labels

    def _run(self, text: str, device: torch.device) -> tuple[list[str], torch.Tensor]:
        """Encode, run the model on ``device`` and return (labels, weights (layers, heads, T, T) on the CPU)."""
        key = (device.type, text)
        if key == self._cache_key and self._cache is not None:
            return self._cache
        tokens, labels = self._encode(text)
        if _model_device(self.model).type != device.type:
            self.model.to(device)  # stays there: the next sentence runs without moving it again
        try:
            with torch.no_grad(), evaluating(self.model):
                self.model(tokens.to(device))
        except (ValueError, IndexError) as error:  # e.g. longer than max_len, an id outside the vocabulary
            message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise WidgetInputError(f"the model cannot read this sentence: {message}") from None
        self.forward_passes += 1
        layers = self._source.attention_weights()
        if not layers or any(w is None for w in layers):
            raise WidgetInputError("the model reported no attention weights for this sentence")
        T = len(labels)
        shapes = {tuple(w.shape) for w in layers}
        if len(shapes) != 1 or len(next(iter(shapes))) != 4 or next(iter(shapes))[2:] != (T, T):
            raise WidgetInputError(
                f"expected one (batch, heads, {T}, {T}) weight tensor per layer, but got shapes {sorted(shapes)}"
            )
        weights = torch.stack([w[0] for w in layers]).detach().float().cpu()  # (layers, heads, T, T)
        self._cache_key, self._cache = key, (labels, weights)
        return labels, weights

    def compute(self, device: torch.device) -> dict:
        labels, weights = self._run(self.sentence_text.value, device)
        layer, head = int(self.layer_dropdown.value), self.head_dropdown.value
        shown = weights[layer] if head == ALL_HEADS else weights[layer, int(head)]  # (heads, T, T) or (T, T)
        return {
            "text": self.sentence_text.value,
            "labels": list(labels),
            "layer": layer,
            "head": head if head == ALL_HEADS else int(head),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "weights": shown,
        }

    # -- drawing --------------------------------------------------------------------------
    def _build_view(self, grid: bool, labels: list[str]) -> _View:
        """Lay out and draw everything that stays the same; keep the pixels and where the cells are.

        The layout is computed here, in inches, from the measured size of the token labels:
        matplotlib's automatic layouts take seconds for a grid of twelve heads.
        """
        T = len(labels)
        shown = [_short(label) for label in labels]
        fontsize = 8 if T <= 16 else 6
        rotate = max(len(label) for label in shown) > 2
        dpi = self.dpi
        renderer = FigureCanvasAgg(Figure(dpi=dpi)).get_renderer()
        font = FontProperties(size=fontsize)
        widest = max(renderer.get_text_width_height_descent(label, font, ismath=False)[0] for label in shown) / dpi
        tall = fontsize / 72 * 1.3
        axis_label = 0.3  # "keys" or "queries", with its padding
        left = 0.08 + axis_label + 0.08 + widest
        bottom = 0.08 + axis_label + 0.08 + (widest if rotate else tall)
        if grid:
            columns = min(self.num_heads, GRID_COLUMNS)
            rows = math.ceil(self.num_heads / columns)
            cell = min(3.2, max(2.2, 0.2 * T + 1.2))
            gap_x, gap_y, top = 0.15, 0.32, 0.65  # room for "head i" above each panel; the title above all
        else:
            columns = rows = 1
            cell = min(6.2, max(2.8, 0.42 * T + 0.6))
            gap_x, gap_y, top = 0.0, 0.0, 0.4
        colour_bar_gap, colour_bar_width, right = 0.2, 0.15, 0.8
        panels_width = columns * cell + (columns - 1) * gap_x
        panels_height = rows * cell + (rows - 1) * gap_y
        width = left + panels_width + colour_bar_gap + colour_bar_width + right
        height = top + panels_height + bottom
        figure = Figure(figsize=(width, height), dpi=dpi)
        count = self.num_heads if grid else 1
        used = []
        for index in range(count):
            row, column = divmod(index, columns)
            x0 = left + column * (cell + gap_x)
            y0 = height - top - (row + 1) * cell - row * gap_y
            ax = figure.add_axes((x0 / width, y0 / height, cell / width, cell / height))
            image = ax.imshow(np.zeros((T, T)), cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0, aspect="auto")
            image.set_visible(False)  # the cells are coloured by png()
            used.append(ax)
            # Token labels on the left column and under the lowest panel of each column only.
            lowest = index + columns >= count
            if lowest:
                ax.set_xticks(range(T), shown, rotation=90 if rotate else 0, fontsize=fontsize)
                ax.set_xlabel("keys (attended to)" if not grid else "keys", fontsize=8 if grid else 10)
            else:
                ax.set_xticks([])
            if column == 0:
                ax.set_yticks(range(T), shown, fontsize=fontsize)
                ax.set_ylabel("queries (attending)" if not grid else "queries", fontsize=8 if grid else 10)
            else:
                ax.set_yticks([])
            if grid:
                ax.set_title(f"head {index}", fontsize=9, pad=3)
        colour_axes = figure.add_axes(
            ((left + panels_width + colour_bar_gap) / width, bottom / height, colour_bar_width / width, panels_height / height)
        )
        # The colour bar is drawn from the colour map alone (the images stay invisible).
        figure.colorbar(used[0].images[0], cax=colour_axes, label="attention weight")
        canvas = FigureCanvasAgg(figure)
        canvas.draw()
        background = Image.fromarray(np.asarray(canvas.buffer_rgba())).convert("RGB")
        pixels_high = figure.bbox.height
        panels = []
        for ax in used:
            extent = ax.get_window_extent()
            # Inside the frame by a pixel, so the axes' outline stays visible.
            panels.append((
                int(math.floor(extent.x0)) + 1,
                int(math.floor(pixels_high - extent.y1)) + 1,
                int(math.ceil(extent.x1)) - 1,
                int(math.ceil(pixels_high - extent.y0)) - 1,
            ))
        title_points = 10
        title_centre = ((left + panels_width / 2) * dpi, (0.2 if not grid else 0.22) * dpi)
        centres = []
        if not grid and T <= ANNOTATE_UP_TO:
            transform = used[0].transData
            centres = [
                (float(x), float(pixels_high - y)) for x, y in (transform.transform((j, i)) for i in range(T) for j in range(T))
            ]
        return _View(figure, background, panels, title_centre, title_points * dpi / 72, centres)

    def _title_text(self, grid: bool, layer: int, head) -> str:
        if grid:
            return f"layer {layer}: all {self.num_heads} heads (rows = queries, columns = keys)"
        return f"layer {layer}, head {head}"

    def _view(self, grid: bool, labels: list[str]) -> _View:
        key = (grid, tuple(labels))
        if key not in self._views:
            if any(k[1] != key[1] for k in self._views):
                self._views = {k: v for k, v in self._views.items() if k[1] == key[1]}  # a new sentence: start afresh
            self._views[key] = self._build_view(grid, labels)
        return self._views[key]

    def draw(self, state: dict) -> None:
        grid = state["head"] == ALL_HEADS
        view = self._view(grid, state["labels"])
        self.figure = view.figure
        weights = state["weights"].numpy()
        view.matrices = list(weights) if grid else [weights]
        view.title = self._title_text(grid, state["layer"], state["head"])
        values = weights.reshape(-1).tolist() if view.cell_centres else []
        view.cell_texts = [(f"{value:.2f}", (0, 0, 0) if value > 0.6 else (255, 255, 255)) for value in values]
        self._current = view

    def png(self) -> bytes:
        """The current picture as PNG: heatmap cells, title and numbers drawn onto the cached background."""
        view = self._current
        picture = view.background.copy()
        for (left, top, right, bottom), matrix in zip(view.panels, view.matrices):
            cells = _COLOURS[np.clip(np.rint(matrix * 255), 0, 255).astype(np.uint8)]  # (T, T, 3)
            patch = Image.fromarray(cells).resize((right - left, bottom - top), Image.NEAREST)
            picture.paste(patch, (left, top))
        pen = ImageDraw.Draw(picture)
        for left, top, right, bottom in view.panels:
            pen.rectangle((left - 1, top - 1, right, bottom), outline=(0, 0, 0))  # the frame, as matplotlib draws it
        pen.text(view.title_centre, view.title, fill=(0, 0, 0), font=_font(view.title_pixels), anchor="mm")
        pixels = 8 * self.dpi / 72
        for (x, y), (text, colour) in zip(view.cell_centres, view.cell_texts):
            mask, left, top = _text_sprite(text, pixels)
            corner = (round(x + left), round(y + top))
            picture.paste(colour, (*corner, corner[0] + mask.width, corner[1] + mask.height), mask)
        return png_bytes(np.asarray(picture.convert("RGBA")))


# The book's colour map as 256 RGB colours: weight w in [0, 1] -> _COLOURS[round(255 w)].
_COLOURS = (matplotlib.colormaps[ATTENTION_CMAP](np.linspace(0.0, 1.0, 256))[:, :3] * 255).round().astype(np.uint8)
_FONTS: dict[float, ImageFont.ImageFont] = {}


def _font(pixels: float):
    """matplotlib's own font (DejaVu Sans) at ``pixels`` size, for the texts png() writes."""
    if pixels not in _FONTS:
        path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")
        try:
            _FONTS[pixels] = ImageFont.truetype(path, size=max(1, round(pixels)))
        except OSError:  # no such font file: PIL's built-in bitmap font
            _FONTS[pixels] = ImageFont.load_default()
    return _FONTS[pixels]


_SPRITES: dict[tuple[str, float], tuple[Image.Image, int, int]] = {}


def _text_sprite(text: str, pixels: float) -> tuple[Image.Image, int, int]:
    """``text`` rendered once as a mask, with its offset from the centre: pasting it is fast."""
    key = (text, pixels)
    if key not in _SPRITES:
        font = _font(pixels)
        left, top, right, bottom = font.getbbox(text, anchor="mm")
        mask = Image.new("L", (max(1, right - left), max(1, bottom - top)), 0)
        ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=font, anchor="mm")
        _SPRITES[key] = (mask, left, top)
    return _SPRITES[key]
