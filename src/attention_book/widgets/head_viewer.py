"""The head viewer (chapters 4, 6 and 7): a sentence in, every head's attention out.

Give it a model, a function that turns text into token ids, and a first sentence. It
runs the model on the sentence (on the device chosen in its dropdown) and shows the
attention weights of one layer: one heatmap per head in a grid ("all heads"), or one
head alone with its weights written in the cells (short sentences). The kernel sends every
layer's weights; the browser draws them (SVG), so choosing a layer or head needs no kernel. Rows are queries, columns are keys,
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

On the book's website no kernel runs. When the model is one of the book's own encoders
(:class:`~attention_book.Encoder`, :class:`~attention_book.EncoderClassifier` or
:class:`~attention_book.TokenClassifier`, at most :data:`PAGE_MODEL_PARAMETERS` parameters)
and ``encode`` comes from :func:`~attention_book.word_encoder`, the viewer also saves
``page_model`` (:func:`export_page_model`): the encoder exported to ONNX with every layer's weights
as its output, and the encoder's rules. js/04_heads.js then encodes a typed sentence in
JavaScript, runs the ONNX model with onnxruntime-web (WebAssembly, served by the site) and
draws what :meth:`HeadViewer.compute` would have sent. The export uses torch's
TorchScript-based ONNX exporter, which needs the ``onnx`` package and nothing else; where it
fails (no onnx, another torch, another model) the website simply keeps the sentence box
disabled, as before.

A model too large to save with the page can still offer sentences to choose: ``examples`` fills a
menu beside the sentence box. With a kernel, choosing one types it (the model runs). For the
website, the viewer saves every example's weights with the widget (``page_examples``, computed when
the book is built, as :meth:`HeadViewer.compute` sends them); there the menu draws them at once.
Chapter 7's pretrained MiniLM (22.7 million parameters), with its own ``encode_sentence``, is served
beside the page instead: the site build writes it, quantised, as one script of about 31 MB
(:mod:`attention_book.widgets.pretrained_page`), the viewer saves where to find it in ``page_model``
(:func:`~attention_book.widgets.pretrained_page.minilm_page_model`), and the page loads it when a
reader first types a sentence, with MiniLM's WordPiece tokenizer in js/wordpiece.js. For any other
such model the sentence box stays disabled, its note saying that typing needs a kernel.

Its drawing, its page computation and its view rule are in ``js/04_heads.js``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence

import torch
import traitlets
from torch import nn

from ..data.tasks import Encode
from ..modes import evaluating
from ._base import AttentionWidget, WidgetInputError, onnx_base64, page_models_wanted, rounded
from .pretrained_page import minilm_page_model

__all__ = ["HeadViewer", "ALL_HEADS", "MAX_TOKENS", "MAX_EXAMPLES", "export_page_model", "PAGE_MODEL_PARAMETERS"]

ALL_HEADS = "all"
MAX_TOKENS = 40  # beyond this the labels of a heatmap are unreadable
PAGE_MODEL_PARAMETERS = 1_000_000  # larger models would weigh megabytes on the page (chapter 7's: pretrained_page)
WEIGHT_DIGITS = 3  # compute() rounds the weights to this many decimals; the website does the same
MAX_EXAMPLES = 12  # the menu's sentences; each adds the model's weights (layers x heads x T x T) to the page


def _weights_source(model: nn.Module):
    """The module whose ``attention_weights()`` reports the model's weights."""
    for candidate in (model, getattr(model, "encoder", None)):
        if candidate is not None and callable(getattr(candidate, "attention_weights", None)):
            return candidate
    raise ValueError(
        f"the model ({type(model).__name__}) has no attention_weights() method, and no .encoder that has one; "
        "the head viewer reads each layer's weights through it (attention_book.Encoder has it)"
    )


