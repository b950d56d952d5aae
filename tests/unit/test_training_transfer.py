"""attention_book.training.transfer (chapter 7): the three ways to use a pretrained encoder, and pretraining a small one.

Every recipe returns ``(model, history)``, is seeded (the same run twice gives the same
losses), learns an easy task, and leaves the shared pretrained model alone.
"""

from __future__ import annotations

import pytest
import torch

from attention_book.analysis.heads import (
    HEAD_PATTERNS,
    HeadPatternCounter,
    head_pattern_scores,
)
from attention_book.data.pieces import build_vocabulary
from attention_book.training.loop import History
from attention_book.training.masked_lm import fill_mask, masked_token_accuracy
from attention_book.training.transfer import (
    KeepBest,
    ReviewFeatures,
    TopLayersClassifier,
    checkpoint_steps,
    classifier_accuracy,
    encode_reviews,
    fine_tune_top_layers,
    fine_tuned_accuracy,
    probe_accuracy,
    probe_every_layer,
    throughput,
    train_from_scratch,
    train_linear_probe,
    train_mlm,
)
from attention_book.transformer import TokenClassifier, mean_pool
from tests.unit.conftest import REVIEWS

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models train several times faster on one thread


def _sentiment_texts(count: int, seed: int) -> tuple[list[str], torch.Tensor]:
    """Texts whose label is whether they say 'good' or 'bad', among filler words."""
    generator = torch.Generator().manual_seed(seed)
    filler = "the a film story acting is was and very quite".split()
    texts, labels = [], []
    for _ in range(count):
        label = int(torch.randint(0, 2, (), generator=generator))
        words = [filler[int(i)] for i in torch.randint(0, len(filler), (6,), generator=generator)]
        words.insert(int(torch.randint(0, 7, (), generator=generator)), "good" if label else "bad")
        texts.append(" ".join(words))
        labels.append(label)
    return texts, torch.tensor(labels)


# ---------------------------------------------------------------------------------
# Masked language modelling


def test_a_short_mlm_run_learns_the_text_beyond_the_commonest_piece_and_repeats_exactly(vocabulary):
    texts = REVIEWS * 20
    model, history = train_mlm(vocabulary, texts, steps=60, batch_size=16, dropout=0.0, seed=1)
    _, again = train_mlm(vocabulary, texts, steps=60, batch_size=16, dropout=0.0, seed=1)
    assert isinstance(model, TokenClassifier) and isinstance(history, History)
    assert history.step_loss == again.step_loss  # seeded: the same run twice
    # 120 texts in batches of 16 (seven of 16, one of 8): 60 steps are 7 passes and 4 batches of the 8th
    assert history.steps == 60 and 7 * 120 + 3 * 16 + 8 <= history.examples_seen <= 7 * 120 + 4 * 16
    assert sum(history.step_loss[-5:]) < 0.5 * sum(history.step_loss[:5])
    lengths = [len(vocabulary.encode([text])[0][0]) for text in REVIEWS]
    assert 60 * 16 * min(lengths) <= history.tokens_seen <= 60 * 16 * max(lengths)
    assert masked_token_accuracy(model, vocabulary, texts) > masked_token_accuracy(None, vocabulary, texts)
    guesses = fill_mask(model, vocabulary, "the film is [MASK] .", top=3)
    assert len(guesses) == 3 and all(piece not in ("[PAD]", "[UNK]", "[MASK]") for piece, _ in guesses)
    assert guesses[0][1] >= guesses[1][1] >= guesses[2][1]
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        fill_mask(model, vocabulary, "no gap here")


# ---------------------------------------------------------------------------------
# (a) from scratch


def test_a_model_trained_from_scratch_learns_an_easy_task_and_repeats_exactly(minilm):
    texts, labels = _sentiment_texts(300, seed=0)
    test_texts, test_labels = _sentiment_texts(200, seed=1)
    vocabulary = build_vocabulary(minilm, texts)
    model, history = train_from_scratch(vocabulary, texts, labels, epochs=6, dropout=0.0, seed=0)
    _, again = train_from_scratch(vocabulary, texts, labels, epochs=6, dropout=0.0, seed=0)
    assert history.step_loss == again.step_loss
    assert history.steps == 6 * 10 and history.examples_seen == 6 * 300
    assert classifier_accuracy(model, vocabulary, test_texts, test_labels) > 0.95
    with pytest.raises(ValueError, match="300 examples but 2 labels"):
        train_from_scratch(vocabulary, texts, labels[:2])


