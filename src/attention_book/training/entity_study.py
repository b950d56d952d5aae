"""Chapter 7's entity study: MiniLM fine-tuned to tag named entities, against taggers trained from scratch.

Every arm tags the WNUT-16 tweets (:mod:`attention_book.data.entities`) through the same word
pieces and the same alignment, on the same batches (:mod:`attention_book.training.token_tagging`):

* ``fine-tuned``: all-MiniLM-L6-v2 with a new linear tag head, every weight trained;
* ``MiniLM from scratch``: the same architecture and head with every weight random, for as
  many steps: the two differ only in where the encoder's weights come from;
* ``small from scratch``: the chapter's small encoder (``SMALL_MODEL``) and a tag head, from
  random numbers, for as many steps (a step costs a small fraction of MiniLM's);
* ``small, 4x steps``: the same with four times the steps.

Every choice is made on the validation split: each arm's learning rate (the grid is searched
with seed 0, and grows while validation prefers its largest or smallest rate), and the
checkpoint of every run (:class:`~attention_book.training.transfer.KeepBest`, by entity F1).
Seeds 0-4 then run at the chosen rate; the test split is scored once per run, at the end.
The full study takes about 50 minutes on two cores (``make entities`` runs its arms in two
processes), so chapter 7 loads it from
``stored/entity_study.json`` (:func:`load_entity_study`); ``make entities`` makes it again
(``tools/stored/run_entity_study.py``), and ``tests/unit/test_entity_study.py`` pins it to
today's code by :func:`entity_study_fingerprint` and a live re-run of part of one run.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import dataclass

import torch

from .._files import STORED_FOLDER, record_stored_file, stored_file
from ..data import entities
from ..data.entities import ENTITY_TYPES, align_words, entity_scores, entity_spans, load_entities
from ..pretrained import PretrainedEncoder
from . import token_tagging, transfer
from .study_results import code_fingerprint
from .token_tagging import (
    predict_words,
    pretrained_tagger,
    random_minilm_tagger,
    scratch_tagger,
    tagging_loss,
    train_tagger,
)
from .transfer import KeepBest, checkpoint_steps

__all__ = [
    "TAGGERS",
    "ArmPlan",
    "EntityPlan",
    "ENTITY_PLAN",
    "ENTITY_STUDY_FILE",
    "ENTITY_STUDY_COMMAND",
    "prepare_entity_data",
    "build_tagger",
    "run_tagger",
    "run_arm",
    "score_split",
    "run_entity_study",
    "store_entity_study",
    "load_entity_study",
    "entity_study_fingerprint",
]

ENTITY_STUDY_FILE = "entity_study.json"
ENTITY_STUDY_COMMAND = "make entities"
TAGGERS = ("MiniLM, pretrained", "small encoder", "MiniLM, random")


@dataclass(frozen=True)
class ArmPlan:
    """One arm: its tagger (one of :data:`TAGGERS`), its first learning rates and its steps.

    ``every_seed=False``: the rate search only (the first seed, validation only, no test).
    """

    name: str
    tagger: str
    learning_rates: tuple[float, ...]
    steps: int
    every_seed: bool = True


@dataclass(frozen=True)
class EntityPlan:
    """What the entity study runs: the arms, the seeds, the checkpoints, the batches."""

    arms: tuple[ArmPlan, ...] = (
        ArmPlan("fine-tuned", "MiniLM, pretrained", (1e-4, 3e-4, 1e-3), steps=300),
        ArmPlan("MiniLM from scratch", "MiniLM, random", (3e-4, 1e-3), steps=300),
        ArmPlan("small from scratch", "small encoder", (3e-4, 1e-3, 3e-3), steps=300),
        ArmPlan("small, 4x steps", "small encoder", (3e-4, 1e-3, 3e-3), steps=1200),
    )
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    batch_size: int = 32  # 300 steps are about 5.7 passes over the 1,676 training tweets
    checkpoints: int = 6  # validation F1 is measured 6 times per run; the best checkpoint is kept
    max_tokens: int = 128  # no tweet is longer (the longest has 75 pieces)
    split_seed: int = 0
    grow_grid: int = 2  # at most this many rates added beyond each end of a grid (along RATE_LADDER)

    def arm(self, name: str) -> ArmPlan:
        """The plan of the arm called ``name``."""
        found = [arm for arm in self.arms if arm.name == name]
        if not found:
            raise ValueError(f"the plan has no arm {name!r}; its arms are {[arm.name for arm in self.arms]}")
        return found[0]

    def as_dict(self) -> dict:
        return json.loads(json.dumps(dataclasses.asdict(self)))


ENTITY_PLAN = EntityPlan()


def prepare_entity_data(pretrained: PretrainedEncoder, plan: EntityPlan = ENTITY_PLAN) -> dict:
    """The splits' tweets (``sentences``), their gold tags (``gold``) and word pieces (``aligned``)."""
    splits = load_entities(seed=plan.split_seed)
    names = ("train", "validation", "test")
    sentences = {name: getattr(splits, name) for name in names}
    return {
        "sentences": sentences,
        "gold": {name: [list(sentence.tags) for sentence in sentences[name]] for name in names},
        "aligned": {name: align_words(pretrained.tokenizer, sentences[name], plan.max_tokens) for name in names},
    }


