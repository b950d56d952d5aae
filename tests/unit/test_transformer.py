"""attention_book.layers, .transformer and .decoding (chapters 4-7): the residual block, layers, stacks, models, decoding.

Layers compute exactly what PyTorch's own modules compute; the one layer loop
(``run_stack`` / ``Encoder.run_layers``) equals running the layers by hand; the models
respect padding and causality; a small encoder-decoder learns to reverse sequences.
"""

import math
import re

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.analysis.heads import relation_accuracy
from attention_book.decoding import beam_search, sequence_log_prob
from attention_book.layers import key_padding_mask, residual, run_stack
from attention_book.transformer import LanguageModel, mean_pool

DEVICE = ab.default_device()
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def inputs(batch=2, T=6, d_model=16, seed=0):
    return torch.randn(batch, T, d_model, generator=torch.Generator().manual_seed(seed)).to(DEVICE)


# ---------------------------------------------------------------------------------
# residual(): the only place pre- and post-norm differ


@pytest.mark.parametrize("norm_first", [False, True])
def test_residual_is_post_norm_or_pre_norm_as_asked(norm_first):
    torch.manual_seed(0)
    sublayer, norm = nn.Linear(8, 8), nn.LayerNorm(8)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    x = torch.randn(2, 3, 8)
    out = residual(x, sublayer, norm=norm, dropout=nn.Dropout(0.0), norm_first=norm_first)
    post, pre = norm(x + sublayer(x)), x + sublayer(norm(x))
    torch.testing.assert_close(out, pre if norm_first else post)
    assert not torch.allclose(pre, post)  # the two formulas really differ here


def test_residual_applies_dropout_to_the_sublayer_only():
    x = torch.randn(4, 5, 8)
    dropout = nn.Dropout(1.0).train()  # drops every sublayer output
    torch.testing.assert_close(residual(x, lambda h: h * 3, norm=nn.Identity(), dropout=dropout, norm_first=True), x)
    torch.testing.assert_close(residual(x, lambda h: h * 3, norm=nn.LayerNorm(8), dropout=dropout, norm_first=False), nn.LayerNorm(8)(x))


# ---------------------------------------------------------------------------------
# Layers: equal to PyTorch's


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_from_torch(norm_first, activation):
    torch.manual_seed(0)
    reference = nn.TransformerEncoderLayer(
        16, 4, 32, dropout=0.1, activation=activation, batch_first=True, norm_first=norm_first
    ).to(DEVICE).eval()
    ours = ab.EncoderLayer.from_torch(reference).eval()
    x = inputs()
    real = ab.padding_mask([6, 3], 6).to(DEVICE)
    expected = reference(x, src_key_padding_mask=~real)
    out = ours(x, mask=real[:, None, None, :])
    # PyTorch's fast path may leave padded positions as they are; compare real tokens.
    torch.testing.assert_close(out[real], expected[real], **TOLERANCE)
    torch.testing.assert_close(ours(x), reference(x), **TOLERANCE)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_from_torch(norm_first):
    torch.manual_seed(0)
    reference = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.1, batch_first=True, norm_first=norm_first).to(DEVICE).eval()
    ours = ab.DecoderLayer.from_torch(reference).eval()
    target, memory = inputs(T=5), inputs(T=7, seed=1)
    memory_real = ab.padding_mask([7, 4], 7).to(DEVICE)
    future = ab.causal_mask(5, device=DEVICE)
    expected = reference(target, memory, tgt_mask=~future, memory_key_padding_mask=~memory_real)
    out = ours(target, memory, memory_mask=memory_real[:, None, None, :])  # causal by default
    torch.testing.assert_close(out, expected, **TOLERANCE)
    torch.testing.assert_close(ours(target, memory, causal=False), reference(target, memory), **TOLERANCE)


def test_decoder_layer_keeps_self_and_cross_attention_weights():
    layer = ab.DecoderLayer(16, 4, 32).to(DEVICE)
    layer(inputs(T=5), inputs(T=7, seed=1))
    assert layer.self_attn.last_weights.shape == (2, 4, 5, 5)
    assert layer.cross_attn.last_weights.shape == (2, 4, 5, 7)
    assert (layer.self_attn.last_weights.triu(1) == 0).all()


