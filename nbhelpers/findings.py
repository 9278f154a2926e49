"""What a diagnosis found, ranked: each finding has a kind, a one-line title, the evidence (numbers from the
lenses), where in the learner's code, and the notebook that teaches it. `diagnose.run` measures; this module
reads the measurements and the model's own state (devices, dtypes, train/eval flags, tensors kept as plain
attributes) and decides what matters first.

The rank is by kind, most urgent first: what stops the model (an error, a device mismatch), what changes its
results (a layer in the wrong mode, a dtype it was not meant to run in), what torch.compile cannot do with it
(recompiles on every new shape, graph breaks), then where memory and time go.
"""
from __future__ import annotations

import math
import traceback
from collections import Counter
from dataclasses import dataclass

import torch

from nbhelpers import module_scope, module_work, user_code

__all__ = ["Finding", "LESSONS", "NOTEBOOKS", "ORDER", "rank"]

LESSONS = {"error": "12 · error casebook", "device": "00 · environment", "mode": "03 · the sandwich model",
           "leak": "08 · memory diagnosis",
           "precision": "06 · mixed precision", "state": "10 · save and export", "recompile": "05 · torch.compile",
           "graph-break": "05 · torch.compile", "export": "10 · save and export",
           "saved-for-backward": "02 · autograd graph", "memory": "08 · memory diagnosis",
           "checkpoint": "08 · memory diagnosis", "regime": "09 · profiling"}
# The notebook file of each lesson, by its number: the report page links to it.
NOTEBOOKS = {"00": "00_environment.ipynb", "02": "02_autograd_graph.ipynb", "03": "03_sandwich_model.ipynb",
             "05": "05_compile_backends.ipynb", "06": "06_mixed_precision.ipynb", "08": "08_memory_diagnosis.ipynb",
             "09": "09_profiling.ipynb", "10": "10_save_and_export.ipynb", "12": "12_error_casebook.ipynb"}

# The rank, by kind: what stops the model, what changes its answers, what torch.compile cannot do with it, then
# where memory and time go. Within a kind a finding moves by less than the gap to the next kind (_LIFT), so the
# kinds keep this order; one exception, said where it is made: a module left in eval mode in a model in train mode
# (often meant: a frozen BatchNorm) ranks as a saved-for-backward finding.
ORDER = ("error", "device", "mode", "leak", "recompile", "precision", "graph-break", "state", "saved-for-backward",
         "export", "memory", "checkpoint", "regime")
_WEIGHT = {kind: 1.0 - 0.05 * k for k, kind in enumerate(ORDER)}
_LIFT = 0.04
# One saved tensor holding half of the saved activations at 32x the largest input or more is worth a finding of
# its own: a pairwise (quadratic) intermediate is; a layer's output, a few times the input, is not.
_SAVED_SHARE = 0.5
_HUGE = 32


@dataclass(frozen=True)
class Finding:
    kind: str
    title: str
    evidence: str
    where: str = ""            # "resnet.py:268: x = self.conv1(x)", or a module path
    weight: float = 0.0

    @property
    def lesson(self) -> str:
        return LESSONS[self.kind]

    @property
    def notebook(self) -> str:
        """The file name of the notebook that teaches it ("05_compile_backends.ipynb")."""
        return NOTEBOOKS[self.lesson[:2]]


def rank(model: torch.nn.Module, inputs: tuple, parts: dict) -> tuple[Finding, ...]:
    """Every finding from the model's state and the measured `parts` of diagnose.run, most important first."""
    found = [*_error(parts), *_devices(model, inputs), *_modes(model, parts.get("modes", ())), *_precision(model, parts),
             *_hidden_state(model, inputs), *_compile(parts.get("compile"), parts.get("tracker")),
             *_export(parts.get("export", ())), *_saved(parts), *_memory(parts), *_checkpoint(parts),
             *_regime(parts.get("regime")), *_leak(parts.get("growth"))]
    return tuple(sorted(found, key=lambda f: -f.weight))


def error_text(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def user_place(error: BaseException) -> str:
    """The learner's innermost line in the traceback, as `file:line: text`, or ""."""
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__)]
    for frame in reversed(frames):
        found = user_code.caller(frame, stop=frame)
        if found is not None:
            return _where(found)
    return ""


def _where(frame: user_code.Frame | None) -> str:
    return f"{frame.place}: {frame.text}" if frame is not None else ""


