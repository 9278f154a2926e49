"""One step of a model under each lens of the series, each number PyTorch can also measure measured again by
PyTorch's own tool. A lens that cannot run on a model is recorded with why (`Lenses.unchecked`), never raised, so
the others still report. `measure` runs every lens on the `Step` and returns what they measured as one frozen
record, `Measured`, for `findings.rank` and `Diagnosis`.

Example:
    lens = Lenses()
    m = measure(model, call, target, None, None, lens, held=frozenset())
    m.agreements, lens.seconds, lens.unchecked
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import io
import time
import warnings

import torch

from nbhelpers import (autograd_graph, compile_lens, compile_report, forward_graph, memory, memory_agreement,
                       model_call, module_scope, module_work, profiling, user_code)
from nbhelpers.diagnosis import leaks
from nbhelpers.diagnosis.measured import Agreement, ExportResult, Measured, ModeEffect, WhatIf
from nbhelpers.diagnosis.step import Step
from nbhelpers.progress import Line

__all__: list[str] = []   # Lenses, measure: diagnose's


class Lenses:
    """Runs each lens once, timed, counting the calls of the model it makes (`ran`); a lens that cannot run on this
    model is recorded with why, not raised. `shown`: a progress line that names each lens as it starts."""

    def __init__(self, shown: Line | None = None):
        self.shown = shown
        self.seconds: dict[str, float] = {}
        self.forward_calls: dict[str, int] = {}
        self.unchecked: list[str] = []
        self.calls = 0

    def ran(self, times: int = 1) -> None:
        """A lens called the model's forward `times` times (a compiled or exported call counts once)."""
        self.calls += times

    def __call__(self, name: str, fn, otherwise=None):
        if self.shown is not None:
            self.shown.update(name, force=True)
        start, before = time.perf_counter(), self.calls
        try:
            return fn()
        except Exception as error:  # noqa: BLE001 - one lens failing leaves the others' findings
            self.unchecked.append(f"{name}: {user_code.error_text(error)}")
            return otherwise
        finally:
            self.seconds[name] = time.perf_counter() - start
            self.forward_calls[name] = self.forward_calls.get(name, 0) + self.calls - before


def measure(model, call: model_call.Call, target, loss_fn, optimizer, lens: Lenses,
            held: frozenset[int]) -> Measured:
    """Every lens on one step of `model`; the lenses after the first two run only when the step ran."""
    step = Step(model, call, target, loss_fn, optimizer, lens)
    traced = lens("step under memory.track", lambda: step.tracked(held)) or \
        step.unmeasured(lens.unchecked[-1], held)
    traced = dataclasses.replace(
        traced, saved_by_module=autograd_graph.saved_by_module(traced.graph, held) if traced.graph else {},
        forward=lens("forward graph", lambda: _forward_graph(model, call, lens)))
    if traced.error:
        return traced
    modes = lens("train/eval modes", lambda: _mode_effects(model, call, lens), ())
    agreements = []
    if step.training:
        agreements += lens("memory vs MemTracker", lambda: _memory_agreements(step), [])
        agreements += lens("saved bytes vs saved-tensor hooks", lambda: _saved_agreement(step, traced.graph), [])
    roots = {"model": model, "optimizer": optimizer, "loss_fn": loss_fn}
    growth = lens("across steps", lambda: leaks.across_steps(step, roots))
    work, flop_rows = lens("FLOPs vs FlopCounterMode", lambda: _work(step), ({}, []))
    regime = lens("regime", lambda: _regime(step))
    timed = lens("backward's time by node", step.timed_backward) if step.training else None
    with _collector_paused():
        report, compile_rows = lens("compile lens vs explain", lambda: _compile(model, call, lens), (None, []))
        export = lens("export", lambda: _export(model, call, lens), ())
    return dataclasses.replace(traced, agreements=tuple(agreements + flop_rows + compile_rows), modes=modes,
                               growth=growth, work=work, regime=regime, timed=timed, compile=report, export=export,
                               checkpoint=_checkpoint_what_ifs(model, traced, work))


_MODE_CHECKS = 4       # modules whose mode is tried both ways: two forwards each


def _mode_effects(model, call: model_call.Call, lens: Lenses) -> tuple[ModeEffect, ...]:
    """Each outermost module whose mode differs from the model's (up to _MODE_CHECKS), with how much switching it
    to the model's mode changes the outputs: 0.0 when its forward does the same in both (InstanceNorm without
    running statistics, Dropout(p=0))."""
    paths, found = module_scope.module_paths(model), []
    for m in _odd_modules(model, model.training)[:_MODE_CHECKS]:
        outputs = [_outputs_as(model, call, m, mode, lens) for mode in (m.training, model.training)]
        found.append(ModeEffect(paths.get(id(m), type(m).__name__), type(m).__name__, m.training,
                                _largest_change(*outputs)))
    return tuple(found)


def _odd_modules(module, training: bool) -> list:
    """The outermost modules below `module` whose mode is not `training`."""
    found = []
    for child in module.children():
        found += [child] if child.training != training else _odd_modules(child, training)
    return found


