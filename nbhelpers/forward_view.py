"""A forward graph (`forward_graph.trace`) as view data, and its links to the backward graph's view: the
forward pane of `graph_view.show_twin`.

The forward pane's nodes are the model's inputs, then its ops in the order they ran; an edge carries a tensor
from the op (or input) that made it to the op that read it, labelled with the tensor's shape. An `aten.detach`
right after the op whose output it detaches, that no op reads and that made no backward node, is left out (and
counted in the title): autograd saving an op's output keeps a shallow copy of it (`tensor_data()`, SavedVariable
in torch/csrc/autograd/saved_variable.cpp), which reaches a watching dispatch mode as `aten.detach`; `exp` and
`relu` save their output and show one, `sin` saves its input and shows none, nothing does under no_grad
(tests/test_forward_graph.py). An op's details
show its inputs and outputs (shape, dtype, strides, which are views), the parameters it read, the settings of
the module that ran it (`extra_repr`), the backward node it made and what that node saved. `links` pairs each
op with the backward node it made; `saved_by` says, for each backward node, which forward nodes made the
tensors it saved (a click on either side lights them).

Example:
    fg = forward_graph.trace(model, x)
    forward, backward, pairs, saved_by = forward_view.twin(fg)
"""
from __future__ import annotations

from dataclasses import replace

from nbhelpers import forward_graph, graph_view
from nbhelpers.forward_graph import ForwardGraph, ForwardOp, TensorMeta
from nbhelpers.graph_view import GraphData, SavedRow, ViewNode

__all__ = ["twin"]


def twin(fg: ForwardGraph, times=None) -> tuple[GraphData, GraphData | None, tuple[tuple[int, int], ...],
                                                tuple[tuple[int, tuple[int, ...]], ...]]:
    """(forward view data, backward view data or None, (forward node, backward node) pairs, and for each
    backward node that saved tensors the forward nodes that made them). `times` (node_times.forward's, of this
    graph) puts each op's time and profiler events in its details, and what no op owns in the title."""
    inputs = _inputs(fg)
    node_of = node_numbers(fg)
    shown = [fg.ops[i] for i in node_of]
    backward = _backward_data(fg)
    saved = _saved_rows(fg, backward)
    timed = {t.node: t for t in times.nodes} if times is not None else {}
    nodes = [ViewNode(name, "input", tip=f"{name}: an argument of the model") for name in inputs]
    nodes += [_op_node(fg, op, saved.get(op.id, ()), timed.get(op.id), times) for op in shown]
    edges, labels = _edges(shown, inputs, node_of)
    title = _title(fg, len(fg.ops) - len(shown)) + (f"; {graph_view.time_title(times)}" if times is not None else "")
    data = GraphData(tuple(nodes), tuple(edges), (), title, "its output goes to", fg.module_types, tuple(labels),
                     clock="forward")
    pairs = tuple((node_of[op.id], node) for op in shown for node in ((op.backward,) if op.backward is not None
                                                                       else ()) + op.also)
    return data, backward, pairs, _saved_by(fg, node_of, inputs)


def node_numbers(fg: ForwardGraph) -> dict[int, int]:
    """op id -> its node in the forward view, for each op drawn (in the order they ran): after the inputs."""
    hidden = forward_graph.autograd_detaches(fg)
    shown = [op.id for op in fg.ops if op.id not in hidden]
    first = len(_inputs(fg))
    return {op: first + k for k, op in enumerate(shown)}


def _inputs(fg: ForwardGraph) -> list[str]:
    """The model's arguments that the forward read, in the order first read."""
    return list(dict.fromkeys(s.name for op in fg.ops for s in op.sources
                              if s.op is None and s.name.startswith("input ")))


def _backward_data(fg: ForwardGraph) -> GraphData | None:
    if fg.backward is None:
        return None
    data = graph_view.from_autograd(fg.backward)
    made = {op.backward for op in fg.ops} | {n for op in fg.ops for n in op.also}
    extra = [n.name for n in fg.backward.nodes if not n.is_leaf and n.id not in made]
    title = "backward: what autograd runs"
    if extra:            # several outputs: the tracer sums them into one root, ops of no forward
        title += f" (from the sum of the outputs: {', '.join(sorted(set(extra)))} are the tracer's own)"
    return replace(data, title=title)