def _error(parts: dict) -> list[Finding]:
    if not parts.get("error"):
        return []
    ops = len(parts["tracker"].events) if parts.get("tracker") else 0
    return [Finding("error", f"The step raised {parts['error']}",
                    f"measured up to there: {ops} ops; the other lenses need a step that runs",
                    parts.get("error_where", ""), _WEIGHT["error"])]


def named_tensors(model: torch.nn.Module):
    """(path, tensor, how it is held) for every parameter, buffer and tensor kept as a plain attribute."""
    for m_path, m in _modules(model):
        for name, p in m.named_parameters(recurse=False):
            yield f"{m_path}.{name}", p, "parameter"
        for name, b in m.named_buffers(recurse=False):
            yield f"{m_path}.{name}", b, "buffer"
        for name, v in vars(m).items():
            if isinstance(v, torch.Tensor) and not name.startswith("_"):
                yield f"{m_path}.{name}", v, "plain attribute"


def _modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    paths = module_scope.module_paths(model)
    return [(paths.get(id(m), type(m).__name__), m) for m in model.modules()]


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _devices(model, inputs) -> list[Finding]:
    device = inputs[0].device
    away = [(path, t.device, how) for path, t, how in named_tensors(model) if t.device != device]
    if not away:
        return []
    path, where, how = away[0]
    listed = ", ".join(f"{p} ({how_}) on {d}" for p, d, how_ in away[:4]) + (" ..." if len(away) > 4 else "")
    return [Finding("device", f"{len(away)} tensor(s) of the model are not on the inputs' device ({device}): "
                              f"{path} is on {where}",
                    f"{listed}; an op on tensors of two devices raises. model.to(device) moves parameters and "
                    "buffers, never a plain attribute", path, _WEIGHT["device"])]


_MODE_EFFECT = {"Dropout": "zeroes activations at random in train mode and does nothing in eval mode",
                "BatchNorm": "normalizes by the batch's statistics (and updates the running ones) in train mode, "
                             "by its running statistics in eval mode"}


def _modes(model, effects) -> list[Finding]:
    """A module whose train/eval mode is not its model's, only when running it both ways (same input, same random
    numbers) changes the model's outputs: InstanceNorm without running statistics, BatchNorm with
    track_running_stats=False and Dropout(p=0) do the same in both modes."""
    differ = [e for e in effects if e.change > 0]
    if not differ:
        return []
    e = differ[0]
    mode, wanted = ("train", "eval") if e.training else ("eval", "train")
    effect = next((text for name, text in _MODE_EFFECT.items() if name in e.kind), "its forward reads self.training")
    weight = _WEIGHT["mode"] if e.training else _WEIGHT["saved-for-backward"]  # eval in training: often meant
    call = e.path.split(".", 1)[1] if "." in e.path else ""
    return [Finding("mode", f"{e.kind} {e.path} is in {mode} mode while the model is in {wanted} mode, and that "
                            "changes the outputs",
                    f"run in both modes on the same input and random numbers, the outputs differ by up to "
                    f"{e.change:.3g}; {e.kind} {effect}. {len(differ)} module(s) differ this way: "
                    f"{', '.join(d.path for d in differ[:4])}. Write `model.{wanted}()` (it sets every module)"
                    + (f", or `model.{call}.{wanted}()`" if call else ""), e.path, weight)]


def _dominant_dtype(model) -> torch.dtype | None:
    by_dtype: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            by_dtype[p.dtype] = by_dtype.get(p.dtype, 0) + _bytes(p)
    return max(by_dtype, key=by_dtype.get) if by_dtype else None


def _precision(model, parts) -> list[Finding]:
    dtype = _dominant_dtype(model)
    if dtype is None:
        return []
    odd = [(path, t, how) for path, t, how in named_tensors(model) if t.is_floating_point() and t.dtype != dtype]
    fg = parts.get("forward")
    wider = [op for op in (fg.ops if fg else ()) if any(o.dtype == "float32" for o in op.outputs)
             and not any(v is not None for v in op.views)] if dtype in (torch.bfloat16, torch.float16) else []
    if not odd and not wider:
        return []
    short = str(dtype).removeprefix("torch.")
    head = (f"{odd[0][0]} ({odd[0][2]}) is {str(odd[0][1].dtype).removeprefix('torch.')} in a {short} model"
            if odd else f"{len(wider)} ops compute in float32 in a {short} model")
    kept = sum(_bytes(t) for _, t, _ in odd)
    evidence = (f"{len(odd)} tensor(s), {kept:,} B, not in {short}; " if odd else "") + \
        (f"{len(wider)} of the forward's {len(fg.ops)} ops return float32, the first {wider[0].op} in "
         f"{wider[0].module}" if wider else "no op returns float32")
    return [Finding("precision", head, evidence, odd[0][0] if odd else wider[0].module, _WEIGHT["precision"])]


