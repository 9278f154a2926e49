"""Where one backward pass spends its time, node by node: the profiler's events given to the autograd nodes that
ran them, and what no node owns named as such.

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
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from nbhelpers import arguments, autograd_graph, stderr_capture

__all__ = ["NodeTime", "BackwardTimes", "backward", "timeline"]

RANGE = "autograd::engine::evaluate_function: "


@dataclass(frozen=True)
class NodeTime:
    node: int                                  # an index into the Graph's nodes
    us: float                                  # its range's total CPU time, microseconds
    ops: tuple[tuple[str, float], ...]         # the aten ops it ran, each with its own (self) CPU time
    start_us: float = 0.0                      # when its range began, after the backward's first event began


@dataclass(frozen=True)
class BackwardTimes:
    nodes: tuple[NodeTime, ...]                # in the order they ran
    outside: tuple[tuple[str, float, float], ...]   # each event outside every node's range: (name, start_us, us)
    total_us: float                            # every top-level event of the backward, owned or not

    @property
    def unowned(self) -> tuple[tuple[str, float], ...]:
        """What ran outside every node's range, by event name: (name, us), in the order first seen."""
        by_name: Counter = Counter()
        for name, _, us in self.outside:
            by_name[name] += us
        return tuple(by_name.items())

    def share(self, node_time: NodeTime) -> float:
        return node_time.us / self.total_us if self.total_us else 0.0


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


def timeline(graph: autograd_graph.Graph, times: BackwardTimes) -> dict:
    """The backward on its clock, for a view's time-line (`graph_view.show(data, timeline=...)`): every node's
    range and every event outside them, in the order they began, each with its start, its time, its name and
    the node it belongs to (-1: none), with string tables as memory_timeline.state has them; `span` is where the
    last one ends, the clock's length for whoever draws it."""
    arguments.require("node_times.timeline", "graph", graph, autograd_graph.Graph, "node_times.backward(loss)'s graph")
    arguments.require("node_times.timeline", "times", times, BackwardTimes, "node_times.backward(loss)'s times")
    if any(t.node >= len(graph.nodes) for t in times.nodes):
        raise ValueError("node_times.timeline: `times` names nodes this graph does not have; give the graph and the "
                         "times one node_times.backward call returned")
    strings: dict[str, int] = {}
    slices = sorted([(t.start_us, t.us, t.node, graph.nodes[t.node].label) for t in times.nodes] +
                    [(start, us, -1, name) for name, start, us in times.outside])
    span = max([start + us for start, us, _, _ in slices] + [0.0])
    return {"kind": "time", "title": f"the backward's {times.total_us:,.0f} us of events on its clock, "
                                     f"{span:,.0f} us from first to last (a gap: no profiled event ran)",
            "total": times.total_us, "span": span, "start": [s[0] for s in slices], "us": [s[1] for s in slices],
            "node": [s[2] for s in slices], "name": [strings.setdefault(s[3], len(strings)) for s in slices],
            "strings": list(strings)}


def _ops(event) -> tuple[tuple[str, float], ...]:
    """Every aten op under `event`, depth first, with its self CPU time."""
    found, todo = [], list(reversed(event.cpu_children))
    while todo:
        child = todo.pop()
        if child.name.startswith("aten::"):
            found.append((child.name, child.self_cpu_time_total))
        todo.extend(reversed(child.cpu_children))
    return tuple(found)
