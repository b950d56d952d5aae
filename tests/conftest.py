"""Shared test set-up.

`make test` runs the tests in parallel with pytest-xdist (one worker per CPU core). Each
worker and every notebook kernel it starts then gets one PyTorch thread: with as many
busy processes as cores, more threads per process only wait for each other (we measured
tiny models running several times slower that way). Results do not depend on it: the
chapters' checked outputs are the same with one thread or two.

The tests are grouped in folders: ``unit/`` (one file per library module),
``widgets/`` (one file per widget) and ``book/`` (notebooks, site, headers, packaging,
the exercise generator, the layout of the package). Every folder is a package
(``__init__.py``), so two folders may hold test files of the same name; paths come from
:mod:`tests.helpers` (``ROOT``), never from a test file's own location.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # read by torch at import, here and in every kernel

import pytest


@pytest.fixture
def one_thread():
    """Train on one CPU thread, as the chapters do: the sums then add up in the same order on
    every machine, so a run (and whether it reaches its target) does not depend on the core count."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def minilm():
    """all-MiniLM-L6-v2 in the book's Encoder (loaded once per worker; ``load_minilm`` caches it)."""
    from attention_book.pretrained import load_minilm

    return load_minilm()
