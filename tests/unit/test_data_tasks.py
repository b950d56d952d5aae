"""attention_book.data.tasks (chapters 2, 4-6): every toy task, the special ids and word-level encoding.

Each task is seeded (the same seed, the same examples), lays out its items the one way
(``tokens``, ``padding_mask`` where lengths vary, per-position ``targets`` with IGNORE where
there is nothing to predict) and answers what it says it answers.
"""

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.analysis.baselines import best_invariant_accuracy
from attention_book.data.tasks import IGNORE, word_encoder


def test_special_ids_and_the_ignored_label():
    assert (ab.PAD, ab.BOS, ab.EOS) == (0, 1, 2)
    assert ab.IGNORE == IGNORE == -100
    logits, targets = torch.randn(3, 5), torch.tensor([1, IGNORE, 4])
    torch.testing.assert_close(
        F.cross_entropy(logits, targets, ignore_index=IGNORE), F.cross_entropy(logits[[0, 2]], targets[[0, 2]])
    )


def test_vocabulary_puts_the_specials_first_and_decodes_up_to_eos():
    vocab = ab.Vocabulary(("a", "b"))
    assert vocab.tokens == ("<pad>", "<bos>", "<eos>", "a", "b") and len(vocab) == 5
    assert vocab.encode(["b", "a"]).tolist() == [4, 3]
    assert vocab.decode([ab.BOS, 3, 4, ab.EOS, 3, ab.PAD]) == ["a", "b"]
    assert vocab.decode([ab.BOS, 3], strip=False) == ["<bos>", "a"]
    with pytest.raises(ValueError, match=r"unknown tokens \['Z'\]"):
        ab.SequenceTask("copy", 1).vocab.encode(["Z"])


# ---------------------------------------------------------------------------------
# Chapter 6's sequence tasks and chapter 2's associative recall


def test_datasets_are_deterministic_per_seed():
    a, b = ab.SequenceTask("sort", 20, seed=7), ab.SequenceTask("sort", 20, seed=7)
    assert torch.equal(a.source, b.source) and torch.equal(a.target_out, b.target_out)
    assert not torch.equal(a.source, ab.SequenceTask("sort", 20, seed=8).source)


def test_sort_task_targets_are_sorted_and_end_with_eos():
    task = ab.SequenceTask("sort", 50, seed=0)
    for item in (task[i] for i in range(len(task))):
        length = int(item["source_padding"].sum())
        answer = item["target_out"][:length]
        assert torch.equal(answer, item["source"][:length].sort().values)
        assert item["target_out"][length] == ab.EOS
        assert torch.equal(item["target_in"][1 : length + 1], answer) and item["target_in"][0] == ab.BOS


def test_copy_and_reverse_answers_and_the_target_padding():
    for kind, solve in (("copy", lambda s: s), ("reverse", lambda s: s.flip(0))):
        task = ab.SequenceTask(kind, 20, min_len=2, max_len=5, seed=1)
        for i in range(20):
            length = int(task.source_padding[i].sum())
            assert torch.equal(task.target_out[i, :length], solve(task.source[i, :length]))
            assert int(task.target_padding[i].sum()) == length + 1  # BOS and the answer


def test_unknown_task_kind_is_a_clear_error():
    with pytest.raises(ValueError, match=r"kind must be one of .*'shuffle'"):
        ab.SequenceTask("shuffle", 10)


def test_associative_recall_label_is_the_value_of_the_queried_key():
    task = ab.AssociativeRecall(100, num_pairs=4, seed=0)
    for tokens, label in zip(task.tokens, task.labels):
        pairs = tokens[:8].view(4, 2)
        asked = tokens[-1]
        assert pairs[pairs[:, 0] == asked, 1].item() == label.item()
    assert set(task[0]) == {"tokens", "label"}


# ---------------------------------------------------------------------------------
# word_encoder: typed text to ids of a word-level vocabulary


def test_word_encoder_accepts_a_vocabulary_a_dict_or_a_list():
    vocab = ab.Vocabulary(tuple("abc"))
    tokens, labels = word_encoder(vocab)("a c b")
    assert tokens.tolist() == [[3, 5, 4]] and labels == ["a", "c", "b"] and tokens.dtype == torch.long
    assert word_encoder({"x": 7, "y": 9})("y x")[0].tolist() == [[9, 7]]
    assert word_encoder(["p", "q"], lowercase=True)("Q P")[0].tolist() == [[1, 0]]
    encode = word_encoder(["p", "q"], max_len=2)
    with pytest.raises(ValueError, match="unknown words 'r', 's'"):
        encode("p r s r")
    with pytest.raises(ValueError, match="reads at most 2"):
        encode("p q p")
    with pytest.raises(ValueError, match="empty"):
        encode(" ")
    with pytest.raises(ValueError, match="vocabulary must be"):
        word_encoder(42)
    with pytest.raises(ValueError, match="max_len must be a positive integer"):
        word_encoder(["p"], max_len=0)


# ---------------------------------------------------------------------------------
# Chapter 4: the two-relation task


def test_every_letter_occurs_twice_and_the_targets_name_partner_and_previous_digits():
    task = ab.TwoRelationTask(50, seed=3)
    assert task.tokens.shape == (50, 8) and task.targets.shape == (50, 8)
    letters, digits = task.tokens // task.num_digits, task.tokens % task.num_digits
    for n in range(50):
        counts = torch.bincount(letters[n], minlength=task.num_letters)
        assert sorted(counts[counts > 0].tolist()) == [2, 2, 2, 2]
        assert task.targets[n, 0] == IGNORE and task.answer(IGNORE) is None
        for t in range(1, 8):
            partner = int(task.partner[n, t])
            assert partner != t and letters[n, partner] == letters[n, t]
            assert task.answer(int(task.targets[n, t])) == (int(digits[n, partner]), int(digits[n, t - 1]))