# ---------------------------------------------------------------------------------
# The one loop over layers: run_stack, Encoder.run_layers, Encoder.hidden_states


def _encoder(norm_first=False, causal=False, num_layers=3, seed=0):
    torch.manual_seed(seed)
    return ab.Encoder(12, d_model=16, num_heads=2, d_ff=32, num_layers=num_layers, norm_first=norm_first, causal=causal).eval()


TOKENS = torch.tensor([[5, 6, 7, 8, 9], [3, 4, 5, 0, 0]])
REAL = torch.tensor([[True] * 5, [True, True, True, False, False]])


def _by_hand(encoder, x, padding_mask, start=0):
    """Every layer from ``start`` up, called one by one with the (batch, 1, 1, T) mask (and causal mask)."""
    mask = padding_mask[:, None, None, :]
    if encoder.causal:
        mask = mask & ab.causal_mask(x.shape[1])
    states = [x]
    for layer in encoder.layers[start:]:
        x = layer(x, mask)
        states.append(x)
    return states


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_run_stack_equals_running_the_layers_by_hand(norm_first, causal):
    encoder = _encoder(norm_first, causal)
    with torch.no_grad():
        x = encoder.embedding(TOKENS)
        states = _by_hand(encoder, x, REAL)
        expected = encoder.final_norm(states[-1]) if norm_first else states[-1]
        out = run_stack(encoder.layers, x, REAL, causal=causal, final_norm=encoder.final_norm)
        torch.testing.assert_close(out, expected)
        kept = run_stack(encoder.layers, x, REAL, causal=causal, final_norm=encoder.final_norm, keep_all=True)
    assert len(kept) == 4
    for mine, reference in zip(kept[:-1], states[:-1]):
        torch.testing.assert_close(mine, reference)
    torch.testing.assert_close(kept[-1], expected)  # the last one normalised


@pytest.mark.parametrize("start", [0, 1, 2, 3])
def test_run_layers_from_layer_k_continues_where_the_first_k_layers_stop(start):
    encoder = _encoder()
    with torch.no_grad():
        states = _by_hand(encoder, encoder.embedding(TOKENS), REAL)
        out = encoder.run_layers(states[start], REAL, start=start)
        kept = encoder.run_layers(states[start], REAL, start=start, keep_all=True)
    torch.testing.assert_close(out, states[-1])
    assert len(kept) == len(encoder.layers) - start + 1
    torch.testing.assert_close(kept[-1], states[-1])


def test_run_layers_rejects_a_start_beyond_the_stack():
    encoder = _encoder()
    x = torch.zeros(1, 2, 16)
    for start in (-1, 4, 1.0):
        with pytest.raises(ValueError, match="start"):
            encoder.run_layers(x, start=start)


@pytest.mark.parametrize("norm_first", [False, True])
def test_hidden_states_are_the_embedding_and_every_layers_output_ending_with_forward(norm_first):
    encoder = _encoder(norm_first)
    with torch.no_grad():
        hidden = encoder.hidden_states(TOKENS, REAL)
        forward = encoder(TOKENS, REAL)
        by_hand = _by_hand(encoder, encoder.embedding(TOKENS), REAL)
    assert len(hidden) == len(encoder.layers) + 1 == 4
    assert all(h.shape == (2, 5, 16) for h in hidden)
    torch.testing.assert_close(hidden[0], by_hand[0])
    torch.testing.assert_close(hidden[-1], forward)
    if norm_first:  # a pre-norm stack's last state is the final layer norm of the last layer's output
        torch.testing.assert_close(hidden[-1], encoder.final_norm(by_hand[-1]))
        assert not torch.allclose(hidden[-1], by_hand[-1])
    else:
        torch.testing.assert_close(hidden[-1], by_hand[-1])
    for mine, reference in zip(hidden[1:-1], by_hand[1:-1]):
        torch.testing.assert_close(mine, reference)


def test_key_padding_mask_broadcasts_over_heads_and_queries():
    mask = key_padding_mask(REAL, TOKENS.shape)
    assert mask.shape == (2, 1, 1, 5) and mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], REAL)
    assert key_padding_mask(None, (2, 5)) is None


