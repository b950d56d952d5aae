"""Chapter 6's helpers and the package code it added: LanguageModel, fit's learning-rate schedule,
decoding with attention, the toy data (reviews, number names) and the pre/post-norm measurement."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

import attention_book as ab  # noqa: E402
from attention_book.chapter06_helpers import (  # noqa: E402
    ALPHABET,
    CharacterCorpus,
    ToyReviews,
    cross_attention_hit_rate,
    decoding_attention,
    gradient_at_bottom,
    is_number_name,
    language_model_loss,
    next_token_accuracy,
    number_words,
    plot_block_diagram,
    plot_decoding_attention,
    plot_gradient_by_depth,
    plot_mask,
    sample_lines,
)
from attention_book.transformer import LanguageModel  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


# ---------------------------------------------------------------------------------
# LanguageModel (attention_book.transformer)


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
# fit's learning-rate schedule (attention_book.training)


def _tiny_fit(**options):
    data = [{"x": torch.randn(4, 3), "y": torch.randn(4, 1)} for _ in range(10)]
    model = nn.Linear(3, 1)
    return ab.fit(model, data, lambda m, b: ((m(b["x"]) - b["y"]) ** 2).mean(), progress=False, **options)


def test_linear_schedule_warms_up_then_decays_to_zero():
    history = _tiny_fit(epochs=2, lr=0.1, schedule="linear", warmup_fraction=0.1)  # 20 steps, 2 of warm-up
    rates = history.learning_rate
    assert len(rates) == 20
    assert rates[:3] == pytest.approx([0.05, 0.1, 0.1 * 18 / 18])
    assert rates == sorted(rates[:2]) + sorted(rates[2:], reverse=True)
    assert rates[-1] == pytest.approx(0.1 / 18)


def test_without_a_schedule_the_rate_is_constant_and_max_steps_bounds_the_schedule():
    assert _tiny_fit(lr=0.01).learning_rate == [0.01] * 10
    rates = _tiny_fit(epochs=5, lr=0.1, schedule="linear", warmup_fraction=0.0, max_steps=4).learning_rate
    assert rates == pytest.approx([0.1, 0.075, 0.05, 0.025])


@pytest.mark.parametrize("options, pattern", [(dict(schedule="cosine"), "schedule"), (dict(warmup_fraction=1.0), "warmup_fraction")])
def test_fit_rejects_a_bad_schedule(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        _tiny_fit(**options)


def test_a_schedule_needs_to_know_how_many_steps_there_are():
    def endless():
        while True:
            yield {"x": torch.randn(4, 3), "y": torch.randn(4, 1)}

    with pytest.raises(ValueError, match="number of steps"):
        ab.fit(nn.Linear(3, 1), endless(), lambda m, b: m(b["x"]).sum(), schedule="linear", progress=False)


# ---------------------------------------------------------------------------------
# Decoding with attention


@pytest.fixture
def seq2seq():
    torch.manual_seed(0)
    return ab.EncoderDecoder(13, 13, d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=10).eval()


def test_decoding_attention_rows_are_what_each_decoding_step_computed(seq2seq):
    source = torch.tensor([5, 9, 3, 7])
    found = decoding_attention(seq2seq, source)
    output = ab.greedy_decode(seq2seq, source[None], 9, bos=ab.BOS, eos=ab.EOS)[0]
    L = len(found["output"])
    assert torch.equal(found["output"], output[:L])
    assert torch.equal(found["decoder_in"], torch.cat([torch.tensor([ab.BOS]), found["output"][:-1]]))
    assert found["self_attention"].shape == (2, 2, L, L) and found["cross_attention"].shape == (2, 2, L, 4)
    memory = seq2seq.encode(source[None])
    for step in range(1, L + 1):  # the decoding loop, one step at a time
        seq2seq.decode(found["decoder_in"][None, :step], memory)
        for layer in range(2):
            torch.testing.assert_close(seq2seq.decoder.layers[layer].cross_attn.last_weights[0, :, -1],
                                       found["cross_attention"][layer, :, step - 1])
            torch.testing.assert_close(seq2seq.decoder.layers[layer].self_attn.last_weights[0, :, -1],
                                       found["self_attention"][layer, :, step - 1, :step])


def test_decoding_attention_rejects_a_batch(seq2seq):
    with pytest.raises(ValueError, match="one sequence"):
        decoding_attention(seq2seq, torch.tensor([[5, 9], [3, 7]]))


class _ScriptedDecoder:
    weights = None

    def cross_attention_weights(self):
        return [self.weights]


class _ScriptedModel(nn.Module):
    """Pretends to be an EncoderDecoder whose cross-attention looks at the given source positions."""

    def __init__(self, looked_at, T_in):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.looked_at, self.T_in = looked_at, T_in
        self.decoder = _ScriptedDecoder()

    def forward(self, source, target_in, source_padding=None, target_padding=None):
        one_hot = nn.functional.one_hot(self.looked_at, self.T_in).float()  # (N, T_out, T_in)
        self.decoder.weights = one_hot[:, None]  # (N, heads=1, T_out, T_in)


def test_cross_attention_hit_rate_counts_steps_that_look_at_the_token_they_write():
    task = ab.SequenceTask("sort", 2, min_len=3, max_len=3, num_symbols=10, seed=0)
    ranks = task.source.argsort(dim=1, stable=True)  # (2, 3): where the t-th smallest token sits
    looked_at = torch.cat([ranks, torch.zeros(2, 1, dtype=torch.long)], dim=1)  # (2, T_out=4), EOS step last
    assert cross_attention_hit_rate(_ScriptedModel(looked_at, 3), task) == 1.0
    wrong = looked_at.clone()
    wrong[0, 0] = (ranks[0, 0] + 1) % 3  # one of the six steps looks elsewhere
    expected = 5 / 6 if task.source[0, wrong[0, 0]] != task.target_out[0, 0] else 1.0
    assert cross_attention_hit_rate(_ScriptedModel(wrong, 3), task) == pytest.approx(expected)


def test_plot_decoding_attention_labels_steps_with_fed_and_written_tokens(seq2seq):
    vocab = ab.SequenceTask("sort", 1, num_symbols=10).vocab
    figure = plot_decoding_attention(seq2seq, torch.tensor([[5, 9, 3, ab.PAD]]), vocab)
    left, right = figure.axes[:2]
    assert [t.get_text() for t in left.get_xticklabels()] == ["C", "G", "A"]  # the padding is dropped
    assert left.get_yticklabels()[0].get_text().startswith("<bos> \u2192")
    assert left.get_title() and right.get_title() and left.get_xlabel() and right.get_xlabel()


# ---------------------------------------------------------------------------------
# Toy data


def test_number_words_spell_numbers_and_is_number_name_recognises_them():
    assert [number_words(n) for n in (0, 13, 40, 42, 100, 342, 999)] == [
        "zero", "thirteen", "forty", "forty two", "one hundred", "three hundred forty two", "nine hundred ninety nine",
    ]
    assert len({number_words(n) for n in range(1000)}) == 1000
    assert is_number_name("seventy one") and is_number_name("seventy")
    assert not is_number_name("twenty ten") and not is_number_name("forty  two") and not is_number_name("")
    for bad in (-1, 1000, 2.0, True):
        with pytest.raises(ValueError, match="from 0 to 999"):
            number_words(bad)


def test_character_corpus_targets_are_the_next_characters():
    corpus = CharacterCorpus(50, T=16, seed=3)
    assert corpus.characters == ALPHABET and set(corpus.text) <= set(ALPHABET)
    assert corpus.decode(corpus.encode(corpus.text[:40])) == corpus.text[:40]
    for item in (corpus[i] for i in range(50)):
        assert item["tokens"].shape == item["targets"].shape == (16,)
        assert torch.equal(item["tokens"][1:], item["targets"][:-1])
        assert corpus.decode(item["tokens"]) + corpus.decode(item["targets"][-1:]) in corpus.text
    assert all(is_number_name(line) and number_words(int(_value(line))) == line for line in corpus.text.split("\n")[:-1])
    again = CharacterCorpus(50, T=16, seed=3)
    assert torch.equal(again.tokens, corpus.tokens)
    with pytest.raises(ValueError, match="not in this corpus"):
        corpus.encode("forty-two")


def _value(name):
    return {number_words(n): n for n in range(1000)}[name]


@pytest.mark.parametrize("options, pattern", [(dict(num_windows=0), "num_windows"), (dict(num_windows=5, T=1), "T must"),
                                              (dict(num_windows=5, largest=1000), "largest"),
                                              (dict(num_windows=5, T=50, num_lines=2), "too few")])
def test_character_corpus_rejects_bad_arguments(options, pattern):
    with pytest.raises(ValueError, match=pattern):
        CharacterCorpus(**options)


def test_sample_lines_and_the_language_model_loss_work_together():
    corpus = CharacterCorpus(64, T=12, seed=0)
    model = LanguageModel(len(corpus.characters), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=12)
    batch = next(iter(DataLoader(corpus, batch_size=64)))
    loss = language_model_loss(model, batch)
    assert loss.shape == () and loss.item() > 0
    correct, total = next_token_accuracy(model, batch)
    assert total == 64 * 12 and 0 <= correct <= total
    lines = sample_lines(model, corpus, 5, seed=1)
    assert len(lines) == 5 and all("\n" not in line and len(line) <= 11 for line in lines)
    assert lines == sample_lines(model, corpus, 5, seed=1)


def test_toy_reviews_are_labelled_by_counting_opinion_words():
    reviews = ToyReviews(200, max_words=6, seed=4)
    positive, negative = {"good", "great", "fun", "clever"}, {"bad", "dull", "awful", "boring"}
    for i in range(len(reviews)):
        item = reviews[i]
        words = reviews.vocab.decode(item["tokens"])
        assert words[0] == "[CLS]" and 3 <= len(words) - 1 <= 6
        assert torch.equal(item["padding"], item["tokens"] != ab.PAD)
        score = sum(w in positive for w in words) - sum(w in negative for w in words)
        assert score != 0 and item["label"].item() == int(score > 0)
    assert torch.equal(ToyReviews(200, max_words=6, seed=4).tokens, reviews.tokens)
    with pytest.raises(ValueError, match="max_words"):
        ToyReviews(10, max_words=2)


# ---------------------------------------------------------------------------------
# Post-norm against pre-norm, and the figures


def test_deep_post_norm_stacks_pass_less_gradient_to_the_bottom_than_pre_norm():
    shallow = gradient_at_bottom(1, norm_first=False, seeds=(0,))
    assert gradient_at_bottom(1, norm_first=False, seeds=(0,)) == shallow  # deterministic
    deep_post = gradient_at_bottom(32, norm_first=False, seeds=(0, 1))
    deep_pre = gradient_at_bottom(32, norm_first=True, seeds=(0, 1))
    assert deep_post < 0.6 * shallow and deep_pre > 0.7 * shallow  # the chapter's claim
    with pytest.raises(ValueError, match="depth"):
        gradient_at_bottom(0, norm_first=True)


def test_figures_have_titles_and_labels():
    figure = plot_block_diagram()
    assert len(figure.axes) == 2 and all(ax.get_title() for ax in figure.axes)
    ax = plot_mask(ab.causal_mask(4), list("abcd"), list("abcd"), title="causal")
    assert ax.get_title() == "causal" and ax.get_xlabel() and ax.get_ylabel()
    assert [t.get_text() for t in ax.texts].count("\u2713") == 10
    ax = plot_gradient_by_depth([1, 2, 4], [0.3, 0.2, 0.1], [0.3, 0.3, 0.3])
    assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel() and len(ax.get_legend().texts) == 2
    with pytest.raises(ValueError, match="matrix"):
        plot_mask(torch.ones(2, 2, 2, dtype=torch.bool))
