"""Chapter 2's widget: type or drag a query and watch which keys it retrieves.

The store is a few keys (rows of ``keys``) with one value each (rows of ``values``).
The query is set with one slider per component or typed as text (``"0, 10, 0"``).
The picture (drawn by the browser) shows the attention weight of every key (bars) and,
next to it, the sum ``weight x value`` that the soft lookup returns. The kernel computes
the lookup with torch for the typed query and along each slider's range, so moving one
slider needs no kernel; on the book's website (no kernel) js/02_key_value.js computes the lookup for
a typed query from the store in ``data`` (parseQuery, keyValueData; tested against this
module in tests/widgets/test_static_math.py). By default the store is the book's
sanity check: keys ``[10,0,0], [0,10,0], [0,0,10], [0,0,10]`` and values
``[1,0,0], [10,0,0], [100,5,0], [1000,6,0]``.

Its drawing, its page computation and its view rule are in ``js/02_key_value.js``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..analysis.formatting import format_short, format_vector
from ..attention import attention_scores, scaled_dot_product_attention
from ._base import AttentionWidget, WidgetInputError, rounded

__all__ = ["KeyValueExplorer", "parse_query", "SANITY_KEYS", "SANITY_VALUES"]

SANITY_KEYS = [[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0], [0.0, 0.0, 10.0]]
SANITY_VALUES = [[1.0, 0.0, 0.0], [10.0, 0.0, 0.0], [100.0, 5.0, 0.0], [1000.0, 6.0, 0.0]]
MAX_KEYS = 12
MAX_COMPONENTS = 8
STEP = 0.5  # the sliders' step


def parse_query(text: str, size: int, limit: float) -> list[float]:
    """Turn ``"0, 10, 0"`` (commas and/or spaces, optional brackets) into ``size`` floats.

    Raises WidgetInputError naming what was wrong: empty text, a word that is not a
    number, the wrong number of components, a component outside ``[-limit, limit]``.
    """
    cleaned = text.strip().strip("[]()").replace(",", " ").split()
    if not cleaned:
        raise WidgetInputError(f'type {size} numbers separated by commas, for example "{", ".join(["0"] * size)}"')
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

    ``data`` holds the typed ``query`` with its ``scores``, ``weights`` and ``value``, and
    ``along``: for each component the same along its slider (``grid``) with the other
    components held; and the store itself (``keys``, ``values``, the sliders' ``limit``), from
    which the website's page recomputes a typed query; :meth:`shown` reads out what the picture shows.
    """

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
            key_labels = [
                f"key {i + 1}\n{format_vector(key.tolist(), number=format_short)}" for i, key in enumerate(keys)
            ]
        key_labels = [str(label) for label in key_labels]
        if len(key_labels) != count:
            raise ValueError(f"key_labels has {len(key_labels)} labels but there are {count} keys")
        super().__init__(device=device)
        self.keys_cpu, self.values_cpu, self.key_labels = keys, values, key_labels
        self.limit = float(max(10.0, math.ceil(1.5 * keys.abs().max().item())))
        if query is None:
            query = [0.0, 10.0, 0.0] if default_store else [0.0] * size
        start = parse_query(", ".join(str(float(q)) for q in query), size, self.limit)
        self.size = size
        self.kind = "key_value"
        self.title = "Key-value explorer: which keys does the query retrieve?"
        self.view = {"moved": {}}
        self.inputs = {"query": format_vector(start, number=format_short)[1:-1]}
        self._start()

    def set_query(self, query: Sequence[float] | str) -> None:
        """Set the query, as text ("0, 0, 10") or numbers, as typing it in the widget does (recomputes)."""
        text = query if isinstance(query, str) else ", ".join(str(float(q)) for q in query)
        self.set_input("query", text)

    # -- compute ------------------------------------------------------------------------
    def compute(self, device: torch.device) -> dict:
        """The lookup for the typed query and, for each component, along the whole range of its
        slider with the other components held: the browser moves one slider without the kernel."""
        query = parse_query(self.inputs["query"], self.size, self.limit)
        keys, values = self.keys_cpu.to(device), self.values_cpu.to(device)  # (n, d_k), (n, d_v)
        grid = torch.arange(-self.limit, self.limit + STEP / 2, STEP, dtype=torch.float32)  # the slider's stops
        point = torch.tensor(query, dtype=torch.float32)  # (d_k,)
        # Every query to look up: the typed one, then each component swept along the grid.
        sweeps = point.repeat(self.size, len(grid), 1)  # (d_k, stops, d_k)
        for i in range(self.size):
            sweeps[i, :, i] = grid
        queries = torch.cat([point[None], sweeps.reshape(-1, self.size)]).to(device)  # (1 + d_k * stops, d_k)
        # soft_lookup, batched: one row of weights per query (the tests check it equals soft_lookup).
        value, weights = scaled_dot_product_attention(queries, keys, values)  # (Q, d_v), (Q, n)
        scores = attention_scores(queries, keys)  # (Q, n): q . k / sqrt(d_k)
        stops = len(grid)
        along = []
        for i in range(self.size):
            rows = slice(1 + i * stops, 1 + (i + 1) * stops)
            along.append(
                {
                    "weights": rounded(weights[rows]),
                    "values": rounded(value[rows], 3),
                    "scores": rounded(scores[rows], 3),
                }
            )
        return {
            "query": query,
            "key_labels": [label.replace("\n", " ") for label in self.key_labels],
            "values_list": rounded(self.values_cpu, 3),
            "scores": rounded(scores[0], 3),
            "weights": rounded(weights[0]),
            "value": rounded(value[0], 3),
            "grid": rounded(grid, 2),
            "grid_index": [int(torch.argmin((grid - q).abs())) for q in query],
            "along": along,
            # The store itself, for the website's page (no kernel), which recomputes the lookup for
            # a typed query in js/02_key_value.js (keyValueData) from these.
            "keys": self.keys_cpu.tolist(),
            "values": self.values_cpu.tolist(),
            "limit": self.limit,
        }

    def adjust_view(self, view: dict, data: dict) -> dict:
        view["moved"] = {}  # the kernel's new query is the point the sliders start from
        return view

    def shown(self) -> dict:
        """What the picture shows now: the query, its weights over the keys and the value returned."""
        data, moved = self.data, self.view.get("moved") or {}
        if not moved:
            return {"query": data["query"], "weights": data["weights"], "value": data["value"]}
        ((axis, stop),) = ((int(k), v) for k, v in moved.items())
        query = list(data["query"])
        query[axis] = data["grid"][stop]
        return {
            "query": query,
            "weights": data["along"][axis]["weights"][stop],
            "value": data["along"][axis]["values"][stop],
        }