def _title(fg: ForwardGraph, hidden: int) -> str:
    title = "forward: the ops the model ran"
    if hidden:
        title += f" ({hidden} aten.detach from autograd saving an output, not drawn)"
    return title + (f"; stopped: {_first_line(fg.error)}" if fg.error else "")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _shape(meta: TensorMeta) -> str:
    return f"[{', '.join(map(str, meta.shape))}]"


def _op_node(fg: ForwardGraph, op: ForwardOp, saved: tuple[SavedRow, ...], timing=None, times=None) -> ViewNode:
    kind = "error" if op.failed else "saves" if saved else "op"
    ins = ", ".join(f"{_shape(m)} {m.dtype}" for m in op.inputs)
    outs = ", ".join(f"{_shape(m)} {m.dtype}" for m in op.outputs) or "nothing: it raised"
    label = forward_graph.short_name(op.op)
    return ViewNode(label, kind, op.modules, saved, op.op, tip=f"{label}: {ins} -> {outs}",
                    notes=_notes(fg, op), measured=graph_view.time_rows(timing, times),
                    share=times.share(timing) if timing else 0.0)


def _notes(fg: ForwardGraph, op: ForwardOp) -> tuple[tuple[str, str], ...]:
    rows = [("input", _tensor_text(m) + (f" from {s.name}" if s.op is None else ""))
            for m, s in zip(op.inputs, op.sources)]
    rows += [("output", _tensor_text(m) + (f", a view of input {v}" if v is not None else ""))
             for m, v in zip(op.outputs, op.views)]
    rows += [("writes", f"input {i} in place") for i in op.mutates]
    settings = dict(fg.settings).get(op.module)
    if settings:
        rows.append(("module settings", settings))
    if op.backward is not None and fg.backward is not None:
        made = [fg.backward.nodes[n].name for n in (op.backward, *op.also)]
        rows.append(("made", ", ".join(made) + " (selected on the right)"))
    elif fg.error is not None and not op.failed:
        rows.append(("made", "not linked: the forward raised before it returned an output, so there is no "
                             "backward graph to link to"))
    elif not op.failed:
        rows.append(("made", "no backward node: none of its inputs needs a gradient, or what it returns has none "
                             "(integers, indices, a fresh empty tensor)"))
    if op.failed and fg.error is not None:
        rows.append(("error", _first_line(fg.error)))
    return tuple(rows)


def _tensor_text(m: TensorMeta) -> str:
    return f"{_shape(m)} {m.dtype} stride {tuple(m.stride)}"


def _edges(shown: list[ForwardOp], inputs: list[str], node_of: dict[int, int]) -> tuple[list, list]:
    edges, labels = [], []
    for op in shown:
        for meta, source in zip(op.inputs, op.sources):
            if source.op is not None and source.op in node_of:
                edges.append((node_of[source.op], node_of[op.id]))
            elif source.op is None and source.name in inputs:
                edges.append((inputs.index(source.name), node_of[op.id]))
            else:
                continue                                    # a parameter or buffer: in the op's details
            labels.append(_shape(meta))
    return edges, labels


def _saved_rows(fg: ForwardGraph, backward: GraphData | None) -> dict[int, tuple[SavedRow, ...]]:
    """op id -> the saved tensors of the backward node it made (the same rows, the same storage ids)."""
    if backward is None:
        return {}
    return {op.id: backward.nodes[op.backward].saved for op in fg.ops if op.backward is not None}


def _saved_by(fg: ForwardGraph, node_of: dict[int, int], inputs: list[str]) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """For each backward node an op made that saved tensors: the forward nodes whose tensors it saved (the
    op's own output, or the op or input each saved input came from), matched by storage while the op ran (all
    alive then, so no address is a reused one). An in-place op's written input shares its output's storage but
    was overwritten: it lights only the op itself (a saved original would have been cloned, another storage)."""
    if fg.backward is None:
        return ()
    found = []
    for op in fg.ops:
        if op.backward is None or op.id not in node_of:
            continue
        ptrs = {s.storage_ptr for s in fg.backward.nodes[op.backward].saved if s.storage_ptr}
        lit = {node_of[op.id] for m in op.outputs if m.storage_ptr in ptrs}
        for k, (m, source) in enumerate(zip(op.inputs, op.sources)):
            if m.storage_ptr in ptrs and k not in op.mutates:    # what an in-place op wrote over is not saved
                if source.op is not None and source.op in node_of:
                    lit.add(node_of[source.op])
                elif source.name in inputs:
                    lit.add(inputs.index(source.name))
        if lit:
            found.append((op.backward, tuple(sorted(lit))))
    return tuple(found)
