"""Chapter 2's widget: type or drag a query and watch which keys it retrieves.

The store is a few keys (rows of ``keys``) with one value each (rows of ``values``).
The query is set with one slider per component or typed as text (``"0, 10, 0"``).
The figure shows the attention weight of every key (bars) and, next to it, the sum
``weight x value`` that the soft lookup returns. By default the store is the book's
sanity check: keys ``[10,0,0], [0,10,0], [0,0,10], [0,0,10]`` and values
``[1,0,0], [10,0,0], [100,5,0], [1000,6,0]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch

from ..analysis.formatting import format_short, format_vector
from ..analysis.plotting import ATTENTION_CMAP
from ..key_value import soft_lookup
from ._base import AttentionWidget, WidgetInputError

__all__ = ["KeyValueExplorer", "parse_query", "SANITY_KEYS", "SANITY_VALUES"]

SANITY_KEYS = [[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0], [0.0, 0.0, 10.0]]
SANITY_VALUES = [[1.0, 0.0, 0.0], [10.0, 0.0, 0.0], [100.0, 5.0, 0.0], [1000.0, 6.0, 0.0]]
MAX_KEYS = 12
MAX_COMPONENTS = 8


def parse_query(text: str, size: int, limit: float) -> list[float]:
    """Turn ``"0, 10, 0"`` (commas and/or spaces, optional brackets) into ``size`` floats.

    Raises WidgetInputError naming what was wrong: empty text, a word that is not a
    number, the wrong number of components, a component outside ``[-limit, limit]``.
    """
    cleaned = text.strip().strip("[]()").replace(",", " ").split()
    if not cleaned:
        raise WidgetInputError(f"type {size} numbers separated by commas, for example \"{', '.join(['0'] * size)}\"")
    numbers = []
    for word in cleaned:
        try:
            number = float(word)
        except ValueError:
            raise WidgetInputError(f"{word!r} is not a number; type {size} numbers separated by commas") from None
        if not math.isfinite(number):
            raise WidgetInputError(f"{word!r} is not a finite number")
        numbers.append(number)
    if len(numbers) != size:
        raise WidgetInputError(
            f"the keys have {size} components, so the query needs {size} numbers, but {len(numbers)} were given"
        )
    for index, number in enumerate(numbers):
        if abs(number) > limit:
            raise WidgetInputError(
                f"component {index + 1} is {format_short(number)}, but the sliders go from {format_short(-limit)} to {format_short(limit)}"
            )
    return numbers


class KeyValueExplorer(AttentionWidget):
    """Edit a query; see its attention weights over the keys and the value it returns.

    Args:
        keys: (n, d_k) keys, one per row (default: the chapter's sanity-check keys).
        values: (n, d_v) values, one per row (default: the sanity-check values).
        key_labels: n names for the keys (default: "key 1 [10, 0, 0]", ...).
        device: where the lookup runs ("cpu", "cuda", ...; default: the book's default device).
        query: the starting query (default: ``[0, 10, 0]`` for the default store, else zeros).

    After every update, ``state`` holds ``query`` (list), ``scores`` and ``weights``
    (lists, one per key) and ``value`` (the returned value, a list).
    """

    title = "Key-value explorer: which keys does the query retrieve?"
    figure_size = (8.4, 3.2)

    def __init__(
        self,
        keys=None,
        values=None,
        key_labels: Sequence[str] | None = None,
        device: str | torch.device | None = None,
        query: Sequence[float] | None = None,
    ):
        default_store = keys is None and values is None
        if (keys is None) != (values is None):
            raise ValueError("give both keys and values, or neither (for the sanity-check store)")
        keys = torch.as_tensor(SANITY_KEYS if keys is None else keys, dtype=torch.float32)
        values = torch.as_tensor(SANITY_VALUES if values is None else values, dtype=torch.float32)
        if keys.dim() != 2 or values.dim() != 2:
            raise ValueError(
                f"keys must be (n, d_k) and values (n, d_v), but have shapes {tuple(keys.shape)} and {tuple(values.shape)}"
            )
        if keys.shape[0] != values.shape[0]:
            raise ValueError(f"every key needs one value: {keys.shape[0]} keys but {values.shape[0]} values were given")
        if not 1 <= keys.shape[0] <= MAX_KEYS or not 1 <= keys.shape[1] <= MAX_COMPONENTS:
            raise ValueError(
                f"this widget shows 1 to {MAX_KEYS} keys of 1 to {MAX_COMPONENTS} components, "
                f"but keys have shape {tuple(keys.shape)}"
            )
        count, size = keys.shape
        if key_labels is None:
            key_labels = [f"key {i + 1}\n{format_vector(key.tolist(), number=format_short)}" for i, key in enumerate(keys)]
        key_labels = [str(label) for label in key_labels]
        if len(key_labels) != count:
            raise ValueError(f"key_labels has {len(key_labels)} labels but there are {count} keys")
        super().__init__(device=device)
        self.keys_cpu, self.values_cpu, self.key_labels = keys, values, key_labels
        self._on_device: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.limit = float(max(10.0, math.ceil(1.5 * keys.abs().max().item())))
        if query is None:
            query = [0.0, 10.0, 0.0] if default_store else [0.0] * size
        start = parse_query(", ".join(str(float(q)) for q in query), size, self.limit)

        self.sliders = [
            widgets.FloatSlider(
                value=start[i],
                min=-self.limit,
                max=self.limit,
                step=0.5,
                description=f"query[{i}]",
                continuous_update=False,
                readout_format=".1f",
                layout=widgets.Layout(width="260px"),
            )
            for i in range(size)
        ]
        self.query_text = widgets.Text(
            value=format_vector(start, number=format_short)[1:-1],
            description="query",
            placeholder=", ".join(["0"] * size),
            continuous_update=False,
            layout=widgets.Layout(width="260px"),
        )
        self._syncing = False
        self._changed = None
        self._build_figure()
        self._finish_init()

    # -- the controls -------------------------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        return [*self.sliders, self.query_text]

    def update(self, change=None) -> None:
        """Remember which control moved (sliders or text), then recompute."""
        if self._syncing:
            return
        self._changed = change["owner"] if isinstance(change, dict) and "owner" in change else getattr(change, "owner", None)
        super().update(change)

    def set_query(self, query: Sequence[float] | str) -> None:
        """Set the query programmatically, as text ("0, 0, 10") or numbers (triggers one update)."""
        text = query if isinstance(query, str) else ", ".join(str(float(q)) for q in query)
        if text == self.query_text.value:
            self._changed = self.query_text
            super().update(None)
        else:
            self.query_text.value = text

    def _set_controls(self, query: list[float], text: bool, sliders: bool) -> None:
        self._syncing = True
        try:
            if sliders:
                for slider, number in zip(self.sliders, query):
                    slider.value = number
            if text:
                self.query_text.value = format_vector(query, number=format_short)[1:-1]
        finally:
            self._syncing = False

    # -- compute and draw ---------------------------------------------------------------
    def compute(self, device: torch.device) -> dict:
        if self._changed is self.query_text:
            query = parse_query(self.query_text.value, len(self.sliders), self.limit)
            # sliders move in steps of 0.5: they show the nearest step, the lookup uses the text
            self._set_controls([round(q * 2) / 2 for q in query], text=False, sliders=True)
        else:
            query = [float(slider.value) for slider in self.sliders]
            self._set_controls(query, text=True, sliders=False)
        name = device.type
        if name not in self._on_device:
            self._on_device[name] = (self.keys_cpu.to(device), self.values_cpu.to(device))
        keys, values = self._on_device[name]
        query_tensor = torch.tensor(query, dtype=torch.float32, device=device)  # (d_k,)
        value, weights = soft_lookup(query_tensor, keys, values)  # (d_v,), (n,)
        scores = keys @ query_tensor / math.sqrt(keys.shape[1])  # (n,), as inside soft_lookup
        return {
            "query": query,
            "scores": scores.cpu().tolist(),
            "weights": weights.cpu().tolist(),
            "value": value.cpu().tolist(),
        }

    def _build_figure(self) -> None:
        """Create the axes and artists once; draw() only updates them (see png())."""
        count = len(self.key_labels)
        figure = self.figure
        grid = figure.add_gridspec(1, 2, width_ratios=[1.0, 1.05])
        self.weight_axes = figure.add_subplot(grid[0, 0])
        self.table_axes = figure.add_subplot(grid[0, 1])
        self.colour_map = matplotlib.colormaps[ATTENTION_CMAP]
        positions = np.arange(count)
        self.bars = self.weight_axes.bar(positions, np.zeros(count), color=self.colour_map(0.0), edgecolor="black")
        self.weight_axes.set_xticks(positions, self.key_labels, fontsize=8)
        self.weight_axes.set_ylim(0, 1.05)
        self.weight_axes.set_xlim(-0.6, count - 0.4)
        self.weight_axes.set_xlabel("keys")
        self.weight_axes.set_ylabel("attention weight")
        self.weight_axes.set_title("How much each key matches the query", fontsize=10)
        # The table: key names, values and headers never change; scores and weights do.
        table = self.table_axes
        table.set_axis_off()
        table.set_xlim(0, 1)
        table.set_ylim(0, 1)
        table.set_title("Returned value = sum of weight \u00d7 value", fontsize=10)
        line = min(0.8 / (count + 3), 0.12)
        columns = {"key": 0.0, "score": 0.36, "weight": 0.56, "value": 0.62}

        def cell(row: float, column: str, text: str = "", **style):
            align = "right" if column in ("score", "weight") else "left"
            return table.text(columns[column], 0.95 - line * row, text, ha=align, va="top", fontsize=9, **style)

        self.query_line = cell(0, "key", weight="bold")
        bold = {"weight": "bold"}
        for column in columns:
            cell(1.3, column, column, **bold)
        names = [label.split("\n")[0] for label in self.key_labels]
        self.score_texts, self.weight_texts = [], []
        for i, (name, value) in enumerate(zip(names, self.values_cpu.tolist())):
            cell(i + 2.3, "key", name)
            cell(i + 2.3, "value", "\u00d7 " + format_vector(value, number=format_short))
            self.score_texts.append(cell(i + 2.3, "score"))
            self.weight_texts.append(cell(i + 2.3, "weight"))
        self.result_text = cell(count + 2.8, "key", weight="bold")
        # Lay out and draw the static parts once (axes, ticks, labels, titles) and keep the pixels.
        self.cache_background(figure, [*self.bars, *self.score_texts, *self.weight_texts, self.query_line, self.result_text])

    def draw(self, state: dict) -> None:
        for bar, score_text, weight_text, score, weight in zip(
            self.bars, self.score_texts, self.weight_texts, state["scores"], state["weights"]
        ):
            bar.set_height(weight)
            bar.set_facecolor(self.colour_map(weight))
            score_text.set_text(f"{score:.2f}")
            weight_text.set_text(f"{weight:.2f}")
        self.query_line.set_text(f"query = {format_vector(state['query'], number=format_short)}")
        self.result_text.set_text(f"returned = {format_vector(state['value'], number=format_short)}")
