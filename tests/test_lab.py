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
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from nbhelpers._tools import notebook_tools, widget_state
from tests import REPO, browser

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
    """Autosave off (it would write into the notebooks under test; the autosave test turns it on), and every
    cell in the DOM (JupyterLab 4 otherwise renders only the cells in view, hiding outputs from the test).
    Everything else is make lab's own defaults, which the tests check (the news prompt among them)."""
    for plugin, values in {"docmanager-extension/plugin": {"autosave": False},
                           "notebook-extension/tracker": {"windowingMode": "none"}}.items():
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
        yield {"base": base, "token": token, "port": port, "notebooks": notebooks, "log": log_path}
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


def test_make_lab_says_what_it_does(lab):
    said = [line for line in lab["log"].read_text().splitlines() if line.startswith("[lab ")]
    assert len(said) == 2 and "trusting the notebooks" in said[0], said
    assert f"starting JupyterLab on 127.0.0.1:{lab['port']}" in said[1]


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


def open_notebook(page, lab, notebook: str) -> None:
    """Open `notebook` and wait for its kernel (the widget manager restores stored views then)."""
    page.goto(f"{lab['base']}/lab/tree/{notebook}?token={lab['token']}&reset")
    page.locator(".jp-NotebookPanel").first.wait_for()
    page.wait_for_function(KERNEL_READY, timeout=120_000)


def open_and_run_all(page, lab, notebook: str) -> None:
    """Open `notebook`, wait for its kernel, then Run All Cells (resolves when the run is done)."""
    open_notebook(page, lab, notebook)
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


def _graph_views(page):
    return page.locator(".jp-OutputArea-output .gv")


def _every_view_of_02_answers(page) -> None:
    views, at = _graph_views(page), browser.VIEWS_02
    views.nth(at["diff"]).locator(".gv-box").first.wait_for(timeout=60_000)     # every view, from the stored state
    assert views.count() == len(at) and all(views.nth(k).locator(".gv-box").count() > 0 for k in range(len(at)))
    assert views.nth(at["diff"]).locator(".gv-pane").count() == 2               # the diff, side by side
    views.nth(at["mlp"]).locator(".gv-box", has_text="AddmmBackward0").nth(1).click()   # and it responds, unrun
    assert "NeuralNetwork.core.fc1" in views.nth(at["mlp"]).locator(".gv-details").inner_text()
    browser.check_twin(views.nth(at["twin"]), *browser.TWIN_02)                 # the twin: both ways, unrun
    assert page.locator("text=Error displaying widget").count() == 0


@pytest.mark.browser
def test_the_committed_graph_notebook_shows_every_graph_without_running(page, lab):
    open_notebook(page, lab, "02_autograd_graph.ipynb")
    _every_view_of_02_answers(page)


@pytest.mark.browser
def test_the_compile_view_responds_in_jupyterlab(page, lab):
    open_notebook(page, lab, "05_compile_backends.ipynb")
    view = browser.view_with(page, "scale = y.mean().item()")         # noisy(), from the stored state
    view.locator(".gv-box").first.wait_for(timeout=60_000)
    graph = browser.stored_graph(REPO / "notebooks" / "05_compile_backends.ipynb", "scale = y.mean().item()")
    browser.check_compile_view_clicks(view, graph, "scale = y.mean().item()", "GB0124")


@pytest.mark.browser
def test_a_kernel_links_to_the_nodes_it_computes_in_jupyterlab(page, lab):
    open_notebook(page, lab, "11_custom_ops.ipynb")
    view = browser.view_with(page, browser.CUSTOM_OP_KERNEL)
    view.locator(".gv-box").first.wait_for(timeout=60_000)
    notebook = REPO / "notebooks" / "11_custom_ops.ipynb"
    browser.check_kernel_links_by_provenance(view, browser.stored_graph(notebook, browser.CUSTOM_OP_KERNEL))


