"""StoredRuns: a chapter's extra seeds trained here or loaded from the package (chapters 4 and 6)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import attention_book as ab
from attention_book import _files
from attention_book._files import ChecksumError, StoredFile
from attention_book.training import stored_runs


@pytest.fixture
def stored_folder(tmp_path, monkeypatch):
    """An empty stored/ folder in place of the package's, where toy_seeds.safetensors is registered."""
    monkeypatch.setattr(_files, "STORED_FOLDER", tmp_path)
    monkeypatch.setattr(stored_runs, "STORED_FOLDER", tmp_path)
    toy = StoredFile(
        "toy_seeds.safetensors",
        writer="src/attention_book/training/stored_runs.py",
        command="make seeds",
        rerun_when="never: a test's file",
    )
    monkeypatch.setitem(_files.STORED_FILES, toy.name, toy)
    return tmp_path


def build(seed):
    def make():
        torch.manual_seed(seed)
        return nn.Linear(3, 2)

    return make


def train(calls, steps=7, shift=1.0, accuracy=None):
    def step(model):
        calls.append(model)
        with torch.no_grad():
            model.weight.add_(shift)
        return {"steps": steps} if accuracy is None else {"steps": steps, "validation": accuracy}

    return step


def store_seed_0(monkeypatch):
    """Store the toy run of seed 0 as `make seeds` would, then go back to the reader's mode."""
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "store")
    runs = ab.StoredRuns("toy")
    runs.run("linear", 0, build(0), train([]))
    runs.save()
    monkeypatch.delenv(ab.training.SEEDS_VARIABLE)


def test_store_then_load_gives_the_same_weights_and_trains_only_the_live_seed(stored_folder, monkeypatch):
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "store")
    runs, calls = ab.StoredRuns("toy"), []
    trained = {seed: runs.run("linear", seed, build(seed), train(calls))[0] for seed in range(3)}
    runs.save()
    assert len(calls) == 3 and (stored_folder / "toy_seeds.safetensors").is_file()
    assert "toy_seeds.safetensors" in (stored_folder / "SHA256SUMS").read_text()

    monkeypatch.delenv(ab.training.SEEDS_VARIABLE)
    runs, calls = ab.StoredRuns("toy"), []
    for seed in range(3):
        model, info = runs.run("linear", seed, build(seed), train(calls))
        assert info == {"steps": 7}
        torch.testing.assert_close(model.weight, trained[seed].weight, rtol=0, atol=0)
        assert not model.training
    assert len(calls) == 1  # seed 0 only
    report = runs.report()
    assert "loaded, not trained here: linear, seeds 1 and 2 (trained earlier by this same code; loading took " in report
    assert (
        "linear, seed 0, trained here, against the same seed trained earlier: "
        "steps 7 here, 7 earlier (the 3 seeds trained earlier span 7 to 7)" in report
    )
    # the reader reads what matters to them; where and when the runs were trained stays with the file
    for machinery in ("make seeds", "safetensors", "torch ", "stored", "ATTENTION_BOOK_SEEDS"):
        assert machinery not in report
    assert runs.stored_by.startswith("make seeds on ") and "torch " in runs.stored_by
    model, _ = runs.run("linear", 0, build(0), train(calls), live=False)
    assert len(calls) == 1, "live=False loads seed 0 too"


def store_seeds(monkeypatch, outcomes):
    """Store toy runs of seeds 0, 1, ... with the given (steps, validation) outcomes."""
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "store")
    runs = ab.StoredRuns("toy")
    for seed, (steps, accuracy) in enumerate(outcomes):
        runs.run("linear", seed, build(seed), train([], steps=steps, accuracy=accuracy))
    runs.save()
    monkeypatch.delenv(ab.training.SEEDS_VARIABLE)


