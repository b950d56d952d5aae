"""Where computations run: CUDA, then Apple's MPS, then the CPU (every chapter's setup and every widget).

The environment variable ``ATTENTION_BOOK_DEVICE`` (e.g. ``cpu`` or ``cuda``)
overrides the automatic choice, which is how the test suite is run on a GPU.
"""

from __future__ import annotations

import os
import platform
import time

import torch

ENVIRONMENT_VARIABLE = "ATTENTION_BOOK_DEVICE"


def available_devices() -> list[str]:
    """Names of the devices torch can use here, CPU first: e.g. ``["cpu", "cuda"]``."""
    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def default_device() -> torch.device:
    """The device chapters use: ``$ATTENTION_BOOK_DEVICE`` if set, else cuda, mps, cpu."""
    requested = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if requested:
        kind = requested.split(":")[0]
        if kind not in available_devices():
            raise ValueError(
                f"{ENVIRONMENT_VARIABLE}={requested!r} names a device that is not available here; "
                f"expected one of {available_devices()}"
            )
        return torch.device(requested)
    for name in ("cuda", "mps"):
        if name in available_devices():
            return torch.device(name)
    return torch.device("cpu")


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` knows), as
    stored runs and benchmarks record it: "the machine it was made on"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "an unknown CPU"


def machine_record() -> dict:
    """The machine, as a stored study or a benchmark run keeps it beside its numbers: CPU, cores,
    Python, torch and its threads, the platform, and the date (UTC) the record was made."""
    return {
        "cpu": cpu_name(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
