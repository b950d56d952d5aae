"""Chapter 1's AttentionExplorer: the numbers the browser draws, checked against attention itself."""

import math

import pytest
import torch

import attention_book as ab
from attention_book.widgets import AttentionExplorer as ExportedExplorer
from attention_book.widgets.attention_explorer import TEMPERATURES, AttentionExplorer, drawn_vector

TOKENS = ["the", "cat", "sat"]
VECTORS = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]


@pytest.fixture
def explorer():
    return AttentionExplorer(TOKENS, VECTORS, device="cpu")


def test_the_widgets_package_exports_the_explorer():
    assert ExportedExplorer is AttentionExplorer


def test_starts_on_the_last_token_at_temperature_one_with_scaled_scores(explorer):
    assert explorer.view == {"query": 2, "temperature": TEMPERATURES.index(1.0), "scaled": True, "causal": False}
    shown = explorer.shown()
    x = torch.tensor(VECTORS)
    scores = x[2] @ x.T / math.sqrt(2)
    assert shown["scores"] == pytest.approx(scores.tolist(), abs=1e-3)
    assert shown["weights"] == pytest.approx(torch.softmax(scores, -1).tolist(), abs=1e-4)


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_every_query_and_temperature_equals_scaled_dot_product_attention(explorer, scaled, causal):
    x = torch.tensor(VECTORS)
    for t, temperature in enumerate(TEMPERATURES):
        effective = temperature if scaled else temperature / math.sqrt(2)
        mask = ab.causal_mask(3) if causal else None
        output, weights = ab.scaled_dot_product_attention(x, x, x, mask=mask, temperature=effective)
        data = explorer.data
        torch.testing.assert_close(
            torch.tensor(data["weights"][int(scaled)][int(causal)][t]), weights, atol=1e-4, rtol=0
        )
        torch.testing.assert_close(
            torch.tensor(data["outputs"][int(scaled)][int(causal)][t]), output, atol=2e-3, rtol=0
        )


def test_the_score_above_a_bar_is_s_j_over_tau(explorer):
    explorer.set_view(temperature=0, scaled=False)  # tau = 0.1
    x = torch.tensor(VECTORS)
    assert explorer.shown()["scores"] == pytest.approx((x[2] @ x.T / 0.1).tolist(), abs=1e-2)


def test_causal_masks_later_keys_with_none_and_zero_weight(explorer):
    explorer.set_view(query=0, causal=True)
    shown = explorer.shown()
    assert shown["weights"] == pytest.approx([1.0, 0.0, 0.0])
    assert shown["scores"][1:] == [-math.inf, -math.inf]


def test_editing_the_sentence_recomputes_and_keeps_the_query_inside_it(explorer):
    explorer.set_input("sentence", "sat the")
    assert explorer.data["tokens"] == ["sat", "the"] and explorer.view["query"] == 1


@pytest.mark.parametrize("text, fragment", [("", "empty"), ("dog", "unknown token 'dog'"), ("the " * 11, "at most 10")])
def test_bad_sentences_are_errors_next_to_the_sentence_box(explorer, text, fragment):
    explorer.set_input("sentence", text)
    assert explorer.error["control"] == "sentence" and fragment in explorer.error["message"]
    assert explorer.data["tokens"] == TOKENS


def test_drawn_vectors_are_seeded_and_new_words_get_vectors():
    explorer = AttentionExplorer("a b", device="cpu", seed=3)
    assert explorer.data["vectors"][0] == pytest.approx(drawn_vector("a", 3, 4).tolist(), abs=1e-4)
    explorer.set_input("sentence", "a b zebra")
    assert explorer.error == {} and len(explorer.data["vectors"]) == 3


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"tokens": ["a", "b"], "vectors": [[1.0]]}, "2 tokens but 1 vectors"),
        ({"tokens": []}, "empty"),
        ({"dim": 9}, "dim must be"),
        ({"query": 7}, "query must be"),
        ({"seed": 1.5}, "seed must be"),
        ({"tokens": ["a", "a"], "vectors": [[1.0], [2.0]]}, "occurs twice"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(kwargs, words):
    with pytest.raises(ValueError, match=words):
        AttentionExplorer(device="cpu", **kwargs)


def test_drawn_vectors_depend_only_on_word_seed_and_size_and_look_standard_normal():
    assert torch.equal(drawn_vector("bank", 5, 8), drawn_vector("bank", 5, 8))
    assert torch.equal(drawn_vector("bank", 5, 3), drawn_vector("bank", 5, 8)[:3])
    assert not torch.equal(drawn_vector("bank", 5, 8), drawn_vector("bank", 6, 8))
    assert not torch.equal(drawn_vector("bank", 5, 8), drawn_vector("Bank", 5, 8))
    assert torch.equal(drawn_vector("bank", -1, 4), drawn_vector("bank", 2**32 - 1, 4))  # seeds count mod 2**32
    assert drawn_vector("猫", 0, 4).dtype == torch.float32
    numbers = torch.cat([drawn_vector(f"word{i}", seed, 8) for i in range(2000) for seed in (0, 1)])  # 32,000
    assert abs(numbers.mean()) < 0.03 and abs(numbers.std() - 1) < 0.03
    assert abs((numbers.abs() < 0.6745).float().mean() - 0.5) < 0.02  # half lie within the quartiles
    assert (numbers.abs() > 3).float().mean() < 0.006  # 0.27 % for a normal


def test_the_payload_carries_what_the_website_needs_to_compute_a_sentence(explorer):
    data = explorer.data
    assert data["max_tokens"] == 10 and data["drawn"] is False
    assert data["vocabulary"] == {"words": TOKENS, "vectors": VECTORS}
    drawn = AttentionExplorer(device="cpu", seed=-1).data
    assert drawn["drawn"] is True and drawn["seed"] == 2**32 - 1 and drawn["vocabulary"] is None
