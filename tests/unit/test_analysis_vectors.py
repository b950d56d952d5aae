"""attention_book.analysis.vectors (chapters 5, 7): a word's contextual vectors by depth, and the largest gap of two tensors."""

import pytest
import torch

from attention_book.analysis.vectors import contextual_similarity_by_layer, max_abs_difference, word_vectors


def test_word_vectors_follow_the_word_through_every_layer(minilm):
    vectors = word_vectors(minilm, "The bank raised its rates.", "bank")
    assert vectors.shape == (7, 384)
    piece = minilm.tokenizer.token_to_id("bank")
    embedding = minilm.encoder.embedding
    static = embedding.norm(
        embedding.tokens.weight[piece] + embedding.positions.embedding.weight[2] + embedding.token_types.weight[0]
    )
    torch.testing.assert_close(vectors[0], static, atol=1e-5, rtol=0)  # layer 0: the embedding of position 2
    batch = minilm.encode(["The bank raised its rates."])
    with torch.no_grad():
        last = minilm(batch.tokens, batch.padding_mask)
    torch.testing.assert_close(vectors[-1], last[0, 2], atol=1e-5, rtol=0)
    two_pieces = word_vectors(minilm, "An unpredictable thriller.", "unpredictable")
    assert two_pieces.shape == (7, 384)
    with pytest.raises(ValueError, match="does not occur"):
        word_vectors(minilm, "A river bank.", "money")


def test_same_sense_occurrences_end_up_closer_than_different_senses(minilm):
    groups = {
        "money": ["The bank raised its interest rates.", "I opened an account at the bank."],
        "river": ["We sat on the bank of the river.", "The boat reached the muddy bank."],
    }
    similarity = contextual_similarity_by_layer(minilm, "bank", groups)
    assert len(similarity["same sense"]) == len(similarity["different sense"]) == 7
    assert similarity["same sense"][-1] > similarity["different sense"][-1] + 0.03
    assert similarity["same sense"][0] > 0.9  # layer 0 is nearly static
    with pytest.raises(ValueError, match="two groups"):
        contextual_similarity_by_layer(minilm, "bank", {"money": groups["money"]})


def test_max_abs_difference():
    assert max_abs_difference(torch.tensor([1.0, 2.0]), torch.tensor([1.5, 1.0])) == 1.0
    gradients = torch.tensor([[0.0, -3.0]], requires_grad=True)
    value = max_abs_difference(gradients, torch.zeros(1, 2))
    assert value == 3.0 and isinstance(value, float)
