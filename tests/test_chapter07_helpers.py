"""Chapter 7 helpers: the vocabulary, masking, the three ways to train, and the head measurements."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_book import chapter07_helpers as ch7  # noqa: E402
from attention_book.pretrained import load_minilm, mean_pool  # noqa: E402

REVIEWS = [
    "a good film , good acting and a good story .",
    "a bad film , bad acting and a bad story .",
    "the film is good .",
    "the film is bad .",
    "good , good , good .",
    "bad , bad , bad .",
]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.fixture(scope="module")
def vocabulary(minilm):
    return ch7.build_vocabulary(minilm, REVIEWS, min_count=2)


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
# The compact vocabulary


def test_the_vocabulary_keeps_pieces_seen_often_enough_most_frequent_first(vocabulary):
    assert vocabulary.pieces[:3] == ["[PAD]", "[UNK]", "[MASK]"]
    assert vocabulary.pieces[3:7] == ["good", "bad", ",", "."]  # 7, 7, 6 and 6 times; ties in WordPiece order
    assert vocabulary.counts[3:7] == [7, 7, 6, 6]
    assert "story" in vocabulary.pieces and "is" in vocabulary.pieces  # twice each
    assert "the" in vocabulary.pieces and "acting" in vocabulary.pieces
    counts = vocabulary.counts[3:]
    assert counts == sorted(counts, reverse=True) and min(counts) >= 2
    assert len(vocabulary) == len(vocabulary.pieces) and "3 special" in repr(vocabulary)


def test_encoding_pads_marks_real_tokens_and_maps_rare_pieces_to_unk(vocabulary):
    tokens, mask = vocabulary.encode(["good film", "a splendid film ."], max_tokens=48)
    assert tokens.shape == mask.shape == (2, 4)
    assert mask.tolist() == [[True, True, False, False], [True] * 4]
    assert tokens[0, 2:].tolist() == [ch7.PAD_ID, ch7.PAD_ID]
    assert vocabulary.decode(tokens[1]) == ["a", "[UNK]", "film", "."]  # "splendid" is not in the vocabulary
    short, _ = vocabulary.encode(["good " * 100], max_tokens=5)
    assert short.shape == (1, 5)
    with pytest.raises(ValueError, match="list of strings"):
        vocabulary.encode("a single string")


# ---------------------------------------------------------------------------------
# Masked language modelling


def test_mask_tokens_picks_about_15_percent_of_the_real_tokens_and_never_padding():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 50, (200, 30), generator=generator)
    padding_mask = torch.arange(30)[None, :] < torch.randint(5, 31, (200,), generator=generator)[:, None]
    corrupted, targets = ch7.mask_tokens(tokens, padding_mask, generator, vocab_size=50)
    chosen = targets != -100
    assert not (chosen & ~padding_mask).any()
    assert abs(chosen.sum() / padding_mask.sum() - 0.15) < 0.02
    assert chosen.any(dim=1).all()  # every sequence predicts something
    assert torch.equal(targets[chosen], tokens[chosen])
    masked = (corrupted == ch7.MASK_ID) & chosen
    unchanged = (corrupted == tokens) & chosen
    assert abs(masked.sum() / chosen.sum() - 0.8) < 0.06
    assert 0.05 < unchanged.sum() / chosen.sum() < 0.17  # 10% kept, plus random draws of the same piece
    assert torch.equal(corrupted[~chosen], tokens[~chosen])


def test_mask_tokens_rejects_a_bad_rate_or_mask():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ch7.mask_tokens(tokens, tokens > 0, generator, rate=1.5)
    with pytest.raises(ValueError, match="boolean"):
        ch7.mask_tokens(tokens, tokens, generator)


def test_the_language_model_predicts_only_where_asked():
    model = ch7.MaskedLanguageModel(20, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=10)
    tokens = torch.randint(3, 20, (2, 5))
    chosen = torch.zeros(2, 5, dtype=torch.bool)
    chosen[0, 1] = chosen[1, 4] = True
    everywhere = model(tokens)
    assert everywhere.shape == (2, 5, 20)
    torch.testing.assert_close(model(tokens, chosen=chosen), everywhere[chosen])


def test_a_short_mlm_run_learns_the_text_beyond_the_commonest_piece_and_repeats_exactly(vocabulary):
    texts = REVIEWS * 20
    first = ch7.train_mlm(vocabulary, texts, steps=60, batch_size=16, dropout=0.0, seed=1)
    again = ch7.train_mlm(vocabulary, texts, steps=60, batch_size=16, dropout=0.0, seed=1)
    assert first.losses == again.losses  # seeded: the same run twice
    assert sum(first.losses[-5:]) < 0.5 * sum(first.losses[:5])
    lengths = [len(vocabulary.encode([text])[0][0]) for text in REVIEWS]
    assert 60 * 16 * min(lengths) <= first.tokens_seen <= 60 * 16 * max(lengths)
    assert ch7.masked_token_accuracy(first.model, vocabulary, texts) > ch7.masked_token_accuracy(None, vocabulary, texts)
    guesses = ch7.fill_mask(first.model, vocabulary, "the film is [MASK] .", top=3)
    assert len(guesses) == 3 and all(piece not in ("[PAD]", "[UNK]", "[MASK]") for piece, _ in guesses)
    assert guesses[0][1] >= guesses[1][1] >= guesses[2][1]
    with pytest.raises(ValueError, match=r"\[MASK\]"):
        ch7.fill_mask(first.model, vocabulary, "no gap here")


# ---------------------------------------------------------------------------------
# (a) from scratch


def test_a_model_trained_from_scratch_learns_an_easy_task_and_repeats_exactly(minilm):
    texts, labels = _sentiment_texts(300, seed=0)
    test_texts, test_labels = _sentiment_texts(200, seed=1)
    vocabulary = ch7.build_vocabulary(minilm, texts)
    run = ch7.train_from_scratch(vocabulary, texts, labels, epochs=6, dropout=0.0, seed=0)
    again = ch7.train_from_scratch(vocabulary, texts, labels, epochs=6, dropout=0.0, seed=0)
    assert run.losses == again.losses
    assert run.steps == 6 * 10 and run.examples_seen == 6 * 300
    assert ch7.classifier_accuracy(run.model, vocabulary, test_texts, test_labels) > 0.95
    with pytest.raises(ValueError, match="300 examples but 2 labels"):
        ch7.train_from_scratch(vocabulary, texts, labels[:2])


def test_a_pretrained_small_encoder_can_replace_the_random_one_without_being_changed(minilm):
    texts, labels = _sentiment_texts(64, seed=2)
    vocabulary = ch7.build_vocabulary(minilm, texts)
    mlm = ch7.train_mlm(vocabulary, texts, steps=5, batch_size=16, dropout=0.0)
    before = [p.clone() for p in mlm.model.encoder.parameters()]
    run = ch7.train_from_scratch(vocabulary, texts, labels, epochs=1, dropout=0.0, encoder=mlm.model.encoder)
    assert all(torch.equal(a, b) for a, b in zip(before, mlm.model.encoder.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(before, run.model.encoder.parameters()))


# ---------------------------------------------------------------------------------
# The pretrained encoder, run once


def test_encode_reviews_keeps_every_layers_pooled_vectors_and_the_states_entering_the_top(minilm):
    texts = ["A fine film.", "Long, slow and rather dull, but the ending almost saves it.", "Meh."]
    features = ch7.encode_reviews(minilm, texts, max_tokens=48, split_layer=4, batch_size=2)
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
    with pytest.raises(ValueError, match="at most 3"):
        features.take(4)
    with pytest.raises(ValueError, match="start < stop"):
        features.rows(2, 2)


def test_the_top_layers_continue_exactly_where_the_stored_states_stop(minilm):
    texts = ["A fine film.", "Long, slow and rather dull, but the ending almost saves it."]
    features = ch7.encode_reviews(minilm, texts, split_layer=4)
    top = ch7.TopLayersClassifier(minilm, 4)
    assert len(top.layers) == 2
    mask = features.padding_mask[:, None, None, :]
    x = features.states
    with torch.no_grad():
        for layer in top.layers:
            x = layer(x, mask)
    torch.testing.assert_close(mean_pool(x, features.padding_mask), features.layer(-1), atol=1e-5, rtol=0)


def test_fine_tuning_the_top_layers_learns_and_leaves_the_shared_model_alone(minilm):
    texts, labels = _sentiment_texts(48, seed=3)
    features = ch7.encode_reviews(minilm, texts, split_layer=5)
    before = minilm.encoder.layers[5].feed_forward.linear1.weight.clone()
    run = ch7.fine_tune_top_layers(minilm, features, labels, steps=12, batch_size=16, lr=1e-4, head_lr=3e-3)
    assert torch.equal(minilm.encoder.layers[5].feed_forward.linear1.weight, before)
    assert not torch.equal(run.model.layers[0].feed_forward.linear1.weight, before)
    assert ch7.fine_tuned_accuracy(run.model, features, labels) > 0.9
    assert run.steps == 12 and run.examples_seen == 12 * 16


# ---------------------------------------------------------------------------------
# (b) frozen features and a linear probe


def test_a_linear_probe_learns_separable_features_whatever_their_scale():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 2, (200,), generator=generator)
    features = torch.randn(200, 5, generator=generator)
    features[:, 2] += 3.0 * (2 * labels - 1)  # the signal
    features *= torch.tensor([1.0, 1000.0, 1e-3, 50.0, 1.0])  # wildly different scales
    probe = ch7.train_linear_probe(features, labels)
    assert ch7.probe_accuracy(probe, features, labels) > 0.95
    with pytest.raises(ValueError, match=r"\(N, d\)"):
        ch7.train_linear_probe(features[0], labels)
    with pytest.raises(ValueError, match="200 examples but 3 labels"):
        ch7.train_linear_probe(features, labels[:3])


def test_probing_every_layer_returns_one_accuracy_per_layer():
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2, (120,), generator=generator)
    pooled = torch.randn(120, 3, 4, generator=generator)
    pooled[:, 1, 0] += 4.0 * (2 * labels - 1)  # only layer 1 knows the label
    features = ch7.ReviewFeatures(pooled, torch.zeros(120, 1, 4), torch.ones(120, 1, dtype=torch.bool), 0, 1.0)
    accuracies = ch7.probe_every_layer(features.take(80), labels[:80], features, labels)
    assert len(accuracies) == 3 and max(range(3), key=lambda i: accuracies[i]) == 1


# ---------------------------------------------------------------------------------
# Heads, measured


def test_the_counter_finds_a_previous_token_head_and_a_cls_head():
    T = 6  # [CLS] w w w w [SEP]
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(0, T - 1)] = 1.0  # every token looks one to the left
    cls = torch.zeros(T, T)
    cls[:, 0] = 1.0
    weights = [torch.stack([previous, cls])[None]]  # one layer, two heads: (1, 2, T, T)
    counter = ch7.HeadPatternCounter(1, 2)
    labels = [["[CLS]", "good", ",", "bad", ".", "[SEP]"]]
    counter.add(weights, torch.ones(1, T, dtype=torch.bool), labels)
    scores = counter.scores()
    assert scores["previous token"].tolist() == [[1.0, 0.25]]  # the cls head's first word looks at [CLS] = its previous
    assert scores["[CLS]"].tolist() == [[0.25, 1.0]]
    assert scores["punctuation"].tolist() == [[0.25, 0.0]]  # of the 4 words, only "bad" has punctuation (",") before it
    assert ch7.strongest_heads(scores)[0] == ("previous token", 0, 0, 1.0)
    even = counter.even_spread()  # 4 word queries, each spreading 1/6 over the 6 keys
    assert even["previous token"] == pytest.approx(1 / 6) and even["[SEP]"] == pytest.approx(1 / 6)
    assert even["punctuation"] == pytest.approx(2 / 6)  # 2 of the 6 keys are punctuation
    with pytest.raises(ValueError, match="no sentence"):
        ch7.HeadPatternCounter(1, 1).scores()


def test_measuring_heads_during_encoding_equals_measuring_them_separately(minilm):
    texts = ["The plot is thin, but the acting is fine.", "Bad.", "A long and winding road to nowhere in particular."]
    separate = ch7.head_pattern_scores(minilm, texts)
    measured = ch7.encode_reviews(minilm, texts, measure_heads=True)
    during = measured.head_scores
    assert set(measured.even_spread) == set(ch7.HEAD_PATTERNS)
    for pattern in ch7.HEAD_PATTERNS:
        torch.testing.assert_close(during[pattern], separate[pattern], atol=1e-5, rtol=0)
    previous = ch7.strongest_heads(separate)[0]
    assert previous[:3] == ("previous token", 0, 2) and previous[3] > 0.9  # the head the chapter names


# ---------------------------------------------------------------------------------
# Contextual vectors


def test_word_vectors_follow_the_word_through_every_layer(minilm):
    vectors = ch7.word_vectors(minilm, "The bank raised its rates.", "bank")
    assert vectors.shape == (7, 384)
    piece = minilm.tokenizer.token_to_id("bank")
    embedding = minilm.encoder.embedding
    static = embedding.norm(embedding.tokens.weight[piece] + embedding.positions.embedding.weight[2] + embedding.token_types.weight[0])
    torch.testing.assert_close(vectors[0], static, atol=1e-5, rtol=0)  # layer 0: the embedding of position 2
    two_pieces = ch7.word_vectors(minilm, "An unpredictable thriller.", "unpredictable")
    assert two_pieces.shape == (7, 384)
    with pytest.raises(ValueError, match="does not occur"):
        ch7.word_vectors(minilm, "A river bank.", "money")


def test_same_sense_occurrences_end_up_closer_than_different_senses(minilm):
    groups = {
        "money": ["The bank raised its interest rates.", "I opened an account at the bank."],
        "river": ["We sat on the bank of the river.", "The boat reached the muddy bank."],
    }
    similarity = ch7.contextual_similarity_by_layer(minilm, "bank", groups)
    assert len(similarity["same sense"]) == len(similarity["different sense"]) == 7
    assert similarity["same sense"][-1] > similarity["different sense"][-1] + 0.03
    assert similarity["same sense"][0] > 0.9  # layer 0 is nearly static
    with pytest.raises(ValueError, match="two groups"):
        ch7.contextual_similarity_by_layer(minilm, "bank", {"money": groups["money"]})


# ---------------------------------------------------------------------------------
# Results and figures


def test_the_results_table_has_one_row_per_approach_and_a_dash_where_nothing_was_run():
    table = ch7.format_results({"(a) scratch": {100: 0.5, 1000: 0.625}, "(c) tuned": {1000: 0.75}})
    lines = table.splitlines()
    assert lines[0].split() == ["approach", "100", "1,000"]
    assert lines[2].split() == ["(a)", "scratch", "50.0%", "62.5%"]
    assert lines[3].split() == ["(c)", "tuned", "-", "75.0%"]


def test_the_figures_have_titles_and_labelled_axes(minilm):
    ax = ch7.plot_learning_curves({"a": {100: 0.5, 300: 0.6}, "b": {100: 0.7}}, baseline=0.58)
    assert ax.get_xlabel() == "labelled training examples" and ax.get_ylabel() == "test accuracy" and ax.get_title()
    scores = {pattern: torch.rand(6, 12) for pattern in ch7.HEAD_PATTERNS}
    figure = ch7.plot_head_scores(scores)
    titled = [ax for ax in figure.axes if ax.get_title()]
    assert len(titled) == len(ch7.HEAD_PATTERNS) and all(ax.get_xlabel() == "head" for ax in titled)
    heads = ch7.strongest_heads(scores)[:2]
    figure = ch7.plot_heads(minilm, "A fine film.", heads)
    assert all(ax.get_xlabel() == "keys (attended to)" for ax in figure.axes[:2])
    ax = ch7.plot_contextual_similarity({"same sense": [1.0, 0.9], "different sense": [1.0, 0.8]}, "bank")
    assert "bank" in ax.get_title()
    plt.close("all")