def test_another_machine_s_weights_with_the_same_outcome_pass(stored_folder, monkeypatch):
    """Other rounding gives other weights; what is compared is what the run reached."""
    store_seeds(monkeypatch, [(500, 0.995), (420, 0.994), (360, 0.999)])
    runs = ab.StoredRuns("toy")
    model, _ = runs.run("linear", 0, build(0), train([], steps=470, shift=1.3, accuracy=0.993))
    report = runs.report()  # weights 0.3 apart from the stored run: fine, the outcome is within the seeds' spread
    assert "steps 470 here, 500 earlier (the 3 seeds trained earlier span 360 to 500)" in report
    assert "validation 99.3% here, 99.5% earlier (the 3 seeds trained earlier span 99.4% to 99.9%)" in report
    # 99.3% lies below the seeds' own span (99.4-99.9%) but inside the band that span widened by its width: said so
    assert "outside the seeds' span but within the band allowed" in report
    assert "within the spread of the seeds" not in report


def test_a_run_inside_the_seeds_own_span_is_said_to_be_within_their_spread(stored_folder, monkeypatch):
    store_seeds(monkeypatch, [(500, 0.995), (420, 0.994), (360, 0.999)])
    runs = ab.StoredRuns("toy")
    runs.run("linear", 0, build(0), train([], steps=470, shift=1.3, accuracy=0.996))
    report = runs.report()
    assert "within the spread of the seeds" in report and "outside" not in report


@pytest.mark.parametrize(
    "steps, accuracy, named",
    [
        (700, 0.995, "steps 700 here, outside 220 to 640"),  # band: 360-500 widened by 140 each way
        (480, 0.97, "validation 97.0% here, outside 98.9% to 100.4%"),
    ],
)
def test_a_changed_recipe_is_caught_by_its_outcome(stored_folder, monkeypatch, steps, accuracy, named):
    store_seeds(monkeypatch, [(500, 0.995), (420, 0.994), (360, 0.999)])
    runs = ab.StoredRuns("toy")
    runs.run("linear", 0, build(0), train([], steps=steps, accuracy=accuracy))
    with pytest.raises(RuntimeError, match="make seeds") as error:
        runs.report()
    assert named in str(error.value) and "3 stored seeds span" in str(error.value)


def test_an_outcome_the_stored_runs_lack_is_named(stored_folder, monkeypatch):
    store_seed_0(monkeypatch)
    runs = ab.StoredRuns("toy")
    runs.run("linear", 0, build(0), train([], accuracy=0.9))
    with pytest.raises(RuntimeError, match="have no 'validation' to compare with"):
        runs.report()


def test_train_mode_writes_nothing_and_nothing_stored_means_train_here(stored_folder, monkeypatch, capsys):
    runs, calls = ab.StoredRuns("toy"), []
    assert "every seed is trained here" in capsys.readouterr().out
    runs.run("linear", 3, build(3), train(calls))
    assert len(calls) == 1
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "train")
    runs = ab.StoredRuns("toy")
    runs.run("linear", 1, build(1), train(calls))
    runs.save()
    assert len(calls) == 2 and not list(stored_folder.iterdir())


def test_bad_input_gets_clear_errors(stored_folder, monkeypatch):
    with pytest.raises(ValueError, match="short name"):
        ab.StoredRuns("chapter 6")
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "yes")
    with pytest.raises(ValueError, match=r"must be one of \['load', 'train', 'store'\].*'yes'"):
        ab.StoredRuns("toy")
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "train")
    runs = ab.StoredRuns("toy")
    with pytest.raises(ValueError, match="JSON"):
        runs.run("linear", 0, build(0), lambda model: {"model": model})
    with pytest.raises(ValueError, match="torch.nn.Module"):
        runs.run("linear", 0, lambda: "not a model", train([]))
    with pytest.raises(ValueError, match="without '/'"):
        runs.run("a/b", 0, build(0), train([]))


def test_a_missing_run_and_a_changed_file_are_named(stored_folder, monkeypatch):
    store_seed_0(monkeypatch)
    with pytest.raises(KeyError, match="make seeds"):
        ab.StoredRuns("toy").run("linear", 5, build(5), train([]))
    path = stored_folder / "toy_seeds.safetensors"
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(ChecksumError, match="SHA256SUMS"):
        ab.StoredRuns("toy")


