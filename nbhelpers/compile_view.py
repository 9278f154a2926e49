"""What torch.compile and torch.export built, as graph_view data: the pictures of `compile_lens` reports and
of ExportedPrograms (`compile_lens` records; this module only turns its records into nodes and edges).

Example:
    graph_view.show(compile_view.from_report(compile_lens.capture(fn, x)))
    graph_view.show(compile_view.from_calls(compile_lens.capture_calls(fn, [x, y, z])))
    graph_view.show(compile_view.from_exported(torch.export.export(model, (x,))))
"""
from __future__ import annotations

import torch

from nbhelpers import arguments
from nbhelpers.compile_report import CompileReport
from nbhelpers.graph_view import GraphData, ViewNode

__all__ = ["from_report", "from_calls", "from_exported"]


def from_report(report: CompileReport) -> GraphData:
    """The report as a graph_view.GraphData: source lines, FX graphs (one module box each, with the breaks
    between them, and AOTAutograd's forward and backward graphs as boxes inside), and kernels. An edge runs
    from a line to the FX nodes it made, from an FX node to each node that uses its value, from a Dynamo node
    to the ATen ops AOTAutograd made from it, from an FX node to the kernel that computes it, and from a
    graph through the break that ended it to the next graph. A click
    lights up a node's links: a line's FX nodes, kernels and breaks; a kernel's FX nodes and their lines;
    an FX node's line and kernel. A break's panel shows its code, explanation and hints."""
    arguments.require("compile_view.from_report", "report", report, CompileReport,
                      "a CompileReport, such as compile_lens.capture(fn, *args)")
    view = _Linked()
    made = [n.line for g in report.graphs for n in g.nodes] + [b.line for b in report.breaks]
    for line in dict.fromkeys(line for line in made if line):
        view.add(("line", line), line, "line", ())     # in no box: lines, breaks and kernels always show
    _add_fx_graphs(view, report)
    _add_breaks(view, report)
    _add_kernels(view, report)
    kinds = {"": "Dynamo FX graph", ".AOTAutograd forward": "ATen ops", ".AOTAutograd backward": "ATen ops"}
    types = tuple((f"graph {k} (entry {g.entry}){part}", kind) for k, g in enumerate(report.graphs)
                  for part, kind in kinds.items())
    return view.data(title="torch.compile, as built", targets_label="leads to", module_types=types)


class _Linked:
    """View nodes under keys, in the order added, with edges (drawn) and links (lit up together on a click)."""

    def __init__(self):
        self.nodes: dict[tuple, dict] = {}
        self.edges: list[tuple[tuple, tuple]] = []

    def add(self, key, label, kind, group, op="", notes=()):
        self.nodes[key] = {"label": label, "kind": kind, "group": group if isinstance(group, tuple) else (group,),
                           "op": op, "notes": tuple(notes), "links": set()}

    def link(self, a, b, drawn: bool = False):          # both ways: each lights the other up
        self.nodes[a]["links"].add(b)
        self.nodes[b]["links"].add(a)
        if drawn:
            self.edges.append((a, b))

    def data(self, **labels) -> GraphData:
        index = {key: i for i, key in enumerate(self.nodes)}
        view_nodes = tuple(ViewNode(v["label"], v["kind"], v["group"], op=v["op"], notes=v["notes"],
                                    links=tuple(sorted(index[k] for k in v["links"])))
                           for v in self.nodes.values())
        return GraphData(view_nodes, tuple(dict.fromkeys((index[a], index[b]) for a, b in self.edges)), **labels)


def _add_fx_graphs(view: _Linked, report: CompileReport) -> None:
    """Each Dynamo graph as a module box of its nodes, with an edge from each value to its users; inside it,
    AOTAutograd's forward and backward graphs (ATen ops) as boxes of their own, each node linked to the
    Dynamo node it was made from (and drawn below it)."""
    for k, graph in enumerate(report.graphs):
        box = f"graph {k} (entry {graph.entry})"
        _add_fx_nodes(view, graph.nodes, (k,), (box,))
        for n in graph.nodes:
            if n.line:
                view.link(("line", n.line), (k, n.name), drawn=True)
        for part, nodes in (("AOTAutograd forward", graph.forward), ("AOTAutograd backward", graph.backward)):
            _add_fx_nodes(view, nodes, (k, part), (box, f"{box}.{part}"))
            for n in nodes:
                if (k, n.source) in view.nodes:          # a backward input: the forward value it saved
                    view.link((k, n.source), (k, part, n.name), drawn=True)


def _add_fx_nodes(view: _Linked, nodes, prefix: tuple, group: tuple[str, ...]) -> None:
    for n in nodes:
        view.add((*prefix, n.name), f"{n.name}: {n.target}" if n.op == "call_function" else n.name, "op",
                 group, f"{n.op} {n.shape}".strip(), [("module", n.module)] if n.module else ())
        view.edges += [((*prefix, a), (*prefix, n.name)) for a in n.inputs]


