"""Every property probe of every exercise (issue 32), each with a wrong answer that breaks that idea.

A probe builds an input on which one idea decides the output; ``check`` names the first property an
answer breaks. Each row below is (exercise, the start of a property's name, a wrong answer for it):
the answer must fail with a line that names that property. The wrong answers come from the
students' catalogue (``test_exercises_student_answers.py``), from the registered mistakes, or are
written here for a property that those reach only after an earlier one.
"""

from __future__ import annotations

import math

import pytest
import torch

import attention_book as ab
from attention_book.exercises import FAIL_MARK, REGISTRY, check, load_all
from attention_book.exercises.chapter01 import _influence_variant
from tests.unit import test_exercises_student_answers as catalogue

load_all()


def student(exercise_id: str, name: str):
    """A wrong answer from the students' catalogue, by name."""
    (answer,) = [a for e, n, a, _ in catalogue.WRONG if e == exercise_id and n == name]
    return answer


def registered(exercise_id: str, name: str):
    """A registered mistake's answer, by name."""
    (answer,) = [m.answer for m in REGISTRY[exercise_id].mistakes if m.name == name]
    return answer


# Answers written here: each breaks one property that the catalogue's answers break only after another.


def _normalised_sigmoid_head(x_query, x_memory, W_Q, W_K, W_V):
    A = torch.sigmoid((x_query @ W_Q) @ (x_memory @ W_K).T / math.sqrt(W_K.shape[1]))
    A = A / A.sum(dim=-1, keepdim=True)  # rows sum to 1, but the weights are not exp(score) / sum
    return A @ (x_memory @ W_V), A


def _dropout_head(x_query, x_memory, W_Q, W_K, W_V):
    A = torch.softmax((x_query @ W_Q) @ (x_memory @ W_K).T / math.sqrt(W_K.shape[1]), dim=-1)
    A = torch.nn.functional.dropout(A, p=0.3)
    return A @ (x_memory @ W_V), A


def _head_with_W_K_transposed(x_query, x_memory, W_Q, W_K, W_V):
    K = x_memory @ W_K.T  # runs only where W_K is square
    A = torch.softmax((x_query @ W_Q) @ K.T / math.sqrt(K.shape[1]), dim=-1)
    return A @ (x_memory @ W_V), A


def _doubled_head_output(x_query, x_memory, W_Q, W_K, W_V):
    A = torch.softmax((x_query @ W_Q) @ (x_memory @ W_K).T / math.sqrt(W_K.shape[1]), dim=-1)
    return 2.0 * (A @ (x_memory @ W_V)), A


def _mha_with(x, in_w, in_b, out_w, out_b, num_heads, *, heads=None, weights=None, dropout=0.0):
    batch, T, d_model = x.shape
    d_head = d_model // num_heads
    split = heads or (lambda t: t.reshape(batch, T, num_heads, d_head).transpose(1, 2))
    q, k, v = (split(t) for t in (x @ in_w.T + in_b).chunk(3, dim=-1))
    S = q @ k.transpose(-2, -1) / math.sqrt(d_head)
    A = weights(S) if weights else torch.softmax(S, dim=-1)
    A = torch.nn.functional.dropout(A, p=dropout) if dropout else A
    H = A @ v
    if heads:
        H = H.roll(-1, dims=1)  # put the heads back in their order
    return H.transpose(1, 2).reshape(batch, T, d_model) @ out_w.T + out_b, A


