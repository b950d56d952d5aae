"""Exercises of chapter 5, "Positional encoding".

5.1 Build the sinusoidal table.
5.2 The matrix that moves a position vector k positions on.
5.3 Twins: a different sequence that every encoder without positions pools to the same vector.
5.4 Measure what is lost: the best accuracy a model that sees only the bag of tokens can reach.

Each checker tests the answer on fresh random inputs against the reference
(:func:`~attention_book.sinusoidal_encoding`, :func:`~attention_book.positional.offset_rotation`,
:func:`~attention_book.analysis.baselines.best_invariant_accuracy`) and recognises typical
wrong answers by what they compute.
"""

from __future__ import annotations

import math
import numbers
import re
from collections import Counter, defaultdict

import torch
from torch import nn

from ..analysis.baselines import best_invariant_accuracy as reference_best_invariant_accuracy
from ..positional import offset_rotation, sinusoidal_encoding
from ..transformer import Encoder
from ._core import (
    ExerciseFailure,
    Inconclusive,
    Mistake,
    Property,
    add_properties,
    call,
    diagnose,
    name_sizes,
    probe_from_check,
    probe_tensor,
    random_generator,
    register,
    require_tensor_like,
)

# ---------------------------------------------------------------------------------
# 5.1 The sinusoidal table


def _table_from_angles(num_positions: int, d_model: int, angle, *, layout: str = "interleaved", first: str = "sin"):
    """A (P, d) table from ``angle(p, column)``: sines/cosines interleaved or in two halves."""
    table = torch.zeros(num_positions, d_model, dtype=torch.float64)
    positions = torch.arange(num_positions, dtype=torch.float64)
    for column in range(d_model):
        if layout == "interleaved":
            kind = ("sin", "cos")[column % 2]
        else:
            kind = "sin" if column < d_model // 2 else "cos"
        if first == "cos":
            kind = {"sin": "cos", "cos": "sin"}[kind]
        values = angle(positions, column)
        table[:, column] = torch.sin(values) if kind == "sin" else torch.cos(values)
    return table.float()


