"""Chapter 5's helpers: the word-order task, its loss and metric, the invariant ceiling and the figures."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import attention_book as ab  # noqa: E402
from attention_book.chapter05_helpers import (  # noqa: E402
    WordOrderTask,
    best_invariant_accuracy,
    max_abs_difference,
    order_accuracy,
    order_loss,
    plot_accuracy_by_length,
    plot_encoding_columns,
    plot_encoding_table,
    plot_offset_scores,
    plot_order_training,
    plot_similarity,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_every_sequence_holds_deep_and_learning_once_and_the_label_says_which_comes_first():
    task = WordOrderTask(200, min_len=3, max_len=9, seed=4)
    deep, learning = task.vocab.encode(["deep", "learning"]).tolist()
    for tokens, label, length in zip(task.tokens, task.labels, task.lengths):
        real = tokens[: int(length)].tolist()
        assert real.count(deep) == 1 and real.count(learning) == 1
        assert int(label) == int(real.index(deep) < real.index(learning))
        assert (tokens[int(length):] == ab.PAD).all()
    assert 3 <= int(task.lengths.min()) and int(task.lengths.max()) <= 9
    assert task.labels.float().mean() == 0.5


def test_twins_hold_the_same_words_in_another_order_with_the_opposite_label():
    task = WordOrderTask(100, seed=1)
    for i in range(0, 100, 2):
        first, second = task.tokens[i], task.tokens[i + 1]
        assert sorted(first.tolist()) == sorted(second.tolist()) and not torch.equal(first, second)
        assert task.labels[i] + task.labels[i + 1] == 1
    assert best_invariant_accuracy(task.tokens, task.labels, task.padding) == 0.5


def test_the_same_seed_gives_the_same_sequences_and_padding_lines_up_across_sets():
    assert torch.equal(WordOrderTask(50, seed=3).tokens, WordOrderTask(50, seed=3).tokens)
    assert not torch.equal(WordOrderTask(50, seed=3).tokens, WordOrderTask(50, seed=4).tokens)
    short, long = WordOrderTask(10, 4, 8, pad_to=12), WordOrderTask(10, 12, 12, pad_to=12)
    assert short.tokens.shape == long.tokens.shape == (10, 12)
    assert task_sentence_reads_well(short)


def task_sentence_reads_well(task) -> bool:
    sentence = task.sentence(0)
    words, label = sentence.split(" -> ")
    return "deep" in words.split() and "learning" in words.split() and label in task.label_names


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"num_samples": 7}, "even"),
        ({"num_samples": 10, "min_len": 1}, "2 <= min_len <= max_len"),
        ({"num_samples": 10, "min_len": 6, "max_len": 4}, "2 <= min_len <= max_len"),
        ({"num_samples": 10, "max_len": 8, "pad_to": 5}, "pad_to must be"),
    ],
)
def test_bad_task_arguments_raise_a_clear_value_error(kwargs, words):
    with pytest.raises(ValueError, match=words):
        WordOrderTask(**kwargs)


def test_a_model_without_positions_scores_exactly_half_on_twins_whatever_its_weights():
    task = WordOrderTask(64, seed=2)
    batch = {"tokens": task.tokens, "padding": task.padding, "label": task.labels}
    for seed in range(3):
        torch.manual_seed(seed)
        model = ab.EncoderClassifier(len(task.vocab), 2, positional=None, d_model=16, num_heads=2, d_ff=32, num_layers=1).eval()
        with torch.no_grad():
            logits = model(task.tokens, task.padding)
        torch.testing.assert_close(logits[0::2], logits[1::2], atol=1e-5, rtol=1e-5)  # twins look identical
        correct, total = order_accuracy(model, batch)
        assert (correct, total) == (32, 64)
        assert order_loss(model, batch).item() >= 0.6931 - 1e-4  # never better than a coin flip on average


def test_a_model_with_positions_learns_the_order_in_a_few_dozen_steps():
    train, valid = WordOrderTask(2000, seed=1), WordOrderTask(400, seed=2)
    ab.set_seed(0)
    model = ab.EncoderClassifier(len(train.vocab), 2, positional="sinusoidal", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=8)
    ab.fit(model, DataLoader(train, batch_size=64, shuffle=True), order_loss, epochs=3, lr=3e-3,
           valid_loader=DataLoader(valid, batch_size=400), metric_fn=order_accuracy, target=0.97, progress=False, device="cpu")
    assert ab.evaluate(model, DataLoader(valid, batch_size=400), order_accuracy) >= 0.95


def test_best_invariant_accuracy_takes_the_majority_label_of_each_bag():
    tokens = torch.tensor([[1, 2, 3], [3, 2, 1], [2, 1, 3], [1, 1, 2], [1, 2, 2]])
    labels = torch.tensor([0, 1, 1, 0, 1])
    # bag {1,2,3}: labels 0, 1, 1 -> 2 right; bags {1,1,2} and {1,2,2}: one each -> 1 + 1
    assert best_invariant_accuracy(tokens, labels) == pytest.approx(4 / 5)
    padding = torch.tensor([[True, True, False]] * 5)  # only the first two tokens count
    assert best_invariant_accuracy(tokens, labels, padding) == pytest.approx(4 / 5)
    with pytest.raises(ValueError, match="labels must be"):
        best_invariant_accuracy(tokens, labels[:3])
    with pytest.raises(ValueError, match="tokens must be"):
        best_invariant_accuracy(tokens[0], labels)


def test_max_abs_difference():
    assert max_abs_difference(torch.tensor([1.0, 2.0]), torch.tensor([1.5, 1.0])) == 1.0


def test_figures_have_labelled_axes_and_titles():
    table = ab.sinusoidal_encoding(16, 8)
    for ax in (
        plot_encoding_table(table),
        plot_encoding_columns(table, [0, 2, 6]),
        plot_similarity(table @ table.T),
        plot_offset_scores(table @ table.T),
        plot_accuracy_by_length({"a": {4: 1.0, 9: 0.7}}, (4, 8)),
    ):
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
    history = ab.History(step_loss=[0.7] * 30, epoch=[1, 2, 3], valid_metric=[0.5, 0.5, 0.5], steps=30)
    figure = plot_order_training({"no positions": history, "sinusoidal": history}, steps_per_epoch=10)
    assert all(ax.get_xlabel() and ax.get_ylabel() and ax.get_title() for ax in figure.axes)