def _heads_rolled(x, in_w, in_b, out_w, out_b, num_heads):
    batch, T, d_model = x.shape
    split = lambda t: (
        t.reshape(batch, T, num_heads, d_model // num_heads).roll(1, dims=2).transpose(1, 2)
    )  # head 1 reads block 0
    return _mha_with(x, in_w, in_b, out_w, out_b, num_heads, heads=split)


def _normalised_sigmoid_mha(x, in_w, in_b, out_w, out_b, num_heads):
    sigmoid_rows = lambda S: torch.sigmoid(S) / torch.sigmoid(S).sum(dim=-1, keepdim=True)
    return _mha_with(x, in_w, in_b, out_w, out_b, num_heads, weights=sigmoid_rows)


def _dropout_mha(x, in_w, in_b, out_w, out_b, num_heads):
    return _mha_with(x, in_w, in_b, out_w, out_b, num_heads, dropout=0.2)


def _one_heads_input_biases(d_model, num_heads, d_head, bias):
    """Each input projection's bias counted as one head's, d_head numbers, not num_heads * d_head."""
    inner = num_heads * d_head
    return 4 * d_model * inner + ((3 * d_head + d_model) if bias else 0)


def _decoder_layer_with(layer, x, memory, *, self_mask=None, cross=None, keep=1.0, dropout=0.0):
    """A decoder layer with one part changed: the self-attention's mask, the cross-attention, the residual's weight."""
    T = x.shape[1]
    mask = torch.ones(T, T, dtype=torch.bool).tril() if self_mask is None else self_mask(T)
    blocks = [
        (lambda h: layer.self_attn(h, h, h, mask=mask)[0], layer.norm1),
        (cross or (lambda h: layer.cross_attn(h, memory, memory)[0]), layer.norm2),
        (layer.feed_forward, layer.norm3),
    ]
    for block, norm in blocks:
        out = lambda h: torch.nn.functional.dropout(block(h), dropout)
        x = keep * x + out(norm(x)) if layer.norm_first else norm(keep * x + out(x))
    return x


def _dropout_decoder_layer(layer, x, memory):
    return _decoder_layer_with(layer, x, memory, dropout=0.3)


def _decoder_layer_without_memory(layer, x, memory):
    """The cross-attention reads the decoder and the self-attention sees one token ahead: no single slip."""
    one_ahead = lambda T: torch.ones(T, T, dtype=torch.bool).tril(1)
    return _decoder_layer_with(layer, x, memory, self_mask=one_ahead, cross=lambda h: layer.cross_attn(h, h, h)[0])


def _decoder_layer_with_causal_memory(layer, x, memory):
    """The memory read under a causal mask: its order matters."""
    T_out, T_in = x.shape[1], memory.shape[1]
    causal = torch.ones(T_out, T_in, dtype=torch.bool).tril()
    return _decoder_layer_with(layer, x, memory, cross=lambda h: layer.cross_attn(h, memory, memory, mask=causal)[0])


def _decoder_layer_one_ahead(layer, x, memory):
    return _decoder_layer_with(layer, x, memory, self_mask=lambda T: torch.ones(T, T, dtype=torch.bool).tril(1))


def _decoder_layer_half_residuals(layer, x, memory):
    return _decoder_layer_with(layer, x, memory, keep=0.5)


def _pre_norm_without_feed_forward(layer, x, memory):
    """Right for post-norm layers; a pre-norm layer forgets its third sub-layer."""
    T = x.shape[1]
    future = torch.ones(T, T, dtype=torch.bool).tril()
    if not layer.norm_first:
        x = layer.norm1(x + layer.self_attn(x, x, x, mask=future)[0])
        x = layer.norm2(x + layer.cross_attn(x, memory, memory)[0])
        return layer.norm3(x + layer.feed_forward(x))
    h = layer.norm1(x)
    x = x + layer.self_attn(h, h, h, mask=future)[0]
    return x + layer.cross_attn(layer.norm2(x), memory, memory)[0]


CASES = [
    ("0.1", "the softmax axis", student("0.1", "scale after the softmax")),
    ("0.1", "the softmax (", student("0.1", "cosine similarity")),
    ("0.1", "the scale", registered("0.1", "no sqrt(d_k) scale")),
    ("1.1", "key j", registered("1.1", "j counted from 1")),
    ("1.1", "dot products", registered("1.1", "query along key j")),
    ("1.1", "the weight p", registered("1.1", "no sqrt(d_k)")),
    ("1.2", "undoing the mixing", registered("1.2", "returned H")),
    ("1.2", "the causal mask", registered("1.2", "no causal mask")),
    ("1.2", "the weights", registered("1.2", "no sqrt(d_k)")),
    ("1.3", "when a pair exists", student("1.3", "guessed threshold d_k >= 100")),
    ("1.3", "the unscaled softmax decides", registered("1.3", "gap too small")),
    ("1.3", "the scale keeps it close", student("1.3", "gap on the upper bound")),
    ("1.4", "the softmax axis", registered("1.4", "softmax over the queries")),
    ("1.4", "the additive score", registered("1.4", "no tanh")),
    ("1.4", "the pair (H, A)", lambda *args: registered("1.4", "no tanh")(*args)[::-1]),
    ("1.5", "the order of the entries", registered("1.5", "reversed")),
    ("1.5", "relative to the last token", registered("1.5", "relative to the first token")),
    ("1.5", "the recurrence", registered("1.5", "no tanh")),
    ("1.5", "what is differentiated", lambda x, W_x, W_h: _influence_variant(x, W_x, W_h, out="norm")),
    ("1.5", "the chain rule through the recurrence", student("1.5", "state updated without W_h")),
    ("1.5", "the size of a gradient", student("1.5", "absolute sum of the gradient")),
    ("1.4", "the output H = A V", student("1.4", "keys averaged instead of values")),
    ("2.1", "the pair (H, A)", lambda *args: registered("2.1", "no sqrt(d_k) scale")(*args)[::-1]),
    ("2.1", "no randomness", _dropout_head),
    ("2.1", "the shapes", _head_with_W_K_transposed),
    ("2.1", "the sources", student("2.1", "queries from the memory")),
    ("2.1", "the softmax axis", registered("2.1", "softmax over the queries")),
    ("2.1", "the softmax (", _normalised_sigmoid_head),
    ("2.1", "the scale", student("2.1", "scaled by sqrt(d_model)")),
    ("2.1", "the values", registered("2.1", "values not projected")),
    ("2.1", "the output H = A V", _doubled_head_output),
    ("2.2", "the blend", student("2.2", "shares swapped")),
    ("2.3", "the shapes", student("2.3", "matrices transposed")),
    ("2.3", "the previous token", student("2.3", "shift by two")),
    ("2.3", "content ignored", student("2.3", "content rows of the query random")),
    ("2.3", "a long sequence", student("2.3", "strength log(100) * sqrt(T) only")),
    ("3.1", "one-hot on each row's maximum", student("3.1", "softmax with a large factor")),
    ("3.1", "ties share", student("3.1", "one_hot of argmax")),
    ("3.2", "the recipe's steps", registered("3.2", "sorted in increasing order")),
    ("3.2", "the weights sum to 1", student("3.2", "relu of scores minus their mean")),
    ("3.2", "one threshold", student("3.2", "top score minus one, renormalised")),
    ("3.2", "the gradient", registered("3.2", "threshold detached from the graph")),
    ("3.3", "the target is an argument", student("3.3", "target fixed at 0.9")),
    ("3.3", "the smallest beta", student("3.3", "doubling until the target is reached")),
    ("3.3", "ties at the maximum", student("3.3", "any tie means None")),
    ("3.4", "the forward value", registered("3.4", "value is the softmax")),
    ("3.4", "ties", registered("3.4", "tied keys each get 1")),
    ("3.4", "the gradient", registered("3.4", "sign error")),
    ("4.1", "the split", student("4.1", "split with the head index fastest")),
    ("4.1", "the merge", student("4.1", "merge with permute(0, 2, 3, 1)")),
    ("4.2", "the weights", student("4.2", "ignores d_head")),
    ("4.2", "the biases", _one_heads_input_biases),
    ("4.2", "the terms counted", registered("4.2", "forgot the biases")),
    ("4.3", "no randomness", _dropout_mha),
    ("4.3", "the steps of multi-head attention", registered("4.3", "interleaved_layout")),
    ("4.3", "the heads", _heads_rolled),
    ("4.3", "the softmax axis", student("4.3", "softmax over the heads")),
    ("4.3", "the softmax (", _normalised_sigmoid_mha),
    ("4.3", "the scale", student("4.3", "scaled by sqrt(num_heads)")),
    ("4.3", "the merge", student("4.3", "merge with permute(0, 2, 3, 1)")),
    ("4.3", "the in-projection biases", student("4.3", "the query bias for all three")),
    ("4.3", "the output projection", student("4.3", "output weight not transposed")),
    ("5.1", "the arguments", lambda d_model, num_positions: ab.sinusoidal_encoding(num_positions, d_model)),
    ("5.1", "position 0", student("5.1", "sine in the odd columns too")),
    ("5.1", "the frequencies", student("5.1", "base 1000")),
    ("5.2", "a rotation", student("5.2", "a reflection, not a rotation")),
    ("5.2", "moving k positions on", student("5.2", "the identity")),
    ("5.4", "an accuracy", student("5.4", "a percentage")),
    ("5.4", "the usual slips", registered("5.4", "grouped by sequence")),
    ("5.4", "bags of tokens", student("5.4", "grouped by the token sum")),
    ("5.4", "the majority label", student("5.4", "number of bags over N")),
    ("5.5", "the positions are added", student("5.5", "multiplied")),
    ("5.5", "row t for position t", student("5.5", "sliced by the batch size")),
    ("5.6", "a learned table", registered("5.6", "table not learned")),
    ("5.6", "row t for position t", student("5.6", "one vector for every position")),
    ("5.6", "training reaches the table", student("5.6", "table detached")),
    ("5.6", "the length check", student("5.6", "IndexError instead of ValueError")),
    ("6.1", "the causal self-attention mask", registered("6.1", "upper triangle")),
    ("6.1", "the cross-attention mask", registered("6.1", "causal cross-attention")),
    ("6.2", "no randomness", _dropout_decoder_layer),
    ("6.2", "the wiring", registered("6.2", "no residual connections")),
    ("6.2", "the memory is read at all", _decoder_layer_without_memory),
    ("6.2", "the cross-attention reads the memory", _decoder_layer_with_causal_memory),
    ("6.2", "causality", _decoder_layer_one_ahead),
    ("6.2", "the residual connections", _decoder_layer_half_residuals),
    ("6.2", "the feed-forward sub-layer", _pre_norm_without_feed_forward),
    ("6.3", "changed tokens stay in the vocabulary", student("6.3", "+1 without wrapping around the vocabulary")),
    ("6.3", "a change must change the tokens", student("6.3", "set the future to token 0")),
    (
        "6.4",
        "no randomness",
        lambda x, W1, b1, W2, b2: torch.nn.functional.dropout(torch.relu(x @ W1 + b1), 0.2) @ W2 + b2,
    ),
    ("6.4", "position-wise", registered("6.4", "mixes positions")),
    ("6.4", "the formula", registered("6.4", "no activation")),
    ("6.5", "no randomness", student("6.5", "sampling instead of argmax")),
    ("6.5", "the model reads its own output", registered("6.5", "decodes from BOS alone")),
    ("6.5", "after EOS, only EOS", registered("6.5", "ignores EOS")),
    ("6.5", "when to stop", registered("6.5", "stops at the first EOS")),
    ("6.6", "the accuracy over all examples", registered("6.6", "mean of batch accuracies")),
    ("6.6", "evaluation mode", registered("6.6", "left in train mode")),
    ("7.2", "the encoder reads the padding mask", registered("7.2", "no padding mask for the encoder")),
    ("7.2", "mean pooling over the real tokens", registered("7.2", "returned probabilities")),
]


@pytest.mark.parametrize(("exercise_id", "prefix", "answer"), CASES, ids=[f"{e}-{p}" for e, p, _ in CASES])
def test_a_wrong_answer_for_a_property_gets_that_propertys_hint(exercise_id, prefix, answer, capsys):
    exercise = REGISTRY[exercise_id]
    assert not check(exercise_id, answer)
    line = capsys.readouterr().out.strip()
    (prop,) = [p for p in exercise.properties if p.name.startswith(prefix)]
    assert line.startswith(f"{FAIL_MARK} Exercise {exercise_id} ({exercise.title}): {prop.name}: "), line


def test_every_property_has_a_wrong_answer_here():
    """A property added to an exercise needs its row in CASES (exercises without properties are not listed)."""
    tested = {(e, p) for e, p, _ in CASES}
    for key, exercise in REGISTRY.items():
        for prop in exercise.properties:
            assert any(e == key and prop.name.startswith(p) for e, p in tested), (
                f"exercise {key}: no wrong answer for {prop.name!r}"
            )


@pytest.mark.parametrize("exercise_id", sorted(REGISTRY))
def test_the_solution_keeps_every_property(exercise_id):
    exercise = REGISTRY[exercise_id]
    for prop in exercise.properties:
        assert prop.probe(exercise.solution) is None, f"{exercise_id}: the solution breaks {prop.name!r}"


# -- no hint names a mistake the answer did not make ---------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        lambda e, table: e + table[: e.shape[1]].T,  # sliced, then the positions on the feature axis
        lambda e, table: e + table[: e.shape[1]][:, None, :],  # sliced, then the positions on the batch axis
    ],
    ids=["positions on the feature axis", "positions on the batch axis"],
)
def test_exercise_5_5_blames_the_whole_table_only_when_the_whole_table_was_added(answer, capsys):
    """Issue 32: 5.5 said 'you added the whole table (9 rows) to 5 tokens' to every broadcasting error, also
    to an answer that sliced the table and put the position axis in the wrong place."""
    assert not check("5.5", answer)
    line = capsys.readouterr().out
    assert "whole table" not in line, line
    assert "(= T)" in line and ("(= batch)" in line or "(= d_model)" in line), line