def _hidden_state(model, inputs) -> list[Finding]:
    dtype, device = _dominant_dtype(model), inputs[0].device
    hidden = [(path, t) for path, t, how in named_tensors(model) if how == "plain attribute"
              and t.device == device and (not t.is_floating_point() or t.dtype == dtype)]
    if not hidden:
        return []
    return [Finding("state", f"{hidden[0][0]} is a tensor kept as a plain attribute",
                    f"{len(hidden)} such tensor(s); model.to(), .half() and state_dict() skip them: "
                    "register_buffer() makes them part of the model", hidden[0][0], _WEIGHT["state"])]


def _placed(places: dict[str, str], text: str) -> str:
    """A line of source as `file:line: text` when the step ran it (Dynamo's reports keep the text only)."""
    return f"{places[text]}: {text}" if text in places else text


def _compile(report, tracker) -> list[Finding]:
    if report is None:
        return []
    places = {e.frame.text: e.frame.place for e in (tracker.events if tracker else ()) if e.frame}
    found = [Finding("graph-break", f"graph break {b.code or '(no code)'}: {b.gb_type}",
                     f"{b.explanation} (met {b.count} time(s) while compiling for 4 calls)" + (f"; inside torch at {b.where}"
                                                                           if b.where else ""),
                     f"{b.place}: {b.line}" if b.place else b.line, _WEIGHT["graph-break"] + 0.001 * min(b.count, 9))
             for b in report.breaks]
    by_function: dict[str, list] = {}
    for e in report.entries:
        by_function.setdefault(e.function, []).append(e)
    for function, entries in by_function.items():
        if len(entries) > 2:           # the first recompile makes the changed size dynamic; more is a problem
            last = entries[-1]
            found.append(Finding("recompile", f"{function} compiled {len(entries)} times for 4 batch sizes",
                                 _recompile_evidence(last.failed[0] if last.failed else "?"),
                                 _placed(places, _growing_line(report, entries[-2].id, last.id)),
                                 _WEIGHT["recompile"]))
    return found


def _recompile_evidence(failed: str) -> str:
    said = f"each new batch size failed a guard: {failed}"
    if "size mismatch" not in failed:
        return said
    # torch/_dynamo/config.py automatic_dynamic_shapes: a size that changed is compiled as dynamic the next time
    return (said + "; the first recompile should have made the size dynamic, but a Python int taken from it "
            "(range(x.shape[0]), a list of that length) fixes it again")


def _growing_line(report, before: str, after: str) -> str:
    """The line whose traced ops changed in number between two compiles of one function: a Python loop over
    a size unrolls one more time at each size (Dynamo traces Python, and keeps only the tensor ops)."""
    counts = [Counter(n.line for g in report.graphs if g.entry == entry for n in g.nodes if n.line)
              for entry in (before, after)]
    changed = [line for line in counts[1] if counts[1][line] != counts[0].get(line, 0)]
    return changed[0] if changed else ""


# strict export traces with Dynamo (torch/export/_trace.py: torch._dynamo.export), which errors on every graph
# break (torch/_dynamo/eval_frame.py: "Used for fullgraph=True and export") and captures .item() as a symbol
# (capture_scalar_outputs=True, export/_trace.py); non-strict export runs the Python forward on fake tensors
_EXPORT_WHY = {True: "strict export traces the forward with Dynamo into one graph: a graph break, or a branch on "
                     "a value only the data decides, fails it",
               False: "non-strict export runs the forward on fake tensors, which carry shapes, not values: a "
                      "branch on a value fails it, as does an input or output of a type it does not know"}


def _export(results) -> list[Finding]:
    return [Finding("export", f"torch.export ({'strict' if r.strict else 'non-strict'}) fails: {r.error}",
                    _EXPORT_WHY[r.strict], r.where, _WEIGHT["export"] - (0 if r.strict else 0.01))
            for r in results if not r.ok]


