"""Trained models of a chapter's extra seeds: trained here, or loaded from what ``make seeds`` stored.

Floor 2 (uses the models and :mod:`attention_book.pretrained`'s stored files): a comparison
the text draws a conclusion from runs over five seeds, but training every seed of chapters
4 and 6 on a 2-core CPU takes minutes, well over a chapter's budget. So a chapter trains the
seed it shows (seed 0) in front of the reader, and loads the trained weights of the other
seeds from a file the package ships, ``stored/<chapter>_seeds.safetensors``, written by the
chapter's own cells: ``make seeds`` runs the chapter with ``ATTENTION_BOOK_SEEDS=store``, which
trains every seed with the code on the page and records the file's SHA-256.

The environment variable ``ATTENTION_BOOK_SEEDS`` chooses:

* unset (or ``load``): train the live seeds, load the others;
* ``train``: train every seed here (nothing is written);
* ``store``: train every seed here and write the package's file (what ``make seeds`` does).

A live seed that is also stored is compared with its stored weights: the chapter prints the
largest difference, which is 0 on the machine that stored them and tiny on any other CPU;
:meth:`StoredRuns.report` raises if it exceeds :attr:`StoredRuns.tolerance` (the recipe changed
after the runs were stored).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

import torch
from torch import nn

from ..pretrained import STORED_FOLDER, is_stored, record_stored_file, stored_file

__all__ = ["StoredRuns", "SEEDS_VARIABLE"]

SEEDS_VARIABLE = "ATTENTION_BOOK_SEEDS"
_MODES = ("load", "train", "store")


class StoredRuns:
    """The trained models of one chapter's seeds, each trained here or loaded from the package.

    ``runs = StoredRuns("chapter06")``, then for each seed
    ``model, info = runs.run("sorting", seed, build, train)``: ``build()`` returns the model
    with that seed's initial weights, ``train(model)`` trains it in place and returns a dict
    of JSON numbers worth keeping (steps taken, validation scores); a loaded run returns the
    dict stored with it. ``runs.save()`` at the end writes the file in ``store`` mode.
    """

    tolerance = 1e-2
    """Largest weight difference allowed between a run trained here and its stored copy: far above
    what another CPU's rounding makes of a few hundred steps, far below what a changed recipe makes."""

    def __init__(self, chapter: str, live_seeds: tuple[int, ...] = (0,)):
        if not chapter.isidentifier():
            raise ValueError(f"chapter must be a short name such as 'chapter06', not {chapter!r}")
        mode = os.environ.get(SEEDS_VARIABLE, "").strip().lower() or "load"
        if mode not in _MODES:
            raise ValueError(f"{SEEDS_VARIABLE} must be one of {list(_MODES)} (or unset), not {mode!r}")
        self.chapter, self.live_seeds, self.mode = chapter, tuple(live_seeds), mode
        self.file = f"{chapter}_seeds.safetensors"
        self._stored: dict[str, torch.Tensor] = {}
        self._stored_info: dict[str, dict] = {}
        self.stored_by = ""
        if mode == "load":
            if is_stored(self.file):
                self._load()
            else:  # nothing stored (yet): every seed is trained here
                print(f"no stored runs for {chapter} in this package: every seed is trained here")
        self._new_tensors: dict[str, torch.Tensor] = {}
        self._new_info: dict[str, dict] = {}
        self.checks: list[str] = []
        self._loaded: dict[str, list[int]] = {}
        self.mismatches: list[str] = []

    def _load(self) -> None:
        from safetensors import safe_open

        path = stored_file(self.file)
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            self._stored = {key: handle.get_tensor(key) for key in handle.keys()}
        self._stored_info = json.loads(metadata.get("runs", "{}"))
        self.stored_by = metadata.get("stored_by", "")

    def trains_here(self, seed: int, live: bool | None = None) -> bool:
        """Whether ``seed`` is trained in this run: a live seed (``live=None``: one of ``live_seeds``),
        another mode than ``load``, or nothing stored."""
        live = seed in self.live_seeds if live is None else live
        return self.mode != "load" or live or not self._stored_info

    def run(self, name: str, seed: int, build: Callable[[], nn.Module], train: Callable[[nn.Module], dict | None],
            live: bool | None = None) -> tuple[nn.Module, dict]:
        """The model ``name`` of ``seed``, trained by ``train`` here or loaded; and its info dict.

        ``live`` overrides ``live_seeds`` for this run (``live=False``: loaded even for seed 0)."""
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"name must be a non-empty text without '/', not {name!r}")
        entry = f"{name}/seed{int(seed)}"
        model = build()
        if not isinstance(model, nn.Module):
            raise ValueError(f"build() must return a torch.nn.Module, but returned a {type(model).__name__}")
        if self.trains_here(seed, live):
            info = dict(train(model) or {})
            self.record(name, seed, model, info)
        else:
            if entry not in self._stored_info:
                raise KeyError(f"the stored runs of {self.chapter} have no {entry!r}; they have {sorted(self._stored_info)}. "
                               f"Run `make seeds` to store them again.")
            state = self._stored_state(entry)
            try:
                model.load_state_dict(state)
            except RuntimeError as error:
                first = str(error).strip().splitlines()[0]
                raise ValueError(f"the stored run {entry!r} of {self.chapter} does not fit the model build() returned ({first}): "
                                 "the chapter's model changed after the runs were stored. Run `make seeds` to store them again.") from None
            info = dict(self._stored_info[entry])
            self._loaded.setdefault(name, []).append(int(seed))
        model.eval()
        return model, info

    def record(self, name: str, seed: int, model: nn.Module, info: dict | None = None) -> None:
        """Keep ``model`` as the run ``name`` of ``seed`` trained here (a live seed trained outside
        :meth:`run`): stored by :meth:`save` in ``store`` mode, compared with the stored run if there is one."""
        entry = f"{name}/seed{int(seed)}"
        info = dict(info or {})
        try:
            json.dumps(info)
        except TypeError as error:
            raise ValueError(f"the info of a run must be a dict of plain numbers and texts (JSON), not {info!r}: {error}") from None
        state = {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}
        if entry in self._stored_info:
            self._compare(entry, state, info)
        self._new_info[entry] = info
        self._new_tensors.update({f"{entry}/{key}": value for key, value in state.items()})

    def _stored_state(self, entry: str) -> dict[str, torch.Tensor]:
        """The stored weights of ``entry`` ("name/seedN") as a state dict."""
        prefix = f"{entry}/"
        return {key[len(prefix):]: value for key, value in self._stored.items() if key.startswith(prefix)}

    def _compare(self, entry: str, state: dict, info: dict) -> None:
        stored = self._stored_state(entry)
        if set(stored) != set(state) or any(stored[key].shape != state[key].shape for key in stored):
            self.mismatches.append(f"{entry}: the model trained here has other parameters than the stored one")
            return
        largest = max(((state[key].double() - value.double()).abs().max().item() for key, value in stored.items()), default=float("nan"))
        same_info = info == self._stored_info[entry]
        if not largest <= self.tolerance:
            self.mismatches.append(f"{entry}: largest weight difference {largest:.2g} (tolerance {self.tolerance:g})")
        self.checks.append(f"{entry} trained here: largest weight difference from the stored run {largest:.1e}"
                           + ("" if same_info else f"; stored {self._stored_info[entry]}, here {info}"))

    def report(self) -> str:
        """What was loaded since the last report, and for each run trained here that is also stored,
        how far the two are apart."""
        if self._loaded:
            runs = "; ".join(f"{name}, seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}" for name, seeds in self._loaded.items())
            lines = [f"loaded from {self.file} ({self.stored_by}): {runs}"]
        else:
            lines = ["every run above trained here"]
        lines, self.checks, self._loaded = lines + self.checks, [], {}
        if self.mismatches:
            raise RuntimeError(
                f"runs trained here differ from the ones stored in {self.file}: " + "; ".join(self.mismatches)
                + ". The chapter's models, data or recipe changed after the runs were stored: run `make seeds` "
                "(python tools/store_seed_runs.py) to train and store them again."
            )
        return "\n".join(lines)

    def save(self) -> None:
        """In ``store`` mode, write every run trained here to the package and record its SHA-256."""
        if self.mode != "store":
            return
        from safetensors.torch import save_file

        metadata = {
            "runs": json.dumps(self._new_info, sort_keys=True),
            "stored_by": f"make seeds, torch {torch.__version__}, {time.strftime('%Y-%m-%d', time.gmtime())}",
        }
        path = STORED_FOLDER / self.file
        save_file({key: value.contiguous() for key, value in self._new_tensors.items()}, str(path), metadata=metadata)
        path.chmod(0o644)  # package data, readable by everyone
        record_stored_file(self.file)
        print(f"stored {len(self._new_info)} runs in {path}")
