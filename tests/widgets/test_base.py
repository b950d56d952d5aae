"""What every widget shares (widgets/_base.py): the ES module it runs in the browser, the
device control, errors tied to a control, the saved state and the rounding of numbers."""

import json
import math
import re

import numpy as np
import pytest
import torch

import attention_book.widgets as book_widgets
from attention_book.device import available_devices
from attention_book.widgets import AttentionWidget, WidgetInputError
from attention_book.widgets._base import rounded, widget_module_source
from attention_book.widgets.attention_explorer import AttentionExplorer

KINDS = {"attention", "key_value", "soft_hard", "heads", "positional", "decoding"}


def test_the_module_is_one_es_module_exporting_render_and_drawing_every_kind():
    source = widget_module_source()
    assert source.rstrip().endswith("export default { render };")
    assert not re.search(r"^import\b", source, re.MULTILINE)  # no imports: one self-contained module
    for kind in KINDS:
        assert f'kind: "{kind}",' in source, kind
    assert "https://" not in source and "http://www.w3.org/2000/svg" in source  # nothing fetched


def test_the_device_list_holds_only_devices_that_exist():
    explorer = AttentionExplorer(device="cpu")
    assert explorer.devices == available_devices()
    assert explorer.device == torch.device("cpu")
    with pytest.raises(ValueError, match="not available"):
        AttentionExplorer(device="tpu")


def test_one_device_is_shown_as_a_label_not_a_menu():
    source = widget_module_source()
    assert "device: cpu; no GPU found" in source and "devices.length === 1" in source


def test_a_bad_input_names_its_control_keeps_the_last_numbers_and_clears_when_fixed():
    explorer = AttentionExplorer(device="cpu")
    before = explorer.payload
    explorer.set_input("sentence", "")
    assert explorer.error["control"] == "sentence" and "empty" in explorer.error["message"]
    assert explorer.payload == before  # the picture stays, marked stale by the browser
    explorer.set_input("sentence", "the cat")
    assert explorer.error == {} and json.loads(explorer.payload)["tokens"] == ["the", "cat"]


def test_the_payload_is_the_data_as_strict_json():
    explorer = AttentionExplorer(device="cpu")
    explorer.set_view(causal=True)
    assert json.loads(explorer.payload) == explorer.data
    assert "Infinity" not in explorer.payload and "NaN" not in explorer.payload


def test_unknown_view_settings_and_inputs_are_value_errors():
    explorer = AttentionExplorer(device="cpu")
    with pytest.raises(ValueError, match="unknown view setting"):
        explorer.set_view(colour="red")
    with pytest.raises(ValueError, match="unknown input"):
        explorer.set_input("source", "A B")


def test_the_saved_state_holds_everything_the_browser_draws_from():
    explorer = AttentionExplorer(device="cpu")
    state = explorer.get_state()
    for name in ("_esm", "kind", "title", "payload", "view", "inputs", "error", "devices", "device_name", "palette"):
        assert name in state, name
    assert state["kind"] == "attention" and len(state["palette"]) == 11


def test_the_mime_bundle_is_a_widget_view_and_a_line_of_text_no_picture():
    explorer = AttentionExplorer(device="cpu")
    data, metadata = explorer._repr_mimebundle_()
    assert metadata == {}  # on Colab anywidget puts the custom widget manager here
    assert set(data) == {"application/vnd.jupyter.widget-view+json", "text/plain"}
    assert "Colab" in data["text/plain"]


def test_rounded_turns_minus_infinity_into_none_and_rounds():
    values = torch.tensor([[0.123456, -math.inf], [1.0, 2.0]])
    assert rounded(values, 3) == [[0.123, None], [1.0, 2.0]]
    assert rounded(np.array([1 / 3]), 2) == [0.33]


def test_every_update_is_timed_and_said_in_the_status_line():
    explorer = AttentionExplorer(device="cpu")
    explorer.set_input("sentence", "a b c")
    assert len(explorer.timings_ms) == 2 and explorer.median_update_ms() >= 0
    assert explorer.status.startswith("computed in ") and explorer.status.endswith(" on cpu")


def test_widget_input_error_is_a_value_error_with_a_control():
    error = WidgetInputError("bad", "sentence")
    assert isinstance(error, ValueError) and error.control == "sentence"
    assert issubclass(book_widgets.AttentionExplorer, AttentionWidget)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_switching_to_cuda_moves_the_computation_and_gives_the_same_numbers():
    explorer = AttentionExplorer(device="cpu")
    on_cpu = explorer.data["weights"]
    explorer.device_name = "cuda"
    assert explorer.status.endswith("on cuda")
    np.testing.assert_allclose(np.array(explorer.data["weights"]), np.array(on_cpu), atol=1e-3)


def test_the_module_loads_as_an_es_module_and_exports_render(tmp_path):
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("needs node to load the ES module")
    module = tmp_path / "widgets.mjs"
    module.write_text(widget_module_source())
    check = "import(process.argv[1]).then((m) => console.log(typeof m.default.render))"
    completed = subprocess.run([node, "-e", check, module.as_uri()], capture_output=True, text=True, timeout=60)
    assert completed.stdout.strip() == "function", completed.stderr
