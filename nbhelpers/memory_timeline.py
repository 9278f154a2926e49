"""A diagnosis's memory over its step, as data a browser draws: every storage the step made (bytes, the op that
made it, the op after which it was freed, its category and its module), and every op (its name, module, phase,
the learner's line, and the backward node that holds the bytes). memory_timeline.js stacks the live bytes by
category or by module; `series` is the same sum in Python, for the still picture and the tests. `snapshot`
writes the same allocations as the pickle `torch.cuda.memory._snapshot()` returns, which PyTorch's memory_viz
opens.

Example:
    state = memory_timeline.state(diagnosis)          # what the widget's `timeline` trait carries
    memory_timeline.save_snapshot(diagnosis, "step.pickle")
"""
from __future__ import annotations

import pickle
from html import escape
from itertools import accumulate
from pathlib import Path

from nbhelpers import arguments, atomic, graph_boxes

__all__ = ["CATEGORIES", "state", "series"]   # snapshot, save_snapshot: Diagnosis's; render_svg: graph_view's

# the order they stack in, bottom first: what outlives the step under what does not
CATEGORIES = ("gradients", "optimizer state", "saved for backward", "forward temporaries",
              "recomputed in backward", "backward temporaries", "optimizer step")
_PHASE = {"forward": "forward temporaries", "backward": "backward temporaries", "recompute": "recomputed in backward",
          "optimizer": "optimizer step"}
MAX_GROUPS = 8                 # modules drawn apart; the rest stack as "other modules"
_STILL_POINTS = 600            # a still picture needs no more points than it has pixels


def _saved_owner(d) -> dict[int, int]:
    """storage address -> the first graph node that saved it (when the graph was traced)."""
    owner: dict[int, int] = {}
    for node in d.graph.nodes if d.graph else ():
        for s in node.saved:
            if s.storage_ptr:
                owner.setdefault(s.storage_ptr, node.id)
    return owner


def _group(module: str) -> str:
    """A module path cut to the model's children: "ResNet.layer1.0.conv1" -> "ResNet.layer1"."""
    return ".".join(module.split(".")[:2])


def state(d) -> dict:
    """The widget's timeline: allocations, ops, categories and module groups, with string tables."""
    tracker = d.tracker
    owner, at = _saved_owner(d), d.traced_at
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        return strings.setdefault(text, len(strings))

    n = len(tracker.events)
    holder = [-1] * n
    allocs = []
    for a in tracker.allocations:
        saved = a.key in owner and a.op_index <= at and (a.freed_at is None or a.freed_at > at)
        category = (d.categories.get(a.key) if a.freed_at is None else None) or \
            ("saved for backward" if saved and a.phase == "forward" else _PHASE[a.phase])
        if saved and holder[a.op_index] < 0:
            holder[a.op_index] = owner[a.key]
        allocs.append([a.nbytes, a.op_index, n if a.freed_at is None else a.freed_at,
                       CATEGORIES.index(category), s(_group(a.module))])
    for e in tracker.events:
        if e.phase in ("backward", "recompute") and e.node in d.nodes:
            holder[e.index] = d.nodes[e.node]
    groups = _top_groups(allocs, list(strings))
    return {"title": f"live bytes of the tensors {d.model}'s step made, after each op",
            "categories": list(CATEGORIES), "groups": groups,
            "allocs": allocs, "peak": tracker.peak_bytes,
            "op": [s(e.op.removeprefix("aten.")) for e in tracker.events],
            "module": [s(e.module) for e in tracker.events], "phase": [s(e.phase) for e in tracker.events],
            "line": [s(f"{e.frame.place}: {e.frame.text}" if e.frame else "") for e in tracker.events],
            "node": holder, "live": [e.live_bytes for e in tracker.events], "strings": list(strings)}


def _top_groups(allocs: list, names: list[str]) -> list[int]:
    """The string ids of the MAX_GROUPS module groups that made the most bytes; the others are drawn together."""
    made: dict[int, int] = {}
    for nbytes, _, _, _, group in allocs:
        made[group] = made.get(group, 0) + nbytes
    return sorted(made, key=lambda g: (-made[g], names[g]))[:MAX_GROUPS]


def series(timeline: dict, by: str = "category") -> dict[str, list[int]]:
    """Live bytes after each op, per category (by="category") or per module group (by="module"), as
    memory_timeline.js stacks them; their sum after each op is the tracker's live bytes."""
    if by not in ("category", "module"):
        raise ValueError(f'memory_timeline.series: `by` must be "category" or "module"; got {by!r}')
    n = len(timeline["live"])
    names = _series_names(timeline, by)
    changes = {name: [0] * (n + 1) for name in names}
    for nbytes, start, end, category, group in timeline["allocs"]:
        name = _series_of(timeline, by, category, group)
        changes[name][start] += nbytes
        changes[name][end] -= nbytes
    return {name: list(accumulate(delta[:n])) for name, delta in changes.items()}


def _series_names(timeline: dict, by: str) -> list[str]:
    if by == "category":
        return list(timeline["categories"])
    return [timeline["strings"][g] for g in timeline["groups"]] + ["other modules"]


def _series_of(timeline: dict, by: str, category: int, group: int) -> str:
    if by == "category":
        return timeline["categories"][category]
    return timeline["strings"][group] if group in timeline["groups"] else "other modules"


