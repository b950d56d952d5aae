"""attention_book.training.transfer_study (chapter 7): the study runs the recipes, chooses on validation,
scores test once, and gives intervals over its repeats."""

from __future__ import annotations

import math

import pytest
import torch

from attention_book.data.pieces import build_vocabulary
from attention_book.training import study_results, transfer_study
from attention_book.training.study_results import (
    load_study,
    mean_interval,
    paired_difference,
    store_study,
    summarize_study,
)
from attention_book.training.transfer_study import (
    LAST_FOUR,
    StudyData,
    StudyPlan,
    prepare_study,
    probe_input,
    run_study,
    study_subset,
)
from tests.unit.test_training_transfer import _sentiment_texts

pytestmark = pytest.mark.usefixtures("one_thread")

TINY_PLAN = StudyPlan(
    sizes=(16, 48),
    repeats=2,
    small_steps={16: 4, 48: 6},
    fine_tune_steps={16: 2, 48: 4},
    mlm_steps=3,
    checkpoints=2,
    fine_tune_checkpoints=2,
    probe_steps=30,
    probe_weight_decays=(1e-4, 1e-1),
    batch_size=8,
    probe_layers=(3, -1, LAST_FOUR),
    extend_probe_grid=True,
)


@pytest.fixture(scope="module")
def tiny_study(minilm):
    texts, labels = _sentiment_texts(48, seed=10)
    valid_texts, valid_labels = _sentiment_texts(24, seed=11)
    test_texts, test_labels = _sentiment_texts(24, seed=12)
    vocabulary = build_vocabulary(minilm, texts + valid_texts)
    data = prepare_study(
        minilm,
        vocabulary,
        {"train": (texts, labels), "validation": (valid_texts, valid_labels), "test": (test_texts, test_labels)},
        max_tokens=16,
        split_layer=5,
    )
    return data, run_study(minilm, data, TINY_PLAN, progress=False)


def test_each_repeat_trains_on_its_own_random_subset_and_the_full_size_on_every_row():
    first, again, second = study_subset(10, 0, 100), study_subset(10, 0, 100), study_subset(10, 1, 100)
    assert torch.equal(first, again) and not torch.equal(first, second)
    assert len(set(first.tolist())) == 10 and max(first.tolist()) < 100
    assert sorted(study_subset(100, 3, 100).tolist()) == list(range(100))
    with pytest.raises(ValueError, match="size"):
        study_subset(101, 0, 100)


def test_the_study_records_every_repeat_of_every_arm_on_validation_and_test(tiny_study):
    _, results = tiny_study
    assert list(results["arms"]) == list(TINY_PLAN.arms)
    for arm, by_size in results["arms"].items():
        assert list(by_size) == ["16", "48"]
        for n, record in by_size.items():
            assert len(record["validation"]) == len(record["test"]) == len(record["chosen"]) == 2
            assert all(0 <= value <= 1 for value in record["validation"] + record["test"])
            if arm != "frozen":
                budget = (TINY_PLAN.fine_tune_steps if arm == "fine-tuned" else TINY_PLAN.small_steps)[int(n)]
                assert all(1 <= step <= budget for step in record["chosen"])
    assert results["baseline"]["test"] == pytest.approx(float(tiny_study[0].labels["test"].float().mean()))


def test_the_probe_s_layer_and_penalty_are_the_best_on_validation_and_the_penalty_lies_inside_the_grid(tiny_study):
    _, results = tiny_study
    for record in results["arms"]["frozen"].values():
        every = {
            (layer, decay): sum(scores)
            for layer, by_decay in record["validation_by_layer"].items()
            for decay, scores in by_decay.items()
        }
        best = max(every.values())
        assert every[str(record["chosen_layer"]), f"{record['chosen'][0]:g}"] == best
        grid = sorted(float(d) for d in record["validation_by_weight_decay"])
        assert grid[0] < record["chosen"][0] < grid[-1] or grid[0] == 1e-8 or grid[-1] == 1e4
        assert record["validation_by_weight_decay"] == record["validation_by_layer"][str(record["chosen_layer"])]
        assert record["validation"] == record["validation_by_weight_decay"][f"{record['chosen'][0]:g}"]


