"""Where a diagnosed step's memory goes, as findings: its peak, one saved tensor far larger than the rest, the
block whose checkpointing frees the most, and memory that grows from step to step. Each is placed at the
learner's line whose ops made the bytes (memory.track(lines=True) records it per op) and costs its bytes as a
share of the step's memory at its peak (`rank.Budget`).

Example:
    found = memory_findings.peak(measured, budget)
    found[0].where, found[0].cost.share          # 'model.py:12: wide = h.repeat(1, 1024).tanh()', 0.99
"""
from __future__ import annotations

from nbhelpers import module_work
from nbhelpers.diagnosis import fixes
from nbhelpers.diagnosis.measured import Measured
from nbhelpers.diagnosis.rank import Budget, Finding
from nbhelpers.user_code import where_of

__all__: list[str] = []      # findings' builders

# One saved tensor holding half of the saved activations at 32x the largest input or more is worth a finding of
# its own: a pairwise (quadratic) intermediate is; a layer's output, a few times the input, is not.
_SAVED_SHARE = 0.5
_HUGE = 32
_KEPT = ("gradients", "optimizer state")     # what any step of this model holds: not the model's design


def saved(m: Measured, inputs: tuple, budget: Budget) -> list[Finding]:
    """One saved activation far larger than the model's inputs and most of what backward keeps: a tensor that
    need not exist (an outer product, a broadcast made real) or that checkpointing should drop."""
    graph = m.graph
    if graph is None:
        return []
    owner, sizes = {}, {}
    for n in graph.nodes:
        for s in n.saved:
            if s.storage_ptr and s.storage_ptr not in m.held:      # parameters cost nothing new
                sizes[s.storage_ptr] = max(sizes.get(s.storage_ptr, 0), s.nbytes)
                owner.setdefault(s.storage_ptr, (n, s))
    total, largest_input = sum(sizes.values()), max((t.numel() * t.element_size() for t in inputs), default=0)
    if not sizes or not largest_input:
        return []
    ptr = max(sizes, key=sizes.get)
    share, node, kept = sizes[ptr] / total, *owner[ptr]
    if share < _SAVED_SHARE or sizes[ptr] < _HUGE * largest_input:
        return []
    where = where_of(_made_at(m, ptr)) or node.module
    return [Finding("saved-for-backward", f"{node.name} in {node.module} saves one tensor of {sizes[ptr]:,} B, "
                                          f"{share:.0%} of the activations kept for backward",
                    f"{kept.attr} {list(kept.shape)} {str(kept.dtype).removeprefix('torch.')}, "
                    f"{sizes[ptr] / largest_input:.0f}x the largest input", where, fixes.saved(where),
                    budget.in_bytes(sizes[ptr]))]


def _made_at(m: Measured, ptr: int):
    """The learner's line whose op made the storage at `ptr`: the allocation alive when the graph was traced."""
    tracker, at = m.tracker, m.traced_at
    for a in reversed(tracker.allocations if tracker else []):
        if a.key == ptr and a.op_index <= at and (a.freed_at is None or a.freed_at > at):
            return tracker.events[a.op_index].frame
    return None


def peak(m: Measured, budget: Budget) -> list[Finding]:
    """The step's peak, placed at the learner's line that made most of the bytes alive there; it costs what is
    neither gradients nor optimizer state (activations and temporaries: what the model's design decides)."""
    tracker = m.tracker
    if tracker is None or not tracker.events:
        return []
    top = max(tracker.events, key=lambda e: e.live_bytes)
    saved_bytes = sum(m.saved_by_module.get(p, 0) for p in _roots(m))
    at_peak = _at(tracker, top.index, m.categories)
    biggest = ", ".join(f"{name} {n:,} B ({n / max(1, top.live_bytes):.0%})" for name, n in at_peak[:3])
    times = f", {tracker.peak_bytes / budget.parameters:,.3g}x the parameters," if budget.parameters else ""
    where = _peak_line(m, top.index) or top.module
    rows = m.checkpoint
    return [Finding("memory", f"peak {tracker.peak_bytes:,} B of tensors made in the step{times} at op {top.index} "
                              f"({top.phase}, {top.module})",
                    f"at the peak: {biggest}; {saved_bytes:,} B of activations are saved for backward at the end of "
                    "the forward. A lower bound: no kernel workspaces, no allocator rounding", where,
                    fixes.checkpoint(rows[0].block) if rows else fixes.saved(where),
                    budget.in_bytes(sum(n for name, n in at_peak if name not in _KEPT)))]


def _peak_line(m: Measured, index: int) -> str:
    """The learner's line that made the most bytes alive after op `index` ("" when none did): a forward op's own
    line, and for what a backward node made, the line that made the largest tensor the node saved (its backward
    is that line's)."""
    tracker, graph = m.tracker, m.graph
    nodes = {n.id: n for n in graph.nodes} if graph is not None else {}
    by: dict = {}
    for a in tracker.allocations:
        if a.op_index <= index and (a.freed_at is None or a.freed_at > index):
            frame = _maker(m, tracker.events[a.op_index], nodes)
            if frame is not None:
                by[frame] = by.get(frame, 0) + a.nbytes
    return where_of(max(by, key=by.get)) if by else ""


