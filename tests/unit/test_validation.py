"""attention_book._validation (floor 0): the input checks every module uses.

Each check raises a ValueError that says what was expected and what was given. (Which
check a module applies to its own arguments is tested with that module.)
"""

import pytest
import torch

from attention_book._validation import (
    broadcast_shape,
    check_mask,
    describe_shape,
    require_count,
    require_exact_rank,
    require_floating,
    require_labels,
    require_padding_mask,
    require_positive,
    require_rank,
    require_tensor,
    require_texts,
)


def test_describe_shape_writes_a_shape_as_the_messages_do():
    assert describe_shape(torch.zeros(2, 3, 4)) == "(2, 3, 4)"
    assert describe_shape(torch.tensor(1.0)) == "()"


# ---------------------------------------------------------------------------------
# require_count


@pytest.mark.parametrize(
    "value, minimum, maximum", [(1, 1, None), (7, 1, None), (0, 0, None), (3, 3, 3), (5, 1, 10), (10**12, 1, None)]
)
def test_require_count_returns_an_integer_in_range(value, minimum, maximum):
    assert require_count(value, "n", minimum, maximum) == value


@pytest.mark.parametrize(
    "value, minimum, maximum",
    [
        (True, 1, None),  # a bool is an int in Python, but never a count
        (False, 0, None),
        (2.0, 1, None),  # a float, even a whole one
        ("3", 1, None),
        (None, 1, None),
        (torch.tensor(3), 1, None),
        (0, 1, None),  # below the minimum
        (-1, 0, None),
        (11, 1, 10),  # above the maximum
        (2, 3, 5),
    ],
)
def test_require_count_rejects_bools_floats_and_out_of_range_values(value, minimum, maximum):
    with pytest.raises(ValueError) as error:
        require_count(value, "num_heads", minimum, maximum)
    message = str(error.value)
    assert message.startswith("num_heads must be") and f"{value!r} was given" in message
    if maximum is not None:
        assert f"from {minimum} to {maximum}" in message


def test_require_count_says_which_range_it_expected():
    with pytest.raises(ValueError, match=r"T must be a positive integer, but 0 was given"):
        require_count(0, "T")
    with pytest.raises(ValueError, match=r"start must be a non-negative integer, but -1 was given"):
        require_count(-1, "start", 0)
    with pytest.raises(ValueError, match=r"T must be an integer of at least 2, but 1 was given"):
        require_count(1, "T", 2)
    with pytest.raises(ValueError, match=r"k must be an integer from 1 to 3, but 4 was given"):
        require_count(4, "k", 1, 3)


# ---------------------------------------------------------------------------------
# Tensors, masks, texts and labels


def test_tensor_checks():
    assert require_tensor(torch.zeros(1), "x") is not None
    with pytest.raises(ValueError, match="x must be a torch.Tensor, but a list was given"):
        require_tensor([1.0], "x")
    with pytest.raises(
        ValueError, match=r"x must hold floating-point numbers, but has dtype torch.int64; convert it with x.float\(\)"
    ):
        require_floating(torch.zeros(2, dtype=torch.long), "x")
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions \(T, d\), but has shape \(3\)"):
        require_rank(torch.zeros(3), "x", 2, "(T, d)")
    with pytest.raises(ValueError, match=r"x must have 3 dimensions \(batch, T, d\), but has shape \(2, 3\)"):
        require_exact_rank(torch.zeros(2, 3), "x", 3, "(batch, T, d)")
    require_positive(0.5, "temperature")
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="temperature must be positive"):
            require_positive(bad, "temperature")


def test_check_mask_accepts_broadcastable_boolean_masks_only():
    assert check_mask(None, (2, 3, 4), "(batch, T_q, T_k)") is None
    mask = torch.ones(3, 4, dtype=torch.bool)
    assert check_mask(mask, (2, 3, 4), "(batch, T_q, T_k)") is mask
    with pytest.raises(ValueError, match="boolean tensor"):
        check_mask(torch.ones(3, 4), (2, 3, 4), "")
    with pytest.raises(ValueError, match=r"mask of shape \(3, 5\) cannot be broadcast .* \(2, 3, 4\)"):
        check_mask(torch.ones(3, 5, dtype=torch.bool), (2, 3, 4), "")
    with pytest.raises(ValueError, match="cannot be broadcast"):  # broadcasting must not grow the scores
        check_mask(torch.ones(5, 3, 4, dtype=torch.bool), (2, 3, 4), "")


def test_require_texts_takes_a_non_empty_sequence_of_strings():
    assert require_texts(("a", "b")) == ["a", "b"]
    for bad in ("just one string", [1, 2], None, ["a", None]):
        with pytest.raises(ValueError, match="texts must be a list of strings"):
            require_texts(bad)
    with pytest.raises(ValueError, match="reviews is empty"):
        require_texts([], "reviews")


def test_require_labels_takes_one_integer_class_id_per_example():
    labels = require_labels(torch.tensor([0, 1, 1], dtype=torch.int32), 3)
    assert labels.dtype == torch.long and labels.tolist() == [0, 1, 1]
    with pytest.raises(ValueError, match="there are 3 examples but 2 labels"):
        require_labels(torch.tensor([0, 1]), 3)
    for bad in (torch.tensor([0.0, 1.0]), torch.zeros(3, 1, dtype=torch.long), [0, 1, 1]):
        with pytest.raises(ValueError, match="1-D tensor of integer class ids"):
            require_labels(bad, 3)


def test_require_padding_mask_takes_a_boolean_mask_of_exactly_the_shape():
    mask = torch.ones(2, 3, dtype=torch.bool)
    assert require_padding_mask(mask, (2, 3), "tokens") is mask
    with pytest.raises(ValueError, match=r"shaped like tokens \(2, 4\) .* has shape \(2, 3\)"):
        require_padding_mask(mask, (2, 4), "tokens")
    with pytest.raises(ValueError, match="dtype torch.float32"):
        require_padding_mask(mask.float(), (2, 3), "tokens")
    with pytest.raises(ValueError, match="padding_mask must be a torch.Tensor"):
        require_padding_mask([[True] * 3] * 2, (2, 3), "tokens")


@pytest.mark.parametrize(
    "shapes",
    [
        [(2, 1, 4), (3, 1)],
        [(5,), (1, 5)],
        [(2, 3), (3, 2)],
        [(0, 1), (1, 4)],
        [(0,), (3,)],
        [()],
        [(4, 1, 1), (), (1, 7, 1)],
        [(1, 2, 3, 4), (2, 1, 4)],
        [(2, 2), (2, 2), (3, 2)],
    ],
)
def test_broadcast_shape_agrees_with_torch(shapes):
    try:
        expected = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        expected = None
    assert broadcast_shape(*shapes) == expected
