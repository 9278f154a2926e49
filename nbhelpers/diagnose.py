"""Your own model through every lens at once: one training step (or one inference) run under the series'
instruments, each checked against PyTorch's own tool, and what matters first ranked as findings.

`run` measures, `findings` ranks, `diagnosis_view` draws (a widget, a self-contained page). Every number that
PyTorch can also measure is measured both ways and listed in `Diagnosis.agreements`.

The model is left as it was found: parameters, buffers, gradients, train/eval flags, the optimizer's state and
the RNG state are put back after the step, and every compiler lens resets Dynamo as `explain` does.

Example:
    d = diagnose.run(torchvision.models.resnet18(num_classes=10), torch.randn(2, 3, 64, 64))
    d.findings[0].title, [a for a in d.agreements if not a.agrees]      # what first; [] when all agree
    d.save_html("report.html")
"""
from __future__ import annotations

import contextlib
import copy
import io
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from nbhelpers import (arguments, autograd_graph, compile_lens, devices, eager_only, findings, forward_graph,
                       memory, memory_agreement, module_scope, module_work, profiling)
from nbhelpers.findings import Finding

__all__ = ["Agreement", "ExportResult", "WhatIf", "Diagnosis", "run"]


@dataclass(frozen=True)
class Agreement:
    """One number measured by a lens of the series and by PyTorch's own tool."""

    name: str
    ours: int
    theirs: int
    tool: str                  # PyTorch's tool that gave `theirs`

    @property
    def agrees(self) -> bool:
        return self.ours == self.theirs


@dataclass(frozen=True)
class ExportResult:
    strict: bool
    error: str = ""            # the exception's type and first line; "" when the export worked
    where: str = ""            # the learner's line it failed at, when the traceback passes through it

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass(frozen=True)
class WhatIf:
    """Activation checkpointing of one block, estimated from this step: the bytes its backward nodes save,
    what checkpoint() keeps instead (the block's inputs), and the forward FLOPs run again in backward."""

    block: str
    saved_bytes: int
    kept_bytes: int
    recompute_flops: int

    @property
    def freed_bytes(self) -> int:
        return max(0, self.saved_bytes - self.kept_bytes)


@dataclass(frozen=True)
class Diagnosis:
    model: str                                  # the model's class
    inputs: tuple[str, ...]                     # "[2, 3, 64, 64] float32" per example input
    step: str                                   # what ran: the loss, backward, the optimizer; or inference
    findings: tuple[Finding, ...]               # most important first
    agreements: tuple[Agreement, ...]
    error: str = ""                             # the step raised: what was measured up to there is kept
    error_where: str = ""                       # the learner's line it raised at
    graph: autograd_graph.Graph | None = None   # the step's backward graph, from the loss
    forward: forward_graph.ForwardGraph | None = None
    # activation bytes the nodes each module made save (each storage once; parameters and inputs not counted)
    saved_by_module: dict[str, int] = field(default_factory=dict)
    tracker: memory.Tracker | None = None       # live bytes after every op of the step (lines=True)
    categories: dict[int, str] = field(default_factory=dict)         # storage key -> category at the end
    nodes: dict[int, int] = field(default_factory=dict)              # id(autograd node) -> graph node id
    traced_at: int = -1                         # the event index at which the graph was traced
    work: dict[str, module_work.Work] = field(default_factory=dict)
    regime: profiling.Regime | None = None
    compile: object | None = None               # compile_report.CompileReport over several input shapes
    export: tuple[ExportResult, ...] = ()
    checkpoint: tuple[WhatIf, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)          # wall time of each lens
    unchecked: tuple[str, ...] = ()             # lenses that could not run on this model, and why

    def summary(self, top: int = 5) -> str:
        """The top findings and the agreements, as text (what the CLI prints)."""
        from nbhelpers import diagnosis_view
        return diagnosis_view.summary(self, top)

    def show(self):
        """The memory timeline over the backward graph: a widget (JupyterLab, the static site) whose click on the
        timeline selects the node that holds the bytes."""
        from nbhelpers import diagnosis_view
        return diagnosis_view.show(self)

    def save_html(self, path) -> None:
        """One self-contained page (no CDN, no request): findings, agreements, the timeline and the graphs."""
        from nbhelpers import diagnosis_view
        diagnosis_view.save_html(self, path)

    def save_snapshot(self, path) -> None:
        """The step's allocations as a `torch.cuda.memory._snapshot()`-style pickle that PyTorch's memory_viz
        opens (https://pytorch.org/memory_viz, or torch.cuda._memory_viz on the command line)."""
        from nbhelpers import memory_timeline
        memory_timeline.save_snapshot(self, path)


