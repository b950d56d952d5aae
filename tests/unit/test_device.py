"""attention_book.device: which device computations run on, and the ATTENTION_BOOK_DEVICE override."""

import pytest
import torch

import attention_book as ab


def test_available_devices_lists_cpu_first():
    devices = ab.available_devices()
    assert devices[0] == "cpu"
    assert ("cuda" in devices) == torch.cuda.is_available()


def test_the_override_chooses_the_device(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_DEVICE", "cpu")
    assert ab.default_device() == torch.device("cpu")


def test_without_an_override_the_fastest_available_device_is_chosen(monkeypatch):
    monkeypatch.delenv("ATTENTION_BOOK_DEVICE", raising=False)
    expected = "cuda" if "cuda" in ab.available_devices() else "mps" if "mps" in ab.available_devices() else "cpu"
    assert ab.default_device().type == expected


def test_device_override_names_the_choices(monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_DEVICE", "tpu")
    with pytest.raises(ValueError, match=r"ATTENTION_BOOK_DEVICE='tpu'.*expected one of \['cpu'"):
        ab.default_device()


def test_cpu_name_names_this_processor():
    from attention_book.device import cpu_name

    name = cpu_name()
    assert isinstance(name, str) and name.strip() == name and name
    try:
        listed = [line for line in open("/proc/cpuinfo", encoding="utf-8") if line.startswith("model name")]
    except OSError:
        listed = []
    if listed:
        assert name == " ".join(listed[0].split(":", 1)[1].split())


def test_machine_record_is_what_stored_studies_and_benchmarks_keep(monkeypatch):
    import re

    import torch

    from attention_book.device import cpu_name, machine_record

    monkeypatch.setattr(torch, "get_num_threads", lambda: 3)
    record = machine_record()
    assert set(record) == {"cpu", "cores", "python", "torch", "torch_threads", "platform", "date"}
    assert record["cpu"] == cpu_name() and record["torch"] == torch.__version__ and record["torch_threads"] == 3
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", record["date"])
