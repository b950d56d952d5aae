"""attention_book.data.pieces (chapter 7): the compact word-piece vocabulary and BERT's masking."""

from __future__ import annotations

import pytest
import torch

import attention_book as ab
from attention_book.data.pieces import (
    MASK,
    SPECIAL_PIECES,
    UNK,
    build_vocabulary,
    mask_tokens,
)
from tests.unit.conftest import REVIEWS

# ---------------------------------------------------------------------------------
# The compact vocabulary


def test_the_special_pieces_have_the_ids_the_book_uses():
    assert SPECIAL_PIECES == ("[PAD]", "[UNK]", "[MASK]")
    assert (ab.PAD, UNK, MASK) == (0, 1, 2)  # [PAD] is the book's PAD


def test_the_vocabulary_keeps_pieces_seen_often_enough_most_frequent_first(vocabulary):
    assert vocabulary.pieces[:3] == ["[PAD]", "[UNK]", "[MASK]"]
    assert vocabulary.pieces[3:7] == ["good", "bad", ",", "."]  # 7, 7, 6 and 6 times; ties in WordPiece order
    assert vocabulary.counts[3:7] == [7, 7, 6, 6]
    assert "story" in vocabulary.pieces and "is" in vocabulary.pieces  # twice each
    assert "the" in vocabulary.pieces and "acting" in vocabulary.pieces
    counts = vocabulary.counts[3:]
    assert counts == sorted(counts, reverse=True) and min(counts) >= 2
    assert len(vocabulary) == len(vocabulary.pieces) and "3 special" in repr(vocabulary)
    assert vocabulary.commonest == vocabulary.pieces.index("good")


def test_max_pieces_keeps_only_the_most_frequent(minilm):
    small = build_vocabulary(minilm, REVIEWS, min_count=1, max_pieces=2)
    assert small.pieces == ["[PAD]", "[UNK]", "[MASK]", "good", "bad"]
    assert small.counts[UNK] > 0  # every other piece is now unknown
    with pytest.raises(ValueError, match="min_count"):
        build_vocabulary(minilm, REVIEWS, min_count=0)


def test_encoding_pads_marks_real_tokens_and_maps_rare_pieces_to_unk(vocabulary):
    tokens, mask = vocabulary.encode(["good film", "a splendid film ."], max_tokens=48)
    assert tokens.shape == mask.shape == (2, 4)
    assert mask.tolist() == [[True, True, False, False], [True] * 4]
    assert tokens[0, 2:].tolist() == [ab.PAD, ab.PAD]
    assert vocabulary.decode(tokens[1]) == ["a", "[UNK]", "film", "."]  # "splendid" is not in the vocabulary
    short, _ = vocabulary.encode(["good " * 100], max_tokens=5)
    assert short.shape == (1, 5)
    with pytest.raises(ValueError, match="list of strings"):
        vocabulary.encode("a single string")


# ---------------------------------------------------------------------------------
# Masked language modelling's corruption


def test_mask_tokens_picks_about_15_percent_of_the_real_tokens_and_never_padding():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 50, (200, 30), generator=generator)
    padding_mask = torch.arange(30)[None, :] < torch.randint(5, 31, (200,), generator=generator)[:, None]
    corrupted, targets = mask_tokens(tokens, padding_mask, generator, vocab_size=50)
    chosen = targets != ab.IGNORE
    assert not (chosen & ~padding_mask).any()
    assert abs(chosen.sum() / padding_mask.sum() - 0.15) < 0.02
    assert chosen.any(dim=1).all()  # every sequence predicts something
    assert torch.equal(targets[chosen], tokens[chosen])
    masked = (corrupted == MASK) & chosen
    unchanged = (corrupted == tokens) & chosen
    assert abs(masked.sum() / chosen.sum() - 0.8) < 0.06
    assert 0.05 < unchanged.sum() / chosen.sum() < 0.17  # 10% kept, plus random draws of the same piece
    assert torch.equal(corrupted[~chosen], tokens[~chosen])
    assert ((corrupted[chosen & ~masked] >= len(SPECIAL_PIECES)) & (corrupted[chosen & ~masked] < 50)).all()


def test_without_a_vocabulary_size_no_piece_is_swapped_for_a_random_one():
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, 50, (100, 20), generator=generator)
    corrupted, targets = mask_tokens(tokens, torch.ones_like(tokens, dtype=torch.bool), generator)
    chosen = targets != ab.IGNORE
    assert ((corrupted == MASK) | (corrupted == tokens))[chosen].all()


def test_mask_tokens_repeats_with_the_same_generator_seed():
    tokens = torch.randint(3, 50, (8, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(tokens, dtype=torch.bool)
    first = mask_tokens(tokens, mask, torch.Generator().manual_seed(5), vocab_size=50)
    again = mask_tokens(tokens, mask, torch.Generator().manual_seed(5), vocab_size=50)
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_mask_tokens_rejects_a_bad_rate_or_mask():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="between 0 and 1"):
        mask_tokens(tokens, tokens > 0, generator, rate=1.5)
    with pytest.raises(ValueError, match="boolean"):
        mask_tokens(tokens, tokens, generator)
    with pytest.raises(ValueError, match=r"\(batch, T\) tensor of ids"):
        mask_tokens(tokens.float(), tokens > 0, generator)