def run(model: torch.nn.Module, example_inputs, *, target: torch.Tensor | None = None,
        loss_fn: Callable | None = None, optimizer: torch.optim.Optimizer | None = None,
        device: torch.device | str | None = None) -> Diagnosis:
    """Diagnose one step of `model` on `example_inputs` (a tensor or a tuple of tensors).

    The step: `loss_fn(model(*inputs), target)` when given (cross-entropy for an integer `target`, MSE for a
    floating one), else, for a model in train mode whose output needs a gradient, the sum of the output (its
    backward graph is the model's, whatever loss follows it); then backward and `optimizer.step()` if given. A
    model in eval mode with no target or loss is diagnosed for inference. `device` (None: the inputs') is where
    the inputs go; the model is not moved: a part of it elsewhere is a finding.
    """
    inputs, target = _checked(model, example_inputs, target, loss_fn, optimizer, device)
    compiled = isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    model = model._orig_mod if compiled else model     # dispatch modes see the eager program, so diagnose that
    lens = _Lenses()
    with _preserved(model, optimizer), _no_cuda_notice(), warnings.catch_warnings():
        warnings.simplefilter("ignore", eager_only.CompiledRanEagerly)
        held = _storages(model, inputs)
        parts = _measure(model, inputs, target, loss_fn, optimizer, lens, held)
    ranked = findings.rank(model, inputs, {**parts, "inputs": inputs, "held": held})
    step = parts.pop("step") + (" (of the eager module torch.compile wraps, model._orig_mod: the lenses that watch "
                                "ops cannot see compiled kernels)" if compiled else "")
    return Diagnosis(type(model).__name__, tuple(_describe(t) for t in inputs), step, ranked,
                     tuple(parts.pop("agreements")), seconds=lens.seconds, unchecked=tuple(lens.unchecked), **parts)


def _storages(model, inputs) -> set[int]:
    """The storages of the model's tensors (parameters, buffers, plain attributes) and of the inputs: saving them
    for backward costs no new memory."""
    held = [t for _, t, _ in findings.named_tensors(model)] + list(inputs)
    return {memory.storage_key(t) for t in held if t.device.type != "meta"}


def _checked(model, example_inputs, target, loss_fn, optimizer, device):
    arguments.require_module("diagnose.run", "model", model)
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("diagnose.run: `example_inputs` must be a tensor or a tuple of tensors, such as "
                        f"torch.randn(2, 3, 64, 64); got {arguments.given(example_inputs)}")
    if target is not None:
        arguments.require("diagnose.run", "target", target, torch.Tensor, "a tensor of targets, or None")
    if loss_fn is not None:
        arguments.require_callable("diagnose.run", "loss_fn", loss_fn, "a function (output, target) -> loss, "
                                   "such as torch.nn.functional.cross_entropy")
    arguments.require_optimizer("diagnose.run", "optimizer", optimizer, optional=True)
    where = devices.resolve(device, *inputs)
    moved = tuple(t.to(where) for t in inputs)
    return moved, None if target is None else target.to(where)


def _describe(t: torch.Tensor) -> str:
    return f"[{', '.join(map(str, t.shape))}] {str(t.dtype).removeprefix('torch.')}"


