"""attention_book.decoding (chapter 6): greedy decoding with and without the KV cache, beam search, sequence scores.

Also the decoder's one-token step (``Decoder.step``) that the cache uses, and positional
encodings at an offset.
"""

import math

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book.decoding import beam_search, sequence_log_prob

DEVICE = ab.default_device()
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


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
        tokens, logits = ab.greedy_decode(
            model, source, 8, bos=ab.BOS, eos=ab.EOS, source_padding=padding, return_logits=True, cache=cache
        )
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


def test_beam_search_with_the_kv_cache_writes_what_feeding_every_token_writes():
    """The cache follows the kept sequences: same tokens and scores as recomputing every prefix, padded sources too."""
    model = _sharp_encoder_decoder(seed=4)
    source = torch.randint(3, 6, (30, 5), generator=torch.Generator().manual_seed(5))
    padding = ab.padding_mask(torch.randint(2, 6, (30,), generator=torch.Generator().manual_seed(6)).tolist(), 5)
    for width in (1, 3, 6):
        cached = beam_search(model, source, 6, bos=ab.BOS, eos=ab.EOS, beam_width=width, source_padding=padding)
        fed = beam_search(
            model, source, 6, bos=ab.BOS, eos=ab.EOS, beam_width=width, source_padding=padding, cache=False
        )
        assert torch.equal(cached[0], fed[0])
        torch.testing.assert_close(cached[1], fed[1], **TOLERANCE)
    with pytest.raises(ValueError, match="cache=True needs an ab.EncoderDecoder"):
        beam_search(_Scripted(), torch.zeros(2, 3, dtype=torch.long), 4, ab.BOS, ab.EOS, cache=True)


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
    assert sequence_log_prob(Scripted(), source, greedy, ab.BOS, ab.EOS).item() == pytest.approx(
        math.log(0.1), abs=1e-4
    )


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
        (
            lambda m: beam_search(m, torch.tensor([[3, 4]]), 0, ab.BOS, ab.EOS),
            r"max_len must be a positive integer, but 0",
        ),
        (
            lambda m: beam_search(m, torch.tensor([[3, 4]]), 4, ab.BOS, ab.EOS, beam_width=0),
            r"beam_width must be a positive integer, but 0",
        ),
        (lambda m: beam_search(m, torch.tensor([[3, 4]]), 4, ab.BOS, ab.EOS, beam_width=2.5), r"beam_width .* 2.5"),
        (lambda m: beam_search(m, torch.tensor([[3, 4]]), 4, ab.BOS, 9), r"eos must be a token id in \[0, 6\).* 9"),
        (
            lambda m: sequence_log_prob(m, torch.tensor([[3, 4]]), torch.tensor([[3], [4]]), ab.BOS, ab.EOS),
            r"output must hold .* 1 sources.*\(2, 1\)",
        ),
    ],
)
def test_beam_search_and_sequence_log_prob_reject_bad_arguments(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(_sharp_encoder_decoder())
