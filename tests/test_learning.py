"""The models actually learn: a small encoder-decoder reverses sequences it has never seen."""

import torch
from torch.utils.data import DataLoader

import pytest

import attention_book as ab


@pytest.fixture
def one_thread():
    """Train on one CPU thread, as the chapters do: the sums then add up in the same order on
    every machine, so the run (and whether it reaches its target) does not depend on the core count."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_encoder_decoder_learns_reversal_on_held_out_sequences(one_thread):
    ab.set_seed(0)
    options = dict(min_len=3, max_len=6, num_symbols=8)
    train = ab.SequenceTask("reverse", 4000, seed=1, **options)
    held_out = ab.SequenceTask("reverse", 500, seed=2, **options)
    seen = {tuple(row.tolist()) for row in train.source}
    unseen = [i for i, row in enumerate(held_out.source) if tuple(row.tolist()) not in seen]
    assert len(unseen) > 300  # most held-out sequences never occur in training; we score only those
    model = ab.EncoderDecoder(len(train.vocab), len(train.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8)
    history = ab.fit(
        model,
        DataLoader(train, batch_size=64, shuffle=True),
        ab.seq2seq_loss,
        epochs=6,
        lr=5e-3,
        schedule="linear",
        valid_loader=DataLoader(held_out, batch_size=500),
        metric_fn=ab.seq2seq_exact_match,
        device="cpu",
        progress=False,
    )
    unseen_only = torch.utils.data.Subset(held_out, unseen)
    accuracy = ab.evaluate(model, DataLoader(unseen_only, batch_size=500), ab.seq2seq_exact_match)
    assert accuracy >= 0.99, f"exact match {accuracy:.3f} after {history.steps} steps"
    assert history.step_loss[-1] < history.step_loss[0] / 10


def test_reversal_cross_attention_is_anti_diagonal(one_thread):
    """After training, output position t looks at source position L - 1 - t."""
    ab.set_seed(0)
    options = dict(min_len=6, max_len=6, num_symbols=8)
    train = ab.SequenceTask("reverse", 3000, seed=1, **options)
    model = ab.EncoderDecoder(len(train.vocab), len(train.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8)
    ab.fit(model, DataLoader(train, batch_size=64, shuffle=True), ab.seq2seq_loss, epochs=5, lr=5e-3, schedule="linear", progress=False)
    example = ab.SequenceTask("reverse", 1, seed=3, **options)[0]
    with torch.no_grad():
        model(example["source"][None], example["target_in"][None, :6])
    cross = model.decoder.layers[0].cross_attn.last_weights[0].mean(0)  # (T_out, T_in), averaged over heads
    assert cross.argmax(dim=-1).tolist() == [5, 4, 3, 2, 1, 0]


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


def test_associative_recall_label_is_the_value_of_the_queried_key():
    task = ab.AssociativeRecall(100, num_pairs=4, seed=0)
    for tokens, label in zip(task.tokens, task.labels):
        pairs = tokens[:8].view(4, 2)
        asked = tokens[-1]
        assert pairs[pairs[:, 0] == asked, 1].item() == label.item()
