"""attention_book.transformer (chapters 4-7): the stacks and the models built from the layers.

The models respect padding and causality; the language model generates; a small
encoder-decoder learns to reverse sequences. (The layers are tested in test_layers.py,
decoding in test_decoding.py.)
"""

import re

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.analysis.heads import relation_accuracy
from attention_book.transformer import LanguageModel, mean_pool

DEVICE = ab.default_device()
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def inputs(batch=2, T=6, d_model=16, seed=0):
    return torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


# ---------------------------------------------------------------------------------
# Stacks and models


def test_encoder_is_causal_when_asked():
    torch.manual_seed(0)
    encoder = ab.Encoder(vocab_size=12, d_model=16, num_heads=2, d_ff=32, num_layers=2, causal=True).to(DEVICE).eval()
    tokens = torch.randint(0, 12, (1, 7)).to(DEVICE)
    changed = tokens.clone()
    changed[0, 4:] = (changed[0, 4:] + 1) % 12
    torch.testing.assert_close(encoder(tokens)[:, :4], encoder(changed)[:, :4])
    assert all(w.shape == (1, 2, 7, 7) for w in encoder.attention_weights())


def test_encoder_padding_does_not_change_real_tokens():
    torch.manual_seed(0)
    encoder = ab.Encoder(vocab_size=12, d_model=16, num_heads=2, d_ff=32, num_layers=2).to(DEVICE).eval()
    short = torch.tensor([[5, 6, 7]], device=DEVICE)
    padded = torch.tensor([[5, 6, 7, 0, 0]], device=DEVICE)
    mask = torch.tensor([[True, True, True, False, False]], device=DEVICE)
    torch.testing.assert_close(encoder(padded, mask)[:, :3], encoder(short), **TOLERANCE)


def test_classifier_mean_pooling_ignores_padding():
    torch.manual_seed(0)
    model = ab.EncoderClassifier(12, 3, d_model=16, num_heads=2, d_ff=32, num_layers=1).to(DEVICE).eval()
    short = torch.tensor([[5, 6, 7]], device=DEVICE)
    padded = torch.tensor([[5, 6, 7, 0]], device=DEVICE)
    torch.testing.assert_close(model(padded, torch.tensor([[True, True, True, False]], device=DEVICE)), model(short))


def test_mean_pool_averages_only_the_real_tokens():
    hidden = torch.arange(24.0).reshape(2, 3, 4)  # (batch=2, T=3, d=4)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    pooled = mean_pool(hidden, mask)
    torch.testing.assert_close(pooled[0], hidden[0, :2].mean(0))
    torch.testing.assert_close(pooled[1], hidden[1].mean(0))
    torch.testing.assert_close(mean_pool(hidden), hidden.mean(1))
    assert ab.mean_pool is mean_pool


def test_mean_pool_gives_a_sentence_the_same_vector_whatever_its_padding_holds():
    hidden = torch.randn(1, 6, 4)
    mask = torch.tensor([[True, True, True, False, False, False]])
    noisy = hidden.clone()
    noisy[:, 3:] = 1e6  # whatever sits at padded positions
    torch.testing.assert_close(mean_pool(noisy, mask), mean_pool(hidden[:, :3]))


