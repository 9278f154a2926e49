"""Where one backward pass, or one forward, spends its time, node by node: the profiler's events given to the
autograd nodes (or the forward's ATen ops) that ran them, and what no node owns named as such.

The engine runs each node inside a profiler range "autograd::engine::evaluate_function: <node name>" that carries
the node's sequence number (the installed torch pairs such a range with the forward op that made its node by that
number: torch/autograd/profiler_util.py, _set_backward_stacktraces); a node's time is that range's total CPU time:
its backward formula and every aten op it calls; `attribute` checks each range's name against its node's.
AccumulateGrad nodes all carry sequence number -1, so the k-th of their ranges is given to the k-th leaf of
`Graph.order` (backward's order, which tests check against node pre-hooks): the names agree, but the profile
alone cannot tell two leaves apart.
What ran outside every node's range is `unowned`, by event name. `timeline` lays the ranges out on the
backward's clock, each at its start, for memory_timeline.js's time-line above the graph. CPU only: on CUDA
the engine runs a device's nodes on its own thread and the kernels' time is not the range's.

Example:
    graph, times = node_times.backward(loss, module=model)     # runs loss.backward()
    slowest = max(times.nodes, key=lambda t: t.us)
    graph.nodes[slowest.node].label, slowest.us / times.total_us
    graph_view.show(graph_view.from_autograd(graph, times=times), timeline=node_times.timeline(graph, times))
    fg, op_times = node_times.forward(model, x)                # runs the forward twice (above)
    graph_view.show_twin(fg, times=op_times, timeline=node_times.timeline(fg, op_times))
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from nbhelpers import arguments, autograd_graph, forward_graph, module_scope, stderr_capture

__all__ = ["NodeTime", "BackwardTimes", "ForwardTimes", "backward", "forward", "timeline"]
# attribute_forward, view_nodes, Times: forward's, graph_view's and the two Times' own (the notebooks use none)

RANGE = "autograd::engine::evaluate_function: "


@dataclass(frozen=True)
class NodeTime:
    node: int                                  # an index into the Graph's nodes (a forward's: a ForwardOp's id)
    us: float                                  # its range's total CPU time, microseconds
    ops: tuple[tuple[str, float], ...]         # the aten ops it ran, each with its own (self) CPU time
    start_us: float = 0.0                      # when its range began, after the backward's first event began


@dataclass(frozen=True)
class Times:
    """One pass's profile given out: to its nodes (`nodes`, in the order they ran), and what ran outside them."""

    nodes: tuple[NodeTime, ...]                # in the order they ran
    outside: tuple[tuple[str, float, float], ...]   # each event (or part of one) outside every node: (name, start_us, us)
    total_us: float                            # every top-level event of the pass, owned or not
    clock = ""                                 # the pass a share is of: "backward", "forward"
    unit = ""                                  # what its nodes are: "node", "op"

    @property
    def unowned(self) -> tuple[tuple[str, float], ...]:
        """What ran outside every node's range, by event name: (name, us), in the order first seen."""
        by_name: Counter = Counter()
        for name, _, us in self.outside:
            by_name[name] += us
        return tuple(by_name.items())

    def share(self, node_time: NodeTime) -> float:
        return node_time.us / self.total_us if self.total_us else 0.0


@dataclass(frozen=True)
class BackwardTimes(Times):
    """A backward's: NodeTime.node indexes the Graph's nodes."""

    clock, unit = "backward", "node"


@dataclass(frozen=True)
class ForwardTimes(Times):
    """A forward's: NodeTime.node is a ForwardOp's id; `outside` holds the composite ops' own time (and any other
    event no recorded op owns), each its self time, so that the ops and it add up to the total."""

    clock, unit = "forward", "op"


def backward(loss: torch.Tensor, module: torch.nn.Module | None = None) -> tuple[autograd_graph.Graph, BackwardTimes]:
    """Trace `loss`'s graph (`autograd_graph.trace`), then run `loss.backward()` under the CPU profiler and give
    each node its time. The gradients accumulate as any backward's do."""
    arguments.require("node_times.backward", "loss", loss, torch.Tensor, "the scalar a forward returned, with a grad_fn")
    if loss.grad_fn is None or loss.numel() != 1:
        raise ValueError("node_times.backward: `loss` must be a scalar with a grad_fn (the output of a differentiable "
                         f"op run in grad mode); got shape {tuple(loss.shape)}, grad_fn {loss.grad_fn}")
    graph = autograd_graph.trace(loss, module=module)
    with stderr_capture.without_kineto_lines(), profile(activities=[ProfilerActivity.CPU]) as prof:
        loss.backward()
    return graph, attribute(graph, prof.events())