def saved_by_module(graph, held: set[int]) -> dict[str, int]:
    """Bytes of activations the backward nodes made in each module (its submodules included) save, each storage
    once; storages in `held` (parameters, buffers, inputs: they exist anyway) are not counted."""
    storages: dict[str, dict[int, int]] = {}
    for node in graph.nodes:
        for path in node.modules:
            kept = storages.setdefault(path, {})
            for s in node.saved:
                if s.storage_ptr and s.storage_ptr not in held:
                    kept[s.storage_ptr] = max(kept.get(s.storage_ptr, 0), s.nbytes)
    return {path: sum(kept.values()) for path, kept in storages.items()}


def _saved(parts) -> list[Finding]:
    """One saved activation far larger than the model's inputs and most of what backward keeps: a tensor that
    need not exist (an outer product, a broadcast made real) or that checkpointing should drop."""
    graph, inputs = parts.get("graph"), parts.get("inputs", ())
    if graph is None:
        return []
    owner, sizes = {}, {}
    for n in graph.nodes:
        for s in n.saved:
            if s.storage_ptr and s.storage_ptr not in parts.get("held", ()):      # parameters cost nothing new
                sizes[s.storage_ptr] = max(sizes.get(s.storage_ptr, 0), s.nbytes)
                owner.setdefault(s.storage_ptr, (n, s))
    total, largest_input = sum(sizes.values()), max((_bytes(t) for t in inputs), default=0)
    if not sizes or not largest_input:
        return []
    ptr = max(sizes, key=sizes.get)
    share, node, saved = sizes[ptr] / total, *owner[ptr]
    if share < _SAVED_SHARE or sizes[ptr] < _HUGE * largest_input:
        return []
    return [Finding("saved-for-backward", f"{node.name} in {node.module} saves one tensor of {sizes[ptr]:,} B, "
                                          f"{share:.0%} of the activations kept for backward",
                    f"{saved.attr} {list(saved.shape)} {str(saved.dtype).removeprefix('torch.')}, "
                    f"{sizes[ptr] / largest_input:.0f}x the largest input",
                    _where(_made_at(parts, ptr)) or node.module, _WEIGHT["saved-for-backward"] + _LIFT * share)]


def _made_at(parts, ptr: int) -> user_code.Frame | None:
    """The learner's line whose op made the storage at `ptr`: the allocation alive when the graph was traced."""
    tracker, at = parts.get("tracker"), parts.get("traced_at", -1)
    for a in reversed(tracker.allocations if tracker else []):
        if a.key == ptr and a.op_index <= at and (a.freed_at is None or a.freed_at > at):
            return tracker.events[a.op_index].frame
    return None


def _memory(parts) -> list[Finding]:
    tracker = parts.get("tracker")
    if tracker is None or not tracker.events:
        return []
    peak = max(tracker.events, key=lambda e: e.live_bytes)
    saved = sum(parts.get("saved_by_module", {}).get(p, 0) for p in _roots(parts))
    parts_at_peak = _at(tracker, peak.index, parts.get("categories", {}))
    biggest = ", ".join(f"{name} {n:,} B ({n / max(1, peak.live_bytes):.0%})" for name, n in parts_at_peak[:3])
    return [Finding("memory", f"peak {tracker.peak_bytes:,} B of tensors made in the step, at op {peak.index} "
                              f"({peak.phase}, {peak.module})",
                    f"at the peak: {biggest}; {saved:,} B of activations are saved for backward at the end of the "
                    "forward. A lower bound: no kernel workspaces, no allocator rounding", peak.module,
                    _WEIGHT["memory"])]


def _at(tracker, index: int, categories: dict[int, str]) -> list[tuple[str, int]]:
    """Live bytes after op `index`, by what they are (gradients, optimizer state, else the phase that made them),
    largest first."""
    by: dict[str, int] = {}
    for a in tracker.allocations:
        if a.op_index <= index and (a.freed_at is None or a.freed_at > index):
            name = (categories.get(a.key) if a.freed_at is None else None) or f"{a.phase} tensors"
            by[name] = by.get(name, 0) + a.nbytes
    return sorted(by.items(), key=lambda kv: -kv[1])


def _roots(parts) -> list[str]:
    graph = parts.get("graph")
    return list(dict.fromkeys(n.modules[0] for n in graph.nodes if n.modules)) if graph else []


