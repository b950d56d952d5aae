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


# Chapter 7's head viewer: MiniLM with its menu (the chapter's sentences; the first is shown first).
MINILM_SENTENCES = [
    "The plot is thin, but the acting is not bad at all.",
    "The acting is bad.",
    "The acting is not bad at all.",
    "I liked the film, I liked the music and I liked the cast.",
    "We had a picnic on the bank of the river.",
    "I paid the cheque into the bank on Monday.",
    "A long, slow, beautifully shot film that never quite finds its story, and never needs to.",
    "Great!",
]


def minilm_head_viewer(device):
    """Chapter 7's case on the website: MiniLM (6 layers of 12 heads), its menu drawn from the weights the build
    saved, a typed sentence run in the page by the model the site serves beside it (issue 46)."""
    from attention_book.pretrained import load_minilm
    from attention_book.widgets import HeadViewer

    minilm = load_minilm()
    return HeadViewer(minilm, minilm.encode_sentence, MINILM_SENTENCES[0], device=device, examples=MINILM_SENTENCES[1:])


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
