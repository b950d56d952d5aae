"""Chapter 7's pretrained model on the website: MiniLM for the head viewer, loaded when a reader types.

Chapter 7's head viewer shows the attention of all-MiniLM-L6-v2 (:func:`~attention_book.load_minilm`). On the
book's website no kernel runs: chapters 4 and 6 save their small models inside the page
(:func:`~attention_book.widgets.head_viewer.export_page_model`), but MiniLM's 22.7 million parameters would
weigh 91 MB as float32. So the site build writes the model once, quantised, as one classic script next to the
site's other scripts (tools/site/page_models.py, called by tools/site/build_book.py), and the page adds that
script only when a reader types a sentence of their own (js/wordpiece.js): a reader who never types loads
nothing. The head viewer saves only where to find it (:func:`minilm_page_model`); its menu of sentences
keeps drawing the weights the build saved, at once.

The script, written from the installed weights package (nothing is downloaded, nothing committed), holds

* the model: an ONNX graph, token ids (1, T) in, every layer's attention weights (layers, heads, T, T) out,
  T at most the head viewer's 40 tokens, and the streams its weights are made from (tools/site/page_models.py,
  page_parts; js/onnx.js, loadPageModel);
* the WordPiece tokenizer's vocabulary and rules, read from the package's tokenizer.json, which
  js/wordpiece.js applies as the ``tokenizers`` package does (tests/widgets/test_wordpiece.py compares them).

**Quantisation.** Each row of the token embedding is stored as integers times one step, the row's standard
deviation divided by :data:`EMBEDDING_STEPS`; each row of a layer's weight matrices likewise with
:data:`MATRIX_STEPS`. The integers travel as two byte planes, high and low byte: gzip compresses the high
bytes (mostly 0 and -1) to a fifth; the low ones, as good as random, go as they are. The page makes float32
weights of them (``(high * 256 + low) * step``, rounded once, bit for bit as :func:`page_encoder`, the Python
twin of the page's model, does); the embedding stays in its planes, the graph turning back the rows of the
tokens given. Measured on 225 sentences (chapter 7's menu, the tests' typed sentences and tokenizer cases,
150 test reviews), every attention weight lies within 0.0036 of the float32 model's, a third of the 1e-2 the
website allows, and the script weighs about :data:`SCRIPT_MEGABYTES` MB. Coarser steps (128 and 384) save 2
MB but reach 0.0072. The forms the issue named do worse: int8 blocks of 32 for the embedding with float16
matrices compress to as much (30 MB) and reach 0.0084 (on the menu and 100 reviews); int8 matrices, even in
blocks of 32 or fitted with GPTQ on 256 reviews, reach 0.02 to 0.03, over the limit. Left out: the rows of
the vocabulary's 994 ``[unused…]`` tokens, which the tokenizer never produces (stored as zeros), the
positions past the head viewer's 40, and the last layer's values, output and feed-forward, on which no
attention weight depends (the exporter drops them).

**Packing.** A page opened from file:// can run a classic script but can neither fetch a file nor import a
module, so the bytes travel as text in one script. Base64 would cost 8 bits for 6; the script is UTF-16
(with a byte-order mark, which browsers follow whatever charset a server names) and each character carries
15 bits (tools/site/page_models.py, pack15): 31 MB instead of 38.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
from pathlib import Path

import torch
from torch import nn

from ..positional import LearnedPositionalEncoding
from ..pretrained import PretrainedEncoder, load_minilm
from ..transformer import Encoder

__all__ = [
    "EMBEDDING_STEPS",
    "MATRIX_STEPS",
    "SCRIPT_NAME",
    "SCRIPT_MEGABYTES",
    "PAGE_NAME",
    "stepped",
    "unstepped",
    "SteppedLinear",
    "SteppedEmbedding",
    "page_encoder",
    "tokenizer_rules",
    "character_classes",
    "minilm_page_model",
]

EMBEDDING_STEPS = 256  # a token's embedding in steps of its standard deviation / 256
MATRIX_STEPS = 512  # a row of a weight matrix in steps of its standard deviation / 512
SCRIPT_NAME = "all-minilm-l6-v2.js"  # in the site's page-models/ folder (tools/site/widgets_offline.js)
SCRIPT_MEGABYTES = 31  # the script's size, as the page announces it (a test checks the written file)
PAGE_NAME = "all-MiniLM-L6-v2"
_UNUSED = re.compile(r"\[unused\d+\]")


def stepped(weight: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row of ``weight`` (rows, columns) as integers times the row's step (its std / ``steps``):
    (high bytes int8, low bytes uint8, steps (rows, 1) float32), integer = high * 256 + low."""
    weight = weight.detach().float().cpu()
    step = (weight.std(dim=1, keepdim=True) / steps).clamp_min(torch.finfo(torch.float32).tiny)
    integers = torch.round(weight / step).to(torch.int32)
    if integers.abs().max() >= 2**15:
        raise ValueError(f"a weight lies {int(integers.abs().max())} steps from 0: more than two bytes hold")
    return (integers >> 8).to(torch.int8), (integers & 255).to(torch.uint8), step


