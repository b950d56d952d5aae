"""attention_book.data.batches (chapter 7): batches of similar length with the all-padding columns cut off."""

import math

import pytest
import torch

from attention_book.data.batches import LengthBatches, index_batches, trim_padding


def _lengths(count=200, seed=0):
    return torch.randint(1, 49, (count,), generator=torch.Generator().manual_seed(seed))


def _padded(lengths, width=None):
    width = int(lengths.max()) if width is None else width
    padding_mask = torch.arange(width)[None, :] < lengths[:, None]  # (N, width)
    tokens = torch.where(padding_mask, torch.arange(len(lengths))[:, None] + 3, 0)
    return {"tokens": tokens, "padding_mask": padding_mask, "label": torch.arange(len(lengths))}


@pytest.mark.parametrize("count, batch_size", [(10, 3), (12, 4), (1, 5), (100, 32)])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("by_length", [False, True])
def test_every_row_is_in_exactly_one_of_ceil_n_over_b_batches(count, batch_size, shuffle, by_length):
    generator = torch.Generator().manual_seed(0) if shuffle else None
    lengths = _lengths(count) if by_length else None
    batches = list(index_batches(count, batch_size, generator, lengths))
    assert len(batches) == math.ceil(count / batch_size)
    assert all(1 <= len(rows) <= batch_size for rows in batches)
    assert sorted(torch.cat(batches).tolist()) == list(range(count))


def test_without_a_generator_the_rows_come_in_order():
    assert [rows.tolist() for rows in index_batches(5, 2)] == [[0, 1], [2, 3], [4]]


def test_the_same_generator_seed_gives_the_same_batches_and_another_seed_others():
    lengths = _lengths(300)

    def draw(seed):
        return [rows.tolist() for rows in index_batches(300, 16, torch.Generator().manual_seed(seed), lengths)]

    assert draw(3) == draw(3)
    assert draw(3) != draw(4)


def test_batches_sorted_by_length_hold_similar_lengths():
    lengths = _lengths(1000, seed=1)
    spread = lambda batches: sum(int(lengths[rows].max() - lengths[rows].min()) for rows in batches)
    # Without a generator all examples are sorted; with one (and fewer examples than a pool of
    # 32 batches) the batches are runs of the sorted order, only shuffled. Either way the
    # spreads of the batches add up to at most the spread of all lengths.
    for generator in (None, torch.Generator().manual_seed(0)):
        batches = list(index_batches(1000, 32, generator, lengths))
        assert spread(batches) <= int(lengths.max() - lengths.min())
    sorted_order = torch.cat(list(index_batches(1000, 32, None, lengths)))
    assert (lengths[sorted_order].diff() >= 0).all()
    random_batches = list(index_batches(1000, 32, torch.Generator().manual_seed(0)))
    assert spread(random_batches) > 10 * spread(list(index_batches(1000, 32, None, lengths)))


def test_with_more_examples_than_a_pool_lengths_are_still_close_within_each_batch():
    lengths = _lengths(5000, seed=2)
    batches = list(index_batches(5000, 8, torch.Generator().manual_seed(0), lengths))  # pools of 256
    mean_spread = sum(int(lengths[rows].max() - lengths[rows].min()) for rows in batches) / len(batches)
    assert mean_spread < 2.0  # 256 lengths from 1 to 48 in a pool: neighbours differ by at most a few


def test_trim_padding_cuts_only_columns_that_are_padding_in_every_row():
    batch = _padded(torch.tensor([2, 4, 3]), width=7)
    batch["vectors"] = torch.randn(3, 7, 5)
    batch["other"] = torch.zeros(3, 6)  # as wide as nothing else: kept
    trimmed = trim_padding(batch)
    assert not batch["padding_mask"][:, 4:].any()  # the cut columns were padding everywhere
    assert trimmed["tokens"].shape == trimmed["padding_mask"].shape == (3, 4)
    assert torch.equal(trimmed["tokens"], batch["tokens"][:, :4]) and torch.equal(
        trimmed["vectors"], batch["vectors"][:, :4]
    )
    assert torch.equal(trimmed["label"], batch["label"])  # 1-D: one label per example, untouched
    assert trimmed["other"].shape == (3, 6)
    full = _padded(torch.tensor([3, 3]))
    assert all(torch.equal(full[name], trim_padding(full)[name]) for name in full)  # nothing to cut


def test_length_batches_are_re_iterable_have_a_length_and_trim():
    data = _padded(_lengths(100, seed=3), width=60)
    batches = LengthBatches(data, 16, torch.Generator().manual_seed(0))
    assert len(batches) == 7
    first, second = list(batches), list(batches)
    assert len(first) == len(second) == 7
    for passes in (first, second):
        labels = torch.cat([batch["label"] for batch in passes])
        assert sorted(labels.tolist()) == list(range(100))  # every example once per pass
        for batch in passes:
            assert batch["padding_mask"][:, -1].any()  # trimmed to the longest real length
            assert torch.equal(batch["tokens"], data["tokens"][batch["label"], : batch["tokens"].shape[1]])
    assert [b["label"].tolist() for b in first] != [b["label"].tolist() for b in second]  # a new order each pass
    again = list(LengthBatches(data, 16, torch.Generator().manual_seed(0)))
    assert [b["label"].tolist() for b in again] == [b["label"].tolist() for b in first]


def test_length_batches_without_length_sorting_or_trimming():
    data = _padded(_lengths(40, seed=4), width=60)
    batches = list(LengthBatches(data, 10, by_length=False, trim=False))
    assert [batch["label"].tolist() for batch in batches] == [list(range(i, i + 10)) for i in range(0, 40, 10)]
    assert all(batch["tokens"].shape == (10, 60) for batch in batches)
    no_mask = list(LengthBatches({"x": torch.arange(5)}, 2))
    assert [batch["x"].tolist() for batch in no_mask] == [[0, 1], [2, 3], [4]]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: list(index_batches(0, 4)), "count"),
        (lambda: list(index_batches(10, 0)), "batch_size"),
        (lambda: list(index_batches(10, True)), "batch_size"),
        (lambda: list(index_batches(10.0, 2)), "count"),
        (lambda: trim_padding({"tokens": torch.zeros(2, 3)}), "padding_mask"),
        (lambda: trim_padding({"padding_mask": torch.ones(2, 3)}), "boolean"),
        (lambda: LengthBatches([torch.zeros(3)], 2), "dict of tensors"),
        (lambda: LengthBatches({}, 2), "dict of tensors"),
        (lambda: LengthBatches({"a": torch.zeros(3), "b": torch.zeros(4)}, 2), "row counts differ"),
        (lambda: LengthBatches({"a": [1, 2, 3]}, 2), "torch.Tensor"),
        (lambda: LengthBatches({"a": torch.zeros(3)}, 0), "batch_size"),
    ],
)
def test_bad_input_raises_a_value_error_that_names_the_problem(call, message):
    with pytest.raises(ValueError, match=message):
        call()
