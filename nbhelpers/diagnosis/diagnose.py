"""Your own model through every lens at once: one training step (or one inference) run under the series'
instruments, each checked against PyTorch's own tool, and what matters first ranked as findings.

`lenses` measures, `findings` ranks, `view` draws (a widget, a self-contained page); `run`
puts them together. Every number that PyTorch can also measure is measured both ways and listed in
`Diagnosis.agreements`.

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
import logging
import warnings
from dataclasses import dataclass, field
from typing import Callable

import torch

from nbhelpers import (arguments, autograd_graph, compile_report, devices, eager_only, forward_graph, memory,
                       model_call, module_scope, module_work, node_times, profiling, progress)
from nbhelpers.diagnosis import findings, leaks, lenses
from nbhelpers.diagnosis.findings import Finding
from nbhelpers.diagnosis.measured import Agreement, ExportResult, Measured, ModeEffect, WhatIf

__all__ = ["Agreement", "ExportResult", "WhatIf", "Diagnosis", "run"]


@dataclass(frozen=True)
class Diagnosis:
    model: str                                  # the model's class
    inputs: tuple[str, ...]                     # "[2, 3, 64, 64] float32" per positional argument, "name: ..." per keyword
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
    # the backward once more under the profiler: its graph and each node's time (training steps)
    timed: tuple[autograd_graph.Graph, node_times.BackwardTimes] | None = None
    compile: compile_report.CompileReport | None = None     # over several input shapes
    export: tuple[ExportResult, ...] = ()
    checkpoint: tuple[WhatIf, ...] = ()
    growth: leaks.Growth | None = None     # live bytes after each of three steps, and what holds them
    modes: tuple[ModeEffect, ...] = ()          # modules in the other mode than the model's, run both ways
    seconds: dict[str, float] = field(default_factory=dict)          # wall time of each lens
    # the calls of the model's forward each lens made (a compiled or exported call counts once; timing is bounded)
    forward_calls: dict[str, int] = field(default_factory=dict)
    unchecked: tuple[str, ...] = ()             # lenses that could not run on this model, and why

    def summary(self, top: int = 5) -> str:
        """The top findings and the agreements, as text (what the CLI prints)."""
        from nbhelpers.diagnosis import view
        return view.summary(self, top)

    def show(self):
        """The memory timeline over the backward graph: a widget (JupyterLab, the static site) whose click on the
        timeline selects the node that holds the bytes."""
        from nbhelpers.diagnosis import view
        return view.show(self)

    def show_times(self):
        """The backward's time, node by node, as a time-line above its graph (node_times): a click on a slice
        selects its node, selecting a node outlines its slice, and each box is barred by its share."""
        from nbhelpers.diagnosis import view
        return view.show_times(self)

    def save_html(self, path) -> None:
        """One self-contained page (no CDN, no request): findings, agreements, the timeline and the graphs."""
        from nbhelpers.diagnosis import view
        view.save_html(self, path)

    def save_snapshot(self, path) -> None:
        """The step's allocations as a `torch.cuda.memory._snapshot()`-style pickle that PyTorch's memory_viz
        opens (https://pytorch.org/memory_viz, or torch.cuda._memory_viz on the command line)."""
        from nbhelpers import memory_timeline
        memory_timeline.save_snapshot(self, path)


def run(model: torch.nn.Module, example_inputs=None, *, args: tuple | None = None, kwargs: dict | None = None,
        target: torch.Tensor | None = None, loss_fn: Callable | None = None,
        optimizer: torch.optim.Optimizer | None = None, device: torch.device | str | None = None) -> Diagnosis:
    """Diagnose one step of `model` on `example_inputs` (a tensor, a tuple of positional arguments, or a dict
    batch called as `model(**batch)`), or on `args` and `kwargs` (`model(*args, **kwargs)`; None and other
    non-tensor values may be among them). Every lens runs the model on the same arguments; the batch is the first
    dimension of the first tensor, and the lenses that re-batch change every tensor whose first dimension it is.

    The step: `loss_fn(output, target)` when `loss_fn` is given; else, with no target, the model's own loss
    (`output.loss` or `output["loss"]`, as a Hugging Face model returns when its batch carries `labels`); else,
    with a `target`, cross-entropy (an integer target) or MSE (a floating one) of the first floating output that
    needs a gradient (in a tuple's, dict's, ModelOutput's or dataclass's order, its `loss` left out); else, for a
    model in train mode with a parameter that needs a gradient, the sum of that output (its backward graph is the
    model's, whatever loss follows it); then backward, and `optimizer.step()` if given. `Diagnosis.step` says
    which. Otherwise the model is diagnosed for inference. `device` (None: the inputs') is where the inputs go; the
    model is not moved: a part of it elsewhere is a finding.

    Put back afterwards: the values of the model's parameters, buffers and tensors kept as plain attributes, of the
    optimizer's and the loss module's parameters, the gradient tensors themselves, train/eval flags, the
    optimizer's state (in its own tensors), the random generators, the contents of the lists, dicts and deques the
    model's modules and the learner's module-level variables hold, and the tensors bound to their names (a forward
    that appends to `self.history` or rebinds `self.total` leaves no tensor of the diagnosis there). Not put back:
    other Python attributes a forward changes (a call counter), and torch.compile's caches, which the compile
    lenses reset as `explain` does. In Jupyter one progress line names the lens that is running; none is stored.
    """
    call, target = _checked(model, example_inputs, args, kwargs, target, loss_fn, optimizer, device)
    compiled = isinstance(model, torch._dynamo.eval_frame.OptimizedModule)
    model = model._orig_mod if compiled else model     # dispatch modes see the eager program, so diagnose that
    inputs = tuple(call.tensors())
    with progress.line(f"diagnose {type(model).__name__}") as shown, _preserved(model, optimizer, loss_fn, inputs), \
            _no_cuda_notice(), warnings.catch_warnings():      # the line names each lens as it starts (in Jupyter)
        warnings.simplefilter("ignore", eager_only.CompiledRanEagerly)
        lens = lenses.Lenses(shown)
        measured = lenses.measure(model, call, target, loss_fn, optimizer, lens, _storages(model, inputs))
    step = measured.step + (" (of the eager module torch.compile wraps, model._orig_mod: the lenses that watch ops "
                            "cannot see compiled kernels)" if compiled else "")
    return _diagnosis(type(model).__name__, call.describe(), step, findings.rank(model, inputs, measured), measured,
                      lens)


def _diagnosis(model: str, inputs: tuple[str, ...], step: str, ranked: tuple[Finding, ...], m: Measured,
               lens: lenses.Lenses) -> Diagnosis:
    return Diagnosis(model, inputs, step, ranked, m.agreements, error=m.error, error_where=m.error_where,
                     graph=m.graph, forward=m.forward, saved_by_module=m.saved_by_module, tracker=m.tracker,
                     categories=m.categories, nodes=m.nodes, traced_at=m.traced_at, work=m.work, regime=m.regime,
                     timed=m.timed, compile=m.compile, export=m.export, checkpoint=m.checkpoint, growth=m.growth,
                     modes=m.modes, seconds=lens.seconds, forward_calls=lens.forward_calls, unchecked=tuple(lens.unchecked))


def _storages(model, inputs) -> frozenset[int]:
    """The storages of the model's tensors (parameters, buffers, plain attributes) and of the inputs: saving them
    for backward costs no new memory."""
    held = [t for _, t, _ in module_scope.named_tensors(model)] + list(inputs)
    return frozenset(memory.storage_key(part) for t in held if t.device.type != "meta" for part in memory.dense_parts(t))


def _checked(model, example_inputs, args, kwargs, target, loss_fn, optimizer, device):
    arguments.require_module("diagnose.run", "model", model)
    eager = model._orig_mod if isinstance(model, torch._dynamo.eval_frame.OptimizedModule) else model
    if any(isinstance(p, torch.nn.parameter.UninitializedParameter) for p in eager.parameters()):
        raise ValueError("diagnose.run: `model` has lazy parameters not made yet (nn.LazyLinear and the like): "
                         "call it once on an example input, then diagnose it")
    held = [*eager.named_parameters()] or [*eager.named_buffers()]
    if held and all(t.is_meta for _, t in held):     # one tensor there is a finding (planted_models.BufferElsewhere)
        raise ValueError(f"diagnose.run: `model` is on the meta device (its {held[0][0]} has a shape but no data), so no "
                         "step can run; build it on a real device, or call model.to_empty(device='cpu') and "
                         "initialize its weights (model.init_weights() or load a state_dict) first")
    if example_inputs is None and args is None and kwargs is None:
        raise TypeError("diagnose.run: `example_inputs` is missing: pass the model's inputs, a tensor, a tuple of "
                        "positional arguments or a dict batch, or args=(...) and kwargs={...}")
    call = model_call.of("diagnose.run", eager, example_inputs, args, kwargs)
    if target is not None:
        arguments.require("diagnose.run", "target", target, torch.Tensor, "a tensor of targets, or None")
    if loss_fn is not None:
        arguments.require_callable("diagnose.run", "loss_fn", loss_fn, "a function (output, target) -> loss, "
                                   "such as torch.nn.functional.cross_entropy")
    arguments.require_optimizer("diagnose.run", "optimizer", optimizer, optional=True)
    where = devices.resolve(device, *call.tensors())
    return call.to(where), None if target is None else target.to(where)


def _tensors_to_keep(model, optimizer, loss_fn) -> list[torch.Tensor]:
    """Each tensor a step may change in place, once: the model's, the optimizer's parameters, the loss module's."""
    found = [t for _, t, _ in module_scope.named_tensors(model)]
    found += [p for group in (optimizer.param_groups if optimizer is not None else ()) for p in group["params"]]
    if isinstance(loss_fn, torch.nn.Module):
        found += [t for _, t, _ in module_scope.named_tensors(loss_fn)]
    return list({id(t): t for t in found if not t.is_meta}.values())


@contextlib.contextmanager
def _preserved(model: torch.nn.Module, optimizer, loss_fn, inputs):
    """Put back what a step changes (run's docstring lists it); the step starts from no gradient, so it never
    writes into the learner's gradient tensors."""
    tensors = _tensors_to_keep(model, optimizer, loss_fn)
    values = [t.detach().clone() for t in tensors]
    grads = [(t, t.grad) for t in tensors if isinstance(t, torch.nn.Parameter)]
    for p, _ in grads:
        p.grad = None
    modes = [(m, m.training) for m in model.modules()]
    state = _optimizer_state(optimizer)
    cuda = sorted({t.device.index or 0 for t in (*tensors, *inputs) if t.is_cuda})
    try:
        with torch.random.fork_rng(devices=cuda), leaks.kept(model, loss_fn):
            yield
    finally:
        with torch.no_grad():
            for t, v in zip(tensors, values):
                t.copy_(v)
        for p, g in grads:
            p.grad = g
        for m, training in modes:
            m.training = training
        _restore_optimizer_state(optimizer, state)


def _optimizer_state(optimizer) -> dict | None:
    if optimizer is None:
        return None
    return {id(p): {k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
                    for k, v in entry.items()} for p, entry in optimizer.state.items()}


def _restore_optimizer_state(optimizer, saved: dict | None) -> None:
    """The optimizer's state as it was, written into its own tensors (a learner's reference to exp_avg stays good);
    state the step created for a parameter that had none is dropped."""
    if optimizer is None:
        return
    for p in list(optimizer.state):
        before = saved.get(id(p))
        if before is None:
            del optimizer.state[p]
            continue
        entry = optimizer.state[p]
        for k, v in before.items():
            if isinstance(v, torch.Tensor) and isinstance(entry.get(k), torch.Tensor) and entry[k].shape == v.shape:
                with torch.no_grad():
                    entry[k].copy_(v)
            else:
                entry[k] = v


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
