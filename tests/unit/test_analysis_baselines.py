"""attention_book.analysis.baselines (chapter 5): the best a model blind to word order can do.

(That chapter 5's word-order task holds this ceiling at exactly one half is a property of the
task, tested in test_data_tasks.py.)
"""

import pytest
import torch

from attention_book.analysis.baselines import best_invariant_accuracy


def test_best_invariant_accuracy_takes_the_majority_label_of_each_bag():
    tokens = torch.tensor([[1, 2, 3], [3, 2, 1], [2, 1, 3], [1, 1, 2], [1, 2, 2]])
    labels = torch.tensor([0, 1, 1, 0, 1])
    # bag {1,2,3}: labels 0, 1, 1 -> 2 right; bags {1,1,2} and {1,2,2}: one each -> 1 + 1
    assert best_invariant_accuracy(tokens, labels) == pytest.approx(4 / 5)
    padding_mask = torch.tensor([[True, True, False]] * 5)  # only the first two tokens count
    # bags {1,2} (rows 0, 2, 4): labels 0, 1, 1 -> 2 right; {2,3} and {1,1}: one each -> 1 + 1
    assert best_invariant_accuracy(tokens, labels, padding_mask) == pytest.approx(4 / 5)


def test_the_padding_mask_decides_which_tokens_are_in_the_bag():
    tokens = torch.tensor([[1, 2, 7], [2, 1, 9]])
    labels = torch.tensor([0, 1])
    assert best_invariant_accuracy(tokens, labels) == 1.0  # the last tokens tell the two apart
    assert best_invariant_accuracy(tokens, labels, padding_mask=tokens < 5) == 0.5  # without them: one bag


def test_bad_input_is_refused():
    tokens, labels = torch.zeros(5, 3, dtype=torch.long), torch.zeros(5, dtype=torch.long)
    with pytest.raises(ValueError, match="labels must be"):
        best_invariant_accuracy(tokens, labels[:3])
    with pytest.raises(ValueError, match="tokens must be"):
        best_invariant_accuracy(tokens[0], labels)
