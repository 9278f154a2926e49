"""nbhelpers.distributed and nbhelpers.ddp_train: results by rank, failures named by rank, deadlines enforced, nothing left
running; and the torchrun entry point as two "nodes" on one machine."""
import _thread
import json
import os
import socket
import subprocess
import signal
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
import torch

from nbhelpers import ddp_workers, distributed
from tests import ddp_fault_workers as faulty
from tests import fake_gpu_host, suite_copy
from tests.source_imports import imported_modules
from tests import REPO



def _live_children() -> list[str]:
    """Command lines of the live processes started for this process's ranks since the test began, from /proc (the
    process table): its new children, and the children of multiprocessing's fork server (itself, like the
    resource tracker, a helper that lives as long as we do and is not listed). A child that was there before the
    test (the browser tests' Playwright driver, when they ran first in this process) is no rank."""
    table = _process_table()
    helpers = _helpers(table, "resource_tracker") | _helpers(table, "forkserver")
    return [cmdline for pid, (parent, cmdline) in table.items()
            if pid not in helpers and pid not in _BEFORE and (parent == os.getpid() or parent in helpers)]


def _helpers(table: dict[int, tuple[int, str]], name: str) -> set[int]:
    """The pids of this process's children whose command line names multiprocessing's `name` helper."""
    return {pid for pid, (parent, cmdline) in table.items() if parent == os.getpid() and name in cmdline}


_BEFORE: set[int] = set()      # this process's children when the running test began


