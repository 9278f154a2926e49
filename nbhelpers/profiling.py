"""A profiler trace as data: read a Chrome/Perfetto trace written by `export_chrome_trace` back into
per-op totals, and draw the top ones; and why a call is slow: its FLOPs and bytes moved, this machine's
ceilings, and a regime (overhead-, bandwidth- or compute-bound) from Horace He's "Making Deep Learning Go
Brrrr From First Principles".

Example:
    prof.export_chrome_trace("build/traces/step.json")
    top = profiling.trace_summary("build/traces/step.json", top=8)
    profiling.plot_top_ops(top)
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from nbhelpers import devices

__all__ = ["OpTime", "trace_summary", "plot_top_ops", "Work", "work", "median_seconds", "machine_peaks",
           "regime"]                       # machine_peaks returns Peaks, regime a Regime


@dataclass(frozen=True)
class OpTime:
    """One op name in a trace: how often it ran and its total (inclusive) duration."""

    name: str
    category: str
    calls: int
    total_us: float


def trace_summary(path: str | Path, top: int = 10, categories: tuple[str, ...] = ("cpu_op", "user_annotation",
                                                                                   "kernel")) -> tuple[OpTime, ...]:
    """The `top` op names by total duration among complete ("X") events of `categories`."""
    path = Path(path)
    try:
        events = json.loads(path.read_text())["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path} is not a Chrome trace written by prof.export_chrome_trace ({e}); "
                         f"export one, or open it in https://ui.perfetto.dev to inspect it") from e
    calls, totals, kinds = defaultdict(int), defaultdict(float), {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in categories:
            calls[e["name"]] += 1
            totals[e["name"]] += float(e.get("dur", 0.0))
            kinds[e["name"]] = e["cat"]
    ranked = sorted(totals, key=totals.get, reverse=True)[:top]
    return tuple(OpTime(name, kinds[name], calls[name], totals[name]) for name in ranked)


def plot_top_ops(summary: tuple[OpTime, ...], ax=None):
    """Horizontal bars of total microseconds per op, largest on top."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.figure(figsize=(7, 0.35 * len(summary) + 1)).gca()
    names = [f"{o.name} (x{o.calls})" for o in summary][::-1]
    ax.barh(names, [o.total_us for o in summary][::-1], color="tab:blue")
    ax.set_xlabel("total time in trace (us, inclusive)")
    return ax


@dataclass(frozen=True)
class Work:
    """What one call does, structurally: FLOPs (FlopCounterMode's count) and bytes its ATen ops read and write."""

    flops: int
    bytes_moved: int          # inputs plus outputs of every non-view op, as if nothing stayed in cache: an estimate


def work(fn) -> Work:
    """Run `fn()` once and count its FLOPs with `torch.utils.flop_counter.FlopCounterMode` and the bytes its
    ops read and write (every tensor argument and result of each op that is not a view, counted whole)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter, moved = FlopCounterMode(display=False), _BytesMoved()
    with counter, moved:
        fn()
    return Work(counter.get_total_flops(), moved.total)


class _BytesMoved:
    """A dispatch mode that adds up the bytes of each non-view op's tensor inputs and outputs."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if not func.is_view:
                    from torch.utils._pytree import tree_flatten

                    tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
                    outer.total += sum(t.numel() * t.element_size() for t in tensors)
                return out

        self.total, self.mode = 0, Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@dataclass(frozen=True)
class Peaks:
    """This machine's ceilings, measured: a large matrix multiplication's FLOP/s and a large copy's bytes/s."""

    flops_per_s: float
    bytes_per_s: float


def machine_peaks(device: torch.device | str | None = None) -> Peaks:
    """Measure the ceilings on `device` with torch.utils.benchmark: a 1024 x 1024 float32 matmul and a 64 MiB copy."""
    device = devices.resolve(device)
    a, b = torch.rand(1024, 1024, device=device), torch.rand(1024, 1024, device=device)
    source, target = torch.rand(16 * 1024 * 1024, device=device), torch.empty(16 * 1024 * 1024, device=device)
    mm = median_seconds(lambda: torch.mm(a, b))
    copy = median_seconds(lambda: target.copy_(source))
    return Peaks(2 * 1024 ** 3 / mm, 2 * source.numel() * source.element_size() / copy)