def test_exercise_5_5_still_names_the_whole_table(capsys):
    assert not check("5.5", lambda e, table: e + table)
    assert "the whole table" in capsys.readouterr().out


# -- shapes explained from the shapes ---------------------------------------------------------------


def test_a_wrong_shape_says_which_axis_holds_what(capsys):
    split = student("4.1", "split transposing 1 and 3")
    assert not check("4.1", split)
    line = capsys.readouterr().out
    assert "its axes hold (batch 2, feature of a head 4, head 3, position 5)" in line, line
    assert "where the exercise wants (batch 2, head 3, position 5, feature of a head 4)" in line, line


def test_a_missing_axis_is_named(capsys):
    assert not check("7.1", student("7.1", "the last real token of the whole batch"))
    assert "batch is missing" in capsys.readouterr().out


def test_a_broadcasting_error_names_the_sizes_on_the_axis_that_differs(capsys):
    def added_on_the_wrong_axis(x_query, x_memory, W_Q, W_K, W_V):
        bias = torch.ones(x_query.shape[0] + 1)
        return x_query @ W_Q + bias, None

    assert not check("2.1", added_on_the_wrong_axis)
    line = capsys.readouterr().out
    assert "two tensors do not broadcast: on axis 1 of the result one holds" in line, line


def _k_transposed_with_T(x, in_w, in_b, out_w, out_b, num_heads):
    batch, T, d_model = x.shape
    q, k, v = (x @ in_w.T + in_b).chunk(3, dim=-1)
    q, k, v = (t.reshape(batch, T, num_heads, d_model // num_heads).transpose(1, 2) for t in (q, k, v))
    A = torch.softmax(q @ k.T / math.sqrt(d_model // num_heads), dim=-1)  # k.T on (batch, heads, T, d_head)
    return (A @ v).transpose(1, 2).reshape(batch, T, d_model) @ out_w.T + out_b, A


def test_a_transpose_that_crashes_on_a_batch_names_the_transpose_to_write(capsys):
    """Issue 45: k.T on a batched k reverses every axis; the hint maps the crash to that operand and says which
    transpose to write."""
    assert not check("4.3", _k_transposed_with_T)
    line = capsys.readouterr().out
    assert "`k.T` turns k (2 (= batch), 3 (= num_heads), 5 (= T), 4 (= d_head)) into" in line, line
    assert "Write k.transpose(-2, -1)" in line, line


def test_check_gives_back_the_grad_mode(capsys):
    def leaves_autograd_off(Q, K):
        torch.set_grad_enabled(False)
        return torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=-1)

    assert torch.is_grad_enabled()
    check("0.1", leaves_autograd_off)
    capsys.readouterr()
    assert torch.is_grad_enabled()


def test_a_greedy_loop_that_never_ends_is_stopped_and_told_so(capsys):
    """The scripted model of 6.5 says EOS once, then other tokens: a loop that waits for every sequence's LAST
    token to be EOS, without max_len, would never end; the model stops it."""

    def greedy(model, source, max_len, bos, eos):
        memory = model.encode(source)
        generated = torch.full((source.shape[0], 1), bos, dtype=torch.long)
        while not (generated[:, -1] == eos).all():
            next_token = model.decode(generated, memory)[:, -1].argmax(-1)
            generated = torch.cat([generated, next_token[:, None]], dim=1)
        return generated[:, 1:]

    assert not check("6.5", greedy)
    assert "stop after max_len steps" in capsys.readouterr().out
