"""What a diagnosis found, ranked: each finding has a kind, a one-line title, the evidence (numbers from the
lenses), where in the learner's code (always a line of the learner's file where one makes it: never this package's
or torch's), what to change as code, what it costs, measured, and the notebook that teaches it. `diagnose.run`
measures; this module reads the measurements and the model's own state (devices, dtypes, train/eval flags, tensors
kept as plain attributes) and decides what matters first.

The rank is rank.py's: what is wrong first (what stops the model, changes its results or grows without
bound), then what costs the most, measured (bytes as a share of the step's memory at its peak, seconds as a share of
the step's time, a graph break by the share of the forward's ops it cuts off), then what no lens puts a number on;
and one finding per cause, its consequences listed under it (one data-dependent branch: a graph break and two
export failures). memory_findings builds the findings about memory.
"""
from __future__ import annotations

import inspect
import math
import re
import traceback
from collections import Counter

import torch

from nbhelpers import memory, module_scope, user_code
from nbhelpers.diagnosis import fixes, memory_findings
from nbhelpers.diagnosis.rank import LESSONS, NOTEBOOKS, ORDER, Budget, Cost, Finding, ranked, where_of

__all__ = ["Finding", "LESSONS", "NOTEBOOKS", "ORDER", "rank"]


def rank(model: torch.nn.Module, inputs: tuple, parts: dict) -> tuple[Finding, ...]:
    """Every finding from the model's state and the measured `parts` of diagnose.run, most important first, one
    per cause."""
    budget = _budget(model, inputs, parts)
    found = [*_error(parts), *_devices(model, inputs), *_modes(model, parts.get("modes", ())), *_precision(model, parts),
             *_hidden_state(model, inputs), *_compile(parts.get("compile"), parts.get("tracker"), budget),
             *_export(parts.get("export", ())), *memory_findings.saved(parts, budget),
             *memory_findings.peak(parts, budget), *memory_findings.checkpoint(parts, budget),
             *_regime(model, parts.get("regime"), inputs), *memory_findings.leak(parts.get("growth"), budget)]
    return ranked(found)


def _budget(model, inputs, parts) -> Budget:
    """The wholes the costs are shares of: the bytes the model and inputs hold plus the step's peak, the
    parameters' bytes, the step's time."""
    held = {}
    for t in [t for _, t, _ in named_tensors(model)] + list(inputs):
        for part in memory.dense_parts(t) if t.device.type != "meta" else ():
            held[memory.storage_key(part)] = part.untyped_storage().nbytes()
    tracker, regime = parts.get("tracker"), parts.get("regime")
    return Budget(sum(held.values()) + (tracker.peak_bytes if tracker else 0),
                  sum(_bytes(p) for p in model.parameters() if not p.is_meta),
                  regime.seconds[0] if regime is not None and regime.seconds else 0.0)


