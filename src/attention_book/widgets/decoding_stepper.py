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
one-letter symbols ``CAFB`` works too; a model of characters that include the space, such as
chapter 6's dates, reads the text as typed, ``March 3, 1998``). Bad input is shown in the
widget, which stays usable.

On the book's website no kernel runs. For one of the book's own
:class:`~attention_book.EncoderDecoder` models (at most 1M parameters) the stepper also saves
``page_model`` (:func:`export_page_model`): the model exported to ONNX with its logits and
every decoder layer's self- and cross-attention weights as outputs, and what
:func:`parse_source` needs. js/06_decoding.js then parses a typed source, runs the greedy loop in
JavaScript around that model (onnxruntime-web, WebAssembly) and draws what
:meth:`DecodingStepper.compute` would have sent. Where the export fails the website keeps the
source box disabled, as before.

Its drawing, its page computation and its view rule are in ``js/06_decoding.js``.
"""

from __future__ import annotations

import copy
import json

import torch
import traitlets
from torch import nn

from ..data.tasks import BOS, EOS, PAD, SPECIALS, Vocabulary
from ..decoding import greedy_decode
from ._base import AttentionWidget, WidgetInputError, onnx_base64, page_models_wanted, rounded

__all__ = ["DecodingStepper", "parse_source", "export_page_model"]

AVERAGE = -1  # the head dropdown's value for "average of the heads"
PAGE_MODEL_PARAMETERS = 1_000_000  # the website's copy of the model stays under about 4 MB


class _EveryStepsWeights(nn.Module):
    """source (1, T_in), target (1, T_out) -> logits (T_out, vocab), self-attention (layers, heads,
    T_out, T_out) and cross-attention (layers, heads, T_out, T_in) weights."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, source: torch.Tensor, target: torch.Tensor):
        logits = self.model(source, target)  # (1, T_out, vocab)
        layers = self.model.decoder.layers
        own = torch.stack([layer.self_attn.last_weights[0] for layer in layers])
        cross = torch.stack([layer.cross_attn.last_weights[0] for layer in layers])
        return logits[0], own, cross


def export_page_model(model: nn.Module, vocab: Vocabulary, max_len: int) -> dict | None:
    """What the website needs to run the stepper without a kernel, or None where it cannot.

    ``onnx`` (base64): the model with inputs ``source`` (1, T_in) int64, T_in free, and
    ``target`` (1, ``target_len``) int64, the decoder's every position: the page feeds BOS and
    the tokens written so far followed by PAD; the decoder is causal, so row t does not depend
    on what follows it. Outputs ``logits`` (target_len, vocab), ``self`` and ``cross`` (layers,
    heads, target_len, target_len or T_in). Its weights are named ``"model." + key`` of the
    model's state dict. Also the vocabulary's ``symbols``, ``max_source`` (the encoder's
    positions), ``max_len`` (most tokens to write) and the special ids. None for any model but a
    plain :class:`~attention_book.EncoderDecoder` of at most :data:`PAGE_MODEL_PARAMETERS`
    parameters, or when torch cannot export it (nothing else changes).
    """
    from ..layers import DecoderLayer, EncoderLayer
    from ..multihead import MultiHeadAttention
    from ..transformer import Decoder, Encoder, EncoderDecoder

    plain = (
        type(model) is EncoderDecoder
        and type(model.encoder) is Encoder
        and type(model.decoder) is Decoder
        and all(type(layer) is EncoderLayer for layer in model.encoder.layers)
        and all(type(layer) is DecoderLayer for layer in model.decoder.layers)
        and all(
            type(layer.self_attn) is MultiHeadAttention
            and type(getattr(layer, "cross_attn", layer.self_attn)) is MultiHeadAttention
            for layer in [*model.encoder.layers, *model.decoder.layers]
        )
    )
    if not plain or sum(p.numel() for p in model.parameters()) > PAGE_MODEL_PARAMETERS:
        return None
    target_len = int(model.decoder.embedding.max_len)
    with torch.no_grad():
        wrapper = _EveryStepsWeights(copy.deepcopy(model).cpu().float()).eval()
    source = torch.full((1, min(3, int(model.encoder.embedding.max_len))), len(SPECIALS), dtype=torch.long)
    target = torch.full((1, target_len), PAD, dtype=torch.long)
    target[0, 0] = BOS
    onnx = onnx_base64(
        wrapper,
        (source, target),
        input_names=["source", "target"],
        output_names=["logits", "self", "cross"],
        dynamic_axes={"source": {1: "T_in"}, "cross": {3: "T_in"}},
    )
    if onnx is None:
        return None
    return {
        "onnx": onnx,
        "target_len": target_len,
        "symbols": list(vocab.symbols),
        "specials": {"pad": PAD, "bos": BOS, "eos": EOS, "count": len(SPECIALS), "names": list(SPECIALS)},
        "max_source": int(model.encoder.embedding.max_len),
        "max_len": int(max_len),
    }


