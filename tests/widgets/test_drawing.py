"""Every widget kind drawn from the chapters' own saved states, in node, without a kernel or a site (issue 43).

tests/widgets/draw_widgets.mjs renders each widget saved in a chapter (its state as saved, the
module from ``widget_module_source()``) in happy-dom, at 1280 px (the wide layout) and 390 px (the
narrow one), with a kernel and as the website's page, and reports what was drawn. The checks here
read the numbers the widget was saved with and ask for the matching picture: one coloured cell per
weight shown, one bar per key, the pictures of chapter 5, the labels and the messages. The last
test draws from a deliberately broken copy of the module and expects these checks to fail. The
whole file runs in a few seconds (one node process per module).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from attention_book.widgets._base import widget_module_source
from tests.helpers import ROOT

HARNESS = Path(__file__).with_name("draw_widgets.mjs")
WIDTHS = {"wide": 1280, "narrow": 390}


def saved_widgets() -> list[tuple[str, dict]]:
    """(chapter file, saved state without ``_esm``) of every widget saved in a chapter."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("0*.ipynb")):
        metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
        states = metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        for model in states.values():
            if "_esm" in model.get("state", {}):
                found.append((path.name, {k: v for k, v in model["state"].items() if k != "_esm"}))
    return found


def draw(module_source: str, cases: list[dict], folder: Path) -> list[dict]:
    node = shutil.which("node")
    if node is None or not (ROOT / "node_modules" / "happy-dom").is_dir():
        pytest.skip("needs node and happy-dom (make node)")
    module = folder / "widgets.mjs"
    module.write_text(module_source, encoding="utf-8")
    completed = subprocess.run(
        [node, str(HARNESS), module.as_uri()],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        encoding="utf-8",
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def cases() -> list[dict]:
    return [
        {"name": name, "state": state, "width": width, "layout": layout, "live": live}
        for name, state in saved_widgets()
        for layout, width in WIDTHS.items()
        for live in (True, False)
    ]


def problems(case: dict, drawn: dict) -> list[str]:
    """What is missing from the picture of ``case`` (a saved widget at one width)."""
    if "crash" in drawn:
        return [f"the widget did not draw: {drawn['crash']}"]
    data, view, kind = json.loads(case["state"]["payload"]), case["state"]["view"], case["state"]["kind"]
    found = []
    width = 660 if case["layout"] == "wide" else 8 * (case["width"] // 8)
    if not drawn["viewBox"] or float(drawn["viewBox"].split()[2]) != width:
        found.append(f"picture {drawn['viewBox']}, expected {width} units across")
    expected = EXPECTED[kind](data, view)
    for what in ("cells", "bars"):
        if what in expected and drawn[what] != expected[what]:
            found.append(f"{drawn[what]} {what} drawn, expected {expected[what]}")
    texts = " ".join(drawn["texts"])
    found += [f"no text {label!r}" for label in expected.get("labels", []) if label not in texts]
    if kind == "positional" and [href.startswith("data:image/x-pixels") for href in drawn["images"]] != [True, True]:
        found.append(f"chapter 5's two pictures not painted: {drawn['images']}")
    if drawn["errors"]:
        found.append(f"errors shown: {drawn['errors']}")
    if case["live"] and (drawn["note"] or drawn["disabled"]):
        found.append(f"with a kernel nothing is disabled: {drawn['disabled']} {drawn['note']!r}")
    return found


def _heads(data, view):
    T, layer = len(data["labels"]), min(view["layer"], data["num_layers"] - 1)
    shown = data["num_heads"] if view["head"] == "all" else 1
    return {"cells": shown * T * T, "labels": [*data["labels"][:1], f"layer {layer}"]}


def _decoding(data, view):
    L, T = len(data["output"]), len(data["source"])
    s = min(max(1, view["step"]), L)
    return {"cells": s * T + s * (s + 1) // 2, "labels": [f"step {s} of {L}", "cross-attention to the source"]}


EXPECTED = {
    "attention": lambda data, view: {
        "cells": len(data["tokens"]) ** 2,
        "bars": sum(
            w > 0
            for w in data["weights"][int(view["scaled"])][int(view["causal"])][view["temperature"]][
                min(view["query"], len(data["tokens"]) - 1)
            ]
        ),
        "labels": ["output h", "attention matrix A", *data["tokens"][:1]],
    },  # fmt: skip
    "key_value": lambda data, view: {
        "bars": sum(w > 0 for w in data["weights"]),
        "labels": ["returned value", "query ["],
    },
    "soft_hard": lambda data, view: {
        "bars": sum(w > 0 for key in ("softmax", "sparsemax") for w in data[key][view["beta"]])
        + sum(w > 0 for w in data["hardmax"]),
        "labels": ["softmax(βs)", "sparsemax(βs)", "hardmax(s)", "Entropy of the weights"],
    },
    "heads": _heads,
    "positional": lambda data, view: {"labels": ["PE: ", f"{view['measure']} of PE[i] and PE[j]"]},
    "decoding": _decoding,
}


@functools.cache
def _drawn_now(folder: str) -> tuple[list[dict], list[dict]]:
    todo = cases()
    return todo, draw(widget_module_source(), todo, Path(folder))


@pytest.fixture(scope="module")
def drawn(tmp_path_factory):
    return _drawn_now(str(tmp_path_factory.mktemp("drawing")))


def test_every_widget_kind_of_the_chapters_is_drawn():
    kinds = {state["kind"] for _, state in saved_widgets()}
    assert kinds == set(EXPECTED), f"the chapters save widgets of kinds {sorted(kinds)}"


def test_every_saved_widget_draws_what_its_numbers_say_in_both_layouts(drawn):
    todo, answers = drawn
    failures = [
        f"{case['name']} {case['state']['kind']} {case['layout']} {'kernel' if case['live'] else 'website'}: {p}"
        for case, answer in zip(todo, answers)
        for p in problems(case, answer)
    ]
    assert not failures, "\n".join(failures)


def test_the_narrow_layout_is_another_picture(drawn):
    todo, answers = drawn
    by_case = {(c["name"], c["state"]["title"], c["layout"], c["live"]): a["html"] for c, a in zip(todo, answers)}
    for (name, title, layout, live), html in by_case.items():
        if layout == "wide":
            assert html != by_case[(name, title, "narrow", live)], f"{name}: the same picture at 390 px"


def test_on_the_website_the_model_bound_controls_say_where_they_work(drawn):
    todo, answers = drawn
    for case, answer in zip(todo, answers):
        if not case["live"] and answer["disabled"]:
            assert "open the chapter in Colab or Jupyter" in answer["note"], (case["name"], answer["note"])


def test_a_broken_renderer_fails_these_checks(tmp_path):
    """A copy of the module whose bar charts never get their height: the check above must fail."""
    source = widget_module_source()
    broken = source.replace('bars[j].setAttribute("height", h);', "")
    assert broken != source
    todo = [case for case in cases() if case["state"]["kind"] in {"attention", "soft_hard"}]
    answers = draw(broken, todo, tmp_path)
    assert all(any("bars drawn" in p for p in problems(c, a)) for c, a in zip(todo, answers))