def test_the_same_seed_gives_the_same_sequences_and_another_seed_others():
    assert torch.equal(ab.TwoRelationTask(20, seed=1).tokens, ab.TwoRelationTask(20, seed=1).tokens)
    assert not torch.equal(ab.TwoRelationTask(20, seed=1).tokens, ab.TwoRelationTask(20, seed=2).tokens)


def test_items_words_and_encode_fit_together():
    task = ab.TwoRelationTask(5, seed=0)
    item = task[2]
    assert set(item) == {"tokens", "targets"} and item["tokens"].shape == (8,)
    words = task.words(2)
    tokens, labels = task.encode(" ".join(words))
    assert labels == words and torch.equal(tokens[0], task.tokens[2])
    answers = task.answers(2)
    assert answers[0] == "-" and all(len(answer) == 2 and answer.isdigit() for answer in answers[1:])
    with pytest.raises(ValueError, match="unknown word 'z9'"):
        task.encode("a1 z9")
    with pytest.raises(ValueError, match="at most 8"):
        task.encode(" ".join(words + ["a1"]))


@pytest.mark.parametrize(
    "options, message",
    [({"num_pairs": 1}, "num_pairs"), ({"num_letters": 3}, "num_letters"), ({"num_digits": 11}, "num_digits")],
)
def test_bad_task_settings_are_value_errors(options, message):
    with pytest.raises(ValueError, match=message):
        ab.TwoRelationTask(10, **options)


# ---------------------------------------------------------------------------------
# Chapter 5: which of "deep" and "learning" comes first


def test_every_sequence_holds_deep_and_learning_once_and_the_label_says_which_comes_first():
    task = ab.WordOrderTask(200, min_len=3, max_len=9, seed=4)
    deep, learning = task.vocab.encode(["deep", "learning"]).tolist()
    for tokens, label, length in zip(task.tokens, task.labels, task.lengths):
        real = tokens[: int(length)].tolist()
        assert real.count(deep) == 1 and real.count(learning) == 1
        assert int(label) == int(real.index(deep) < real.index(learning))
        assert (tokens[int(length) :] == ab.PAD).all()
    assert torch.equal(task.padding_mask, task.tokens != ab.PAD)
    assert set(task[0]) == {"tokens", "padding_mask", "label", "length"}
    assert 3 <= int(task.lengths.min()) and int(task.lengths.max()) <= 9
    assert task.labels.float().mean() == 0.5


def test_twins_hold_the_same_words_in_another_order_with_the_opposite_label():
    task = ab.WordOrderTask(100, seed=1)
    for i in range(0, 100, 2):
        first, second = task.tokens[i], task.tokens[i + 1]
        assert sorted(first.tolist()) == sorted(second.tolist()) and not torch.equal(first, second)
        assert task.labels[i] + task.labels[i + 1] == 1
    assert best_invariant_accuracy(task.tokens, task.labels, task.padding_mask) == 0.5


def test_the_same_seed_gives_the_same_sequences_and_padding_lines_up_across_sets():
    assert torch.equal(ab.WordOrderTask(50, seed=3).tokens, ab.WordOrderTask(50, seed=3).tokens)
    assert not torch.equal(ab.WordOrderTask(50, seed=3).tokens, ab.WordOrderTask(50, seed=4).tokens)
    short, long = ab.WordOrderTask(10, 4, 8, pad_to=12), ab.WordOrderTask(10, 12, 12, pad_to=12)
    assert short.tokens.shape == long.tokens.shape == (10, 12)
    sentence = short.sentence(0)
    words, label = sentence.split(" -> ")
    assert "deep" in words.split() and "learning" in words.split() and label in short.label_names


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"num_samples": 7}, "even"),
        ({"num_samples": 10, "min_len": 1}, r"min_len.*\b1\b"),
        ({"num_samples": 10, "min_len": 6, "max_len": 4}, r"max_len.*\b4\b"),
        ({"num_samples": 10, "max_len": 8, "pad_to": 5}, r"pad_to.*at least.*8.*5 was given"),
    ],
)
def test_bad_task_arguments_raise_a_clear_value_error(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ab.WordOrderTask(**kwargs)


# ---------------------------------------------------------------------------------
# Chapter 6: toy reviews with a [CLS] token


def test_toy_reviews_are_labelled_by_counting_opinion_words():
    reviews = ab.ToyReviews(200, max_words=6, seed=4)
    positive, negative = {"good", "great", "fun", "clever"}, {"bad", "dull", "awful", "boring"}
    for i in range(len(reviews)):
        item = reviews[i]
        words = reviews.vocab.decode(item["tokens"])
        assert words[0] == "[CLS]" and 3 <= len(words) - 1 <= 6
        assert torch.equal(item["padding_mask"], item["tokens"] != ab.PAD)
        score = sum(w in positive for w in words) - sum(w in negative for w in words)
        assert score != 0 and item["label"].item() == int(score > 0)
    assert torch.equal(reviews.padding_mask, reviews.tokens != ab.PAD)
    assert torch.equal(ab.ToyReviews(200, max_words=6, seed=4).tokens, reviews.tokens)
    with pytest.raises(ValueError, match="max_words"):
        ab.ToyReviews(10, max_words=2)


def test_every_task_collates_with_the_default_data_loader():
    for task in (
        ab.AssociativeRecall(8),
        ab.TwoRelationTask(8),
        ab.WordOrderTask(8),
        ab.ToyReviews(8),
        ab.CharacterCorpus(8, T=6),
        ab.SequenceTask("copy", 8),
    ):
        batch = next(iter(DataLoader(task, batch_size=4)))
        assert all(value.shape[0] == 4 for value in batch.values()), type(task).__name__