def parse_source(text: str, vocab: Vocabulary, max_len: int) -> list[str]:
    """Turn ``"C A F B"`` (or ``"CAFB"`` when every symbol is one character) into a list of symbols.

    Commas and spaces separate tokens; lower case is accepted when the symbols are upper
    case. Raises WidgetInputError naming what was wrong: empty text, an unknown or special
    token, more than ``max_len`` tokens.
    """
    symbols = list(vocab.symbols)
    if _reads_characters(vocab):  # a character vocabulary with a space (chapter 6's dates): one token per character
        characters = list(text.strip())
        if len(characters) > 2 and all(character == " " for character in characters[1::2]):
            characters = characters[::2]  # the page writes the tokens back spaced out: "3 /   3" is "3/ 3"
        if not characters:
            raise WidgetInputError('type a date as you would write it, for example "tuesday 3rd of march 1998"')
        unknown = [character for character in dict.fromkeys(characters) if character not in symbols]
        if unknown:
            raise WidgetInputError(f"unknown character {unknown[0]!r}; this model knows {''.join(symbols)!r}")
        if len(characters) > max_len:
            raise WidgetInputError(f"the model reads at most {max_len} characters, but {len(characters)} were given")
        return characters
    example = " ".join(symbols[: min(4, len(symbols))])
    words = text.replace(",", " ").split()
    if not words:
        raise WidgetInputError(f'type a source sequence, symbols separated by spaces, for example "{example}"')
    known = set(symbols)
    if len(words) == 1 and words[0] not in known and all(len(symbol) == 1 for symbol in symbols):
        words = list(words[0])  # "CAFB" -> C A F B
    if all(symbol.upper() == symbol for symbol in symbols):
        words = [word.upper() if word.upper() in known else word for word in words]
    specials = [word for word in words if word in SPECIALS]
    if specials:
        raise WidgetInputError(
            f"{specials[0]!r} is a special token that the model adds itself; type only symbols from {symbols}"
        )
    unknown = [word for word in words if word not in known]
    if unknown:
        raise WidgetInputError(f"unknown token {unknown[0]!r}; this model knows the symbols {' '.join(symbols)}")
    if len(words) > max_len:
        raise WidgetInputError(f"the model reads at most {max_len} tokens, but {len(words)} were given")
    return words