@pytest.mark.browser
def test_graph_view_interactions_in_jupyterlab(page, lab):
    open_and_run_all(page, lab, "02_autograd_graph.ipynb")
    page.locator(".jp-OutputArea-output", has_text="characters of SVG").first.wait_for(timeout=240_000)
    at = browser.VIEWS_02
    _graph_views(page).nth(at["diff"]).locator(".gv-box").first.wait_for(timeout=60_000)   # the last: all drawn
    mlp = _graph_views(page).nth(at["mlp"])
    timings = {}
    # click: the panel shows graph_view.details() for fc1's AddmmBackward0, word for word
    box = mlp.locator(".gv-box", has_text="AddmmBackward0").nth(1)
    timings["click"] = _timed_click(page, box, mlp.locator(".gv-details dd").first)
    details = mlp.locator(".gv-details").inner_text()
    assert "NeuralNetwork.core.fc1" in details and "_saved_mat1 [32, 784] float32 100,352 B storage #7 version 0" in details
    # hover: the residual block's inner ReLU lights up conv2, which saved the same storage
    residual = _graph_views(page).nth(at["residual"])
    residual.locator(".gv-box", has_text="ConvolutionBackward0").first.hover()
    assert "boxes share its saved memory" in residual.locator(".gv-info").inner_text()
    assert residual.locator(".gv-box.gv-share").count() >= 1
    # search
    resnet = _graph_views(page).nth(at["resnet"])
    resnet.locator(".gv-search").fill("downsample")
    assert resnet.locator(".gv-info").inner_text().endswith('boxes match "downsample"')
    assert resnet.locator(".gv-box.gv-match").count() >= 1
    # open one module, collapse it from a node's module path; the keyboard; the diff's titles and selection
    resnet.locator(".gv-search").fill("")
    start = time.perf_counter()
    browser.check_one_module_opens(resnet)
    timings["open, select, collapse"] = time.perf_counter() - start
    browser.check_keyboard(mlp)
    browser.check_diff(_graph_views(page).nth(at["diff"]), ("plain", "with checkpointing"), "saved bytes differ")
    browser.check_labels_fit(page)
    # the stepper: step 1 runs the root
    mlp.locator(".gv-forward").click()
    assert mlp.locator(".gv-info").inner_text() == "step 1 of 12: runs NllLossBackward0"
    assert mlp.locator(".gv-box.gv-run").count() == 1
    # the traits reach the kernel: click a ResNet box, run the cell that reads them
    browser.click_key(resnet, "n:0")                  # SumBackward0, a node box: selects it (wherever panned)
    reader = page.locator(".jp-CodeCell", has_text="print(\"selected:\", resnet_view.selected").first
    reader.click()
    page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
    reader.locator(".jp-OutputArea-output", has_text="selected: 0 | step: -1 | open: ['ResNet']").wait_for()
    assert "SumBackward0 ('module', '(outside modules)')" in reader.locator(".jp-OutputArea-output").inner_text()
    mlp.scroll_into_view_if_needed()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "02_autograd_graph.png"))
    print("browser timings (s):", {k: round(v, 3) for k, v in timings.items()})


@pytest.mark.browser
def test_a_diagnosis_timeline_selects_the_node_holding_the_bytes_in_jupyterlab(page, lab):
    open_notebook(page, lab, "13_diagnose_your_model.ipynb")
    view = browser.all_drawn(_graph_views(page), REPO / "notebooks" / "13_diagnose_your_model.ipynb").first
    view.locator(".gv-tl-chart").wait_for(timeout=60_000)             # the outer product's, from the stored state
    assert browser.check_timeline(view, "h[:, :, None] * h[:, None, :]") == "AddmmBackward0"


@pytest.mark.browser
def test_a_timed_backward_bars_each_box_and_links_its_time_line_both_ways_in_jupyterlab(page, lab):
    """09's timed view from its stored state (no kernel runs): a save without running writes 09 back byte for byte,
    and after a reload the bars, the legend, the way down to the slowest node and the time-line still answer."""
    committed = REPO / "notebooks" / "09_profiling.ipynb"
    path = _put_in_lab(lab, "94_timed.ipynb", nbformat.read(committed, as_version=4))
    original, mtime = committed.read_bytes(), path.stat().st_mtime_ns
    open_notebook(page, lab, path.name)
    browser.view_with_title(page, "outside every node").locator(".gv-box").first.wait_for(timeout=60_000)
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    _wait_for_write(page, path, mtime)
    assert path.read_bytes() == original
    open_notebook(page, lab, path.name)       # reload
    view = browser.view_with_title(page, "outside every node")
    view.locator(".gv-box").first.wait_for(timeout=60_000)
    assert browser.check_time_bars(view).endswith("Backward0")
    assert browser.check_time_line(view) == "NllLossBackward0"       # the loss's node runs first
    twin = browser.view_with_title(page, "outside every op")         # the forward's ops, timed, beside the backward
    assert browser.check_forward_time_line(twin) == "AddmmBackward0"


