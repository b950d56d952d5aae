"""attention_book.analysis.heads (chapters 2, 4, 6, 7): where attention heads look, measured.

Every measurement is checked against a model whose answer is known (an oracle, a scripted
model, hand-made weights) or against the same number computed by hand; each runs its
model in evaluation mode and leaves the mode as it was.
"""

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.analysis.heads import (
    HEAD_PATTERNS,
    HeadPatternCounter,
    attention_maps,
    cross_attention_hit_rate,
    decoding_attention,
    head_focus,
    head_pattern_scores,
    lookup_hit_rate,
    relation_accuracy,
    strongest_heads,
)
from attention_book.recall import previous_token_mask

# ---------------------------------------------------------------------------------
# Chapter 2: the recall model's two maps


def test_the_asked_key_attends_to_its_own_pair(trained_recall):
    model, held_out, _ = trained_recall
    assert lookup_hit_rate(model, held_out) >= 0.9


def test_attention_maps_have_the_documented_shapes_and_rows_sum_to_one(trained_recall):
    model, held_out, _ = trained_recall
    model.train()
    binding, lookup = attention_maps(model, held_out.tokens[:5])
    assert model.training  # measured in evaluation mode, left as it was
    model.eval()
    assert binding.shape == (5, 10, 10) and lookup.shape == (5, 10)
    assert binding.device.type == lookup.device.type == "cpu"
    torch.testing.assert_close(lookup.sum(-1), torch.ones(5))
    assert not (binding * ~previous_token_mask(10)).any()  # the binding layer only looks one step back


def test_lookup_hit_rate_counts_the_asked_key_and_its_value_as_hits(trained_recall):
    model, held_out, _ = trained_recall
    small = ab.AssociativeRecall(50, num_pairs=4, seed=9)
    _, lookup = attention_maps(model, small.tokens)
    keys = small.tokens[:, 0:8:2]  # (50, 4)
    position = 2 * (keys == small.tokens[:, -1:]).float().argmax(dim=1)
    top = lookup.argmax(dim=1)
    by_hand = ((top == position) | (top == position + 1)).float().mean().item()
    assert lookup_hit_rate(model, small) == pytest.approx(by_hand)


# ---------------------------------------------------------------------------------
# Chapter 4: accuracy per relation and where each head looks


def _two_relation_model(task, heads=2):
    torch.manual_seed(0)
    return ab.TokenClassifier(
        len(task.vocabulary), task.num_classes, d_model=32, num_heads=heads, d_ff=64, num_layers=1, max_len=task.length
    )


