"""attention_book.training.losses (chapters 2, 4-7): each loss and metric, on the batches the tasks make.

A model gets the batch's padding mask when the batch has one; positions whose target is
IGNORE take no part; the masked-token loss equals the per-token loss it saves work on.
"""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

import attention_book as ab
from attention_book.data.pieces import mask_tokens
from attention_book.training.losses import seq2seq_forced_exact_match
from attention_book.transformer import LanguageModel


class _Recorder(nn.Module):
    """Logits from the tokens' sum; remembers the arguments of every call."""

    def __init__(self, num_classes=3):
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(-1.0, 1.0, num_classes))
        self.calls = []

    def forward(self, *args):
        self.calls.append(args)
        return args[0].float().sum(dim=1, keepdim=True) * self.weight  # (batch, classes)


def test_classification_loss_passes_the_padding_mask_when_the_batch_has_one():
    tokens, labels = torch.tensor([[1, 2, 0], [3, 0, 0]]), torch.tensor([2, 0])
    padding_mask = tokens != 0
    model = _Recorder()
    loss = ab.classification_loss(model, {"tokens": tokens, "padding_mask": padding_mask, "label": labels})
    (args,) = model.calls
    assert len(args) == 2 and args[0] is tokens and args[1] is padding_mask
    torch.testing.assert_close(loss, F.cross_entropy(model(tokens), labels))
    model.calls.clear()
    ab.classification_accuracy(model, {"tokens": tokens, "padding_mask": padding_mask, "label": labels})
    assert len(model.calls[0]) == 2 and model.calls[0][1] is padding_mask


def test_without_a_padding_mask_the_model_gets_the_tokens_alone():
    tokens, labels = torch.tensor([[1, 2], [3, 4]]), torch.tensor([2, 0])
    model = _Recorder()
    ab.classification_loss(model, {"tokens": tokens, "label": labels})
    correct, total = ab.classification_accuracy(model, {"tokens": tokens, "label": labels})
    assert [len(args) for args in model.calls] == [1, 1]
    assert (correct, total) == (int((model(tokens).argmax(-1) == labels).sum()), 2)


def test_classification_on_padded_batches_does_not_depend_on_the_padding():
    """An EncoderClassifier scored with the mask gives a padded batch the loss of the unpadded one."""
    torch.manual_seed(0)
    model = ab.EncoderClassifier(12, 2, d_model=16, num_heads=2, d_ff=32, num_layers=1).eval()
    short = {"tokens": torch.tensor([[5, 6, 7]]), "label": torch.tensor([1])}
    padded = {
        "tokens": torch.tensor([[5, 6, 7, 0, 0]]),
        "padding_mask": torch.tensor([[True] * 3 + [False] * 2]),
        "label": torch.tensor([1]),
    }
    torch.testing.assert_close(ab.classification_loss(model, padded), ab.classification_loss(model, short))


def _two_relation_model(task, heads=2):
    torch.manual_seed(0)
    return ab.TokenClassifier(
        len(task.vocabulary), task.num_classes, d_model=32, num_heads=heads, d_ff=64, num_layers=1, max_len=task.length
    )


def test_token_loss_and_accuracy_skip_the_unlabelled_first_position():
    task = ab.TwoRelationTask(16, seed=0)
    model = _two_relation_model(task)
    batch = next(iter(DataLoader(task, batch_size=16)))
    logits = model(batch["tokens"])
    assert logits.shape == (16, 8, 16)
    expected = F.cross_entropy(logits[:, 1:].flatten(0, 1), batch["targets"][:, 1:].flatten())
    torch.testing.assert_close(ab.token_loss(model, batch), expected)
    correct, total = ab.token_accuracy(model, batch)
    assert total == 16 * 7 and 0 <= correct <= total
    assert correct == int((logits[:, 1:].argmax(-1) == batch["targets"][:, 1:]).sum())


def test_token_loss_with_the_next_characters_as_targets_is_a_language_models_loss():
    corpus = ab.CharacterCorpus(64, T=12, seed=0)
    torch.manual_seed(0)
    model = LanguageModel(len(corpus.characters), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=12)
    batch = next(iter(DataLoader(corpus, batch_size=64)))
    loss = ab.token_loss(model, batch)
    assert loss.shape == () and loss.item() > 0
    torch.testing.assert_close(loss, F.cross_entropy(model(batch["tokens"]).flatten(0, 1), batch["targets"].flatten()))
    correct, total = ab.token_accuracy(model, batch)
    assert total == 64 * 12 and 0 <= correct <= total


def test_masked_token_loss_equals_token_loss_on_the_same_batch():
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = ab.TokenClassifier(30, 30, d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=12).eval()
    tokens = torch.randint(3, 30, (6, 12), generator=generator)
    padding_mask = torch.arange(12)[None, :] < torch.tensor([12, 9, 5, 12, 3, 7])[:, None]
    tokens = tokens.masked_fill(~padding_mask, ab.PAD)
    corrupted, targets = mask_tokens(tokens, padding_mask, generator, vocab_size=30)
    batch = {"tokens": corrupted, "padding_mask": padding_mask, "targets": targets}
    assert (targets == ab.IGNORE).any() and (targets != ab.IGNORE).any()
    torch.testing.assert_close(ab.masked_token_loss(model, batch), ab.token_loss(model, batch))


