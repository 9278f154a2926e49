"""progress.line: a line a front end redraws while the work runs, and nothing of it in any stored output."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from nbhelpers import progress
from nbhelpers._tools import notebook_tools

REPO = Path(__file__).resolve().parents[1]

# prints on both sides of the line, so that what the line leaves is seen next to what must stay
CELL = """import time
from nbhelpers import progress
print("before")
with progress.line("work") as shown:
    for step in range(1, 4):
        shown.update(f"step {step}/3", force=True)
        time.sleep(0.05)
print("after")"""


def test_outside_a_kernel_it_shows_and_prints_nothing(capsys):
    with progress.line("work") as shown:
        shown.update("step 1/3", force=True)
    assert not shown.live and not progress.in_kernel()
    assert capsys.readouterr() == ("", "")


def test_the_line_names_the_work_its_detail_and_the_seconds_since_it_began():
    clock = iter([10.0, 12.4, 13.0]).__next__
    shown = progress.Line("fit", clock=clock)
    assert shown.text("epoch 2/8") == "fit: epoch 2/8 (2 s)"
    assert shown.text() == "fit (3 s)"


def test_a_label_must_name_the_work():
    with pytest.raises(TypeError, match="label"):
        with progress.line(""):
            pass


def test_empty_outputs_dropped_keeps_every_output_with_content():
    nb = new_notebook(cells=[new_code_cell("x", outputs=[
        nbformat.v4.new_output("stream", name="stdout", text="kept\n"),
        nbformat.v4.new_output("display_data", data={}),
        nbformat.v4.new_output("display_data", data={"text/plain": "kept"})])])
    assert progress.empty_outputs_dropped(nb) == 1
    assert [o.output_type for o in nb.cells[0].outputs] == ["stream", "display_data"]


def _one_cell(path: Path) -> Path:
    nb = new_notebook(cells=[new_code_cell(CELL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture
def kernel_sees_this_checkout(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO))


def test_in_a_kernel_the_line_is_shown_then_redrawn_in_place_then_emptied(tmp_path, kernel_sees_this_checkout):
    from nbclient import NotebookClient

    heard, held = [], []     # the cell's iopub messages; nbclient's copy of the cell's outputs after each

    class Listening(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            try:
                return super().process_message(msg, cell, cell_index)
            finally:
                heard.append(msg)
                held.append([dict(o) for o in cell.outputs])

    nb = nbformat.read(_one_cell(tmp_path / "line.ipynb"), as_version=4)
    Listening(nb, timeout=120, kernel_name="python3").execute()
    ours = [m for m in heard if m["msg_type"] in ("display_data", "update_display_data")]
    assert [(m["msg_type"], m["content"]["data"]) for m in ours] == [
        ("display_data", {}),                                        # an empty output with a display id
        ("update_display_data", {"text/plain": "work (0 s)"}),
        *[("update_display_data", {"text/plain": f"work: step {n}/3 (0 s)"}) for n in (1, 2, 3)],
        ("update_display_data", {})]                                 # emptied when the block ends
    assert len({m["content"]["transient"]["display_id"] for m in ours}) == 1
    # while it ran, a front end that applies updates (nbclient here, as JupyterLab does) held the line in place
    during = [outs for m, outs in zip(heard, held) if m["msg_type"] == "update_display_data"]
    assert during[2] == [{"output_type": "stream", "name": "stdout", "text": "before\n"},
                         {"output_type": "display_data", "data": {"text/plain": "work: step 2/3 (0 s)"},
                          "metadata": {}}]
    # after it: an output with an empty bundle, which make execute's sanitizing drops
    assert [o.get("data") for o in nb.cells[0].outputs if o.output_type == "display_data"] == [{}]
    notebook_tools.sanitize_outputs(nb)
    assert [(o.output_type, o.get("text")) for o in nb.cells[0].outputs] == [("stream", "before\n"),
                                                                             ("stream", "after\n")]


def test_stored_by_make_execute_and_compared_by_strict_nbval_it_is_nothing(tmp_path, kernel_sees_this_checkout):
    path = _one_cell(tmp_path / "line.ipynb")
    notebook_tools.execute_notebook(path)
    stored = nbformat.read(path, as_version=4).cells[0].outputs
    assert [(o.output_type, o.text) for o in stored] == [("stream", "before\n"), ("stream", "after\n")]
    # strict nbval against that file: the kernel sends the line again, and nbval finds no difference
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval",
                           "--nbval-current-env", "--nbval-sanitize-with", str(REPO / "tests/nbval_sanitize.cfg"),
                           "-o", "addopts=", "-s", str(path)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 passed" in done.stdout
    assert "unhandled iopub msg: update_display_data" in done.stdout     # nbval skips each redraw


def test_a_launch_in_a_kernel_shows_its_line_until_the_ranks_are_done(kernel_sees_this_checkout):
    from nbclient import NotebookClient

    heard = []

    class Listening(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            heard.append(msg)
            return super().process_message(msg, cell, cell_index)

    nb = new_notebook(cells=[new_code_cell("from nbhelpers import distributed\nfrom tests import ddp_fault_workers\n"
                                           "distributed.launch(ddp_fault_workers.takes_two_seconds, 2)[0]['rank']")])
    Listening(nb, timeout=120, kernel_name="python3").execute()
    texts = [m["content"]["data"].get("text/plain", "") for m in heard if m["msg_type"] == "update_display_data"]
    assert texts[0] == "launch takes_two_seconds: 2 ranks over gloo (0 s)"
    assert texts[1].startswith("launch takes_two_seconds: 2 ranks over gloo: 0/2 ranks done (")
    assert texts[-1] == ""                                         # emptied: the last update is the empty bundle
    assert nb.cells[0].outputs[-1]["data"]["text/plain"] == "0"    # the cell's own result comes after it


def test_run_returns_what_subprocess_run_would_and_prints_nothing(capsys):
    command = [sys.executable, "-c", "import sys; print('out'); sys.stderr.write('err'); sys.exit(3)"]
    done = progress.run(command, "child", timeout_s=60)
    expected = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert (done.args, done.returncode, done.stdout, done.stderr) == (command, 3, "out\n", "err")
    assert (done.returncode, done.stdout, done.stderr) == (expected.returncode, expected.stdout, expected.stderr)
    assert capsys.readouterr() == ("", "")


def test_run_kills_a_child_past_its_timeout():
    import time

    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        progress.run([sys.executable, "-c", "import time; time.sleep(60)"], "child", timeout_s=0.5)
    assert time.monotonic() - start < 30


def test_in_a_kernel_run_shows_its_line_while_the_child_runs(kernel_sees_this_checkout):
    from nbclient import NotebookClient

    heard = []

    class Listening(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            heard.append(msg)
            return super().process_message(msg, cell, cell_index)

    nb = new_notebook(cells=[new_code_cell(
        "import sys\nfrom nbhelpers import progress\n"
        "progress.run([sys.executable, '-c', 'import time; time.sleep(2)'], 'a child', 60).returncode")])
    Listening(nb, timeout=120, kernel_name="python3").execute()
    texts = [m["content"]["data"].get("text/plain", "") for m in heard if m["msg_type"] == "update_display_data"]
    assert texts[0] == "a child (0 s)" and any(t.startswith("a child (") for t in texts[1:-1])
    assert texts[-1] == "" and nb.cells[0].outputs[-1]["data"]["text/plain"] == "0"


class _Handle:
    """A display handle that keeps what each update drew."""

    def __init__(self):
        self.drawn = []

    def update(self, bundle, raw=False):
        self.drawn.append(bundle.get("text/plain", ""))


def test_the_diagnosis_line_names_each_lens_as_it_starts():
    from nbhelpers.diagnosis import lenses

    handle = _Handle()
    lens = lenses.Lenses(progress.Line("diagnose Net", handle, clock=lambda: 0.0))
    assert lens("forward graph", lambda: 1) == 1 and lens("broken", lambda: 1 / 0, "none") == "none"
    assert handle.drawn == ["diagnose Net: forward graph (0 s)", "diagnose Net: broken (0 s)"]
    assert lens.unchecked == ["broken: ZeroDivisionError: division by zero"]
