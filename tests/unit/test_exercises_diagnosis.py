"""The diagnosis layer of the exercise checkers (attention_book/exercises/_core): every family of
plausible wrong answers is named, the last resort says where and how much, an exception names the
student's line and its likely cause, and a view() on a non-contiguous tensor gets the reshape hint.

Property tests (hypothesis) feed each variant of a family, on random sizes and seeds, and assert
that the diagnosis names that variant, never the generic "differs from the reference".
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attention_book as ab
from attention_book.exercises import _core, chapter00, check, load_all
from attention_book.exercises._core import GENERIC, ExerciseFailure, attention_variants, describe_exception, diagnose
from tests.helpers import expected_hint

load_all()
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _failure(got, expected, known=None) -> str:
    with pytest.raises(ExerciseFailure) as caught:
        diagnose(got, expected, "X", known_mistakes=known)
    return str(caught.value)


def _inputs(seed: int, batch: int, T_q: int, T_k: int, d_k: int, masked: bool):
    generator = torch.Generator().manual_seed(seed)
    Q = torch.randn(batch, T_q, d_k, generator=generator)
    K = torch.randn(batch, T_k, d_k, generator=generator)
    V = torch.randn(batch, T_k, d_k + 1, generator=generator)
    mask = None
    if masked:
        mask = torch.rand(T_q, T_k, generator=generator) < 0.5
        mask[:, 0], mask[:, -1] = True, False  # every row: one key allowed, one blocked
    return Q, K, V, mask


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    batch=st.integers(1, 2),
    T_q=st.integers(2, 5),
    T_k=st.integers(2, 6),
    d_k=st.integers(2, 8),
    masked=st.booleans(),
)
def test_every_attention_variant_is_named_as_itself(seed, batch, T_q, T_k, d_k, masked):
    """Feed each variant of the attention family as the answer: the diagnosis names a variant that
    computes exactly that (variants that coincide on these inputs may share a name)."""
    Q, K, V, mask = _inputs(seed, batch, T_q, T_k, d_k, masked)
    expected_H, expected_A = ab.scaled_dot_product_attention(Q, K, V, mask=mask)
    family = attention_variants(Q, K, V, mask)
    assert family, "the family is never empty"
    weights = {hint: A for hint, (_, A) in family.items()}
    for hint, (_, wrong_A) in family.items():
        message = _failure(wrong_A, expected_A, weights)
        assert GENERIC not in message
        named = next(other for other in weights if other in message)
        assert torch.allclose(weights[named], wrong_A, atol=1e-5, equal_nan=True), f"{hint!r} was named {named!r}"


@SETTINGS
@given(seed=st.integers(0, 10_000), T=st.integers(2, 7), d_k=st.integers(2, 8))
def test_the_causal_mask_family_is_named_in_self_attention(seed, T, d_k):
    """Triangle, diagonal, polarity and no mask at all, on a causal mask."""
    generator = torch.Generator().manual_seed(seed)
    X = torch.randn(2, T, d_k, generator=generator)
    mask = ab.causal_mask(T)
    _, expected_A = ab.scaled_dot_product_attention(X, X, X, mask=mask)
    family = {hint: A for hint, (_, A) in attention_variants(X, X, X, mask).items()}
    for hint in (_core.MASK_TRANSPOSED, _core.MASK_IGNORED, _core.MASK_INVERTED, _core.MASK_AFTER_SOFTMAX):
        assert hint in family
        message = _failure(family[hint], expected_A, family)
        named = next(other for other in family if other in message)
        assert torch.allclose(family[named], family[hint], equal_nan=True), f"{hint!r} was named {named!r}"
    if T > 2:
        assert _core.MASK_NO_DIAGONAL in family


@SETTINGS
@given(seed=st.integers(0, 10_000), rows=st.integers(2, 5), columns=st.integers(2, 6), n=st.integers(2, 64))
def test_generic_relations_are_named_before_the_last_resort(seed, rows, columns, n):
    generator = torch.Generator().manual_seed(seed)
    expected = torch.randn(rows, columns, generator=generator) + 3.0
    assert "opposite sign" in _failure(-expected, expected)
    scaled = expected / math.sqrt(n)
    message = _failure(scaled, expected)
    assert "times" in message and (f"1/sqrt({n})" in message or float(math.sqrt(n)).is_integer()), message
    shuffled = expected[torch.randperm(rows, generator=generator)]
    if not torch.equal(shuffled, expected):
        assert "right numbers in the wrong places along axis 0" in _failure(shuffled, expected)
    nan = expected.clone()
    nan[rows - 1, 0] = float("nan")
    assert f"contains nan (first at index ({rows - 1}, 0))" in _failure(nan, expected)
    square = torch.randn(rows, rows, generator=generator)
    if not torch.allclose(square, square.T):
        assert "transposed" in _failure(square.T.contiguous(), square)


def test_the_last_resort_says_where_and_how_much():
    expected = torch.zeros(2, 3)
    got = expected.clone()
    got[1, 2] = 0.5
    message = _failure(got, expected)
    assert GENERIC in message and "1 of 6 values differ" in message
    assert "the first at index (1, 2): expected 0, got 0.5" in message


@pytest.mark.parametrize(
    "got_shape, expected_shape, phrase",
    [
        ((3, 2), (2, 3), "some axes are swapped"),
        ((2, 1, 3), (2, 3), "an extra axis of size 1"),
        ((2, 3), (2, 1, 3), "an axis of size 1 is missing"),
        ((4,), (2, 4), "an axis (size 2) is missing"),
        ((2, 5), (2, 3), "axis 1 has size 5 instead of 3"),
    ],
)
def test_a_wrong_shape_is_explained(got_shape, expected_shape, phrase):
    assert phrase in _failure(torch.zeros(got_shape), torch.zeros(expected_shape))


def test_a_wrong_type_is_described():
    assert "a tuple of 2 (a tensor of shape (2,), a tensor of shape (3,))" in _failure(
        (torch.zeros(2), torch.zeros(3)), torch.zeros(2)
    )


def _from_a_cell(source: str, name: str):
    """A function compiled as ipykernel compiles a notebook cell (a file name under /tmp/ipykernel_*)."""
    import linecache

    filename = f"/tmp/ipykernel_4242/{abs(hash(source))}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)  # as IPython does
    namespace = {"torch": torch, "math": math}
    exec(compile(source, filename, "exec"), namespace)
    return namespace[name]


def test_an_exception_names_the_students_line_and_its_likely_cause(capsys):
    attend = _from_a_cell(
        "def attend(x_query, x_memory, W_Q, W_K, W_V):\n"
        "    Q, K, V = x_query @ W_Q, x_memory @ W_K, x_memory @ W_V\n"
        "    S = Q @ K / math.sqrt(K.shape[-1])\n"
        "    return torch.softmax(S, -1) @ V, S\n",
        "attend",
    )
    assert not check("2.1", attend)
    line = capsys.readouterr().out
    assert line.count("\n") == 1
    assert "raised RuntimeError in attend(), line 3 of your cell `S = Q @ K / math.sqrt(K.shape[-1])`" in line
    assert "Likely cause: `Q @ K` multiplies Q (6 (= T_q), 3 (= d_k)) by K (4 (= T_k), 3 (= d_k))" in line
    assert "transpose K: Q @ K.transpose(-2, -1)" in line


def test_an_exception_in_a_file_names_the_file():
    try:
        [][1]
    except IndexError as error:
        message = describe_exception(error)
    assert "line" in message and "test_exercises_diagnosis.py" in message and "Likely cause" in message


def test_view_after_transpose_gets_the_reshape_hint_not_pytorchs_error(capsys):
    split = _from_a_cell(
        "def split(x, n):\n    b, T, d = x.shape\n    return x.view(b, T, n, d // n).transpose(1, 2)\n",
        "split",
    )
    merge = _from_a_cell(
        "def merge(x):\n    b, h, T, d = x.shape\n    return x.transpose(1, 2).view(b, T, h * d)\n",
        "merge",
    )
    assert not check("4.1", (split, merge))
    line = capsys.readouterr().out
    assert "view() raised RuntimeError in merge(), line 3 of your cell" in line
    assert "With reshape your answer is right" in line and "RuntimeError:" not in line


@pytest.fixture
def seeded(monkeypatch):
    def use(module, seed: int) -> None:
        monkeypatch.setattr(module, "random_generator", lambda _=None: _core.random_generator(seed))

    return use


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    family=st.sampled_from([_core.WRONG_AXIS, _core.SCALED_BY_D_K, _core.SCALED_BY_SQRT_T, _core.SCORES_AS_WEIGHTS]),
)
def test_exercise_0_1_names_the_weight_variants(seed, family, seeded, capsys):
    seeded(chapter00, seed)

    def answer(Q, K):
        variants = attention_variants(Q, K, K)
        return variants[family][1] if family in variants else ab.softmax(ab.attention_scores(Q, K))

    assert not check("0.1", answer)
    line = capsys.readouterr().out
    named = {
        _core.WRONG_AXIS: "wrong axis",
        _core.SCALED_BY_D_K: "not by d_k",
        _core.SCALED_BY_SQRT_T: _core.SCALED_BY_SQRT_T,
        _core.SCORES_AS_WEIGHTS: _core.SCORES_AS_WEIGHTS,
    }[family]
    named = expected_hint("0.1", answer, named)  # the property it breaks (issue 32), else the family's hint
    assert named in line and GENERIC not in line, f"seed {seed}: {line}"
