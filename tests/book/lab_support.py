"""JupyterLab in headless Chromium, for the widget tests (tests/book/test_lab_widgets.py) and the
widget benchmark (benchmarks/run.py): start a server from the project's environment on a folder,
open a notebook, run it, save it, and wait for the widgets to draw."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.book.site_support import headless_chromium
from tests.helpers import ROOT

JUPYTER = ROOT / ".venv" / "bin" / "jupyter"
LAB_SETTINGS = ROOT / "tools" / "lab" / "settings"  # what `make lab` passes: saves widget state
SERVER_CONFIG = ROOT / "tools" / "lab" / "jupyter_server_config.py"  # and this: no Nagle delay on the websocket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_server(server: subprocess.Popen, log) -> None:
    """Stop a server started in its own session (SIGTERM, then SIGKILL after 30 s); close its log."""
    os.killpg(server.pid, signal.SIGTERM)
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(server.pid, signal.SIGKILL)
    log.close()


@contextlib.contextmanager
def jupyter_lab(folder: Path, scratch: Path):
    """A JupyterLab server on ``folder``; yields its base URL with the token as a query string."""
    port, token = free_port(), secrets.token_hex(16)
    env = dict(
        os.environ,
        JUPYTER_RUNTIME_DIR=str(scratch / "runtime"),
        JUPYTER_CONFIG_DIR=str(scratch / "config"),  # none of the user's own settings
        JUPYTERLAB_WORKSPACES_DIR=str(scratch / "workspaces"),
        BROWSER="true",
    )
    command = [
        str(JUPYTER),
        "lab",
        str(folder),
        f"--port={port}",
        "--port-retries=0",
        "--no-browser",
        f"--IdentityProvider.token={token}",
        f"--LabApp.app_settings_dir={LAB_SETTINGS}",
        f"--config={SERVER_CONFIG}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: run, save and close by command
    ]
    if os.getuid() == 0:
        command.append("--allow-root")
    log_path = scratch / "lab.log"
    log = log_path.open("w")
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError(f"JupyterLab did not start:\n{log_path.read_text()[-3000:]}")
        yield base, token
    finally:
        stop_server(server, log)


# Runs in the page: waits until JupyterLab shows the notebook and its kernel is idle.
_READY = r"""
const done = arguments[arguments.length - 1];
const [needKernel, limit] = [arguments[0], arguments[1]];
const start = Date.now();
(function poll() {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const context = panel && panel.sessionContext;
  const ready = panel && panel.content && panel.context && panel.context.isReady &&
    (!needKernel || (context && context.session && context.session.kernel && context.session.kernel.status === "idle"));
  if (ready) return done("ready");
  if (Date.now() - start > limit) return done("timeout");
  setTimeout(poll, 250);
})();
"""

_RUN_ALL = r"""
const done = arguments[arguments.length - 1];
const limit = arguments[0];
const app = window.jupyterapp;
const panel = app.shell.currentWidget;
const start = Date.now();
app.commands.execute("notebook:run-all-cells").then(() => {
  (function poll() {
    const cells = panel.content.widgets.filter((cell) => cell.model.type === "code" && cell.model.sharedModel.getSource().trim());
    const finished = cells.every((cell) => cell.model.executionCount !== null && cell.promptNode && !cell.promptNode.textContent.includes("*"));
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    if (finished && kernel && kernel.status === "idle") return done({ seconds: (Date.now() - start) / 1000, cells: cells.length });
    if (Date.now() - start > limit) return done({ error: "timeout", cells: cells.length });
    setTimeout(poll, 500);
  })();
}, (error) => done({ error: String(error) }));
"""

_SAVE = r"""
const done = arguments[arguments.length - 1];
const app = window.jupyterapp;
const panel = app.shell.currentWidget;
app.commands.execute("docmanager:save").then(() => {
  const start = Date.now();
  (function poll() {
    if (!panel.context.model.dirty) return done("saved");
    if (Date.now() - start > 30000) return done("timeout");
    setTimeout(poll, 200);
  })();
}, (error) => done(String(error)));
"""

_SHUT_DOWN = r"""
const done = arguments[arguments.length - 1];
const app = window.jupyterapp;
const panel = app.shell.currentWidget;
panel.sessionContext.shutdown().then(() => app.commands.execute("application:close-all")).then(() => done("closed"), (error) => done(String(error)));
"""

# Waits until every widget of the given kinds has drawn at least once.
_WIDGETS_DRAWN = r"""
const done = arguments[arguments.length - 1];
const [kinds, limit] = [arguments[0], arguments[1]];
const start = Date.now();
(function poll() {
  const drawn = Array.from(document.querySelectorAll(".ab-widget")).filter((w) => Number(w.dataset.frames) > 0).map((w) => w.dataset.kind);
  const missing = kinds.filter((kind) => !drawn.includes(kind));
  const broken = Array.from(document.querySelectorAll(".jp-OutputArea-output")).map((node) => node.textContent)
    .filter((text) => text.includes("model not found") || text.includes("Error displaying widget"));
  if (!missing.length || broken.length || Date.now() - start > limit) return done({ drawn, missing, broken });
  setTimeout(poll, 250);
})();
"""


def open_notebook(driver, base: str, token: str, name: str, *, kernel: bool = True, timeout_s: float = 120) -> None:
    driver.get(f"{base}/lab/tree/{name}?token={token}&reset")
    if driver.execute_async_script(_READY, kernel, timeout_s * 1000) != "ready":
        raise AssertionError(f"JupyterLab did not open {name} with an idle kernel in {timeout_s:.0f} s")


def run_all(driver, timeout_s: float = 300) -> dict:
    driver.set_script_timeout(timeout_s + 30)
    result = driver.execute_async_script(_RUN_ALL, timeout_s * 1000)
    if "error" in result:
        raise AssertionError(f"running the notebook failed: {result}")
    return result


def save(driver) -> None:
    assert driver.execute_async_script(_SAVE) == "saved"


def shut_down_and_close(driver) -> None:
    assert driver.execute_async_script(_SHUT_DOWN) == "closed"


def widgets_drawn(driver, kinds: list[str], timeout_s: float = 60) -> dict:
    return driver.execute_async_script(_WIDGETS_DRAWN, kinds, timeout_s * 1000)


@contextlib.contextmanager
def chromium(width: int = 1280, height: int = 1500):
    """Headless Chromium that reaches 127.0.0.1 (JupyterLab) and nothing else: every other
    connection goes through a proxy on a closed port (loopback bypasses proxies). Host names
    still resolve, and a JupyterLab page gets 120 s to load or run a script."""
    with headless_chromium(width=width, height=height, timeout_s=120, profile_prefix="chromium-lab-") as driver:
        yield driver
