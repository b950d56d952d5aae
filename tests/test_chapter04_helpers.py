"""Chapter 4: the parse and its drawing, the two-relation task and model, and wide heads in MultiHeadAttention."""

import re

import pytest
import torch
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.chapter04_helpers import (
    EXAMPLE_SENTENCE,
    HAND_PARSE,
    IGNORE,
    ParseFigure,
    TwoRelationModel,
    TwoRelationTask,
    head_focus,
    parameter_count,
    parse_example,
    plot_relation_accuracy,
    relation_accuracy,
    relations,
    render_parse,
    token_accuracy,
    token_loss,
)
from attention_book.widgets.head_viewer import HeadViewer

# ---------------------------------------------------------------------------------
# The dependency parse


def test_the_hand_written_parse_has_gave_as_root_with_three_different_dependents():
    doc, source = parse_example(prefer_trained=False)
    assert "hand-written" in source and doc.text == EXAMPLE_SENTENCE
    assert [token.dep_ for token in doc] == HAND_PARSE["deps"]
    assert [token.pos_ for token in doc] == HAND_PARSE["pos"]
    arcs = relations(doc)
    assert ("gave", "nsubj", "She") in arcs and ("gave", "dative", "brother") in arcs and ("gave", "dobj", "bicycle") in arcs
    assert len(arcs) == len(doc) - 1  # every word but the root has one head


