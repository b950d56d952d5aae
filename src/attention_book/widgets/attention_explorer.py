"""Chapter 1's widget: pick a query token and watch its scores, weights and output.

A short sentence of tokens, each a vector (given, or drawn from a seeded generator).
Self-attention with ``Q = K = V = X``: the chosen token's query is compared with
every token's key, the scores go through a softmax, and the output is the weighted
average of the token vectors, ``h = sum_j a_j x_j``.

Controls: the query token (dropdown), the temperature (slider), whether the scores are
divided by sqrt(d_k), whether attention is causal (looks back only), and the sentence
itself (a text box: reorder or repeat the tokens, or, with drawn vectors, type new words).

The figure shows the weights as bars (with each score written above its bar), the same
weights as one row of the attention matrix (a heatmap), and the sum that makes the
output vector.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch

from ..analysis.formatting import format_vector
from ..analysis.plotting import ATTENTION_CMAP
from ..attention import attention_scores, causal_mask, scaled_dot_product_attention
from ._base import AttentionWidget, WidgetInputError

__all__ = ["AttentionExplorer", "DEFAULT_SENTENCE", "MAX_TOKENS", "MAX_FEATURES"]

DEFAULT_SENTENCE = "the cat sat on the mat"
MAX_TOKENS = 10
MAX_FEATURES = 8


def drawn_vector(word: str, seed: int, dim: int) -> torch.Tensor:
    """The vector a word gets when none is given: the same word, seed and size give the same vector."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(word.encode("utf-8")))
    return torch.randn(dim, generator=generator)