def attribute(graph: autograd_graph.Graph, events) -> BackwardTimes:
    """`events` (a profile's, of one backward of `graph`) given to its nodes; raises if a node's range names
    another op than the node, or a node ran twice."""
    by_sequence = {n.sequence_nr: i for i, n in enumerate(graph.nodes) if not n.is_leaf}
    leaves = iter([i for i in graph.order if graph.nodes[i].is_leaf])
    timed, outside, seen = [], [], set()
    top = [e for e in events if e.cpu_parent is None]
    began = min((e.time_range.start for e in top), default=0)
    for event in top:
        start = event.time_range.start - began
        if not event.name.startswith(RANGE):
            outside.append((event.name, start, event.cpu_time_total))
            continue
        node = next(leaves, None) if event.sequence_nr == -1 else by_sequence.get(event.sequence_nr)
        if node is None or node in seen or graph.nodes[node].name != event.name[len(RANGE):]:
            raise ValueError(f"node_times: the profile's {event.name!r} (sequence number {event.sequence_nr}) is no "
                             "node of this graph, or ran twice; profile exactly one backward of the traced loss")
        seen.add(node)
        timed.append(NodeTime(node, event.cpu_time_total, _ops(event), start))
    return BackwardTimes(tuple(timed), tuple(outside), sum(e.cpu_time_total for e in top))


def forward(model: torch.nn.Module, *inputs, **kwargs) -> tuple[forward_graph.ForwardGraph, ForwardTimes]:
    """`forward_graph.trace(model, *inputs, **kwargs)` (the run that counts), then the same forward under the CPU
    profiler with nothing else watching, its torch random numbers (CPU, and each CUDA device the model or the
    inputs use) and its buffers put back; each recorded op gets its event's time. Python's own `random` is not
    put back. A forward that raises raises here: trace it with forward_graph.trace to see where."""
    arguments.require_module("node_times.forward", "model", model)
    fg = forward_graph.trace(model, *inputs, **kwargs)
    if fg.error is not None:
        raise ValueError(f"node_times.forward: the forward raised {type(fg.error).__name__}: {fg.error}; "
                         "forward_graph.trace(model, ...) shows the ops up to the failure, fix it and time again")
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    held = [*module_scope.tensors_in((inputs, kwargs)), *model.parameters(), *model.buffers()]
    cuda = sorted({t.device.index or 0 for t in held if t.is_cuda})
    try:
        with torch.random.fork_rng(devices=cuda), stderr_capture.without_kineto_lines(), \
                profile(activities=[ProfilerActivity.CPU]) as prof, record_function(_RANGE):
            model(*inputs, **kwargs)
    finally:
        with torch.no_grad():
            for b, value in buffers:
                b.copy_(value)
    return fg, attribute_forward(fg, prof.events())


_RANGE = "node_times.forward"          # the profiled call: only the events inside it are the forward's


def attribute_forward(fg: forward_graph.ForwardGraph, events) -> ForwardTimes:
    """`events` (a profile of one forward of `fg`'s model, run without the tracer, inside a `_RANGE` range)
    given to `fg`'s ops but autograd's own detaches, which run only under the tracer (autograd_detaches):
    depth first, the next event named as the next op is that op's, and owns the events under it, unless a child
    has that name too (a composite wrapper, `aten::where` around `aten::where`: the tracer never sees below an op
    it records); an event no op owns is outside, its self time split into the gaps between its children, where it
    ran. Raises if some op is never found: the profile ran other ops."""
    hidden = forward_graph.autograd_detaches(fg)
    wanted = [op for op in fg.ops if op.id not in hidden]
    ranges = [e for e in events if e.name == _RANGE]
    top = ranges[0].cpu_children if ranges else [e for e in events if e.cpu_parent is None]
    began = min((e.time_range.start for e in top), default=0)
    timed, outside, todo = [], [], list(reversed(top))
    while todo:
        event = todo.pop()
        if len(timed) < len(wanted) and _owns(event, wanted[len(timed)].op):
            own = ((event.name, event.self_cpu_time_total),) + _ops(event)     # the op's event and those under it
            timed.append(NodeTime(wanted[len(timed)].id, event.cpu_time_total, own, event.time_range.start - began))
            continue
        outside += [(event.name, start - began, us) for start, us in _gaps(event)]
        todo.extend(reversed(event.cpu_children))
    if len(timed) < len(wanted):
        missing = wanted[len(timed)]
        raise ValueError(f"node_times: op {missing.id} ({missing.op}) is not in the profile after the "
                         f"{len(timed)} ops before it; profile one forward of the traced model on the same inputs "
                         "(a forward whose ops depend on the data or on chance can run others)")
    return ForwardTimes(tuple(timed), tuple(outside), sum(e.cpu_time_total for e in top))


