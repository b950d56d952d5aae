"""Chapter 7's stored entity study is pinned to the code that would make it again, and says what it did.

The study fine-tunes MiniLM seven times (50 minutes on two cores), so chapter 7 loads it
from ``stored/entity_study.json``. These tests fail when the stored study no longer is what today's
code computes: its plan is not ``ENTITY_PLAN``, its fingerprint of the study's code
(:func:`entity_study_fingerprint`: the study module, the taggers' recipes, the tweets' alignment and
scoring) is not today's, or a live re-run of the start of two stored runs does not find the losses
they recorded. The live re-run checks what the fingerprint cannot: library code outside those
modules (``fit``, the encoder, the tokenizer) and the data file. Its first loss is computed before
any update, so it agrees to float rounding on any machine; the next few steps of the small model
move away from it only as fast as rounding grows, far less than the tolerance.
"""

from __future__ import annotations

import inspect

import pytest

from attention_book.data import entities
from attention_book.data.entities import ENTITY_TYPES, EntityScores, entity_scores, load_entities
from attention_book.training import entity_study
from attention_book.training.entity_study import (
    ENTITY_PLAN,
    ENTITY_STUDY_COMMAND,
    RATE_LADDER,
    _next_rate,
    build_tagger,
    entity_study_fingerprint,
    load_entity_study,
    prepare_entity_data,
)
from attention_book.training.token_tagging import train_tagger
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def stored():
    return load_entity_study()


def _scores(counts: dict) -> EntityScores:
    """Micro-averaged counts over the entity types of a stored ``by_type``."""
    gold, predicted, correct = (sum(values[i] for values in counts.values()) for i in range(3))
    return EntityScores(gold, predicted, correct)


def test_the_stored_plan_is_entity_plan_and_its_command_is_a_make_target(stored):
    assert stored["plan"] == ENTITY_PLAN.as_dict(), (
        f"stored/entity_study.json was made with another plan than ENTITY_PLAN: run `{ENTITY_STUDY_COMMAND}` again"
    )
    assert stored["command"] == ENTITY_STUDY_COMMAND == "make entities"
    assert "\nentities: " in (ROOT / "Makefile").read_text()
    assert stored["machine"]["date"] and stored["machine"]["cpu"] and stored["machine"]["torch_threads"] == 1


def test_the_stored_study_was_made_by_today_s_code(stored):
    today = entity_study_fingerprint()
    changed = sorted(set(stored["code"]["reaches"]) ^ set(today["reaches"]))
    assert stored["code"]["sha256"] == today["sha256"], (
        "the entity study's code changed since stored/entity_study.json was made"
        + (f" (names reached now or then only: {changed})" if changed else "")
        + f": run `{ENTITY_STUDY_COMMAND}` again"
    )


def test_the_fingerprint_sees_a_change_to_the_alignment_but_not_to_a_docstring(monkeypatch):
    """A check that cannot fail proves nothing."""
    original = inspect.getsource
    before = entity_study_fingerprint()["sha256"]
    first = "first = word is not None and word != previous"
    assert original(entities).count(first) == 1

    def edited(old: str, new: str):
        return lambda module: original(module).replace(old, new)

    monkeypatch.setattr(inspect, "getsource", edited(first, "first = word is not None"))  # every piece labelled
    assert entity_study_fingerprint()["sha256"] != before
    monkeypatch.setattr(inspect, "getsource", edited("steps=300", "steps=301"))
    assert entity_study_fingerprint()["sha256"] != before
    monkeypatch.setattr(
        inspect, "getsource", edited('"""The target of every piece:', '"""Reworded: the target of every piece:')
    )
    assert entity_study_fingerprint()["sha256"] == before


