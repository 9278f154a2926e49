"""Watching torch.compile work: can inductor run here, what each backend costs, where graphs break, and
why code recompiles (what a cold compile cache costs is `compile_cache`).

Every helper that compiles starts from `torch.compiler.reset()` and resets again on exit, so one
experiment never inherits another's graphs, guards or automatic-dynamic decisions.

Example:
    rows = compilation.compare_backends(step, (x, y), [("eager", None), ("inductor", None)])
    print(compilation.render_results(rows))
    breaks = compilation.find_breaks(fn, x)          # graphs, and each break's reason and line
    with compilation.watch_compiles() as log:        # graphs compiled, recompile reasons
        ...

Which to use: `find_breaks` is `torch._dynamo.explain` as data (graph count, ops per graph, each break's reason
and line: what explain sees), and `watch_compiles` counts compiles and recompile reasons around any code.
`compile_lens.capture` / `capture_calls` is the lens: each break with its official GB code, explanation and hints
(also the breaks explain cannot see), every compiled entry's guards and the guard each recompile failed, the FX,
AOTAutograd and kernel views. Both break records name the source line `line`.
"""
from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch

from nbhelpers import arguments, devices

__all__ = ["Preflight", "preflight", "BackendResult", "compare_backends", "render_results", "GraphBreak",
           "Breaks", "find_breaks", "CompileLog", "watch_compiles"]

_NEEDS = {"cpu": ("TorchDynamo", "C++ compiler (inductor)"), "cuda": ("TorchDynamo", "Triton")}


@dataclass(frozen=True)
class Preflight:
    """Whether inductor can compile for `device` here, with each prerequisite and its reason."""

    device: str
    can_compile: bool
    checks: tuple[devices.Capability, ...]


def preflight(device: torch.device | str | None = None) -> Preflight:
    """Check what inductor needs: a Python Dynamo supports, then a C++ compiler with OpenMP (CPU) or
    Triton and a GPU (CUDA). Compiles a 2-line C++ probe, so it takes about a second."""
    kind = devices.resolve(device).type
    if kind not in _NEEDS:
        raise ValueError(f"preflight knows cpu and cuda, got {kind!r}")
    found = {c.name: c for c in devices.capabilities()}
    checks = tuple(found[name] for name in _NEEDS[kind])
    return Preflight(kind, all(c.available for c in checks), checks)


@dataclass(frozen=True)
class BackendResult:
    """One row of `compare_backends`. `speedup` > 1 means faster than plain eager."""

    backend: str
    mode: str | None
    first_call_s: float     # compile (if any) plus the first run
    steady_s: float         # median seconds per call afterwards, from torch.utils.benchmark
    speedup: float          # eager steady_s / this steady_s
    graphs: int
    graph_breaks: int

    @property
    def label(self) -> str:
        return self.backend + (f" ({self.mode})" if self.mode else "")


def compare_backends(fn: Callable, args: tuple, backends: list[tuple[str, str | None]],
                     device: torch.device | str | None = None, min_run_time: float = 0.5
                     ) -> tuple[BackendResult, ...]:
    """Time `fn(*args)` uncompiled (first row) and compiled with each (backend, mode).

    `fn` runs many times, so a training step keeps training; `args` must already be on `device`, which
    defaults to theirs (devices.resolve): the device each timed call is synchronized with.
    """
    _check_comparison(fn, args, backends)
    device = devices.resolve(device, *args)
    rows = [_measure(fn, args, "none (eager)", None, device, min_run_time, baseline=None)]
    for backend, mode in backends:
        torch.compiler.reset()
        try:
            rows.append(_measure(torch.compile(fn, backend=backend, mode=mode), args, backend, mode,
                                 device, min_run_time, baseline=rows[0].steady_s))
        finally:
            torch.compiler.reset()
    return tuple(rows)


def _check_comparison(fn, args, backends) -> None:
    where = "compilation.compare_backends"
    arguments.require_callable(where, "fn", fn, "a function or module to time")
    arguments.require(where, "args", args, tuple, "a tuple of fn's arguments, such as (x,)")
    expected = 'a list of (backend, mode) pairs, such as [("inductor", None), ("inductor", "max-autotune")]'
    arguments.require(where, "backends", backends, (list, tuple), expected)
    for entry in backends:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
            raise TypeError(f"{where}: `backends` must be {expected}; it holds {arguments.given(entry)}")


def render_results(rows: tuple[BackendResult, ...]) -> str:
    """A plain-text table of `compare_backends` rows."""
    lines = [f"{'backend':<28}{'first call':>12}{'steady':>12}{'vs eager':>10}{'graphs':>8}{'breaks':>8}"]
    for r in rows:
        lines.append(f"{r.label:<28}{r.first_call_s:>11.2f}s{r.steady_s * 1e3:>10.3f}ms{r.speedup:>9.2f}x"
                     f"{r.graphs:>8}{r.graph_breaks:>8}")
    return "\n".join(lines)


@dataclass(frozen=True)
class GraphBreak:
    """Why Dynamo stopped a graph, and the user line it stopped at, as `explain` reports it. Field names mean
    what they mean in compile_lens's `compile_report.Break`: `line` is the user's source line in both (the
    innermost frame outside torch), `where` the break's own place when that lies inside torch."""

    reason: str             # first line of Dynamo's explanation
    function: str           # the user's function holding `line`
    lineno: int             # the line's number within the function's file (a notebook cell counts from 1)
    line: str               # that source line
    where: str = ""         # e.g. torch/testing/_comparison.py:1129 for a break inside torch, else ""