def _sinusoidal_table_solution(num_positions: int, d_model: int) -> torch.Tensor:
    """The (num_positions, d_model) table: PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(same)."""
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d/2,): 0, 2, 4, ...
    angles = positions / 10000 ** (two_i / d_model)  # (P, d/2)
    table = torch.zeros(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.float()


def _table_sin_cos_swapped(num_positions, d_model):
    return _table_from_angles(num_positions, d_model, lambda p, c: p / 10000 ** (2 * (c // 2) / d_model), first="cos")


def _table_exponent_i(num_positions, d_model):
    return _table_from_angles(num_positions, d_model, lambda p, c: p / 10000 ** ((c // 2) / d_model))


def _table_exponent_column(num_positions, d_model):
    return _table_from_angles(num_positions, d_model, lambda p, c: p / 10000 ** (c / d_model))


def _table_multiplied(num_positions, d_model):
    return _table_from_angles(num_positions, d_model, lambda p, c: p * 10000 ** (2 * (c // 2) / d_model))


def _table_halves(num_positions, d_model):
    half = d_model // 2
    return _table_from_angles(
        num_positions, d_model, lambda p, c: p / 10000 ** (2 * (c % half) / d_model), layout="halves"
    )


def _table_from_one(num_positions, d_model):
    return _table_from_angles(num_positions, d_model, lambda p, c: (p + 1) / 10000 ** (2 * (c // 2) / d_model))


def _table_transposed(num_positions, d_model):
    return _sinusoidal_table_solution(num_positions, d_model).T


def _check_table_shape(table, num_positions: int, d_model: int) -> None:
    if isinstance(table, torch.Tensor) and tuple(table.shape) == (num_positions, d_model // 2, 2):
        raise ExerciseFailure(
            f"your table has shape {tuple(table.shape)}: each pair's sine and cosine sit in a last axis of 2. Flatten the "
            f"last two axes (reshape({num_positions}, {d_model})), so column 2i holds the sine and 2i + 1 the cosine"
        )
    if (
        isinstance(table, torch.Tensor)
        and tuple(table.shape) == (d_model, num_positions)
        and torch.allclose(table.detach().double(), sinusoidal_encoding(d_model, num_positions).double(), atol=1e-5)
    ):
        raise ExerciseFailure(
            f"your table has shape ({d_model}, {num_positions}): it is the table of {d_model} positions and {num_positions} "
            "dimensions, so your function reads its arguments in the other order: the signature is "
            "sinusoidal_table(num_positions, d_model)"
        )
    if isinstance(table, torch.Tensor) and tuple(table.shape) == (d_model, num_positions):
        raise ExerciseFailure(
            f"your table has shape ({d_model}, {num_positions}) but should have shape ({num_positions}, {d_model}): "
            "it is transposed. One ROW per position, one column per dimension"
        )


def _check_sinusoidal_table(answer) -> None:
    generator = random_generator()
    # Case 1: a random size with several pairs, so that every mistake shows.
    while True:
        num_positions = int(torch.randint(8, 41, (), generator=generator))
        d_model = 2 * int(torch.randint(3, 17, (), generator=generator))
        if num_positions != d_model:
            break
    table = call(answer, num_positions, d_model)
    _check_table_shape(table, num_positions, d_model)
    expected = sinusoidal_encoding(num_positions, d_model)
    mistakes = {
        "sines belong in the even columns (0, 2, 4, ...) and cosines in the odd ones; you swapped them": _table_sin_cos_swapped,
        "the exponent is 2i / d_model, where i counts the PAIRS (column 2i and 2i + 1 share i); you used i / d_model": _table_exponent_i,
        "the sine and the cosine of one pair share one frequency: use the even column index 2i in the exponent for "
        "both columns 2i and 2i + 1, not each column's own index": _table_exponent_column,
        "divide the position by 10000^(2i / d_model) (the frequencies fall from column to column); you multiplied": _table_multiplied,
        "interleave sines and cosines: column 2i holds the sine and column 2i + 1 the cosine of pair i; you put all "
        "the sines first and all the cosines after them": _table_halves,
        "positions start at 0: row 0 must be sin(0) = 0 and cos(0) = 1": _table_from_one,
    }
    diagnose(
        table,
        expected,
        f"the table for num_positions={num_positions}, d_model={d_model}",
        known_mistakes={hint: wrong(num_positions, d_model) for hint, wrong in mistakes.items()},
    )
    # Case 2: a single pair, a single position, and a long table (far positions).
    for num_positions, d_model, atol in ((7, 2, 1e-5), (1, 8, 1e-5), (600, 16, 1e-4)):
        table = call(answer, num_positions, d_model)
        _check_table_shape(table, num_positions, d_model)
        diagnose(
            table,
            sinusoidal_encoding(num_positions, d_model),
            f"the table for num_positions={num_positions}, d_model={d_model}",
            atol=atol,
        )


register(
    "5.1",
    "The sinusoidal table",
    _check_sinusoidal_table,
    answer="sinusoidal_table",
    solution=_sinusoidal_table_solution,
    mistakes=[
        Mistake("sin and cos swapped", _table_sin_cos_swapped, "you swapped them"),
        Mistake("exponent i instead of 2i", _table_exponent_i, "you used i / d_model"),
        Mistake("exponent uses the column index", _table_exponent_column, "share one frequency"),
        Mistake("multiplied instead of divided", _table_multiplied, "you multiplied"),
        Mistake("sines and cosines in two halves", _table_halves, "interleave sines and cosines"),
        Mistake("positions start at 1", _table_from_one, "positions start at 0"),
        Mistake("transposed table", _table_transposed, "it is transposed"),
    ],
)

# ---------------------------------------------------------------------------------
# 5.2 Moving Δ positions on is a rotation


def _block_diagonal(d_model: int, angle_of_pair, *, transpose: bool = False, partner=None) -> torch.Tensor:
    """(d, d) matrix with a 2x2 rotation block [[cos, -sin], [sin, cos]] per pair (or its transpose)."""
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        a = angle_of_pair(i)
        first, second = (2 * i, 2 * i + 1) if partner is None else partner(i)
        c, s = math.cos(a), math.sin(a)
        block = [[c, -s], [s, c]] if not transpose else [[c, s], [-s, c]]
        matrix[first, first], matrix[first, second] = block[0]
        matrix[second, first], matrix[second, second] = block[1]
    return matrix


def _offset_matrix_solution(d_model: int, k: int) -> torch.Tensor:
    """The (d_model, d_model) matrix M with PE[p + k] = PE[p] @ M for every position p."""
    matrix = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = k / 10000 ** (2 * i / d_model)  # pair i turns by omega_i * k
        c, s = math.cos(angle), math.sin(angle)
        # Row vector (sin, cos) times [[c, -s], [s, c]] = (sin c + cos s, -sin s + cos c):
        # the sine and cosine of the angle plus omega_i * k.
        matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return matrix


def _offset_backwards(d_model, k):
    return _block_diagonal(d_model, lambda i: k / 10000 ** (2 * i / d_model), transpose=True)


def _offset_exponent_i(d_model, k):
    return _block_diagonal(d_model, lambda i: k / 10000 ** (i / d_model))


def _offset_same_angle(d_model, k):
    return _block_diagonal(d_model, lambda i: float(k))


def _offset_halves(d_model, k):
    half = d_model // 2
    return _block_diagonal(d_model, lambda i: k / 10000 ** (2 * i / d_model), partner=lambda i: (i, i + half))


def _check_offset_matrix(answer) -> None:
    generator = random_generator()
    d_model = 2 * int(torch.randint(3, 9, (), generator=generator))
    k = int(torch.randint(1, 21, (), generator=generator))
    matrix = call(answer, d_model, k)
    expected = offset_rotation(d_model, k)
    if isinstance(matrix, torch.Tensor) and tuple(matrix.shape) == (2, 2):
        raise ExerciseFailure(
            f"for d_model={d_model} you returned one 2 x 2 block: M is ({d_model}, {d_model}), block-diagonal with one "
            "block per pair, each turning its pair by its own angle k omega_i"
        )
    mistakes = {
        "your matrix moves BACK k positions (it rotates each pair by -omega_i k). With positions as rows, "
        "PE[p + k] = PE[p] @ M needs the block [[cos, -sin], [sin, cos]]; yours is its transpose, the block for column "
        "vectors": _offset_backwards(d_model, k),
        "pair i turns by the angle k / 10000^(2i / d_model); your exponent uses i / d_model": _offset_exponent_i(
            d_model, k
        ),
        "each pair turns at its own frequency omega_i = 1 / 10000^(2i / d_model): the angle is omega_i * k, "
        "not k for every pair": _offset_same_angle(d_model, k),
        "pair i sits in columns 2i and 2i + 1 (interleaved), so its block couples those two columns, not "
        "columns i and i + d_model / 2": _offset_halves(d_model, k),
    }
    diagnose(
        matrix,
        expected,
        f"your matrix for d_model={d_model}, k={k}",
        known_mistakes={hint: wrong.float() for hint, wrong in mistakes.items()},
        atol=1e-5,
    )
    # Behaviour: it moves every row of the table k positions on, far from the start too.
    table = sinusoidal_encoding(400 + k, d_model).double()
    moved = table[:400] @ require_tensor_like(matrix, expected, "your matrix").double()  # (400, d)
    if not torch.allclose(moved, table[k:], atol=1e-4):
        raise ExerciseFailure(f"PE[p] @ M differs from PE[p + {k}] for some positions p below 400")
    # Zero and negative offsets: no move, and moving backwards.
    for offset in (0, -int(torch.randint(1, 8, (), generator=generator))):
        matrix = call(answer, d_model, offset)
        diagnose(matrix, offset_rotation(d_model, offset), f"your matrix for d_model={d_model}, k={offset}", atol=1e-5)


register(
    "5.2",
    "Moving Δ positions on is a rotation",
    _check_offset_matrix,
    answer="offset_matrix",
    solution=_offset_matrix_solution,
    mistakes=[
        Mistake("rotation by -k (transposed blocks)", _offset_backwards, "moves BACK k positions"),
        Mistake("exponent i instead of 2i", _offset_exponent_i, "your exponent uses i / d_model"),
        Mistake("the same angle for every pair", _offset_same_angle, "each pair turns at its own frequency"),
        Mistake("pairs in two halves", _offset_halves, "interleaved"),
    ],
)

# ---------------------------------------------------------------------------------
# 5.3 Twins that no order-blind model can tell apart


def _order_blind_twins_solution(tokens: torch.Tensor) -> torch.Tensor:
    """Every row's tokens moved one place on (the last comes first): the same tokens, so the same pooled vector
    without positions, and a different sequence unless every token of the row is the same."""
    return tokens.roll(1, dims=1)


def _twins_reversed(tokens):
    return tokens.flip(1)


def _twins_as_given(tokens):
    return tokens.clone()


def _twins_rows_reversed(tokens):
    return tokens.flip(0)


def _twins_rolled_flat(tokens):
    return tokens.roll(1)  # without dims the batch is flattened: tokens move between rows


def _twins_swapped_through_views(tokens):
    twins = tokens.clone()
    twins[:, 0], twins[:, 1] = twins[:, 1], twins[:, 0]  # twins[:, 1] is a view: it is overwritten first
    return twins


def _twins_shifted_in_zeros(tokens):
    return torch.cat([tokens[:, 1:], torch.zeros_like(tokens[:, :1])], dim=1)  # a shift, as for next-token targets


def _distinct_tokens(batch: int, T: int, vocab_size: int, *, generator: torch.Generator) -> torch.Tensor:
    """(batch, T) ids from 1 to vocab_size - 1 (0 is PAD), all different within a row."""
    return torch.stack([torch.randperm(vocab_size - 1, generator=generator)[:T] + 1 for _ in range(batch)])


def _careless_rows(vocab_size: int, generator: torch.Generator) -> torch.Tensor:
    """Six rows of 5 tokens, each of which some careless reorder leaves as it is, in random order: a palindrome,
    a sorted row, a row whose first two tokens are equal, one odd token last, one odd token first, and a random row
    that holds a token twice."""
    a, b, c, d, e = _distinct_tokens(1, 5, vocab_size, generator=generator)[0].tolist()
    rows = [
        [a, b, c, b, a],
        sorted([a, b, c, d, e]),
        [a, a, b, c, d],
        [c, c, c, c, d],
        [e, b, b, b, b],
        [d, a, e, c, a],
    ]
    return torch.tensor(rows)[torch.randperm(len(rows), generator=generator)]


TWIN_HINTS = {
    "unchanged": "came back unchanged",
    "palindrome": "a palindrome",
    "rows": "holds the tokens of row",
    "flattened": "torch.roll without dims",
    "view": "is a view",
    "bag": "sees which tokens occur",
    "kept": "keep every token of the row and change only where each one sits",
    "in place": "you changed tokens in place",
}


def _blind_encoders(vocab_size: int, generator: torch.Generator) -> list[Encoder]:
    """Three random encoders without positions (1, 2 and 1 layers) and, last, the first one's weights with
    sinusoidal positions."""
    encoders = []
    for layers in (1, 2, 1):
        torch.manual_seed(int(torch.randint(0, 2**31 - 1, (), generator=generator)))  # check() restores the state
        encoders.append(
            Encoder(vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=layers, positional=None).eval()
        )
    with_positions = Encoder(
        vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=16, positional="sinusoidal"
    )
    with_positions.load_state_dict(encoders[0].state_dict())
    return [*encoders, with_positions.eval()]


def _pooled(encoder: Encoder, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return encoder(tokens).mean(dim=1).double()  # (N, d_model): the mean over the tokens


def _as_twins(result, tokens: torch.Tensor) -> torch.Tensor:
    """The answer as a (N, T) tensor of token ids; a list, floats or another shape is explained."""
    shape = tuple(tokens.shape)
    if isinstance(result, (list, tuple)) and result and all(isinstance(row, torch.Tensor) for row in result):
        raise ExerciseFailure(
            f"your function returned a {type(result).__name__} of {len(result)} tensors: return one tensor of shape "
            f"{shape}, one twin per row (torch.stack(rows))"
        )
    if not isinstance(result, torch.Tensor):
        raise ExerciseFailure(
            f"your function should return a tensor of token ids of shape {shape}, but returned a {type(result).__name__}"
        )
    if result.is_floating_point() or result.is_complex() or result.dtype == torch.bool:
        raise ExerciseFailure(f"your twins are of dtype {result.dtype}: token ids are whole numbers (torch.long)")
    if tuple(result.shape) != shape:
        raise ExerciseFailure(
            f"for tokens of shape {shape} your function returned shape {tuple(result.shape)}: return one twin per row, "
            "of the same length as the row (a twin has the same tokens)"
        )
    return result.detach().long()


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _bag_hint(
    row: int, given: list[int], twin: list[int], *, batch: torch.Tensor, twins: torch.Tensor, moved: str
) -> str:
    """Why row ``row``'s twin holds other tokens than the row: another row's, tokens from the next row, a swap
    through views, or a token lost or gained."""
    what = f"row {row}, {given}, came back as {twin}"

    def bags(rows: torch.Tensor) -> list[tuple[int, ...]]:
        return sorted(tuple(sorted(tokens)) for tokens in rows.tolist())

    others = [other for other in range(len(batch)) if other != row and Counter(batch[other].tolist()) == Counter(twin)]
    if others and bags(batch) == bags(twins):  # the twins are the rows, each moved to another row
        return (
            f"{what}: it {TWIN_HINTS['rows']} {others[0]}. Reorder the tokens within each row (along dim=1, the "
            "positions), not the rows (dim=0)"
        )
    if Counter(batch.flatten().tolist()) == Counter(twins.flatten().tolist()):
        return (
            f"{what}: tokens moved from one row to another ({TWIN_HINTS['flattened']} flattens the batch first; give "
            "dims=1). A twin holds its own row's tokens"
        )
    lost = sorted((Counter(given) - Counter(twin)).elements())
    gained = sorted((Counter(twin) - Counter(given)).elements())
    differ = [i for i, (a, b) in enumerate(zip(given, twin)) if a != b]
    if len(differ) == 1 and twin[differ[0]] in given:
        copied = twin[differ[0]]
        return (
            f"{what}: token {copied} {_times(Counter(twin)[copied])} where the row has it "
            f"{_times(Counter(given)[copied])}, and token {lost[0]} lost: one entry was copied onto another. A model "
            f"without positions {TWIN_HINTS['bag']} and how often, so its pooled vector moved ({moved}). A swap "
            f"written t[i], t[j] = t[j], t[i] does this: t[j] {TWIN_HINTS['view']} of t, overwritten before it is "
            "read; swap with index lists (t[:, [i, j]] = t[:, [j, i]]) or build a new tensor"
        )
    return (
        f"{what}: it lost {lost} and gained {gained}. A model without positions {TWIN_HINTS['bag']} and how often, so "
        f"its pooled vector moved ({moved}): {TWIN_HINTS['kept']}"
    )


def _fixed_order(batch: torch.Tensor, twins: torch.Tensor) -> list[int] | None:
    """The one order of positions the answer gave every row (twins[r] = batch[r][order]), if it did."""
    distinct = [row for row in range(len(batch)) if len(set(batch[row].tolist())) == batch.shape[1]]
    if not distinct:
        return None
    position = {token: index for index, token in enumerate(batch[distinct[0]].tolist())}
    order = [position.get(token, -1) for token in twins[distinct[0]].tolist()]
    if -1 in order or not torch.equal(batch[:, order], twins):
        return None
    return order


def _unchanged_hint(row: int, batch: torch.Tensor, twins: torch.Tensor) -> str:
    """Why row ``row`` came back as it was, from what the answer did to the other rows."""
    given = batch[row].tolist()
    what = f"row {row}, {given}, {TWIN_HINTS['unchanged']}"
    if torch.equal(twins, batch):
        return (
            f"every row {TWIN_HINTS['unchanged']}: a twin must be a different sequence with the same tokens (an order "
            "drawn at random can be the order the row already has: check that it changed the row)"
        )
    if torch.equal(twins, batch.flip(1)):
        return f"{what}: it is {TWIN_HINTS['palindrome']}, and reversing gives it back. Find a reorder that changes every row"
    if torch.equal(twins, batch.sort(dim=1).values):
        return f"{what}: it is sorted already, so sorting leaves it as it is. Find a reorder that changes every row"
    order = _fixed_order(batch, twins)
    if order is not None:
        moved = [index for index, source in enumerate(order) if source != index]
        return (
            f"{what}: your reorder moves the same positions in every row ({_positions(moved)}), and in this row they "
            f"hold equal tokens ({[given[index] for index in moved]}), so nothing changes. A reorder that moves every "
            "token changes any row that is not one token repeated"
        )
    return (
        f"{what}: a twin must be a different sequence. Reordering changes a row only if some token lands on a "
        "position that held another token; find one reorder that does that for every row with two different tokens"
    )


def _positions(indices: list[int]) -> str:
    return "positions " + ", ".join(map(str, indices)) if indices else "none of them"


def _moved(encoders: list[Encoder], batch: torch.Tensor, twins: torch.Tensor) -> torch.Tensor:
    """(N,): how far each twin's pooled vector lies from its row's, the most over the encoders given."""
    return torch.stack([(_pooled(e, twins) - _pooled(e, batch)).abs().amax(dim=1) for e in encoders]).amax(dim=0)


def _checked_twins(answer, batch: torch.Tensor, encoders: list[Encoder]) -> torch.Tensor:
    """The answer's twins of ``batch``, each holding its row's tokens in another order, the batch left as it was."""
    given = batch.clone()
    twins = _as_twins(call(answer, given), batch)
    vocab_size = encoders[0].embedding.tokens.num_embeddings
    for row in range(len(batch)):
        row_tokens, twin = batch[row].tolist(), twins[row].tolist()
        if Counter(row_tokens) != Counter(twin):
            if 0 <= min(twin) and max(twin) < vocab_size:
                moved = float(_moved(encoders[:-1], batch[row : row + 1], twins[row : row + 1])[0])
                shown = f"by up to {moved:.2g} in random encoders without positions"
            else:
                shown = f"and some of its ids are not tokens at all: the vocabulary is 0 to {vocab_size - 1}"
            raise ExerciseFailure(_bag_hint(row, row_tokens, twin, batch=batch, twins=twins, moved=shown))
    for row in range(len(batch)):
        if torch.equal(twins[row], batch[row]):
            raise ExerciseFailure(_unchanged_hint(row, batch, twins))
    if not torch.equal(given, batch):
        raise ExerciseFailure(
            f"{TWIN_HINTS['in place']}: the batch your function was given is not the batch it was called with any "
            "more. Build the twins in a new tensor (clone first, or index: tokens[:, order])"
        )
    return twins


def _check_order_blind_twins(answer) -> None:
    generator = random_generator()
    vocab_size = int(torch.randint(9, 15, (), generator=generator))
    encoders = _blind_encoders(vocab_size, generator)
    # Rows a careless reorder leaves as they are; rows of two tokens (whose one twin is the swap), drawn 20 times so
    # that a reorder drawn at random and not checked fails; and one longer row.
    batches = [_careless_rows(vocab_size, generator)]
    batches += [_distinct_tokens(4, 2, vocab_size, generator=generator) for _ in range(20)]
    batches.append(_distinct_tokens(1, 7, vocab_size, generator=generator))
    twins = [_checked_twins(answer, batch, encoders) for batch in batches]
    # By construction: every encoder without positions pools a row and its twin to the same vector, and the one with
    # positions tells them apart (the twins of each length in one batch).
    for length in sorted({batch.shape[1] for batch in batches}):
        rows = torch.cat([batch for batch in batches if batch.shape[1] == length])
        theirs = torch.cat([twin for batch, twin in zip(batches, twins) if batch.shape[1] == length])
        blind, apart = _moved(encoders[:-1], rows, theirs), _moved(encoders[-1:], rows, theirs)
        if (blind > 1e-5).any() or (apart < 1e-5).any():
            row = int((blind > 1e-5).float().argmax()) if (blind > 1e-5).any() else int(apart.argmin())
            raise ExerciseFailure(
                f"{rows[row].tolist()} and your twin {theirs[row].tolist()} hold the same tokens, yet the encoders "
                f"without positions pool them {float(blind[row]):.2g} apart and the one with positions "
                f"{float(apart[row]):.2g} apart: a twin must be the row's tokens in another order"
            )


register(
    "5.3",
    "Twins that no order-blind model can tell apart",
    _check_order_blind_twins,
    answer="order_blind_twins",
    solution=_order_blind_twins_solution,
    mistakes=[
        Mistake("the rows as they were", _twins_as_given, f"every row {TWIN_HINTS['unchanged']}"),
        Mistake("each row reversed", _twins_reversed, TWIN_HINTS["palindrome"]),
        Mistake("the rows reversed (flip(0))", _twins_rows_reversed, TWIN_HINTS["rows"]),
        Mistake("roll without dims", _twins_rolled_flat, TWIN_HINTS["flattened"]),
        Mistake("a swap through views", _twins_swapped_through_views, TWIN_HINTS["view"]),
        Mistake("shifted, a 0 filled in", _twins_shifted_in_zeros, TWIN_HINTS["kept"]),
    ],
)

# ---------------------------------------------------------------------------------
# 5.4 What is lost without order


def _best_invariant_accuracy_solution(tokens: torch.Tensor, labels: torch.Tensor) -> float:
    """Best accuracy of a model that sees only the multiset of tokens of each (N, T) row."""
    groups = defaultdict(Counter)  # multiset of tokens -> how often each label occurs
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(sorted(row))][label] += 1
    correct = sum(max(counts.values()) for counts in groups.values())  # majority label per bag
    return correct / len(labels)


def _grouped_by_sequence(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(row)][label] += 1
    return sum(max(c.values()) for c in groups.values()) / len(labels)


def _grouped_by_set(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[frozenset(row)][label] += 1
    return sum(max(c.values()) for c in groups.values()) / len(labels)


def _overall_majority(tokens, labels):
    return max(Counter(labels.tolist()).values()) / len(labels)


def _unweighted_group_mean(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(sorted(row))][label] += 1
    return sum(max(c.values()) / sum(c.values()) for c in groups.values()) / len(groups)


def _label_kept_per_bag(tokens, labels, which: str) -> float:
    """The accuracy of predicting, for every bag, the label of its first or last sequence."""
    kept, rows = {}, tokens.tolist()
    for row, label in zip(rows, labels.tolist()):
        bag = tuple(sorted(row))
        if which == "last" or bag not in kept:
            kept[bag] = label
    return sum(kept[tuple(sorted(row))] == label for row, label in zip(rows, labels.tolist())) / len(labels)


def _last_label_per_bag(tokens, labels):
    return _label_kept_per_bag(tokens, labels, "last")


def _first_label_per_bag(tokens, labels):
    return _label_kept_per_bag(tokens, labels, "first")


def _count_not_fraction(tokens, labels):
    return _best_invariant_accuracy_solution(tokens, labels) * len(labels)


def _as_number(result, what: str) -> float:
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if isinstance(result, bool) or not isinstance(result, numbers.Real) or not math.isfinite(float(result)):
        raise ExerciseFailure(f"{what} should be a number (a float), but your function returned {result!r}")
    return float(result)


_ACCURACY_MISTAKES = {
    "you grouped identical SEQUENCES; a model without positions cannot tell apart the same tokens in another order, "
    "so group by the multiset of tokens (for example the sorted tuple of the row)": _grouped_by_sequence,
    "repeated tokens count: 'a a b' and 'a b b' are different bags although they have the same set of tokens; "
    "group by the sorted tuple, not by a set": _grouped_by_set,
    "that is the accuracy of always predicting the most common label; a model without positions still sees WHICH "
    "tokens occur, so take the majority label within each bag of tokens": _overall_majority,
    "weight each bag by the number of its sequences: count the sequences the majority label gets right in every bag, "
    "then divide by the number of sequences": _unweighted_group_mean,
    "return a fraction between 0 and 1, not the number of sequences a model gets right": _count_not_fraction,
    "you kept the LAST label seen for each bag (a dict overwritten row by row); the best a model can do is the "
    "MAJORITY label of each bag, so count the labels per bag (e.g. a Counter) and take the most common": _last_label_per_bag,
    "you kept the FIRST label seen for each bag; the best a model can do is the MAJORITY label of each bag, so "
    "count the labels per bag (e.g. a Counter) and take the most common": _first_label_per_bag,
}


def _built_labelled_set(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """13 sequences in three bags, built so that the majority, first and last label per bag differ.

    Bag a (tokens 1 2 3, in random orders) has the labels 1 1 1 0 (first 1, last 0, majority 1), bag
    b (2 2 4) has 0 1 1 1 1 (first 0, last 1) and bag c (4 1 1) has 2 0 0 0 (first 2, last 0): the
    majority rule gets 10 of 13 right, the last label 8, the first 5, the overall majority 7. The
    bags' rows are interleaved at random, each bag's labels staying in this order.
    """
    bags = [([1, 2, 3], [1, 1, 1, 0]), ([2, 2, 4], [0, 1, 1, 1, 1]), ([4, 1, 1], [2, 0, 0, 0])]
    remaining = [list(labels) for _, labels in bags]
    rows, labels = [], []
    while any(remaining):
        open_bags = [index for index, left in enumerate(remaining) if left]
        bag = open_bags[int(torch.randint(0, len(open_bags), (), generator=generator))]
        order = torch.randperm(3, generator=generator).tolist()
        rows.append([bags[bag][0][i] for i in order])
        labels.append(remaining[bag].pop(0))
    return torch.tensor(rows), torch.tensor(labels)


def _labelled_set(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Short sequences over a few symbols, so bags repeat; labels depend on order, with noise."""
    N = int(torch.randint(40, 81, (), generator=generator))
    T = int(torch.randint(3, 5, (), generator=generator))
    tokens = torch.randint(1, 5, (N, T), generator=generator)
    labels = (tokens[:, 0] < tokens[:, -1]).long()
    flip = torch.rand(N, generator=generator) < 0.2
    labels = torch.where(flip, torch.randint(0, 3, (N,), generator=generator), labels)
    return tokens, labels


def _check_best_invariant_accuracy(answer) -> None:
    generator = random_generator()
    # Case 1: a random labelled set on which the answer and every known mistake give different numbers.
    for _ in range(200):
        tokens, labels = _labelled_set(generator)
        expected = reference_best_invariant_accuracy(tokens, labels)
        wrong = {hint: mistake(tokens, labels) for hint, mistake in _ACCURACY_MISTAKES.items()}
        values = sorted([expected, *wrong.values()])
        if all(later - earlier > 1e-6 for earlier, later in zip(values, values[1:])):
            break
    got = _as_number(call(answer, tokens.clone(), labels.clone()), "the accuracy")
    diagnose(
        torch.tensor([got], dtype=torch.float64),
        torch.tensor([expected], dtype=torch.float64),
        f"the best accuracy for {len(labels)} random sequences of {tokens.shape[1]} tokens",
        known_mistakes={hint: torch.tensor([value], dtype=torch.float64) for hint, value in wrong.items()},
        atol=1e-6,
        rtol=0.0,
    )
    # Case 2: a set built so that the majority, first and last label of a bag all give different answers.
    tokens, labels = _built_labelled_set(generator)
    expected = reference_best_invariant_accuracy(tokens, labels)
    got = _as_number(call(answer, tokens.clone(), labels.clone()), "the accuracy")
    diagnose(
        torch.tensor([got], dtype=torch.float64),
        torch.tensor([expected], dtype=torch.float64),
        f"the best accuracy for {len(labels)} sequences in three bags (labels 1 1 1 0, 0 1 1 1 1 and 2 0 0 0)",
        known_mistakes={
            hint: torch.tensor([float(m(tokens, labels))], dtype=torch.float64)
            for hint, m in _ACCURACY_MISTAKES.items()
        },
        atol=1e-6,
        rtol=0.0,
    )
    # Case 3: twins (the same tokens in two orders, opposite labels) leave exactly a coin flip.
    rows = _distinct_tokens(10, T=5, vocab_size=9, generator=generator)
    twins = torch.cat([rows, rows.flip(1)])
    twin_labels = torch.cat([torch.ones(10, dtype=torch.long), torch.zeros(10, dtype=torch.long)])
    got = _as_number(call(answer, twins, twin_labels), "the accuracy")
    if abs(got - 0.5) > 1e-6:
        raise ExerciseFailure(
            f"for 10 sequences and their reversals with opposite labels the answer is 0.5 (each bag holds one of each "
            f"label), but your function returned {got:.4g}"
        )
    # Case 4: labels that depend only on the bag (the parity of the sum) lose nothing.
    tokens = torch.randint(1, 6, (30, 4), generator=generator)
    got = _as_number(call(answer, tokens, tokens.sum(dim=1) % 2), "the accuracy")
    if abs(got - 1.0) > 1e-6:
        raise ExerciseFailure(
            f"when the label depends only on which tokens occur (here the parity of their sum) nothing is lost and "
            f"the answer is 1.0, but your function returned {got:.4g}"
        )


register(
    "5.4",
    "What is lost without order",
    _check_best_invariant_accuracy,
    answer="best_bag_accuracy",
    solution=_best_invariant_accuracy_solution,
    mistakes=[
        Mistake("grouped by sequence", _grouped_by_sequence, "you grouped identical SEQUENCES"),
        Mistake("grouped by set", _grouped_by_set, "repeated tokens count"),
        Mistake("overall majority", _overall_majority, "always predicting the most common label"),
        Mistake("unweighted mean over bags", _unweighted_group_mean, "weight each bag by the number of its sequences"),
        Mistake("count instead of fraction", _count_not_fraction, "return a fraction between 0 and 1"),
        Mistake("last label per bag", _last_label_per_bag, "you kept the LAST label"),
        Mistake("first label per bag", _first_label_per_bag, "you kept the FIRST label"),
    ],
)

# ---------------------------------------------------------------------------------
# 5.5 Add positions to token embeddings


def _add_positions_solution(embeddings: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """embeddings (batch, T, d_model) plus the first T rows of table (num_positions, d_model)."""
    T = embeddings.shape[1]
    return embeddings + table[:T]  # (batch, T, d) + (T, d): the table broadcasts over the batch


def _positions_by_batch(embeddings, table):
    return embeddings + table[: embeddings.shape[0], None, :]  # position b added to every token of sequence b


def _positions_concatenated(embeddings, table):
    batch, T, _ = embeddings.shape
    return torch.cat([embeddings, table[:T].expand(batch, -1, -1)], dim=-1)


def _positions_from_one(embeddings, table):
    T = embeddings.shape[1]
    return embeddings + table[1 : T + 1]


def _positions_reversed(embeddings, table):
    T = embeddings.shape[1]
    return embeddings + table[:T].flip(0)


def _whole_table(embeddings, table):
    return embeddings + table  # breaks (or is right only by luck) unless num_positions == T


_ADD_HINTS = {
    "by_batch": "you added position b to every token of sequence b (a table row per SEQUENCE); the row belongs to the "
    "token's position t: table[:T] has shape (T, d_model) and broadcasts over the batch axis",
    "concatenated": "you concatenated the positions to the features (2 d_model columns); add them, so each token "
    "stays a d_model-vector",
    "from_one": "positions start at 0: token t gets row t of the table, table[:T], not table[1:T + 1]",
    "reversed": "the positions run backwards: token t gets row t, not row T - 1 - t",
}


def _check_add_positions(answer) -> None:
    generator = random_generator()
    # (batch, T, num_positions, d_model): batch != T; a table longer than the sequences; batch == T
    # (where mixing up the two axes still broadcasts); one token; a table exactly T long.
    for batch, T, num_positions, d_model in [(3, 5, 9, 4), (4, 4, 6, 6), (2, 1, 7, 3), (1, 6, 6, 8)]:
        embeddings = torch.randn(batch, T, d_model, generator=generator)
        table = torch.randn(num_positions, d_model, generator=generator)
        where = f"for embeddings of shape {(batch, T, d_model)} and a table of {num_positions} positions"
        given = embeddings.clone()  # handed over and compared afterwards: it must not change
        name_sizes(batch=batch, T=T, num_positions=num_positions, d_model=d_model)
        try:
            got = call(answer, given, table.clone())
        except RuntimeError as error:
            # Only the whole table meets the tokens as num_positions rows against T positions, on the position
            # axis (1 of 3, or -2); any other broadcasting error is explained from its sizes by check().
            sizes = re.search(
                r"tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)",
                str(error),
            )
            if (
                sizes
                and num_positions != T
                and {int(sizes[1]), int(sizes[2])} == {T, num_positions}
                and int(sizes[3]) == 1
            ):
                raise ExerciseFailure(
                    f"{where} your code raised RuntimeError ({str(error).splitlines()[0]}): on the position axis your "
                    f"table has {num_positions} rows, the whole table, against {T} tokens; take its first T rows, table[:T]"
                ) from None
            raise
        expected = _add_positions_solution(embeddings, table)
        known = {
            _ADD_HINTS["by_batch"]: _positions_by_batch(embeddings, table) if batch <= num_positions else None,
            _ADD_HINTS["concatenated"]: _positions_concatenated(embeddings, table),
            _ADD_HINTS["from_one"]: _positions_from_one(embeddings, table) if T < num_positions else None,
            _ADD_HINTS["reversed"]: _positions_reversed(embeddings, table),
        }
        diagnose(got, expected, f"the sum {where}", known_mistakes=known)
        if not torch.equal(given, embeddings):
            raise ExerciseFailure(
                "your function changed the embeddings it was given (in place): return a new tensor, "
                "embeddings + ..., not embeddings += ..."
            )


register(
    "5.5",
    "Add positions to token embeddings",
    _check_add_positions,
    answer="add_positions",
    solution=_add_positions_solution,
    mistakes=[
        Mistake("a table row per sequence", _positions_by_batch, "a table row per SEQUENCE"),
        Mistake("concatenated", _positions_concatenated, "you concatenated the positions"),
        Mistake("positions from 1", _positions_from_one, "positions start at 0"),
        Mistake("positions reversed", _positions_reversed, "the positions run backwards"),
        Mistake("the whole table", _whole_table, "the whole table"),
    ],
)

# ---------------------------------------------------------------------------------
# 5.6 Learned positions with a length check


class _LearnedPositionsSolution(nn.Module):
    """Adds a learned vector per position to (batch, T, d_model); refuses T > max_len with ValueError."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = max_len
        self.table = nn.Parameter(0.02 * torch.randn(max_len, d_model))  # (max_len, d_model): learned

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        if T > self.max_len:
            raise ValueError(f"the sequence has {T} tokens but this layer knows only max_len={self.max_len} positions")
        return x + self.table[:T]  # (batch, T, d) + (T, d)


class _PositionsWithoutCheck(_LearnedPositionsSolution):
    def forward(self, x):
        return x + self.table[: x.shape[1]]  # a longer x fails with a broadcasting RuntimeError


class _PositionsCheckOffByOne(_LearnedPositionsSolution):
    def forward(self, x):
        if x.shape[1] >= self.max_len:
            raise ValueError(f"the sequence has {x.shape[1]} tokens but max_len={self.max_len}")
        return x + self.table[: x.shape[1]]


class _PositionsNotLearned(nn.Module):
    def __init__(self, max_len, d_model):
        super().__init__()
        self.max_len = max_len
        self.register_buffer("table", 0.02 * torch.randn(max_len, d_model))

    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError(f"the sequence has {x.shape[1]} tokens but max_len={self.max_len}")
        return x + self.table[: x.shape[1]]


class _PositionsVagueError(_LearnedPositionsSolution):
    def forward(self, x):
        if x.shape[1] > self.max_len:
            raise ValueError("sequence too long")
        return x + self.table[: x.shape[1]]


class _PositionsWithAssert(_LearnedPositionsSolution):
    def forward(self, x):
        assert x.shape[1] <= self.max_len, "too long"
        return x + self.table[: x.shape[1]]


def _rows(table: torch.Tensor, max_len: int, d_model: int, *, model: nn.Module | None = None) -> torch.Tensor:
    """The table as (max_len, d_model): a (d_model, max_len) parameter used transposed is read transposed (for a
    square one, ``model`` tells: its output for zero inputs is the table as it is used)."""
    if tuple(table.shape) == (d_model, max_len):
        if d_model != max_len:
            return table.detach().T
        if model is not None:
            try:
                with torch.no_grad():
                    used = model(torch.zeros(1, max_len, d_model))[0]
            except Exception:  # the checker reports what this model does with max_len tokens
                used = None
            if used is not None and torch.allclose(used, table.detach().T) and not torch.allclose(used, table.detach()):
                return table.detach().T
    return table.detach().reshape(max_len, d_model)


def _position_table(model: nn.Module, max_len: int, d_model: int) -> nn.Parameter:
    """The one trainable parameter of max_len * d_model numbers (a Parameter or an nn.Embedding's weight)."""
    fitting = [p for p in model.parameters() if p.numel() == max_len * d_model]
    if not fitting:
        buffers = [name for name, b in model.named_buffers() if b.numel() == max_len * d_model]
        if buffers:
            raise ExerciseFailure(
                f"your table ({buffers[0]}) is a buffer, so training cannot change it: learned positions are a "
                "parameter, nn.Parameter(...) or nn.Embedding(max_len, d_model)"
            )
        raise ExerciseFailure(
            f"your module should hold one learned table of max_len x d_model = {max_len} x {d_model} numbers "
            f"(nn.Parameter or nn.Embedding); its parameters have sizes {[p.numel() for p in model.parameters()]}"
        )
    if sum(p.numel() for p in model.parameters()) != max_len * d_model:
        raise ExerciseFailure(
            f"your module has {sum(p.numel() for p in model.parameters())} parameters; a table of learned positions "
            f"has exactly max_len x d_model = {max_len * d_model}"
        )
    return fitting[0]


def _raised_by_the_student(error: BaseException) -> bool:
    """Whether the innermost frame of the error's traceback is the student's own code (their raise)."""
    from ._core import _is_library

    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and not _is_library(tb.tb_frame.f_code.co_filename)


def _check_refuses_one_token_too_many(model, generator: torch.Generator, *, max_len: int, d_model: int) -> None:
    """Part of 5.6: one token too many must raise a ValueError that names both lengths."""
    too_long = torch.randn(2, max_len + 1, d_model, generator=generator)
    try:
        call(model, too_long)
    except ValueError as error:
        text = str(error)
        if str(max_len + 1) not in text or str(max_len) not in text.replace(str(max_len + 1), ""):
            raise ExerciseFailure(
                f"your ValueError for a sequence of {max_len + 1} tokens says {text!r}; name both numbers, what was "
                f"given ({max_len + 1} tokens) and what is expected (at most max_len={max_len})"
            ) from None
        return
    except AssertionError:
        raise ExerciseFailure(
            "an assert is not a length check: it vanishes under python -O and raises AssertionError; raise "
            f"ValueError naming both numbers ({max_len + 1} tokens, max_len={max_len})"
        ) from None
    except Exception as error:
        own_check = (str(max_len) in str(error) and "must match" not in str(error)) or _raised_by_the_student(error)
        raise ExerciseFailure(
            f"a sequence of {max_len + 1} tokens (max_len={max_len}) should raise ValueError naming both numbers, "
            f"but your module raised {type(error).__name__}"
            + (
                f" ({str(error).splitlines()[0][:80]}): your check is there, but a too long input is a bad VALUE: raise ValueError"
                if own_check
                else ": there is no length check, so it failed further in"
            )
        ) from None
    raise ExerciseFailure(
        f"a sequence of {max_len + 1} tokens (max_len={max_len}) went through without an error; raise ValueError "
        "naming both numbers when T > max_len"
    )


def _check_learned_positions(answer) -> None:
    generator = random_generator()
    max_len, d_model = (
        int(torch.randint(5, 10, (), generator=generator)),
        int(torch.randint(2, 7, (), generator=generator)),
    )
    model = call(answer, max_len, d_model)
    if not isinstance(model, nn.Module):
        raise ExerciseFailure(
            f"LearnedPositions(max_len, d_model) should build a torch.nn.Module, but built a {type(model).__name__}"
        )
    table = _position_table(model, max_len, d_model)
    with torch.no_grad():
        table.copy_(torch.randn(table.shape, generator=generator))
    rows = _rows(table, max_len, d_model, model=model)
    # Lengths 1, a middle one and exactly max_len must work; each token gets the row of its position.
    for T in (1, max_len // 2 + 1, max_len):
        x = torch.randn(3, T, d_model, generator=generator)
        try:
            got = call(model, x.clone())
        except ValueError as error:
            raise ExerciseFailure(
                f"a sequence of {T} tokens with max_len={max_len} must work, but your module raised ValueError "
                f"({error}): the table has rows 0 to max_len - 1, so refuse only T > max_len"
            ) from None
        diagnose(
            got,
            x + rows[:T],
            f"the output for x of shape {(3, T, d_model)} (max_len={max_len})",
            known_mistakes={
                "positions start at 0: token t gets row t of the table": x + rows[1 : T + 1] if T < max_len else None,
                "you added position b to every token of sequence b; token t gets row t, broadcast over the batch": (
                    x + rows[:3, None, :] if 3 <= max_len else None
                ),
                "you returned the positions without x: add them to x, x + table[:T]": rows[:T].expand_as(x),
                "you scaled x by sqrt(d_model): this module only adds the positions, x + table[:T]": x
                * math.sqrt(d_model)
                + rows[:T],
            },
        )
    # Training moves exactly the rows of the positions that occur.
    model.zero_grad()
    T = max_len - 2
    call(model, torch.randn(2, T, d_model, generator=generator)).sum().backward()
    gradient = None
    if table.grad is not None:
        transposed = tuple(table.shape) == (d_model, max_len) and torch.equal(rows, table.detach().T)
        gradient = table.grad.T if transposed else table.grad.reshape(max_len, d_model)
    if gradient is None or not (gradient[:T] != 0).all():
        raise ExerciseFailure("the positions get no gradient: add the table's rows to x so training can change them")
    if (gradient[T:] != 0).any():
        raise ExerciseFailure(f"rows {T} and after get a gradient from a sequence of {T} tokens: add only table[:T]")
    _check_refuses_one_token_too_many(model, generator, max_len=max_len, d_model=d_model)


register(
    "5.6",
    "Learned positions with a length check",
    _check_learned_positions,
    answer="LearnedPositions",
    solution=_LearnedPositionsSolution,
    mistakes=[
        Mistake("no length check", _PositionsWithoutCheck, "there is no length check"),
        Mistake("check off by one", _PositionsCheckOffByOne, "so refuse only T > max_len"),
        Mistake("table not learned", _PositionsNotLearned, "is a buffer"),
        Mistake("error without the numbers", _PositionsVagueError, "name both numbers"),
        Mistake("assert instead of ValueError", _PositionsWithAssert, "an assert is not a length check"),
    ],
)


# ---------------------------------------------------------------------------------
# Properties (see _core's docstring): what an answer breaks, probed one idea at a time.


def _omega(i: int, d_model: int) -> float:
    return 1.0 / 10000 ** (2 * i / d_model)


def _table_start_probe(answer):
    table = probe_tensor(answer(6, 8), (6, 8))
    row = table[0]
    wanted = torch.tensor([0.0, 1.0] * 4, dtype=torch.float64)
    if torch.allclose(row, wanted, atol=1e-5):
        return None
    shown = [round(float(v), 3) for v in row]
    named = {
        "sines belong in the even columns (0, 2, 4, ...) and cosines in the odd ones; you swapped them": [1.0, 0.0] * 4,
        "interleave sines and cosines: column 2i holds the sine and column 2i + 1 the cosine of pair i; you put all the "
        "sines first and all the cosines after them": [0.0] * 4 + [1.0] * 4,
    }
    for cause, values in named.items():
        if torch.allclose(row, torch.tensor(values, dtype=torch.float64), atol=1e-5):
            return f"row 0 (position 0) of your 6 x 8 table is {shown}: {cause}"
    if torch.allclose(row, sinusoidal_encoding(2, 8)[1].double(), atol=1e-5):
        return f"row 0 of your 6 x 8 table is {shown}, position 1's row: positions start at 0, so row 0 is sin(0) = 0, cos(0) = 1"
    return (
        f"row 0 (position 0) of your 6 x 8 table is {[round(float(v), 3) for v in row]}; it must be (0, 1, 0, 1, ...): "
        "sin(0) = 0 in the even columns 2i and cos(0) = 1 in the odd columns 2i + 1, positions counted from 0"
    )


def _angles_table(P: int, d: int, angle) -> torch.Tensor:
    """The interleaved table whose pair i has the angle angle(p, i) at position p."""
    p = torch.arange(P, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)[None, :]
    angles = angle(p, i)
    table = torch.zeros(P, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return table


_FREQUENCY_SLIPS = {
    "pair i has the frequency of pair i + 1: the pairs are counted from 0, so the first pair (columns 0 and 1) turns by "
    "1 per position, omega_0 = 1 / 10000^0": lambda p, i, d: p / 10000 ** (2 * (i + 1) / d),
    "the exponent is 2i / d_model, not 2i / (d_model - 1)": lambda p, i, d: p / 10000 ** (2 * i / (d - 1)),
    "the exponent is 2i / d_model, where i counts the PAIRS (column 2i and 2i + 1 share i); you used i / d_model": lambda p, i, d: (
        p / 10000 ** (i / d)
    ),
    "you used log10 in the exp form: omega_i = exp(-ln(10000) 2i / d_model) needs the natural log (math.log)": lambda p, i, d: (
        p * torch.exp(-math.log10(10000.0) * 2 * i / d)
    ),
    "10000 ** 2i / d_model without parentheses is (10000^(2i)) / d_model: write 10000 ** (2i / d_model)": lambda p, i, d: (
        p / (10000 ** (2 * i) / d)
    ),
    "your angles have an extra factor pi: the angle is p / 10000^(2i / d_model), in radians, with no pi": lambda p, i, d: (
        math.pi * p / 10000 ** (2 * i / d)
    ),
    "your angles are whole numbers: // is floor division; divide the positions with /": lambda p, i, d: (
        p // 10000 ** (2 * i / d)
    ),
    "divide the position by 10000^(2i / d_model) (the frequencies fall from column to column); you multiplied": lambda p, i, d: (
        p * 10000 ** (2 * i / d)
    ),
    "the base is 10000, not 1000: omega_i = 1 / 10000^(2i / d_model)": lambda p, i, d: p / 1000 ** (2 * i / d),
}


def _table_frequency_probe(answer):
    P, d = 12, 8
    table = probe_tensor(answer(P, d), (P, d))
    if not torch.allclose(table, _angles_table(P, d, lambda p, i: p / 10000 ** (2 * i / d)), atol=1e-5):
        for cause, angle in _FREQUENCY_SLIPS.items():
            if torch.allclose(table, _angles_table(P, d, lambda p, i, angle=angle: angle(p, i, d)), atol=1e-5):
                return f"for a {P} x {d} table: {cause}"
    positions = torch.arange(P, dtype=torch.float64)
    for i in range(d // 2):
        omega = _omega(i, d)
        sine, cosine = table[:, 2 * i], table[:, 2 * i + 1]
        sin_ok = torch.allclose(sine, torch.sin(positions * omega), atol=1e-5)
        cos_ok = torch.allclose(cosine, torch.cos(positions * omega), atol=1e-5)
        if sin_ok and cos_ok:
            continue
        seen_sin = math.asin(max(-1.0, min(1.0, float(sine[1]))))  # the angle one position turns the sine by
        seen_cos = math.acos(max(-1.0, min(1.0, float(cosine[1]))))
        if sin_ok != cos_ok and abs(seen_sin - seen_cos) > 1e-4:
            return (
                f"columns {2 * i} and {2 * i + 1} (pair i = {i}) turn by {seen_sin:.4g} and {seen_cos:.4g} per position: the sine "
                f"and the cosine of one pair share one frequency omega_i = 1 / 10000^(2i / d_model) = {omega:.4g}"
            )
        if not sin_ok and torch.allclose(sine, torch.cos(positions * omega), atol=1e-5):
            return f"column {2 * i} holds a cosine: the even columns 2i hold sin(p omega_i), the odd columns 2i + 1 cos(p omega_i)"
        if not cos_ok and torch.allclose(cosine, torch.sin(positions * omega), atol=1e-5):
            return f"column {2 * i + 1} holds a sine: the odd columns 2i + 1 hold cos(p omega_i), not sin"
        return (
            f"pair i = {i} (columns {2 * i} and {2 * i + 1}) of your {P} x {d} table turns by {seen_sin:.4g} per position; its "
            f"frequency is omega_i = 1 / 10000^(2i / d_model) = 1 / 10000^({2 * i}/{d}) = {omega:.4g} (wavelengths grow "
            "geometrically from 2 pi to 10000 * 2 pi across the pairs)"
        )
    return None


def _table_arguments_probe(answer):
    table = answer(6, 8)
    if (
        isinstance(table, torch.Tensor)
        and tuple(table.shape) == (8, 6)
        and torch.allclose(table.detach().double(), sinusoidal_encoding(8, 6).double(), atol=1e-5)
    ):
        return (
            "for 6 positions and d_model = 8 you return the table of 8 positions and 6 dimensions: your function reads its "
            "arguments in the other order; the signature is sinusoidal_table(num_positions, d_model)"
        )
    return None


add_properties(
    "5.1",
    [
        Property("the arguments (num_positions, then d_model)", _table_arguments_probe),
        Property("position 0 (sin 0 = 0 in the even columns, cos 0 = 1 in the odd ones)", _table_start_probe),
        Property("the frequencies (pair i: sin and cos of p / 10000^(2i / d_model))", _table_frequency_probe),
    ],
)


def _offset_rotation_probe(answer):
    d, k = 8, 5
    M = probe_tensor(answer(d, k), (d, d))
    gram = M @ M.T
    error = float((gram - torch.eye(d, dtype=torch.float64)).abs().max())
    if error > 1e-5:
        return (
            f"your matrix for d_model = {d}, k = {k} is not a rotation: M M^T differs from the identity by {error:.3g}. Moving "
            "along the positions turns each (sin, cos) pair by an angle, which keeps lengths: blocks [[cos, -sin], [sin, cos]]"
        )
    return None


def _offset_move_probe(answer):
    d, k = 8, 5
    M = probe_tensor(answer(d, k), (d, d))
    table = sinusoidal_encoding(30, d).double()
    if torch.allclose(table[:20] @ M, table[k : 20 + k], atol=1e-5):
        return None
    turns = {
        "pair i turns at the frequency of pair i + 1: count the pairs from 0 (pair 0 turns by k)": lambda i: (
            k * _omega(i + 1, d)
        ),
        f"your matrix moves k + 1 = {k + 1} positions, one too many: pair i turns by k omega_i": lambda i: (
            (k + 1) * _omega(i, d)
        ),
        "your angles are in degrees: math.cos and math.sin take radians, so turn pair i by k omega_i itself": lambda i: (
            math.radians(k * _omega(i, d))
        ),
        "the base is 10000: omega_i = 1 / 10000^(2i / d_model)": lambda i: k / 1000 ** (2 * i / d),
        "pair i turns by the angle k / 10000^(2i / d_model); your exponent uses i / d_model": lambda i: (
            k / 10000 ** (i / d)
        ),
        "each pair turns at its own frequency omega_i = 1 / 10000^(2i / d_model): the angle is omega_i * k, not k for "
        "every pair": lambda i: float(k),
        "the sine and the cosine are swapped in your blocks (they turn by a quarter turn minus the angle): the block is "
        "[[cos, -sin], [sin, cos]] of the angle k omega_i": lambda i: math.pi / 2 - k * _omega(i, d),
    }
    for cause, turn in turns.items():
        if torch.allclose(M, _block_diagonal(d, turn), atol=1e-5):
            return f"for d_model = {d}, k = {k}: {cause}"
    for i in range(d // 2):
        outside = M[2 * i : 2 * i + 2].clone()
        outside[:, 2 * i : 2 * i + 2] = 0
        if outside.abs().max() > 1e-6:
            return (
                f"row {2 * i} or {2 * i + 1} of your matrix reaches outside the block of pair i = {i}: pair i sits in columns "
                f"2i and 2i + 1 and turns on its own, so M is block-diagonal with 2 x 2 blocks"
            )
        block = M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2]
        turned = math.atan2(float(block[1, 0]), float(block[0, 0]))
        wanted = math.remainder(k * _omega(i, d), 2 * math.pi)
        if abs(math.remainder(turned - wanted, 2 * math.pi)) > 1e-5:
            backwards = abs(math.remainder(turned + wanted, 2 * math.pi)) < 1e-5
            return (
                f"pair i = {i} is turned by {turned:.4g} rad, but moving k = {k} positions on turns it by k omega_i = "
                f"{k} / 10000^({2 * i}/{d}) = {k * _omega(i, d):.4g} rad ({wanted:.4g} rad after whole turns)"
                + (
                    ": yours turns backwards; with positions as rows (PE[p] @ M) the block is [[cos, -sin], [sin, cos]]"
                    if backwards
                    else ""
                )
            )
    return f"PE[p] @ M differs from PE[p + {k}]: each pair's block must turn it by k omega_i"


add_properties(
    "5.2",
    [
        Property("a rotation (each pair turns, lengths stay: M M^T = I)", _offset_rotation_probe),
        Property("moving k positions on (PE[p] @ M = PE[p + k]: pair i turns by k omega_i)", _offset_move_probe),
    ],
)


def _accuracy_of(answer, rows, labels) -> float:
    result = answer(torch.tensor(rows), torch.tensor(labels))
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise Inconclusive("not a number")
    return float(result)


def _bags_by_count(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(sorted(row))][label] += 1
    return sum(max(c.values()) for c in groups.values()) / len(groups)


def _largest_label_per_bag(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(sorted(row))][label] += 1
    return sum(c[max(c)] for c in groups.values()) / len(labels)


def _least_common_per_bag(tokens, labels):
    groups = defaultdict(Counter)
    for row, label in zip(tokens.tolist(), labels.tolist()):
        groups[tuple(sorted(row))][label] += 1
    return sum(min(c.values()) for c in groups.values()) / len(labels)


_ACCURACY_SLIPS = {
    **_ACCURACY_MISTAKES,
    "you divided the sequences the majority gets right by the number of BAGS: divide by the number of sequences": _bags_by_count,
    "you predicted the LARGEST label value of each bag; the best model predicts its most COMMON label: count the labels "
    "per bag": _largest_label_per_bag,
    "you counted the least common label of each bag; the best model predicts its most COMMON label": _least_common_per_bag,
}


def _slips_data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two labelled sets on which the reference and every slip give different accuracies."""
    generator = torch.Generator().manual_seed(66)
    sets = [_built_labelled_set(generator)]
    for _ in range(200):
        tokens, labels = _labelled_set(generator)
        values = sorted(
            [_best_invariant_accuracy_solution(tokens, labels)] + [f(tokens, labels) for f in _ACCURACY_SLIPS.values()]
        )
        if all(b - a > 1e-6 for a, b in zip(values, values[1:])):
            sets.append((tokens, labels))
            break
    return sets


def _accuracy_slips_probe(answer):
    data = _slips_data()
    got = [_accuracy_of(answer, tokens.tolist(), labels.tolist()) for tokens, labels in data]
    if all(abs(g - _best_invariant_accuracy_solution(t, y)) < 1e-6 for g, (t, y) in zip(got, data)):
        return None
    for cause, slip in _ACCURACY_SLIPS.items():
        if all(abs(g - slip(t, y)) < 1e-6 for g, (t, y) in zip(got, data)):
            return f"on a labelled set of {len(data[-1][1])} sequences you return {got[-1]:.4g}: {cause}"
    return None


def _fraction_probe(answer):
    value = _accuracy_of(answer, [[1, 2, 3], [3, 2, 1], [2, 2, 1]], [0, 1, 1])
    if 0.0 <= value <= 1.0:
        return None
    return f"for 3 sequences your function returned {value:.4g}: an accuracy is a fraction between 0 and 1 (right answers divided by the number of sequences)"


def _bag_probe(answer):
    if _accuracy_of(answer, [[1, 2, 3], [1, 2, 3], [1, 2, 3]], [0, 0, 1]) == 1.0:
        return (
            "for three IDENTICAL sequences [1, 2, 3] with the labels 0, 0, 1 you return 1, as if each were its own bag: "
            "your groups never merge rows. A tuple of a tensor's elements hashes them by identity, not by value: "
            "convert each row with .tolist() first (tuple(sorted(row.tolist())))"
        )
    cases = [
        (
            [[1, 2, 3], [3, 2, 1]],
            [0, 1],
            0.5,
            "(1, 2, 3) and (3, 2, 1) hold the same tokens in another order, so a model without positions sees one bag and gets one of the two labels right",
        ),
        (
            [[1, 4], [2, 3]],
            [0, 1],
            1.0,
            "(1, 4) and (2, 3) are different bags of tokens (that their sums are equal does not matter), so each gets its own label",
        ),
        (
            [[1, 1, 2], [1, 2, 2]],
            [0, 1],
            1.0,
            "(1, 1, 2) and (1, 2, 2) are different bags (repeated tokens count), so each gets its own label",
        ),
        (
            [[1, 2, 3], [4, 2, 1]],
            [0, 1],
            1.0,
            "(1, 2, 3) and (4, 2, 1) share their first tokens but are different bags",
        ),
    ]
    for rows, labels, expected, why in cases:
        value = _accuracy_of(answer, rows, labels)
        if abs(value - expected) > 1e-6 and 0.0 <= value <= 1.0:
            return f"for the sequences {rows} with labels {labels} the best accuracy is {expected:g}, but you return {value:.4g}: {why}. Group rows by their multiset of tokens (the sorted tuple)"
    return None


def _majority_probe(answer):
    rows = [[1, 2, 3], [3, 1, 2], [2, 3, 1], [4, 4, 1], [1, 4, 4], [4, 1, 4]]
    labels = [1, 1, 0, 0, 0, 2]
    value = _accuracy_of(answer, rows, labels)
    if abs(value - 4 / 6) <= 1e-6 or not 0.0 <= value <= 1.0:
        return None
    why = {
        3 / 6: "you predicted the LARGEST label value of each bag (2 for the second); the best model predicts its most "
        "COMMON label",
        2 / 6: "you counted the least common label of each bag; the best model predicts its most COMMON label",
    }
    cause = next((text for target, text in why.items() if abs(value - target) < 1e-6), "")
    return (
        f"bag (1, 2, 3) has the labels 1, 1, 0 and bag (1, 4, 4) the labels 0, 0, 2: the best a model can do is the majority "
        f"label of each bag, right on 2 + 2 of 6 sequences = 0.667; you return {value:.4g}"
        + (f": {cause}" if cause else "")
        + ". Count the labels per bag (a Counter) and add up each bag's largest count"
    )


add_properties(
    "5.4",
    [
        Property("an accuracy (a fraction between 0 and 1)", _fraction_probe),
        Property("the usual slips (each named when the answer computes exactly it)", _accuracy_slips_probe),
        Property(
            "bags of tokens (the same tokens in any order are one bag; different multisets are different bags)",
            _bag_probe,
        ),
        Property("the majority label of each bag", _majority_probe),
    ],
)


def _adds_probe(answer):
    embeddings = _probe_embeddings()
    got = probe_tensor(answer(embeddings.clone(), torch.zeros(5, 4)), (2, 3, 4))
    if torch.allclose(got, embeddings.double(), atol=1e-6):
        return None
    return (
        "with an all-zero table the embeddings must come through unchanged (the positions are ADDED); yours change by up to "
        f"{float((got - embeddings.double()).abs().max()):.3g}: add the table's rows, do not multiply or replace"
    )


def _probe_embeddings() -> torch.Tensor:
    return torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 10


def _position_rows_probe(answer):
    batch, T, P, d = 2, 3, 5, 4
    table = (
        10.0 * torch.arange(1, P + 1, dtype=torch.float32)[:, None] ** 2 + torch.arange(d, dtype=torch.float32)[None, :]
    )
    got = probe_tensor(answer(torch.zeros(batch, T, d), table.clone()), (batch, T, d))
    rows = table.double()
    if torch.allclose(got, rows[:T].flip(0).expand(batch, T, d), atol=1e-5):
        return (
            f"with zero embeddings and a table of {P} positions, token t got row T - 1 - t: the positions run backwards; "
            "token t gets row t, table[:T]"
        )
    for b in range(batch):
        for t in range(T):
            if torch.allclose(got[b, t], rows[t], atol=1e-5):
                continue
            match = [p for p in range(P) if torch.allclose(got[b, t], rows[p], atol=1e-5)]
            factor = float(got[b, t].norm() / rows[t].norm())
            if not match and abs(factor - 1) > 1e-4 and torch.allclose(got[b, t], factor * rows[t], atol=1e-5):
                return (
                    f"with zero embeddings and a table of {P} positions, position {t} of sequence {b} got row {t} scaled "
                    f"by {factor:.4g}: add the table's rows as they are"
                )
            if match and match[0] == b:
                why = "a table row per SEQUENCE: the table's rows are positions, which run along axis 1 of the embeddings (batch, T, d_model), not axis 0"
            elif match:
                why = f"row {match[0]}: token t gets row t, the first T rows table[:T], counted from 0"
            elif torch.allclose(got[b, t], rows[:T].mean(dim=0), atol=1e-5) or torch.allclose(
                got[b, t], rows.mean(dim=0), atol=1e-5
            ):
                why = "the mean of the rows: each position gets its own row"
            else:
                why = "no single row of the table"
            return f"with zero embeddings and a table of {P} positions, position {t} of sequence {b} got {why}"
    return None


add_properties(
    "5.5",
    [
        Property("the positions are added (with a zero table the embeddings come through)", _adds_probe),
        Property("row t for position t (of every sequence: the table broadcasts over the batch)", _position_rows_probe),
    ],
)


def _learned_table_probe(answer):
    return probe_from_check(lambda a: _position_table(a(6, 4), 6, 4))(answer)


def _learned_rows_probe(answer):
    model = answer(6, 4)
    try:
        table = _position_table(model, 6, 4)
    except ExerciseFailure as failure:
        raise Inconclusive(str(failure)) from None
    rows = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    with torch.no_grad():
        table.copy_(rows.T if tuple(table.shape) == (4, 6) else rows.reshape(table.shape))
    got = probe_tensor(model(torch.zeros(2, 3, 4)), (2, 3, 4))
    for b in range(2):
        for t in range(3):
            if not torch.allclose(got[b, t], rows[t].double(), atol=1e-5):
                match = [p for p in range(6) if torch.allclose(got[b, t], rows[p].double(), atol=1e-5)]
                which = f"row {match[0]}" if match else "no single row"
                return (
                    f"with the table's row p set to (4p, ..., 4p + 3) and zero inputs, position {t} of sequence {b} got {which} of "
                    "the table: token t gets row t, table[:T], broadcast over the batch (axis 0) and added along the positions (axis 1)"
                )
    return None


def _length_check_probe(answer):
    for max_len, d_model in ((6, 4), (4, 6)):  # max_len above and below d_model
        model = answer(max_len, d_model)
        try:
            model(torch.zeros(1, max_len, d_model))
        except ValueError as error:
            return (
                f"a sequence of max_len = {max_len} tokens (d_model = {d_model}) must work, but your module raised ValueError "
                f"({str(error)[:60]}): the table has rows 0 to max_len - 1, so refuse only T > max_len"
            )
        try:
            model(torch.zeros(1, max_len + 1, d_model))
        except ValueError:
            continue
        except Exception as error:
            return _length_error_sentence(error, max_len=max_len)
        return (
            f"{max_len + 1} tokens with max_len = {max_len} went through: raise ValueError (naming both numbers) when the "
            "sequence is longer than max_len"
        )
    return None


def _length_error_sentence(error: Exception, *, max_len: int) -> str:
    if isinstance(error, AssertionError):
        return f"{max_len + 1} tokens with max_len = {max_len} raised AssertionError: an assert vanishes under python -O; raise ValueError naming both numbers"
    if (str(max_len) in str(error) and "must match" not in str(error)) or _raised_by_the_student(error):
        return f"{max_len + 1} tokens with max_len = {max_len} raised {type(error).__name__}: your check is there, but a too long input is a bad VALUE, so raise ValueError naming both numbers"
    raise Inconclusive("the checker explains a missing check") from None


def _learned_gradient_probe(answer):
    model = answer(6, 4)
    try:
        table = _position_table(model, 6, 4)
    except ExerciseFailure as failure:
        raise Inconclusive(str(failure)) from None
    out = model(torch.zeros(2, 3, 4))
    if not isinstance(out, torch.Tensor):
        raise Inconclusive("the checker names the type")
    if not out.requires_grad:
        return "the output does not depend on the table as far as autograd can see (.detach(), .data or torch.no_grad()): add the table's rows themselves, so training can change them"
    (gradient,) = torch.autograd.grad(out.sum(), table, allow_unused=True)
    rows = None if gradient is None else _rows(gradient, 6, 4)
    if rows is None or not (rows[:3] != 0).all() or (rows[3:] != 0).any():
        return "a sequence of 3 tokens must send gradient to rows 0, 1 and 2 of the table and to no other: add table[:T] to x"
    return None


add_properties(
    "5.6",
    [
        Property("a learned table (an nn.Parameter or nn.Embedding of max_len x d_model)", _learned_table_probe),
        Property("row t for position t", _learned_rows_probe),
        Property(
            "training reaches the table (gradients flow to the rows of the positions used)", _learned_gradient_probe
        ),
        Property("the length check (ValueError when T > max_len)", _length_check_probe),
    ],
)
