"""A forward graph (`forward_graph.trace`) as view data, and its links to the backward graph's view: the
forward pane of `graph_view.show_twin`.

The forward pane's nodes are the model's inputs, then its ops in the order they ran; an edge carries a tensor
from the op (or input) that made it to the op that read it, labelled with the tensor's shape. An `aten.detach`
that no op reads and that made no backward node is left out (and counted in the title): autograd runs one
while it records an op that saves its output, and none under no_grad (tests/test_forward_graph.py). An op's details
show its inputs and outputs (shape, dtype, strides, which are views), the parameters it read, the settings of
the module that ran it (`extra_repr`), the backward node it made and what that node saved. `links` pairs each
op with the backward node it made; `saved_by` says, for each backward node, which forward nodes made the
tensors it saved (a click on either side lights them).

Example:
    fg = forward_graph.trace(model, x)
    data, pairs, saved_by = forward_view.twin(fg)
"""
from __future__ import annotations

from nbhelpers import graph_view
from nbhelpers.forward_graph import ForwardGraph, ForwardOp, TensorMeta
from nbhelpers.graph_view import GraphData, SavedRow, ViewNode

__all__ = ["twin"]


def twin(fg: ForwardGraph) -> tuple[GraphData, GraphData | None, tuple[tuple[int, int], ...],
                                    tuple[tuple[int, tuple[int, ...]], ...]]:
    """(forward view data, backward view data or None, (forward node, backward node) pairs, and for each
    backward node that saved tensors the forward nodes that made them)."""
    inputs = sorted({s.name for op in fg.ops for s in op.sources if s.op is None and s.name.startswith("input ")},
                    key=lambda name: int(name.split()[1]))
    shown = [op for op in fg.ops if not _autograd_detach(op, fg)]
    node_of = {op.id: len(inputs) + k for k, op in enumerate(shown)}
    backward = graph_view.from_autograd(fg.backward) if fg.backward is not None else None
    saved = _saved_rows(fg, backward)
    nodes = [ViewNode(name, "input", tip=f"{name}: the model's argument") for name in inputs]
    nodes += [_op_node(fg, op, saved.get(op.id, ())) for op in shown]
    edges, labels = _edges(shown, inputs, node_of)
    data = GraphData(tuple(nodes), tuple(edges), (), _title(fg, len(fg.ops) - len(shown)), "its output goes to",
                     fg.module_types, tuple(labels))
    pairs = tuple((node_of[op.id], node) for op in shown for node in ((op.backward,) if op.backward is not None
                                                                       else ()) + op.also)
    return data, backward, pairs, _saved_by(fg, node_of, inputs)


def _autograd_detach(op: ForwardOp, fg: ForwardGraph) -> bool:
    """An aten.detach no op reads, which made no backward node: autograd's own, recording an op."""
    return (op.op == "aten.detach.default" and op.backward is None
            and not any(s.op == op.id for later in fg.ops[op.id + 1:] for s in later.sources))


def _title(fg: ForwardGraph, hidden: int) -> str:
    title = "forward: the ops the model ran"
    if hidden:
        title += f" ({hidden} detach op{'s' if hidden != 1 else ''} autograd ran while recording, not drawn)"
    return title + (f"; stopped: {_first_line(fg.error)}" if fg.error else "")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def _short(op: str) -> str:
    """aten.addmm.default -> addmm; aten.add.Tensor -> add.Tensor (the overload, when it says something)."""
    name = op.removeprefix("aten.")
    return name.removesuffix(".default")


def _shape(meta: TensorMeta) -> str:
    return f"[{', '.join(map(str, meta.shape))}]"


def _op_node(fg: ForwardGraph, op: ForwardOp, saved: tuple[SavedRow, ...]) -> ViewNode:
    kind = "error" if op.failed else "saves" if saved else "op"
    ins = ", ".join(f"{_shape(m)} {m.dtype}" for m in op.inputs)
    outs = ", ".join(f"{_shape(m)} {m.dtype}" for m in op.outputs) or "nothing: it raised"
    return ViewNode(_short(op.op), kind, op.modules, saved, op.op, tip=f"{_short(op.op)}: {ins} -> {outs}",
                    notes=_notes(fg, op))


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
    elif not op.failed:
        rows.append(("made", "no backward node (no input needs a gradient, or a view autograd does not record)"))
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
    op's own output, or the op or input each saved input came from), matched by storage while the op ran."""
    if fg.backward is None:
        return ()
    found = []
    for op in fg.ops:
        if op.backward is None or op.id not in node_of:
            continue
        ptrs = {s.storage_ptr for s in fg.backward.nodes[op.backward].saved if s.storage_ptr}
        lit = {node_of[op.id] for m in op.outputs if m.storage_ptr in ptrs}
        for m, source in zip(op.inputs, op.sources):
            if m.storage_ptr in ptrs:
                if source.op is not None and source.op in node_of:
                    lit.add(node_of[source.op])
                elif source.name in inputs:
                    lit.add(inputs.index(source.name))
        if lit:
            found.append((op.backward, tuple(sorted(lit))))
    return tuple(found)