@pytest.mark.parametrize(
    "hidden, mask, message",
    [
        (torch.zeros(2, 3), None, "3 dimensions"),
        (torch.zeros(2, 3, 4), torch.ones(2, 3), "boolean"),
        (torch.zeros(2, 3, 4), torch.ones(2, 4, dtype=torch.bool), "(2, 4)"),
        (torch.zeros(2, 3, 4, dtype=torch.long), None, "floating-point"),
    ],
)
def test_mean_pool_rejects_bad_input_saying_what_it_expected(hidden, mask, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        mean_pool(hidden, mask)


def test_token_classifier_scores_every_position_or_only_the_chosen_ones():
    torch.manual_seed(0)
    model = ab.TokenClassifier(20, 7, d_model=8, num_heads=2, d_ff=16, num_layers=1, max_len=10).eval()
    tokens = torch.randint(3, 20, (2, 5))
    padding_mask = torch.tensor([[True] * 5, [True] * 4 + [False]])
    chosen = torch.zeros(2, 5, dtype=torch.bool)
    chosen[0, 1] = chosen[1, 3] = chosen[1, 0] = True
    everywhere = model(tokens, padding_mask)
    assert everywhere.shape == (2, 5, 7)
    torch.testing.assert_close(model(tokens, padding_mask, chosen), everywhere[chosen])
    assert model(tokens, padding_mask, chosen).shape == (3, 7)
    torch.testing.assert_close(everywhere, model.head(model.encoder(tokens, padding_mask)))
    assert len(model.attention_weights()) == 1
    with pytest.raises(ValueError, match="chosen must be a boolean tensor shaped like tokens"):
        model(tokens, padding_mask, chosen[:, :4])


# ---------------------------------------------------------------------------------
# The decoder-only language model (chapter 6)


def _language_model(causal=True, seed=0):
    torch.manual_seed(seed)
    return LanguageModel(12, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=8, causal=causal).eval()


def test_causal_language_model_outputs_do_not_depend_on_later_tokens():
    model = _language_model()
    tokens = torch.randint(0, 12, (2, 8), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 12
    logits = model(tokens)
    assert logits.shape == (2, 8, 12)
    torch.testing.assert_close(model(changed)[:, :5], logits[:, :5])
    assert not torch.allclose(model(changed)[:, 5:], logits[:, 5:])


def test_language_model_without_the_mask_lets_earlier_positions_see_later_tokens():
    model = _language_model(causal=False)
    tokens = torch.randint(0, 12, (1, 8), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 12
    assert not torch.allclose(model(changed)[:, 0], model(tokens)[:, 0])


def test_generate_appends_tokens_greedily_and_reads_at_most_max_len():
    model = _language_model()
    prompt = torch.tensor([[3, 4]])
    out = model.generate(prompt, 10, greedy=True)
    assert out.shape == (1, 12) and torch.equal(out[:, :2], prompt)
    for t in range(2, 12):  # every new token is the argmax given the (last max_len) tokens before it
        context = out[:, max(0, t - model.max_len) : t]
        assert out[0, t] == model(context)[0, -1].argmax()
    sampled = [model.generate(prompt, 5, generator=torch.Generator().manual_seed(7)) for _ in range(2)]
    assert torch.equal(sampled[0], sampled[1])  # the same generator seed, the same sample


@pytest.mark.parametrize(
    "arguments, pattern",
    [
        ((torch.tensor([3, 4]), 2), "dimensions"),
        ((torch.zeros(1, 0, dtype=torch.long), 2), "at least one token"),
        ((torch.tensor([[3]]), -1), "num_tokens"),
        ((torch.tensor([[3]]), 2, 0.0), "temperature"),
    ],
)
def test_generate_rejects_bad_arguments(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        _language_model().generate(*arguments)


# ---------------------------------------------------------------------------------
# The models actually learn


def test_encoder_decoder_learns_reversal_on_held_out_sequences(one_thread):
    ab.set_seed(0)
    options = dict(min_len=3, max_len=6, num_symbols=8)
    train = ab.SequenceTask("reverse", 4000, seed=1, **options)
    held_out = ab.SequenceTask("reverse", 500, seed=2, **options)
    seen = {tuple(row.tolist()) for row in train.source}
    unseen = [i for i, row in enumerate(held_out.source) if tuple(row.tolist()) not in seen]
    assert len(unseen) > 300  # most held-out sequences never occur in training; we score only those
    model = ab.EncoderDecoder(
        len(train.vocab), len(train.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8
    )
    history = ab.fit(
        model,
        DataLoader(train, batch_size=64, shuffle=True),
        ab.seq2seq_loss,
        epochs=6,
        lr=5e-3,
        schedule="linear",
        valid_loader=DataLoader(held_out, batch_size=500),
        metric_fn=ab.seq2seq_exact_match,
        device="cpu",
        progress=False,
    )
    unseen_only = torch.utils.data.Subset(held_out, unseen)
    accuracy = ab.evaluate(model, DataLoader(unseen_only, batch_size=500), ab.seq2seq_exact_match)
    assert accuracy >= 0.99, f"exact match {accuracy:.3f} after {history.steps} steps"
    assert history.step_loss[-1] < history.step_loss[0] / 10


def test_reversal_cross_attention_is_anti_diagonal(one_thread):
    """After training, output position t looks at source position L - 1 - t."""
    ab.set_seed(0)
    options = dict(min_len=6, max_len=6, num_symbols=8)
    train = ab.SequenceTask("reverse", 3000, seed=1, **options)
    model = ab.EncoderDecoder(
        len(train.vocab), len(train.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8
    )
    ab.fit(
        model,
        DataLoader(train, batch_size=64, shuffle=True),
        ab.seq2seq_loss,
        epochs=5,
        lr=5e-3,
        schedule="linear",
        progress=False,
    )
    example = ab.SequenceTask("reverse", 1, seed=3, **options)[0]
    with torch.no_grad():
        model(example["source"][None], example["target_in"][None, :6])
    cross = model.decoder.layers[0].cross_attn.last_weights[0].mean(0)  # (T_out, T_in), averaged over heads
    assert cross.argmax(dim=-1).tolist() == [5, 4, 3, 2, 1, 0]


def test_a_short_training_run_of_the_two_relation_model_learns_the_content_relation_first(one_thread):
    """Chapter 4: one encoder layer with two heads and a prediction per token (a TokenClassifier)."""
    train, held_out = ab.TwoRelationTask(1000, seed=1), ab.TwoRelationTask(200, seed=2)
    ab.set_seed(0)
    model = ab.TokenClassifier(
        len(train.vocabulary), train.num_classes, d_model=32, num_heads=2, d_ff=64, num_layers=1, max_len=train.length
    )
    before = relation_accuracy(model, held_out)["partner's digit"]
    loader = DataLoader(train, batch_size=64, shuffle=True)
    ab.fit(model, loader, ab.token_loss, epochs=4, lr=5e-3, progress=False, device="cpu")
    after = relation_accuracy(model, held_out)["partner's digit"]
    assert after > max(0.5, before + 0.2)  # the content relation is learned first


# ---------------------------------------------------------------------------------
# Bad input

CASES = [
    (
        "token id outside the vocabulary",
        lambda: ab.Encoder(10, 8, 2, 16, 1)(torch.tensor([[1, 12]])),
        r"token ids must lie in \[0, 10\).*12",
    ),
    ("float token ids", lambda: ab.Encoder(10, 8, 2, 16, 1)(torch.randn(1, 3)), r"tokens must be integer ids"),
    (
        "sequence longer than max_len",
        lambda: ab.Encoder(10, 8, 2, 16, 1, max_len=3)(torch.ones(1, 4, dtype=torch.long)),
        r"4 tokens .* max_len=3",
    ),
    (
        "encoder layer with indivisible heads",
        lambda: ab.EncoderLayer(10, 4, 16),
        r"d_model=10 is not divisible by num_heads=4",
    ),
    (
        "unknown activation",
        lambda: ab.FeedForward(8, 16, activation="relu6"),
        r"activation must be one of \['gelu', 'relu'\].*relu6",
    ),
    (
        "unknown positional encoding",
        lambda: ab.Encoder(10, 8, 2, 16, 1, positional="rotary"),
        r"positional must be .*'rotary'",
    ),
    (
        "unknown pooling",
        lambda: ab.EncoderClassifier(10, 2, pooling="max"),
        r"pooling must be 'mean' or 'first'.*'max'",
    ),
    (
        "encoder layer from the wrong module",
        lambda: ab.EncoderLayer.from_torch(nn.Linear(2, 2)),
        r"expected a torch.nn.TransformerEncoderLayer, but a Linear",
    ),
]


@pytest.mark.parametrize("call, pattern", [(c, p) for _, c, p in CASES], ids=[name for name, _, _ in CASES])
def test_bad_input_raises_a_clear_value_error(call, pattern):
    with pytest.raises(ValueError) as raised:
        call()
    assert re.search(pattern, str(raised.value)), f"message was: {raised.value}"
