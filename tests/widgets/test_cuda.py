"""Every widget on a GPU: switched from the CPU to CUDA and back, it shows the same numbers.

The widgets are built at chapter size, as the widget benchmark builds them
(``benchmarks/widget_cases.py``). Skipped where torch finds no CUDA device; run on a lent GPU
machine with ``pytest tests/widgets/test_cuda.py`` (see the README, "On a GPU").
"""

import copy
import sys

import pytest
import torch

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from widget_cases import widget_cases

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CASES = widget_cases()

# The payload keeps 3 decimals, so a value that lands next to a rounding boundary on one device can
# round one unit the other way on the other: a tolerance of one unit in the last kept place (and a
# little for the float that holds it). CUDA's float32 sums differ from the CPU's at about 1e-6.
TOLERANCE = 1e-3 + 1e-9


def assert_same_picture(shown, expected, where: str = "data") -> None:
    """Same structure and text; numbers within ``TOLERANCE``; names the first place that differs."""
    if isinstance(expected, dict):
        assert isinstance(shown, dict) and shown.keys() == expected.keys(), (
            f"{where}: keys {sorted(shown)} != {sorted(expected)}"
        )
        for key in expected:
            assert_same_picture(shown[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(shown, (list, tuple)) and len(shown) == len(expected), (
            f"{where}: length {len(shown)} != {len(expected)}"
        )
        for index, (a, b) in enumerate(zip(shown, expected)):
            assert_same_picture(a, b, f"{where}[{index}]")
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(shown, (int, float)) and abs(shown - expected) <= TOLERANCE, (
            f"{where}: {shown} on one device, {expected} on the other"
        )
    else:
        assert shown == expected, f"{where}: {shown!r} != {expected!r}"


@pytest.mark.parametrize("name, build, poke", CASES, ids=[case[0] for case in CASES])
def test_cpu_to_cuda_to_cpu_shows_the_same_numbers(name, build, poke):
    widget = build("cpu")
    on_cpu = copy.deepcopy(widget.data)
    widget.device_name = "cuda"
    assert widget.status.endswith("on cuda"), widget.status
    assert_same_picture(widget.data, on_cpu)
    poke(widget, 1)  # a new input, computed on the GPU
    assert widget.status.endswith("on cuda") and widget.error == {}, (widget.status, widget.error)
    typed_on_cuda = copy.deepcopy(widget.data)
    widget.device_name = "cpu"
    assert widget.status.endswith("on cpu"), widget.status
    assert_same_picture(widget.data, typed_on_cuda)  # recomputed on the CPU: the input typed on the GPU


@pytest.mark.parametrize("name, build, poke", CASES, ids=[case[0] for case in CASES])
def test_a_widget_built_on_cuda_draws_what_the_cpu_draws(name, build, poke):
    on_cuda, on_cpu = build("cuda"), build("cpu")
    assert on_cuda.device == torch.device("cuda") and on_cuda.status.endswith("on cuda")
    assert_same_picture(on_cuda.data, on_cpu.data)


def test_the_head_viewers_saved_menu_sentences_on_cuda_are_the_cpus(page_models):
    """The website's answers for a model it cannot run (chapter 7's case) computed on the GPU."""
    import json

    from attention_book.widgets import HeadViewer
    from tests.widgets.test_head_viewer import EXAMPLES, SENTENCE, _Unexportable, small_model, words_encoder

    saved = {}
    for device in ("cpu", "cuda"):
        viewer = HeadViewer(_Unexportable(small_model()), words_encoder(), SENTENCE, device=device, examples=EXAMPLES)
        assert viewer.page_model == "" and viewer.status.endswith(f"on {device}"), viewer.status
        saved[device] = json.loads(viewer.page_examples)
    assert list(saved["cuda"]) == [SENTENCE, *EXAMPLES[:2]]
    assert_same_picture(saved["cuda"], saved["cpu"], "page_examples")