def _checkpoint(parts) -> list[Finding]:
    rows, tracker = parts.get("checkpoint", ()), parts.get("tracker")
    if not rows or tracker is None or not tracker.peak_bytes or rows[0].freed_bytes < 0.1 * tracker.peak_bytes:
        return []
    r = rows[0]
    step_flops = parts["work"][module_work.TOTAL].flops if parts.get("work") else 0
    return [Finding("checkpoint", f"checkpointing {r.block} would free {r.freed_bytes:,} B held for backward "
                                  f"(as much as {r.freed_bytes / tracker.peak_bytes:.0%} of the peak)",
                    f"its nodes save {r.saved_bytes:,} B, checkpoint() keeps its inputs ({r.kept_bytes:,} B) and "
                    f"runs its forward again: {r.recompute_flops:,} FLOPs"
                    + (f", {r.recompute_flops / step_flops:.0%} of the step's" if step_flops else ""),
                    r.block, _WEIGHT["checkpoint"])]


def _leak(growth) -> list[Finding]:
    """Memory that grows with every step, and what holds it (step_leaks names it from gc's referrers)."""
    if growth is None or not growth.grows:
        return []
    live = ", ".join(f"{b:,}" for b in growth.live)
    if not growth.holders:
        return [Finding("leak", f"memory grows by {growth.per_step[-1]:,} B with every step",
                        f"bytes alive after each of {len(growth.live)} steps: {live}; no tensor the steps made is "
                        "held by the model, the optimizer or a module-level variable of your code (a C++ or "
                        "closure reference holds it)", "", _WEIGHT["leak"])]
    h = (growth.across or growth.holders)[0]
    if h.spans > 1:
        title = f"{h.path} keeps the autograd graph of every step: each step adds to it"
        how = (f"its graph reaches into all {h.spans} steps run (a loss or output accumulated with its graph, "
               f"`total += loss`): write `{_detached(h.where)}`, or accumulate `loss.item()`")
    else:
        title = f"memory grows by {growth.per_step[-1]:,} B with every step: {h.path} keeps {h.tensors} tensor(s)"
        how = (f"{h.graphs} of them keep their autograd graph (their step's saved tensors) alive: write "
               f"`{_detached(h.where)}` (`.item()` for a number), or clear {h.path} every step" if h.graphs else
               f"clear {h.path} every step, or keep only what you need (`.item()`, a bounded deque)")
    others = "".join(f"; also {o.path} ({o.tensors} tensors)" for o in growth.holders if o is not h)
    return [Finding("leak", title, f"bytes alive after each of {len(growth.live)} steps: {live}; {how}{others}",
                    h.where or h.path, _WEIGHT["leak"])]


def _detached(where: str) -> str:
    """The learner's accumulating line with `.detach()` on what it adds: `self.total = self.total + loss.detach()`."""
    code = (where.split(": ", 1)[1] if ": " in where else "").split("#", 1)[0].strip()
    if code.endswith(")") and ".append(" in code:
        return code[:-1] + ".detach())"
    if "+=" in code:
        return f"{code}.detach()" if not code.endswith(".detach()") else code
    return f"{code}.detach()" if "=" in code else "total = total + loss.detach()"


def _regime(regime) -> list[Finding]:
    if regime is None:
        return []
    return [Finding("regime", f"the step is {regime.verdict} on this machine", regime.evidence, "",
                    _WEIGHT["regime"])]


def blocks(model: torch.nn.Module) -> list[str]:
    """The blocks a checkpoint would wrap: the model's children, and the children of a child that is a
    Sequential or ModuleList (ResNet's layer1.0, a transformer's layers.0)."""
    paths, found = module_scope.module_paths(model), []
    for child in model.children():
        inner = list(child.children()) if isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)) else []
        found += [paths[id(m)] for m in (inner or [child]) if id(m) in paths]
    return found


def block_inputs(fg) -> dict[str, int]:
    """Bytes of the activations each module reads from ops outside it (what checkpoint() keeps), each storage once
    at its largest view; the model's inputs, parameters and buffers are not counted (they exist anyway)."""
    kept: dict[str, dict[int, int]] = {}
    made_in = {op.id: set(op.modules) for op in fg.ops}
    for op in fg.ops:
        for meta, source in zip(op.inputs, op.sources):
            if source.op is None:
                continue
            for path in op.modules:
                if path not in made_in.get(source.op, ()):
                    held = kept.setdefault(path, {})
                    key = meta.storage_ptr or id(meta)
                    held[key] = max(held.get(key, 0), _meta_bytes(meta))
    return {path: sum(v.values()) for path, v in kept.items()}


def _meta_bytes(meta) -> int:
    return math.prod(meta.shape) * getattr(torch, meta.dtype).itemsize
