"""Merge runs of some arms and sizes of chapter 7's study into the stored full run.

    python tools/stored/run_transfer_study.py --arms fine-tuned --sizes 300 3000 10202 --out /tmp/a
    python tools/stored/merge_transfer_parts.py /tmp/a/transfer_study_part.json [more parts...]

A part is what ``run_study`` returns for a plan limited to some arms and sizes. Every repeat's
subset and seed depend only on its size and repeat number (``study_subset``), so a part run
alone gives the numbers the full run would give. The part's plan must equal the stored run's,
except in the settings that only its own arms read (``ARM_SETTINGS``, e.g. the probe's grid for
the frozen arm); a part that changes those must hold every size of its arms, and replaces them.
The merged file keeps a provenance entry per part (machine, date, command, code fingerprint),
says in its note which parts were added when, replaces ``stored/transfer_study.json`` and
records its SHA-256.

    python tools/stored/merge_transfer_parts.py --same-results OLD.json NEW.json

pins the stored run to today's code after a change meant to keep every result (a refactor):
OLD.json and NEW.json are the same cells of the grid run on one machine by the code the stored
run names (``code``) and by today's; only if every number is identical does the stored run take
today's fingerprint, the old one kept in ``code_history`` with the cells compared.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attention_book.training.study_results import load_study, store_study, study_fingerprint
from attention_book.training.transfer_study import STUDY_ARMS

ARM_SETTINGS = {
    "scratch": ("small_steps", "checkpoints", "small_lr"),
    "frozen": ("probe_weight_decays", "probe_steps", "probe_layers", "extend_probe_grid"),
    "fine-tuned": ("fine_tune_steps", "fine_tune_checkpoints", "fine_tune_lr", "head_lr", "split_layer"),
    "MLM then fine-tuned": ("small_steps", "checkpoints", "small_lr", "mlm_steps", "shared_mlm"),
}
"""The settings of the plan that only the named arm reads."""


def _check_plan(full: dict, part: dict) -> list[str]:
    """The settings in which the part's plan differs from the stored one; refuses a difference its arms do not own."""
    owned = {key for arm in part["arms"] for key in ARM_SETTINGS[arm]}
    shared = {key for arm in STUDY_ARMS if arm not in part["arms"] for key in ARM_SETTINGS[arm]}
    changed = []
    for key in sorted(set(full["plan"]) | set(part["plan"])):
        if key in ("arms", "arm_sizes") or full["plan"].get(key) == part["plan"].get(key):
            continue
        if key not in owned or key in shared:
            raise SystemExit(
                f"the part's plan differs from the stored run's in {key!r}, which it does not own: "
                f"{part['plan'].get(key)} vs {full['plan'].get(key)}"
            )
        changed.append(key)
    return changed


def merge(full: dict, part: dict) -> list[str]:
    if part.get("code", {}).get("sha256") != full.get("code", {}).get("sha256"):
        raise SystemExit(
            "the part was computed by other study code than the stored run (their `code` fingerprints "
            "differ): run the whole grid again with `make study`, or pin a refactor with --same-results"
        )
    changed = _check_plan(full, part)
    for arm, by_size in part["arms"].items():
        if changed and sorted(int(n) for n in by_size) != sorted(full["plan"]["sizes"]):
            raise SystemExit(
                f"the part changes {changed}, so it must run {arm} at every size, not only {sorted(by_size)}"
            )
        if changed:
            full["arms"][arm] = {}
        for size, record in by_size.items():
            if "test" not in record:
                raise SystemExit(f"{arm} at {size}: the part has no test scores")
            full["arms"].setdefault(arm, {})[size] = record
        sizes = sorted({int(n) for n in full["arms"][arm]})
        if sizes == sorted(full["plan"]["sizes"]):
            full["plan"]["arm_sizes"].pop(arm, None)
        else:
            full["plan"]["arm_sizes"][arm] = sizes
        full["arms"][arm] = {str(n): full["arms"][arm][str(n)] for n in sizes}
        label = f"{arm}, added part"
        full["seconds"][label] = full["seconds"].get(label, 0.0) + part["seconds"].get(arm, 0.0)
    for key in changed:
        full["plan"][key] = part["plan"][key]
    label = f"encoding, added part ({', '.join(part['arms'])})"
    full["seconds"][label] = full["seconds"].get(label, 0.0) + part["seconds"].get("encoding", 0.0)
    full["arms"] = {arm: full["arms"][arm] for arm in STUDY_ARMS if arm in full["arms"]}
    added = [f"{arm} at {int(n):,}" for arm, by_size in part["arms"].items() for n in by_size]
    full.setdefault("parts", []).append(
        {
            "added": added,
            "replaced settings": changed,
            "machine": part.get("machine", {}),
            "command": part.get("command", "?"),
            "code": part["code"]["sha256"],
            **({"code note": part["code"]["note"]} if "note" in part["code"] else {}),
        }
    )
    return added


