"""Measure how fast the book runs; write benchmarks/RESULTS.md and benchmarks/results.json.

    python benchmarks/run.py                 # everything (several minutes)
    python benchmarks/run.py --only attention widgets
    python benchmarks/run.py --smoke --out /tmp/bench   # tiny sizes, used by the test suite

Rules: a warm-up before timing; medians of repeated runs; ratios come from
interleaved runs in one process, so that machine noise hits both sides alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import attention_book as ab  # noqa: E402

BUDGETS = {
    "chapter_seconds": 45.0,
    "chapter_07_seconds": 90.0,
    "book_seconds": 240.0,
    "widget_median_ms": 50.0,  # a model-bound control: kernel round trip, input to painted picture
    "frame_ms": 1000 / 60,  # a presentation-only control: within one frame at 60 Hz
    "training_seconds": 30.0,
}


# -- helpers ----------------------------------------------------------------------------------


def machine() -> dict:
    from attention_book.device import machine_record

    info = machine_record()
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def interleaved_medians(functions: dict, repeats: int, device: torch.device) -> dict:
    """Median seconds of each function, timed in turn (a, b, c, a, b, c, ...) after a warm-up."""
    for function in functions.values():
        function()
    synchronize(device)
    samples = {name: [] for name in functions}
    for _ in range(repeats):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            synchronize(device)
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


# -- attention: ours vs PyTorch ---------------------------------------------------------------


def bench_attention(lengths: list[int], d_model: int, heads: int, repeats: int, device: torch.device) -> list[dict]:
    """Time our attention (weights path and fast path) against PyTorch's, per sequence length."""
    rows = []
    torch.manual_seed(0)
    reference = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).to(device).eval()
    ours = ab.MultiHeadAttention.from_torch(reference).eval()
    d_head = d_model // heads
    for T in lengths:
        q, k, v = (torch.randn(1, heads, T, d_head, device=device) for _ in range(3))
        x = torch.randn(1, T, d_model, device=device)
        with torch.no_grad():
            medians = interleaved_medians(
                {
                    "sdpa_ours_weights": lambda: ab.scaled_dot_product_attention(q, k, v),
                    "sdpa_torch": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v),
                    "mha_ours_weights": lambda: ours(x, x, x),
                    "mha_ours_fast": lambda: ours(x, x, x, need_weights=False),
                    "mha_torch": lambda: reference(x, x, x, need_weights=False),
                },
                repeats if T <= 1024 else max(3, repeats // 3),
                device,
            )
        row = {"T": T, **{name: seconds * 1000 for name, seconds in medians.items()}}
        row["ratio_sdpa_weights"] = medians["sdpa_ours_weights"] / medians["sdpa_torch"]
        row["ratio_mha_weights"] = medians["mha_ours_weights"] / medians["mha_torch"]
        row["ratio_mha_fast"] = medians["mha_ours_fast"] / medians["mha_torch"]
        rows.append(row)
    return rows


# Runs in a fresh process. Linux keeps a process's ru_maxrss across fork and exec, so a probe
# started by a parent that once held a gigabyte would see no rise at all; the peak of this
# process's own memory (VmHWM), reset just before the call through /proc/self/clear_refs,
# does not have that flaw.
_MEMORY_PROBE = r"""
import sys, torch, attention_book as ab
T, heads, d_head, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def status_kib(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/self/status")
def call(q, k, v):
    with torch.no_grad():
        if path == "weights":
            return ab.scaled_dot_product_attention(q, k, v)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)
call(*(torch.randn(1, heads, 8, d_head) for _ in range(3)))  # first-call set-up is not the T x T matrix
q, k, v = (torch.randn(1, heads, T, d_head) for _ in range(3))
with open("/proc/self/clear_refs", "w") as clear:
    clear.write("5")  # reset the peak (VmHWM) to the current resident size
before = status_kib("VmRSS")
result = call(q, k, v)
print((status_kib("VmHWM") - before) * 1024)
"""