@pytest.mark.parametrize(
    "chapter, names",
    [
        ("chapter04", ["one head", "two heads"]),
        (
            "chapter06",
            ["dates", "dates, dropout 0.1", "language model", "no causal mask", "review classifier", "sorting"],
        ),
    ],
)
def test_the_package_ships_every_seed_of_chapters_4_and_6(chapter, names, monkeypatch):
    monkeypatch.delenv(ab.training.SEEDS_VARIABLE, raising=False)
    runs = ab.StoredRuns(chapter)
    assert sorted(runs._stored_info) == sorted(f"{name}/seed{seed}" for name in names for seed in range(5))
    assert runs.stored_by.startswith("make seeds on ") and "torch thread" in runs.stored_by


def test_a_changed_model_gets_a_clear_error_not_torch_s(stored_folder, monkeypatch):
    store_seed_0(monkeypatch)
    with pytest.raises(ValueError, match="does not fit the model build.. returned.*make seeds"):
        ab.StoredRuns("toy").run("linear", 0, lambda: nn.Linear(4, 2), train([]), live=False)
    runs = ab.StoredRuns("toy")
    runs.run("linear", 0, lambda: nn.Linear(4, 2), train([]))  # trained here, compared with the stored run
    with pytest.raises(RuntimeError, match="other parameters than the stored one"):
        runs.report()


def test_the_machine_description_names_cpu_cores_threads_and_torch():
    from attention_book.device import cpu_name

    described = stored_runs.machine_description()
    assert described.startswith(cpu_name()) and f"torch {torch.__version__}" in described
    assert "torch thread" in described and " cores," in described


def test_seeds_that_all_landed_on_one_value_still_allow_the_next_by_its_resolution(stored_folder, monkeypatch):
    """Every stored run used all 250 steps (validation checked every 50): another machine's seed 0 may
    reach the target one check earlier; without a resolution the band would be 250 to 250."""
    store_seeds(monkeypatch, [(250, 0.994), (250, 0.992), (250, 0.99)])
    runs = ab.StoredRuns("toy")
    runs.run("linear", 0, build(0), train([], steps=200, accuracy=0.991))
    with pytest.raises(RuntimeError, match="steps 200 here, outside 250 to 250"):
        runs.report()
    runs = ab.StoredRuns("toy", resolution={"steps": 50})
    runs.run("linear", 0, build(0), train([], steps=200, accuracy=0.991))
    assert "steps 200 here, 250 earlier (the 3 seeds trained earlier span 250 to 250)" in runs.report()
    runs = ab.StoredRuns("toy", resolution={"steps": 50})
    runs.run("linear", 0, build(0), train([], steps=150, accuracy=0.991))
    with pytest.raises(RuntimeError, match="outside 200 to 300 .*widened by the resolution 50"):
        runs.report()
    with pytest.raises(ValueError, match="resolution must map"):
        ab.StoredRuns("toy", resolution={"steps": -1})


def test_the_report_groups_models_that_share_their_loaded_seeds(stored_folder, monkeypatch):
    monkeypatch.setenv(ab.training.SEEDS_VARIABLE, "store")
    runs = ab.StoredRuns("toy")
    for name in ("a", "b", "c"):
        for seed in range(4):
            runs.run(name, seed, build(seed), train([]))
    runs.save()
    monkeypatch.delenv(ab.training.SEEDS_VARIABLE)
    runs = ab.StoredRuns("toy")
    for name, seeds in (("a", (1, 2, 3)), ("b", (1, 2, 3)), ("c", (1, 3))):
        for seed in seeds:
            runs.run(name, seed, build(seed), train([]))
    assert runs.report().startswith("loaded, not trained here: a and b, seeds 1 to 3; c, seeds 1 and 3 (")
    runs.run("c", 2, build(2), train([]))
    assert runs.report().startswith("loaded, not trained here: c, seed 2 (")
    assert runs.report() == "every run above trained here"