def pin_refactor(full: dict, old: dict, new: dict) -> str:
    """Give the stored run today's fingerprint if ``old`` (by its code) and ``new`` (by today's) are identical."""
    today = study_fingerprint()
    if old.get("code", {}).get("sha256") != full["code"]["sha256"]:
        raise SystemExit("OLD was not computed by the code the stored run names")
    if new.get("code", {}).get("sha256") != today["sha256"]:
        raise SystemExit("NEW was not computed by today's code")
    cells = []
    for arm, by_size in old["arms"].items():
        for n, record in by_size.items():
            theirs = new["arms"][arm][n]
            different = [key for key in ("validation", "test", "chosen") if record[key] != theirs[key]]
            if different:
                raise SystemExit(f"{arm} at {n}: {different} differ, so the change changed results: run them again")
            cells.append(f"{arm} at {int(n):,}")
    full.setdefault("code_history", []).append(
        {
            "sha256": full["code"]["sha256"],
            "replaced_by": today["sha256"],
            "date": new.get("machine", {}).get("date", "?"),
            "because": "a change meant to keep every result; the same cells run by both codes on one machine, "
            f"{old['plan']['repeats']} repeats each, gave identical validation, test and chosen values",
            "cells compared": cells,
            **({"code note": new["code"]["note"]} if "note" in new["code"] else {}),
            "machine": new.get("machine", {}),
        }
    )
    full["code"] = today
    return ", ".join(cells)


def main(paths: list[str]) -> None:
    if not paths:
        raise SystemExit(__doc__)
    full = load_study()
    if paths[0] == "--same-results":
        if len(paths) != 3:
            raise SystemExit("--same-results needs OLD.json and NEW.json")
        old, new = (json.loads(Path(path).read_text()) for path in paths[1:])
        cells = pin_refactor(full, old, new)
        print(f"pinned to today's code after comparing {cells}; sha256 {store_study(full)}")
        return
    part = combine([json.loads(Path(path).read_text()) for path in paths])
    changed = _check_plan(full, part)
    added = merge(full, part)
    if changed:
        full["note"] += (
            f"; {', '.join(part['arms'])} run again with new settings ({', '.join(changed)}) by "
            f"{part['command']} ({part['machine'].get('date', '?')})"
        )
    else:
        full["note"] += (
            f"; added later by separate runs of the same functions ({part['machine'].get('date', '?')}): "
            + ", ".join(added)
        )
    print(f"stored {', '.join(added)}; sha256 {store_study(full)}")


def combine(parts: list[dict]) -> dict:
    """Several parts of the same code and plan (e.g. one process per size) as one part."""
    first = parts[0]
    for other in parts[1:]:
        if (
            other.get("code", {}).get("sha256") != first.get("code", {}).get("sha256")
            or other["plan"]["arms"] != first["plan"]["arms"]
        ):
            raise SystemExit("parts merged together must come from the same code and run the same arms")
        if {k: v for k, v in other["plan"].items() if k != "arm_sizes"} != {
            k: v for k, v in first["plan"].items() if k != "arm_sizes"
        }:
            raise SystemExit("parts merged together must have the same plan apart from their sizes")
        for arm, by_size in other["arms"].items():
            first["arms"].setdefault(arm, {}).update(by_size)
        for key, value in other["seconds"].items():
            first["seconds"][key] = first["seconds"].get(key, 0.0) + value
    if len(parts) > 1:
        first["command"] = "; ".join(part["command"] for part in parts)
        dates = sorted(part.get("machine", {}).get("date", "?") for part in parts)
        first["machine"] = {
            **first.get("machine", {}),
            "date": f"{dates[0]} to {dates[-1]}" if dates[0] != dates[-1] else dates[0],
        }
    return first


if __name__ == "__main__":
    main(sys.argv[1:])
