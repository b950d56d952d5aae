"""Chapter 7's stored transfer study is pinned to the code that would make it again.

The full grid takes hours, so chapter 7 loads it from ``stored/transfer_study.json``. These
tests fail when the stored run no longer is what today's code computes: its plan is not
``FULL_STUDY``, its fingerprint of the study's code (:func:`study_fingerprint`, over the recipes
and the study module) is not today's, or a live re-run of one cell of the grid (the frozen arm,
100 labels, repeat 0, with the layer and penalty validation chose) lands farther from the stored
run than the stored repeats differ from each other. Another machine's rounding moves a run
about as far as another repeat does, not further, so the live repeat 0 may differ from the
stored repeat 0 by at most the range of the stored repeats (the scale
:class:`attention_book.StoredRuns` uses for chapters 4 and 6).

How the fingerprint follows a change of code: a change that changes results means running
the arms it touches again (``make study``, or a part merged by ``tools/stored/merge_transfer_parts.py``).
A change meant to keep every result (a refactor) is pinned only after the same cells were run
by the old and the new code on one machine and gave identical numbers
(``merge_transfer_parts.py --same-results``); the stored file then lists the old fingerprint
in ``code_history`` with the cells compared.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from attention_book.training import transfer, transfer_study
from attention_book.training.study_results import STUDY_COMMAND, load_study, study_fingerprint
from attention_book.training.transfer_study import FULL_STUDY, prepare_study, run_study, study_subset

ROOT = Path(__file__).resolve().parents[2]


def test_the_stored_plan_is_full_study_and_its_command_is_a_make_target():
    stored = load_study()
    assert stored["plan"] == FULL_STUDY.as_dict(), (
        f"stored/transfer_study.json was made with another plan than FULL_STUDY: run `{STUDY_COMMAND}` again"
    )
    assert STUDY_COMMAND == "make study" and "\nstudy: " in (ROOT / "Makefile").read_text()
    for part in stored.get("parts", []):
        assert part["machine"]["date"] and part["command"] and part["code"]


def test_the_stored_study_was_made_by_today_s_study_functions():
    stored, today = load_study()["code"], study_fingerprint()
    changed = sorted(set(stored["reaches"]) ^ set(today["reaches"]))
    assert stored["sha256"] == today["sha256"], (
        "the study's functions changed since stored/transfer_study.json was made"
        + (f" (names reached now or then only: {changed})" if changed else "")
        + f": run `{STUDY_COMMAND}` (hours), a part of it, or pin a refactor with "
        "`python tools/stored/merge_transfer_parts.py --same-results OLD.json NEW.json`"
    )


def test_every_earlier_fingerprint_was_replaced_after_identical_results():
    stored = load_study()
    for entry in stored.get("code_history", []):
        assert entry["cells compared"] and "identical" in entry["because"] and entry["replaced_by"]
    chain = [entry["replaced_by"] for entry in stored.get("code_history", [])]
    assert not chain or chain[-1] == stored["code"]["sha256"]


def test_the_fingerprint_sees_a_change_to_a_function_the_study_calls(monkeypatch):
    """A check that cannot fail proves nothing: changing a function run_study reaches changes it."""
    original = inspect.getsource
    before = study_fingerprint()["sha256"]
    seeding = "torch.manual_seed(seed)\n    features = features.detach().float()"  # in train_linear_probe (recipes)
    sizes_doc = '"""The label counts ``arm`` is run at."""'  # StudyPlan.sizes_of's docstring (study module)
    assert original(transfer).count(seeding) == 1 and original(transfer_study).count(sizes_doc) == 1

    def edited(old: str, new: str):
        return lambda module: original(module).replace(old, new)

    monkeypatch.setattr(
        inspect, "getsource", edited(seeding, "torch.manual_seed(seed + 1)\n    features = features.detach().float()")
    )
    assert study_fingerprint()["sha256"] != before
    monkeypatch.setattr(
        inspect,
        "getsource",
        edited(
            "probe_weight_decays: tuple[float, ...] = PROBE_WEIGHT_DECAYS\n    probe_steps: int = 300",
            "probe_weight_decays: tuple[float, ...] = PROBE_WEIGHT_DECAYS\n    probe_steps: int = 301",
        ),
    )
    assert study_fingerprint()["sha256"] != before
    monkeypatch.setattr(
        inspect,
        "getsource",
        lambda module: (
            original(module)
            .replace('"""Logistic regression on frozen features', '"""A reworded docstring; logistic regression')
            .replace(sizes_doc, '"""A method\'s docstring, reworded."""')
        ),
    )
    assert study_fingerprint()["sha256"] == before, "docstrings are not part of the fingerprint"
    annotated = "def select(self, rows: torch.Tensor) -> ReviewFeatures:"  # ReviewFeatures.select (recipes)
    assert original(transfer).count(annotated) == 1
    monkeypatch.setattr(
        inspect, "getsource", edited(annotated, 'def select(self, rows: "Tensor") -> "ReviewFeatures":')
    )
    assert study_fingerprint()["sha256"] == before, "type annotations are not part of the fingerprint"


def test_a_live_re_run_of_one_cell_of_the_grid_lands_among_the_stored_repeats(minilm):
    from attention_book.data import build_vocabulary, load_reviews

    stored = load_study()["arms"]["frozen"]["100"]
    reviews = load_reviews()
    vocabulary = build_vocabulary(minilm, list(reviews.train.texts), max_pieces=4000)
    # Repeat 0's 100 training reviews (the full probe is trained on all of them at once, so their order does not matter)
    rows = study_subset(100, 0, len(reviews.train.labels))
    texts = [reviews.train.texts[int(i)] for i in rows]
    splits = {
        "train": (texts, reviews.train.labels[rows]),
        "validation": (reviews.validation.texts, reviews.validation.labels),
    }
    plan = dataclasses.replace(
        FULL_STUDY,
        sizes=(100,),
        repeats=1,
        arms=("frozen",),
        extend_probe_grid=False,
        probe_layers=(stored["chosen_layer"],),
        probe_weight_decays=(stored["chosen"][0],),
    )
    data = prepare_study(minilm, vocabulary, splits, max_tokens=plan.max_tokens, split_layer=plan.split_layer)
    live = run_study(minilm, data, plan, progress=False)["arms"]["frozen"]["100"]["validation"][0]
    low, high = min(stored["validation"]), max(stored["validation"])
    spread = high - low
    print(
        f"frozen, 100 labels, repeat 0: validation {live:.2%} here, {stored['validation'][0]:.2%} stored; "
        f"the stored repeats span {low:.2%} to {high:.2%}"
    )
    assert abs(live - stored["validation"][0]) <= spread, (
        f"the live re-run of repeat 0 ({live:.2%}) is {abs(live - stored['validation'][0]):.2%} from the stored one "
        f"({stored['validation'][0]:.2%}), more than the stored repeats differ from each other ({spread:.2%}): "
        f"the study's code or data changed; run `{STUDY_COMMAND}` again"
    )


def test_the_fingerprint_is_the_same_on_every_python():
    """Python 3.12 gives every function an empty ``type_params`` (3.11 has none, 3.13's ast.dump leaves
    empty fields out): fields that are empty or None do not count, so the same code gives one fingerprint."""
    import ast

    from attention_book.training.study_results import _canonical_dump

    function = ast.parse("def f(x, y=None):\n    return x + 1\n").body[0]
    before = _canonical_dump(function)
    function._fields = (*function._fields, "type_params")  # as Python 3.12 writes every function
    function.type_params = []
    assert _canonical_dump(function) == before and "type_params" not in before
    assert "Constant(value=1)" in before  # what the code computes is still there
