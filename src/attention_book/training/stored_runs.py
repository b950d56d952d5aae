"""Trained models of a chapter's extra seeds: trained here, or loaded from what ``make seeds`` stored.

Floor 2 (uses the models and the stored files of :mod:`attention_book._files`): a comparison
the text draws a conclusion from runs over five seeds, but training every seed of chapters
4 and 6 on a 2-core CPU takes minutes, well over a chapter's budget. So a chapter trains the
seed it shows (seed 0) in front of the reader, and loads the trained weights of the other
seeds from a file the package ships, ``stored/<chapter>_seeds.safetensors``, written by the
chapter's own cells: ``make seeds`` runs the chapter with ``ATTENTION_BOOK_SEEDS=store``, which
trains every seed with the code on the page, records the machine it ran on and the file's SHA-256.

The environment variable ``ATTENTION_BOOK_SEEDS`` chooses:

* unset (or ``load``): train the live seeds, load the others;
* ``train``: train every seed here (nothing is written);
* ``store``: train every seed here and write the package's file (what ``make seeds`` does).

A live seed that is also stored is compared with its stored run by **outcome**, never by
weights: another CPU, thread count or GPU rounds differently, and a few hundred training
steps turn that into other weights (we measured differences of 0.2-0.5 between two CPUs),
while the model learns the same thing. So each number of the run's info (steps taken,
validation accuracy) must lie within the spread of the same number over all stored seeds of
that model: a run on another machine behaves like one more seed, a changed recipe moves the
outcome further. :meth:`StoredRuns.report` says what it compared and raises if a number left
that band (the chapter's model, data or recipe changed after the runs were stored).

What the report prints is written for the reader of the chapter: which seeds were loaded
rather than trained, that this same code trained them earlier, and how long loading took.
Where and when they were trained (the machine, torch's version, the day and the command) is
kept with the file, in its metadata, and shown by :attr:`StoredRuns.stored_by`; the README
(``make seeds``) and the setup page ("Training every seed yourself") say how the file is made.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable

import torch
from torch import nn

from .._files import STORED_FOLDER, is_stored, record_stored_file, stored_file
from ..device import cpu_name

__all__ = ["StoredRuns", "SEEDS_VARIABLE", "machine_description"]

SEEDS_VARIABLE = "ATTENTION_BOOK_SEEDS"
_MODES = ("load", "train", "store")


def _format(value: float, percent: bool) -> str:
    """A number of a run's info as the report shows it: a fraction as a percentage, a count as is."""
    if percent:
        return f"{value:.1%}"
    return str(value) if isinstance(value, int) else f"{value:.3g}"


def machine_description() -> str:
    """The machine a run was trained on, as stored with it: CPU, cores, torch threads and version."""
    threads = torch.get_num_threads()
    return (
        f"{cpu_name()} ({os.cpu_count()} cores, {threads} torch thread{'s' if threads != 1 else ''}), "
        f"{platform.system()}, torch {torch.__version__}"
    )


def _and(names: list[str]) -> str:
    """``["a", "b", "c"]`` as ``"a, b and c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _seeds(seeds: tuple[int, ...]) -> str:
    """Seeds as the report writes them: ``seed 3``, ``seeds 1 to 4`` (three or more in a row), ``seeds 1 and 3``."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    if len(seeds) > 2 and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"seeds {seeds[0]} to {seeds[-1]}"
    return "seeds " + _and([str(seed) for seed in seeds])


