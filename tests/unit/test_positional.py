"""attention_book.positional (chapter 5): the sinusoidal table, its offset rotations, learned and
rotary positions, and why a model needs them (without, twins that differ only in order look alike)."""

import math

import pytest
import torch
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.positional import offset_rotation, sinusoidal_frequencies


def test_sinusoidal_table_matches_its_closed_form():
    table = ab.sinusoidal_encoding(50, 16)
    for p in (0, 1, 7, 49):
        for i in range(8):
            angle = p / 10000 ** (2 * i / 16)
            assert math.isclose(table[p, 2 * i].item(), math.sin(angle), abs_tol=1e-6)
            assert math.isclose(table[p, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-6)


def test_sinusoidal_offset_is_a_rotation_of_each_frequency_pair():
    table = ab.sinusoidal_encoding(40, 8).double()
    k = 5
    for i in range(4):
        omega = 1 / 10000 ** (2 * i / 8)
        rotation = torch.tensor(
            [[math.cos(omega * k), -math.sin(omega * k)], [math.sin(omega * k), math.cos(omega * k)]],
            dtype=torch.float64,
        )
        pair = table[:, 2 * i : 2 * i + 2]  # (P, 2) rows (sin, cos)
        torch.testing.assert_close(pair[k:], pair[:-k] @ rotation, atol=1e-5, rtol=1e-5)


def test_frequencies_fall_geometrically_from_one_to_almost_one_over_the_base():
    frequencies = sinusoidal_frequencies(8)
    torch.testing.assert_close(
        frequencies, torch.tensor([1.0, 10000**-0.25, 10000**-0.5, 10000**-0.75], dtype=torch.float64)
    )
    ratios = frequencies[1:] / frequencies[:-1]
    torch.testing.assert_close(ratios, torch.full_like(ratios, 10000**-0.25))
    assert len(sinusoidal_frequencies(7)) == 4  # an odd width ends with a lone sine column


def test_the_table_uses_the_base_and_an_odd_width_ends_with_a_sine():
    table = ab.sinusoidal_encoding(20, 6, base=100.0)
    assert math.isclose(table[7, 2].item(), math.sin(7 / 100 ** (2 / 6)), abs_tol=1e-6)
    assert math.isclose(table[7, 3].item(), math.cos(7 / 100 ** (2 / 6)), abs_tol=1e-6)
    odd = ab.sinusoidal_encoding(5, 5)
    assert odd.shape == (5, 5)
    assert math.isclose(odd[3, 2].item(), math.sin(3 / 10000 ** (2 / 5)), abs_tol=1e-6)
    assert math.isclose(odd[3, 3].item(), math.cos(3 / 10000 ** (2 / 5)), abs_tol=1e-6)
    assert math.isclose(odd[3, 4].item(), math.sin(3 / 10000 ** (4 / 5)), abs_tol=1e-6)


def test_every_position_vector_has_length_sqrt_of_half_the_width():
    table = ab.sinusoidal_encoding(100, 32)
    torch.testing.assert_close(table.norm(dim=1), torch.full((100,), math.sqrt(16)))


@pytest.mark.parametrize("offset", [0, 1, 5, 37, -3])
def test_offset_rotation_moves_every_position_by_the_offset(offset):
    table = ab.sinusoidal_encoding(300, 16).double()
    M = offset_rotation(16, offset)
    if offset >= 0:
        torch.testing.assert_close(table[: 300 - offset] @ M, table[offset:], atol=1e-6, rtol=0)
    else:
        torch.testing.assert_close(table[-offset:] @ M, table[:offset], atol=1e-6, rtol=0)


def test_offset_rotation_is_orthogonal_block_diagonal_and_composes():
    M = offset_rotation(12, 4)
    torch.testing.assert_close(M @ M.T, torch.eye(12, dtype=torch.float64))
    off_blocks = M.clone()
    for i in range(6):
        off_blocks[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = 0
    assert off_blocks.abs().max() == 0
    torch.testing.assert_close(offset_rotation(12, 3) @ offset_rotation(12, 4), offset_rotation(12, 7))
    torch.testing.assert_close(offset_rotation(12, -4), M.T)  # moving back is the inverse
    torch.testing.assert_close(offset_rotation(12, 0), torch.eye(12, dtype=torch.float64))


def test_dot_product_of_positions_depends_only_on_their_distance():
    table = ab.sinusoidal_encoding(60, 32).double()
    similarity = table @ table.T
    for distance in (1, 7, 30):
        band = similarity.diagonal(distance)
        torch.testing.assert_close(band, torch.full_like(band, band[0].item()), atol=1e-6, rtol=0)
        torch.testing.assert_close(similarity.diagonal(-distance), band)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: ab.sinusoidal_encoding(4, 8, base=1.0), "base must be a number greater than 1"),
        (lambda: ab.sinusoidal_encoding(4, 8, base=-5), "base must be"),
        (lambda: ab.sinusoidal_encoding(0, 8), "num_positions must be a positive integer"),
        (lambda: offset_rotation(7, 1), "d_model must be even"),
        (lambda: offset_rotation(8, 1.5), "offset must be an integer"),
        (lambda: ab.LearnedPositionalEncoding(8, 0), "d_model must be a positive integer"),
        (lambda: ab.apply_rotary(torch.randn(4)), "at least 2 dimensions"),
        (lambda: ab.apply_rotary(torch.randn(3, 5)), "d must be even"),
        (lambda: ab.apply_rotary(torch.ones(3, 4, dtype=torch.long)), "floating-point"),
        (lambda: ab.rotate_half(torch.randn(3, 5)), "must be even"),
        (lambda: ab.SinusoidalPositionalEncoding(max_len=4, d_model=8)(torch.randn(1, 6, 8)), r"6 tokens .* max_len=4"),
    ],
)
def test_bad_input_raises_a_value_error_that_says_what_was_expected(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_learned_positions_know_only_max_len_positions_and_add_one_vector_per_position():
    layer = ab.LearnedPositionalEncoding(max_len=6, d_model=4)
    x = torch.zeros(2, 5, 4)
    torch.testing.assert_close(layer(x), layer.embedding.weight[:5].expand(2, 5, 4))
    with pytest.raises(ValueError, match="7 tokens .* max_len=6"):
        layer(torch.zeros(1, 7, 4))


def test_sinusoidal_module_adds_the_table_with_the_chosen_base():
    layer = ab.SinusoidalPositionalEncoding(max_len=10, d_model=8, base=100.0)
    torch.testing.assert_close(layer(torch.zeros(1, 10, 8))[0], ab.sinusoidal_encoding(10, 8, base=100.0))


def test_rotary_rotates_pairs_like_the_offset_matrix_and_keeps_lengths():
    x = torch.randn(6, 8, dtype=torch.float64)
    rotated = ab.apply_rotary(x)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    for p in range(6):
        # rotating the column vector (x_2i, x_2i+1) by +angle = the row vector times the transposed block
        torch.testing.assert_close(rotated[p], x[p] @ offset_rotation(8, p).T, atol=1e-6, rtol=1e-6)


def test_rotary_scores_depend_only_on_the_offset_for_every_pair_of_positions():
    generator = torch.Generator().manual_seed(1)
    q, k = torch.randn(1, 16, generator=generator), torch.randn(1, 16, generator=generator)
    scores = ab.apply_rotary(q.expand(12, 16)) @ ab.apply_rotary(k.expand(12, 16)).T  # (12, 12)
    for offset in range(-11, 12):
        band = scores.diagonal(offset)
        torch.testing.assert_close(band, torch.full_like(band, band[0].item()), atol=1e-4, rtol=1e-5)


# ---------------------------------------------------------------------------------
# Why positions are needed: chapter 5's word-order task


def test_a_model_without_positions_scores_exactly_half_on_twins_whatever_its_weights():
    task = ab.WordOrderTask(64, seed=2)
    batch = {"tokens": task.tokens, "padding_mask": task.padding_mask, "label": task.labels}
    for seed in range(3):
        torch.manual_seed(seed)
        model = ab.EncoderClassifier(
            len(task.vocab), 2, positional=None, d_model=16, num_heads=2, d_ff=32, num_layers=1
        ).eval()
        with torch.no_grad():
            logits = model(task.tokens, task.padding_mask)
        torch.testing.assert_close(logits[0::2], logits[1::2], atol=1e-5, rtol=1e-5)  # twins look identical
        correct, total = ab.classification_accuracy(model, batch)
        assert (correct, total) == (32, 64)
        assert ab.classification_loss(model, batch).item() >= 0.6931 - 1e-4  # never better than a coin flip on average


def test_a_model_with_positions_learns_the_order_in_a_few_dozen_steps(one_thread):
    train, valid = ab.WordOrderTask(2000, seed=1), ab.WordOrderTask(400, seed=2)
    ab.set_seed(0)
    model = ab.EncoderClassifier(
        len(train.vocab), 2, positional="sinusoidal", d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=8
    )
    ab.fit(
        model,
        DataLoader(train, batch_size=64, shuffle=True),
        ab.classification_loss,
        epochs=3,
        lr=3e-3,
        valid_loader=DataLoader(valid, batch_size=400),
        metric_fn=ab.classification_accuracy,
        target=0.97,
        progress=False,
        device="cpu",
    )
    assert ab.evaluate(model, DataLoader(valid, batch_size=400), ab.classification_accuracy) >= 0.95