def median_seconds(fn, min_run_time: float = 0.3) -> float:
    """The median seconds per call of `fn()`, measured by torch.utils.benchmark (which synchronizes CUDA)."""
    from torch.utils import benchmark

    return benchmark.Timer("fn()", globals={"fn": fn}).blocked_autorange(min_run_time=min_run_time).median


@dataclass(frozen=True)
class Regime:
    """Why a call takes the time it takes, with the evidence; `verdict` is about the first size."""

    verdict: str                       # overhead-bound, bandwidth-bound, compute-bound, too fast to classify
    sizes: tuple[int, ...]
    seconds: tuple[float, ...]         # median per call at each size
    work: tuple[Work, ...]
    compute_share: float               # achieved FLOP/s over the machine's matmul FLOP/s, at the first size
    bandwidth_share: float             # achieved bytes/s over the machine's copy bytes/s, at the first size
    evidence: str

    @property
    def overhead_share(self) -> float:
        """The part of the time that neither ceiling explains: Python, the dispatcher, launches."""
        return max(0.0, 1.0 - max(self.compute_share, self.bandwidth_share))


def regime(make, sizes: tuple[int, int], device: torch.device | str | None = None, peaks: Peaks | None = None,
           counted=None) -> Regime:
    """Classify `make(sizes[0])()` by the roofline: the time its FLOPs need at the machine's matmul rate and
    the time its bytes need at the machine's copy rate. When neither explains half of the measured time, it is
    overhead-bound; else bound by the ceiling it comes closer to. The second size is evidence: overhead
    shows as time that grows far slower than the work. `make(size)` returns the call to time; `counted(size)`,
    if given, returns its Work (for compiled code, whose kernels no dispatch mode sees)."""
    if len(sizes) != 2 or not sizes[0] < sizes[1]:
        raise ValueError(f"sizes must be two increasing sizes, such as (1, 16); got {sizes!r}")
    calls = [make(size) for size in sizes]
    if not all(callable(c) for c in calls):
        raise TypeError("make(size) must return the call to time (a function of no arguments)")
    try:
        works = tuple(counted(size) if counted else work(call) for size, call in zip(sizes, calls))
        seconds = tuple(median_seconds(call, 0.2) for call in calls)
    except Exception as error:
        raise ValueError(f"regime: the call raised {type(error).__name__}: {error}; make it run on its own "
                         "first, then classify it") from error
    if not any(w.flops or w.bytes_moved for w in works):
        raise ValueError("regime: the call did no tensor work (no FLOPs, no bytes moved: no op, or only views), "
                         "so there is nothing to classify; pass a call that computes with tensors")
    floor = median_seconds(lambda: None, 0.05)
    if seconds[0] < 20 * floor:
        return Regime("too fast to classify", tuple(sizes), seconds, works, 0.0, 0.0,
                      f"{seconds[0] * 1e9:.0f} ns per call is within 20x of an empty call ({floor * 1e9:.0f} ns)")
    peaks = peaks or machine_peaks(device)
    compute = works[0].flops / seconds[0] / peaks.flops_per_s
    bandwidth = works[0].bytes_moved / seconds[0] / peaks.bytes_per_s
    verdict = ("overhead-bound" if max(compute, bandwidth) < 0.5 else
               "compute-bound" if compute >= bandwidth else "bandwidth-bound")
    flops = f"FLOPs x{works[1].flops / works[0].flops:.1f}" if works[0].flops else "no FLOPs counted"
    evidence = (f"at size {sizes[0]}: {compute:.0%} of the matmul FLOP/s, {bandwidth:.0%} of the copy bandwidth; "
                f"to size {sizes[1]}: {flops}, bytes x{works[1].bytes_moved / works[0].bytes_moved:.1f}, "
                f"time x{seconds[1] / seconds[0]:.1f}")
    return Regime(verdict, tuple(sizes), seconds, works, compute, bandwidth, evidence)