def test_a_pretrained_small_encoder_can_replace_the_random_one_without_being_changed(minilm):
    texts, labels = _sentiment_texts(64, seed=2)
    vocabulary = build_vocabulary(minilm, texts)
    mlm, _ = train_mlm(vocabulary, texts, steps=5, batch_size=16, dropout=0.0)
    before = [p.clone() for p in mlm.encoder.parameters()]
    model, _ = train_from_scratch(vocabulary, texts, labels, epochs=1, dropout=0.0, encoder=mlm.encoder)
    assert all(torch.equal(a, b) for a, b in zip(before, mlm.encoder.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.encoder.parameters()))


# ---------------------------------------------------------------------------------
# The pretrained encoder, run once


def test_encode_reviews_keeps_every_layers_pooled_vectors_and_the_states_entering_the_top(minilm):
    texts = ["A fine film.", "Long, slow and rather dull, but the ending almost saves it.", "Meh."]
    features = encode_reviews(minilm, texts, max_tokens=48, split_layer=4, batch_size=2)
    assert features.pooled.shape == (3, 7, 384) and len(features) == 3
    torch.testing.assert_close(features.layer(-1), minilm.embed(texts), atol=1e-5, rtol=0)
    batch = minilm.encode(texts)
    with torch.no_grad():
        states = minilm.hidden_states(batch.tokens, batch.padding_mask)
    assert torch.equal(features.padding_mask, batch.padding_mask)
    real = batch.padding_mask
    torch.testing.assert_close(features.states[real], states[4][real], atol=1e-5, rtol=0)
    assert features.take(2).pooled.shape == (2, 7, 384)
    assert torch.equal(features.rows(1, 3).states, features.states[1:3])
    assert throughput(features) == pytest.approx(3 / features.seconds)
    with pytest.raises(ValueError, match="at most 3|from 1 to 3"):
        features.take(4)
    with pytest.raises(ValueError, match="start < stop"):
        features.rows(2, 2)


def test_observing_heads_during_encoding_equals_measuring_them_separately(minilm):
    texts = ["The plot is thin, but the acting is fine.", "Bad.", "A long and winding road to nowhere in particular."]
    separate = head_pattern_scores(minilm, texts)
    counter = HeadPatternCounter(minilm.num_layers, minilm.num_heads)
    encode_reviews(minilm, texts, observe=counter.add)
    during = counter.scores()
    assert set(counter.even_spread()) == set(HEAD_PATTERNS)
    for pattern in HEAD_PATTERNS:
        torch.testing.assert_close(during[pattern], separate[pattern], atol=1e-5, rtol=0)


def test_the_top_layers_continue_exactly_where_the_stored_states_stop(minilm):
    texts = ["A fine film.", "Long, slow and rather dull, but the ending almost saves it."]
    features = encode_reviews(minilm, texts, split_layer=4)
    top = TopLayersClassifier(minilm, 4)
    assert len(top.layers) == 2
    mask = features.padding_mask[:, None, None, :]
    x = features.states
    with torch.no_grad():
        for layer in top.layers:
            x = layer(x, mask)
    torch.testing.assert_close(mean_pool(x, features.padding_mask), features.layer(-1), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="split_layer"):
        TopLayersClassifier(minilm, 6)


def test_fine_tuning_the_top_layers_learns_and_leaves_the_shared_model_alone(minilm):
    texts, labels = _sentiment_texts(48, seed=3)
    features = encode_reviews(minilm, texts, split_layer=5)
    before = minilm.encoder.layers[5].feed_forward.linear1.weight.clone()
    model, history = fine_tune_top_layers(minilm, features, labels, steps=12, batch_size=16, lr=1e-4, head_lr=3e-3)
    assert torch.equal(minilm.encoder.layers[5].feed_forward.linear1.weight, before)
    assert not torch.equal(model.layers[0].feed_forward.linear1.weight, before)
    assert fine_tuned_accuracy(model, features, labels) > 0.9
    assert history.steps == 12 and history.examples_seen == 12 * 16
    assert history.learning_rate == [1e-4] * 12  # the pretrained layers' (first group's) rate, unscheduled