@pytest.mark.parametrize(
    "padding_mask, message",
    [
        (torch.ones(2, 4, dtype=torch.bool), r"\(2, 5\)"),
        (torch.ones(2, 5), "boolean"),
        ([[True] * 5] * 2, "torch.Tensor"),
    ],
)
def test_key_padding_mask_rejects_a_mask_that_does_not_fit(padding_mask, message):
    with pytest.raises(ValueError, match=message):
        key_padding_mask(padding_mask, (2, 5))


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
    [((torch.tensor([3, 4]), 2), "dimensions"), ((torch.zeros(1, 0, dtype=torch.long), 2), "at least one token"),
     ((torch.tensor([[3]]), -1), "num_tokens"), ((torch.tensor([[3]]), 2, 0.0), "temperature")],
)
def test_generate_rejects_bad_arguments(arguments, pattern):
    with pytest.raises(ValueError, match=pattern):
        _language_model().generate(*arguments)


# ---------------------------------------------------------------------------------
# Decoding


class _Scripted(nn.Module):
    """Emits tokens 5, 6, EOS for sequence 0 and EOS at once for sequence 1 (encode and decode only: no cache)."""

    def encode(self, source, padding=None):
        return torch.zeros(source.shape[0], source.shape[1], 4)

    def decode(self, generated, memory, source_padding=None):
        step = generated.shape[1] - 1
        script = torch.tensor([[5, 6, ab.EOS, 9], [ab.EOS, 9, 9, 9]])
        logits = torch.zeros(generated.shape[0], generated.shape[1], 10)
        logits[torch.arange(2), -1, script[:, step]] = 1.0
        return logits


def test_greedy_decode_stops_at_eos_and_pads_with_eos():
    out = ab.greedy_decode(_Scripted(), torch.zeros(2, 3, dtype=torch.long), max_len=6, bos=ab.BOS, eos=ab.EOS)
    assert out.tolist() == [[5, 6, ab.EOS], [ab.EOS, ab.EOS, ab.EOS]]


def _sharp_encoder_decoder(vocab_size=6, seed=0):
    """A random encoder-decoder whose output layer is scaled up, so its choices are far from uniform."""
    torch.manual_seed(seed)
    model = ab.EncoderDecoder(vocab_size, vocab_size, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8).eval()
    with torch.no_grad():
        model.output.weight.mul_(8.0)
    return model


def test_greedy_decode_returns_every_steps_logits_equal_to_a_teacher_forced_pass():
    model = _sharp_encoder_decoder()
    source = torch.tensor([[2, 3, 4, 5], [5, 4, 3, 2]])
    tokens, logits = ab.greedy_decode(model, source, max_len=5, bos=ab.BOS, eos=ab.EOS, return_logits=True)
    assert tokens.shape[1] == logits.shape[1] and logits.shape[2] == 6
    fed = torch.cat([torch.full((2, 1), ab.BOS), tokens[:, :-1]], dim=1)  # BOS + all but the last written token
    with torch.no_grad():
        forced = model.decode(fed, model.encode(source))
    torch.testing.assert_close(logits, forced)
    assert torch.equal(logits.argmax(dim=-1)[tokens != ab.EOS], tokens[tokens != ab.EOS])
    assert torch.equal(ab.greedy_decode(model, source, max_len=5, bos=ab.BOS, eos=ab.EOS), tokens)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("positional", ["sinusoidal", "learned"])
def test_greedy_decode_with_a_kv_cache_equals_feeding_every_token_each_step(norm_first, positional):
    torch.manual_seed(3)
    model = ab.EncoderDecoder(9, 9, d_model=16, num_heads=2, d_ff=32, num_layers=2, max_len=10, norm_first=norm_first)
    model.decoder.embedding.positions = (
        ab.LearnedPositionalEncoding(10, 16) if positional == "learned" else model.decoder.embedding.positions
    )
    with torch.no_grad():
        model.output.weight.mul_(6.0)
    model.eval()
    source = torch.tensor([[3, 4, 5, 6, 0], [8, 7, 6, 0, 0], [4, 4, 5, 6, 7]])
    padding = source != 0
    results = {}
    for cache in (True, False):
        tokens, logits = ab.greedy_decode(model, source, 8, bos=ab.BOS, eos=ab.EOS, source_padding=padding,
                                          return_logits=True, cache=cache)
        weights = [(layer.self_attn.last_weights, layer.cross_attn.last_weights) for layer in model.decoder.layers]
        results[cache] = tokens, logits, weights
    (cached, cached_logits, cached_weights), (full, full_logits, full_weights) = results[True], results[False]
    assert torch.equal(cached, full) and cached.shape[1] >= 2
    torch.testing.assert_close(cached_logits, full_logits, **TOLERANCE)
    for (own, cross), (own_full, cross_full) in zip(cached_weights, full_weights):
        assert own.shape == own_full.shape == (3, 2, cached.shape[1], cached.shape[1])
        torch.testing.assert_close(own, own_full, **TOLERANCE)  # zeros above the diagonal in both
        torch.testing.assert_close(cross, cross_full, **TOLERANCE)
        assert (cross[..., ~padding[1]][1] == 0).all()  # no step of sequence 1 looks at its padding


