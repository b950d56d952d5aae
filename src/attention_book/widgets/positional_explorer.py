"""Chapter 5's widget: the sinusoidal position table and how similar positions are to each other.

Sliders set the width ``d_model`` (even: sines and cosines come in pairs), the number of
positions and the base of the wavelengths (10,000 in the paper); a menu picks how two
positions are compared. The figure shows, side by side:

* the table ``PE`` itself (:func:`~attention_book.sinusoidal_encoding`): one row per
  position, one column per dimension, sines in even columns and cosines in odd ones;
* the position-to-position matrix: the dot product ``PE[i] . PE[j]`` (which depends only
  on the distance ``|i - j|``) or the cosine similarity (the same, divided by the lengths
  of both vectors, ``d_model / 2`` each for an even width).

Both are computed with torch on the device chosen in the widget's menu, for all 128
positions the slider reaches, so moving it (or changing the measure) needs no kernel;
d_model and the base are sent to the kernel. On the book's website (no kernel) js/05_positional.js
computes the same numbers for a new d_model or base (positionalData, tested against this
class in tests/widgets/test_static_math.py).

Its drawing, its page computation and its view rule are in ``js/05_positional.js``.
"""

from __future__ import annotations

import math

import torch

from ..positional import sinusoidal_encoding, sinusoidal_frequencies
from ._base import AttentionWidget, WidgetInputError, rounded

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

    ``data`` holds ``d_model``, ``base``, ``pe`` (the encoding of all 128 positions the
    slider reaches), ``similarity`` (per measure, as a function of the distance |i - j|)
    and ``wavelengths`` (the shortest and longest, in positions); ``view`` holds ``length``
    and ``measure``, chosen in the browser; :meth:`shown` reads out what is drawn.
    """

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
            raise ValueError(
                f"base must be a number from {BASE_RANGE[0]:,.0f} to {BASE_RANGE[1]:,.0f}, but {base!r} was given"
            )
        if measure not in MEASURES:
            raise ValueError(f"measure must be one of {MEASURES}, but {measure!r} was given")
        super().__init__(device=device)
        self.kind = "positional"
        self.title = "Positional encoding explorer: the sinusoidal table and the similarity of positions"
        self.view = {"length": length, "measure": measure}
        self.inputs = {"d_model": str(d_model), "base": repr(float(base))}
        self._start()

    # -- compute ------------------------------------------------------------------------
    def _settings(self) -> tuple[int, float]:
        try:
            d_model = int(self.inputs["d_model"])
        except ValueError:
            raise WidgetInputError(
                f"d_model must be a whole number, but {self.inputs['d_model']!r} was given", "d_model"
            ) from None
        if d_model % 2 or not 2 <= d_model <= MAX_D_MODEL:
            raise WidgetInputError(
                f"d_model must be an even number from 2 to {MAX_D_MODEL} (each frequency fills a sine and a cosine "
                f"column), but it is {d_model}",
                "d_model",
            )
        try:
            base = float(self.inputs["base"])
        except ValueError:
            raise WidgetInputError(
                f"the base must be a number, but {self.inputs['base']!r} was given", "base"
            ) from None
        if not (math.isfinite(base) and BASE_RANGE[0] * 0.999 <= base <= BASE_RANGE[1] * 1.001):
            raise WidgetInputError(
                f"the base must lie between {BASE_RANGE[0]:,.0f} and {BASE_RANGE[1]:,.0f}, but it is {base:g}", "base"
            )
        return d_model, base

    def compute(self, device: torch.device) -> dict:
        """The table for every position the slider reaches and how similar positions are.

        Both similarities depend only on the distance |i - j| (PE[i] . PE[j] is a sum of
        cos(w (i - j))), so the full (positions x positions) matrices are computed with torch,
        checked to be that function of the distance, and sent as one row each.
        """
        d_model, base = self._settings()
        table = sinusoidal_encoding(MAX_LENGTH, d_model, base).to(device)  # (MAX_LENGTH, d_model)
        dot = table @ table.T  # (MAX_LENGTH, MAX_LENGTH): PE[i] . PE[j]
        norms = table.norm(dim=-1)  # (MAX_LENGTH,)
        cosine = dot / (norms[:, None] * norms[None, :])
        offsets = (torch.arange(MAX_LENGTH)[:, None] - torch.arange(MAX_LENGTH)[None, :]).abs().to(device)  # |i - j|
        for matrix in (dot, cosine):
            torch.testing.assert_close(matrix, matrix[0][offsets], atol=1e-3 * d_model, rtol=1e-4)
        wavelengths = 2 * math.pi / sinusoidal_frequencies(d_model, base)  # (d_model / 2,), in positions
        return {
            "d_model": d_model,
            "base": base,
            "max_length": MAX_LENGTH,
            "max_d_model": MAX_D_MODEL,
            "measures": list(MEASURES),
            "pe": rounded(table, 3),
            "similarity": {"dot product": rounded(dot[0], 3), "cosine": rounded(cosine[0], 4)},
            "wavelengths": [float(wavelengths[0]), float(wavelengths[-1])],
        }

    def shown(self) -> dict:
        """What the picture shows now: the table and the similarity matrix cropped to ``length`` positions."""
        length, measure = self.view["length"], self.view["measure"]
        row = torch.tensor(self.data["similarity"][measure][:length])
        offsets = (torch.arange(length)[:, None] - torch.arange(length)[None, :]).abs()
        return {
            "length": length,
            "measure": measure,
            "d_model": self.data["d_model"],
            "table": torch.tensor(self.data["pe"][:length]),
            "similarity": row[offsets],
        }
