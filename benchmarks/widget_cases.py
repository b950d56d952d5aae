"""How to build each widget at chapter size and how to move one of its controls.

Each case is ``(name, build(device) -> widget, poke(widget, i))``. ``poke`` types a new value
into the widget's model-bound control (a sentence, a source), as the browser does, which
makes the kernel recompute with torch once; the widget times that itself. Controls that only
change the view never reach the kernel: benchmarks/widget_browser.py times them in Chromium.
"""

from __future__ import annotations

import torch

import attention_book as ab
from attention_book.data.tasks import word_encoder

# The two values each widget's model-bound control alternates between (the browser benchmark
# types them into the widget; the kernel benchmark sets them from Python). The first is the
# value the widget starts with, so the first one typed (the second) changes it.
MODEL_INPUTS = {
    "attention": ("sentence", ["the cat sat on the mat", "the mat sat on the cat"]),
    "key_value": ("query", ["0, 10, 0", "0, 0, 10"]),
    "soft_hard": ("scores", ["the=0.2, river=1.9, bank=1.5", "the=1.2, river=0.4, bank=2.5"]),
    "heads": ("sentence", ["the cat sat on a mat while it was sunny", "the dog ran to the park and it was sunny"]),
    "positional": ("d_model", ["64", "32"]),
    "decoding": ("source", ["H C A F B D G E", "B G E A C J D F"]),
}


def _cycle_control(widget, i: int) -> None:
    """Type the next of two values into the widget's model-bound control: one recomputation."""
    name, values = MODEL_INPUTS[widget.kind]
    widget.set_input(name, values[i % 2])


def _words_encoder():
    words = "the cat sat on a mat while dog ran to park and it was sunny".split()
    vocabulary = {word: i + 1 for i, word in enumerate(words)}
    # the book's word encoder: its rules travel with the head viewer, so the site runs the model too
    encode = word_encoder(vocabulary, max_len=32)
    return encode, len(vocabulary) + 1


# Sentences of _words_encoder's words for the menu of MENU_HEAD_VIEWER, 4 to 20 words long.
MENU_SENTENCES = [
    "it was sunny",
    "the dog ran to the park",
    "the cat sat on a mat while it was sunny",
    "the dog and the cat ran to the park while it was sunny",
    "it was sunny and the dog sat on a mat and the cat ran to the park",
    "the cat ran to the dog and the dog ran to the cat while it was sunny and a mat sat",
]


class _TooLargeForThePage(torch.nn.Module):
    """A model the site cannot run (not one of the book's plain encoders), as chapter 7's MiniLM."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, tokens):
        return self.encoder(tokens)


def menu_head_viewer(device):
    """Chapter 7's case on the website: a head viewer whose model the page cannot run, with MiniLM's
    6 layers of 12 heads (d_model 384), offering a menu of sentences whose weights the build saved."""
    encode, vocab_size = _words_encoder()
    torch.manual_seed(0)
    encoder = ab.Encoder(vocab_size, d_model=384, num_heads=12, d_ff=1536, num_layers=6, max_len=32).eval()
    from attention_book.widgets import HeadViewer

    return HeadViewer(_TooLargeForThePage(encoder), encode, MENU_SENTENCES[2], device=device, examples=MENU_SENTENCES)


def widget_cases():
    from attention_book import widgets as book_widgets

    def attention_explorer(device):
        return book_widgets.AttentionExplorer(device=device)

    def key_value_explorer(device):
        return book_widgets.KeyValueExplorer(device=device)

    def soft_hard_explorer(device):
        return book_widgets.SoftHardExplorer(device=device)

    def positional_explorer(device):
        return book_widgets.PositionalEncodingExplorer(device=device)

    def head_viewer(device):
        encode, vocab_size = _words_encoder()
        torch.manual_seed(0)
        model = ab.Encoder(vocab_size, d_model=64, num_heads=4, d_ff=128, num_layers=2, max_len=32).eval()
        return book_widgets.HeadViewer(model, encode, "the cat sat on a mat while it was sunny", device=device)

    def decoding_stepper(device):
        # Chapter 6's stepper: its trained sorting model (seed 0, as stored with the chapter) decoding
        # eight letters, which takes nine decoder steps (eight letters and EOS) through two layers.
        task = ab.SequenceTask("sort", 1, min_len=8, max_len=8, num_symbols=10, seed=3)
        vocab = task.vocab

        def build():
            return ab.EncoderDecoder(len(vocab), len(vocab), d_model=32, num_heads=2, d_ff=64, num_layers=2, max_len=10)

        def train(model):
            raise RuntimeError(
                "the widget benchmark uses chapter 6's stored sorting model; run it with ATTENTION_BOOK_SEEDS unset"
            )

        model, _ = ab.StoredRuns("chapter06").run("sorting", 0, build, train, live=False)
        source = vocab.encode(MODEL_INPUTS["decoding"][1][0].split())[None]  # (1, 8)
        return book_widgets.DecodingStepper(model, source, vocab, device=device)

    return [
        ("AttentionExplorer (ch 1)", attention_explorer, _cycle_control),
        ("KeyValueExplorer (ch 2)", key_value_explorer, _cycle_control),
        ("SoftHardExplorer (ch 3)", soft_hard_explorer, _cycle_control),
        ("HeadViewer (ch 4, 6, 7)", head_viewer, _cycle_control),
        ("PositionalEncodingExplorer (ch 5)", positional_explorer, _cycle_control),
        ("DecodingStepper (ch 6)", decoding_stepper, _cycle_control),
    ]