def test_make_lab_saves_widget_state_by_default(lab):
    with _DIRECT.open(_settings_url(lab, "@jupyter-widgets/jupyterlab-manager:plugin"), timeout=30) as response:
        setting = json.load(response)
    shipped = json.loads(next(Path(sys.prefix, "share", "jupyter", "labextensions").glob(
        "@jupyter-widgets/jupyterlab-manager/schemas/**/plugin.json")).read_text())
    assert shipped["properties"]["saveState"]["default"] is False           # the widget manager's own default
    assert setting["schema"]["properties"]["saveState"]["default"] is True   # as make lab's overrides.json sets it


GRAPH_NB = REPO / "notebooks" / "02_autograd_graph.ipynb"


def _settings_url(lab, plugin: str) -> str:
    return f"{lab['base']}/lab/api/settings/{plugin}?token={lab['token']}"


def test_make_lab_asks_no_news_question(lab):
    with _DIRECT.open(_settings_url(lab, "@jupyterlab/apputils-extension:notification"), timeout=30) as response:
        defaults = json.load(response)["schema"]["properties"]
    assert defaults["fetchNews"]["default"] == "false" and defaults["checkForUpdates"]["default"] is False


@pytest.mark.browser
def test_nothing_pops_up_on_a_first_load(page, lab):
    open_notebook(page, lab, "00_environment.ipynb")
    page.evaluate("window.jupyterapp.restored")
    page.wait_for_timeout(3_000)      # the news question, before make lab's default, came about 1 s after this
    popups = page.locator(".Toastify__toast, .jp-Dialog")
    assert popups.count() == 0, popups.all_inner_texts()


def _put_in_lab(lab, name: str, nb=None) -> Path:
    """02 (or `nb`) as `name` in the lab's folder, trusted as make lab trusts the series (JupyterLab shows no
    widget or SVG of an untrusted notebook)."""
    path = lab["notebooks"] / name
    if nb is None:
        shutil.copy2(GRAPH_NB, path)
    else:
        nbformat.write(nb, path)
    subprocess.run([str(Path(sys.prefix, "bin", "jupyter")), "trust", str(path)], check=True, capture_output=True)
    return path


def _wait_for_write(page, path: Path, since_ns: int, timeout_s: float = 90) -> None:
    """Wait until a save has begun (the mtime moves) and ended: jupyter_server's atomic_writing copies the file to
    `.~name`, rewrites the file in place and removes the copy last (jupyter_server/services/contents/fileio.py,
    atomic_writing), so a read between the two finds half a notebook (a CI run did). Wait in the page, not in
    time.sleep: the page's requests pass local_page's route only while Playwright runs, so a save the page
    starts on its own (autosave) would wait for us forever."""
    deadline = time.monotonic() + timeout_s
    backup = path.with_name(".~" + path.name)
    while path.stat().st_mtime_ns == since_ns or backup.exists():
        assert time.monotonic() < deadline, f"{path.name} was not written within {timeout_s:.0f} s"
        page.wait_for_timeout(200)


def _state(path: Path) -> dict:
    return json.loads(path.read_text())["metadata"]["widgets"][widget_state.STATE]["state"]


