"""What the lenses of a diagnosis measured, as frozen records: `Measured` holds one typed field per lens (what
`lenses.measure` returns, and what `findings.rank` and `Diagnosis` read), and the rows it is made of: an
`Agreement` of a number with PyTorch's own tool, an `ExportResult`, a checkpointing `WhatIf`, a `ModeEffect`.

A lens that did not run leaves its field at the default, "not measured" (None, an empty tuple or dict): the step
raised, or the lens could not run on this model (`Lenses.unchecked` says why).

Example:
    m = lenses.measure(model, call, target, None, None, lenses.Lenses(), held=set())
    m.error, m.tracker.peak_bytes, [a for a in m.agreements if not a.agrees]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nbhelpers import autograd_graph, compile_report, forward_graph, memory, module_work, node_times, profiling
from nbhelpers.diagnosis.leaks import Growth

__all__: list[str] = []   # Agreement, ExportResult, WhatIf (diagnose re-exports them), ModeEffect, Measured: diagnose's


@dataclass(frozen=True)
class Agreement:
    """One number measured by a lens of the series and by PyTorch's own tool."""

    name: str
    ours: int
    theirs: int
    tool: str                  # PyTorch's tool that gave `theirs`
    # what both sides read alike, when they do ("" when each measures on its own): such a row is a total both
    # compute from the same list, not a check of one by the other
    shared: str = ""

    @property
    def agrees(self) -> bool:
        return self.ours == self.theirs

    @property
    def independent(self) -> bool:
        return not self.shared


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
class ModeEffect:
    """A module in the other train/eval mode than its model, run both ways on the same input and random numbers."""

    path: str
    kind: str                  # its class: Dropout, BatchNorm1d, InstanceNorm2d, ...
    training: bool             # its own mode
    change: float              # the largest absolute difference of the model's outputs between the two modes


@dataclass(frozen=True)
class Measured:
    """Every lens's result on one step; its fields are those of `Diagnosis` that lenses measure."""

    step: str                                    # what ran: the loss, backward, the optimizer; or inference
    # the step under memory.track(lines=True), its backward graph traced between forward and backward
    tracker: memory.Tracker | None = None        # None: the lens itself failed (`error` says why)
    graph: autograd_graph.Graph | None = None    # the step's backward graph, from the loss (None: inference)
    nodes: dict[int, int] = field(default_factory=dict)          # id(autograd node) -> graph node id
    traced_at: int = -1                          # the event index at which the graph was traced
    error: str = ""                              # the step raised: what was measured up to there is kept
    error_where: str = ""                        # the learner's line it raised at
    categories: dict[int, str] = field(default_factory=dict)     # storage key -> category at the end
    # the storages that cost nothing new when saved: the model's tensors and the inputs
    held: frozenset[int] = frozenset()
    # activation bytes the nodes each module made save (each storage once; `held` not counted)
    saved_by_module: dict[str, int] = field(default_factory=dict)
    forward: forward_graph.ForwardGraph | None = None
    # the lenses below run only on a step that ran (no `error`)
    agreements: tuple[Agreement, ...] = ()
    modes: tuple[ModeEffect, ...] = ()           # modules in the other mode than the model's, run both ways
    growth: Growth | None = None                 # live bytes after each of three steps, and what holds them
    work: dict[str, module_work.Work] = field(default_factory=dict)
    regime: profiling.Regime | None = None
    # the backward once more under the profiler: its graph and each node's time (training steps)
    timed: tuple[autograd_graph.Graph, node_times.BackwardTimes] | None = None
    compile: compile_report.CompileReport | None = None     # over several input shapes
    export: tuple[ExportResult, ...] = ()
    checkpoint: tuple[WhatIf, ...] = ()
