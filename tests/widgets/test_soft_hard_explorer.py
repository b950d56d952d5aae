"""Chapter 3's SoftHardExplorer: softmax, sparsemax and hardmax at every stop of the beta slider."""

import math

import pytest
import torch

import attention_book as ab
from attention_book.widgets import SoftHardExplorer as ExportedExplorer
from attention_book.widgets.soft_hard_explorer import (
    BETAS,
    DEFAULT_LABELS,
    DEFAULT_SCORES,
    SoftHardExplorer,
    format_scores,
    parse_scores,
)


@pytest.fixture
def explorer():
    return SoftHardExplorer(device="cpu")


def test_the_widgets_package_exports_the_explorer():
    assert ExportedExplorer is SoftHardExplorer


def test_every_stop_matches_the_package_functions(explorer):
    scores = torch.tensor(DEFAULT_SCORES, dtype=torch.float64)
    for b, beta in enumerate(BETAS):
        soft, sparse = ab.softmax(beta * scores), ab.sparsemax(beta * scores)
        assert explorer.data["softmax"][b] == pytest.approx(soft.tolist(), abs=1e-4)
        assert explorer.data["sparsemax"][b] == pytest.approx(sparse.tolist(), abs=1e-4)
        assert explorer.data["entropy"]["softmax"][b] == pytest.approx(float(ab.entropy(soft)), abs=1e-4)
        assert explorer.data["nonzero"]["sparsemax"][b] == int((sparse > 0).sum())


def test_starts_at_beta_one_on_the_chapters_scores(explorer):
    shown = explorer.shown()
    assert shown["beta"] == 1.0 and explorer.data["labels"] == DEFAULT_LABELS
    assert shown["hardmax"] == [0.0, 1.0, 0.0, 0.0, 0.0]


def test_large_beta_is_one_hot_and_small_beta_is_almost_uniform_except_hardmax(explorer):
    explorer.set_view(beta=len(BETAS) - 1)
    assert max(explorer.shown()["softmax"]) > 0.99
    explorer.set_view(beta=0)
    shown = explorer.shown()
    assert shown["entropy"]["softmax"] == pytest.approx(math.log(5), abs=1e-3)
    assert shown["entropy"]["sparsemax"] == pytest.approx(math.log(5), abs=1e-2)
    assert shown["nonzero"]["hardmax"] == 1


def test_typed_scores_with_a_tie_share_the_hard_weight(explorer):
    explorer.set_input("scores", "a=1, b=2, c=2")
    assert explorer.error == {} and explorer.data["labels"] == ["a", "b", "c"]
    assert explorer.data["hardmax"] == pytest.approx([0.0, 0.5, 0.5])


@pytest.mark.parametrize(
    "text, fragment",
    [("", "type one score"), ("a=1, b=x", "not a number"), ("a=1,,b=2", "empty"), ("a=99", "keep scores between")],
)
def test_bad_scores_are_errors_next_to_the_scores_box(explorer, text, fragment):
    explorer.set_input("scores", text)
    assert explorer.error["control"] == "scores" and fragment in explorer.error["message"]
    assert explorer.data["labels"] == DEFAULT_LABELS


def test_parse_and_format_scores_round_trip():
    assert parse_scores(format_scores(["x", "y"], [1.5, -2.0])) == (["x", "y"], [1.5, -2.0])
    assert parse_scores("1, 2")[0] == ["key 1", "key 2"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"scores": [1.0] * 11}, "1 to 10"),
        ({"beta": 0.001}, "beta must be"),
        ({"scores": [1.0, 2.0], "labels": ["a"]}, "labels has 1"),
    ],
)
def test_bad_arguments_raise_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SoftHardExplorer(device="cpu", **kwargs)