def snapshot(d) -> dict:
    """The step's allocations as `torch.cuda.memory._snapshot()` returns them, from an allocator that gives each
    storage a segment of its own and caches nothing: one device trace, in op order, of segment_alloc and alloc
    when an op makes a storage, free_requested, free_completed and segment_free when it is freed (the actions
    torch/cuda/memory.py lists), the storages' own addresses and sizes; and a segment per storage alive at the
    end. Each carries two frames: the op (its module and phase) and the learner's line that called it."""
    tracker, trace = d.tracker, []
    made: dict[int, list] = {}
    ends: dict[int, list] = {}
    for a in tracker.allocations:
        made.setdefault(a.op_index, []).append(a)
        if a.freed_at is not None:
            ends.setdefault(a.freed_at, []).append(a)
    for i in range(len(tracker.events) + 1):          # freed at len(events): after the last op, in the block
        for a in ends.get(i, ()):
            frames = _frames(tracker.events[a.op_index])
            trace += [_action(kind, a, frames, i) for kind in ("free_requested", "free_completed", "segment_free")]
        for a in made.get(i, ()):
            frames = _frames(tracker.events[i])
            trace += [_action(kind, a, frames, i) for kind in ("segment_alloc", "alloc")]
    alive = [a for a in tracker.allocations if a.freed_at is None]
    return {"segments": [_segment(a, tracker.events[a.op_index]) for a in alive], "device_traces": [trace],
            "allocator_settings": {}}


def _frames(event) -> list[dict]:
    frame = event.frame
    op = {"filename": f"{event.module} ({event.phase})", "line": event.index, "name": event.op}
    return [op] + ([{"filename": frame.file, "line": frame.lineno, "name": frame.function}] if frame else [])


def _action(action: str, a, frames: list[dict], at: int) -> dict:
    return {"action": action, "addr": a.key, "size": a.nbytes, "stream": 0, "time_us": at, "frames": frames}


def _segment(a, event) -> dict:
    block = {"address": a.key, "size": a.nbytes, "requested_size": a.nbytes, "state": "active_allocated",
             "frames": _frames(event)}
    return {"device": 0, "address": a.key, "total_size": a.nbytes, "allocated_size": a.nbytes,
            "active_size": a.nbytes, "requested_size": a.nbytes, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": [block]}


def save_snapshot(d, path) -> Path:
    """Write `snapshot(d)` as a pickle, atomically: the file torch.cuda._memory_viz reads (`python -m
    torch.cuda._memory_viz trace step.pickle`)."""
    if d.tracker is None:
        raise ValueError("memory_timeline.save_snapshot: the diagnosis has no memory record (the step did not run)")
    target = arguments.require_writable_file("Diagnosis.save_snapshot", "path", path)
    atomic.write_atomic(target, pickle.dumps(snapshot(d)))
    return target


def render_svg(timeline: dict, width: int = 720, height: int = 160) -> str:
    """The stacked timeline by category as a still SVG (what a viewer without widgets shows); a time-line
    (node_times.timeline) as its slices on the backward's clock."""
    if timeline.get("kind") == "time":
        return _render_time_svg(timeline, width, height)
    stacked, names = series(timeline), list(timeline["categories"])
    n, peak = len(timeline["live"]), max(timeline["peak"], 1)
    every = max(1, -(-n // _STILL_POINTS))
    stacked = {name: values[::every] for name, values in stacked.items()}
    n = len(next(iter(stacked.values()), []))
    below = [0] * n
    shapes = []
    for k, name in enumerate(names):
        top = [b + v for b, v in zip(below, stacked[name])]
        if any(stacked[name]):
            xs = [10 + (width - 20) * i / max(n - 1, 1) for i in range(n)]
            ys = [height - 20 - (height - 40) * v / peak for v in top]
            ybs = [height - 20 - (height - 40) * v / peak for v in below]
            points = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys))
            back = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(reversed(xs), reversed(ybs)))
            shapes.append(f'<polygon points="{points} {back}" fill="{PALETTE[k % len(PALETTE)]}" />')
        below = top
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
            f'<rect width="{width}" height="{height}" fill="#fff"/>{"".join(shapes)}'
            f'<text x="10" y="14" font-size="12" font-family="sans-serif">live bytes after each op, peak '
            f'{timeline["peak"]:,} B</text></svg>')


def _render_time_svg(timeline: dict, width: int, height: int) -> str:
    """Each slice as long as its time (memory_timeline.js: drawSlices), a node's in the time bar's colour."""
    end, inner = timeline["span"] or 1, width - 20
    shapes = [f'<rect x="{10 + inner * start / end:.1f}" y="20" width="{max(0.5, inner * us / end):.1f}" '
              f'height="{height - 30}" fill="{graph_boxes.HEAT if node >= 0 else OUTSIDE}"/>'
              for start, us, node in zip(timeline["start"], timeline["us"], timeline["node"])]
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
            f'<rect width="{width}" height="{height}" fill="#fff"/>{"".join(shapes)}'
            f'<text x="10" y="14" font-size="12" font-family="sans-serif">{escape(timeline["title"])}; grey: outside '
            f'every {"op" if timeline.get("clock") == "forward" else "node"}</text></svg>')


OUTSIDE = "#bbb"          # graph_view_dom.js's --gv-border, light theme (a node's slice: graph_boxes.HEAT)

# colours that read on light and dark backgrounds (memory_timeline.js uses the same list)
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f")
