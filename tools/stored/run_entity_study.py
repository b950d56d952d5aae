"""Run chapter 7's entity study (``ENTITY_PLAN``: MiniLM fine-tuned to tag named entities, and taggers
trained from scratch) and store it in the package.

    make entities                                                    # the whole study: 50 minutes on 2 cores
    python tools/stored/run_entity_study.py --jobs 2                 # what make entities runs: two processes
    python tools/stored/run_entity_study.py --smoke --out /tmp/smoke # a few steps: does the code run?

The study is written to ``src/attention_book/stored/entity_study.json`` (its SHA-256 recorded),
where chapter 7 reads it; a smoke run is written to ``--out``, never into the package. The file
keeps the machine, the date, the command and the fingerprint of the study's code
(``entity_study_fingerprint``), which ``tests/unit/test_entity_study.py`` compares with today's
code. PyTorch runs on one thread (``--threads``), so that another machine's run of one thread
adds its sums in the same order. With ``--jobs N`` the arms run in N processes (one thread each):
every run is seeded, so the file is the same as one process would write, in about 1/N of the time
on a machine with N cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import time
from pathlib import Path

import torch

from attention_book.device import machine_record
from attention_book.pretrained import load_minilm
from attention_book.training.entity_study import (
    ENTITY_PLAN,
    ENTITY_STUDY_COMMAND,
    ArmPlan,
    EntityPlan,
    entity_study_fingerprint,
    prepare_entity_data,
    run_arm,
    run_entity_study,
    store_entity_study,
)

SMOKE = EntityPlan(
    arms=(
        ArmPlan("fine-tuned", "MiniLM, pretrained", (1e-4,), steps=2),
        ArmPlan("small from scratch", "small encoder", (1e-3, 3e-3), steps=4),
        ArmPlan("MiniLM from scratch", "MiniLM, random", (3e-4,), steps=2, every_seed=False),
    ),
    seeds=(0, 1),
    checkpoints=2,
    grow_grid=1,
)


def _one_arm(name: str, plan: EntityPlan, threads: int) -> dict:
    """Run the arm called ``name`` in this (worker) process."""
    torch.set_num_threads(threads)
    pretrained = load_minilm()
    return run_arm(plan.arm(name), pretrained, prepare_entity_data(pretrained, plan), plan=plan, progress=True)


def run_arms_apart(plan: EntityPlan, jobs: int, threads: int) -> dict:
    """Every arm of ``plan`` in ``jobs`` worker processes, longest first: their entries by name."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no OpenMP state copied by fork
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = {arm.name: pool.submit(_one_arm, arm.name, plan, threads) for arm in plan.arms}
        return {name: future.result() for name, future in futures.items()}


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a few steps of every arm, to check the code runs")
    parser.add_argument("--out", type=Path, help="where a smoke run is written (required for it)")
    parser.add_argument("--threads", type=int, default=1, help="PyTorch threads (the stored run used 1)")
    parser.add_argument("--jobs", type=int, default=1, help="processes running arms at once (each --threads)")
    args = parser.parse_args(argv)
    if args.smoke and args.out is None:
        raise SystemExit("a smoke run is never written into the package: give --out FOLDER")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    plan = SMOKE if args.smoke else ENTITY_PLAN
    arms = run_arms_apart(plan, args.jobs, args.threads) if args.jobs > 1 else None
    results = run_entity_study(load_minilm(), plan, progress=True, arms=arms)
    results["seconds"] = time.perf_counter() - start
    results["machine"] = machine_record()
    results["code"] = entity_study_fingerprint()  # tests/unit/test_entity_study.py pins the stored study to it
    results["command"] = ENTITY_STUDY_COMMAND
    if args.smoke:
        args.out.mkdir(parents=True, exist_ok=True)
        target = args.out / "entity_study_smoke.json"
        target.write_text(json.dumps(results, indent=1) + "\n")
    else:
        print(f"sha256 {store_entity_study(results)}")
        target = Path("src/attention_book/stored") / "entity_study.json"
    for name, arm in results["arms"].items():
        scores = [run["validation_f1"] for run in arm.get("runs", arm["search"])]
        print(f"{name}: lr {arm['chosen_lr']:g}, validation F1 {min(scores):.3f} to {max(scores):.3f}")
    print(f"written to {target} in {results['seconds']:.0f} s")
    return target


if __name__ == "__main__":
    main()
