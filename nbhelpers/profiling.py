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
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from nbhelpers import arguments, devices, eager_only, flop_formulas

__all__ = ["OpTime", "trace_summary", "plot_top_ops", "Work", "work", "median_seconds", "machine_peaks",
           "regime"]   # machine_peaks returns Peaks, regime a Regime; bytes_moved: module_work's


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
    path = arguments.require_file("profiling.trace_summary", "path", path, exists=True)
    arguments.require_positive("profiling.trace_summary", "top", top)
    try:
        events = json.loads(path.read_text())["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"profiling.trace_summary: `path` {path} is not a Chrome trace written by "
                         f"prof.export_chrome_trace ({e}); export one, or open it in https://ui.perfetto.dev to "
                         "inspect it") from e
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
    added_flops: int = 0      # of `flops`, those FlopCounterMode counts 0 for, counted analytically (flop_formulas)


def work(fn) -> Work:
    """Run `fn()` once and count its FLOPs with `torch.utils.flop_counter.FlopCounterMode` and the bytes its
    ops read and write (each distinct tensor argument and result of each op that is not a view, by the bytes its
    elements occupy: a broadcast input counts once, not at its expanded size). FlopCounterMode has no formula for
    CPU attention (aten._scaled_dot_product_flash_attention_for_cpu and its backward) nor for the fused inference
    paths of nn.MultiheadAttention and nn.TransformerEncoderLayer, and counts them 0; `work` adds them
    analytically (`flop_formulas`, torch's sdpa_flop_count for the attention) and says how much in
    `Work.added_flops`."""
    from torch.utils.flop_counter import FlopCounterMode

    arguments.require_callable("profiling.work", "fn", fn, "a function of no arguments, such as lambda: model(x)")
    counter, moved = FlopCounterMode(display=False, custom_mapping=flop_formulas.added()), _BytesMoved()
    with eager_only.warn_if_compiled("profiling.work", eager_only.FOR_WORK), counter, moved:
        fn()
    added = sum(n for op, n in counter.get_flop_counts().get("Global", {}).items()
                if op in flop_formulas.added())
    return Work(counter.get_total_flops(), moved.total, added)


class _BytesMoved:
    """A dispatch mode that adds up the bytes of each non-view op's tensor inputs and outputs."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if not func.is_view:
                    outer.total += bytes_moved((args, kwargs, out))
                return out

        self.total, self.mode = 0, Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def bytes_moved(value) -> int:
    """The bytes of the distinct tensors in an op's arguments and result (`work`'s count for one op)."""
    from torch.utils._pytree import tree_flatten

    tensors = {_identity(t): t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)}
    return sum(_bytes_held(t) for t in tensors.values())


def _identity(t: torch.Tensor) -> tuple:
    """The same elements: one tensor passed twice (x * x) is read once."""
    if t.layout != torch.strided or t.is_nested:
        return (id(t),)
    return t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype


def _bytes_held(t: torch.Tensor) -> int:
    """The bytes a tensor's elements occupy: a dimension of stride 0 (expand, broadcast) repeats the same
    elements, so it does not multiply; a sparse tensor holds its indices and values, a nested one (the packed
    batch TransformerEncoder makes) its elements."""
    if t.layout == torch.sparse_coo:
        return _bytes_held(t._indices()) + _bytes_held(t._values())
    if t.layout != torch.strided or t.is_nested or t.numel() == 0:
        return t.numel() * t.element_size()
    return math.prod(size for size, stride in zip(t.shape, t.stride()) if stride != 0) * t.element_size()


@dataclass(frozen=True)
class Peaks:
    """This machine's ceilings, measured: a large matrix multiplication's FLOP/s and a large copy's bytes/s."""

    flops_per_s: float
    bytes_per_s: float


def machine_peaks(device: torch.device | str | None = None, min_run_time: float = 0.3) -> Peaks:
    """Measure the ceilings on `device` with torch.utils.benchmark: a 1024 x 1024 float32 matmul and a 64 MiB copy,
    each timed for at least `min_run_time` seconds."""
    device = devices.resolve(device)
    a, b = torch.rand(1024, 1024, device=device), torch.rand(1024, 1024, device=device)
    source, target = torch.rand(16 * 1024 * 1024, device=device), torch.empty(16 * 1024 * 1024, device=device)
    mm = median_seconds(lambda: torch.mm(a, b), min_run_time)
    copy = median_seconds(lambda: target.copy_(source), min_run_time)
    return Peaks(2 * 1024 ** 3 / mm, 2 * source.numel() * source.element_size() / copy)


