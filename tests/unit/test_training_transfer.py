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
from attention_book.training.transfer import (
    ReviewFeatures,
    TopLayersClassifier,
    classifier_accuracy,
    encode_reviews,
    fill_mask,
    fine_tune_top_layers,
    fine_tuned_accuracy,
    masked_token_accuracy,
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
# The study: choices on validation, test scored once, intervals

from attention_book.training import transfer  # noqa: E402
from attention_book.training.transfer import (  # noqa: E402
    StudyPlan,
    load_study,
    mean_interval,
    paired_difference,
    prepare_study,
    run_study,
    store_study,
    study_subset,
    summarize_study,
)

TINY_PLAN = StudyPlan(
    sizes=(16, 48),
    repeats=2,
    small_steps={16: 4, 48: 6},
    fine_tune_steps={16: 2, 48: 4},
    mlm_steps=3,
    checkpoints=2,
    fine_tune_checkpoints=2,
    probe_steps=30,
    probe_weight_decays=(1e-4, 1e-1),
    batch_size=8,
)


@pytest.fixture(scope="module")
def tiny_study(minilm):
    texts, labels = _sentiment_texts(48, seed=10)
    valid_texts, valid_labels = _sentiment_texts(24, seed=11)
    test_texts, test_labels = _sentiment_texts(24, seed=12)
    vocabulary = build_vocabulary(minilm, texts + valid_texts)
    data = prepare_study(
        minilm,
        vocabulary,
        {"train": (texts, labels), "validation": (valid_texts, valid_labels), "test": (test_texts, test_labels)},
        max_tokens=16,
        split_layer=5,
    )
    return data, run_study(minilm, data, TINY_PLAN, progress=False)


def test_each_repeat_trains_on_its_own_random_subset_and_the_full_size_on_every_row():
    first, again, second = study_subset(10, 0, 100), study_subset(10, 0, 100), study_subset(10, 1, 100)
    assert torch.equal(first, again) and not torch.equal(first, second)
    assert len(set(first.tolist())) == 10 and max(first.tolist()) < 100
    assert sorted(study_subset(100, 3, 100).tolist()) == list(range(100))
    with pytest.raises(ValueError, match="size"):
        study_subset(101, 0, 100)


def test_the_study_records_every_repeat_of_every_arm_on_validation_and_test(tiny_study):
    _, results = tiny_study
    assert list(results["arms"]) == list(TINY_PLAN.arms)
    for arm, by_size in results["arms"].items():
        assert list(by_size) == ["16", "48"]
        for n, record in by_size.items():
            assert len(record["validation"]) == len(record["test"]) == len(record["chosen"]) == 2
            assert all(0 <= value <= 1 for value in record["validation"] + record["test"])
            if arm == "frozen":
                by_decay = record["validation_by_weight_decay"]
                best = max(by_decay, key=lambda d: sum(by_decay[d]))
                assert record["chosen"] == [float(best)] * 2 and record["validation"] == by_decay[best]
            else:
                budget = (TINY_PLAN.fine_tune_steps if arm == "fine-tuned" else TINY_PLAN.small_steps)[int(n)]
                assert all(1 <= step <= budget for step in record["chosen"])
    assert results["baseline"]["test"] == pytest.approx(float(tiny_study[0].labels["test"].float().mean()))


def test_the_test_split_never_influences_a_choice(minilm, tiny_study):
    data, results = tiny_study
    flipped = transfer.StudyData(
        data.vocabulary, data.texts, {**data.labels, "test": 1 - data.labels["test"]}, data.tokens, data.features
    )
    again = run_study(minilm, flipped, TINY_PLAN, progress=False)
    for arm in TINY_PLAN.arms:
        for n in ("16", "48"):
            ours, theirs = results["arms"][arm][n], again["arms"][arm][n]
            assert ours["chosen"] == theirs["chosen"] and ours["validation"] == theirs["validation"]
            assert theirs["test"] == pytest.approx([1 - value for value in ours["test"]])


def test_without_a_test_split_only_validation_is_scored(minilm, tiny_study):
    data, _ = tiny_study
    no_test = transfer.StudyData(
        data.vocabulary,
        {k: v for k, v in data.texts.items() if k != "test"},
        {k: v for k, v in data.labels.items() if k != "test"},
        {k: v for k, v in data.tokens.items() if k != "test"},
        {k: v for k, v in data.features.items() if k != "test"},
    )
    plan = StudyPlan(sizes=(16,), repeats=2, arms=("frozen",), probe_steps=20, probe_weight_decays=(1e-3,))
    results = run_study(minilm, no_test, plan, progress=False)
    assert "test" not in results["arms"]["frozen"]["16"] and "test" not in results["baseline"]
    assert set(summarize_study(results, "validation")["frozen"]) == {16}


def test_intervals_are_students_t_over_the_repeats_and_differences_are_paired():
    mean, low, high = mean_interval([1, 2, 3, 4, 5])
    assert (
        mean == 3
        and high - mean == pytest.approx(2.776 * (2.5**0.5) / 5**0.5, rel=1e-3)
        and mean - low == pytest.approx(high - mean)
    )
    with pytest.raises(ValueError, match="at least 2"):
        mean_interval([0.7])
    results = {"arms": {"a": {"10": {"test": [0.7, 0.8, 0.9]}}, "b": {"10": {"test": [0.6, 0.7, 0.8]}}}}
    difference = paired_difference(results, "a", "b", 10)
    assert (
        difference[0] == pytest.approx(0.1)
        and difference[1] == pytest.approx(0.1)
        and difference[2] == pytest.approx(0.1)
    )


def test_a_plan_refuses_unknown_arms_and_missing_step_budgets():
    with pytest.raises(ValueError, match="arms must be among"):
        StudyPlan(sizes=(10,), arms=("zero-shot",))
    with pytest.raises(ValueError, match="small_steps must give a step budget for every size"):
        StudyPlan(sizes=(10, 20), small_steps={10: 5}, fine_tune_steps={10: 5, 20: 5})
    StudyPlan(sizes=(10,), arms=("frozen",))  # the probe needs no step budget


def test_a_stored_study_is_read_back_only_while_its_checksum_holds(monkeypatch, tmp_path):
    monkeypatch.setattr(transfer, "STORED_FOLDER", tmp_path)
    from attention_book import _files, pretrained

    monkeypatch.setattr(_files, "STORED_FOLDER", tmp_path)
    results = {"arms": {"frozen": {"100": {"validation": [0.7, 0.72], "test": [0.71, 0.7], "chosen": [1e-3, 1e-3]}}}}
    digest = store_study(results)
    assert digest in (tmp_path / "SHA256SUMS").read_text()
    assert load_study() == results
    (tmp_path / transfer.STUDY_FILE).write_text((tmp_path / transfer.STUDY_FILE).read_text().replace("0.71", "0.91"))
    with pytest.raises(pretrained.ChecksumError, match=digest):
        load_study()