def test_every_arm_chose_its_rate_on_validation_and_ran_every_seed_at_it(stored):
    for arm in ENTITY_PLAN.arms:
        entry = stored["arms"][arm.name]
        search = {run["lr"]: run for run in entry["search"]}
        assert set(arm.learning_rates) <= set(search) and set(search) <= set(RATE_LADDER)
        best = max(search.values(), key=lambda run: (run["validation_f1"], -run["validation_loss"]))
        assert entry["chosen_lr"] == best["lr"]
        assert all(run["seed"] == ENTITY_PLAN.seeds[0] for run in search.values())
        if not arm.every_seed:
            assert "runs" not in entry  # validation only: the test split is never scored
            continue
        runs = entry["runs"]
        assert [run["seed"] for run in runs] == list(ENTITY_PLAN.seeds)
        assert all(run["lr"] == entry["chosen_lr"] for run in runs)
        assert runs[0]["validation_f1"] == best["validation_f1"]  # the first seed's run is the search's
        for run in runs:
            steps = [step for step, _ in run["validation_by_step"]]
            assert run["chosen_step"] in steps and steps[-1] == arm.steps
            assert run["validation_f1"] == max(f1 for _, f1 in run["validation_by_step"])
            assert set(run["test"]["by_type"]) == set(ENTITY_TYPES)
            assert run["test"]["words"] == sum(len(tweet) for tweet in load_entities().test)


def test_the_stored_test_entities_give_the_stored_counts(stored):
    """Seed 0's predicted test entities, scored again here, give the counts stored beside them."""
    gold = [list(tweet.tags) for tweet in load_entities().test]
    for name, entry in stored["arms"].items():
        if "runs" not in entry:
            continue
        run = entry["runs"][0]
        predicted = [["O"] * len(tags) for tags in gold]
        for row, start, end, kind in run["test_entities"]:
            predicted[row][start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
        counts = run["test"]["by_type"]
        assert entity_scores(gold, predicted) == _scores(counts), name
        for kind in ENTITY_TYPES:
            assert list(vars(entity_scores(gold, predicted, kind)).values()) == counts[kind], (name, kind)


def test_a_grid_grows_along_the_ladder():
    assert _next_rate(3e-4, up=True) == 1e-3 and _next_rate(1e-3, up=False) == 3e-4
    with pytest.raises(ValueError, match="RATE_LADDER"):
        _next_rate(2e-4, up=True)


def test_a_live_re_run_starts_where_the_stored_runs_started(stored, minilm, one_thread):
    plan = ENTITY_PLAN
    data = prepare_entity_data(minilm, plan)
    for arm, steps in (("small from scratch", 8), ("fine-tuned", 1)):
        run = stored["arms"][arm]["runs"][0]
        model = build_tagger(plan.arm(arm).tagger, minilm, run["seed"], max_len=plan.max_tokens)
        history = train_tagger(model, data["aligned"]["train"], steps, lr=run["lr"], seed=run["seed"])
        assert history.step_loss == pytest.approx(run["first_losses"][:steps], rel=1e-3), (
            f"{arm}: the live run's first losses {history.step_loss} are not the stored run's "
            f"{run['first_losses'][:steps]}: the data, the alignment or the library changed; "
            f"run `{ENTITY_STUDY_COMMAND}` again"
        )


def test_the_module_names_its_one_command():
    assert entity_study.ENTITY_STUDY_FILE == "entity_study.json"
    assert "make entities" in inspect.getdoc(entity_study)


def test_arms_run_in_other_processes_are_taken_as_they_are_and_the_rest_run_here(minilm, monkeypatch):
    """``make entities`` runs the arms in two processes (``--jobs 2``) and hands their entries to
    run_entity_study, which keeps the plan's order and runs only the arms it was not given."""
    ran = []
    monkeypatch.setattr(entity_study, "run_arm", lambda arm, *args, **options: ran.append(arm.name) or {"here": 1})
    given = {arm.name: {"elsewhere": arm.name} for arm in ENTITY_PLAN.arms[1:]}
    results = entity_study.run_entity_study(minilm, ENTITY_PLAN, progress=False, arms=given)
    assert ran == [ENTITY_PLAN.arms[0].name]
    assert list(results["arms"]) == [arm.name for arm in ENTITY_PLAN.arms]
    assert results["arms"][ENTITY_PLAN.arms[0].name] == {"here": 1}
    assert all(results["arms"][name] == entry for name, entry in given.items())