def test_relation_accuracy_of_a_model_that_knows_the_answers():
    task = ab.TwoRelationTask(30, seed=0)

    class Oracle(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            targets = task.targets.clamp_min(0)
            return torch.nn.functional.one_hot(targets, task.num_classes).float() + 0 * self.dummy

    assert relation_accuracy(Oracle(), task) == {
        "both digits": 1.0,
        "partner's digit": 1.0,
        "previous token's digit": 1.0,
    }


def test_relation_accuracy_scores_each_digit_of_the_answer_separately():
    task = ab.TwoRelationTask(30, seed=1)
    d = task.num_digits

    class PartnerOnly(torch.nn.Module):
        """Right about the partner's digit, always wrong about the previous token's."""

        def __init__(self):
            super().__init__()
            self.dummy = torch.nn.Parameter(torch.zeros(()))

        def forward(self, tokens):
            targets = task.targets.clamp_min(0)
            wrong = (targets // d) * d + (targets % d + 1) % d
            return torch.nn.functional.one_hot(wrong, task.num_classes).float() + 0 * self.dummy

    assert relation_accuracy(PartnerOnly(), task) == {
        "both digits": 0.0,
        "partner's digit": 1.0,
        "previous token's digit": 0.0,
    }


def test_head_focus_measures_weight_on_previous_partner_and_self():
    task = ab.TwoRelationTask(40, seed=5)
    model = _two_relation_model(task)
    focus = head_focus(model, task)
    assert focus.shape == (2, 3) and (focus >= 0).all() and (focus.sum(1) <= 1 + 1e-5).all()
    # Check one number by hand: head 1's mean weight on the partner.
    with torch.no_grad():
        model(task.tokens)
    weights = model.attention_weights()[0]
    by_hand = torch.stack([weights[n, 1, t, task.partner[n, t]] for n in range(40) for t in range(1, 8)]).mean()
    torch.testing.assert_close(focus[1, 1], by_hand)
    previous = torch.stack([weights[n, 0, t, t - 1] for n in range(40) for t in range(1, 8)]).mean()
    torch.testing.assert_close(focus[0, 0], previous)


# ---------------------------------------------------------------------------------
# Chapter 6: the decoder's attention while it decodes


@pytest.fixture
def seq2seq():
    torch.manual_seed(0)
    return ab.EncoderDecoder(13, 13, d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=10).eval()


def test_decoding_attention_rows_are_what_each_decoding_step_computed(seq2seq):
    source = torch.tensor([5, 9, 3, 7])
    found = decoding_attention(seq2seq, source)
    output = ab.greedy_decode(seq2seq, source[None], 9, bos=ab.BOS, eos=ab.EOS)[0]
    L = len(found["output"])
    assert torch.equal(found["output"], output[:L])
    assert torch.equal(found["decoder_in"], torch.cat([torch.tensor([ab.BOS]), found["output"][:-1]]))
    assert found["self_attention"].shape == (2, 2, L, L) and found["cross_attention"].shape == (2, 2, L, 4)
    memory = seq2seq.encode(source[None])
    for step in range(1, L + 1):  # the decoding loop, one step at a time
        seq2seq.decode(found["decoder_in"][None, :step], memory)
        for layer in range(2):
            torch.testing.assert_close(
                seq2seq.decoder.layers[layer].cross_attn.last_weights[0, :, -1],
                found["cross_attention"][layer, :, step - 1],
            )
            torch.testing.assert_close(
                seq2seq.decoder.layers[layer].self_attn.last_weights[0, :, -1],
                found["self_attention"][layer, :, step - 1, :step],
            )


def test_decoding_attention_rejects_a_batch(seq2seq):
    with pytest.raises(ValueError, match="one sequence"):
        decoding_attention(seq2seq, torch.tensor([[5, 9], [3, 7]]))


class _ScriptedDecoder:
    weights = None

    def cross_attention_weights(self):
        return [self.weights]


class _ScriptedModel(nn.Module):
    """Pretends to be an EncoderDecoder whose cross-attention looks at the given source positions."""

    def __init__(self, looked_at, T_in):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.looked_at, self.T_in = looked_at, T_in
        self.decoder = _ScriptedDecoder()

    def forward(self, source, target_in, source_padding=None, target_padding=None):
        one_hot = nn.functional.one_hot(self.looked_at, self.T_in).float()  # (N, T_out, T_in)
        self.decoder.weights = one_hot[:, None]  # (N, heads=1, T_out, T_in)


def test_cross_attention_hit_rate_counts_steps_that_look_at_the_token_they_write():
    task = ab.SequenceTask("sort", 2, min_len=3, max_len=3, num_symbols=10, seed=0)
    ranks = task.source.argsort(dim=1, stable=True)  # (2, 3): where the t-th smallest token sits
    looked_at = torch.cat([ranks, torch.zeros(2, 1, dtype=torch.long)], dim=1)  # (2, T_out=4), EOS step last
    assert cross_attention_hit_rate(_ScriptedModel(looked_at, 3), task) == 1.0
    wrong = looked_at.clone()
    wrong[0, 0] = (ranks[0, 0] + 1) % 3  # one of the six steps looks elsewhere
    expected = 5 / 6 if task.source[0, wrong[0, 0]] != task.target_out[0, 0] else 1.0
    assert cross_attention_hit_rate(_ScriptedModel(wrong, 3), task) == pytest.approx(expected)


# ---------------------------------------------------------------------------------
# Chapter 7: head patterns of the pretrained model


def test_the_counter_finds_a_previous_token_head_and_a_cls_head():
    T = 6  # [CLS] w w w w [SEP]
    previous = torch.zeros(T, T)
    previous[0, 0] = 1.0
    previous[torch.arange(1, T), torch.arange(0, T - 1)] = 1.0  # every token looks one to the left
    cls = torch.zeros(T, T)
    cls[:, 0] = 1.0
    weights = [torch.stack([previous, cls])[None]]  # one layer, two heads: (1, 2, T, T)
    counter = HeadPatternCounter(1, 2)
    labels = [["[CLS]", "good", ",", "bad", ".", "[SEP]"]]
    counter.add(weights, torch.ones(1, T, dtype=torch.bool), labels)
    scores = counter.scores()
    assert set(scores) == set(HEAD_PATTERNS)
    assert scores["previous token"].tolist() == [[1.0, 0.25]]  # the cls head's first word looks at [CLS] = its previous
    assert scores["[CLS]"].tolist() == [[0.25, 1.0]]
    assert scores["punctuation"].tolist() == [[0.25, 0.0]]  # of the 4 words, only "bad" has punctuation (",") before it
    assert strongest_heads(scores)[0] == ("previous token", 0, 0, 1.0)
    even = counter.even_spread()  # 4 word queries, each spreading 1/6 over the 6 keys
    assert even["previous token"] == pytest.approx(1 / 6) and even["[SEP]"] == pytest.approx(1 / 6)
    assert even["punctuation"] == pytest.approx(2 / 6)  # 2 of the 6 keys are punctuation
    with pytest.raises(ValueError, match="no sentence"):
        HeadPatternCounter(1, 1).scores()
    with pytest.raises(ValueError, match="no sentence"):
        HeadPatternCounter(1, 1).even_spread()


def test_the_counter_skips_padding_and_sentences_without_words():
    T = 5
    uniform = torch.full((2, 1, T, T), 1 / 3)
    padding_mask = torch.tensor([[True] * 3 + [False] * 2, [True, True] + [False] * 3])  # [CLS] w [SEP]; [CLS] [SEP]
    counter = HeadPatternCounter(1, 1)
    counter.add([uniform], padding_mask, [["[CLS]", "w", "[SEP]"], ["[CLS]", "[SEP]"]])
    assert counter.queries == 1  # one word in all
    assert counter.scores()["itself"].item() == pytest.approx(1 / 3)


def test_strongest_heads_names_the_layer_and_head_of_each_patterns_largest_score():
    scores = {"itself": torch.tensor([[0.1, 0.2], [0.7, 0.3]]), "[CLS]": torch.tensor([[0.0, 0.9], [0.1, 0.2]])}
    assert strongest_heads(scores) == [("itself", 1, 0, pytest.approx(0.7)), ("[CLS]", 0, 1, pytest.approx(0.9))]


def test_the_pretrained_model_has_the_previous_token_head_the_chapter_names(minilm):
    texts = ["The plot is thin, but the acting is fine.", "Bad.", "A long and winding road to nowhere in particular."]
    scores = head_pattern_scores(minilm, texts)
    assert set(scores) == set(HEAD_PATTERNS) and all(s.shape == (6, 12) for s in scores.values())
    previous = strongest_heads(scores)[0]
    assert previous[:3] == ("previous token", 0, 2) and previous[3] > 0.9
    assert not minilm.training