def error_text(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def user_place(error: BaseException) -> str:
    """The learner's innermost line where `error` was raised, as `file:line: text`, or "". Dynamo's errors (strict
    export, fullgraph) carry the stack of the code they were tracing as `real_stack`: their traceback holds only
    torch's frames and the caller's, so that stack comes first."""
    for summary in reversed(getattr(error, "real_stack", None) or ()):
        if user_code.learners(summary.filename):
            return f"{user_code.place(summary.filename)}:{summary.lineno}: {(summary.line or '').strip()}"
    frames = [f for f, _ in traceback.walk_tb(error.__traceback__)]
    for frame in reversed(frames):
        found = user_code.caller(frame, stop=frame)
        if found is not None:
            return where_of(found)
    return ""


def _error(parts: dict) -> list[Finding]:
    if not parts.get("error"):
        return []
    ops = len(parts["tracker"].events) if parts.get("tracker") else 0
    where = parts.get("error_where", "")
    return [Finding("error", f"The step raised {parts['error']}",
                    f"measured up to there: {ops} ops; the other lenses need a step that runs", where,
                    fixes.error(parts["error"], where))]


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
    line = _defined(model, path)
    return [Finding("device", f"{len(away)} tensor(s) of the model are not on the inputs' device ({device}): "
                              f"{path} is on {where}",
                    f"{listed}; an op on tensors of two devices raises. model.to(device) moves parameters and "
                    "buffers, never a plain attribute", line, fixes.device(path, how, line, str(device)))]


def _defined(model, path: str) -> str:
    """`file:line: text [path]`: the learner's line that makes the attribute `path` ("Net.fc.mask"), an assignment
    to `self.mask` or a register_buffer/register_parameter/add_module("mask", ...) in its module's class (or a class
    it inherits from); the path alone when no line of the learner's code does (an attribute of a torch class)."""
    owner, _, attr = path.rpartition(".")
    module = dict(_modules(model)).get(owner)
    name = re.escape(attr)
    made = re.compile(rf"self\.{name}\s*(?:,[^=]*)?=(?!=)|\.(?:register_buffer|register_parameter|add_module)"
                      rf"\(\s*[\"']{name}[\"']")
    for cls in type(module).__mro__ if module is not None else ():
        try:
            lines, first = inspect.getsourcelines(cls)
            file = inspect.getsourcefile(cls)
        except (TypeError, OSError):
            continue
        if not file or not user_code.learners(file):
            continue
        for k, line in enumerate(lines):
            if made.search(line.split("#", 1)[0]):
                return f"{user_code.place(file)}:{first + k}: {line.strip()} [{path}]"
    return path


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
    call = e.path.split(".", 1)[1] if "." in e.path else ""
    return [Finding("mode", f"{e.kind} {e.path} is in {mode} mode while the model is in {wanted} mode, and that "
                            "changes the outputs",
                    f"run in both modes on the same input and random numbers, the outputs differ by up to "
                    f"{e.change:.3g}; {e.kind} {effect}. {len(differ)} module(s) differ this way: "
                    f"{', '.join(d.path for d in differ[:4])}. Write `model.{wanted}()` (it sets every module)"
                    + (f", or `model.{call}.{wanted}()`" if call else ""), _defined(model, e.path),
                    fixes.mode(wanted, call), maybe_meant=not e.training)]   # eval in training: often meant


def _dominant_dtype(model) -> torch.dtype | None:
    by_dtype: dict[torch.dtype, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            by_dtype[p.dtype] = by_dtype.get(p.dtype, 0) + _bytes(p)
    return max(by_dtype, key=by_dtype.get) if by_dtype else None


def _precision(model, parts) -> list[Finding]:
    """Tensors of the model in another floating dtype than most of its parameters, or ops that compute in float32
    in a half-precision model."""
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
    module = wider[0].modules[-1] if wider and wider[0].modules else ""
    evidence = (f"{len(odd)} tensor(s), {kept:,} B, not in {short}; " if odd else "") + \
        (f"{len(wider)} of the forward's {len(fg.ops)} ops return float32, the first {wider[0].op} in "
         f"{module or 'the forward'}" if wider else "no op returns float32")
    if odd:
        line = _defined(model, odd[0][0])
        return [Finding("precision", head, evidence, line, fixes.precision(odd[0][0], odd[0][2], line, short))]
    return [Finding("precision", head, evidence, _line_of(parts.get("tracker"), wider[0].op, module) or module,
                    fixes.autocast(parts["inputs"][0].device.type, short))]


def _line_of(tracker, op: str, module: str) -> str:
    """The learner's line of the first forward op `op` that `module` ran, as memory.track saw it."""
    return next((where_of(e.frame) for e in (tracker.events if tracker else ()) if e.frame and e.phase == "forward"
                 and e.op == op and e.module == module), "")


def _hidden_state(model, inputs) -> list[Finding]:
    dtype, device = _dominant_dtype(model), inputs[0].device
    hidden = [(path, t) for path, t, how in named_tensors(model) if how == "plain attribute"
              and t.device == device and (not t.is_floating_point() or t.dtype == dtype)]
    if not hidden:
        return []
    line = _defined(model, hidden[0][0])
    return [Finding("state", f"{hidden[0][0]} is a tensor kept as a plain attribute",
                    f"{len(hidden)} such tensor(s); model.to(), .half() and state_dict() skip them: "
                    "register_buffer() makes them part of the model", line,
                    fixes.register(hidden[0][0].rsplit(".", 1)[-1], line))]


def _placed(places: dict[str, str], text: str) -> str:
    """A line of source as `file:line: text` when the step ran it (Dynamo's reports keep the text only)."""
    return f"{places[text]}: {text}" if text in places else text


def _compile(report, tracker, budget: Budget) -> list[Finding]:
    if report is None:
        return []
    places = {e.frame.text: e.frame.place for e in (tracker.events if tracker else ()) if e.frame}
    found = [_graph_break(b, tracker, budget) for b in report.breaks]
    by_function: dict[str, list] = {}
    for e in report.entries:
        by_function.setdefault(e.function, []).append(e)
    for function, entries in by_function.items():
        # each recompile's first failed guard is the newest entry's: a size, or a value Python tested
        recompiles = [e for e in entries[1:] if e.failed]
        on_size = [e for e in recompiles if "size mismatch" in e.failed[0]]
        on_value = [e for e in recompiles if "size mismatch" not in e.failed[0]]
        if len(on_size) > 1:           # the first recompile makes the changed size dynamic; more is a problem
            last = on_size[-1]
            where = _placed(places, _growing_line(report, entries[entries.index(last) - 1].id, last.id))
            found.append(Finding("recompile", f"{function} compiled {len(on_size) + 1} times for 4 batch sizes",
                                 _recompile_evidence(last.failed[0]) + _compile_time(last, budget), where,
                                 fixes.recompile(where, last.failed[0]), _compile_cost(last, budget)))
        if on_value:
            found.append(_value_recompile(function, on_value[-1], report.breaks, budget))
    return found


def _value_recompile(function: str, entry, breaks, budget: Budget) -> Finding:
    """A recompile on a value, not a size. In the code after a graph break (Dynamo's resume function, named for the
    break's line) `___stackN` is what the break handed back to Python, an `.item()` result: the branch on it compiles
    that code again when it goes the other way. The break is the cause, so the finding sits at the break's line."""
    at = re.fullmatch(r"torch_dynamo_resume_in_\w+_at_(\d+)", function)
    cause = next((b for b in breaks if at and b.place.endswith(f":{at.group(1)}")), None)
    where = f"{cause.place}: {cause.line}" if cause else ""
    said = (f"the code after the graph break at {cause.place} was compiled again: a guard on the value the break "
            f"handed back to Python failed ({entry.failed[0]}), not a guard on a size" if cause else
            f"{function} was compiled again: a guard on a value failed ({entry.failed[0]}), not a guard on a size")
    fix = fixes.graph_break(cause.line, cause.gb_type, cause.hints) if cause else \
        "torch.compile(model, dynamic=True)  # or pass the value as a tensor: Dynamo guards a Python number it tests"
    return Finding("recompile", f"{function} compiled again for a value", said + _compile_time(entry, budget), where,
                   fix, _compile_cost(entry, budget))


def _compile_time(entry, budget: Budget) -> str:
    return (f"; the last recompile took {entry.seconds:.2g} s (Dynamo with a backend that compiles nothing: "
            "inductor takes longer)") if budget.seconds and entry.seconds else ""


def _compile_cost(entry, budget: Budget) -> Cost | None:
    return Cost(entry.seconds, "s", budget.seconds, "the step's time") if budget.seconds and entry.seconds else None


def _graph_break(b, tracker, budget: Budget) -> Finding:
    """A graph break, costing the smaller of the two parts of the forward it splits (in ops: the compile lens runs
    no compiled kernels, so it has no compiled time to split): what can no longer fuse with the rest."""
    where = f"{b.place}: {b.line}" if b.place else b.line
    forward = [e for e in tracker.events if e.phase == "forward"] if tracker else []
    at = [k for k, e in enumerate(forward) if e.frame and e.frame.place == b.place] if b.place else []
    before = at[0] + sum(1 for _ in _run(at)) if at else 0
    cost = Cost(min(before, len(forward) - before), "ops", len(forward), "the forward's ops") if at else None
    split = f"; it splits the forward's {len(forward)} ops into {before} before it and {len(forward) - before} after" \
        if at else ""
    return Finding("graph-break", f"graph break {b.code or '(no code)'}: {b.gb_type}",
                   f"{b.explanation} (met {b.count} time(s) while compiling for 4 calls)"
                   + (f"; inside torch at {b.where}" if b.where else "") + split, where,
                   fixes.graph_break(b.line, b.gb_type, b.hints), cost)


def _run(indices: list[int]):
    """The first run of consecutive indices: the ops of one pass over a line."""
    for k, index in enumerate(indices):
        if index != indices[0] + k:
            return
        yield index


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
    failed = {r.strict for r in results if not r.ok}
    return [Finding("export", f"torch.export ({'strict' if r.strict else 'non-strict'}) fails: {r.error}",
                    _EXPORT_WHY[r.strict], r.where, fixes.export(True in failed, False in failed))
            for r in results if not r.ok]


def _regime(model, regime, inputs) -> list[Finding]:
    """How the step spends its time: an observation with no cost of its own, placed at the model's forward."""
    if regime is None:
        return []
    return [Finding("regime", f"the step is {regime.verdict} on this machine", regime.evidence, _forward_line(model),
                    fixes.regime(regime.verdict, inputs[0].device.type))]


def _forward_line(model) -> str:
    """`file:line: def forward(...)` of the model's class, when it is the learner's code."""
    forward = inspect.unwrap(type(model).forward)
    try:
        lines, first = inspect.getsourcelines(forward)
        file = inspect.getsourcefile(forward)
    except (TypeError, OSError):
        return ""
    return f"{user_code.place(file)}:{first}: {lines[0].strip()}" if file and user_code.learners(file) else ""


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