def _reads_characters(vocab: Vocabulary) -> bool:
    """True for a vocabulary of single characters that includes the space: its text is read
    character by character, spaces and commas included, and shown the same way."""
    return " " in vocab.symbols and all(len(symbol) == 1 for symbol in vocab.symbols)


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

    ``data`` holds ``source`` and ``output`` (labels; the whole greedy decoding, EOS
    included if produced), ``fed`` (BOS, then the output before each step), ``self`` and
    ``cross`` (per layer, per head and ``"average"``: the (L, L) and (L, T_in) weights),
    ``probabilities`` (L x vocabulary), ``chosen`` and ``stopped_at_limit`` (True when it
    stopped at ``max_len`` without writing EOS, which the picture says). ``view`` holds
    ``step`` (1 to L), ``layer`` and ``head`` (-1 = average); :meth:`shown` reads them out.
    ``page_model`` is the JSON text of :func:`export_page_model` (empty where the website
    cannot run the model), saved with the widget for the book's website.
    """

    page_model = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self, model, source, vocab: Vocabulary, device=None, max_len: int | None = None, step: int | None = None
    ):
        for part in ("encode", "decode", "decoder"):
            if not hasattr(model, part):
                raise ValueError(
                    f"model must be an encoder-decoder (ab.EncoderDecoder), but a {type(model).__name__} was given"
                )
        if not isinstance(vocab, Vocabulary):
            raise ValueError(f"vocab must be an ab.Vocabulary, but a {type(vocab).__name__} was given")
        source = torch.as_tensor(source)
        if source.dim() == 2 and source.shape[0] == 1:
            source = source[0]
        if source.dim() != 1 or source.is_floating_point():
            raise ValueError(
                f"source must be token ids of shape (1, T_in) or (T_in,), but has shape {tuple(source.shape)} and dtype {source.dtype}"
            )
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
            raise ValueError(
                f"max_len must be an integer from 1 to {limit} (the decoder's positions minus BOS), but {max_len!r} was given"
            )
        super().__init__(device=device)
        self.model, self.vocab, self.max_len = model, vocab, max_len
        self.num_layers = len(model.decoder.layers)
        self.num_heads = model.decoder.layers[0].self_attn.num_heads
        self._models: dict[str, object] = {}
        labels = vocab.decode(source, strip=False)
        self.source_labels = labels
        self.kind = "decoding"
        self.title = "Decoding stepper: greedy decoding, one output token at a time"
        self.view = {"step": 1, "layer": self.num_layers - 1, "head": AVERAGE}
        self.inputs = {"source": ("" if _reads_characters(vocab) else " ").join(labels)}
        self._first_step = step
        exported = export_page_model(model, vocab, max_len) if page_models_wanted() else None
        self.page_model = "" if exported is None else json.dumps(exported, separators=(",", ":"))
        self._start()

    # -- compute ----------------------------------------------------------------------------
    def _model_on(self, device: torch.device):
        name = device.type
        if name not in self._models:
            current = next(self.model.parameters()).device
            self._models[name] = self.model if current.type == name else copy.deepcopy(self.model).to(device)
        return self._models[name]

    @torch.no_grad()
    def compute(self, device: torch.device) -> dict:
        """Greedy decoding of the source, with every step's logits and attention weights.

        ``greedy_decode`` leaves in each decoder layer the weights of every step (row t from
        step t + 1), so the browser shows any step, layer and head (or their average) without
        the kernel.
        """
        labels = parse_source(self.inputs["source"], self.vocab, self.max_source)
        model = self._model_on(device)
        source = self.vocab.encode(labels).to(device)[None]  # (1, T_in)
        # greedy_decode runs the model in evaluation mode; one sequence stops at its first EOS.
        output, logits = greedy_decode(model, source, self.max_len, bos=BOS, eos=EOS, return_logits=True)
        output = output[0]  # (L,); logits (1, L, vocab)
        wrote_eos = bool((output == EOS).any())
        fed = torch.cat([torch.tensor([BOS], device=device), output[:-1]])  # (L,): BOS + the output before each step
        probabilities = torch.softmax(
            logits[0], dim=-1
        )  # (L, vocab): row t = the next-token distribution at step t + 1
        cross, self_rows = [], []
        for layer in model.decoder.layers:
            per_cross = {"average": rounded(layer.cross_attn.last_weights[0].mean(0), 3)}  # (L, T_in)
            per_self = {"average": rounded(layer.self_attn.last_weights[0].mean(0), 3)}  # (L, L)
            for head in range(self.num_heads):
                per_cross[str(head)] = rounded(layer.cross_attn.last_weights[0, head], 3)
                per_self[str(head)] = rounded(layer.self_attn.last_weights[0, head], 3)
            cross.append(per_cross)
            self_rows.append(per_self)
        tokens = self.vocab.tokens
        self.source_labels = labels
        return {
            "source": list(labels),
            "output": [tokens[i] for i in output.tolist()],
            "fed": [tokens[i] for i in fed.tolist()],
            "vocabulary": list(tokens),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "cross": cross,
            "self": self_rows,
            "probabilities": rounded(probabilities, 4),
            "chosen": output.tolist(),
            "stopped_at_limit": not wrote_eos,
            "max_len": self.max_len,
        }

    def adjust_view(self, view: dict, data: dict) -> dict:
        steps = len(data["output"])
        if self._first_step is not None:  # the step asked for when the widget was made
            view["step"], self._first_step = self._first_step, None
        elif self.inputs["source"] != getattr(self, "_shown_source", None):
            view["step"] = steps  # a new source: show its whole decoding
        self._shown_source = self.inputs["source"]
        view["step"] = min(max(1, int(view["step"])), steps)
        return view

    def shown(self) -> dict:
        """What the picture shows now: the step, what was fed and written so far, and this step's rows."""
        data, view = self.data, self.view
        step, layer = view["step"], view["layer"]
        key = "average" if view["head"] == AVERAGE else str(view["head"])
        return {
            "step": step,
            "fed": data["fed"][:step],
            "written": data["output"][:step],
            "self_row": data["self"][layer][key][step - 1][:step],
            "cross_row": data["cross"][layer][key][step - 1],
            "probabilities": data["probabilities"][step - 1],
            "chosen": data["chosen"][step - 1],
            "stopped_at_limit": data["stopped_at_limit"],
        }
