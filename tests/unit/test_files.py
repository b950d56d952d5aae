"""attention_book._files (floor 0): files inside installed packages and the stored files, checked by SHA-256.

(How chapter 7's weights and reviews use it, with their own pip commands, is tested in
test_pretrained.py and test_data_reviews.py.)
"""

import hashlib

import pytest

from attention_book._files import ChecksumError, MissingPackageError, file_sha256, installed_file

PIP = "pip install some-package==1.0"


def test_file_sha256_reads_in_chunks_and_equals_hashlib(tmp_path):
    path = tmp_path / "data.bin"
    content = bytes(range(256)) * 1000
    path.write_bytes(content)
    expected = hashlib.sha256(content).hexdigest()
    assert file_sha256(path) == expected
    assert file_sha256(str(path), chunk_size=7) == expected  # the chunk boundary does not matter


def test_installed_file_finds_a_file_of_an_installed_package_and_checks_its_hash():
    path = installed_file("attention_book", "py.typed", None, PIP)
    assert path.is_file() and path.name == "py.typed" and path.parent.name == "attention_book"
    assert installed_file("attention_book", "py.typed", file_sha256(path), PIP) == path


def test_a_changed_file_raises_a_checksum_error_naming_the_file_both_hashes_and_the_fix():
    path = installed_file("attention_book", "py.typed", None, PIP)
    with pytest.raises(ChecksumError) as error:
        installed_file("attention_book", "py.typed", "0" * 64, PIP)
    message = str(error.value)
    assert str(path) in message and "0" * 64 in message and file_sha256(path) in message
    assert f"{PIP} --force-reinstall" in message
    assert isinstance(error.value, ValueError)


def test_a_missing_file_or_package_raises_an_error_naming_the_pip_command(tmp_path, monkeypatch):
    with pytest.raises(MissingPackageError, match=r"no/such\.file is missing .* --force-reinstall"):
        installed_file("attention_book", "no/such.file", None, PIP)
    with pytest.raises(MissingPackageError) as error:
        installed_file("no_such_package_for_the_book", "x", None, PIP)
    assert PIP in str(error.value) and "'no_such_package_for_the_book'" in str(error.value)
    assert isinstance(error.value, ModuleNotFoundError)


def test_the_package_is_found_without_being_imported():
    import subprocess
    import sys

    code = (
        "import sys; from attention_book._files import _package_folder; "
        "folder = _package_folder('hypothesis', 'pip install hypothesis'); "
        "print((folder / '__init__.py').is_file(), 'hypothesis' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["True", "False"]


def test_recording_a_stored_file_that_is_not_registered_is_refused_naming_the_registry(tmp_path, monkeypatch):
    from attention_book import _files

    monkeypatch.setattr(_files, "STORED_FOLDER", tmp_path)
    (tmp_path / "unknown.json").write_text("{}")
    with pytest.raises(ValueError, match="not registered in STORED_FILES"):
        _files.record_stored_file("unknown.json")
    assert not (tmp_path / "SHA256SUMS").exists()


def test_a_changed_stored_file_names_the_command_that_writes_it_again(tmp_path, monkeypatch):
    from attention_book import _files

    monkeypatch.setattr(_files, "STORED_FOLDER", tmp_path)
    name = "transfer_study.json"
    (tmp_path / name).write_text("{}")
    _files.record_stored_file(name)
    assert _files.is_stored(name) and _files.stored_file(name) == tmp_path / name
    (tmp_path / name).write_text("{ }")
    with pytest.raises(ChecksumError, match=_files.STORED_FILES[name].command):
        _files.stored_file(name)