class StoredRuns:
    """The trained models of one chapter's seeds, each trained here or loaded from the package.

    ``runs = StoredRuns("chapter06")``, then for each seed
    ``model, info = runs.run("sorting", seed, build, train)``: ``build()`` returns the model
    with that seed's initial weights, ``train(model)`` trains it in place and returns a dict
    of JSON numbers worth keeping (steps taken, validation scores); a loaded run returns the
    dict stored with it. ``runs.save()`` at the end writes the file in ``store`` mode.
    """

    def __init__(self, chapter: str, live_seeds: tuple[int, ...] = (0,), resolution: dict[str, float] | None = None):
        """``resolution`` gives, for a number of the runs' info, the smallest step it can move by
        (e.g. ``{"steps": 50}`` when validation is checked every 50 steps): a band is widened by at
        least that, so seeds that all happened to land on the same value still allow the next one."""
        if not chapter.isidentifier():
            raise ValueError(f"chapter must be a short name such as 'chapter06', not {chapter!r}")
        resolution = dict(resolution or {})
        bad = {
            key: value
            for key, value in resolution.items()
            if not isinstance(key, str)
            or isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not value >= 0
        }
        if bad:
            raise ValueError(f"resolution must map names of info numbers to numbers >= 0, not {bad!r}")
        self.resolution = resolution
        mode = os.environ.get(SEEDS_VARIABLE, "").strip().lower() or "load"
        if mode not in _MODES:
            raise ValueError(f"{SEEDS_VARIABLE} must be one of {list(_MODES)} (or unset), not {mode!r}")
        self.chapter, self.live_seeds, self.mode = chapter, tuple(live_seeds), mode
        self.file = f"{chapter}_seeds.safetensors"
        self._stored: dict[str, torch.Tensor] = {}
        self._stored_info: dict[str, dict] = {}
        self.stored_by = ""  # where and when the stored runs were trained (the file's metadata)
        self._load_seconds = 0.0  # time spent loading runs since the last report
        if mode == "load":
            if is_stored(self.file):
                self._load()
            else:  # nothing stored (yet): every seed is trained here
                print(f"no earlier runs of {chapter} come with this package: every seed is trained here")
        self._new_tensors: dict[str, torch.Tensor] = {}
        self._new_info: dict[str, dict] = {}
        self.checks: list[str] = []
        self._loaded: dict[str, list[int]] = {}
        self.mismatches: list[str] = []

    def _load(self) -> None:
        from safetensors import safe_open

        start = time.perf_counter()
        path = stored_file(self.file)
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            self._stored = {key: handle.get_tensor(key) for key in handle.keys()}
        self._stored_info = json.loads(metadata.get("runs", "{}"))
        self.stored_by = metadata.get("stored_by", "")
        self._load_seconds += time.perf_counter() - start

    def trains_here(self, seed: int, live: bool | None = None) -> bool:
        """Whether ``seed`` is trained in this run: a live seed (``live=None``: one of ``live_seeds``),
        another mode than ``load``, or nothing stored."""
        live = seed in self.live_seeds if live is None else live
        return self.mode != "load" or live or not self._stored_info

    def run(
        self,
        name: str,
        seed: int,
        build: Callable[[], nn.Module],
        train: Callable[[nn.Module], dict | None],
        live: bool | None = None,
    ) -> tuple[nn.Module, dict]:
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
            self.record(name, seed, model, info=info)
        else:
            if entry not in self._stored_info:
                raise KeyError(
                    f"the stored runs of {self.chapter} have no {entry!r}; they have {sorted(self._stored_info)}. "
                    f"Run `make seeds` to store them again."
                )
            start = time.perf_counter()
            state = self._stored_state(entry)
            try:
                model.load_state_dict(state)
            except RuntimeError as error:
                first = str(error).strip().splitlines()[0]
                raise ValueError(
                    f"the stored run {entry!r} of {self.chapter} does not fit the model build() returned ({first}): "
                    "the chapter's model changed after the runs were stored. Run `make seeds` to store them again."
                ) from None
            info = dict(self._stored_info[entry])
            self._loaded.setdefault(name, []).append(int(seed))
            self._load_seconds += time.perf_counter() - start
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
            raise ValueError(
                f"the info of a run must be a dict of plain numbers and texts (JSON), not {info!r}: {error}"
            ) from None
        state = {key: value.detach().cpu().clone() for key, value in model.state_dict().items()}
        if entry in self._stored_info:
            self._compare(entry, state, info)
        self._new_info[entry] = info
        self._new_tensors.update({f"{entry}/{key}": value for key, value in state.items()})

    def _stored_state(self, entry: str) -> dict[str, torch.Tensor]:
        """The stored weights of ``entry`` ("name/seedN") as a state dict."""
        prefix = f"{entry}/"
        return {key[len(prefix) :]: value for key, value in self._stored.items() if key.startswith(prefix)}

    def _compare(self, entry: str, state: dict, info: dict) -> None:
        """Compare a run trained here with its stored copy by outcome: each number of ``info`` against
        the band the stored seeds of the same model span (their lowest to highest value, widened on
        each side by that spread, or by the number's ``resolution`` if that is larger, so a band is
        never narrower than the differences between seeds)."""
        stored = self._stored_state(entry)
        if set(stored) != set(state) or any(stored[key].shape != state[key].shape for key in stored):
            self.mismatches.append(f"{entry}: the model trained here has other parameters than the stored one")
            return
        name = entry.rsplit("/", 1)[0]
        others = [found for key, found in self._stored_info.items() if key.rsplit("/", 1)[0] == name]
        compared, inside = [], True  # inside: every number within the seeds' own span, not only the band
        for key, value in info.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            values = [found[key] for found in others if isinstance(found.get(key), (int, float))]
            if key not in self._stored_info[entry] or not values:
                self.mismatches.append(f"{entry}: the stored runs have no {key!r} to compare with")
                continue
            low, high = min(values), max(values)
            inside = inside and low <= value <= high
            widening = max(high - low, self.resolution.get(key, 0))
            low_band, high_band = low - widening, high + widening
            percent = not key.endswith("loss") and all(isinstance(found, float) and 0 <= found <= 1 for found in values)

            def shown(number):
                return _format(number, percent)

            compared.append(
                f"{key} {shown(value)} here, {shown(self._stored_info[entry][key])} earlier "
                f"(the {len(values)} seeds trained earlier span {shown(low)} to {shown(high)})"
            )
            if not low_band <= value <= high_band:
                self.mismatches.append(
                    f"{entry}: {key} {shown(value)} here, outside {shown(low_band)} to {shown(high_band)} "
                    f"(the {len(values)} stored seeds span {shown(low)} to {shown(high)}, widened by "
                    + ("that spread)" if widening == high - low else f"the resolution {shown(widening)})")
                )
        seed = entry.rsplit("/seed", 1)[1]
        if compared:
            self.checks.append(
                f"{name}, seed {seed}, trained here, against the same seed trained earlier: "
                + "; ".join(compared)
                + (
                    ": within the spread of the seeds"
                    if inside
                    else ": outside the seeds' span but within the band allowed (that span widened by its width)"
                )
            )
        else:
            self.checks.append(f"{name}, seed {seed}, trained here (nothing kept from earlier to compare)")

    def report(self) -> str:
        """What was loaded since the last report, and for each run trained here that is also stored,
        how far the two are apart."""
        if self._loaded:
            groups: dict[tuple[int, ...], list[str]] = {}  # models that share their loaded seeds
            for name, seeds in self._loaded.items():
                groups.setdefault(tuple(seeds), []).append(name)
            runs = "; ".join(f"{_and(names)}, {_seeds(seeds)}" for seeds, names in groups.items())
            took = "under 0.1 s" if self._load_seconds < 0.1 else f"{self._load_seconds:.1f} s"
            lines = [f"loaded, not trained here: {runs} (trained earlier by this same code; loading took {took})"]
        else:
            lines = ["every run above trained here"]
        lines, self.checks, self._loaded, self._load_seconds = lines + self.checks, [], {}, 0.0
        if self.mismatches:
            raise RuntimeError(
                f"runs trained here reached other outcomes than the ones stored in {self.file}: "
                + "; ".join(self.mismatches)
                + ". Another machine's rounding moves an outcome about as far as another seed does, not further: "
                "the chapter's models, data or recipe changed after the runs were stored. Run `make seeds` "
                "(python tools/stored/store_seed_runs.py) to train and store them again."
            )
        return "\n".join(lines)

    def save(self) -> None:
        """In ``store`` mode, write every run trained here to the package and record its SHA-256."""
        if self.mode != "store":
            return
        from safetensors.torch import save_file

        metadata = {
            "runs": json.dumps(self._new_info, sort_keys=True),
            "stored_by": f"make seeds on {machine_description()}, {time.strftime('%Y-%m-%d', time.gmtime())}",
        }
        path = STORED_FOLDER / self.file
        save_file({key: value.contiguous() for key, value in self._new_tensors.items()}, str(path), metadata=metadata)
        path.chmod(0o644)  # package data, readable by everyone
        record_stored_file(self.file)
        print(f"stored {len(self._new_info)} runs in {path}")