def build_tagger(tagger: str, pretrained: PretrainedEncoder, seed: int, max_len: int) -> torch.nn.Module:
    """A new tagger of the kind ``tagger`` (one of :data:`TAGGERS`) whose random weights come from ``seed``."""
    if tagger == "MiniLM, pretrained":
        return pretrained_tagger(pretrained, seed)
    if tagger == "small encoder":
        return scratch_tagger(pretrained.tokenizer.get_vocab_size(), max_len, seed)
    if tagger == "MiniLM, random":
        return random_minilm_tagger(pretrained, seed)
    raise ValueError(f"tagger must be one of {TAGGERS}, but {tagger!r} was given")


def score_split(model: torch.nn.Module, data: dict, split: str) -> tuple[dict, list[list[str]]]:
    """Entity counts per type ``[gold, predicted, correct]`` and words tagged right, on one split;
    and the predicted tags."""
    predicted = predict_words(model, data["aligned"][split])
    gold = data["gold"][split]
    by_type = {kind: entity_scores(gold, predicted, kind) for kind in ENTITY_TYPES}
    return {
        "by_type": {kind: [score.gold, score.predicted, score.correct] for kind, score in by_type.items()},
        "words_right": sum(g == p for tags, guesses in zip(gold, predicted) for g, p in zip(tags, guesses)),
        "words": sum(len(tags) for tags in gold),
    }, predicted


def run_tagger(arm: ArmPlan, pretrained: PretrainedEncoder, data: dict, lr: float, seed: int, plan: EntityPlan):
    """Train one tagger, keeping its best checkpoint by validation entity F1: (model, record)."""
    start = time.perf_counter()
    curve = []

    def validation_f1(model: torch.nn.Module) -> float:
        f1 = entity_scores(data["gold"]["validation"], predict_words(model, data["aligned"]["validation"])).f1
        curve.append(f1)
        return f1

    model = build_tagger(arm.tagger, pretrained, seed, max_len=plan.max_tokens)
    steps = sorted(checkpoint_steps(arm.steps, plan.checkpoints))
    keep_best = KeepBest(set(steps), validation_f1)
    history = train_tagger(
        model, data["aligned"]["train"], arm.steps, lr=lr, seed=seed, batch_size=plan.batch_size, keep_best=keep_best
    )
    record = {
        "seed": seed,
        "lr": lr,
        "chosen_step": keep_best.step,
        "validation_f1": keep_best.score,
        "validation_loss": tagging_loss(model, data["aligned"]["validation"]),
        "validation_by_step": [[step, f1] for step, f1 in zip(steps, curve)],
        "first_losses": history.step_loss[:10],
        "seconds": time.perf_counter() - start,
    }
    return model, record


RATE_LADDER = tuple(float(f"{mantissa}e{exponent}") for exponent in range(-7, 1) for mantissa in (1, 3))
"""The learning rates a grid is drawn from and grows along: 1e-7, 3e-7, 1e-6, ..., 1, 3."""


def _next_rate(rate: float, up: bool) -> float:
    """The rate of :data:`RATE_LADDER` next above (or below) ``rate``, a factor of about 3 away."""
    if rate not in RATE_LADDER:
        raise ValueError(f"learning rates must be taken from RATE_LADDER (1 or 3 times a power of ten), not {rate!r}")
    index = RATE_LADDER.index(rate) + (1 if up else -1)
    if not 0 <= index < len(RATE_LADDER):
        raise ValueError(f"the grid cannot grow beyond {rate!r}")
    return RATE_LADDER[index]


def _ranking(run: dict) -> tuple[float, float]:
    """How the rate search ranks runs: validation F1 first; among equal F1 (every run still at 0, say),
    the lower validation loss."""
    return run["validation_f1"], -run["validation_loss"]