def test_the_penalty_grid_grows_by_powers_of_ten_until_validation_s_choice_is_inside(monkeypatch):
    def search(peak: int, extend: bool = True) -> list[float]:  # validation's accuracy peaks at a penalty of 10**peak
        tried = []

        def evaluate(decay):
            tried.append(decay)
            return [(-abs(round(math.log10(decay)) - peak), None)]

        plan = StudyPlan(
            sizes=(10,), arms=("frozen",), extend_probe_grid=extend, probe_weight_decays=(1e-3, 1e-2, 1e-1)
        )
        grid = sorted(transfer_study._penalty_search(evaluate, plan))
        assert sorted(tried) == grid  # every penalty is tried once
        return grid

    assert search(2) == [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0]
    assert search(-5) == [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1]
    assert search(-2) == [1e-3, 1e-2, 1e-1] == search(2, extend=False)
    assert search(9) == [1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0, 1e4]  # never beyond PROBE_DECAY_LIMITS


def test_the_probe_reads_one_depth_or_the_last_four_concatenated():
    pooled = torch.randn(3, 7, 2)
    features = transfer_study.ReviewFeatures(pooled, torch.zeros(3, 1, 2), torch.ones(3, 1, dtype=torch.bool), 5, 1.0)
    assert torch.equal(probe_input(features, 2), pooled[:, 2]) and torch.equal(probe_input(features, -1), pooled[:, 6])
    assert torch.equal(probe_input(features, LAST_FOUR), torch.cat([pooled[:, k] for k in (3, 4, 5, 6)], dim=-1))
    with pytest.raises(ValueError, match="depths 0 to 6"):
        probe_input(features, 7)


def test_the_test_split_never_influences_a_choice(minilm, tiny_study):
    data, results = tiny_study
    flipped = StudyData(data.vocabulary, data.texts, {**data.labels, "test": 1 - data.labels["test"]}, data.features)
    again = run_study(minilm, flipped, TINY_PLAN, progress=False)
    for arm in TINY_PLAN.arms:
        for n in ("16", "48"):
            ours, theirs = results["arms"][arm][n], again["arms"][arm][n]
            assert ours["chosen"] == theirs["chosen"] and ours["validation"] == theirs["validation"]
            assert theirs["test"] == pytest.approx([1 - value for value in ours["test"]])


def test_without_a_test_split_only_validation_is_scored(minilm, tiny_study):
    data, _ = tiny_study
    no_test = StudyData(
        data.vocabulary,
        {k: v for k, v in data.texts.items() if k != "test"},
        {k: v for k, v in data.labels.items() if k != "test"},
        {k: v for k, v in data.features.items() if k != "test"},
    )
    plan = StudyPlan(sizes=(16,), repeats=2, arms=("frozen",), probe_steps=20, probe_weight_decays=(1e-3,))
    results = run_study(minilm, no_test, plan, progress=False)
    assert "test" not in results["arms"]["frozen"]["16"] and "test" not in results["baseline"]
    assert set(summarize_study(results, "validation")["frozen"]) == {16}


def test_intervals_are_students_t_over_the_repeats_and_differences_are_paired():
    mean, low, high = mean_interval([1, 2, 3, 4, 5])
    assert (
        mean == 3
        and high - mean == pytest.approx(2.776 * (2.5**0.5) / 5**0.5, rel=1e-3)
        and mean - low == pytest.approx(high - mean)
    )
    with pytest.raises(ValueError, match="at least 2"):
        mean_interval([0.7])
    results = {"arms": {"a": {"10": {"test": [0.7, 0.8, 0.9]}}, "b": {"10": {"test": [0.6, 0.7, 0.8]}}}}
    difference = paired_difference(results, "a", "b", 10)
    assert (
        difference[0] == pytest.approx(0.1)
        and difference[1] == pytest.approx(0.1)
        and difference[2] == pytest.approx(0.1)
    )


