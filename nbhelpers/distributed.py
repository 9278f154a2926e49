"""Run a function in N real processes joined by a process group, from a notebook or a script, with a
deadline. It needs nothing from the rest of the package: copy it into any project. (The torchrun entry
point that trains the sandwich with DDP is `nbhelpers.ddp_train`.)

On Linux `launch` starts its ranks as forks of multiprocessing's fork server, a fresh interpreter that has
imported torch once (forkserver), so a rank starts in a fraction of a second instead of importing torch again
for seconds; elsewhere (macOS, Windows) each rank is a fresh interpreter (spawn, Python's own default there).
It rendezvous through a file in a temporary directory (no port to race for), returns what each rank's worker
returned, re-raises a worker's exception with its rank and traceback, and always leaves no rank behind (the
fork server itself, idle, lives as long as the calling process, as multiprocessing's always does). While it
waits, a notebook shows one line saying so (nbhelpers.progress; a copy of this file without the package shows
none).

The backend follows where the workers' tensors live, not what the machine has: gloo for CPU tensors (the
default), NCCL for `device="cuda"`, where each rank works on its own GPU (NCCL moves only GPU memory, and
one GPU cannot serve two ranks). So CPU lessons run unchanged on a GPU host.

Example:
    results = distributed.launch(ddp_workers.all_reduce_by_hand, world_size=2)
    on_gpus = distributed.launch(ddp_workers.all_reduce_by_hand, world_size=2, device="cuda")
"""
from __future__ import annotations

import contextlib
import datetime
import multiprocessing
import os
import pickle
import queue as queue_module
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

__all__ = ["RankFailure", "LaunchTimeout", "launch"]


class RankFailure(RuntimeError):
    """A worker raised (or its process died); `rank` says which, `remote_traceback` shows where."""

    def __init__(self, rank: int, message: str, remote_traceback: str = ""):
        super().__init__(f"rank {rank}: {message}" + (f"\n\n{remote_traceback}" if remote_traceback else ""))
        self.rank, self.remote_traceback = rank, remote_traceback


class LaunchTimeout(TimeoutError):
    """Not every rank finished before the deadline; all processes were stopped."""


def launch(worker: Callable, world_size: int, *args, device: torch.device | str = "cpu", timeout_s: float = 120.0,
           start_method: str | None = None) -> list[Any]:
    """Run `worker(rank, world_size, *args)` in `world_size` processes, each inside an initialised
    process group; return the results by rank.

    `device` says where the workers keep their tensors, and picks the backend: "cpu" joins the ranks with
    gloo; "cuda" with NCCL, rank r on cuda:r (the current device in its process), which needs a GPU per
    rank. The ranks start with torch's defaults, so "cpu" is the default whatever the caller's.
    Results travel pickled by value, so tensors arrive intact after the workers have exited.

    `start_method` None is "forkserver" on Linux, else "spawn". multiprocessing gives each rank the caller's
    sys.path and working directory as they are at the call, and `launch` its environment (a fork of the server
    would have the server's, taken when it started). What torch reads only at import (TORCH_LOGS), a forked
    rank read when the server started; TORCH_DISTRIBUTED_DEBUG each rank reads again. The first forkserver
    launch sets multiprocessing's preload list, one per process, to torch.
    """
    start_method = start_method or _default_start_method()
    _check_launch(worker, world_size, timeout_s, start_method)
    backend = _backend_for(_device(device), world_size)
    ctx = _context(start_method)
    results: dict[int, Any] = {}
    with tempfile.TemporaryDirectory(prefix="launch-") as tmp:
        channel = ctx.Queue()
        init = f"file://{Path(tmp) / 'rendezvous'}"
        processes = [ctx.Process(target=_run_rank, daemon=True,
                                 args=(rank, world_size, backend, init, timeout_s, worker, args, channel,
                                       dict(os.environ)))
                     for rank in range(world_size)]
        try:
            for p in processes:
                p.start()
            with _waiting_line(f"launch {getattr(worker, '__name__', 'worker')}: {world_size} ranks over "
                               f"{backend}") as shown:
                _collect(processes, channel, results, time.monotonic() + timeout_s, timeout_s, shown)
        finally:
            _stop(processes)
            channel.close()
    return [results[rank] for rank in range(world_size)]


def _default_start_method() -> str:
    # macOS lists forkserver too, but Python made spawn its default there: forking is not reliable on it
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def _context(start_method: str):
    """multiprocessing's context. For forkserver, the server is started here, importing torch (its preload list
    is multiprocessing's, one per process; a server already running keeps the list it started with), before any
    rank exists: an interrupt while it starts leaves no rank waiting in the rendezvous."""
    ctx = multiprocessing.get_context(start_method)
    if start_method == "forkserver":
        from multiprocessing import forkserver

        ctx.set_forkserver_preload(["torch", "torch.distributed"])
        forkserver.ensure_running()
    return ctx


