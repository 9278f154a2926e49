"""`make lab` as a learner gets it: loopback only, token required, and notebooks that run in a real browser.

The browser test drives Debian's Chromium through tests/browser.py.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests import browser

REPO = Path(__file__).resolve().parent.parent
SCREENSHOTS = REPO / "build" / "screenshots"
KERNEL_READY = """() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
    const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    return !!k && k.status === 'idle' && k.connectionStatus === 'connected'; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via an http_proxy


def _status(url: str) -> int:
    """The HTTP status of GET `url`, or 0 while nothing listens yet."""
    try:
        with _DIRECT.open(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:
        return 0


def _write_settings(settings: Path) -> None:
    """Autosave off (it would write into the notebooks under test), no news prompt, and every cell in
    the DOM (JupyterLab 4 otherwise renders only the cells in view, hiding outputs from the test)."""
    for plugin, values in {"docmanager-extension/plugin": {"autosave": False},
                           "notebook-extension/tracker": {"windowingMode": "none"},
                           "apputils-extension/notification": {"fetchNews": "false",
                                                               "checkForUpdates": False}}.items():
        path = settings / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text in cmdline.read_bytes().decode(errors="replace"):
                pids.append(int(cmdline.parent.name))
        except OSError:
            pass  # the process ended while we looked
    return pids


def _stop(proc: subprocess.Popen, root: Path) -> list[int]:
    """SIGTERM the process group (make and JupyterLab, which shuts its kernels down); return leftovers."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    deadline = time.monotonic() + 15
    while (left := _processes_mentioning(str(root))) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """`make lab` on a copy of notebooks/, bound to a free loopback port with a random token."""
    root = tmp_path_factory.mktemp("lab")
    notebooks = shutil.copytree(REPO / "notebooks", root / "notebooks",
                                ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    _write_settings(root / "settings")
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, JUPYTER_TOKEN=token, JUPYTER_CONFIG_DIR=str(root / "config"),
               JUPYTER_RUNTIME_DIR=str(root / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(root / "settings"))
    lab_args = f"--no-browser --expose-app-in-browser --LabApp.workspaces_dir={root / 'workspaces'}"
    log_path = root / "lab.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(["make", "-s", "lab", f"PORT={port}", f"NOTEBOOK_DIR={notebooks}",
                                 f"LAB_ARGS={lab_args}"], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    leftovers = []
    try:  # whatever happens below, the server and its kernels are stopped
        base = f"http://127.0.0.1:{port}"
        _wait_until_serving(proc, f"{base}/api/status?token={token}", log_path)
        yield {"base": base, "token": token, "port": port}
    finally:
        leftovers = _stop(proc, root)
    assert not leftovers, f"processes left running after JupyterLab stopped: {leftovers}"


def _wait_until_serving(proc: subprocess.Popen, url: str, log_path: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while _status(url) != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"make lab did not serve within {timeout_s:.0f} s:\n{log_path.read_text()[-3000:]}")
        time.sleep(0.5)


def test_make_lab_needs_the_token(lab):
    assert _status(f"{lab['base']}/api/status?token={lab['token']}") == 200
    assert _status(f"{lab['base']}/api/status") == 403
    assert _status(f"{lab['base']}/api/status?token=wrong{lab['token']}") == 403


def test_make_lab_listens_on_loopback_only(lab):
    listening = [line.split()[1] for line in Path("/proc/net/tcp").read_text().splitlines()[1:]
                 if line.split()[3] == "0A"]                      # state 0A: LISTEN
    ours = [addr for addr in listening if int(addr.split(":")[1], 16) == lab["port"]]
    assert ours == ["0100007F:%04X" % lab["port"]]              # 127.0.0.1, little-endian hex


@pytest.fixture
def page(lab):
    with browser.local_page(lab["base"]) as (page, blocked):
        yield page
    assert not blocked, f"the page tried to leave the machine: {blocked}"


def open_and_run_all(page, lab, notebook: str) -> None:
    """Open `notebook`, wait for its kernel, then Run All Cells (resolves when the run is done)."""
    page.goto(f"{lab['base']}/lab/tree/{notebook}?token={lab['token']}&reset")
    page.locator(".jp-NotebookPanel").first.wait_for()
    page.wait_for_function(KERNEL_READY, timeout=120_000)
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")


@pytest.mark.browser
def test_environment_notebook_runs_in_jupyterlab(page, lab):
    open_and_run_all(page, lab, "00_environment.ipynb")
    outputs = page.locator(".jp-OutputArea-output")
    last = "caught, and the message says how to restore the file"   # after the raises-exception cell
    outputs.filter(has_text=last).first.wait_for(timeout=240_000)
    text = "\n".join(outputs.all_inner_texts())
    assert "torch 2.14.1" in text and "skipped: needs CUDA" in text
    assert "DataIntegrityError" in text and "is corrupted" in text
    figure = page.locator(".jp-OutputArea-output img").first
    assert figure.evaluate("img => img.complete && img.naturalWidth > 500")
    figure.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "00_environment.png"))


@pytest.mark.browser
def test_autograd_explorer_shows_a_nodes_saved_tensors(page, lab):
    open_and_run_all(page, lab, "02_autograd_graph.ipynb")
    page.locator(".jp-OutputArea-output", has_text="characters of SVG").first.wait_for(timeout=240_000)
    explorer = page.locator(".widget-vbox").first                    # the CNN's explorer
    select = explorer.locator(".widget-dropdown select")
    conv = next(t for t in select.locator("option").all_inner_texts() if "ConvolutionBackward0" in t)
    select.select_option(label=conv)                                  # the kernel redraws the panels
    saved = explorer.locator(".graph-node-details li.saved")
    saved.filter(has_text="_saved_weight").first.wait_for(timeout=30_000)
    assert {"_saved_input", "_saved_weight"} <= {t.split()[0] for t in saved.all_inner_texts()}
    assert explorer.locator("svg g.node").count() == 12
    explorer.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "02_autograd_graph.png"))