def unstepped(high: torch.Tensor, low: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """float32 values back from :func:`_stepped`'s planes: (high * 256 + low) * step, rounded once (as the
    page computes them, js/onnx.js pageWeights, and the ONNX graph the embedding's rows)."""
    return (high.float() * 256.0 + low.float()) * step


class SteppedLinear(nn.Module):
    """A linear layer whose weight is stored by :func:`_stepped`, transposed: ``x @ weight_t + bias``.

    ``weight_t`` (in, out) = the planes ``high``, ``low`` (in, out) times ``step`` (1, out), one step per output
    (a row of the layer's weight). Only ``weight_t`` and the bias reach the ONNX graph, as float32 the page
    computes from the planes (:func:`page_onnx`); the planes are plain attributes, saved in the script."""

    def __init__(self, linear: nn.Linear, steps: int):
        super().__init__()
        high, low, step = stepped(linear.weight, steps)
        self.high, self.low, self.step = high.t().contiguous(), low.t().contiguous(), step.t().contiguous()
        self.weight_t = nn.Parameter(unstepped(self.high, self.low, self.step))
        self.bias = nn.Parameter(linear.bias.detach().float().cpu().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight_t + self.bias


class SteppedEmbedding(nn.Module):
    """A token embedding stored by :func:`_stepped`; the graph turns back only the rows of the tokens given."""

    def __init__(self, embedding: nn.Embedding, steps: int, unused: list[int]):
        super().__init__()
        weight = embedding.weight.detach().float().cpu().clone()
        weight[unused] = 0.0  # never produced by the tokenizer: zeros cost nothing once compressed
        high, low, step = stepped(weight, steps)
        self.register_buffer("high", high)
        self.register_buffer("low", low)
        self.register_buffer("step", step)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return unstepped(self.high[tokens], self.low[tokens], self.step[tokens])


def page_encoder(minilm: PretrainedEncoder, *, max_tokens: int) -> Encoder:
    """The page's model in torch: a float32 CPU copy of ``minilm.encoder`` with its token embedding and weight
    matrices stored as the script stores them, its [unused…] rows zero and only ``max_tokens`` positions.

    It computes what the website's ONNX model computes (the tests compare both, and both with MiniLM)."""
    encoder = copy.deepcopy(minilm.encoder).cpu().float().eval()
    vocabulary = minilm.tokenizer.get_vocab()
    unused = sorted(index for token, index in vocabulary.items() if _UNUSED.fullmatch(token))
    embedding = encoder.embedding
    embedding.tokens = SteppedEmbedding(embedding.tokens, EMBEDDING_STEPS, unused)
    positions = LearnedPositionalEncoding(max_tokens, embedding.positions.d_model)
    with torch.no_grad():
        positions.embedding.weight.copy_(embedding.positions.embedding.weight[:max_tokens])
    embedding.positions = positions.eval()
    embedding.max_len = max_tokens
    for layer in encoder.layers:
        for owner in (layer.self_attn, layer.feed_forward):
            for name in ("q_proj", "k_proj", "v_proj", "out_proj", "linear1", "linear2"):
                if hasattr(owner, name):
                    setattr(owner, name, SteppedLinear(getattr(owner, name), MATRIX_STEPS))
    return encoder.requires_grad_(False)


def tokenizer_rules(path: Path) -> dict:
    """What js/wordpiece.js needs of a BERT WordPiece tokenizer.json: the vocabulary (in id order), the special
    tokens matched in the raw text, the WordPiece settings and the template ([CLS] text [SEP]).

    Raises ValueError for a tokenizer that does anything the page's tokenizer does not (another normalizer,
    pre-tokenizer, model or template)."""
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    expected = {
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": True,
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
    }
    for key, value in expected.items():
        if spec.get(key) != value:
            raise ValueError(f"the page's tokenizer reads {key} {value}, but tokenizer.json has {spec.get(key)}")
    model = spec["model"]
    if model.get("type") != "WordPiece":
        raise ValueError(f"the page's tokenizer is WordPiece, but tokenizer.json's model is {model.get('type')}")
    single = [next(iter(part.values()))["id"] for part in spec["post_processor"]["single"]]
    if single != ["[CLS]", "A", "[SEP]"]:
        raise ValueError(f"the page's tokenizer writes [CLS] text [SEP], but tokenizer.json's template is {single}")
    vocabulary = sorted(model["vocab"], key=model["vocab"].get)
    if [model["vocab"][token] for token in vocabulary] != list(range(len(vocabulary))):
        raise ValueError("tokenizer.json's vocabulary does not number its tokens 0, 1, 2, ...")
    specials = [token["content"] for token in spec["added_tokens"] if not token["normalized"]]
    return {
        "vocabulary": vocabulary,
        "specials": specials,
        "unknown": model["unk_token"],
        "prefix": model["continuing_subword_prefix"],
        "max_word_characters": model["max_input_chars_per_word"],
        "first": "[CLS]",
        "last": "[SEP]",
        "classes": character_classes(),
    }


def _ranges(codes: list[int]) -> list[int]:
    """Sorted code points as the flat list [first, last, first, last, ...] of their runs."""
    flat: list[int] = []
    for code in codes:
        if flat and flat[-1] == code - 1:
            flat[-1] = code
        else:
            flat += [code, code]
    return flat


def character_classes() -> dict[str, list[int]]:
    """The characters the ``tokenizers`` package's BertNormalizer removes (``removed``: control and format
    characters, private use, U+0000 and U+FFFD), strips after NFD (``marks``: non-spacing marks) and its
    BertPreTokenizer makes words of their own (``alone``: punctuation and ASCII's symbols), as runs of code
    points (:func:`_ranges`), found by asking the package about every code point (a few seconds).

    The package classifies characters with tables of an older Unicode than the browser's (it keeps unassigned
    code points, and reads U+061D, added in Unicode 14, as a letter), so js/wordpiece.js takes these three
    classes from here; white space, CJK, NFD and lower case agree (tests/widgets/test_wordpiece.py checks every
    code point of the Basic Multilingual Plane and a sample of the others)."""
    from tokenizers.normalizers import BertNormalizer
    from tokenizers.pre_tokenizers import BertPreTokenizer

    clean = BertNormalizer(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
    strip = BertNormalizer(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
    words = BertPreTokenizer()
    codes = [code for code in range(0x110000) if not 0xD800 <= code <= 0xDFFF]  # surrogates are no characters
    return {
        "removed": _ranges([code for code in codes if clean.normalize_str(chr(code)) == ""]),
        "marks": _ranges([code for code in codes if strip.normalize_str(chr(code)) == ""]),
        "alone": _ranges([code for code in codes if len(words.pre_tokenize_str(f"a{chr(code)}a")) == 3]),
    }


def _same_weights(model: nn.Module, reference: nn.Module) -> bool:
    ours, theirs = model.state_dict(), reference.state_dict()
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k].cpu(), theirs[k].cpu()) for k in ours)


def minilm_page_model(model: nn.Module, encode, *, viewer_tokens: int, digits: int) -> dict | None:
    """What chapter 7's head viewer saves for the website where its model is MiniLM as :func:`load_minilm` loads
    it (any fine-tuned copy differs) and ``encode`` is its ``encode_sentence``: the script's name (the page loads
    it on the first typed sentence), its size in MB, the tokenizer's limit (``encode_sentence``'s ``max_tokens``),
    the viewer's (``viewer_tokens``) and the rounding of its weights (``digits``). None for any other model or
    encoder, or where MiniLM's package is not installed."""
    if not isinstance(model, PretrainedEncoder) or getattr(encode, "__self__", None) is not model:
        return None
    if getattr(encode, "__func__", None) is not PretrainedEncoder.encode_sentence:
        return None
    try:
        reference = load_minilm()
    except (ImportError, OSError, ValueError):  # no package, or files that fail their checksums
        return None
    if model is not reference and not _same_weights(model, reference):
        return None
    limit = inspect.signature(PretrainedEncoder.encode_sentence).parameters["max_tokens"].default
    return {
        "kind": "pretrained",
        "script": SCRIPT_NAME,
        "name": PAGE_NAME,
        "megabytes": SCRIPT_MEGABYTES,
        "max_tokens": limit,
        "viewer_tokens": viewer_tokens,
        "digits": digits,
    }