@pytest.mark.browser
def test_a_notebook_opened_and_saved_without_running_keeps_every_view(page, lab):
    path = _put_in_lab(lab, "97_opened.ipynb")
    committed, mtime = path.read_bytes(), path.stat().st_mtime_ns
    open_notebook(page, lab, path.name)
    page.locator(".jp-OutputArea-output .gv .gv-box").first.wait_for(timeout=60_000)
    assert page.evaluate("window.jupyterapp.shell.currentWidget.context.model.dirty")   # the widget manager's doing
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")              # what autosave does
    _wait_for_write(page, path, mtime)
    assert set(_state(path)) == set(_state(GRAPH_NB))
    assert path.read_bytes() == committed                   # byte for byte: git sees no change after a save
    open_notebook(page, lab, path.name)       # reload
    _every_view_of_02_answers(page)


@pytest.mark.browser
def test_the_diagnosis_notebook_opened_and_saved_without_running_keeps_its_views(page, lab):
    """13, whose views the diagnosis package draws: a save without running writes it back byte for byte, and
    after a reload its timeline still selects the node that holds the bytes."""
    committed = REPO / "notebooks" / "13_diagnose_your_model.ipynb"
    path = _put_in_lab(lab, "95_diagnosis.ipynb", nbformat.read(committed, as_version=4))
    original, mtime = committed.read_bytes(), path.stat().st_mtime_ns
    open_notebook(page, lab, path.name)
    browser.all_drawn(_graph_views(page), committed)
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    _wait_for_write(page, path, mtime)
    assert path.read_bytes() == original
    open_notebook(page, lab, path.name)       # reload
    view = browser.all_drawn(_graph_views(page), committed).first
    view.locator(".gv-tl-chart").wait_for(timeout=60_000)
    assert browser.check_timeline(view, "h[:, :, None] * h[:, None, :]") == "AddmmBackward0"
    timed = browser.view_with_title(page, "outside every node")      # Diagnosis.show_times(): the backward's time
    browser.check_time_bars(timed)
    browser.check_time_line(timed)