@contextlib.contextmanager
def _preserved(model: torch.nn.Module, optimizer):
    """Put back what a training step changes: values of parameters and buffers, the gradient tensors themselves,
    modes, the optimizer's state, the RNG."""
    tensors = list(model.parameters()) + list(model.buffers())
    values = [t.detach().clone() for t in tensors]
    grads = [(p, p.grad) for p in model.parameters()]
    for p, _ in grads:
        p.grad = None           # the step starts from no gradient, and never writes into the learner's tensors
    modes = [(m, m.training) for m in model.modules()]
    state = copy.deepcopy(optimizer.state_dict()) if optimizer is not None else None
    rng = torch.random.get_rng_state()
    try:
        yield
    finally:
        with torch.no_grad():
            for t, v in zip(tensors, values):
                t.copy_(v)
        for p, g in grads:
            p.grad = g
        for m, training in modes:
            m.training = training
        if state is not None:
            optimizer.load_state_dict(state)
        torch.random.set_rng_state(rng)


class _Lenses:
    """Runs each lens once, timed; a lens that cannot run on this model is recorded with why, not raised."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.unchecked: list[str] = []

    def __call__(self, name: str, fn, otherwise=None):
        start = time.perf_counter()
        try:
            return fn()
        except Exception as error:  # noqa: BLE001 - one lens failing leaves the others' findings
            self.unchecked.append(f"{name}: {findings.error_text(error)}")
            return otherwise
        finally:
            self.seconds[name] = time.perf_counter() - start


def _measure(model, inputs, target, loss_fn, optimizer, lens: _Lenses, held: set[int]) -> dict:
    step = _Step(model, inputs, target, loss_fn, optimizer)
    parts = lens("step under memory.track", step.tracked)
    parts["saved_by_module"] = findings.saved_by_module(parts["graph"], held) if parts["graph"] else {}
    parts["forward"] = lens("forward graph", lambda: forward_graph.trace(model, *inputs))
    agreements = parts["agreements"] = []
    if parts["error"]:
        return parts
    if step.training:
        agreements += lens("memory vs MemTracker", lambda: _memory_agreements(step), [])
        agreements += lens("saved bytes vs saved-tensor hooks", lambda: _saved_agreement(step, parts["graph"]), [])
    parts["work"], flop_rows = lens("FLOPs vs FlopCounterMode", lambda: _work(step), ({}, []))
    agreements += flop_rows
    parts["regime"] = lens("regime", lambda: _regime(step))
    parts["compile"], compile_rows = lens("compile lens vs explain", lambda: _compile(model, inputs), (None, []))
    agreements += compile_rows
    parts["export"] = lens("export", lambda: _export(model, inputs), ())
    parts["checkpoint"] = _checkpoint_what_ifs(model, parts)
    return parts


class _Step:
    """One step of the model, runnable again at another batch size."""

    def __init__(self, model, inputs, target, loss_fn, optimizer):
        self.model, self.inputs, self.target, self.loss_fn, self.optimizer = model, inputs, target, loss_fn, optimizer
        given = target is not None or loss_fn is not None
        self.training = given or (model.training and any(p.requires_grad for p in model.parameters()))
        self.describe = ("inference (the model is in eval mode and no target or loss was given)"
                         if not self.training else f"training step: {self._loss_text()}, backward"
                         + (f", {type(optimizer).__name__}.step()" if optimizer is not None else ""))

    def _loss_text(self) -> str:
        if self.loss_fn is not None:
            return f"loss = {getattr(self.loss_fn, '__name__', type(self.loss_fn).__name__)}(output, target)"
        if self.target is not None:
            return "loss = " + ("cross_entropy" if not self.target.is_floating_point() else "mse_loss") + \
                "(output, target)"
        return "loss = output.sum() (no target given: the backward graph is the model's, whatever loss follows)"

    def loss(self, output) -> torch.Tensor:
        found = [t for t in module_scope.tensors_in(output) if t.is_floating_point() and t.requires_grad]
        if not found:
            raise ValueError(f"diagnose.run: the model returned {arguments.given(output)}, with no floating tensor "
                             "that needs a gradient, so no loss can be formed; put the model in eval mode to "
                             "diagnose inference, or pass loss_fn")
        first = found[0]
        if self.loss_fn is not None:
            return self.loss_fn(first, self.target)
        if self.target is not None:
            f = torch.nn.functional
            return (f.mse_loss(first, self.target) if self.target.is_floating_point()
                    else f.cross_entropy(first, self.target))
        return first.float().sum()

    def at(self, size: int) -> "_Step":
        """The same step at another batch size: its inputs and target (their first dimension) re-batched."""
        target = None if self.target is None else _batch((self.target,), size)[0]
        return _Step(self.model, _batch(self.inputs, size), target, self.loss_fn, self.optimizer)

    def __call__(self, inputs=None) -> None:
        inputs = self.inputs if inputs is None else inputs
        if not self.training:
            with torch.no_grad():
                self.model(*inputs)
            return
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        self.loss(self.model(*inputs)).backward()
        if self.optimizer is not None:
            self.optimizer.step()

    def tracked(self) -> dict:
        """The step under memory.track(lines=True), with the backward graph traced between forward and backward."""
        graph, nodes, at, error, where = None, {}, -1, "", ""
        with memory.track(lines=True) as tracker:
            try:
                output = self.model(*self.inputs) if self.training else _no_grad(self.model, self.inputs)
                if self.training:
                    loss = self.loss(output)
                    at = len(tracker.events)
                    graph = autograd_graph.trace(loss, self.model)
                    nodes = {id(fn): k for k, fn in enumerate(autograd_graph.functions(loss))}
                    loss.backward()
                    if self.optimizer is not None:
                        self.optimizer.step()
            except Exception as raised:  # noqa: BLE001 - the report keeps what was measured up to here
                error, where = findings.error_text(raised), findings.user_place(raised)
        return {"tracker": tracker, "graph": graph, "nodes": nodes, "traced_at": at, "error": error,
                "error_where": where,
                "step": self.describe, "categories": self._categories()}

    def _categories(self) -> dict[int, str]:
        owner = {}
        for p in self.model.parameters():
            for part in memory.dense_parts(p.grad) if p.grad is not None else ():
                owner[memory.storage_key(part)] = "gradients"
        if self.optimizer is not None:
            for state in self.optimizer.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and v.numel() > 1:
                        owner[memory.storage_key(v)] = "optimizer state"
        return owner


def _no_grad(model, inputs):
    with torch.no_grad():
        return model(*inputs)


def _memory_agreements(step: _Step) -> list[Agreement]:
    optimizer = step.optimizer or torch.optim.SGD(step.model.parameters(), lr=0.0)   # lr 0: nothing moves
    rows = memory_agreement.against_memtracker(lambda: _step_with(step, optimizer), step.model, optimizer)
    return [Agreement(f"peak {r.category} bytes", r.ours + r.accounted, r.memtracker, "MemTracker") for r in rows]


def _step_with(step: _Step, optimizer) -> None:
    step.loss(step.model(*step.inputs)).backward()
    optimizer.step()


def _saved_agreement(step: _Step, graph) -> list[Agreement]:
    """The bytes the graph's nodes save (as `_saved_*` lists them, a tensor saved twice counted twice) against
    what saved-tensor hooks are handed over the same forward and loss, corrected by the two documented
    differences (memory.SavedBytes)."""
    counted, output = memory.saved_bytes_by_module(lambda *inputs: step.loss(step.model(*inputs)), *step.inputs)
    hooks = sum(s.nbytes + s.wrapped_numbers - s.checkpoint_inputs for s in counted.values())
    traced = sum(s.nbytes for n in graph.nodes for s in n.saved)
    del output
    return [Agreement("bytes saved for backward", traced, hooks, "saved_tensors_hooks")]


def _work(step: _Step) -> tuple[dict, list[Agreement]]:
    """FLOPs and bytes per module over the step; checked against FlopCounterMode on the whole step, and module by
    module on the forward (module_work says why not on a backward)."""
    work, theirs = module_work.by_module(step), module_work.flop_counter(step)
    rows = [Agreement("FLOPs of the whole step", work[module_work.TOTAL].flops if work else 0,
                      theirs.get(module_work.TOTAL, 0), "FlopCounterMode")]
    forward = lambda: _no_grad(step.model, step.inputs)         # noqa: E731 - run twice, once per counter
    ours, theirs = module_work.by_module(forward), module_work.flop_counter(forward)
    rows += [Agreement(f"forward FLOPs of {name}", ours[name].flops if name in ours else 0, theirs.get(name, 0),
                       "FlopCounterMode") for name in dict.fromkeys([*ours, *theirs])
             if (ours[name].flops if name in ours else 0) or theirs.get(name, 0)]
    return work, rows


def _batch(inputs: tuple, size: int) -> tuple:
    """The inputs at another batch size (their first dimension), repeating the first rows as needed."""
    return tuple(t[torch.arange(size) % t.shape[0]] if t.dim() else t for t in inputs)


def _regime(step: _Step):
    size = step.inputs[0].shape[0] if step.inputs[0].dim() else 1
    return profiling.regime(lambda n: step.at(n), (size, 2 * size), device=step.inputs[0].device)


def _compile(model, inputs) -> tuple[object, list[Agreement]]:
    """Breaks on the example inputs against explain's; then the same forward at four batch sizes, as a
    program would call it, for the recompiles."""
    with _quiet():
        first = compile_lens.capture(model, *inputs, kernels=False)
        explained = torch._dynamo.explain(model)(*inputs)
    torch.compiler.reset()
    ours_breaks = sum(b.count for b in first.breaks if b.in_explain)
    # explain's graph_break_count is graph_count - 1 (-1 when Dynamo skipped the whole frame): its reasons are the breaks
    rows = [Agreement("graph breaks (one call)", ours_breaks, len(explained.break_reasons), "torch._dynamo.explain"),
            Agreement("graphs compiled (one call)", len(first.graphs), explained.graph_count, "torch._dynamo.explain")]
    size = inputs[0].shape[0] if inputs[0].dim() else 1
    calls = [_batch(inputs, size + k) for k in range(4)]
    with _quiet():
        return compile_lens.capture_calls(model, calls), rows


def _export(model, inputs) -> tuple[ExportResult, ...]:
    results = []
    for strict in (True, False):
        try:
            with _quiet():
                warnings.simplefilter("ignore")
                torch.export.export(model, inputs, strict=strict)
            results.append(ExportResult(strict))
        except Exception as error:  # noqa: BLE001 - a failing export is the finding
            results.append(ExportResult(strict, findings.error_text(error), findings.user_place(error)))
        finally:
            torch.compiler.reset()
    return tuple(results)


@contextlib.contextmanager
def _no_cuda_notice():
    """Importing torch.utils.benchmark or inductor logs "No CUDA runtime is found" where a CUDA toolkit is
    installed but no GPU: machine noise, not a finding. The logger's level is put back after."""
    logger = logging.getLogger("torch.utils.cpp_extension")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def _quiet():
    """A failing strict export prints the graph it traced; the report says where it failed instead."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _checkpoint_what_ifs(model, parts: dict) -> tuple[WhatIf, ...]:
    graph, fg, work = parts.get("graph"), parts.get("forward"), parts.get("work") or {}
    if graph is None or fg is None:
        return ()
    kept = findings.block_inputs(fg)
    rows = [WhatIf(block, parts["saved_by_module"].get(block, 0), kept.get(block, 0),
                   work[block].forward_flops if block in work else 0)
            for block in findings.blocks(model)]
    return tuple(sorted((r for r in rows if r.saved_bytes), key=lambda r: -r.freed_bytes))