def test_masked_token_loss_asks_the_model_only_for_the_chosen_positions():
    calls = []

    class Spy(nn.Module):
        def forward(self, tokens, padding_mask, chosen=None):
            calls.append(chosen)
            return torch.zeros(int(chosen.sum()), 5, requires_grad=True)

    targets = torch.tensor([[ab.IGNORE, 3, ab.IGNORE], [4, ab.IGNORE, ab.IGNORE]])
    batch = {
        "tokens": torch.ones(2, 3, dtype=torch.long),
        "padding_mask": torch.ones(2, 3, dtype=torch.bool),
        "targets": targets,
    }
    loss = ab.masked_token_loss(Spy(), batch)
    assert torch.equal(calls[0], targets != ab.IGNORE)
    torch.testing.assert_close(loss, torch.tensor(5.0).log())  # uniform over 5 classes


# ---------------------------------------------------------------------------------
# Sequence to sequence


def test_seq2seq_loss_is_teacher_forced_cross_entropy_that_skips_padding():
    task = ab.SequenceTask("reverse", 8, min_len=2, max_len=5, seed=0)
    torch.manual_seed(0)
    model = ab.EncoderDecoder(
        len(task.vocab), len(task.vocab), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8
    ).eval()
    batch = next(iter(DataLoader(task, batch_size=8)))
    logits = model(batch["source"], batch["target_in"], batch["source_padding"], batch["target_padding"])
    real = batch["target_out"] != ab.PAD
    torch.testing.assert_close(ab.seq2seq_loss(model, batch), F.cross_entropy(logits[real], batch["target_out"][real]))


class _Oracle(nn.Module):
    """Pretends to be an EncoderDecoder that writes the given answers, one token per step."""

    def __init__(self, answers, vocab_size):
        super().__init__()
        self.answers, self.vocab_size = answers, vocab_size
        self.weight = nn.Parameter(torch.zeros(1))

    def encode(self, source, source_padding=None):
        return torch.zeros(source.shape[0], source.shape[1], 2)

    def decode(self, generated, memory, source_padding=None, target_padding=None):
        step = generated.shape[1] - 1
        logits = torch.zeros(generated.shape[0], generated.shape[1], self.vocab_size)
        logits[torch.arange(len(generated)), -1, self.answers[:, step]] = 1.0
        return logits


def test_seq2seq_exact_match_counts_sequences_decoded_right_up_to_eos():
    task = ab.SequenceTask("sort", 6, min_len=2, max_len=5, seed=1)
    batch = next(iter(DataLoader(task, batch_size=6)))
    answers = batch["target_out"].clone()
    assert ab.seq2seq_exact_match(_Oracle(answers, len(task.vocab)), batch) == (6, 6)
    length = int(batch["source_padding"][0].sum())
    wrong = answers.clone()
    wrong[0, length - 1] = ab.EOS  # stops one token early
    assert ab.seq2seq_exact_match(_Oracle(wrong, len(task.vocab)), batch) == (5, 6)
    after = answers.clone()
    after[1, int(batch["source_padding"][1].sum()) + 1 :] = 5  # what comes after EOS does not count
    assert ab.seq2seq_exact_match(_Oracle(after, len(task.vocab)), batch) == (6, 6)


def test_the_forced_exact_match_counts_the_sequences_greedy_decoding_gets_right():
    """One teacher-forced pass finds the sequences that greedy decoding writes exactly."""
    options = dict(min_len=2, max_len=4, num_symbols=6)
    task = ab.SequenceTask("sort", 300, seed=3, **options)
    batch = next(iter(DataLoader(task, batch_size=300)))
    train = DataLoader(ab.SequenceTask("sort", 1280, seed=4, **options), batch_size=64)
    for seed in (0, 1):  # briefly trained models: some sequences right, many wrong
        torch.manual_seed(seed)
        model = ab.EncoderDecoder(
            len(task.vocab), len(task.vocab), d_model=16, num_heads=2, d_ff=32, num_layers=1, max_len=8
        )
        ab.fit(model, train, ab.seq2seq_loss, max_steps=20, lr=1e-2, progress=False)
        greedy = ab.seq2seq_exact_match(model, batch)
        assert 30 <= greedy[0] <= 270  # neither all right nor all wrong, so the comparison can fail
        assert seq2seq_forced_exact_match(model, batch) == greedy
    oracle = _Oracle(batch["target_out"].clone(), len(task.vocab))

    class Forced(nn.Module):
        """The oracle's answers as teacher-forced logits, with sequence 0 wrong at its last real token."""

        def forward(self, source, target_in, source_padding, target_padding):
            logits = torch.nn.functional.one_hot(oracle.answers, len(task.vocab)).float()
            length = int(target_padding[0].sum())
            logits[0, length - 1] = logits[0, length - 1].roll(1)  # the EOS position now prefers another token
            return logits

    assert seq2seq_forced_exact_match(Forced(), batch) == (299, 300)
