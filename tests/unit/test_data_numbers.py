"""attention_book.data.numbers (chapter 6): number names as a character corpus, and lines a model writes."""

import pytest
import torch

import attention_book as ab
from attention_book.data.numbers import ALPHABET, is_number_name, number_words, sample_lines
from attention_book.transformer import LanguageModel


def test_number_words_spell_numbers_and_is_number_name_recognises_them():
    assert [number_words(n) for n in (0, 13, 40, 42, 100, 342, 999)] == [
        "zero",
        "thirteen",
        "forty",
        "forty two",
        "one hundred",
        "three hundred forty two",
        "nine hundred ninety nine",
    ]
    assert len({number_words(n) for n in range(1000)}) == 1000
    assert is_number_name("seventy one") and is_number_name("seventy")
    assert not is_number_name("twenty ten") and not is_number_name("forty  two") and not is_number_name("")
    for bad in (-1, 1000, 2.0, True):
        with pytest.raises(ValueError, match="from 0 to 999"):
            number_words(bad)


def _value(name):
    return {number_words(n): n for n in range(1000)}[name]


def test_character_corpus_targets_are_the_next_characters():
    corpus = ab.CharacterCorpus(50, T=16, seed=3)
    assert corpus.characters == ALPHABET and set(corpus.text) <= set(ALPHABET)
    assert corpus.decode(corpus.encode(corpus.text[:40])) == corpus.text[:40]
    for item in (corpus[i] for i in range(50)):
        assert item["tokens"].shape == item["targets"].shape == (16,)
        assert torch.equal(item["tokens"][1:], item["targets"][:-1])
        assert corpus.decode(item["tokens"]) + corpus.decode(item["targets"][-1:]) in corpus.text
    assert all(
        is_number_name(line) and number_words(int(_value(line))) == line for line in corpus.text.split("\n")[:-1]
    )
    again = ab.CharacterCorpus(50, T=16, seed=3)
    assert torch.equal(again.tokens, corpus.tokens)
    with pytest.raises(ValueError, match="not in this corpus"):
        corpus.encode("forty-two")


@pytest.mark.parametrize(
    "options, pattern",
    [
        (dict(num_windows=0), "num_windows"),
        (dict(num_windows=5, T=1), "T must"),
        (dict(num_windows=5, largest=1000), "largest"),
        (dict(num_windows=5, T=50, num_lines=2), "too few"),
    ],
)
def test_character_corpus_rejects_bad_arguments(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        ab.CharacterCorpus(**options)


def test_sample_lines_writes_one_line_per_sample_and_repeats_with_its_seed():
    corpus = ab.CharacterCorpus(64, T=12, seed=0)
    torch.manual_seed(0)
    model = LanguageModel(len(corpus.characters), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=12)
    lines = sample_lines(model, corpus, 5, seed=1)
    assert len(lines) == 5 and all("\n" not in line and len(line) <= 11 for line in lines)
    assert lines == sample_lines(model, corpus, 5, seed=1)
    assert all(set(line) <= set(ALPHABET) for line in lines)