def bench_memory(lengths: list[int], d_model: int, heads: int, device: torch.device) -> list[dict]:
    """Extra peak memory of one attention call: the weights path stores the (T, T) matrix per head."""
    rows = []
    d_head = d_model // heads
    for T in lengths:
        row = {"T": T, "weights_matrix_mb": heads * T * T * 4 / 2**20}
        if device.type == "cuda":
            for path in ("weights", "fast"):
                q, k, v = (torch.randn(1, heads, T, d_head, device=device) for _ in range(3))
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                with torch.no_grad():
                    if path == "weights":
                        ab.scaled_dot_product_attention(q, k, v)
                    else:
                        torch.nn.functional.scaled_dot_product_attention(q, k, v)
                row[f"peak_{path}_mb"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        elif not Path("/proc/self/clear_refs").exists():
            row["peak_weights_mb"] = row["peak_fast_mb"] = float("nan")  # the CPU probe needs Linux's /proc
        else:
            for path in ("weights", "fast"):
                output = subprocess.run(
                    [sys.executable, "-c", _MEMORY_PROBE, str(T), str(heads), str(d_head), path],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row[f"peak_{path}_mb"] = int(output.stdout.strip()) / 2**20
        rows.append(row)
    return rows


# -- widgets ----------------------------------------------------------------------------------


def bench_widgets_browser(repeats: int = 20) -> list[dict]:
    """Input-to-picture latency of every control of every widget, in Chromium (widget_browser.py)."""
    try:
        from widget_browser import bench_widgets_in_browser

        return bench_widgets_in_browser(repeats)
    except Exception as error:  # no Chromium, no JupyterLab: say so in the table
        return [{"where": "-", "widget": "-", "control": "-", "error": f"{type(error).__name__}: {str(error)[:300]}"}]


def bench_widgets(updates: int, device: str) -> list[dict]:
    from widget_cases import widget_cases

    rows = []
    for name, build, poke in widget_cases():
        try:
            widget = build(device)
        except (ImportError, AttributeError) as error:  # widget not written yet
            rows.append({"widget": name, "error": f"{type(error).__name__}: {error}"})
            continue
        for i in range(3):  # warm-up
            poke(widget, i)
        widget.timings_ms.clear()
        for i in range(updates):
            poke(widget, i)
        timings = widget.timings_ms
        rows.append(
            {
                "widget": name,
                "device": device,
                "updates": len(timings),
                "median_ms": statistics.median(timings),
                "p95_ms": percentile(timings, 95),
            }
        )
    return rows


# -- training to target -----------------------------------------------------------------------


def _seq2seq_case(kind: str):
    def train(smoke: bool, device: str = "cpu"):
        from torch.utils.data import DataLoader

        options = dict(min_len=3, max_len=6, num_symbols=8)
        ab.set_seed(0)
        train_set = ab.SequenceTask(kind, 4000 if not smoke else 256, seed=1, **options)
        valid_set = ab.SequenceTask(kind, 500 if not smoke else 64, seed=2, **options)
        model = ab.EncoderDecoder(
            len(train_set.vocab), len(train_set.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=1, max_len=8
        )
        return ab.fit(
            model,
            DataLoader(train_set, batch_size=64, shuffle=True),
            ab.seq2seq_loss,
            epochs=20 if not smoke else 1,
            lr=3e-3,
            valid_loader=DataLoader(valid_set, batch_size=500),
            metric_fn=ab.seq2seq_exact_match,
            target=0.99,
            device=device,
            progress=False,
        )

    return f"{kind} (encoder-decoder, exact match on held-out)", 0.99, train, None


def _recall_case():
    def train(smoke: bool, device: str = "cpu"):
        from torch.utils.data import DataLoader

        from attention_book.recall import RecallModel

        train_set = ab.AssociativeRecall(4000 if not smoke else 256, num_pairs=4, seed=1)
        held_out = ab.AssociativeRecall(1000 if not smoke else 64, num_pairs=4, seed=2)
        ab.set_seed(0)
        model = RecallModel(len(train_set.vocab), max_len=10, d_model=32)
        return ab.fit(
            model,
            DataLoader(train_set, batch_size=64, shuffle=True),
            ab.classification_loss,
            epochs=3 if not smoke else 1,
            lr=1e-2,
            valid_loader=DataLoader(held_out, batch_size=1000),
            metric_fn=ab.classification_accuracy,
            target=0.99,
            device=device,
            progress=False,
        )

    return "associative recall (chapter 2, accuracy on held-out)", 0.99, train, None


def _two_relation_case():
    def train(smoke: bool, device: str = "cpu"):
        from torch.utils.data import DataLoader

        train_set = ab.TwoRelationTask(4000 if not smoke else 256, seed=1)
        held_out = ab.TwoRelationTask(1000 if not smoke else 64, seed=2)
        ab.set_seed(0)
        model = ab.TokenClassifier(
            len(train_set.vocabulary),
            train_set.num_classes,
            d_model=32,
            num_heads=2,
            d_ff=64,
            num_layers=1,
            max_len=train_set.length,
        )
        return ab.fit(
            model,
            DataLoader(train_set, batch_size=64, shuffle=True),
            ab.token_loss,
            epochs=20 if not smoke else 1,
            lr=5e-3,
            valid_loader=DataLoader(held_out, batch_size=1000),
            metric_fn=ab.token_accuracy,
            target=0.99,
            device=device,
            progress=False,
        )

    return "two relations, two heads (chapter 4, token accuracy on held-out)", 0.99, train, 1


def _word_order_case():
    def train(smoke: bool, device: str = "cpu"):
        from torch.utils.data import DataLoader, RandomSampler

        train_set = ab.WordOrderTask(4000 if not smoke else 256, min_len=4, max_len=8, pad_to=12, seed=1)
        held_out = ab.WordOrderTask(1000 if not smoke else 64, min_len=4, max_len=8, pad_to=12, seed=2)
        ab.set_seed(0)
        model = ab.EncoderClassifier(
            len(train_set.vocab),
            2,
            pooling="mean",
            positional="sinusoidal",
            d_model=32,
            num_heads=2,
            d_ff=64,
            num_layers=1,
            max_len=16,
        )
        every_10_steps = DataLoader(train_set, batch_size=64, sampler=RandomSampler(train_set, num_samples=640))
        return ab.fit(
            model,
            every_10_steps,
            ab.classification_loss,
            epochs=15 if not smoke else 1,
            lr=3e-3,
            valid_loader=DataLoader(held_out, batch_size=1000),
            metric_fn=ab.classification_accuracy,
            target=0.99,
            device=device,
            progress=False,
        )

    return "which word comes first, sinusoidal positions (chapter 5, accuracy on held-out)", 0.99, train, 1


def _sorter_case():
    def train(smoke: bool, device: str = "cpu"):
        from torch.utils.data import DataLoader, Subset

        options = dict(min_len=3, max_len=8, num_symbols=10)
        train_set = ab.SequenceTask("sort", 3200 if not smoke else 128, seed=1, **options)
        held_out = ab.SequenceTask("sort", 1000 if not smoke else 64, seed=2, **options)
        ab.set_seed(0)
        model = ab.EncoderDecoder(
            len(train_set.vocab), len(train_set.vocab), d_model=48, num_heads=2, d_ff=96, num_layers=2, max_len=10
        )
        return ab.fit(
            model,
            DataLoader(train_set, batch_size=64, shuffle=True),
            ab.seq2seq_loss,
            epochs=5 if not smoke else 1,
            lr=5e-3,
            schedule="linear",
            device=device,
            progress=False,
            valid_loader=DataLoader(Subset(held_out, range(min(500, len(held_out)))), batch_size=500),
            metric_fn=ab.seq2seq_exact_match,
        )

    return (
        "sorting, chapter 6's recipe (2 layers, linear schedule, full 250 steps; exact match on held-out)",
        0.99,
        train,
        1,
    )


def training_cases() -> list:
    """(task, target, train(smoke) -> History, threads) for every toy task a chapter trains.

    ``threads`` is what the chapter sets with ``torch.set_num_threads`` (None: PyTorch's default).
    """
    return [
        _recall_case(),
        _two_relation_case(),
        _word_order_case(),
        _sorter_case(),
        *(_seq2seq_case(kind) for kind in ("reverse", "sort", "copy")),
    ]


def bench_training(smoke: bool, devices: list[str] = ("cpu",)) -> list[dict]:
    """Each toy task trained to its target on each device (the chapters train on the CPU; a CUDA row
    shows what a GPU changes for models this small)."""
    rows = []
    cases = training_cases()
    default_threads = torch.get_num_threads()
    for (task, target, train, threads), device in (
        (case, d) for case in (cases[:1] if smoke else cases) for d in devices
    ):
        torch.set_num_threads(threads or default_threads)
        try:
            history = train(smoke, device)
        finally:
            torch.set_num_threads(default_threads)
        rows.append(
            {
                "task": task,
                "device": device,
                "threads": threads or default_threads,
                "target": target,
                "reached": history.valid_metric[-1] if history.valid_metric else float("nan"),
                "steps": history.steps,
                "seconds": history.seconds,
            }
        )
    return rows


# -- chapters and the book --------------------------------------------------------------------


def slowest_cells(notebook, count: int = 3) -> list[dict]:
    """The ``count`` code cells that took longest (nbclient's timing metadata), with their first line."""
    from datetime import datetime

    cells = []
    for index, cell in enumerate(notebook.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        if cell.cell_type == "code" and "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            begun, ended = (
                datetime.fromisoformat(timing[key].replace("Z", "+00:00"))
                for key in ("iopub.execute_input", "shell.execute_reply")
            )
            first = next((line for line in cell.source.splitlines() if line.strip() and not line.startswith("#")), "")
            cells.append({"cell": index, "seconds": (ended - begun).total_seconds(), "first_line": first[:60]})
    return sorted(cells, key=lambda c: -c["seconds"])[:count]


def bench_chapters() -> list[dict]:
    import nbformat
    from nbclient import NotebookClient

    rows = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
        )
        start = time.perf_counter()
        client.execute()  # kernel start included
        seconds = time.perf_counter() - start
        budget = BUDGETS["chapter_07_seconds"] if path.name.startswith("07") else BUDGETS["chapter_seconds"]
        rows.append(
            {"chapter": path.stem, "seconds": seconds, "budget": budget, "slowest_cells": slowest_cells(notebook)}
        )
    return rows


def bench_book() -> list[dict]:
    rows = []
    for label, clean in (("clean _build (executes every chapter)", True), ("warm execution cache", False)):
        if clean:
            subprocess.run(["rm", "-rf", str(ROOT / "_build")], check=True)
        start = time.perf_counter()
        subprocess.run(["make", "-C", str(ROOT), "book"], check=True, capture_output=True)
        rows.append({"build": label, "seconds": time.perf_counter() - start})
    return rows


# -- report -----------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


def widget_lines(results: dict) -> list[str]:
    lines = [
        f"## Widget update latency (kernel side: a model-bound input recomputed with torch, {results['widget_updates']} programmatic updates)",
        "",
        "| widget | device | median ms | p95 ms | median within 50 ms |",
        "|---|---|---:|---:|---|",
    ]
    for r in results["widgets"]:
        if "error" in r:
            lines.append(f"| {r['widget']} | - | - | - | not measured: {r['error']} |")
        else:
            lines.append(
                f"| {r['widget']} | {r['device']} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {verdict(r['median_ms'] <= BUDGETS['widget_median_ms'])} |"
            )
    return lines + [""]


def training_lines(results: dict) -> list[str]:
    lines = [
        "## Training to target",
        "",
        "With as many CPU threads as the chapter uses. Steps and seconds are up to the first validation at or above the target, "
        "or the whole run for a recipe with a fixed schedule. The chapters train on the CPU, on every machine.",
        "",
        "| task | device | threads | target | reached | steps | seconds | within 30 s |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {r['task']} | {r.get('device', 'cpu')} | {r['threads']} | {r['target']:.2f} | {r['reached']:.3f} | {r['steps']} | {r['seconds']:.1f} | "
        f"{verdict(r['reached'] >= r['target'] and r['seconds'] <= BUDGETS['training_seconds'])} |"
        for r in results["training"]
    ]
    return lines + [""]


def attention_lines(results: dict) -> list[str]:
    device = results["attention_device"]
    lines = [
        f"## Attention: ours vs PyTorch ({device}; d_model={results['d_model']}, {results['heads']} heads, batch 1; median ms)",
        "",
        "Ratios above 1 mean ours is slower. *weights* = our path that returns the (T, T) weights; *fast* = our module calling `torch.nn.functional.scaled_dot_product_attention`.",
        "",
        "| device | T | sdpa ours (weights) | sdpa torch | ratio | MHA ours (weights) | MHA ours (fast) | nn.MultiheadAttention | ratio weights | ratio fast |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results["attention"]:
        lines.append(
            f"| {r['device']} | {r['T']} | {r['sdpa_ours_weights']:.3f} | {r['sdpa_torch']:.3f} | {r['ratio_sdpa_weights']:.2f} | "
            f"{r['mha_ours_weights']:.3f} | {r['mha_ours_fast']:.3f} | {r['mha_torch']:.3f} | {r['ratio_mha_weights']:.2f} | {r['ratio_mha_fast']:.2f} |"
        )
    return lines + [""]


def memory_lines(results: dict) -> list[str]:
    lines = [
        "## Peak extra memory of one attention call vs sequence length",
        "",
        "On the CPU: rise of the peak resident memory (`VmHWM`, reset just before the call) of a fresh process during one call, after a small warm-up call; "
        "on CUDA: rise of `torch.cuda.max_memory_allocated()`. "
        "The weights path materialises (heads, T, T) matrices, quadratic in T: the scores, their exponentials and the weights, "
        "so about three times the size of one; the fused kernel never holds the full matrix.",
        "",
        "| device | T | (heads, T, T) float32 MB | peak, weights path MB | peak, fused kernel MB |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['device']} | {r['T']} | {r['weights_matrix_mb']:.1f} | {r['peak_weights_mb']:.1f} | {r['peak_fast_mb']:.1f} |"
        for r in results["memory"]
    ]
    return lines + [""]


def gpu_lines(gpu: dict) -> list[str]:
    """The sections measured on a machine with a GPU (``--gpu-results``): its CUDA rows beside that
    same machine's CPU rows, since timings compare only within one machine."""
    info = gpu["machine"]
    lines = [
        f"## On a GPU: {info.get('gpu', 'no GPU recorded')}",
        "",
        f"Measured on a lent machine with that GPU, {info['cpu']} ({info['cores']} cores), torch {info['torch']}, {info['date']}, "
        f"by `{gpu.get('command', 'python benchmarks/run.py')}`; merged here by `python benchmarks/run.py --gpu-results FILE`. "
        "Its CPU rows are that machine's CPU, not the machine above: compare CUDA with them, not with the tables above.",
        "",
    ]
    for key, render in (
        ("attention", attention_lines),
        ("memory", memory_lines),
        ("widgets", widget_lines),
        ("training", training_lines),
    ):
        if key in gpu:
            lines += ["#" + line if line.startswith("## ") else line for line in render(gpu)]  # one level down
    return lines


def write_report(results: dict, out: Path) -> None:
    lines = ["# Benchmarks", "", "Written by `make bench` (`python benchmarks/run.py`). Do not edit by hand.", ""]
    info = results["machine"]
    lines += ["## Machine", ""] + [f"- {key}: {value}" for key, value in info.items()] + [""]
    if results.get("measured"):
        lines += [
            "Sections measured (a run with `--only` keeps the others from the previous run): "
            + ", ".join(f"{section} {date}" for section, date in results["measured"].items()),
            "",
        ]
    if "chapters" in results:
        total = sum(row["seconds"] for row in results["chapters"])
        lines += [
            "## Chapter execution on CPU (nbclient, kernel start included)",
            "",
            "| chapter | seconds | budget | within budget | slowest cells |",
            "|---|---:|---:|---|---|",
        ]
        lines += [
            f"| {r['chapter']} | {r['seconds']:.1f} | {r['budget']:.0f} | {verdict(r['seconds'] <= r['budget'])} | "
            + "; ".join(
                f"{c['seconds']:.1f} s cell {c['cell']} `{c['first_line'].replace('|', '/')}`"
                for c in r.get("slowest_cells", [])
            )
            + " |"
            for r in results["chapters"]
        ]
        lines += [
            f"| **whole book** | {total:.1f} | {BUDGETS['book_seconds']:.0f} | {verdict(total <= BUDGETS['book_seconds'])} |",
            "",
        ]
    if "book" in results:
        lines += ["## `make book` wall time", "", "| build | seconds |", "|---|---:|"]
        lines += [f"| {r['build']} | {r['seconds']:.1f} |" for r in results["book"]] + [""]
    if "widgets" in results:
        lines += widget_lines(results)
    if "widgets_browser" in results:
        lines += [
            "## Widget input-to-picture latency in Chromium (every control; median and p95 ms)",
            "",
            "From the input event to the first frame painted after the new picture; a presentation-only control is drawn "
            "by the browser (budget: its p95 within one frame, 16.7 ms), a model-bound one goes to the kernel and back "
            "(budget: median round trip, input to new picture, within 50 ms), and so does one the website's page computes; "
            "chapter 7's sentence menu draws a new picture from weights the build saved (the same budget). Chapter 7's "
            "typed sentence runs MiniLM in the page from a 31 MB script loaded on the first sentence (issue 46): budget "
            "3 s median for that first sentence, load included, and 100 ms median for later ones, both to the painted "
            "picture.",
            "",
            "*draw* = input event to picture redrawn (presentation-only controls redraw in the event handler; "
            "a model-bound control once the kernel's numbers have arrived and been drawn); "
            "*to paint* = input event to the next painted frame (adds the wait for that frame, up to 16.7 ms at 60 Hz).",
            "",
            "| where | widget | control | kind | moves | draw median / p95 ms | to paint median ms | to paint p95 ms | within budget |",
            "|---|---|---|---|---:|---:|---:|---:|---|",
        ]
        for r in results["widgets_browser"]:
            if "error" in r:
                lines.append(
                    f"| {r['where']} | {r['widget']} | {r['control']} | - | - | - | - | - | not measured: {r['error']} |"
                )
                continue
            draw = f"{r['draw_median_ms']:.1f} / {r['draw_p95_ms']:.1f}" if "draw_median_ms" in r else "-"
            if r["kind"] == "presentation-only":  # the picture must be redrawn within one frame
                within = "draw_p95_ms" in r and r["draw_p95_ms"] <= BUDGETS["frame_ms"]
            elif "budget_ms" in r:  # a budget of its own (chapter 7's MiniLM): median to the painted picture
                within = r["median_ms"] <= r["budget_ms"]
            else:  # the kernel's round trip: input to the new picture, median
                within = r.get("draw_median_ms", r["median_ms"]) <= BUDGETS["widget_median_ms"]
            lines.append(
                f"| {r['where']} | {r['widget']} | {r['control']} | {r['kind']} | {r['moves']} | {draw} | {r['median_ms']:.1f} | "
                f"{r['p95_ms']:.1f} | {verdict(within)} |"
            )
        drawing = [r for r in results["widgets_browser"] if "drawing_median_ms" in r]
        if drawing:  # where a model-bound round trip goes: the rest is the kernel and the messages
            lines += [
                "",
                "Of a model-bound round trip, the widget's drawing in the browser took (median ms): "
                + "; ".join(f"{r['widget']} · {r['control']} {r['drawing_median_ms']:.1f}" for r in drawing)
                + ".",
            ]
        lines.append("")
    if "training" in results:
        lines += training_lines(results)
    if "attention" in results:
        lines += attention_lines(results)
    if "memory" in results:
        lines += memory_lines(results)
    if "grading" in results:
        from grading import grading_lines  # benchmarks/grading.py

        lines += grading_lines(results)
    if "checks" in results:
        from checks import checks_lines  # benchmarks/checks.py

        lines += checks_lines(results)
    if "gpu" in results:
        lines += gpu_lines(results["gpu"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "RESULTS.md").write_text("\n".join(lines))
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")


def merge_gpu_results(path: Path, out: Path) -> dict:
    """Keep what a GPU machine measured (its own results.json) as the ``gpu`` section of ``out``'s results."""
    measured = json.loads(Path(path).read_text())
    if "gpu" not in measured.get("machine", {}):
        raise SystemExit(f"{path} was not measured on a machine with a GPU (its machine has no 'gpu' entry)")
    results = json.loads((out / "results.json").read_text())
    kept = (
        "machine",
        "command",
        "attention_device",
        "d_model",
        "heads",
        "attention",
        "memory",
        "widget_updates",
        "widgets",
        "training",
        "measured",
    )
    results["gpu"] = {key: measured[key] for key in kept if key in measured}
    write_report(results, out)
    print((out / "RESULTS.md").read_text())
    return results


SECTIONS = ("attention", "memory", "widgets", "training", "chapters", "book", "grading", "checks")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the code runs")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    parser.add_argument(
        "--devices",
        nargs="+",
        choices=("cpu", "cuda"),
        help="devices for the attention, memory, widget and training sections (default: cpu, and cuda when there is one)",
    )
    parser.add_argument(
        "--skip-browser", action="store_true", help="leave out the Chromium widget table (a machine without Chromium)"
    )
    parser.add_argument(
        "--gpu-results",
        type=Path,
        metavar="FILE",
        help="measure nothing: put FILE (results.json written on a GPU machine) into --out's results as the GPU section",
    )
    args = parser.parse_args(argv)
    if args.gpu_results:
        return merge_gpu_results(args.gpu_results, args.out)
    sections = args.only or (SECTIONS if not args.smoke else ("attention", "memory", "widgets", "training"))
    results: dict = {
        "machine": machine(),
        "budgets": BUDGETS,
        "command": " ".join(["python benchmarks/run.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    names = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in names and not torch.cuda.is_available():
        parser.error("--devices cuda: torch finds no CUDA device here")
    devices = [torch.device(name) for name in names]
    lengths = [64, 256, 1024, 4096] if not args.smoke else [16, 32]
    results.update(d_model=64, heads=4)
    if "attention" in sections:
        results["attention_device"] = ", ".join(d.type for d in devices)
        results["attention"] = []
        for device in devices:
            for row in bench_attention(lengths, 64, 4, 20 if not args.smoke else 2, device):
                row["device"] = device.type
                results["attention"].append(row)
    if "memory" in sections:
        results["memory"] = []
        for device in devices:
            for row in bench_memory(lengths if not args.smoke else [1024], 64, 4, device):
                row["device"] = device.type
                results["memory"].append(row)
    if "widgets" in sections:
        results["widget_updates"] = 50 if not args.smoke else 3
        results["widgets"] = []
        for device in [d.type for d in devices]:
            results["widgets"] += bench_widgets(results["widget_updates"], device)
        if not args.smoke and not args.skip_browser:  # in a real browser: the site and JupyterLab (a few minutes)
            results["widgets_browser"] = bench_widgets_browser()
    if "training" in sections:
        results["training"] = bench_training(args.smoke, names)
    if "chapters" in sections:
        results["chapters"] = bench_chapters()
    if "book" in sections:
        results["book"] = bench_book()
    if "grading" in sections:
        from grading import bench_grading  # benchmarks/grading.py

        results["grading"] = bench_grading(count=200 if not args.smoke else 4)
    if "checks" in sections:
        from checks import bench_checks  # benchmarks/checks.py

        results["checks"] = bench_checks(repeats=3 if not args.smoke else 1)
    results["measured"] = {section: results["machine"]["date"] for section in sections}
    previous = args.out / "results.json"
    if args.only and previous.exists():  # keep the sections not measured this time, with their dates
        kept = json.loads(previous.read_text())
        dates = kept.get("measured", {})
        for key, value in kept.items():
            if key not in results:
                results[key] = value
        results["measured"] = {
            **{s: dates.get(s, kept["machine"]["date"]) for s in SECTIONS if s in kept},
            **results["measured"],
        }
    write_report(results, args.out)
    print((args.out / "RESULTS.md").read_text())
    return results


if __name__ == "__main__":
    main()
