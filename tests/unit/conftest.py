"""Set-up of the unit tests: figures are drawn off-screen and closed after every test."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import pytest

# A few labelled-looking sentences for the word-piece and transfer-learning tests.
REVIEWS = [
    "a good film , good acting and a good story .",
    "a bad film , bad acting and a bad story .",
    "the film is good .",
    "the film is bad .",
    "good , good , good .",
    "bad , bad , bad .",
]


@pytest.fixture(scope="module")
def vocabulary(minilm):
    """Word pieces of REVIEWS that occur at least twice (chapter 7's compact vocabulary)."""
    from attention_book.data.pieces import build_vocabulary

    return build_vocabulary(minilm, REVIEWS, min_count=2)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="session")
def trained_recall():
    """Chapter 2's recipe: RecallModel on 4,000 examples, batches of 64, at most 150 steps (about 2 s on a CPU).

    Returns (model, held-out task, history); shared by the model's tests (test_recall.py)
    and the measurements of its attention (test_analysis_heads.py).
    """
    import torch
    from torch.utils.data import DataLoader

    import attention_book as ab
    from attention_book.recall import RecallModel

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ab.set_seed(0)
        train = ab.AssociativeRecall(4000, num_pairs=4, seed=1)
        held_out = ab.AssociativeRecall(1000, num_pairs=4, seed=2)
        model = RecallModel(len(train.vocab), max_len=10)
        history = ab.fit(
            model,
            DataLoader(train, batch_size=64, shuffle=True),
            ab.classification_loss,
            epochs=3,
            lr=1e-2,
            max_steps=150,
            device="cpu",
            progress=False,
            valid_loader=DataLoader(held_out, batch_size=1000),
            metric_fn=ab.classification_accuracy,
            target=0.99,
        )
    finally:
        torch.set_num_threads(threads)
    return model, held_out, history