def _owns(event, op: str) -> bool:
    """Whether `event` is the traced `op`'s own event: the same op, and no child of it is (else it wraps it)."""
    return _same_op(event.name, op) and not any(_same_op(child.name, op) for child in event.cpu_children)


def _gaps(event) -> list[tuple[float, float]]:
    """(start, us) of each stretch of `event` no child of it covers: where its self time was spent. Their sum is
    its self time (profiler_util.FunctionEvent.self_cpu_time_total: its time less its children's)."""
    found, at = [], event.time_range.start
    for child in sorted(event.cpu_children, key=lambda c: c.time_range.start):
        if child.time_range.start > at:
            found.append((at, child.time_range.start - at))
        at = max(at, child.time_range.end)
    if event.time_range.end > at:
        found.append((at, event.time_range.end - at))
    return found


def _same_op(event: str, op: str) -> bool:
    """Whether the profiler's `event` (aten::add_) is the traced `op` (aten.add.Tensor), an in-place op and its
    out-of-place form counted as one: under a dispatch mode a composite op takes its out-of-place branch
    (isTensorSubclassLike is true whenever a mode is on: aten/src/ATen/TensorSubclassLikeUtils.h), so the
    tracer sees `add` where the same forward without it runs `add_` (math attention adding its mask)."""
    namespace, name = op.split(".")[:2]
    traced = f"{namespace}::{name}"
    return event.rstrip("_") == traced.rstrip("_") or _ALSO.get(event) == traced


_ALSO = {"aten::_reshape_alias": "aten::view"}


def timeline(graph, times: Times) -> dict:
    """A pass on its clock, for a view's time-line (`graph_view.show(data, timeline=...)`, or
    `graph_view.show_twin(fg, ..., timeline=...)` for a forward): every node's range (or op's event) and every
    event outside them, in the order they began, each with its start, its time, its name and its node (-1: none;
    a backward's node index, a forward's op id), with string tables as memory_timeline.state has them; `span` is
    where the last one ends, the clock's length for whoever draws it. `graph` and `times` are what one
    `backward` or `forward` returned."""
    labels = view_nodes("node_times.timeline", graph, times)
    strings: dict[str, int] = {}
    slices = sorted([(t.start_us, t.us, t.node, labels[t.node]) for t in times.nodes] +
                    [(start, us, -1, name) for name, start, us in times.outside])
    span = max([start + us for start, us, _, _ in slices] + [0.0])
    return {"kind": "time", "clock": times.clock,
            "title": f"the {times.clock}'s {times.total_us:,.0f} us of events on its clock, "
                     f"{span:,.0f} us from first to last (a gap: no profiled event ran)",
            "total": times.total_us, "span": span, "start": [s[0] for s in slices], "us": [s[1] for s in slices],
            "node": [s[2] for s in slices], "name": [strings.setdefault(s[3], len(strings)) for s in slices],
            "strings": list(strings)}


def view_nodes(function: str, graph, times) -> dict[int, str]:
    """Each timed node's label; raises, naming `function`, unless `graph` and `times` are what one `backward` or
    `forward` returned. A forward's node is its op's id (graph_view.show_twin puts it on the view)."""
    if isinstance(times, ForwardTimes):
        arguments.require(function, "graph", graph, forward_graph.ForwardGraph, "node_times.forward(...)'s graph")
        labels = {op.id: forward_graph.short_name(op.op) for op in graph.ops}
    else:
        arguments.require(function, "times", times, BackwardTimes, "node_times.backward(loss)'s times, or "
                          "node_times.forward(model, x)'s")
        arguments.require(function, "graph", graph, autograd_graph.Graph, "node_times.backward(loss)'s graph")
        labels = {i: n.label for i, n in enumerate(graph.nodes)}
    if any(t.node not in labels for t in times.nodes):
        raise ValueError(f"{function}: `times` names nodes this graph does not have; give the graph and the "
                         "times one node_times.backward (or forward) call returned")
    return labels


def _ops(event) -> tuple[tuple[str, float], ...]:
    """Every aten op under `event`, depth first, with its self CPU time."""
    found, todo = [], list(reversed(event.cpu_children))
    while todo:
        child = todo.pop()
        if child.name.startswith("aten::"):
            found.append((child.name, child.self_cpu_time_total))
        todo.extend(reversed(child.cpu_children))
    return tuple(found)
