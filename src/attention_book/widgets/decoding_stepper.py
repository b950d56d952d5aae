"""Chapter 6's widget: step through greedy decoding and watch where each output token looks.

A trained :class:`~attention_book.EncoderDecoder` reads a source sequence and writes its
output one token at a time, always the most likely next token (greedy decoding). The
widget runs that loop and lets you stop at any step t: the decoder has been fed BOS and
the t - 1 tokens it wrote so far, and is about to write token t. For that step it shows

* the decoder's causal self-attention: one row per token fed so far (the current one
  outlined); cells above the diagonal are the future, masked, drawn in grey;
* the cross-attention from the decoder to the source tokens, for the same rows (for a
  reversal model an anti-diagonal, for a sorting model the rank order of the source);
* the probabilities of the next token, with the greedy choice highlighted.

Controls: back / next buttons and a step slider, the layer, the head (or the average of
the heads, the default), and a text box for a new source sequence (``C A F B``; for
one-letter symbols ``CAFB`` works too). Bad input is shown in the widget, which stays usable.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import ipywidgets as widgets
import matplotlib
import numpy as np
import torch
from matplotlib.patches import Rectangle

from ..analysis.plotting import ATTENTION_CMAP
from ..data.tasks import BOS, EOS, PAD, SPECIALS, Vocabulary
from ..modes import evaluating
from ..transformer import greedy_decode
from ._base import AttentionWidget, WidgetInputError

__all__ = ["DecodingStepper", "parse_source"]

AVERAGE = -1  # the head dropdown's value for "average of the heads"
HIGHLIGHT = "#e69f00"  # orange (Okabe-Ito): the current row and the chosen token


def parse_source(text: str, vocab: Vocabulary, max_len: int) -> list[str]:
    """Turn ``"C A F B"`` (or ``"CAFB"`` when every symbol is one character) into a list of symbols.

    Commas and spaces separate tokens; lower case is accepted when the symbols are upper
    case. Raises WidgetInputError naming what was wrong: empty text, an unknown or special
    token, more than ``max_len`` tokens.
    """
    symbols = list(vocab.symbols)
    example = " ".join(symbols[: min(4, len(symbols))])
    words = text.replace(",", " ").split()
    if not words:
        raise WidgetInputError(f"type a source sequence, symbols separated by spaces, for example \"{example}\"")
    known = set(symbols)
    if len(words) == 1 and words[0] not in known and all(len(symbol) == 1 for symbol in symbols):
        words = list(words[0])  # "CAFB" -> C A F B
    if all(symbol.upper() == symbol for symbol in symbols):
        words = [word.upper() if word.upper() in known else word for word in words]
    specials = [word for word in words if word in SPECIALS]
    if specials:
        raise WidgetInputError(f"{specials[0]!r} is a special token that the model adds itself; type only symbols from {symbols}")
    unknown = [word for word in words if word not in known]
    if unknown:
        raise WidgetInputError(f"unknown token {unknown[0]!r}; this model knows the symbols {' '.join(symbols)}")
    if len(words) > max_len:
        raise WidgetInputError(f"the model reads at most {max_len} tokens, but {len(words)} were given")
    return words


@contextmanager
def _one_cpu_thread(device: torch.device):
    """Run the block on one CPU thread (restored afterwards; nothing changes on a GPU).

    A decoding step of a chapter-sized model is a handful of tiny matrix products that take
    well under a millisecond each on one thread; split over two threads on a busy machine
    (Colab's two shared cores, a laptop running other work) they can take many times longer.
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


def parse_source_or_none(text: str, vocab: Vocabulary, max_len: int) -> list[str] | None:
    try:
        return parse_source(text, vocab, max_len)
    except WidgetInputError:
        return None


class DecodingStepper(AttentionWidget):
    """Step through greedy decoding of a trained encoder-decoder; see its self- and cross-attention.

    Args:
        model: a trained :class:`~attention_book.EncoderDecoder` (anything with ``encode``,
            ``decode`` and a ``decoder`` whose layers keep ``self_attn`` / ``cross_attn`` weights).
        source: the source sequence, token ids of shape (1, T_in) or (T_in,); PAD at the end
            is dropped.
        vocab: the :class:`~attention_book.Vocabulary` of source and output tokens.
        device: where the model runs ("cpu", "cuda", ...; default: the book's default device).
            The model is used where it is; on another device a copy is.
        max_len: most tokens to write (default: as many as the decoder's positions allow).
        step: the step to show first (default: the last, so the whole decoding is visible).

    After every update, ``state`` holds ``source`` and ``output`` (labels; the output is
    the whole greedy decoding, EOS included if produced), ``step`` (1 to len(output)),
    ``fed`` (labels fed to the decoder up to this step: BOS, then the output so far),
    ``written`` (the output up to and including this step's token), ``layer``, ``head``
    (-1 = average), ``self_rows`` (step x step) and ``cross_rows`` (step x T_in) weights
    of the chosen layer and head, their last rows ``self_row`` and ``cross_row`` (this
    step's), and ``probabilities`` (one per vocabulary token) of the token written now.
    """

    title = "Decoding stepper: greedy decoding, one output token at a time"
    figure_size = (10.4, 3.9)

    def __init__(self, model, source, vocab: Vocabulary, device=None, max_len: int | None = None, step: int | None = None):
        for part in ("encode", "decode", "decoder"):
            if not hasattr(model, part):
                raise ValueError(f"model must be an encoder-decoder (ab.EncoderDecoder), but a {type(model).__name__} was given")
        if not isinstance(vocab, Vocabulary):
            raise ValueError(f"vocab must be an ab.Vocabulary, but a {type(vocab).__name__} was given")
        source = torch.as_tensor(source)
        if source.dim() == 2 and source.shape[0] == 1:
            source = source[0]
        if source.dim() != 1 or source.is_floating_point():
            raise ValueError(f"source must be token ids of shape (1, T_in) or (T_in,), but has shape {tuple(source.shape)} and dtype {source.dtype}")
        source = source[source != PAD]
        if len(source) == 0:
            raise ValueError("source holds no tokens (only padding)")
        if source.min() < len(SPECIALS) or source.max() >= len(vocab):
            raise ValueError(
                f"source ids must be symbols of the vocabulary, from {len(SPECIALS)} to {len(vocab) - 1}, "
                f"but range from {int(source.min())} to {int(source.max())}"
            )
        self.max_source = int(model.encoder.embedding.max_len)
        if len(source) > self.max_source:
            raise ValueError(f"source has {len(source)} tokens but the model reads at most {self.max_source}")
        limit = int(model.decoder.embedding.max_len) - 1
        if max_len is None:
            max_len = limit
        if isinstance(max_len, bool) or not isinstance(max_len, int) or not 1 <= max_len <= limit:
            raise ValueError(f"max_len must be an integer from 1 to {limit} (the decoder's positions minus BOS), but {max_len!r} was given")
        super().__init__(device=device)
        self.model, self.vocab, self.max_len = model, vocab, max_len
        self.num_layers = len(model.decoder.layers)
        self.num_heads = model.decoder.layers[0].self_attn.num_heads
        self._models: dict[str, object] = {}
        self._decodings: dict[tuple, dict] = {}
        self._syncing = False
        self._changed = None
        self._layout = None
        labels = vocab.decode(source, strip=False)
        self.source_labels = labels

        self.back_button = widgets.Button(description="\u25c0 back", tooltip="previous output token", layout=widgets.Layout(width="80px"))
        self.next_button = widgets.Button(description="next \u25b6", tooltip="next output token", layout=widgets.Layout(width="80px"))
        self.step_slider = widgets.IntSlider(value=1, min=1, max=1, description="step", continuous_update=False, layout=widgets.Layout(width="260px"))
        self.layer_dropdown = widgets.Dropdown(
            options=[(f"layer {i}", i) for i in range(self.num_layers)], value=self.num_layers - 1, description="layer",
            layout=widgets.Layout(width="170px"),
        )
        self.head_dropdown = widgets.Dropdown(
            options=[("average of heads", AVERAGE)] + [(f"head {h}", h) for h in range(self.num_heads)], value=AVERAGE,
            description="head", layout=widgets.Layout(width="220px"),
        )
        self.source_text = widgets.Text(
            value=" ".join(labels), description="source", placeholder=" ".join(vocab.symbols[:4]),
            continuous_update=False, layout=widgets.Layout(width="260px"),
        )
        self.back_button.on_click(lambda _: self._move(-1))
        self.next_button.on_click(lambda _: self._move(+1))
        # The first decoding sets the slider's range; start at the requested (or last) step.
        decoding = self._decoding(self.device, labels)
        self._set_slider(len(decoding["output"]), step if step is not None else len(decoding["output"]))
        self._finish_init()

    # -- controls -------------------------------------------------------------------------
    def controls(self) -> list[widgets.Widget]:
        return [self.back_button, self.step_slider, self.next_button, self.layer_dropdown, self.head_dropdown, self.source_text]

    def update(self, change=None) -> None:
        """Remember which control moved (the source box or another one), then recompute."""
        if self._syncing:
            return
        self._changed = change["owner"] if isinstance(change, dict) and "owner" in change else getattr(change, "owner", None)
        super().update(change)

    def _move(self, delta: int) -> None:
        target = min(max(self.step_slider.value + delta, self.step_slider.min), self.step_slider.max)
        if target != self.step_slider.value:
            self.step_slider.value = target  # triggers one update

    def _set_slider(self, steps: int, value: int) -> None:
        self._syncing = True
        try:
            self.step_slider.max = max(1, steps)
            self.step_slider.value = min(max(1, int(value)), self.step_slider.max)
        finally:
            self._syncing = False

    # -- compute ----------------------------------------------------------------------------
    def _model_on(self, device: torch.device):
        name = device.type
        if name not in self._models:
            current = next(self.model.parameters()).device
            self._models[name] = self.model if current.type == name else copy.deepcopy(self.model).to(device)
        return self._models[name]

    @torch.no_grad()
    def _decoding(self, device: torch.device, labels: list[str]) -> dict:
        """Greedy decoding of ``labels`` on ``device`` (cached): output ids and the encoder memory."""
        key = (device.type, tuple(labels))
        if key not in self._decodings:
            model = self._model_on(device)
            source = self.vocab.encode(labels).to(device)[None]  # (1, T_in)
            with _one_cpu_thread(device), evaluating(model):
                output = greedy_decode(model, source, self.max_len, bos=BOS, eos=EOS)[0]  # (L,)
                memory = model.encode(source)  # (1, T_in, d_model)
            if (output == EOS).any():
                output = output[: int((output == EOS).nonzero()[0]) + 1]  # up to the first EOS
            self._decodings[key] = {"source": source, "output": output, "memory": memory}
        return self._decodings[key]

    @torch.no_grad()
    def compute(self, device: torch.device) -> dict:
        if self._changed is self.source_text:
            labels = parse_source(self.source_text.value, self.vocab, self.max_source)
        else:  # another control moved: keep the last good source, and show it in the box again
            labels = self.source_labels
            if parse_source_or_none(self.source_text.value, self.vocab, self.max_source) != labels:
                self._syncing = True
                try:
                    self.source_text.value = " ".join(labels)
                finally:
                    self._syncing = False
        decoding = self._decoding(device, labels)
        output = decoding["output"]
        if labels != self.source_labels or self.step_slider.max != len(output):
            # a new source: start from its first step
            self._set_slider(len(output), 1 if labels != self.source_labels else self.step_slider.value)
        self.source_labels = labels
        step = self.step_slider.value
        layer, head = self.layer_dropdown.value, self.head_dropdown.value
        model = self._model_on(device)
        fed = torch.cat([torch.tensor([BOS], device=device), output[: step - 1]])  # (step,): BOS + output so far
        with _one_cpu_thread(device), evaluating(model):
            logits = model.decode(fed[None], decoding["memory"])  # (1, step, vocab)
        decoder_layer = model.decoder.layers[layer]
        self_weights = decoder_layer.self_attn.last_weights[0]  # (heads, step, step)
        cross_weights = decoder_layer.cross_attn.last_weights[0]  # (heads, step, T_in)
        if head == AVERAGE:
            self_rows, cross_rows = self_weights.mean(0), cross_weights.mean(0)  # (step, step), (step, T_in)
        else:
            self_rows, cross_rows = self_weights[head], cross_weights[head]
        probabilities = torch.softmax(logits[0, -1], dim=-1)  # (vocab,)
        tokens = self.vocab.tokens
        output_labels = [tokens[i] for i in output.tolist()]
        return {
            "source": labels,
            "output": output_labels,
            "step": step,
            "fed": [tokens[i] for i in fed.tolist()],
            "written": output_labels[:step],
            "layer": layer,
            "head": head,
            "self_rows": self_rows.cpu().numpy(),
            "cross_rows": cross_rows.cpu().numpy(),
            "self_row": self_rows[-1].cpu().tolist(),
            "cross_row": cross_rows[-1].cpu().tolist(),
            "probabilities": probabilities.cpu().tolist(),
            "chosen": int(output[step - 1]),
        }

    # -- draw --------------------------------------------------------------------------------
    def _build_figure(self, source: list[str], output: list[str], layer: int, head: int) -> None:
        """Axes, ticks, labels and titles for one decoding, layer and head.

        They are drawn once; a step then redraws only the changing artists on top (blitting).
        """
        figure = self.figure
        figure.clear()
        figure.set_layout_engine("constrained")
        L, T_in = len(output), len(source)
        fed = [self.vocab.tokens[BOS]] + output[:-1]
        rows = [f"{a} \u2192 {b}" for a, b in zip(fed, output)]
        grid = figure.add_gridspec(1, 3, width_ratios=[max(T_in, 3), max(L, 3), 4.2])
        self.cross_axes = figure.add_subplot(grid[0, 0])
        self.self_axes = figure.add_subplot(grid[0, 1])
        self.bar_axes = figure.add_subplot(grid[0, 2])
        colour_map = matplotlib.colormaps[ATTENTION_CMAP].with_extremes(bad="#e4e4e4")
        self.colour_map = colour_map
        empty_cross = np.ma.masked_all((L, T_in))
        empty_self = np.ma.masked_all((L, L))
        self.cross_image = self.cross_axes.imshow(empty_cross, cmap=colour_map, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        self.self_image = self.self_axes.imshow(empty_self, cmap=colour_map, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        self.cross_axes.set_xticks(range(T_in), source)
        self.cross_axes.set_yticks(range(L), rows, fontsize=8)
        self.cross_axes.set_xlabel("source tokens (keys)")
        self.cross_axes.set_ylabel("step: fed \u2192 written (queries)")
        self.self_axes.set_xticks(range(L), fed, rotation=90 if max(map(len, fed)) > 2 else 0)
        self.self_axes.set_yticks(range(L), [""] * L)
        self.self_axes.set_xlabel("tokens fed so far (keys)")
        figure.colorbar(self.self_image, ax=self.self_axes, fraction=0.08, pad=0.03, label="attention weight")
        vocabulary = list(self.vocab.tokens)
        positions = np.arange(len(vocabulary))
        self.bars = self.bar_axes.barh(positions, np.zeros(len(vocabulary)), color="#56b4e9", edgecolor="black", linewidth=0.5)
        self.bar_axes.set_yticks(positions, vocabulary, fontsize=8)
        self.bar_axes.invert_yaxis()
        self.bar_axes.set_xlim(0, 1.0)
        self.bar_axes.set_xlabel("probability")
        which = "average of the heads" if head == AVERAGE else f"head {head}"
        self.cross_axes.set_title(f"cross-attention to the source\n(layer {layer}, {which})", fontsize=9)
        self.self_axes.set_title(f"causal self-attention\n(layer {layer}, {which})", fontsize=9)
        figure.suptitle(f"Greedy decoding of the source {' '.join(source)}", fontsize=10)
        # Changing artists: the two images, the outlines of the current row, the weights in
        # that row of the cross-attention and the bars. (Text is slow to draw, so the step
        # number is left to the slider and the outlined row's label.)
        self.cross_box = Rectangle((-0.5, -0.5), T_in, 1, fill=False, edgecolor=HIGHLIGHT, linewidth=2.5)
        self.self_box = Rectangle((-0.5, -0.5), L, 1, fill=False, edgecolor=HIGHLIGHT, linewidth=2.5)
        self.cross_axes.add_patch(self.cross_box)
        self.self_axes.add_patch(self.self_box)
        self.cross_values = [self.cross_axes.text(j, 0, "", ha="center", va="center", fontsize=7) for j in range(T_in)]
        self.bar_axes.set_title("next token\n(orange: the greedy choice)", fontsize=9)
        self.cache_background(figure, [self.cross_image, self.self_image, self.cross_box, self.self_box, *self.cross_values, *self.bars])
        self._layout = (tuple(source), tuple(output), layer, head)

    def draw(self, state: dict) -> None:
        source, output, step = state["source"], state["output"], state["step"]
        if self._layout != (tuple(source), tuple(output), state["layer"], state["head"]):
            self._build_figure(source, output, state["layer"], state["head"])
        L, T_in = len(output), len(source)
        cross = np.full((L, T_in), np.nan)
        cross[:step] = state["cross_rows"]
        causal = np.full((L, L), np.nan)
        causal[:step, :step] = np.where(np.tril(np.ones((step, step), dtype=bool)), state["self_rows"], np.nan)
        self.cross_image.set_data(np.ma.masked_invalid(cross))
        self.self_image.set_data(np.ma.masked_invalid(causal))
        row = step - 1
        self.cross_box.set_y(row - 0.5)
        self.self_box.set_y(row - 0.5)
        for j, text in enumerate(self.cross_values):
            value = state["cross_row"][j]
            text.set_text(f"{value:.2f}")
            text.set_position((j, row))
            text.set_color("black" if value > 0.6 else "white")
        chosen = state["chosen"]
        for index, (bar, probability) in enumerate(zip(self.bars, state["probabilities"])):
            bar.set_width(probability)
            bar.set_facecolor(HIGHLIGHT if index == chosen else "#56b4e9")
