"""Live attention widgets, one per idea (see each module), built on :class:`AttentionWidget`.

AttentionExplorer (chapter 1), KeyValueExplorer (chapter 2), SoftHardExplorer (chapter 3),
HeadViewer (chapters 4 and 7), PositionalEncodingExplorer (chapter 5), DecodingStepper (chapter 6).

Every widget is an anywidget: the kernel computes with torch on the chosen device and
sends numbers; the browser draws them (SVG, the files of js/, one per widget) and handles every control that
only changes what is shown. The widget state is saved with the notebook, so a reopened
notebook and the book's website draw the last picture without a kernel.
"""

from ._base import AttentionWidget, WidgetInputError

__all__ = ["AttentionWidget", "WidgetInputError"]

# Each chapter's widget lives in its own module and is re-exported here.
_WIDGETS = {
    "AttentionExplorer": "attention_explorer",
    "KeyValueExplorer": "key_value_explorer",
    "SoftHardExplorer": "soft_hard_explorer",
    "HeadViewer": "head_viewer",
    "PositionalEncodingExplorer": "positional_explorer",
    "DecodingStepper": "decoding_stepper",
}


def __getattr__(name: str):
    if name in _WIDGETS:
        import importlib

        module = importlib.import_module(f"{__name__}.{_WIDGETS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