class AttentionExplorer(AttentionWidget):
    """Choose a query token; see its scores, softmax weights and the mixed output vector.

    Args:
        tokens: the sentence, a list of words or one string split on spaces
            (default: ``"the cat sat on the mat"``, or ``x1, x2, ...`` when only vectors are given).
        vectors: (T, d) tensor or nested list, one vector per token; a word that occurs
            twice must have the same vector both times. If None, every distinct word gets
            a vector of ``dim`` numbers drawn from a generator seeded by ``seed`` and the word.
        seed: seed for drawn vectors.
        device: where attention runs ("cpu", "cuda", ...; default: the book's default device).
        dim: size of drawn vectors (1 to 8); ignored when ``vectors`` are given.
        query: index of the starting query token (default: the last token).

    Raises ValueError for bad arguments (e.g. 3 tokens but 4 vectors). Bad text typed into
    the sentence box later (empty, too long, an unknown word) is shown in the widget.

    After every update, ``state`` holds ``tokens``, ``query_index``, ``query_token``,
    ``temperature``, ``scaled``, ``causal``, ``scores`` (a list with ``-inf`` for masked
    keys), ``weights`` and ``output`` (lists) and ``d``.
    """

    title = "Attention explorer: one query, its scores, its weights and its output"
    figure_size = (9.6, 3.6)

    def __init__(
        self,
        tokens: Sequence[str] | str | None = None,
        vectors=None,
        seed: int = 0,
        device: str | torch.device | None = None,
        dim: int = 4,
        query: int | None = None,
    ):
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an integer, but {seed!r} was given")
        if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_FEATURES:
            raise ValueError(f"dim must be an integer from 1 to {MAX_FEATURES}, but {dim!r} was given")
        if vectors is not None:
            try:
                vectors = torch.as_tensor(vectors, dtype=torch.float32).detach().cpu()
            except (TypeError, ValueError) as error:
                raise ValueError(f"vectors must be a (T, d) tensor or a list of T equally long lists of numbers: {error}") from None
            if vectors.dim() != 2:
                raise ValueError(f"vectors must have shape (T, d), one vector per token, but have shape {tuple(vectors.shape)}")
            if not 1 <= vectors.shape[1] <= MAX_FEATURES:
                raise ValueError(
                    f"this widget shows vectors of 1 to {MAX_FEATURES} numbers, but the vectors have {vectors.shape[1]}"
                )
            if not torch.isfinite(vectors).all():
                raise ValueError("vectors contain nan or inf; every number must be finite")
            if tokens is None:
                tokens = [f"x{i + 1}" for i in range(vectors.shape[0])]
        tokens = self._check_tokens(DEFAULT_SENTENCE if tokens is None else tokens)
        if vectors is not None and len(tokens) != vectors.shape[0]:
            raise ValueError(f"every token needs one vector: {len(tokens)} tokens but {vectors.shape[0]} vectors were given")
        self.seed, self.dim = seed, (vectors.shape[1] if vectors is not None else dim)
        self.drawn = vectors is None
        self.vocabulary: dict[str, torch.Tensor] = {}
        for i, token in enumerate(tokens):
            vector = vectors[i] if vectors is not None else drawn_vector(token, seed, dim)
            if token in self.vocabulary and not torch.equal(self.vocabulary[token], vector):
                raise ValueError(
                    f"the token {token!r} occurs twice with different vectors; in this widget a token is its vector, "
                    "so give each distinct token one vector (or name the two differently, e.g. 'the' and 'the2')"
                )
            self.vocabulary[token] = vector
        if query is None:
            query = len(tokens) - 1
        if isinstance(query, bool) or not isinstance(query, int) or not 0 <= query < len(tokens):
            raise ValueError(f"query must be a token index from 0 to {len(tokens) - 1}, but {query!r} was given")
        super().__init__(device=device)

        self.tokens = tokens
        self._on_device: dict[tuple[str, tuple[str, ...]], torch.Tensor] = {}
        self._syncing = False
        self.query_dropdown = widgets.Dropdown(
            options=self._query_options(tokens), value=query, description="query token",
            layout=widgets.Layout(width="220px"),
        )
        self.temperature_slider = widgets.FloatLogSlider(
            value=1.0, base=10, min=-1, max=1, step=0.05, description="temperature τ",
            continuous_update=False, readout_format=".2f", layout=widgets.Layout(width="340px"),
            style={"description_width": "initial"},
        )
        self.scale_checkbox = widgets.Checkbox(value=True, description="divide scores by √d_k", indent=False)
        self.causal_checkbox = widgets.Checkbox(value=False, description="causal (look back only)", indent=False)
        self.sentence_text = widgets.Text(
            value=" ".join(tokens), description="sentence", continuous_update=False,
            layout=widgets.Layout(width="420px"),
            placeholder="words separated by spaces",
        )
        self._built_for: tuple[str, ...] | None = None
        self._build_figure(tokens)
        self._finish_init()

    # -- input checks -------------------------------------------------------------------
    @staticmethod
    def _check_tokens(tokens) -> list[str]:
        if isinstance(tokens, str):
            tokens = tokens.split()
        if not isinstance(tokens, (list, tuple)) or not all(isinstance(t, str) for t in tokens):
            raise ValueError("tokens must be a list of strings or one string of words separated by spaces")
        if not tokens:
            raise ValueError("tokens is empty; give at least one token")
        if len(tokens) > MAX_TOKENS:
            raise ValueError(f"this widget shows 1 to {MAX_TOKENS} tokens, but {len(tokens)} were given")
        for token in tokens:
            if not token or token != token.strip() or len(token.split()) != 1:
                raise ValueError(f"each token must be one non-empty word without spaces, but {token!r} was given")
        return list(tokens)

    def _parse_sentence(self, text: str) -> list[str]:
        words = text.split()
        if not words:
            raise WidgetInputError("the sentence is empty: type a few words separated by spaces")
        if len(words) > MAX_TOKENS:
            raise WidgetInputError(f"the sentence has {len(words)} words; this widget shows at most {MAX_TOKENS}")
        unknown = [w for w in dict.fromkeys(words) if w not in self.vocabulary]
        if unknown and not self.drawn:
            known = ", ".join(self.vocabulary)
            raise WidgetInputError(
                f"unknown token{'s' if len(unknown) > 1 else ''} {', '.join(repr(w) for w in unknown)}: "
                f"this sentence's vectors were given, so only these tokens have one: {known}"
            )
        for word in unknown:
            self.vocabulary[word] = drawn_vector(word, self.seed, self.dim)
        return words

    @staticmethod
    def _short(token: str, limit: int = 8) -> str:
        return token if len(token) <= limit else token[: limit - 1] + "\u2026"

    @staticmethod
    def _query_options(tokens: Sequence[str]) -> list[tuple[str, int]]:
        return [(f"{i + 1}: {token}", i) for i, token in enumerate(tokens)]

    # -- controls -----------------------------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        return [self.temperature_slider, self.query_dropdown, self.scale_checkbox, self.causal_checkbox, self.sentence_text]

    def update(self, change=None) -> None:
        if self._syncing:
            return
        super().update(change)

    # -- compute ------------------------------------------------------------------------
    def compute(self, device: torch.device) -> dict:
        tokens = self._parse_sentence(self.sentence_text.value)
        if tokens != self.tokens:
            self.tokens = tokens
            self._syncing = True
            try:
                keep = self.query_dropdown.value if self.query_dropdown.value < len(tokens) else len(tokens) - 1
                self.query_dropdown.options = self._query_options(tokens)
                self.query_dropdown.value = keep
            finally:
                self._syncing = False
        T, i = len(tokens), int(self.query_dropdown.value)
        key = (device.type, tuple(tokens))
        if key not in self._on_device:
            self._on_device = {key: torch.stack([self.vocabulary[t] for t in tokens]).to(device)}  # (T, d)
        x = self._on_device[key]
        d_k = x.shape[1]
        temperature = float(self.temperature_slider.value)
        scaled = bool(self.scale_checkbox.value)
        # The package divides by sqrt(d_k) * temperature; without the scale, pass temperature / sqrt(d_k).
        effective = temperature if scaled else temperature / math.sqrt(d_k)
        query = x[i : i + 1]  # (1, d): the chosen token asks
        mask = causal_mask(T, device=device)[i : i + 1] if self.causal_checkbox.value else None  # (1, T)
        output, weights = scaled_dot_product_attention(query, x, x, mask=mask, temperature=effective)  # (1, d), (1, T)
        scores = attention_scores(query, x, effective)  # (1, T)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return {
            "tokens": list(tokens),
            "query_index": i,
            "query_token": tokens[i],
            "temperature": temperature,
            "scaled": scaled,
            "causal": bool(self.causal_checkbox.value),
            "d": d_k,
            "scores": scores[0].cpu().tolist(),
            "weights": weights[0].cpu().tolist(),
            "output": output[0].cpu().tolist(),
            "vectors": x.cpu().tolist(),
        }

    # -- draw ---------------------------------------------------------------------------
    def _build_figure(self, tokens: Sequence[str]) -> None:
        """Create axes and artists for this sentence once; draw() only updates them."""
        figure = self.figure
        figure.clear()
        figure.set_layout_engine("constrained")
        T = len(tokens)
        self.colour_map = matplotlib.colormaps[ATTENTION_CMAP]
        grid = figure.add_gridspec(2, 2, width_ratios=[1.35, 1.0], height_ratios=[3.2, 1.0])
        bars_axes = figure.add_subplot(grid[0, 0])
        row_axes = figure.add_subplot(grid[1, 0])
        table = figure.add_subplot(grid[:, 1])
        positions = np.arange(T)
        self.bars = bars_axes.bar(positions, np.zeros(T), color=self.colour_map(0.0), edgecolor="black", linewidth=0.8)
        bars_axes.set_xticks(positions, tokens)
        bars_axes.set_xlim(-0.6, T - 0.4)
        bars_axes.set_ylim(0, 1.22)
        bars_axes.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        bars_axes.set_ylabel("attention weight $a_j$")
        bars_axes.set_title("Weights of the query (red edge) over the keys; score $s_j$ above each bar", fontsize=10)
        self.score_texts = [bars_axes.text(j, 0.0, "", ha="center", va="bottom", fontsize=8) for j in range(T)]
        self.heading = bars_axes.text(0.01, 0.97, "", transform=bars_axes.transAxes, ha="left", va="top", fontsize=9,
                                      weight="bold")
        # One row of the attention matrix A: the same weights as colours (their values are in the table).
        self.row_image = row_axes.imshow(np.zeros((1, T)), cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0, aspect="auto")
        row_axes.set_xticks(positions, tokens, fontsize=8)
        row_axes.set_yticks([0], ["query"], fontsize=8)
        row_axes.set_xlabel("keys (attended to)", fontsize=9)
        figure.colorbar(self.row_image, ax=row_axes, fraction=0.04, pad=0.02, ticks=[0, 0.5, 1])
        # The output as a sum: a_j x token vector, then h. Each column is one multi-line text in one
        # monospace font, so the rows line up and an update redraws two texts, not 2T.
        table.set_axis_off()
        table.set_xlim(0, 1)
        table.set_ylim(0, 1)
        table.set_title("Output $h = \\sum_j a_j\\, x_j$ (weight $a_j$ \u00d7 token $x_j$)", fontsize=10)
        size = 9 if self.dim <= 4 and T <= 7 else 7.5
        style = {"va": "top", "fontsize": size, "family": "monospace", "linespacing": 1.5}
        width = max(len(self._short(token)) for token in tokens)
        table.text(0.0, 0.93, "\n".join(self._short(token).ljust(width) for token in tokens), ha="left", **style)
        self.weight_text = table.text(0.0, 0.93, "", ha="left", **style)
        self._weight_prefix = " " * (width + 1)
        table.text(0.0, 0.93, "\n".join(" " * (width + 6) + "\u00d7 " + format_vector(self.vocabulary[token].tolist())
                                        for token in tokens), ha="left", **style)
        # The output sits on the line after a blank one below the rows: the same anchor, T + 1 newlines.
        self.output_text = table.text(0.0, 0.93, "", ha="left", weight="bold", **style)
        self._output_prefix = "\n" * (T + 1)
        self.cache_background(figure, [*self.bars, *self.score_texts, self.heading, self.row_image, self.weight_text, self.output_text])
        self._built_for = tuple(tokens)

    def draw(self, state: dict) -> None:
        if tuple(state["tokens"]) != self._built_for:
            self._build_figure(state["tokens"])
        i = state["query_index"]
        lines = []
        for j, (bar, score_text, score, weight) in enumerate(zip(self.bars, self.score_texts, state["scores"], state["weights"])):
            bar.set_height(weight)
            bar.set_facecolor(self.colour_map(weight))
            bar.set_linewidth(2.6 if j == i else 0.8)
            bar.set_edgecolor("#d62728" if j == i else "black")
            masked = math.isinf(score)
            score_text.set_position((j, weight + 0.02))
            score_text.set_text("masked" if masked else f"{score:.2f}")
            lines.append(self._weight_prefix + ("   0" if masked else f"{weight:.2f}"))
        self.weight_text.set_text("\n".join(lines))
        self.row_image.set_data(np.asarray(state["weights"], dtype=float)[None, :])
        scale = "÷√d_k" if state["scaled"] else "unscaled"
        mode = " · causal" if state["causal"] else ""
        self.heading.set_text(f"query '{state['query_token']}' · τ={state['temperature']:.2f} · {scale}{mode}")
        self.output_text.set_text(self._output_prefix + "h = " + format_vector(state["output"]))