def _backend_for(device: torch.device, world_size: int) -> str:
    if device.type == "cpu":
        return "gloo"
    if device.type != "cuda":
        raise ValueError(f"device must be 'cpu' (gloo) or 'cuda' (NCCL), got {str(device)!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < world_size:
        raise ValueError(f"device='cuda' puts each rank on its own GPU: world_size={world_size} needs "
                         f"{world_size} GPUs and torch sees {gpus}; use device='cpu' (gloo) or world_size <= {gpus}")
    return "nccl"


# The launcher imports nothing from the package (a learner can copy it alone), so it checks its own arguments,
# in the words of nbhelpers.arguments.
def _check_launch(worker, world_size, timeout_s, start_method) -> None:
    if not callable(worker):
        raise TypeError(f"distributed.launch: `worker` must be a function worker(rank, world_size, *args); got "
                        f"{type(worker).__name__} ({worker!r})")
    _check_importable(worker)
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"distributed.launch: `world_size` must be an integer above zero; got "
                        f"{type(world_size).__name__} ({world_size!r})")
    if world_size < 1:
        raise ValueError(f"distributed.launch: `world_size` must be at least 1; got {world_size}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
        raise (ValueError if isinstance(timeout_s, (int, float)) else TypeError)(
            f"distributed.launch: `timeout_s` must be a number of seconds above zero; got {timeout_s!r}")
    methods = multiprocessing.get_all_start_methods()
    if start_method not in methods:
        raise ValueError(f"distributed.launch: `start_method` must be one of {', '.join(methods)}; got "
                         f"{start_method!r}")


def _device(device) -> torch.device:
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"distributed.launch: `device` must be 'cpu' (gloo) or 'cuda' (NCCL, a GPU per rank); "
                         f"got {device!r}") from None


def _check_importable(worker) -> None:
    module, name = getattr(worker, "__module__", None), getattr(worker, "__qualname__", "")
    if module in (None, "__main__") or "<locals>" in name or "<lambda>" in name:
        raise ValueError(
            f"distributed.launch: `worker` {name or worker!r} is defined in {module or 'no module'}, so a rank's "
            f"process cannot "
            f"import it; define it at the top level of a .py module (in a notebook: %%writefile my_workers.py, "
            f"then `from my_workers import {name or 'worker'}`)")


def _waiting_line(label: str):
    try:
        from nbhelpers import progress
    except ImportError:    # this file copied into another project
        return contextlib.nullcontext()
    return progress.line(label)


def _collect(processes, channel, results, deadline, timeout_s, shown=None) -> None:
    while len(results) < len(processes):
        if shown is not None:
            shown.update(f"{len(results)}/{len(processes)} ranks done")
        try:
            rank, ok, payload = channel.get(timeout=0.2)
        except queue_module.Empty:
            _check_alive(processes, results)
            if time.monotonic() > deadline:
                missing = sorted(set(range(len(processes))) - set(results))
                raise LaunchTimeout(f"ranks {missing} did not finish within {timeout_s} s; all processes were "
                                    "stopped (a collective that one rank never joins waits until the process "
                                    "group's timeout)") from None
            continue
        if not ok:
            message, remote = payload
            _check_alive(processes, results, reporting=rank, grace_s=0.5)   # the rank that caused it, first
            raise RankFailure(rank, message, remote)
        results[rank] = pickle.loads(payload)


def _check_alive(processes, results, reporting: int | None = None, grace_s: float = 0.0) -> None:
    """Raise for a rank whose process exited without reporting. When another rank has just reported an
    error, give the others `grace_s` to exit: a rank that died hard (os._exit, a segfault) breaks its
    peers' connections, and its death, not their "connection closed by peer", is the cause to name."""
    for rank, p in enumerate(processes):
        if rank == reporting or rank in results:
            continue
        if grace_s:
            p.join(timeout=grace_s / len(processes))
        if p.exitcode not in (None, 0):
            raise RankFailure(rank, f"its process exited with code {p.exitcode} before reporting (it could not "
                                    f"start the worker, or was killed); its stderr says why")


def _stop(processes) -> None:
    started = [p for p in processes if p.pid is not None]
    for p in started:
        if p.is_alive():
            p.terminate()
    for p in started:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join()


def _run_rank(rank, world_size, backend, init, timeout_s, worker, args, channel, environment) -> None:
    os.environ.clear()        # a fork of the server has the server's environment; the rank gets the caller's
    os.environ.update(environment)
    dist.set_debug_level_from_env()   # read once at import (torch/distributed/__init__.py), in the server's
    torch.set_num_threads(1)  # world_size processes share the machine's cores
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)    # the worker's torch.device("cuda") is this rank's own GPU
        # twice launch's deadline: a collective that one rank never joins is ended by the deadline, reported
        # as the hang it is, never by the process group's own error first (which only backs it up)
        dist.init_process_group(backend, init_method=init, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=2 * timeout_s))
        # every rank finishes connecting before any runs: a rank whose worker returns at once would
        # otherwise exit while a peer is still in gloo's connectFullMesh ("Connection closed by peer")
        dist.barrier()
        result = worker(rank, world_size, *args)
        channel.put((rank, True, pickle.dumps(result)))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent, with its rank
        channel.put((rank, False, (f"{type(e).__name__}: {e}", traceback.format_exc())))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