class _EveryLayersWeights(nn.Module):
    """An encoder whose output is its attention weights: token ids (1, T) -> (layers, heads, T, T)."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.encoder(tokens)
        return torch.stack([weights[0] for weights in self.encoder.attention_weights()])


def _plain_encoder(model: nn.Module):
    """The book's own Encoder that computes ``model``'s attention weights, or None for any other model."""
    from ..layers import EncoderLayer
    from ..multihead import MultiHeadAttention
    from ..transformer import Encoder, EncoderClassifier, TokenClassifier

    if type(model) is Encoder:
        encoder = model
    elif type(model) in (EncoderClassifier, TokenClassifier) and type(model.encoder) is Encoder:
        encoder = model.encoder  # the classifier's head does not change the weights
    else:
        return None
    layers_are_plain = all(
        type(layer) is EncoderLayer and type(layer.self_attn) is MultiHeadAttention for layer in encoder.layers
    )
    return encoder if layers_are_plain else None


def export_page_model(model: nn.Module, encode: Encode) -> dict | None:
    """What the website needs to run the head viewer without a kernel, or None where it cannot.

    A dict with ``onnx`` (the model's encoder as ONNX, base64; input ``tokens`` (1, T) int64,
    output ``weights`` (layers, heads, T, T) float32, T free; its initializers are the encoder's
    parameters that the weights depend on, named ``"encoder." + key`` of the encoder's state
    dict), the encoder's ``vocab_size`` and
    ``max_len``, the word encoder's ``rules`` (``encode.word_rules``), ``max_tokens`` and
    ``digits`` (the rounding of :meth:`HeadViewer.compute`). None when the model is not one
    of the book's plain encoders of at most :data:`PAGE_MODEL_PARAMETERS` parameters, when
    ``encode`` has no ``word_rules``, or when torch cannot export it (any error: the website
    then keeps the sentence box disabled; nothing else changes).
    """
    rules = getattr(encode, "word_rules", None)
    encoder = _plain_encoder(model)
    if not isinstance(rules, dict) or encoder is None:
        return None
    if sum(p.numel() for p in encoder.parameters()) > PAGE_MODEL_PARAMETERS:
        return None
    with torch.no_grad():
        wrapper = _EveryLayersWeights(copy.deepcopy(encoder).cpu().float()).eval()
    max_len = int(encoder.embedding.max_len)
    example = torch.zeros((1, min(3, max_len)), dtype=torch.long)  # T > 1: no size-1 shape is baked in
    # The weights keep their state-dict names ("encoder." + the encoder's key), so the tests
    # rebuild the torch model of a saved page from them.
    onnx = onnx_base64(
        wrapper,
        (example,),
        input_names=["tokens"],
        output_names=["weights"],
        dynamic_axes={"tokens": {1: "T"}, "weights": {2: "T", 3: "T"}},
    )
    if onnx is None:
        return None
    return {
        "onnx": onnx,
        "input": "tokens",
        "output": "weights",
        "vocab_size": int(encoder.embedding.vocab_size),
        "max_len": max_len,
        "rules": json.loads(json.dumps(rules)),
        "max_tokens": MAX_TOKENS,
        "digits": WEIGHT_DIGITS,
    }


def _model_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


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
        examples: sentences offered in a menu beside the sentence box (at most
            :data:`MAX_EXAMPLES`, each one the model can read); the first sentence comes first.

    ``data`` holds ``labels`` (one per token), ``num_layers``, ``num_heads`` and ``weights``
    (layers x heads x T x T, rows = queries, columns = keys); ``view`` holds ``layer`` and
    ``head`` (an int or ``"all"``), chosen in the browser; :meth:`shown` reads them out.
    ``forward_passes`` counts how often the model has run (a layer or head change reuses the
    last run; a new sentence or device runs the model again). ``page_model`` is the JSON text
    of :func:`export_page_model`, or for chapter 7's MiniLM of
    :func:`~attention_book.widgets.pretrained_page.minilm_page_model` (empty where the website cannot
    run the model), saved with the widget for the book's website; made when the viewer is made and by
    :meth:`refresh`.
    ``examples`` lists the menu's sentences (the first sentence, then the ``examples`` given).
    ``page_examples`` is, where the page does not hold the model (it cannot run it, or loads it
    only when a reader types), the JSON text of ``{sentence: data}`` for every sentence of the menu
    (``data`` as :meth:`compute` sends it), made with ``page_model``.
    """

    page_model = traitlets.Unicode("").tag(sync=True)
    examples = traitlets.List(traitlets.Unicode()).tag(sync=True)
    page_examples = traitlets.Unicode("").tag(sync=True)

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
        examples: Sequence[str] = (),
    ):
        if not isinstance(model, nn.Module):
            raise ValueError(f"model must be a torch.nn.Module, but a {type(model).__name__} was given")
        if not callable(encode):
            raise ValueError(
                f"encode must be a function text -> (tokens, labels), but a {type(encode).__name__} was given"
            )
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, but a {type(text).__name__} was given")
        if title is not None and not isinstance(title, str):
            raise ValueError(f"title must be a string, but a {type(title).__name__} was given")
        self.model = model
        self.encode = encode
        self._source = _weights_source(model)
        super().__init__(device=device if device is not None else _model_device(model))
        self.title = title if title is not None else "Head viewer: the attention of every head"
        self.forward_passes = 0
        self._cache_key: tuple[str, str] | None = None
        self._cache: tuple[list[str], torch.Tensor] | None = None
        # Run once now, so that a bad first sentence or model is an error here, not a message.
        try:
            labels, weights = self._run(text, self.device)
        except WidgetInputError as error:
            raise ValueError(f"the first sentence cannot be shown: {error}") from None
        self.num_layers, self.num_heads = weights.shape[0], weights.shape[1]
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be an integer from 0 to {self.num_layers - 1}, but {layer!r} was given")
        if head != ALL_HEADS and (
            isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < self.num_heads
        ):
            raise ValueError(
                f"head must be {ALL_HEADS!r} or an integer from 0 to {self.num_heads - 1}, but {head!r} was given"
            )

        self.kind = "heads"
        self.view = {"layer": layer, "head": head}
        self.inputs = {"sentence": text}
        self.examples = self._check_examples(text, examples)
        self._export_page_model()
        self._start()

    def _check_examples(self, text: str, examples: Sequence[str]) -> list[str]:
        """The menu's sentences: ``text``, then each example once; every one must be readable."""
        if isinstance(examples, str) or not isinstance(examples, Sequence):
            raise ValueError(f"examples must be a list of sentences, but a {type(examples).__name__} was given")
        if len(examples) > MAX_EXAMPLES:
            raise ValueError(f"examples holds {len(examples)} sentences; the menu offers at most {MAX_EXAMPLES}")
        menu = [text] if examples else []
        for example in examples:
            if not isinstance(example, str):
                raise ValueError(f"each example must be a string, but a {type(example).__name__} was given")
            try:
                self._encode(example)
            except WidgetInputError as error:
                raise ValueError(f"the example {example!r} cannot be shown: {error}") from None
            if example not in menu:
                menu.append(example)
        return menu

    def _export_page_model(self) -> None:
        exported = export_page_model(self.model, self.encode) if page_models_wanted() else None
        served = None
        if page_models_wanted() and exported is None:
            served = minilm_page_model(self.model, self.encode, viewer_tokens=MAX_TOKENS, digits=WEIGHT_DIGITS)
        saved = exported or served  # served: chapter 7's MiniLM, a script beside the page, loaded on demand
        self.page_model = "" if saved is None else json.dumps(saved, separators=(",", ":"))
        self.page_examples = ""
        if page_models_wanted() and exported is None and self.examples:
            shown = self._cache_key, self._cache  # the sentence shown stays cached: no second run of it
            answers = {sentence: self._data(*self._run(sentence, self.device)) for sentence in self.examples}
            self._cache_key, self._cache = shown
            self.page_examples = json.dumps(answers, separators=(",", ":"))

    def set_text(self, text: str) -> None:
        """Type ``text`` into the sentence box and press Enter: the model runs on it (again)."""
        self.set_input("sentence", text)

    def refresh(self) -> None:
        """Run the model again on the current sentence (e.g. after training it further)."""
        self._cache_key = self._cache = None
        self._export_page_model()
        self.update("sentence")

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
        if (
            not isinstance(tokens, torch.Tensor)
            or tokens.dim() != 2
            or tokens.shape[0] != 1
            or tokens.is_floating_point()
        ):
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise WidgetInputError(
                f"encode must return token ids of shape (1, T) as a LongTensor, but returned {shape}"
            )
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
        """Every layer's and head's weights for the sentence: the browser shows the layer and head chosen."""
        return self._data(*self._run(self.inputs["sentence"], device))

    def _data(self, labels: list[str], weights: torch.Tensor) -> dict:
        """What the browser draws for one sentence: its labels and every layer's and head's weights."""
        return {
            "labels": list(labels),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "weights": rounded(weights, WEIGHT_DIGITS),  # (layers, heads, T, T) on the CPU
        }

    def shown(self) -> dict:
        """What the picture shows now: the layer, the head (or all) and their weights (rows = queries)."""
        layer, head = self.view["layer"], self.view["head"]
        weights = torch.tensor(self.data["weights"][layer])  # (heads, T, T)
        return {
            "labels": self.data["labels"],
            "layer": layer,
            "head": head,
            "weights": weights if head == ALL_HEADS else weights[int(head)],
        }