def median_seconds(fn, min_run_time: float = 0.3, calls: int | None = None) -> float:
    """The median seconds per call of `fn()`, measured by torch.utils.benchmark (which synchronizes CUDA).

    `calls` bounds how often `fn` runs: the mean of `calls` runs after Timer.timeit's two warmup runs, instead of
    as many as `min_run_time` seconds take (a step of a fast model runs thousands of times in 0.3 s)."""
    from torch.utils import benchmark

    timer = benchmark.Timer("fn()", globals={"fn": fn})
    if calls is not None:
        arguments.require_positive("profiling.median_seconds", "calls", calls)
        return timer.timeit(calls).mean            # torch/utils/benchmark/utils/timer.py: warmup max(calls // 100, 2)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def _growth(works: tuple[Work, ...]) -> float:
    """How much the work grows from the first size to the second: the faster-growing of FLOPs and bytes."""
    pairs = ((works[0].flops, works[1].flops), (works[0].bytes_moved, works[1].bytes_moved))
    return max((after / before for before, after in pairs if before), default=1.0)


def _scales(works: tuple[Work, ...], seconds: tuple[float, ...]) -> bool:
    """Whether the time grows with the work: at least as the square root of its growth (half, in log terms).
    Fixed costs (Python, the dispatcher, launches) do not grow with the work; work does."""
    growth = _growth(works)
    return growth > 1.2 and math.log(seconds[1] / seconds[0]) >= 0.5 * math.log(growth)


def _verdict(compute: float, bandwidth: float, scales: bool) -> str:
    """A ceiling that explains half the time binds; else time that does not grow with the work is overhead;
    work-bound time closer than a fifth to a ceiling is that ceiling's; work-bound time that neither ceiling
    explains is computation the matmul rate does not measure (sorting, transcendental functions)."""
    closer = "compute-bound" if compute >= bandwidth else "bandwidth-bound"
    if max(compute, bandwidth) >= 0.5:
        return closer
    if not scales:
        return "overhead-bound"
    return closer if max(compute, bandwidth) >= 0.2 else "compute-bound (not matmul)"


@dataclass(frozen=True)
class Regime:
    """Why a call takes the time it takes, with the evidence; `verdict` is about the first size."""

    verdict: str      # overhead-bound, bandwidth-bound, compute-bound, compute-bound (not matmul), too fast to classify
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
           counted=None, calls: int | None = None) -> Regime:
    """Classify `make(sizes[0])()` by the roofline: the time its FLOPs need at the machine's matmul rate and
    the time its bytes need at the machine's copy rate, and by how its time grows to `make(sizes[1])()`. A
    ceiling that explains half of the time binds; otherwise time that grows far slower than the work is
    overhead-bound, and time that grows with it is bound by the closer ceiling (when it explains a fifth) or by
    computation neither ceiling measures: "compute-bound (not matmul)" (a sort, erfinv, sin, exp).
    `make(size)` returns the call to time; `counted(size)`, if given, returns its Work (for compiled code, whose
    kernels no dispatch mode sees). `calls` (None: as many as 0.2 s take) bounds the timed runs of each size."""
    runs = _regime_calls(make, sizes)
    try:
        works = tuple(counted(size) if counted else work(run) for size, run in zip(sizes, runs))
        seconds = tuple(median_seconds(run, 0.2) if calls is None else median_seconds(run, calls=calls) for run in runs)
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
    scales = _scales(works, seconds)
    evidence = (f"at size {sizes[0]}: {compute:.0%} of the matmul FLOP/s, {bandwidth:.0%} of the copy bandwidth; "
                f"{_growth_evidence(sizes, works, seconds, scales)}")
    return Regime(_verdict(compute, bandwidth, scales), tuple(sizes), seconds, works, compute, bandwidth, evidence)


def _regime_calls(make, sizes) -> list:
    """`make(size)` for both sizes, after checking what `regime` was given."""
    arguments.require_callable("profiling.regime", "make", make,
                               "a function of a size that returns the call to time, such as lambda n: (lambda: f(n))")
    if not (isinstance(sizes, (tuple, list)) and len(sizes) == 2 and all(isinstance(s, int) for s in sizes)
            and sizes[0] < sizes[1]):
        raise ValueError(f"profiling.regime: `sizes` must be two increasing integer sizes, such as (1, 16); got "
                         f"{arguments.given(sizes)}")
    calls = [make(size) for size in sizes]
    if not all(callable(c) for c in calls):
        raise TypeError("profiling.regime: `make` must return the call to time (a function of no arguments) for each "
                        f"size; make({sizes[0]}) returned {arguments.given(calls[0])}")
    return calls


def _growth_evidence(sizes, works, seconds, scales: bool) -> str:
    flops = f"FLOPs x{works[1].flops / works[0].flops:.1f}" if works[0].flops else "no FLOPs counted"
    return (f"to size {sizes[1]}: {flops}, bytes x{works[1].bytes_moved / works[0].bytes_moved:.1f}, "
            f"time x{seconds[1] / seconds[0]:.1f}: "
            f"{'grows with' if scales else 'far slower than'} the work (x{_growth(works):.1f})")