def _set_autosave(lab, seconds: float | None) -> None:
    """Autosave on every `seconds` (None: off), through the server's settings API; the page reads it on load."""
    raw = json.dumps({"autosave": seconds is not None, "autosaveInterval": seconds or 120})
    url = _settings_url(lab, "@jupyterlab/docmanager-extension:plugin")
    request = urllib.request.Request(url, data=json.dumps({"raw": raw}).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    with _DIRECT.open(request, timeout=30) as response:
        assert response.status == 204


@pytest.mark.browser
def test_autosave_of_a_notebook_only_read_keeps_every_view(page, lab):
    """What happened to every learner: open 02, read, and autosave writes it (2 s here, 120 s by default)."""
    path = _put_in_lab(lab, "96_autosaved.ipynb")
    mtime = path.stat().st_mtime_ns
    _set_autosave(lab, 2)
    try:
        open_notebook(page, lab, path.name)
        _wait_for_write(page, path, mtime, timeout_s=60)
    finally:
        _set_autosave(lab, None)
    assert set(_state(path)) == set(_state(GRAPH_NB))
    open_notebook(page, lab, path.name)       # reload, autosave off again
    _every_view_of_02_answers(page)


RUN_ALL_DONE = """() => { const w = window.jupyterapp.shell.currentWidget;
    const k = w.sessionContext.session && w.sessionContext.session.kernel;
    const code = [...w.content.widgets].filter(c => c.model.type === 'code');
    return !!k && k.status === 'idle' && code.every(c => c.model.executionCount !== null); }"""


@pytest.mark.browser
def test_three_run_alls_and_saves_store_the_displayed_views_and_nothing_else(page, lab):
    """Each Run All makes new models for every view; a save stores those the outputs show, no dead ones."""
    path = _put_in_lab(lab, "94_rerun.ipynb")
    open_notebook(page, lab, path.name)
    saved = []
    for _ in range(3):
        mtime = path.stat().st_mtime_ns
        page.evaluate("window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")   # counts to null
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(RUN_ALL_DONE, timeout=300_000, polling=500)
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        _wait_for_write(page, path, mtime)
        nb = nbformat.read(path, as_version=4)
        state = nb.metadata["widgets"][widget_state.STATE]["state"]
        shown = {model for _, model in widget_state.displayed_models(nb)}
        assert len(shown) == len(browser.VIEWS_02) and set(state) == widget_state.needed_models(state, shown)
        saved.append((len(state), path.stat().st_size))
    counts, sizes = zip(*saved)
    assert counts == (len(_state(GRAPH_NB)),) * 3, saved
    assert max(sizes) <= 1.02 * min(sizes), saved
    print(f"three Run All + save cycles of 02: {saved} (models, bytes)")


LONG_CELL = """import time
from nbhelpers import progress
print("before")
with progress.line("a long cell") as shown:
    for k in range(1, 7):
        shown.update(f"part {k}/6", force=True)
        time.sleep(1)
print("after")"""


@pytest.mark.browser
def test_a_long_cells_line_is_drawn_while_it_runs_and_neither_shown_nor_saved_after(page, lab):
    """progress.line as a learner meets it in JupyterLab: one line redrawn in place while the cell runs, nothing
    on the page when it ends, and nothing in the file a save writes (the contents manager's pre-save hook)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LONG_CELL)], metadata={"kernelspec": {
        "name": "python3", "display_name": "Python 3", "language": "python"}})   # else the lab asks which kernel
    path = _put_in_lab(lab, "93_progress.ipynb", nb)
    open_notebook(page, lab, path.name)
    mtime = path.stat().st_mtime_ns
    # not awaited: the command's promise resolves when the run is done, and the line is to be seen during it
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    outputs = page.locator(".jp-OutputArea-output")
    try:
        outputs.filter(has_text="a long cell: part 3/6").first.wait_for(timeout=120_000)
    except Exception as error:                   # say what the cell showed instead
        raise AssertionError(f"no progress line; the outputs: {outputs.all_inner_texts()}") from error
    assert outputs.filter(has_text="a long cell: part").count() == 1          # one line, redrawn in place
    assert outputs.filter(has_text="part 2/6").count() == 0
    page.wait_for_function(RUN_ALL_DONE, timeout=120_000, polling=200)
    outputs.filter(has_text="after").first.wait_for(timeout=30_000)
    assert outputs.filter(has_text="a long cell").count() == 0
    assert "before" in outputs.first.inner_text()
    page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
    _wait_for_write(page, path, mtime)
    saved = nbformat.read(path, as_version=4).cells[0].outputs
    assert [(o.output_type, o.get("text")) for o in saved] == [("stream", "before\n"), ("stream", "after\n")]


@pytest.mark.browser
def test_a_notebook_whose_widget_state_is_gone_shows_its_pictures(page, lab):
    nb = nbformat.read(GRAPH_NB, as_version=4)
    nb.metadata["widgets"][widget_state.STATE]["state"] = {}       # as another Jupyter saves it
    path = _put_in_lab(lab, "95_stateless.ipynb", nb)
    open_notebook(page, lab, path.name)
    notes = page.locator(".jp-OutputArea-output", has_text="the live view was not saved with this notebook")
    notes.nth(len(browser.VIEWS_02) - 1).wait_for(timeout=60_000)
    pictures = page.locator(".jp-RenderedSVG svg, .jp-RenderedSVG img")
    assert notes.count() == len(browser.VIEWS_02) and pictures.count() >= len(browser.VIEWS_02)
    assert page.locator("text=Error displaying widget").count() == 0


SAVED_VIEW = """import torch
from nbhelpers import autograd_graph, graph_view
x = torch.ones(3, requires_grad=True)
loss = (x.exp() * 2).sum()
graph_view.show(graph_view.from_autograd(autograd_graph.trace(loss)))"""


@pytest.mark.browser
def test_a_view_run_and_saved_in_the_lab_responds_in_the_static_site(lab, tmp_path):
    """What a learner does: run a view cell in `make lab`, save, `make html`; the page's view answers clicks."""
    browser.node_modules_or_skip(notebook_tools._WIDGET_DIST)          # make html's widget renderer
    path = lab["notebooks"] / "98_saved_in_the_lab.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SAVED_VIEW)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    with browser.serve(tmp_path / "site") as site, browser.local_page(lab["base"], site) as (page, blocked):
        open_and_run_all(page, lab, path.name)
        _graph_views(page).first.locator(".gv-box", has_text="ExpBackward0").wait_for(timeout=120_000)
        mtime = path.stat().st_mtime_ns
        page.evaluate("window.jupyterapp.commands.execute('docmanager:save')")
        _wait_for_write(page, path, mtime, timeout_s=60)
        saved = nbformat.read(path, as_version=4)
        assert saved.cells[0].outputs and widget_state.widgets_without_state(saved) == []
        (page_path,) = notebook_tools.build_site([path], tmp_path / "site")
        page.goto(f"{site}/{page_path.name}")
        view = page.locator(".gv").first
        view.locator(".gv-box", has_text="ExpBackward0").first.click(timeout=60_000)
        assert "ExpBackward0" in view.locator(".gv-details").inner_text()
    assert not blocked, f"the pages tried to leave the machine: {blocked}"
    print(f"saved in the lab: {len(saved.metadata.widgets['application/vnd.jupyter.widget-state+json']['state'])} "
          f"widget models, {path.stat().st_size:,} bytes")


def _timed_click(page, target, appears) -> float:
    start = time.perf_counter()
    target.click()
    appears.wait_for()
    return time.perf_counter() - start


DARK_FILL = """(view) => {
    const fill = getComputedStyle(view.querySelector("g.gv-box rect")).fill.match(/[0-9.]+/g).map(Number);
    const luminance = (0.2126 * fill[0] + 0.7152 * fill[1] + 0.0722 * fill[2]) / 255;
    return { dark: view.classList.contains("gv-dark"), luminance };
}"""


@pytest.mark.browser
def test_views_follow_jupyterlabs_theme_and_axe_finds_nothing_serious_in_either(page, lab):
    browser.node_modules_or_skip(browser.AXE)
    open_notebook(page, lab, "02_autograd_graph.ipynb")
    view = _graph_views(page).nth(browser.VIEWS_02["mlp"])
    view.locator(".gv-box").first.wait_for(timeout=60_000)
    _graph_views(page).nth(browser.VIEWS_02["diff"]).locator(".gv-box").first.wait_for(timeout=60_000)
    page.add_script_tag(path=str(browser.AXE))
    light, found = view.evaluate(DARK_FILL), {"light": page.evaluate(browser.AXE_SERIOUS)}
    try:
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=60_000)
        page.wait_for_function("document.querySelector('.jp-OutputArea-output .gv').classList.contains('gv-dark')")
        dark, found["dark"] = view.evaluate(DARK_FILL), page.evaluate(browser.AXE_SERIOUS)
    finally:
        page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")
        page.wait_for_function("document.body.dataset.jpThemeLight === 'true'", timeout=60_000)
    assert not light["dark"] and dark["dark"] and light["luminance"] - dark["luminance"] > 0.5, (light, dark)
    assert found == {"light": [], "dark": []}