def _search_rate(arm: ArmPlan, pretrained: PretrainedEncoder, data: dict, plan: EntityPlan, progress: bool):
    """The first seed at every rate of the arm's grid, grown while validation prefers an end.

    Returns (the best run's model, every run's record by rate, the best rate).
    """
    rates = list(arm.learning_rates)
    runs, best_model, grown = {}, None, {"low": 0, "high": 0}
    while True:
        for lr in [rate for rate in rates if rate not in runs]:
            model, runs[lr] = run_tagger(arm, pretrained, data, lr=lr, seed=plan.seeds[0], plan=plan)
            if progress:
                print(
                    f"{arm.name}, seed {plan.seeds[0]}, lr {lr:g}: validation F1 {runs[lr]['validation_f1']:.3f}",
                    flush=True,
                )
            if best_model is None or _ranking(runs[lr]) > max(_ranking(runs[rate]) for rate in runs if rate != lr):
                best_model = model
        best = max(runs, key=lambda rate: _ranking(runs[rate]))
        end = "low" if best == min(rates) else "high" if best == max(rates) else None
        if end is None or grown[end] >= plan.grow_grid:
            return best_model, runs, best
        grown[end] += 1
        rates.append(_next_rate(best, up=end == "high"))


def _test_record(model: torch.nn.Module, record: dict, data: dict, keep_predictions: bool) -> dict:
    """The run's record with its test scores (and, for one seed, its predicted test entities)."""
    test, predicted = score_split(model, data, "test")
    if keep_predictions:
        record = {
            **record,
            "test_entities": [
                [row, start, end, kind] for row, tags in enumerate(predicted) for start, end, kind in entity_spans(tags)
            ],
        }
    return {**record, "test": test}


def run_arm(arm: ArmPlan, pretrained: PretrainedEncoder, data: dict, plan: EntityPlan, progress: bool) -> dict:
    """One arm of ``plan``: its rate chosen on validation with the first seed, then every seed at that rate."""
    start = time.perf_counter()
    model, search, chosen = _search_rate(arm, pretrained, data, plan=plan, progress=progress)
    entry = {"search": [search[lr] for lr in sorted(search)], "chosen_lr": chosen}
    if arm.every_seed:
        runs = [_test_record(model, search[chosen], data, keep_predictions=True)]
        for seed in plan.seeds[1:]:
            model, record = run_tagger(arm, pretrained, data, lr=chosen, seed=seed, plan=plan)
            runs.append(_test_record(model, record, data, keep_predictions=False))
            if progress:
                print(f"{arm.name}, seed {seed}: validation F1 {record['validation_f1']:.3f}", flush=True)
        entry["runs"] = runs
    entry["seconds"] = time.perf_counter() - start
    return entry


def run_entity_study(
    pretrained: PretrainedEncoder, plan: EntityPlan = ENTITY_PLAN, progress: bool = True, arms: dict | None = None
) -> dict:
    """Every arm of ``plan`` (:func:`run_arm`), in the plan's order.

    ``arms``: entries already run (by another process, say), by arm name; the others run here. Each
    arm seeds every run it makes, so an arm gives the same entry wherever and whenever it runs.
    """
    data = prepare_entity_data(pretrained, plan)
    results = {"plan": plan.as_dict(), "sizes": {name: len(data["gold"][name]) for name in data["gold"]}, "arms": {}}
    for arm in plan.arms:
        done = (arms or {}).get(arm.name)
        results["arms"][arm.name] = (
            done if done is not None else run_arm(arm, pretrained, data, plan=plan, progress=progress)
        )
    return results


def store_entity_study(results: dict) -> str:
    """Write ``results`` into the package's ``stored/`` folder and record its SHA-256 (returned)."""
    path = STORED_FOLDER / ENTITY_STUDY_FILE
    path.write_text(json.dumps(results, indent=1) + "\n")
    return record_stored_file(ENTITY_STUDY_FILE)


def load_entity_study() -> dict:
    """The stored entity study (SHA-256 checked), as :func:`run_entity_study` returned it, with its provenance."""
    return json.loads(stored_file(ENTITY_STUDY_FILE).read_text())


def entity_study_fingerprint() -> dict:
    """The fingerprint (:func:`~attention_book.training.study_results.code_fingerprint`) of the code that
    :func:`run_entity_study` reaches in this module, the taggers' recipes, the recipes they share with
    the transfer study and the data module of the tweets."""
    modules = (transfer, entities, token_tagging, sys.modules[__name__])
    return code_fingerprint(modules, ("run_entity_study", "ENTITY_PLAN"))