def test_the_drawing_is_the_same_svg_every_time_with_no_random_ids():
    doc, _ = parse_example(prefer_trained=False)
    first, second = render_parse(doc), render_parse(doc)
    assert isinstance(first, ParseFigure) and first.svg == second.svg
    svg = first._repr_svg_()
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert not re.search(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", svg), "displaCy's random hex id survived"
    for label in ("nsubj", "dative", "dobj", "amod", "bicycle"):
        assert label in svg
    assert repr(first) == f"<dependency parse of {EXAMPLE_SENTENCE!r}>"


def test_a_different_sentence_without_a_trained_pipeline_is_a_clear_error():
    with pytest.raises(ValueError, match="only the chapter's sentence"):
        parse_example("The cat sat", prefer_trained=False)
    with pytest.raises(ValueError, match="non-empty string"):
        parse_example("  ")


# ---------------------------------------------------------------------------------
# The two-relation task


def test_every_letter_occurs_twice_and_the_labels_name_partner_and_previous_digits():
    task = TwoRelationTask(50, seed=3)
    assert task.tokens.shape == (50, 8) and task.labels.shape == (50, 8)
    letters, digits = task.tokens // task.num_digits, task.tokens % task.num_digits
    for n in range(50):
        counts = torch.bincount(letters[n], minlength=task.num_letters)
        assert sorted(counts[counts > 0].tolist()) == [2, 2, 2, 2]
        assert task.labels[n, 0] == IGNORE and task.answer(IGNORE) is None
        for t in range(1, 8):
            partner = int(task.partner[n, t])
            assert partner != t and letters[n, partner] == letters[n, t]
            assert task.answer(int(task.labels[n, t])) == (int(digits[n, partner]), int(digits[n, t - 1]))


def test_the_same_seed_gives_the_same_sequences_and_another_seed_others():
    assert torch.equal(TwoRelationTask(20, seed=1).tokens, TwoRelationTask(20, seed=1).tokens)
    assert not torch.equal(TwoRelationTask(20, seed=1).tokens, TwoRelationTask(20, seed=2).tokens)


def test_items_words_and_encode_fit_together():
    task = TwoRelationTask(5, seed=0)
    item = task[2]
    assert set(item) == {"tokens", "labels"} and item["tokens"].shape == (8,)
    words = task.words(2)
    tokens, labels = task.encode(" ".join(words))
    assert labels == words and torch.equal(tokens[0], task.tokens[2])
    with pytest.raises(ValueError, match="unknown word 'z9'"):
        task.encode("a1 z9")
    with pytest.raises(ValueError, match="at most 8"):
        task.encode(" ".join(words + ["a1"]))


@pytest.mark.parametrize(
    "options, message",
    [({"num_pairs": 1}, "num_pairs"), ({"num_letters": 3}, "num_letters"), ({"num_digits": 11}, "num_digits")],
)
def test_bad_task_settings_are_value_errors(options, message):
    with pytest.raises(ValueError, match=message):
        TwoRelationTask(10, **options)


# ---------------------------------------------------------------------------------
# The model and its measurements


def test_the_model_has_the_same_parameters_for_any_number_of_narrow_heads():
    counts = {heads: parameter_count(TwoRelationModel(32, 16, num_heads=heads)) for heads in (1, 2, 4, 8)}
    assert len(set(counts.values())) == 1


def test_loss_and_accuracy_skip_the_unlabelled_first_position():
    task = TwoRelationTask(16, seed=0)
    torch.manual_seed(0)
    model = TwoRelationModel(len(task.vocabulary), task.num_classes, num_heads=2)
    batch = next(iter(DataLoader(task, batch_size=16)))
    logits = model(batch["tokens"])
    assert logits.shape == (16, 8, 16)
    expected = torch.nn.functional.cross_entropy(logits[:, 1:].flatten(0, 1), batch["labels"][:, 1:].flatten())
    torch.testing.assert_close(token_loss(model, batch), expected)
    correct, total = token_accuracy(model, batch)
    assert total == 16 * 7 and 0 <= correct <= total


def test_relation_accuracy_of_a_model_that_knows_the_answers():
    task = TwoRelationTask(30, seed=0)

    class Oracle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            labels = task.labels.clamp_min(0)
            return torch.nn.functional.one_hot(labels, task.num_classes).float() + 0 * self.dummy

    assert relation_accuracy(Oracle(), task) == {"both digits": 1.0, "partner's digit": 1.0, "previous token's digit": 1.0}


def test_head_focus_measures_weight_on_previous_partner_and_self():
    task = TwoRelationTask(40, seed=5)
    torch.manual_seed(0)
    model = TwoRelationModel(len(task.vocabulary), task.num_classes, num_heads=2)
    focus = head_focus(model, task)
    assert focus.shape == (2, 3) and (focus >= 0).all() and (focus.sum(1) <= 1 + 1e-5).all()
    # Check one number by hand: head 1's mean weight on the partner.
    with torch.no_grad():
        model(task.tokens)
    weights = model.attention_weights()[0]
    by_hand = torch.stack([weights[n, 1, t, task.partner[n, t]] for n in range(40) for t in range(1, 8)]).mean()
    torch.testing.assert_close(focus[1, 1], by_hand)


@pytest.fixture
def one_thread():
    """A model this small trains fastest on one CPU thread (as in the chapter)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_a_short_training_run_learns_and_the_head_viewer_reads_the_model(one_thread):
    train, held_out = TwoRelationTask(1000, seed=1), TwoRelationTask(200, seed=2)
    ab.set_seed(0)
    model = TwoRelationModel(len(train.vocabulary), train.num_classes, num_heads=2)
    before = relation_accuracy(model, held_out)["partner's digit"]
    loader = DataLoader(train, batch_size=64, shuffle=True)
    ab.fit(model, loader, token_loss, epochs=4, lr=5e-3, progress=False, device="cpu")
    after = relation_accuracy(model, held_out)["partner's digit"]
    assert after > max(0.5, before + 0.2)  # the content relation is learned first
    viewer = HeadViewer(model, train.encode, "a1 c3 b0 a2 d1 c0 b3 d2", device="cpu")
    assert viewer.state["weights"].shape == (2, 8, 8)


def test_plot_relation_accuracy_draws_one_bar_per_model_and_relation():
    import matplotlib

    matplotlib.use("Agg")
    results = {"a": {"x": 0.5, "y": 1.0}, "b": {"x": 0.25, "y": 0.75}}
    ax = plot_relation_accuracy(results)
    assert len(ax.patches) == 4 and ax.get_ylabel() == "held-out accuracy" and ax.get_title()


# ---------------------------------------------------------------------------------
# Wide heads and input checks in the chapter's module


def test_wide_heads_have_h_times_the_projection_parameters():
    d_model, heads = 12, 3
    wide = ab.MultiHeadAttention(d_model, heads, d_head=d_model)
    assert wide.q_proj.weight.shape == (heads * d_model, d_model) and wide.out_proj.weight.shape == (d_model, heads * d_model)
    assert parameter_count(wide) == 4 * heads * d_model**2 + 3 * heads * d_model + d_model
    assert parameter_count(ab.MultiHeadAttention(d_model, heads)) == 4 * d_model**2 + 4 * d_model
    x = torch.randn(2, 5, d_model)
    out, weights = wide(x, x, x)
    assert out.shape == (2, 5, d_model) and weights.shape == (2, heads, 5, 5)
    fast, _ = wide(x, x, x, need_weights=False)
    torch.testing.assert_close(fast, out)


def test_any_head_size_is_allowed_when_given_even_if_heads_do_not_divide_d_model():
    layer = ab.MultiHeadAttention(10, 3, d_head=5)
    x = torch.randn(1, 4, 10)
    assert layer(x, x, x)[0].shape == (1, 4, 10)
    with pytest.raises(ValueError, match="d_head must be a positive integer"):
        ab.MultiHeadAttention(10, 3, d_head=0)


def test_split_heads_checks_its_inputs_and_accepts_non_contiguous_tensors():
    x = torch.randn(2, 8, 5).transpose(1, 2)  # (2, 5, 8), not contiguous
    torch.testing.assert_close(ab.merge_heads(ab.split_heads(x, 4)), x)
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        ab.split_heads(x, 0)
    with pytest.raises(ValueError, match="must be a torch.Tensor"):
        ab.split_heads([[1.0]], 1)
    with pytest.raises(ValueError, match="not divisible"):
        ab.split_heads(x, 3)