def _add_breaks(view: _Linked, report: CompileReport) -> None:
    for b in report.breaks:
        key = ("break", b.code, b.line)
        view.add(key, f"break {b.code}: {b.line}", "break", (), f"{b.gb_type} (x{b.count})",
                 [("code", b.code), ("explanation", b.explanation), *(("hint", h) for h in b.hints),
                  *([("inside", b.where)] if b.where else []),
                  ("explain lists it", "yes" if b.in_explain else "no: the graph before it was empty")])
        if ("line", b.line) in view.nodes:
            view.link(key, ("line", b.line))
        view.edges += _between(report, b.entry, key)


def _add_kernels(view: _Linked, report: CompileReport) -> None:
    for kernel in report.kernels:
        key = ("kernel", kernel.name)
        view.add(key, kernel.name, "kernel", (), "inductor kernel",
                 [("fuses", ", ".join(kernel.fx_nodes)),
                  ("source", "\n".join(kernel.source.strip().splitlines()[:60]))])
        for name in kernel.fx_nodes:
            view.link((0, name), key, drawn=True)
            line = next(n.line for n in report.graphs[0].nodes if n.name == name)
            if line:
                view.link(key, ("line", line))


def _between(report: CompileReport, entry: str, key: tuple) -> list:
    """Edges that draw a break between the graph its entry built (none if that graph was empty) and the
    next graph compiled after it (entries are in the order Dynamo started them)."""
    when = {e.id: t for t, e in enumerate(report.entries)}
    edges = [((k, g.nodes[-1].name), key) for k, g in enumerate(report.graphs) if g.entry == entry]
    later = [k for k, g in enumerate(report.graphs) if when.get(g.entry, -1) > when.get(entry, -1)]
    if later:
        edges.append((key, (later[0], report.graphs[later[0]].nodes[0].name)))   # its first input
    return edges


def from_calls(report: CompileReport, labels=None) -> GraphData:
    """Recompiles as a picture: one box per call (in call order, labelled by `labels`, else "call k"), an
    edge to each entry that call compiled (with the graphs it built), and for a recompile, each earlier
    entry's failed guard drawn between that entry and the new one. A call that compiled nothing reused an
    entry (its panel says so)."""
    arguments.require("compile_view.from_calls", "report", report, CompileReport,
                      "a CompileReport from compile_lens.capture_calls(fn, calls)")
    calls = 1 + max((e.call for e in report.entries), default=-1)
    labels = [f"call {k}" for k in range(calls)] if labels is None else list(labels)
    if len(labels) < calls or not all(isinstance(label, str) for label in labels):
        raise ValueError(f"compile_view.from_calls: `labels` must name each of the {calls} calls with a str; got "
                         f"{arguments.given(labels)}")
    view = _Linked()
    for k, label in enumerate(labels):
        compiled = [e.id for e in report.entries if e.call == k]
        view.add(("call", k), label, "call", (), "call",
                 [("compiled", ", ".join(compiled) if compiled else "nothing: an entry's guards passed, it ran")])
    for e in report.entries:
        _add_entry(view, report, e)
    return view.data(title="torch.compile, call by call", targets_label="leads to")


def _add_entry(view: _Linked, report: CompileReport, e) -> None:
    graphs = [k for k, g in enumerate(report.graphs) if g.entry == e.id]
    view.add(("entry", e.id), f"entry {e.id}: {e.function}", "entry", (), f"{len(e.guards)} guards",
             [("graph", f"graph {k}: {len(report.graphs[k].nodes)} FX nodes") for k in graphs]
             + [("guard", g.check) for g in e.guards[:40]])
    view.link(("call", e.call), ("entry", e.id), drawn=True)
    for reason in e.failed:
        failed_id, _, why = reason.partition(": ")
        key = ("failed", e.id, reason)
        view.add(key, f"{failed_id} failed: {why}", "guard", (), "guard failed", [("guard", why)])
        if ("entry", failed_id) in view.nodes:
            view.link(("entry", failed_id), key, drawn=True)
        view.link(key, ("entry", e.id), drawn=True)


def from_exported(program) -> GraphData:
    """An ExportedProgram's graph as graph_view data: its inputs (parameters and buffers, which export
    lifts to graph inputs, and the user's inputs with their symbolic sizes' ranges) and its ATen ops; an
    edge runs from a value to each node that uses it."""
    signature = program.graph_signature
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    ranges = {str(symbol): f"{r.lower}..{r.upper}" for symbol, r in program.range_constraints.items()}
    nodes, index = [], {}
    for n in program.graph.nodes:
        value = n.meta.get("val")
        shape = [str(d) for d in value.shape] if isinstance(value, torch.Tensor) else []
        where = ", ".join(f"{d} in {ranges[d]}" for d in shape if d in ranges)
        if n.op == "placeholder":
            label = f"{'parameter' if n.name in signature.inputs_to_parameters else 'buffer'} {lifted[n.name]}" \
                if n.name in lifted else f"input {n.name} [{', '.join(shape)}]" + (f" ({where})" if where else "")
            node = ViewNode(label, "input", ("inputs",))
        else:
            target = getattr(n.target, "__name__", str(n.target))
            node = ViewNode(f"{n.name}: {target} [{', '.join(shape)}]" if shape else f"{n.name}: {target}",
                            "op", ("graph",))
        index[n] = len(nodes)
        nodes.append(node)
    edges = tuple((index[a], index[n]) for n in program.graph.nodes for a in n.all_input_nodes)
    return GraphData(tuple(nodes), edges, title="torch.export", targets_label="used by")
