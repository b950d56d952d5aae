"""Run chapter 7's transfer study (the grid of ``FULL_STUDY``) and store it in the package.

    make study                                                   # the whole grid: hours on a 2-core CPU
    python tools/stored/run_transfer_study.py --arms frozen --out /tmp/part      # a part, written to --out
    python tools/stored/merge_transfer_parts.py /tmp/part/transfer_study_part.json
    python tools/stored/run_transfer_study.py --smoke --out /tmp/smoke           # tiny sizes: does the code run?

The whole grid is written to ``src/attention_book/stored/transfer_study.json`` (its SHA-256
recorded), where chapter 7 reads it; a part (``--arms``, ``--sizes``) or a smoke run is
written to ``--out``, never into the package. The file keeps the machine, the date, the
command and the fingerprint of the study's code (``study_fingerprint``), which
``tests/unit/test_stored_study.py`` compares with today's code. PyTorch runs on one thread
(``--threads``), as the stored run did, so that a part made later rounds as the rest did.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

import torch

from attention_book.data import build_vocabulary, load_reviews
from attention_book.device import machine_record
from attention_book.pretrained import load_minilm
from attention_book.training.study_results import store_study, study_fingerprint, summarize_study
from attention_book.training.transfer_study import FULL_STUDY, STUDY_ARMS, StudyPlan, prepare_study, run_study

SMOKE = StudyPlan(
    sizes=(20, 40),
    repeats=2,
    small_steps={20: 4, 40: 4},
    fine_tune_steps={20: 2, 40: 2},
    mlm_steps=4,
    probe_steps=20,
    probe_layers=(-1, "last four"),
    extend_probe_grid=True,
)


def plan_of(args) -> StudyPlan:
    plan = SMOKE if args.smoke else FULL_STUDY
    if args.arms:
        unknown = sorted(set(args.arms) - set(STUDY_ARMS))
        if unknown:
            raise SystemExit(f"--arms must be among {STUDY_ARMS}, but {unknown} were given")
        plan = dataclasses.replace(plan, arms=tuple(arm for arm in STUDY_ARMS if arm in args.arms))
    if args.sizes:
        plan = dataclasses.replace(
            plan, arm_sizes={arm: tuple(n for n in plan.sizes if n in args.sizes) for arm in plan.arms}
        )
    return plan


def study_splits(smoke: bool) -> dict:
    reviews = load_reviews()
    limit = {"train": 60, "validation": 30, "test": 30} if smoke else {}
    splits = {}
    for name in ("train", "validation", "test"):
        split = getattr(reviews, name)
        split = split.take(limit[name]) if name in limit else split
        splits[name] = (split.texts, split.labels)
    return splits


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arms", nargs="+", metavar="ARM", help=f"run only these arms, among {STUDY_ARMS} (a part)")
    parser.add_argument("--sizes", nargs="+", type=int, metavar="N", help="run only these label counts (a part)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the code runs")
    parser.add_argument("--out", type=Path, help="where a part or a smoke run is written (required for them)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (the stored run used 1)")
    args = parser.parse_args(argv)
    part = bool(args.smoke or args.arms or args.sizes)
    if part and args.out is None:
        raise SystemExit("a part or a smoke run is never written into the package: give --out FOLDER")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    plan = plan_of(args)
    minilm, splits = load_minilm(), study_splits(args.smoke)
    vocabulary = build_vocabulary(minilm, list(splits["train"][0]), max_pieces=4000)
    needs_features = any(arm in ("frozen", "fine-tuned") for arm in plan.arms)
    data = prepare_study(
        minilm,
        vocabulary,
        splits,
        max_tokens=plan.max_tokens,
        split_layer=plan.split_layer,
        pretrained_features=needs_features,
    )
    prepared = time.perf_counter() - start
    results = run_study(minilm, data, plan, progress=True)
    results["seconds"]["encoding"] = prepared
    results["seconds"]["total"] = time.perf_counter() - start
    results["machine"] = machine_record()
    results["code"] = study_fingerprint()  # tests/unit/test_stored_study.py pins the stored run to it
    results["command"] = (
        "make study"
        if not part
        else shlex.join(["python", "tools/stored/run_transfer_study.py", *(argv or sys.argv[1:])])
    )
    if part:
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / ("transfer_study_smoke.json" if args.smoke else "transfer_study_part.json")
        target.write_text(json.dumps(results, indent=1) + "\n")
    else:
        results["note"] = f"one run of the whole grid, {results['machine']['date']}"
        print(f"sha256 {store_study(results)}")
        target = Path("src/attention_book/stored/transfer_study.json")
    for arm, by_size in summarize_study(results, "test" if "test" in splits else "validation").items():
        print(
            arm, ", ".join(f"{n:,}: {mean:.1%} ({low:.1%} to {high:.1%})" for n, (mean, low, high) in by_size.items())
        )
    print(f"written to {target} in {results['seconds']['total']:.0f} s")
    return target


if __name__ == "__main__":
    main()