# ---------------------------------------------------------------------------------
# (b) frozen features and a linear probe


def test_a_linear_probe_learns_separable_features_whatever_their_scale():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (200,), generator=generator)
    features = torch.randn(200, 5, generator=generator)
    features[:, 2] += 3.0 * (2 * labels - 1)  # the signal
    features *= torch.tensor([1.0, 1000.0, 1e-3, 50.0, 1.0])  # wildly different scales
    probe = train_linear_probe(features, labels)
    assert probe_accuracy(probe, features, labels) > 0.95
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        train_linear_probe(features[0], labels)
    with pytest.raises(ValueError, match="200 examples but 3 labels"):
        train_linear_probe(features, labels[:3])


def test_probing_every_layer_returns_one_accuracy_per_layer():
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2, (120,), generator=generator)
    pooled = torch.randn(120, 3, 4, generator=generator)
    pooled[:, 1, 0] += 4.0 * (2 * labels - 1)  # only layer 1 knows the label
    features = ReviewFeatures(pooled, torch.zeros(120, 1, 4), torch.ones(120, 1, dtype=torch.bool), 0, 1.0)
    accuracies = probe_every_layer(features.take(80), labels[:80], features, labels)
    assert len(accuracies) == 3 and max(range(3), key=lambda i: accuracies[i]) == 1


class _CopyInput(torch.nn.Module):
    """Predicts the piece it is shown at every position: it can score only where the answer is visible."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size = vocab_size

    def forward(self, tokens, padding_mask=None, chosen=None):
        logits = torch.nn.functional.one_hot(tokens, self.vocab_size).float()  # (batch, T, vocab)
        return logits[chosen] if chosen is not None else logits


def test_the_masked_language_model_score_cannot_see_its_targets(vocabulary):
    """Only [MASK] positions are scored: a model that copies its input scores exactly 0 there,
    on every masking (at the 10 % of chosen positions left unchanged it would score 100 %)."""
    texts = [review for review in REVIEWS for _ in range(20)]
    for seed in range(1, 6):
        assert masked_token_accuracy(_CopyInput(len(vocabulary)), vocabulary, texts, seed=seed) == 0.0


# ---------------------------------------------------------------------------------
# Early stopping by checkpoints, through fit's on_step hook


def test_keep_best_returns_the_checkpoint_validation_liked_best(minilm):
    texts, labels = _sentiment_texts(64, seed=4)
    vocabulary = build_vocabulary(minilm, texts)
    scored = []

    def score(model):  # a made-up validation score that peaks at the second checkpoint
        scored.append({name: p.clone() for name, p in model.state_dict().items()})
        return [0.5, 0.9, 0.7][len(scored) - 1]

    keep = KeepBest(checkpoint_steps(12, 3), score)
    assert keep.steps == {4, 8, 12}
    model, history = train_from_scratch(vocabulary, texts, labels, steps=12, batch_size=16, dropout=0.0, keep_best=keep)
    assert history.steps == 12 and (keep.step, keep.score) == (8, 0.9)
    assert all(torch.equal(p, scored[1][name]) for name, p in model.state_dict().items())
    assert not all(torch.equal(p, scored[2][name]) for name, p in model.state_dict().items())
    with pytest.raises(RuntimeError, match="no checkpoint"):
        KeepBest({100}, score).restore(model)


def test_review_features_select_rows_in_the_order_given():
    pooled = torch.arange(5 * 2 * 3, dtype=torch.float).reshape(5, 2, 3)
    features = ReviewFeatures(pooled, torch.zeros(5, 4, 3), torch.ones(5, 4, dtype=torch.bool), 1, 1.0)
    chosen = features.select(torch.tensor([3, 0]))
    assert torch.equal(chosen.pooled, pooled[[3, 0]]) and chosen.split_layer == 1
    with pytest.raises(ValueError, match="below 5"):
        features.select(torch.tensor([5]))
