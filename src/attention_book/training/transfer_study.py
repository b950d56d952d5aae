"""Chapter 7's transfer study: four ways to build a classifier, at every label count, over several seeds.

The study is an experiment about the recipes of :mod:`attention_book.training.transfer`, and
it runs exactly those recipes: :func:`train_from_scratch` (the scratch arm, and the MLM arm
from a :func:`train_mlm` encoder), :func:`train_linear_probe` (frozen) and
:func:`fine_tune_top_layers` (fine-tuned), with :class:`KeepBest` handed to ``fit``'s
``on_step`` hook for early stopping. Everything is chosen on the validation split (the probe's
layer and penalty, every run's number of steps); the test split is scored once, after every
choice is made.

The full grid takes hours on a CPU, so chapter 7 loads it from ``stored/transfer_study.json``,
written by ``make study`` (``tools/stored/run_transfer_study.py``); its intervals, the stored file and the
fingerprint of the code that made it are in :mod:`attention_book.training.study_results`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .._validation import require_count, require_labels, require_texts
from ..data.pieces import PieceVocabulary
from ..pretrained import PretrainedEncoder
from . import transfer
from .transfer import (
    KeepBest,
    ReviewFeatures,
    checkpoint_steps,
    classifier_accuracy,
    encode_reviews,
    fine_tune_top_layers,
    fine_tuned_accuracy,
    probe_accuracy,
    train_from_scratch,
    train_linear_probe,
    train_mlm,
)

__all__ = [
    "STUDY_ARMS",
    "PROBE_WEIGHT_DECAYS",
    "PROBE_LAYERS",
    "LAST_FOUR",
    "StudyPlan",
    "StudyData",
    "prepare_study",
    "study_subset",
    "probe_input",
    "run_study",
    "FULL_STUDY",
]

STUDY_ARMS = ("scratch", "frozen", "fine-tuned", "MLM then fine-tuned")
"""The four arms of the study, in the order the chapter shows them."""

PROBE_WEIGHT_DECAYS = (1e-3, 1e-2, 1e-1, 1.0, 10.0)
"""The linear probe's first penalties on the validation split (on the *mean* loss: scikit-learn's
default ``C=1`` is ``1 / (2 n)``, 5e-3 at n = 100 and 5e-5 at n = 10,202). While validation
prefers the largest (or smallest) one, the study adds the next power of ten beyond it. (The
first stored run tried 1e-5 to 1e-1, and validation chose 1e-1, the edge, at every size.)"""

PROBE_DECAY_LIMITS = (1e-8, 1e4)
"""The grid of penalties never extends beyond these."""

LAST_FOUR = "last four"
"""The probe's input made of the last four layers' pooled vectors, concatenated (BERT's Table 7)."""

PROBE_LAYERS = (2, 3, 4, 5, 6, LAST_FOUR)
"""The frozen features validation chooses from: one of MiniLM's depths 2 to 6, or the last four (3 to 6)
together. Depths 0 and 1 (the embedding output and the first layer) score lowest in chapter 7's probe
of every depth and are left out: each candidate costs 25 probes per size or more."""


@dataclass
class StudyPlan:
    """The grid of a transfer study: label counts, repeats, step budgets and what validation chooses from.

    ``sizes``: labelled training examples per run. ``repeats``: runs per size and arm;
    repeat ``r`` trains with seed ``r`` on its own random subset of the training split
    (:func:`study_subset`). ``small_steps[n]`` and ``fine_tune_steps[n]``: the most steps a
    small encoder (scratch, MLM) or the fine-tuned top layers take at size ``n``; the
    validation split is scored ``checkpoints`` / ``fine_tune_checkpoints`` times along the
    way and the best checkpoint is kept (early stopping). ``mlm_steps``: masked-language-model
    pretraining on the training split's text (labels unused), once per repeat, or once for
    all repeats with ``shared_mlm``. The frozen arm's probe reads one of ``probe_layers``
    with one penalty of ``probe_weight_decays``, extended by powers of ten while validation
    prefers an edge (``extend_probe_grid``). ``arm_sizes`` may limit an arm to some sizes.
    """

    sizes: tuple[int, ...]
    repeats: int = 5
    small_steps: dict[int, int] = field(default_factory=dict)
    fine_tune_steps: dict[int, int] = field(default_factory=dict)
    mlm_steps: int = 1000
    checkpoints: int = 8
    fine_tune_checkpoints: int = 3
    probe_weight_decays: tuple[float, ...] = PROBE_WEIGHT_DECAYS
    probe_steps: int = 300
    batch_size: int = 32
    small_lr: float = 1e-3
    fine_tune_lr: float = 3e-4
    head_lr: float = 2e-3
    max_tokens: int = 48
    split_layer: int = 5
    arms: tuple[str, ...] = STUDY_ARMS
    arm_sizes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    shared_mlm: bool = False
    probe_layers: tuple[int | str, ...] = (-1,)
    extend_probe_grid: bool = False

    def __post_init__(self):
        self.sizes = tuple(require_count(n, "size") for n in self.sizes)
        require_count(self.repeats, "repeats")
        unknown = [arm for arm in [*self.arms, *self.arm_sizes] if arm not in STUDY_ARMS]
        if unknown:
            raise ValueError(f"arms must be among {STUDY_ARMS}, but {unknown} was given")
        for arm, sizes in self.arm_sizes.items():
            if not set(sizes) <= set(self.sizes):
                raise ValueError(f"arm_sizes[{arm!r}] must be among the sizes {self.sizes}, but is {sizes}")
        for name in ("small_steps", "fine_tune_steps"):
            steps = getattr(self, name)
            missing = [n for n in self.sizes if n not in steps]
            needed = (
                "scratch" in self.arms or "MLM then fine-tuned" in self.arms
                if name == "small_steps"
                else "fine-tuned" in self.arms
            )
            if needed and missing:
                raise ValueError(f"{name} must give a step budget for every size, but {missing} are missing")
        bad = [layer for layer in self.probe_layers if layer != LAST_FOUR and not isinstance(layer, int)]
        if not self.probe_layers or bad:
            raise ValueError(f"probe_layers must be depths (int) or {LAST_FOUR!r}, but is {self.probe_layers}")
        if not self.probe_weight_decays or min(self.probe_weight_decays) <= 0:
            raise ValueError(f"probe_weight_decays must be positive, but is {self.probe_weight_decays}")

    def as_dict(self) -> dict:
        return {
            "sizes": list(self.sizes),
            "repeats": self.repeats,
            "arms": list(self.arms),
            "small_steps": {str(n): s for n, s in self.small_steps.items()},
            "fine_tune_steps": {str(n): s for n, s in self.fine_tune_steps.items()},
            "mlm_steps": self.mlm_steps,
            "checkpoints": self.checkpoints,
            "fine_tune_checkpoints": self.fine_tune_checkpoints,
            "probe_weight_decays": list(self.probe_weight_decays),
            "probe_steps": self.probe_steps,
            "batch_size": self.batch_size,
            "small_lr": self.small_lr,
            "fine_tune_lr": self.fine_tune_lr,
            "head_lr": self.head_lr,
            "max_tokens": self.max_tokens,
            "split_layer": self.split_layer,
            "arm_sizes": {arm: list(sizes) for arm, sizes in self.arm_sizes.items()},
            "shared_mlm": self.shared_mlm,
            "probe_layers": list(self.probe_layers),
            "extend_probe_grid": self.extend_probe_grid,
        }

    def sizes_of(self, arm: str) -> tuple[int, ...]:
        """The label counts ``arm`` is run at."""
        return tuple(self.arm_sizes.get(arm, self.sizes))


@dataclass
class StudyData:
    """What every run of the study reads, computed once: the texts and labels per split, and the
    pretrained encoder's features (None when no arm needs them)."""

    vocabulary: PieceVocabulary
    texts: dict[str, list[str]]
    labels: dict[str, torch.Tensor]
    features: dict[str, ReviewFeatures] | None


def prepare_study(
    pretrained: PretrainedEncoder,
    vocabulary: PieceVocabulary,
    splits: dict[str, tuple[Sequence[str], torch.Tensor]],
    max_tokens: int = 48,
    split_layer: int = 5,
    observe: dict[str, transfer.Observer] | None = None,
    pretrained_features: bool = True,
) -> StudyData:
    """Check every split and run the pretrained encoder over it once (:func:`encode_reviews`).

    ``splits`` maps "train", "validation" and optionally "test" to (texts, labels).
    ``observe`` may give an observer per split for :func:`encode_reviews`. With
    ``pretrained_features=False`` the pretrained encoder is not run (enough for the
    scratch and MLM arms, which read the texts only).
    """
    if "train" not in splits or "validation" not in splits:
        raise ValueError(f"splits must hold 'train' and 'validation', but holds {sorted(splits)}")
    texts, labels, features = {}, {}, {}
    for name, (split_texts, split_labels) in splits.items():
        texts[name] = require_texts(split_texts)
        labels[name] = require_labels(split_labels, len(texts[name]))
        if pretrained_features:
            features[name] = encode_reviews(
                pretrained,
                texts[name],
                max_tokens=max_tokens,
                split_layer=split_layer,
                observe=(observe or {}).get(name),
            )
    return StudyData(vocabulary, texts, labels, features if pretrained_features else None)


def study_subset(size: int, repeat: int, total: int) -> torch.Tensor:
    """The training rows of one run: ``size`` of ``total``, a random sample of its own per repeat (seeded).

    The full size gives every row (in a repeat-specific order).
    """
    require_count(size, "size", 1, total)
    return torch.randperm(total, generator=torch.Generator().manual_seed(10_000 + repeat))[:size]


def probe_input(features: ReviewFeatures, layer: int | str) -> torch.Tensor:
    """The frozen features a probe reads: one depth's pooled vectors (N, d), or the last four concatenated (N, 4d)."""
    if layer == LAST_FOUR:
        return features.pooled[:, -4:].flatten(1)
    if not isinstance(layer, int) or not -features.pooled.shape[1] <= layer < features.pooled.shape[1]:
        raise ValueError(
            f"the features have depths 0 to {features.pooled.shape[1] - 1}, but layer {layer!r} was asked for"
        )
    return features.layer(layer)


# ---------------------------------------------------------------------------------
# One arm at one size. Each returns the record (validation scores, choices) and, per
# repeat, a function that scores the chosen model on a split (called for the test split
# only after every choice is made).

Scorer = Callable[[str], float]


def _decade(decay: float, up: bool) -> float:
    return float(f"{decay * 10 if up else decay / 10:g}")


def _penalty_search(evaluate: Callable[[float], list], plan: StudyPlan) -> dict[float, list]:
    """``evaluate(decay)`` -> one (validation score, probe) per repeat, over the plan's penalties, extended while
    validation's best mean is at an edge of the grid (``plan.extend_probe_grid``), within ``PROBE_DECAY_LIMITS``."""
    grid, found = sorted(plan.probe_weight_decays), {}
    while True:
        for decay in grid:
            if decay not in found:
                found[decay] = evaluate(decay)
        best = max(grid, key=lambda decay: sum(score for score, _ in found[decay]))
        if plan.extend_probe_grid and best == grid[-1] and best * 10 <= PROBE_DECAY_LIMITS[1]:
            grid.append(_decade(best, up=True))
        elif plan.extend_probe_grid and best == grid[0] and best / 10 >= PROBE_DECAY_LIMITS[0]:
            grid.insert(0, _decade(best, up=False))
        else:
            return {decay: found[decay] for decay in grid}


def _frozen_arm(data: StudyData, plan: StudyPlan, n: int) -> tuple[dict, list[Scorer]]:
    """One probe per repeat, layer and penalty; the layer and penalty with the best mean validation accuracy win."""
    labels = data.labels["train"]
    subsets = [study_subset(n, repeat, len(labels)) for repeat in range(plan.repeats)]
    searched = {}
    for layer in plan.probe_layers:
        train_x, valid_x = probe_input(data.features["train"], layer), probe_input(data.features["validation"], layer)

        def evaluate(decay: float) -> list:
            runs = []
            for repeat, rows in enumerate(subsets):
                probe = train_linear_probe(
                    train_x[rows], labels[rows], steps=plan.probe_steps, weight_decay=decay, seed=repeat
                )
                runs.append((probe_accuracy(probe, valid_x, data.labels["validation"]), probe))
            return runs

        searched[layer] = _penalty_search(evaluate, plan)
    layer, decay = max(
        ((layer, decay) for layer, by_decay in searched.items() for decay in by_decay),
        key=lambda pair: sum(score for score, _ in searched[pair[0]][pair[1]]),
    )
    runs = searched[layer][decay]
    record = {
        "validation": [score for score, _ in runs],
        "chosen": [decay] * plan.repeats,
        "chosen_layer": layer,
        "validation_by_weight_decay": {f"{d:g}": [score for score, _ in by] for d, by in searched[layer].items()},
        "validation_by_layer": {
            str(each): {f"{d:g}": [score for score, _ in by] for d, by in by_decay.items()}
            for each, by_decay in searched.items()
        },
    }
    scorers = [
        lambda split, probe=probe, layer=layer: probe_accuracy(
            probe, probe_input(data.features[split], layer), data.labels[split]
        )
        for _, probe in runs
    ]
    return record, scorers


def _small_arm(data: StudyData, plan: StudyPlan, n: int, encoders: dict[int, object]) -> tuple[dict, list[Scorer]]:
    """The scratch arm (``encoders`` empty) or the MLM arm (a pretrained small encoder per repeat)."""
    record, scorers = {"validation": [], "chosen": []}, []
    for repeat in range(plan.repeats):
        rows = study_subset(n, repeat, len(data.labels["train"])).tolist()
        keep = KeepBest(
            checkpoint_steps(plan.small_steps[n], plan.checkpoints),
            lambda model: classifier_accuracy(
                model, data.vocabulary, data.texts["validation"], data.labels["validation"], plan.max_tokens
            ),
        )
        model, _ = train_from_scratch(
            data.vocabulary,
            [data.texts["train"][i] for i in rows],
            data.labels["train"][rows],
            batch_size=plan.batch_size,
            lr=plan.small_lr,
            max_tokens=plan.max_tokens,
            seed=repeat,
            encoder=encoders.get(repeat),
            steps=plan.small_steps[n],
            keep_best=keep,
        )
        record["validation"].append(keep.score)
        record["chosen"].append(keep.step)
        scorers.append(
            lambda split, model=model: classifier_accuracy(
                model, data.vocabulary, data.texts[split], data.labels[split], plan.max_tokens
            )
        )
    return record, scorers


def _fine_tuned_arm(
    pretrained: PretrainedEncoder, data: StudyData, plan: StudyPlan, n: int
) -> tuple[dict, list[Scorer]]:
    """The top layers above ``plan.split_layer`` and a new head, fine-tuned per repeat; the best checkpoint kept."""
    record, scorers = {"validation": [], "chosen": []}, []
    features, labels = data.features, data.labels
    for repeat in range(plan.repeats):
        rows = study_subset(n, repeat, len(labels["train"]))
        keep = KeepBest(
            checkpoint_steps(plan.fine_tune_steps[n], plan.fine_tune_checkpoints),
            lambda model: fine_tuned_accuracy(model, features["validation"], labels["validation"]),
        )
        model, _ = fine_tune_top_layers(
            pretrained,
            features["train"].select(rows),
            labels["train"][rows],
            steps=plan.fine_tune_steps[n],
            batch_size=plan.batch_size,
            lr=plan.fine_tune_lr,
            head_lr=plan.head_lr,
            seed=repeat,
            keep_best=keep,
        )
        record["validation"].append(keep.score)
        record["chosen"].append(keep.step)
        scorers.append(lambda split, model=model: fine_tuned_accuracy(model, features[split], labels[split]))
    return record, scorers


def _small_encoders(data: StudyData, plan: StudyPlan) -> dict[int, object]:
    """The MLM arm's pretrained small encoders, one per repeat (or one shared by all with ``plan.shared_mlm``)."""
    encoders = {}
    for repeat in range(1 if plan.shared_mlm else plan.repeats):
        mlm, _ = train_mlm(
            data.vocabulary,
            data.texts["train"],
            steps=plan.mlm_steps,
            batch_size=plan.batch_size,
            max_tokens=plan.max_tokens,
            seed=repeat,
        )
        encoders[repeat] = mlm.encoder
    return {repeat: encoders[0 if plan.shared_mlm else repeat] for repeat in range(plan.repeats)}


def _check_study(data: StudyData, plan: StudyPlan) -> None:
    total = len(data.labels["train"])
    if data.features is None and any(arm in ("frozen", "fine-tuned") for arm in plan.arms):
        raise ValueError(
            "the frozen and fine-tuned arms need the pretrained encoder's features: prepare_study(..., pretrained_features=True)"
        )
    if (
        data.features is not None
        and "fine-tuned" in plan.arms
        and data.features["train"].split_layer != plan.split_layer
    ):
        raise ValueError(
            f"the plan fine-tunes from layer {plan.split_layer}, but the features were stored at layer {data.features['train'].split_layer}"
        )
    too_big = [n for n in plan.sizes if n > total]
    if too_big:
        raise ValueError(f"sizes must be at most the {total} training examples, but {too_big} were given")


def run_study(pretrained: PretrainedEncoder, data: StudyData, plan: StudyPlan, progress: bool = True) -> dict:
    """Run every arm at every size ``plan.repeats`` times; choose on validation, then score test once.

    Returns a JSON-ready dict: ``plan``, ``seconds`` per arm, and per arm and size
    (as a string) the lists ``validation`` and ``test`` (one accuracy per repeat; ``test``
    only when ``data`` has a test split) and ``chosen`` (the probe's penalty, or the step
    the validation split chose; the frozen arm also its ``chosen_layer`` and every score
    by layer and penalty), plus ``baseline`` (always "fresh") per split.
    """
    from tqdm.auto import tqdm

    _check_study(data, plan)
    splits = [name for name in ("validation", "test") if name in data.labels]
    results: dict = {
        "plan": plan.as_dict(),
        "seconds": {},
        "arms": {},
        "baseline": {name: float(data.labels[name].float().mean()) for name in ("train", *splits)},
    }
    bar = tqdm(total=sum(len(plan.sizes_of(arm)) for arm in plan.arms), desc="transfer study", disable=not progress)
    scorers: dict[tuple[str, int], list[Scorer]] = {}
    for arm in plan.arms:
        start = time.perf_counter()
        encoders = _small_encoders(data, plan) if arm == "MLM then fine-tuned" else {}
        results["arms"][arm] = {}
        for n in plan.sizes_of(arm):
            bar.set_postfix_str(f"{arm}, {n:,} examples")
            if arm == "frozen":
                record, scorers[arm, n] = _frozen_arm(data, plan, n)
            elif arm == "fine-tuned":
                record, scorers[arm, n] = _fine_tuned_arm(pretrained, data, plan, n)
            else:
                record, scorers[arm, n] = _small_arm(data, plan, n, encoders)
            results["arms"][arm][str(n)] = record
            bar.update(1)
        results["seconds"][arm] = time.perf_counter() - start
    bar.close()
    if "test" in data.labels:  # every choice is made: score the test split, once per chosen model
        for (arm, n), scores in scorers.items():
            results["arms"][arm][str(n)]["test"] = [score("test") for score in scores]
    return results


# ---------------------------------------------------------------------------------
# The stored full run

FULL_STUDY = StudyPlan(
    sizes=(100, 300, 1000, 3000, 10202),
    small_steps={100: 40, 300: 80, 1000: 160, 3000: 320, 10202: 640},
    fine_tune_steps={100: 20, 300: 40, 1000: 60, 3000: 100, 10202: 160},
    mlm_steps=500,
    checkpoints=4,
    fine_tune_checkpoints=2,
    shared_mlm=True,
    probe_layers=PROBE_LAYERS,
    extend_probe_grid=True,
)
"""The grid of the stored run, recomputed by ``make study``.

Step budgets grow with the label count but stay small: at 10,202 examples the small
encoders get 640 steps of 32 (two passes), fine-tuning (one pretrained layer on CPU) 160.
Within each budget the validation split picks the checkpoint (4 for the small encoders, 2
for fine-tuning). The frozen arm's probe reads the depth, or the last four depths together,
and the penalty that validation prefers, the penalties extended until the choice lies inside
the grid. Every arm runs at every size; the MLM arm pretrains once (500 steps over the
training reviews' text, shared by its 5 repeats). On a 2-core CPU the whole grid takes a few
hours; ``--arms`` and ``--sizes`` of ``tools/stored/run_transfer_study.py`` run a part of it, which
``tools/stored/merge_transfer_parts.py`` adds to the stored run."""