def test_a_plan_refuses_unknown_arms_missing_step_budgets_and_unknown_probe_inputs():
    with pytest.raises(ValueError, match="arms must be among"):
        StudyPlan(sizes=(10,), arms=("zero-shot",))
    with pytest.raises(ValueError, match="small_steps must give a step budget for every size"):
        StudyPlan(sizes=(10, 20), small_steps={10: 5}, fine_tune_steps={10: 5, 20: 5})
    with pytest.raises(ValueError, match="probe_layers"):
        StudyPlan(sizes=(10,), arms=("frozen",), probe_layers=("first two",))
    StudyPlan(sizes=(10,), arms=("frozen",))  # the probe needs no step budget


def test_a_stored_study_is_read_back_only_while_its_checksum_holds(monkeypatch, tmp_path):
    monkeypatch.setattr(study_results, "STORED_FOLDER", tmp_path)
    from attention_book import _files

    monkeypatch.setattr(_files, "STORED_FOLDER", tmp_path)
    results = {"arms": {"frozen": {"100": {"validation": [0.7, 0.72], "test": [0.71, 0.7], "chosen": [1e-3, 1e-3]}}}}
    digest = store_study(results)
    assert digest in (tmp_path / "SHA256SUMS").read_text()
    assert load_study() == results
    (tmp_path / study_results.STUDY_FILE).write_text(
        (tmp_path / study_results.STUDY_FILE).read_text().replace("0.71", "0.91")
    )
    with pytest.raises(_files.ChecksumError, match=digest):
        load_study()


def _stored_like(code: str = "abc") -> dict:
    plan = StudyPlan(sizes=(10, 20), arms=("scratch", "frozen"), small_steps={10: 2, 20: 2}).as_dict()
    record = {"validation": [0.6, 0.7], "test": [0.6, 0.7], "chosen": [2, 2]}
    return {
        "plan": plan,
        "code": {"sha256": code},
        "seconds": {},
        "note": "",
        "arms": {
            "scratch": {"10": dict(record), "20": dict(record)},
            "frozen": {"10": dict(record), "20": dict(record)},
        },
    }


def test_merging_a_part_replaces_an_arm_only_with_settings_that_arm_owns():
    from tests.helpers import tool

    merge = tool("merge_transfer_parts")
    full, part = _stored_like(), _stored_like()
    part["plan"]["arms"], part["arms"] = (
        ["frozen"],
        {"frozen": {"10": {"validation": [0.8, 0.8], "test": [0.8, 0.8], "chosen": [1, 1]}}},
    )
    part["plan"]["probe_layers"], part["machine"], part["command"] = [5, LAST_FOUR], {"date": "today"}, "run it"
    with pytest.raises(SystemExit, match="every size"):  # a new probe setting must re-run the arm at every size
        merge.merge(full, part)
    part["arms"]["frozen"]["20"] = part["arms"]["frozen"]["10"]
    merge.merge(full, part)
    assert full["plan"]["probe_layers"] == [5, LAST_FOUR] and full["arms"]["frozen"]["20"]["test"] == [0.8, 0.8]
    assert full["arms"]["scratch"]["10"]["test"] == [0.6, 0.7] and full["parts"][-1]["replaced settings"] == [
        "probe_layers"
    ]
    part["plan"]["small_lr"] = 0.5  # the scratch arm's setting, which a frozen part does not own
    with pytest.raises(SystemExit, match="does not own"):
        merge.merge(_stored_like(), part)
    with pytest.raises(SystemExit, match="other study code"):
        merge.merge(_stored_like(code="other"), part)


def test_a_refactor_is_pinned_only_when_old_and_new_code_give_identical_numbers(monkeypatch):
    from tests.helpers import tool

    merge = tool("merge_transfer_parts")
    monkeypatch.setattr(merge, "study_fingerprint", lambda: {"sha256": "new", "reaches": []})
    full, old, new = _stored_like("old"), _stored_like("old"), _stored_like("new")
    new["arms"]["scratch"]["10"] = {**new["arms"]["scratch"]["10"], "test": [0.6, 0.71]}
    with pytest.raises(SystemExit, match="differ"):
        merge.pin_refactor(full, old, new)
    new["arms"]["scratch"]["10"]["test"] = [0.6, 0.7]
    merge.pin_refactor(full, old, new)
    assert full["code"]["sha256"] == "new" and full["code_history"][-1]["sha256"] == "old"
    assert len(full["code_history"][-1]["cells compared"]) == 4
