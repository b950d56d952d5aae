"""Shared test set-up.

`make test` runs the tests in parallel with pytest-xdist (one worker per CPU core). Each
worker and every notebook kernel it starts then gets one PyTorch thread: with as many
busy processes as cores, more threads per process only wait for each other (we measured
tiny models running several times slower that way). Results do not depend on it: the
chapters' checked outputs are the same with one thread or two.
"""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # read by torch at import, here and in every kernel