TORCH_DIR = str(Path(torch.__file__).parent) + os.sep     # with its separator: torchvision's files are not torch's


def place_in_torch(file: str, lineno: int) -> str:
    """`torch/optim/optimizer.py:78` for a place inside torch, else ""."""
    return f"torch/{file[len(TORCH_DIR):]}:{lineno}" if file.startswith(TORCH_DIR) else ""


def _graph_break(reason) -> GraphBreak:
    """explain's break reason as a GraphBreak at the innermost frame outside torch (a break inside
    torch.testing.assert_close is the user's line that called it, as compile_lens places it)."""
    stack = reason.user_stack
    user = [f for f in stack if not f.filename.startswith(TORCH_DIR)] or stack
    frame, inner = user[-1], stack[-1]
    return GraphBreak(reason.reason.strip().splitlines()[0], frame.name, frame.lineno, (frame.line or "").strip(),
                      place_in_torch(inner.filename, inner.lineno))


@dataclass(frozen=True)
class Breaks:
    """`torch._dynamo.explain` as data."""

    graphs: int
    breaks: tuple[GraphBreak, ...]
    ops_per_graph: tuple[int, ...]


def find_breaks(fn: Callable, *args, **kwargs) -> Breaks:
    """Run `torch._dynamo.explain(fn)(*args, **kwargs)` (which also runs `fn`) and return its graphs and
    breaks. Dynamo's graph-break warnings are held back, since the result says the same."""
    arguments.require_callable("compilation.find_breaks", "fn", fn, "a function or module to compile")
    torch.compiler.reset()
    try:
        with _captured_torch_logs():
            out = torch._dynamo.explain(fn)(*args, **kwargs)
    finally:
        torch.compiler.reset()
    found = tuple(_graph_break(b) for b in out.break_reasons)
    return Breaks(out.graph_count, found, tuple(len(ops) for ops in out.ops_per_graph))


@dataclass
class CompileLog:
    """Filled when the `watch_compiles` block exits."""

    graphs: int = 0                                          # graphs compiled inside the block
    # guard failures, "frame/version: guard"; compile_lens.capture_calls gives the same per entry (Entry.failed)
    recompiles: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)       # Dynamo's warnings, first lines


@contextmanager
def watch_compiles() -> Iterator[CompileLog]:
    """Count the graphs compiled in the block and record why each recompile happened.

    Resets Dynamo on entry (a function compiled earlier would otherwise keep its guards and its
    automatic-dynamic decisions) and on exit. Dynamo's warnings go to `warnings`, not to stderr.
    """
    log = CompileLog()
    counters, guard_failures = _dynamo_stats()
    torch.compiler.reset()
    before = counters["stats"]["unique_graphs"]
    try:
        with _captured_torch_logs() as messages:
            yield log
    finally:
        log.graphs = counters["stats"]["unique_graphs"] - before
        # the reset on entry emptied guard_failures, so every entry is from this block
        log.recompiles = [r.split("  #")[0].strip() for reasons in guard_failures.values() for r in reasons]
        log.warnings = [m.splitlines()[0] for m in messages]
        torch.compiler.reset()


def _measure(fn, args, backend, mode, device, min_run_time, baseline) -> BackendResult:
    counters = _dynamo_stats()[0]
    graphs, breaks = counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())
    with _captured_torch_logs():
        # imported here: importing it logs a "No CUDA runtime" warning on CPU-only machines
        from torch.utils import benchmark

        start = time.perf_counter()
        fn(*args)
        devices.synchronize(device)
        first = time.perf_counter() - start
        graphs = counters["stats"]["unique_graphs"] - graphs
        breaks = sum(counters["graph_break"].values()) - breaks
        timer = benchmark.Timer("fn(*args)", globals={"fn": fn, "args": args})
        steady = timer.blocked_autorange(min_run_time=min_run_time).median
    return BackendResult(backend, mode, first, steady, (baseline or steady) / steady, graphs, breaks)


def _dynamo_stats() -> tuple[dict, dict]:
    """TorchDynamo's counters and guard failures. Imported on first use, not with this module:
    importing TorchDynamo takes about 1 s, which every importer would pay (exercises, DDP ranks)."""
    from torch._dynamo.utils import counters, guard_failures

    return counters, guard_failures


@contextmanager
def _captured_torch_logs() -> Iterator[list[str]]:
    """Collect torch's WARNING+ log messages instead of printing them (timestamped stderr lines differ
    on every run). torch._logging gives many `torch.*` loggers their own stderr handler, so each of
    those handlers is swapped for a collecting one during the block and put back on exit."""
    messages: list[str] = []
    collector = _ListHandler(messages)
    loggers = [lg for name, lg in logging.root.manager.loggerDict.items()
               if name.startswith("torch") and isinstance(lg, logging.Logger) and lg.handlers]
    saved = {lg: lg.handlers[:] for lg in loggers}
    for lg in loggers:
        lg.handlers = [collector]
    try:
        yield messages
    finally:
        for lg, handlers in saved.items():
            lg.handlers = handlers


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]):
        super().__init__(level=logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())
