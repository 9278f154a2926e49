"""A profiler trace as data: read a Chrome/Perfetto trace written by `export_chrome_trace` back into
per-op totals, and draw the top ones.

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

__all__ = ["OpTime", "trace_summary", "plot_top_ops"]


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