def test_decoder_step_computes_one_position_of_the_full_pass():
    model = _sharp_encoder_decoder().eval()
    source = torch.tensor([[2, 3, 4, 5]])
    fed = torch.tensor([[ab.BOS, 4, 3, 2]])
    with torch.no_grad():
        memory = model.encode(source)
        full = model.decoder(fed, memory)  # (1, 4, d_model)
        state = model.decoder.start(memory)
        steps = [model.decoder.step(fed[:, t : t + 1], state) for t in range(4)]
    assert state.position == 4 and state.past[0][0].shape == (1, 2, 4, 8)  # (batch, heads, t, d_head)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOLERANCE)


def test_decoder_step_rejects_bad_input_clearly():
    model = _sharp_encoder_decoder().eval()
    with torch.no_grad():
        state = model.decoder.start(model.encode(torch.tensor([[2, 3]])))
        with pytest.raises(ValueError, match=r"one token per sequence, shape \(batch, 1\)"):
            model.decoder.step(torch.tensor([[ab.BOS, 3]]), state)
        with pytest.raises(ValueError, match="must come from Decoder.start"):
            model.decoder.step(torch.tensor([[ab.BOS]]), {})
        for _ in range(8):
            model.decoder.step(torch.tensor([[3]]), state)
        with pytest.raises(ValueError, match="a token at position 8 .* max_len=8"):
            model.decoder.step(torch.tensor([[3]]), state)
    with pytest.raises(ValueError, match="cache=True needs an ab.EncoderDecoder.*pass cache=False"):
        ab.greedy_decode(_Scripted(), torch.zeros(1, 3, dtype=torch.long), 4, bos=ab.BOS, eos=ab.EOS, cache=True)


def test_attention_to_kept_keys_and_values_equals_the_forward_pass():
    torch.manual_seed(0)
    layer = ab.MultiHeadAttention(12, 3).eval()
    query, memory = torch.randn(2, 4, 12), torch.randn(2, 5, 12)
    mask = torch.rand(2, 4, 5) > 0.3
    out, weights = layer(query, memory, memory, mask=mask)
    kept = layer.keys_values(memory)
    assert kept[0].shape == (2, 3, 5, 4)
    out_kept, weights_kept = layer.attend(query, *kept, mask=mask)
    assert torch.equal(out, out_kept) and torch.equal(weights, weights_kept)
    with pytest.raises(ValueError, match=r"keys must have shape \(batch, heads, T_k, d_head\) = \(2, 3, 5, 4\)"):
        layer.attend(query, memory, memory)


def test_positional_encodings_take_an_offset():
    x = torch.zeros(1, 3, 8)
    for encoding in (ab.SinusoidalPositionalEncoding(10, 8), ab.LearnedPositionalEncoding(10, 8)):
        whole = encoding(torch.zeros(1, 10, 8))
        torch.testing.assert_close(encoding(x, offset=4), whole[:, 4:7])
        with pytest.raises(ValueError, match="positions 8 to 10 .* max_len=10"):
            encoding(x, offset=8)


def test_beam_search_of_width_one_is_greedy_decoding():
    model = _sharp_encoder_decoder()
    source = torch.randint(3, 6, (40, 4), generator=torch.Generator().manual_seed(1))
    greedy = ab.greedy_decode(model, source, 5, bos=ab.BOS, eos=ab.EOS)
    tokens, log_prob = beam_search(model, source, 5, bos=ab.BOS, eos=ab.EOS, beam_width=1)
    assert torch.equal(tokens, greedy)
    assert (greedy == ab.EOS).any(dim=1).sum() >= 10  # many sequences end early, so EOS handling is exercised
    torch.testing.assert_close(log_prob, sequence_log_prob(model, source, greedy, ab.BOS, ab.EOS))


