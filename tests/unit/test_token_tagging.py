"""attention_book.training.token_tagging (chapter 7): taggers from MiniLM or from scratch, trained alike."""

from __future__ import annotations

import pytest
import torch

import attention_book as ab
from attention_book.data import IGNORE
from attention_book.data.batches import LengthBatches
from attention_book.data.entities import TAG_IDS, TAG_NAMES, TaggedSentence, align_words, load_entities
from attention_book.training.token_tagging import (
    predict_words,
    pretrained_tagger,
    random_minilm_tagger,
    scratch_tagger,
    tagging_loss,
    train_tagger,
)


@pytest.fixture(scope="module")
def tweets(minilm):
    """40 training tweets, aligned to MiniLM's word pieces."""
    sentences = load_entities().train[:40]
    return sentences, align_words(minilm.tokenizer, sentences)


def test_the_pretrained_tagger_holds_minilm_with_every_weight_trainable_and_leaves_minilm_frozen(minilm):
    model = pretrained_tagger(minilm, seed=0)
    batch = minilm.encode(["Paris is lovely in the spring."])
    with torch.no_grad():
        torch.testing.assert_close(
            model.encoder(batch.tokens, batch.padding_mask), minilm(batch.tokens, batch.padding_mask)
        )
    assert all(parameter.requires_grad for parameter in model.parameters())
    assert not any(parameter.requires_grad for parameter in minilm.parameters())
    assert model.head.out_features == len(TAG_NAMES) == 21
    assert model.encoder.layers[0].self_attn.q_proj.weight is not minilm.encoder.layers[0].self_attn.q_proj.weight


def test_a_seed_gives_the_same_head_and_another_seed_another(minilm):
    first, again, other = (pretrained_tagger(minilm, seed) for seed in (0, 0, 1))
    torch.testing.assert_close(first.head.weight, again.head.weight)
    assert not torch.equal(first.head.weight, other.head.weight)
    random = random_minilm_tagger(minilm, seed=0)
    assert not torch.equal(random.encoder.embedding.tokens.weight, minilm.encoder.embedding.tokens.weight)


def test_the_scratch_tagger_is_the_chapters_small_encoder(minilm):
    model = scratch_tagger(minilm.tokenizer.get_vocab_size(), max_len=128, seed=0)
    assert model.encoder.d_model == 64 and len(model.encoder.layers) == 2
    assert model.encoder.embedding.tokens.num_embeddings == 30_522  # MiniLM's word pieces, learned from scratch


def test_training_lowers_the_loss_and_only_first_pieces_count(minilm, tweets, one_thread):
    sentences, aligned = tweets
    model = scratch_tagger(minilm.tokenizer.get_vocab_size(), max_len=128, seed=0)
    before = tagging_loss(model, aligned)
    history = train_tagger(model, aligned, steps=12, lr=3e-3, seed=0, batch_size=8)
    assert history.steps == 12 and tagging_loss(model, aligned) < before
    # the loss is the mean over first pieces: it equals token_loss on the whole set as one batch
    whole = ab.data.trim_padding(aligned.tensors())
    with torch.no_grad():
        whole_loss = float(ab.token_loss(model, whole))
    torch.testing.assert_close(tagging_loss(model, aligned), whole_loss, rtol=1e-5, atol=1e-6)
    assert int((aligned.targets != IGNORE).sum()) == sum(len(sentence) for sentence in sentences)


def test_a_seed_gives_both_arms_the_same_batches(tweets):
    _, aligned = tweets
    orders = [
        [batch["targets"].tolist() for batch in LengthBatches(aligned.tensors(), 8, torch.Generator().manual_seed(3))]
        for _ in range(2)
    ]
    assert orders[0] == orders[1]


class _Always(torch.nn.Module):
    """A tagger that gives one tag to every piece."""

    def __init__(self, tag: str):
        super().__init__()
        self.tag = TAG_IDS[tag]
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, tokens, padding_mask):
        logits = torch.zeros(*tokens.shape, len(TAG_NAMES))
        logits[..., self.tag] = 1.0
        return logits


def test_predictions_come_back_one_per_word_in_the_sentences_order(minilm):
    sentences = [
        TaggedSentence(("a",) * 30, ("O",) * 30),
        TaggedSentence(("@paulwalk", "\ufe0f", "hi"), ("O", "O", "O")),
    ]
    aligned = align_words(minilm.tokenizer, sentences)
    predicted = predict_words(_Always("B-person"), aligned, batch_size=1)
    assert predicted == [["B-person"] * 30, ["B-person", "O", "B-person"]]  # the dropped word reads O
