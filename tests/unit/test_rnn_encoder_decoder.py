"""The recurrent encoder-decoder of chapter 1: one fixed vector or additive attention, same parameters."""

import pytest
import torch

import attention_book as ab
from attention_book.data.tasks import SequenceTask


def test_additive_score_is_tanh_of_the_sum_of_both_projections_times_w():
    torch.manual_seed(0)
    score = ab.AdditiveScore(d_query=3, d_key=5, d_hidden=4)
    queries, keys = torch.randn(2, 4, 3), torch.randn(2, 6, 5)
    hidden = torch.tanh((queries @ score.W_1.weight.T)[:, :, None] + (keys @ score.W_2.weight.T)[:, None])
    expected = hidden @ score.w.weight[0]  # (2, 4, 6, 4) @ (4,) -> (2, 4, 6)
    torch.testing.assert_close(score(queries, keys), expected)
    assert score(queries, keys).shape == (2, 4, 6)


def test_additive_score_compares_queries_and_keys_of_different_sizes_but_names_a_mismatch():
    score = ab.AdditiveScore(d_query=3, d_key=5, d_hidden=4)
    with pytest.raises(ValueError, match="expects queries with 3 and keys with 5 features, but 5 and 3"):
        score(torch.randn(1, 2, 5), torch.randn(1, 2, 3))
    with pytest.raises(ValueError, match=r"\(batch, T, features\)"):
        score(torch.randn(2, 3), torch.randn(2, 5))


def test_both_models_have_the_same_parameters_and_output_shape():
    task = SequenceTask("copy", 4, 3, 6, num_symbols=5, seed=0)
    batch = task[:]
    shapes = []
    for attention in (False, True):
        torch.manual_seed(0)
        model = ab.RNNEncoderDecoder(len(task.vocab), hidden=8, attention=attention)
        logits = model(batch["source"], batch["target_in"], batch["source_padding"], batch["target_padding"])
        assert logits.shape == (4, 7, len(task.vocab))
        shapes.append([p.shape for p in model.parameters()])
    assert shapes[0] == shapes[1]


def test_attention_weights_are_zero_on_padding_and_rows_sum_to_one():
    task = SequenceTask("copy", 6, 2, 7, num_symbols=5, seed=1)
    batch = task[:]
    model = ab.RNNEncoderDecoder(len(task.vocab), hidden=8, attention=True)
    model(batch["source"], batch["target_in"], batch["source_padding"])
    weights = model.last_weights  # (batch, T_out, T_in)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:2]))
    assert (weights.masked_select(~batch["source_padding"][:, None, :].expand_as(weights)) == 0).all()


def test_padding_does_not_change_what_a_model_reads_from_a_short_source():
    """The last encoder state of a padded source is that of its real tokens (packed sequences)."""
    torch.manual_seed(0)
    model = ab.RNNEncoderDecoder(8, hidden=6, attention=False)
    source = torch.tensor([[3, 4, 5, 0, 0]])
    padding = torch.tensor([[True, True, True, False, False]])
    _, last_padded = model.encode(source, padding)
    _, last_short = model.encode(source[:, :3])
    torch.testing.assert_close(last_padded, last_short)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="hidden"):
        ab.RNNEncoderDecoder(8, hidden=0)
    model = ab.RNNEncoderDecoder(8, hidden=4)
    with pytest.raises(ValueError, match=r"source must be \(batch, T_in\)"):
        model(torch.zeros(3, dtype=torch.long), torch.zeros(1, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="source_padding must have the source's shape"):
        model.encode(torch.zeros(1, 3, dtype=torch.long), torch.tensor([[True, False]]))


def test_attention_learns_to_copy_longer_sequences_than_the_fixed_vector():
    """A short version of chapter 1's experiment (one seed, 150 steps): at 12 symbols attention wins."""
    batches = [
        SequenceTask("copy", 64, 2 + step % 11, 2 + step % 11, num_symbols=8, seed=step)[:] for step in range(150)
    ]
    test = [SequenceTask("copy", 300, 12, 12, num_symbols=8, seed=10_000)[:]]
    accuracy = {}
    for attention in (False, True):
        ab.set_seed(0)
        model = ab.RNNEncoderDecoder(11, hidden=32, attention=attention)
        ab.fit(model, batches, ab.seq2seq_loss, lr=0.01, progress=False)
        accuracy[attention] = ab.evaluate(model, test, ab.seq2seq_token_accuracy)
    assert accuracy[True] > accuracy[False] + 0.2, accuracy


def test_seq2seq_token_accuracy_counts_answer_tokens_only():
    class Echo(torch.nn.Module):
        """Predicts target_out exactly except at the first answer position."""

        def forward(self, source, target_in, source_padding=None, target_padding=None):
            target = self.target.clone()
            target[:, 0] = 3 if target[0, 0] != 3 else 4
            return torch.nn.functional.one_hot(target, 11).float()

    task = SequenceTask("copy", 5, 4, 4, num_symbols=8, seed=0)
    model = Echo()
    model.target = task[:]["target_out"]
    right, total = ab.seq2seq_token_accuracy(model, task[:])
    assert total == 5 * 4 and right == 5 * 3