def test_a_beam_as_wide_as_every_sequence_finds_the_most_probable_output():
    """With width vocab ** max_len nothing is pruned: beam search is then exhaustive search."""
    import itertools

    model, vocab_size, length = _sharp_encoder_decoder(seed=2), 6, 3
    source = torch.randint(3, 6, (4, 4), generator=torch.Generator().manual_seed(3))
    _, found = beam_search(model, source, length, bos=ab.BOS, eos=ab.EOS, beam_width=vocab_size**length)
    candidates = []
    for n in range(1, length + 1):  # every output: n tokens, EOS only as the last one (or none at full length)
        for tokens in itertools.product(range(vocab_size), repeat=n):
            if ab.EOS not in tokens[:-1] and (n == length or tokens[-1] == ab.EOS):
                candidates.append(list(tokens) + [ab.EOS] * (length - n))
    candidates = torch.tensor(candidates)  # (number of outputs, length)
    for b in range(len(source)):
        scores = sequence_log_prob(model, source[b : b + 1].expand(len(candidates), -1), candidates, ab.BOS, ab.EOS)
        torch.testing.assert_close(found[b], scores.max(), atol=1e-5, rtol=1e-5)


def test_beam_search_keeps_the_path_greedy_decoding_misses():
    """Step 1: token 3 (p = 0.6) or 4 (p = 0.4). After 3 every next token is equally likely; after 4, EOS is certain."""

    class Scripted(nn.Module):
        def encode(self, source, padding=None):
            return torch.zeros(source.shape[0], source.shape[1], 2)

        def decode(self, written, memory, source_padding=None):
            logits = torch.full((written.shape[0], written.shape[1], 6), -30.0)  # (batch, t, vocab)
            logits[:, 0, 3], logits[:, 0, 4] = math.log(0.6), math.log(0.4)  # the first token, after BOS
            if written.shape[1] > 1:
                after_three = written[:, 1] == 3
                logits[after_three, 1:] = 0.0  # six equally likely tokens: log(1/6) each
                logits[~after_three, 1:, ab.EOS] = 0.0
            return logits

        def forward(self, source, target_in, source_padding=None):
            return self.decode(target_in, self.encode(source))

    source = torch.zeros(1, 2, dtype=torch.long)
    greedy = ab.greedy_decode(Scripted(), source, 2, bos=ab.BOS, eos=ab.EOS)
    tokens, log_prob = beam_search(Scripted(), source, 2, bos=ab.BOS, eos=ab.EOS, beam_width=2)
    assert greedy[0, 0] == 3 and tokens.tolist() == [[4, ab.EOS]]
    assert log_prob.item() == pytest.approx(math.log(0.4), abs=1e-4)  # beats greedy's log(0.6 / 6)
    assert sequence_log_prob(Scripted(), source, greedy, ab.BOS, ab.EOS).item() == pytest.approx(math.log(0.1), abs=1e-4)


def test_sequence_log_prob_ignores_what_follows_the_first_eos():
    model = _sharp_encoder_decoder()
    source = torch.tensor([[3, 4, 5]])
    ended = torch.tensor([[4, ab.EOS, ab.EOS, ab.EOS]])
    tail = torch.tensor([[4, ab.EOS, 5, 3]])
    torch.testing.assert_close(
        sequence_log_prob(model, source, ended, ab.BOS, ab.EOS), sequence_log_prob(model, source, tail, ab.BOS, ab.EOS)
    )


