"""attention_book.recall (chapter 2): the look-back mask and the two-layer model that learns a key-value store.

(Where its trained attention looks, ``attention_maps`` and ``lookup_hit_rate``, is
measured in test_analysis_heads.py; both use the ``trained_recall`` fixture of conftest.py.)
"""

import pytest
import torch
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.recall import RecallModel, previous_token_mask


def test_recall_model_learns_the_task_within_150_steps(trained_recall):
    model, held_out, history = trained_recall
    accuracy = ab.evaluate(model, DataLoader(held_out, batch_size=1000), ab.classification_accuracy)
    assert accuracy >= 0.9, f"held-out accuracy {accuracy:.3f} after {history.steps} steps"
    assert history.steps <= 150


def test_the_binding_layer_only_looks_at_the_token_itself_and_the_one_before(trained_recall):
    model, held_out, _ = trained_recall
    with torch.no_grad():
        logits = model(held_out.tokens[:5])
    assert logits.shape == (5, len(held_out.vocab))
    binding = model.pair_attention.last_weights  # (5, 10, 10)
    lookup = model.lookup_attention.last_weights  # (5, 1, 10): only the last token asks
    assert binding.shape == (5, 10, 10) and lookup.shape == (5, 1, 10)
    assert not (binding * ~previous_token_mask(10)).any()


def test_previous_token_mask_allows_self_and_the_token_before():
    assert previous_token_mask(3).tolist() == [[True, False, False], [True, True, False], [False, True, True]]
    with pytest.raises(ValueError, match="positive integer"):
        previous_token_mask(0)


def test_without_look_back_only_the_binding_layer_sees_every_token():
    torch.manual_seed(0)
    model = RecallModel(22, max_len=10, look_back_only=False).eval()
    with torch.no_grad():
        model(torch.randint(3, 22, (2, 10)))
    assert (model.pair_attention.last_weights > 0).all()


def test_model_rejects_float_input_with_a_clear_message():
    model = RecallModel(22, max_len=10)
    with pytest.raises(ValueError, match="token ids"):
        model(torch.zeros(2, 10))
