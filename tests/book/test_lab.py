"""`make lab` works: JupyterLab starts (as root too, where it needs --allow-root) and serves the chapters.

The test runs the Makefile target itself, on a free port with a token (JupyterLab reads
both from the environment), asks the server's REST API for the chapter folder, and stops
the server. Run as root (as in a container, and as make test runs here), JupyterLab refuses
to start without --allow-root, so a pass as root shows that make lab passes it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.book.lab_support import free_port, stop_server

ROOT = Path(__file__).resolve().parents[2]
JUPYTER = ROOT / ".venv" / "bin" / "jupyter"

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or not (ROOT / ".venv" / "bin" / "jupyter-lab").exists(),
    reason="needs make and the lab extra (make test installs it)",
)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def test_make_lab_starts_jupyterlab_and_lists_the_chapters(tmp_path):
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_PORT=str(port),
        JUPYTER_TOKEN=token,
        JUPYTER_PORT_RETRIES="0",
        BROWSER="true",  # a command that opens nothing
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )
    log = (tmp_path / "lab.log").open("w")
    server = subprocess.Popen(
        ["make", "lab"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        status = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                status, body = _get(f"{base}/api/contents/?token={token}")
            except (ConnectionError, OSError):
                status = None
            if status == 200:
                break
            time.sleep(1)
        output = (tmp_path / "lab.log").read_text()
        assert status == 200, f"JupyterLab did not answer on port {port} (exit code {server.poll()}):\n{output[-3000:]}"
        names = {item["name"] for item in json.loads(body)["content"]}
        chapters = {path.name for path in (ROOT / "notebooks").glob("*.ipynb")}
        assert chapters <= names, f"the server lists {sorted(names)}"
        lab_status, page = _get(f"{base}/lab?token={token}")
        assert lab_status == 200 and b"JupyterLab" in page
    finally:
        stop_server(server, log)
