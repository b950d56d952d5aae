"""How to build each widget at chapter size and how to move one of its controls.

Each case is ``(name, build(device) -> widget, poke(widget, i))``. ``poke`` changes a
control programmatically, as a student dragging a slider would, which triggers one
update (compute + redraw + PNG) that the widget times itself.
"""

from __future__ import annotations

import ipywidgets as widgets
import torch

import attention_book as ab


def _cycle_control(widget, i: int) -> None:
    """Move the first slider (else dropdown) of the widget to a different value."""
    controls = widget.controls()
    sliders = [c for c in controls if isinstance(c, (widgets.FloatSlider, widgets.IntSlider, widgets.FloatLogSlider))]
    if sliders:
        slider = sliders[0]
        if isinstance(slider, widgets.FloatLogSlider):
            low, high = slider.base ** slider.min, slider.base ** slider.max
            fraction = (i % 10 + 1) / 11
            slider.value = low * (high / low) ** fraction
        else:
            span = slider.max - slider.min
            step = slider.step or 1
            slider.value = slider.min + ((i * 7 % 10 + 1) / 11 * span) // step * step
        return
    dropdowns = [c for c in controls if isinstance(c, (widgets.Dropdown, widgets.ToggleButtons, widgets.RadioButtons))]
    values = [c[1] if isinstance(c, tuple) else c for c in dropdowns[0].options]  # options may be (label, value)
    dropdowns[0].value = values[(values.index(dropdowns[0].value) + 1) % len(values)]


def _words_encoder():
    words = "the cat sat on a mat while dog ran to park and it was sunny".split()
    vocabulary = {word: i + 1 for i, word in enumerate(words)}

    def encode(text: str):
        labels = text.split()
        if not labels:
            raise ValueError("the sentence is empty")
        unknown = [w for w in labels if w not in vocabulary]
        if unknown:
            raise ValueError(f"unknown words {unknown}")
        return torch.tensor([[vocabulary[w] for w in labels]]), labels

    return encode, len(vocabulary) + 1


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
        task = ab.SequenceTask("reverse", 1, min_len=6, max_len=6, num_symbols=8, seed=3)
        torch.manual_seed(0)
        model = ab.EncoderDecoder(len(task.vocab), len(task.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8).eval()
        return book_widgets.DecodingStepper(model, task.source[:1], task.vocab, device=device)

    return [
        ("AttentionExplorer (ch 1)", attention_explorer, _cycle_control),
        ("KeyValueExplorer (ch 2)", key_value_explorer, _cycle_control),
        ("SoftHardExplorer (ch 3)", soft_hard_explorer, _cycle_control),
        ("HeadViewer (ch 4, 6, 7)", head_viewer, _cycle_control),
        ("PositionalEncodingExplorer (ch 5)", positional_explorer, _cycle_control),
        ("DecodingStepper (ch 6)", decoding_stepper, _cycle_control),
    ]