def _outputs_as(model, call: model_call.Call, module, training: bool, lens: Lenses) -> list[torch.Tensor]:
    """The model's outputs with `module` (and its submodules) in `training` mode: random numbers from one seed,
    buffers and modes put back after, no graph."""
    modes = [(m, m.training) for m in module.modules()]
    buffers = [(b, b.detach().clone()) for b in model.buffers() if not b.is_meta]
    cuda = sorted({t.device.index or 0 for t in call.tensors() if t.is_cuda})
    try:
        module.train(training)
        with torch.random.fork_rng(devices=cuda), torch.no_grad():
            torch.manual_seed(0)
            lens.ran()
            return [t.detach().clone() for t in module_scope.tensors_in(call(model))]
    finally:
        for m, mode in modes:
            m.training = mode
        with torch.no_grad():
            for b, value in buffers:
                b.copy_(value)


def _largest_change(before: list[torch.Tensor], after: list[torch.Tensor]) -> float:
    if len(before) != len(after) or any(a.shape != b.shape for a, b in zip(before, after)):
        return float("inf")
    return max(((a.double() - b.double()).abs().max().item() if a.numel() else 0.0
                for a, b in zip(before, after) if not torch.equal(a, b)), default=0.0)


def _forward_graph(model, call: model_call.Call, lens: Lenses) -> forward_graph.ForwardGraph:
    lens.ran()
    return forward_graph.trace(model, *call.args, **call.kwargs)


def _memory_agreements(step: Step) -> list[Agreement]:
    optimizer = step.optimizer or torch.optim.SGD(step.model.parameters(), lr=0.0)   # lr 0: nothing moves
    rows = memory_agreement.against_memtracker(lambda: _step_with(step, optimizer), step.model, optimizer)
    return [Agreement(f"peak {r.category} bytes", r.ours + r.accounted, r.memtracker, "MemTracker",
                      _SHARED.get(r.category, "")) for r in rows]


# MemTracker's parameter and buffer rows are the sizes of model.parameters() and model.buffers(), which memory.track
# does not see being made (they exist before the step), so both sides add up the same list
# (torch/distributed/_tools/mem_tracker.py, _track_module_params_and_buffers; memory_agreement._held_before)
_SHARED = {"Parameter": "both add up the sizes of model.parameters(): a total, not a measurement",
           "Buffer": "both add up the sizes of model.buffers(): a total, not a measurement"}


def _step_with(step: Step, optimizer) -> None:
    step.loss(step.forward()).backward()
    optimizer.step()


def _saved_agreement(step: Step, graph) -> list[Agreement]:
    """The bytes the graphs of the forward's outputs save (as `_saved_*` lists them, a tensor saved twice counted
    twice) against what saved-tensor hooks are handed over the same forward and loss, corrected by the two
    documented differences (memory.SavedBytes). The hooks see every save of the forward, also those of an output
    the loss does not use (a second head), so the trace walks every output's graph, not only the loss's."""
    def forward_and_loss():
        output = step.forward()
        return (step.loss(output), *model_call.loss_tensors(output))   # every output, for the wrapped numbers

    counted, outputs = memory.saved_bytes_by_module(forward_and_loss)
    hooks = sum(s.nbytes + s.wrapped_numbers - s.checkpoint_inputs for s in counted.values())
    saves = {(id(node), attr): (node, packed) for t in outputs if t.grad_fn is not None     # the node kept: its id
             for node, attr, packed in autograd_graph.saved_objects(t)}                      # stays its own
    traced = sum(p.numel() * p.element_size() for _, p in saves.values() if isinstance(p, torch.Tensor))
    in_loss = sum(s.nbytes for n in graph.nodes for s in n.saved)
    del outputs, saves
    name = "bytes saved for backward" if traced == in_loss else \
        f"bytes saved for backward by every output's graph (the loss's: {in_loss:,} B)"
    return [Agreement(name, traced, hooks, "saved_tensors_hooks")]


def _work(step: Step) -> tuple[dict, list[Agreement]]:
    """FLOPs and bytes per module over the step; checked against FlopCounterMode on the whole step, and module by
    module on the forward (module_work says why not on a backward)."""
    work, theirs = module_work.by_module(step), module_work.flop_counter(step, added=False)
    rows = [Agreement("FLOPs of the whole step", _own(work.get(module_work.TOTAL)), theirs.get(module_work.TOTAL, 0),
                      "FlopCounterMode")]
    ours, theirs = module_work.by_module(step.no_grad), module_work.flop_counter(step.no_grad, added=False)
    theirs = _renamed(theirs, module_scope.canonical_paths(step.model))   # a shared module: one name each side
    rows += [Agreement(f"forward FLOPs of {name}", _own(ours.get(name)), theirs.get(name, 0), "FlopCounterMode")
             for name in dict.fromkeys([*ours, *theirs]) if _own(ours.get(name)) or theirs.get(name, 0)]
    return work, rows