def _maker(m: Measured, event, nodes: dict):
    if event.frame is not None or event.phase == "forward":
        return event.frame
    node = nodes.get(m.nodes.get(event.node))
    kept = [s for s in (node.saved if node is not None else ()) if s.storage_ptr
            and s.storage_ptr not in m.held]
    return _made_at(m, max(kept, key=lambda s: s.nbytes).storage_ptr) if kept else None


def _at(tracker, index: int, categories: dict[int, str]) -> list[tuple[str, int]]:
    """Live bytes after op `index`, by what they are (gradients, optimizer state, else the phase that made them),
    largest first."""
    by: dict[str, int] = {}
    for a in tracker.allocations:
        if a.op_index <= index and (a.freed_at is None or a.freed_at > index):
            name = (categories.get(a.key) if a.freed_at is None else None) or f"{a.phase} tensors"
            by[name] = by.get(name, 0) + a.nbytes
    return sorted(by.items(), key=lambda kv: -kv[1])


def _roots(m: Measured) -> list[str]:
    graph = m.graph
    return list(dict.fromkeys(n.modules[0] for n in graph.nodes if n.modules)) if graph else []


def checkpoint(m: Measured, budget: Budget) -> list[Finding]:
    """The block whose checkpointing frees the most, when that is a tenth of the peak or more; placed at the
    first line of the learner's that runs it."""
    rows, tracker = m.checkpoint, m.tracker
    if not rows or tracker is None or not tracker.peak_bytes or rows[0].freed_bytes < 0.1 * tracker.peak_bytes:
        return []
    r = rows[0]
    step_flops = m.work[module_work.TOTAL].flops if m.work else 0
    runs = next((where_of(e.frame) for e in tracker.events if e.frame and e.phase == "forward"
                 and (e.module == r.block or e.module.startswith(r.block + "."))), "")
    return [Finding("checkpoint", f"checkpointing {r.block} would free {r.freed_bytes:,} B held for backward "
                                  f"(as much as {r.freed_bytes / tracker.peak_bytes:.0%} of the peak)",
                    f"its nodes save {r.saved_bytes:,} B, checkpoint() keeps its inputs ({r.kept_bytes:,} B) and "
                    f"runs its forward again: {r.recompute_flops:,} FLOPs"
                    + (f", {r.recompute_flops / step_flops:.0%} of the step's" if step_flops else ""),
                    runs or r.block, fixes.checkpoint(r.block), budget.in_bytes(r.freed_bytes))]


def leak(growth, budget: Budget) -> list[Finding]:
    """Memory that grows with every step, and what holds it (leaks names it from gc's referrers)."""
    if growth is None or not growth.grows:
        return []
    live = ", ".join(f"{b:,}" for b in growth.live)
    cost = budget.in_bytes(max(growth.per_step[-1], 0)) if growth.per_step else None
    if not growth.holders:
        return [Finding("leak", f"memory grows by {growth.per_step[-1]:,} B with every step",
                        f"bytes alive after each of {len(growth.live)} steps: {live}; no tensor the steps made is "
                        "held by the model, the optimizer or a module-level variable of your code (a C++ or "
                        "closure reference holds it)", "", "del output, loss  # at the end of each step", cost)]
    h = (growth.across or growth.holders)[0]
    title, how, fix = _held(growth, h)
    others = "".join(f"; also {o.path} ({o.tensors} tensors)" for o in growth.holders if o is not h)
    return [Finding("leak", title, f"bytes alive after each of {len(growth.live)} steps: {live}; {how}{others}",
                    h.where or h.path, fix, cost)]


def _held(growth, h) -> tuple[str, str, str]:
    """(title, why and what to write, the fix) for the holder `h`."""
    fix = fixes.detached(h.where)
    if growth.retained:
        return (f"{h.path} carries the autograd graph from one step into the next",
                "without retain_graph=True the next step's backward raises \"Trying to backward through the graph "
                "a second time\"; with it, every step's graph and the tensors it saved stay alive (measured so, "
                f"from a {h.path} with no graph): write `{fix}`", fixes.carried(h.where))
    if h.spans > 1:
        return (f"{h.path} keeps the autograd graph of every step: each step adds to it",
                f"its graph reaches into all {h.spans} steps run (a loss or output accumulated with its graph, "
                f"`total += loss`): write `{fix}`, or accumulate `loss.item()`", fix)
    title = f"memory grows by {growth.per_step[-1]:,} B with every step: {h.path} keeps {h.tensors} tensor(s)"
    if h.retained:
        return (title, f"{h.retained} of them keep their autograd graph with the tensors it saved (a backward with "
                       f"retain_graph=True frees none of them): write `{fix}` (`.item()` for a number), and "
                       "`loss.backward()` without retain_graph", fix)
    if h.graphs:
        return (title, f"{h.graphs} of them keep their autograd graph (their step's saved tensors) alive: write "
                       f"`{fix}` (`.item()` for a number), or clear {h.path} every step", fix)
    return (title, f"clear {h.path} every step, or keep only what you need (`.item()`, a bounded deque)",
            f"{h.path.rsplit('.', 1)[-1]}.clear()  # every step; or collections.deque(maxlen=100)")
