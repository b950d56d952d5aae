"""Chapter 2's associative-recall model learns a key-value store and its attention shows the lookup."""

import pytest
import torch
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.recall import RecallModel, attention_maps, format_vector, lookup_hit_rate, previous_token_mask


@pytest.fixture(scope="module")
def trained():
    """The chapter's recipe: 4,000 examples, one epoch of batches of 64 (63 steps), about 2 s on a CPU."""
    ab.set_seed(0)
    train = ab.AssociativeRecall(4000, num_pairs=4, seed=1)
    held_out = ab.AssociativeRecall(1000, num_pairs=4, seed=2)
    model = RecallModel(len(train.vocab), max_len=10)
    history = ab.fit(
        model, DataLoader(train, batch_size=64, shuffle=True), ab.classification_loss,
        epochs=3, lr=1e-2, max_steps=150, device="cpu", progress=False,
        valid_loader=DataLoader(held_out, batch_size=1000), metric_fn=ab.classification_accuracy, target=0.99,
    )
    return model, held_out, history


def test_recall_model_learns_the_task_within_150_steps(trained):
    model, held_out, history = trained
    accuracy = ab.evaluate(model, DataLoader(held_out, batch_size=1000), ab.classification_accuracy)
    assert accuracy >= 0.9, f"held-out accuracy {accuracy:.3f} after {history.steps} steps"
    assert history.steps <= 150


def test_the_asked_key_attends_to_its_own_pair(trained):
    model, held_out, _ = trained
    assert lookup_hit_rate(model, held_out) >= 0.9


def test_attention_maps_have_the_documented_shapes_and_rows_sum_to_one(trained):
    model, held_out, _ = trained
    binding, lookup = attention_maps(model, held_out.tokens[:5])
    assert binding.shape == (5, 10, 10) and lookup.shape == (5, 10)
    torch.testing.assert_close(lookup.sum(-1), torch.ones(5))
    assert not (binding * ~previous_token_mask(10)).any()  # the binding layer only looks one step back


def test_previous_token_mask_allows_self_and_the_token_before():
    assert previous_token_mask(3).tolist() == [[True, False, False], [True, True, False], [False, True, True]]
    with pytest.raises(ValueError, match="positive integer"):
        previous_token_mask(0)


def test_model_rejects_float_input_with_a_clear_message():
    model = RecallModel(22, max_len=10)
    with pytest.raises(ValueError, match="token ids"):
        model(torch.zeros(2, 10))


def test_format_vector_rounds_and_never_prints_negative_zero():
    assert format_vector(torch.tensor([550.0, 5.5, -1e-9])) == "[550.00, 5.50, 0.00]"