def _renamed(flops: dict[str, int], canonical: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, count in flops.items():
        out[canonical.get(name, name)] = out.get(canonical.get(name, name), 0) + count
    return out


def _own(work) -> int:
    """FLOPs less those counted with flop_formulas where FlopCounterMode has no formula (CPU attention): the
    comparison is of what both count on their own; the analytic part stays in `Diagnosis.work`."""
    return work.flops - work.added_flops if work is not None else 0


# timed runs of the step at each size: bounded, so a fast model's step is not run thousands of times
_TIMED_CALLS = 5


def _regime(step: Step):
    size, device = step.call.batch, step.call.tensors()[0].device
    # a ceiling within a few percent is enough to tell the regimes apart: 0.1 s of each benchmark, not 0.3
    return profiling.regime(lambda n: step.at(n), (size, 2 * size), device=device,
                            peaks=profiling.machine_peaks(device, min_run_time=0.1), calls=_TIMED_CALLS)


def _compile(model, call: model_call.Call, lens: Lenses) -> tuple[compile_report.CompileReport, list[Agreement]]:
    """The forward at four batch sizes, as a program would call it, for the recompiles; its first call is the
    example call, whose breaks and graphs, as Dynamo's log has them, are checked against explain's counts of the
    same compile (its ExplainWithBackend wraps the lens's backend: one trace, not a second run of explain)."""
    calls = [call.at(call.batch + k) for k in range(4)]
    lens.ran(len(calls))
    with _quiet():
        report = compile_lens.capture_calls(model, [c.args for c in calls], keywords=[c.kwargs for c in calls],
                                            split_calls=0)    # what recompiles needs Dynamo's graphs only
    first = {e.id for e in report.entries if e.call == 0}
    # breaks that split a graph, one per compiled entry of the first call; explain counts a break per graph
    # that ended at one (compile_subgraph_reason.graph_break)
    ours_breaks = sum(entry in first for b in report.breaks for entry in b.ended_in)
    graphs, breaks = report.explained
    rows = [Agreement("graph breaks (one call)", ours_breaks, breaks, "torch._dynamo.explain"),
            Agreement("graphs compiled (one call)", sum(e.graphs for e in report.entries if e.call == 0), graphs,
                      "torch._dynamo.explain")]
    return report, rows


def _export(model, call: model_call.Call, lens: Lenses) -> tuple[ExportResult, ...]:
    results = []
    for strict in (True, False):
        lens.ran()
        try:
            with _quiet(), _export_globals_dropped():
                torch.export.export(model, call.args, kwargs=call.kwargs, strict=strict)
            results.append(ExportResult(strict))
        except Exception as error:  # noqa: BLE001 - a failing export is the finding
            results.append(ExportResult(strict, user_code.error_text(error), user_code.error_place(error)))
        finally:
            torch.compiler.reset()
    return tuple(results)


@contextlib.contextmanager
def _collector_paused():
    """Dynamo and export make many short-lived objects, and each of the cyclic collector's passes over them costs
    more the bigger the program's heap (transformers imported: 2-3 s of a 13 s diagnosis, tests/benchmarks/
    diagnose_sample.py). What they leave in cycles is collected once at the end, as PyTorch's own state_dict
    does for its walks (torch/distributed/checkpoint/state_dict.py, _gc_context); compile times in the findings
    are measured with the collector paused."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect(0)


@contextlib.contextmanager
def _export_globals_dropped():
    """Strict export has Dynamo compile functional_export's ModuleToTrace.forward, and Dynamo installs the compiled
    graph, which holds the model's parameters, as a global of the module whose code it compiled
    (torch/_dynamo/output_graph.py, install_global_unsafe). A global is removed by its CleanupHook when the code
    object that owns it is collected (torch/_dynamo/utils.py, CleanupHook), which an export never lets happen: each
    diagnosis would keep its model's parameters alive (tests/test_diagnose.py fails without this)."""
    from torch._dynamo import functional_export

    space = vars(functional_export)
    before = set(space)
    try:
        yield
    finally:
        for name in set(space) - before:
            del space[name]


@contextlib.contextmanager
def _quiet():
    """A failing strict export prints the graph it traced; the report says where it failed instead."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _checkpoint_what_ifs(model, traced: Measured, work: dict) -> tuple[WhatIf, ...]:
    if traced.graph is None or traced.forward is None:
        return ()
    kept = forward_graph.inputs_by_module(traced.forward)
    rows = [WhatIf(block, traced.saved_by_module.get(block, 0), kept.get(block, 0),
                   work[block].forward_flops if block in work else 0)
            for block in _blocks(model)]
    return tuple(sorted((r for r in rows if r.saved_bytes), key=lambda r: -r.freed_bytes))


def _blocks(model: torch.nn.Module) -> list[str]:
    """The blocks a checkpoint would wrap: the model's children, and the children of a child that is a
    Sequential or ModuleList (ResNet's layer1.0, a transformer's layers.0)."""
    paths, found = module_scope.module_paths(model), []
    for child in model.children():
        inner = list(child.children()) if isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)) else []
        found += [paths[id(m)] for m in (inner or [child]) if id(m) in paths]
    return found
