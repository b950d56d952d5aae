"""Merge runs of some arms and sizes of chapter 7's study into the stored full run.

    python benchmarks/run.py --only transfer --transfer-arms fine-tuned --transfer-sizes 300 3000 10202 --out /tmp/a
    python tools/merge_transfer_parts.py /tmp/a/transfer_study_part.json [more parts...]

A part is what ``run_study`` returns for a plan limited to some arms and sizes. Every repeat's
subset and seed depend only on its size and repeat number (``study_subset``), so a part run
alone gives the numbers the full run would give. The merged file keeps the stored run's
plan, with the part's sizes added to its arms, and says in its note which parts were added
when. It replaces ``stored/transfer_study.json`` and records its SHA-256.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attention_book.training.transfer import STUDY_ARMS, load_study, store_study


def merge(full: dict, part: dict) -> list[str]:
    if part.get("code") != full.get("code"):
        raise SystemExit(
            "the part was computed by other study code than the stored run (their `code` fingerprints "
            "differ): run the whole grid again with `python benchmarks/run.py --only transfer`"
        )
    if part["plan"]["repeats"] != full["plan"]["repeats"]:
        raise SystemExit(f"the part has {part['plan']['repeats']} repeats, the stored run {full['plan']['repeats']}")
    for key in (
        "small_steps",
        "fine_tune_steps",
        "mlm_steps",
        "probe_weight_decays",
        "batch_size",
        "max_tokens",
        "split_layer",
    ):
        if part["plan"][key] != full["plan"][key]:
            raise SystemExit(
                f"the part's plan differs from the stored run's in {key}: {part['plan'][key]} vs {full['plan'][key]}"
            )
    added = []
    for arm, by_size in part["arms"].items():
        for size, record in by_size.items():
            if "test" not in record:
                raise SystemExit(f"{arm} at {size}: the part has no test scores")
            full["arms"].setdefault(arm, {})[size] = record
            added.append(f"{arm} at {int(size):,}")
        sizes = sorted({int(n) for n in full["arms"][arm]})
        if sizes == sorted(full["plan"]["sizes"]):
            full["plan"]["arm_sizes"].pop(arm, None)
        else:
            full["plan"]["arm_sizes"][arm] = sizes
        full["arms"][arm] = {str(n): full["arms"][arm][str(n)] for n in sorted(int(k) for k in full["arms"][arm])}
        label = f"{arm}, added part"
        full["seconds"][label] = full["seconds"].get(label, 0.0) + part["seconds"].get(arm, 0.0)
    label = f"encoding, added part ({', '.join(part['arms'])})"
    full["seconds"][label] = full["seconds"].get(label, 0.0) + part["seconds"].get("encoding", 0.0)
    full["arms"] = {arm: full["arms"][arm] for arm in STUDY_ARMS if arm in full["arms"]}
    return added


def main(paths: list[str]) -> None:
    if not paths:
        raise SystemExit(__doc__)
    full = load_study()
    added, dates = [], []
    for path in paths:
        part = json.loads(Path(path).read_text())
        added += merge(full, part)
        dates.append(part.get("machine", {}).get("date", "?"))
    when = ", ".join(sorted(set(dates)))
    full["note"] += f"; added later by separate runs of the same functions ({when}): " + ", ".join(added)
    print(f"stored {', '.join(added)}; sha256 {store_study(full)}")


if __name__ == "__main__":
    main(sys.argv[1:])