@pytest.fixture(autouse=True)
def _children_before_the_test():
    _BEFORE.clear()
    _BEFORE.update(pid for pid, (parent, _) in _process_table().items() if parent == os.getpid())
    yield


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every live process that is not a zombie."""
    table = {}
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            cmdline = (status.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue   # the process ended while we looked
        if fields.get("State", "").strip()[:1] != "Z":
            table[int(status.parent.name)] = (int(fields.get("PPid", "0").strip()), cmdline)
    return table


def test_results_come_back_by_rank_with_tensors_intact():
    results = distributed.launch(faulty.echo, 2, "hello", timeout_s=60)
    assert [r["rank"] for r in results] == [0, 1] and {r["value"] for r in results} == {"hello"}
    assert torch.equal(results[1]["tensor"], torch.full((2,), 1.0))
    assert _live_children() == []


def test_a_raising_worker_is_named_by_rank_within_30_s():
    start = time.monotonic()
    with pytest.raises(distributed.RankFailure, match="rank 1: ValueError: boom on purpose") as caught:
        distributed.launch(faulty.rank_one_raises, 2, timeout_s=120)
    assert time.monotonic() - start < 30
    assert caught.value.rank == 1 and "rank_one_raises" in caught.value.remote_traceback
    assert _live_children() == []


def test_a_hanging_worker_times_out_and_is_killed():
    start = time.monotonic()
    with pytest.raises(distributed.LaunchTimeout, match=r"ranks \[0, 1\] did not finish within 3 s"):
        distributed.launch(faulty.everyone_hangs, 2, timeout_s=3)
    assert time.monotonic() - start < 30
    assert _live_children() == []


def test_keyboard_interrupt_stops_every_rank():
    # interrupt_main does nothing unless Python's own SIGINT handler is installed, and a Python started with SIGINT
    # ignored keeps it ignored (a background job of a non-interactive shell, `make test &`): install it, as a
    # Jupyter kernel does, for this test only
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(4.0, _thread.interrupt_main)   # what Jupyter's "interrupt kernel" does
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            distributed.launch(faulty.everyone_hangs, 2, timeout_s=120)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert _live_children() == []


def test_a_process_that_dies_without_reporting_is_named():
    with pytest.raises(distributed.RankFailure, match="rank 0: its process exited with code 3"):
        distributed.launch(faulty.exits_hard, 2, timeout_s=60)
    assert _live_children() == []


@pytest.fixture
def two_gpu_host(monkeypatch):
    """torch.cuda reports two GPUs in this process, where launch picks the backend; the ranks see none."""
    for name in ("is_available", "device_count"):
        monkeypatch.setattr(torch.cuda, name, getattr(torch.cuda, name))
    monkeypatch.setattr(torch.accelerator, "current_stream", torch.accelerator.current_stream)
    fake_gpu_host.fake_two_gpus()


def test_on_a_gpu_host_cpu_workers_still_join_with_gloo(two_gpu_host):
    results = distributed.launch(ddp_workers.all_reduce_by_hand, 2, timeout_s=60)
    assert [(r["backend"], r["all_reduce_sum"]) for r in results] == [("gloo", 3.0), ("gloo", 3.0)]
    assert _live_children() == []


def test_device_cuda_needs_a_gpu_per_rank_and_other_devices_are_refused(two_gpu_host):
    with pytest.raises(ValueError, match="world_size=3 needs 3 GPUs and torch sees 2; use device='cpu'"):
        distributed.launch(ddp_workers.all_reduce_by_hand, 3, device="cuda")
    with pytest.raises(ValueError, match="device must be 'cpu' \\(gloo\\) or 'cuda' \\(NCCL\\), got 'meta'"):
        distributed.launch(ddp_workers.all_reduce_by_hand, 2, device="meta")
    assert _live_children() == []


def test_notebook_07_runs_unchanged_on_a_host_with_two_gpus():
    """Every launch of notebook 07's CPU lessons, with torch reporting two GPUs in the kernel (where launch
    decides): each cell's output still equals the stored one. Only the NCCL cell, which needs real GPUs, is
    left out."""
    nb = nbformat.read(REPO / "notebooks" / "07_distributed_ddp.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    (nccl,) = [c for c in code if 'device="cuda"' in c.source]
    fake = f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom tests.fake_gpu_host import fake_two_gpus\nfake_two_gpus()"
    nb.cells.insert(nb.cells.index(code[0]) + 1, nbformat.v4.new_code_cell(fake))
    nb.cells.remove(nccl)
    assert sum('distributed.launch(ddp_' in c.source for c in nb.cells) >= 7   # ddp_workers' and ddp_lesson's
    run = suite_copy.run_suite_on(nb, "07-on-two-gpus", "07_distributed_ddp.ipynb", "-k", "Cell")
    assert run.returncode == 0 and " failed" not in run.stdout, run.stdout[-4000:]


def test_a_worker_defined_in_main_or_a_closure_is_refused_with_the_fix():
    def local_worker(rank, world_size):
        return rank

    with pytest.raises(ValueError, match="cannot import it; define it at the top level of a .py module"):
        distributed.launch(local_worker, 2)
    local_worker.__module__ = "__main__"
    with pytest.raises(ValueError, match="%%writefile"):
        distributed.launch(local_worker, 2)
    with pytest.raises(ValueError, match="`world_size` must be at least 1"):
        distributed.launch(faulty.echo, 0, "x")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_nodes_on_one_machine_finish_with_identical_weights(tmp_path):
    """Each node is a GPU host as far as torch.cuda can tell (tests/fake_gpu_host.py): the CPU training
    still joins with gloo, since its tensors live on the CPU."""
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
               f"--rdzv-endpoint=127.0.0.1:{_free_port()}", "--rdzv-id=test", "-m", "tests.fake_gpu_host",
               "nbhelpers.ddp_train", "--epochs", "1", "--out", str(tmp_path)]
    nodes = [subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO)
             for _ in range(2)]
    try:
        errors = [node.communicate(timeout=240)[1] for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], errors
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["digest"] == ranks[1]["digest"] and ranks[0]["all_digests"] == ranks[1]["all_digests"]
    assert [r["samples_seen"] for r in ranks] == [4000, 4000]
    assert [r["backend"] for r in ranks] == ["gloo", "gloo"]
    saved = torch.load(tmp_path / "model.pt", weights_only=True)
    assert set(saved) >= {"core.fc1.weight", "core.fc2.bias"}
    assert not list(tmp_path.glob(".*.tmp"))   # written atomically


def test_entry_point_with_device_cuda_needs_a_gpu_per_process(tmp_path, monkeypatch):
    from nbhelpers import ddp_train

    for name, value in {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(SystemExit, match="2 processes on this machine, 1 GPUs; lower --nproc-per-node"):
        ddp_train.main(["--device", "cuda", "--out", str(tmp_path)])
    assert not torch.distributed.is_initialized()


def test_entry_point_refuses_to_run_outside_torchrun(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, "-m", "nbhelpers.ddp_train", "--out", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "run me under torchrun" in done.stderr


def test_the_launcher_needs_nothing_from_the_package(tmp_path):
    """Its one import from the package is the optional progress line: a copy of the file alone, where
    nbhelpers cannot be imported, still launches."""
    import shutil

    imported = imported_modules(Path(distributed.__file__))
    assert {m for m in imported if m and m.startswith("nbhelpers")} == {"nbhelpers", "nbhelpers.progress"}
    shutil.copy(distributed.__file__, tmp_path / "launcher.py")
    (tmp_path / "work.py").write_text("def ten_times_rank(rank, world_size):\n    return 10 * rank\n")
    code = ("import sys; sys.modules['nbhelpers'] = None\n"          # any import of it raises ImportError
            "import launcher, work\nprint(launcher.launch(work.ten_times_rank, 2, timeout_s=60))")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(tmp_path)))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "[0, 10]"


def test_a_rank_sees_the_environment_directory_and_path_of_the_call_not_of_the_fork_servers_start(
        tmp_path, monkeypatch):
    distributed.launch(faulty.echo, 1, "start the fork server first", timeout_s=60)
    monkeypatch.setenv("NBHELPERS_SEEN_BY_RANKS", "set after the server started")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = distributed.launch(faulty.where_it_runs, 2, "NBHELPERS_SEEN_BY_RANKS", timeout_s=60)
    assert [s["variable"] for s in seen] == ["set after the server started"] * 2
    assert [s["cwd"] for s in seen] == [str(tmp_path)] * 2
    assert all(s["path"][0] == str(tmp_path) for s in seen)
    server = list(_helpers(_process_table(), "forkserver"))
    assert [s["parent"] for s in seen] == server * 2          # forks of the one fork server, not of this process
    assert _live_children() == []


def test_spawn_where_there_is_no_fork_server_starts_fresh_interpreters_that_see_the_same(monkeypatch):
    """The start method of macOS and Windows, here on Linux: every rank a child of this process."""
    monkeypatch.setenv("NBHELPERS_SEEN_BY_RANKS", "spawned")
    seen = distributed.launch(faulty.where_it_runs, 2, "NBHELPERS_SEEN_BY_RANKS", timeout_s=120, start_method="spawn")
    assert [s["parent"] for s in seen] == [os.getpid()] * 2 and [s["variable"] for s in seen] == ["spawned"] * 2
    assert _live_children() == []
