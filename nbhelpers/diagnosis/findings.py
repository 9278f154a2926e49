"""What a diagnosis found, ranked: each finding has a kind, a one-line title, the evidence (numbers from the
lenses), where in the learner's code (always a line of the learner's file where one makes it: never this package's
or torch's), what to change as code, what it costs, measured, and the notebook that teaches it. `diagnose.run`
measures; this module reads the measurements and the model's own state (devices, dtypes, train/eval flags, tensors
kept as plain attributes) and decides what matters first.

The rank is `rank`'s: what is wrong first (what stops the model, changes its results or grows without
bound), then what costs the most, measured (bytes as a share of the step's memory at its peak, seconds as a share of
the step's time, a graph break by the share of the forward's ops it cuts off), then what no lens puts a number on;
and one finding per cause, its consequences listed under it (one data-dependent branch: a graph break and two
export failures). memory_findings builds the findings about memory, compile_findings those about
torch.compile and torch.export.
"""
from __future__ import annotations

import torch

from nbhelpers import memory, module_scope, user_code
from nbhelpers.diagnosis import compile_findings, fixes, memory_findings
from nbhelpers.diagnosis.measured import Measured
from nbhelpers.diagnosis.rank import LESSONS, NOTEBOOKS, ORDER, Budget, Finding, ranked

__all__ = ["Finding", "LESSONS", "NOTEBOOKS", "ORDER", "rank"]


def rank(model: torch.nn.Module, inputs: tuple, m: Measured) -> tuple[Finding, ...]:
    """Every finding from the model's state and what the lenses measured on its step, most important first, one
    per cause."""
    budget = _budget(model, inputs, m)
    found = [*_error(m), *_devices(model, inputs), *_modes(model, m.modes), *_precision(model, m, inputs),
             *_hidden_state(model, inputs), *compile_findings.compiled(m.compile, m.tracker, budget),
             *compile_findings.exported(m.export), *memory_findings.saved(m, inputs, budget),
             *memory_findings.peak(m, budget), *memory_findings.checkpoint(m, budget),
             *_regime(model, m.regime, inputs), *memory_findings.leak(m.growth, budget)]
    return ranked(found)


def _budget(model, inputs, m: Measured) -> Budget:
    """The wholes the costs are shares of: the bytes the model and inputs hold plus the step's peak, the
    parameters' bytes, the step's time."""
    held = {}
    for t in [t for _, t, _ in module_scope.named_tensors(model)] + list(inputs):
        for part in memory.dense_parts(t) if t.device.type != "meta" else ():
            held[memory.storage_key(part)] = part.untyped_storage().nbytes()
    tracker, regime = m.tracker, m.regime
    return Budget(sum(held.values()) + (tracker.peak_bytes if tracker else 0),
                  sum(_bytes(p) for p in model.parameters() if not p.is_meta),
                  regime.seconds[0] if regime is not None and regime.seconds else 0.0)


def _error(m: Measured) -> list[Finding]:
    if not m.error:
        return []
    ops = len(m.tracker.events) if m.tracker else 0
    return [Finding("error", f"The step raised {m.error}",
                    f"measured up to there: {ops} ops; the other lenses need a step that runs", m.error_where,
                    fixes.error(m.error, m.error_where))]


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _devices(model, inputs) -> list[Finding]:
    device = inputs[0].device
    away = [(path, t.device, how) for path, t, how in module_scope.named_tensors(model) if t.device != device]
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
    module = dict(module_scope.modules_with_paths(model)).get(owner)
    line = user_code.assigned_in(type(module), attr) if module is not None else ""
    return f"{line} [{path}]" if line else path


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


def _precision(model, m: Measured, inputs) -> list[Finding]:
    """Tensors of the model in another floating dtype than most of its parameters, or ops that compute in float32
    in a half-precision model."""
    dtype = _dominant_dtype(model)
    if dtype is None:
        return []
    odd = [(path, t, how) for path, t, how in module_scope.named_tensors(model)
           if t.is_floating_point() and t.dtype != dtype]
    fg = m.forward
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
    return [Finding("precision", head, evidence, _line_of(m.tracker, wider[0].op, module) or module,
                    fixes.autocast(inputs[0].device.type, short))]


def _line_of(tracker, op: str, module: str) -> str:
    """The learner's line of the first forward op `op` that `module` ran, as memory.track saw it."""
    return next((user_code.where_of(e.frame) for e in (tracker.events if tracker else ())
                 if e.frame and e.phase == "forward" and e.op == op and e.module == module), "")


def _hidden_state(model, inputs) -> list[Finding]:
    dtype, device = _dominant_dtype(model), inputs[0].device
    hidden = [(path, t) for path, t, how in module_scope.named_tensors(model) if how == "plain attribute"
              and t.device == device and (not t.is_floating_point() or t.dtype == dtype)]
    if not hidden:
        return []
    line = _defined(model, hidden[0][0])
    return [Finding("state", f"{hidden[0][0]} is a tensor kept as a plain attribute",
                    f"{len(hidden)} such tensor(s); model.to(), .half() and state_dict() skip them: "
                    "register_buffer() makes them part of the model", line,
                    fixes.register(hidden[0][0].rsplit(".", 1)[-1], line))]


def _regime(model, regime, inputs) -> list[Finding]:
    """How the step spends its time: an observation with no cost of its own, placed at the model's forward."""
    if regime is None:
        return []
    return [Finding("regime", f"the step is {regime.verdict} on this machine", regime.evidence,
                    user_code.defined_at(type(model).forward), fixes.regime(regime.verdict, inputs[0].device.type))]