@pytest.mark.parametrize(
    "call, pattern",
    [
        (lambda m: beam_search(m, torch.tensor([3, 4]), 4, ab.BOS, ab.EOS), r"source.*\(batch, T_in\)"),
        (lambda m: beam_search(m, torch.tensor([[3, 4]]), 0, ab.BOS, ab.EOS), r"max_len must be a positive integer, but 0"),
        (lambda m: beam_search(m, torch.tensor([[3, 4]]), 4, ab.BOS, ab.EOS, beam_width=0), r"beam_width must be a positive integer, but 0"),
        (lambda m: beam_search(m, torch.tensor([[3, 4]]), 4, ab.BOS, ab.EOS, beam_width=2.5), r"beam_width .* 2.5"),
        (lambda m: beam_search(m, torch.tensor([[3, 4]]), 4, ab.BOS, 9), r"eos must be a token id in \[0, 6\).* 9"),
        (lambda m: sequence_log_prob(m, torch.tensor([[3, 4]]), torch.tensor([[3], [4]]), ab.BOS, ab.EOS), r"output must hold .* 1 sources.*\(2, 1\)"),
    ],
)
def test_beam_search_and_sequence_log_prob_reject_bad_arguments(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(_sharp_encoder_decoder())


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
    model = ab.EncoderDecoder(len(train.vocab), len(train.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8)
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
    model = ab.EncoderDecoder(len(train.vocab), len(train.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8)
    ab.fit(model, DataLoader(train, batch_size=64, shuffle=True), ab.seq2seq_loss, epochs=5, lr=5e-3, schedule="linear", progress=False)
    example = ab.SequenceTask("reverse", 1, seed=3, **options)[0]
    with torch.no_grad():
        model(example["source"][None], example["target_in"][None, :6])
    cross = model.decoder.layers[0].cross_attn.last_weights[0].mean(0)  # (T_out, T_in), averaged over heads
    assert cross.argmax(dim=-1).tolist() == [5, 4, 3, 2, 1, 0]


def test_a_short_training_run_of_the_two_relation_model_learns_the_content_relation_first(one_thread):
    """Chapter 4: one encoder layer with two heads and a prediction per token (a TokenClassifier)."""
    train, held_out = ab.TwoRelationTask(1000, seed=1), ab.TwoRelationTask(200, seed=2)
    ab.set_seed(0)
    model = ab.TokenClassifier(len(train.vocabulary), train.num_classes, d_model=32, num_heads=2, d_ff=64, num_layers=1,
                               max_len=train.length)
    before = relation_accuracy(model, held_out)["partner's digit"]
    loader = DataLoader(train, batch_size=64, shuffle=True)
    ab.fit(model, loader, ab.token_loss, epochs=4, lr=5e-3, progress=False, device="cpu")
    after = relation_accuracy(model, held_out)["partner's digit"]
    assert after > max(0.5, before + 0.2)  # the content relation is learned first


# ---------------------------------------------------------------------------------
# Bad input

CASES = [
    ("token id outside the vocabulary", lambda: ab.Encoder(10, 8, 2, 16, 1)(torch.tensor([[1, 12]])), r"token ids must lie in \[0, 10\).*12"),
    ("float token ids", lambda: ab.Encoder(10, 8, 2, 16, 1)(torch.randn(1, 3)), r"tokens must be integer ids"),
    ("sequence longer than max_len", lambda: ab.Encoder(10, 8, 2, 16, 1, max_len=3)(torch.ones(1, 4, dtype=torch.long)), r"4 tokens .* max_len=3"),
    ("encoder layer with indivisible heads", lambda: ab.EncoderLayer(10, 4, 16), r"d_model=10 is not divisible by num_heads=4"),
    ("unknown activation", lambda: ab.FeedForward(8, 16, activation="relu6"), r"activation must be one of \['gelu', 'relu'\].*relu6"),
    ("unknown positional encoding", lambda: ab.Encoder(10, 8, 2, 16, 1, positional="rotary"), r"positional must be .*'rotary'"),
    ("unknown pooling", lambda: ab.EncoderClassifier(10, 2, pooling="max"), r"pooling must be 'mean' or 'first'.*'max'"),
    ("encoder layer from the wrong module", lambda: ab.EncoderLayer.from_torch(nn.Linear(2, 2)), r"expected a torch.nn.TransformerEncoderLayer, but a Linear"),
]


@pytest.mark.parametrize("call, pattern", [(c, p) for _, c, p in CASES], ids=[name for name, _, _ in CASES])
def test_bad_input_raises_a_clear_value_error(call, pattern):
    with pytest.raises(ValueError) as raised:
        call()
    assert re.search(pattern, str(raised.value)), f"message was: {raised.value}"