@pytest.mark.browser
@pytest.mark.parametrize("notebook", ["05_compile_backends", "10_save_and_export", "11_custom_ops",
                                      "12_error_casebook", "13_diagnose_your_model"])
def test_every_label_inside_its_box_at_10_px_in_the_stored_views(page, lab, notebook):
    open_notebook(page, lab, f"{notebook}.ipynb")
    browser.all_drawn(_graph_views(page), REPO / "notebooks" / f"{notebook}.ipynb")
    print(f"{notebook}: {browser.check_labels_fit(page)} labels inside their boxes at 10 px or more")


@pytest.mark.browser
@pytest.mark.parametrize("notebook", ["02_autograd_graph", "05_compile_backends", "12_error_casebook",
                                      "13_diagnose_your_model"])
def test_no_edge_label_covers_another_or_a_box_and_a_view_cut_at_its_frame_says_so(page, lab, notebook):
    open_notebook(page, lab, f"{notebook}.ipynb")
    browser.all_drawn(_graph_views(page), REPO / "notebooks" / f"{notebook}.ipynb")
    first, cut = browser.check_labels_apart(page), browser.check_wide_views_say_so(page)
    for expand in page.locator(".jp-OutputArea-output .gv .gv-expand").all():
        expand.click()
    print(f"{notebook}: {first} edge labels apart in the first views ({cut} panes say they are cut), "
          f"{browser.check_labels_apart(page)} with every module open")
