"""Chapter 2's KeyValueExplorer: the lookup the browser draws, checked against soft_lookup."""

import pytest
import torch

import attention_book as ab
from attention_book.widgets import WidgetInputError
from attention_book.widgets.key_value_explorer import SANITY_KEYS, SANITY_VALUES, KeyValueExplorer, parse_query


@pytest.fixture
def explorer():
    return KeyValueExplorer(device="cpu")


def test_default_store_is_the_sanity_check_and_starts_on_key_two(explorer):
    shown = explorer.shown()
    assert shown["query"] == [0.0, 10.0, 0.0]
    assert shown["weights"] == pytest.approx([0.0, 1.0, 0.0, 0.0], abs=1e-4)
    assert shown["value"] == pytest.approx([10.0, 0.0, 0.0], abs=1e-3)


def test_a_typed_query_matching_two_keys_returns_their_average(explorer):
    explorer.set_query("0, 0, 10")
    assert explorer.error == {} and explorer.view == {"moved": {}}
    assert explorer.shown()["weights"] == pytest.approx([0.0, 0.0, 0.5, 0.5], abs=1e-4)
    assert explorer.shown()["value"] == pytest.approx([550.0, 5.5, 0.0], abs=1e-2)


def test_every_stop_of_every_slider_equals_soft_lookup(explorer):
    keys, values = torch.tensor(SANITY_KEYS), torch.tensor(SANITY_VALUES)
    for axis in range(3):
        for stop, number in enumerate(explorer.data["grid"]):
            query = torch.tensor(explorer.data["query"])
            query[axis] = number
            value, weights = ab.soft_lookup(query, keys, values)
            along = explorer.data["along"][axis]
            assert along["weights"][stop] == pytest.approx(weights.tolist(), abs=1e-4)
            assert along["values"][stop] == pytest.approx(value.tolist(), abs=2e-3, rel=1e-4)


def test_moving_one_slider_in_the_browser_shows_that_stop(explorer):
    stop = explorer.data["grid"].index(10.0)
    explorer.set_view(moved={"2": stop})  # query[2] to 10: keys 2, 3 and 4 match equally
    assert explorer.shown()["query"] == [0.0, 10.0, 10.0]
    assert explorer.shown()["weights"] == pytest.approx([0.0, 1 / 3, 1 / 3, 1 / 3], abs=1e-3)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("", "type 3 numbers"),
        ("1, x, 2", "'x' is not a number"),
        ("1, 2", "needs 3 numbers"),
        ("0, 0, 99", "sliders go from"),
    ],
)
def test_bad_queries_are_errors_next_to_the_query_box(explorer, text, fragment):
    explorer.set_query(text)
    assert explorer.error["control"] == "query" and fragment in explorer.error["message"]
    assert explorer.shown()["query"] == [0.0, 10.0, 0.0]


def test_parse_query_accepts_brackets_and_spaces():
    assert parse_query("[1 2, 3]", 3, 10) == [1.0, 2.0, 3.0]
    with pytest.raises(WidgetInputError):
        parse_query("nan, 1, 2", 3, 10)


@pytest.mark.parametrize(
    "arguments, pattern",
    [
        ({"keys": [[1.0]]}, "both keys and values"),
        ({"keys": [[1.0]], "values": [[1.0], [2.0]]}, "every key needs one value"),
        ({"keys": [[1.0]], "values": [[1.0]], "key_labels": ["a", "b"]}, "key_labels has 2"),
    ],
)
def test_bad_arguments_raise_a_clear_value_error(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        KeyValueExplorer(device="cpu", **arguments)
