"""A graph you can click, in JupyterLab, in the offline static site, and as a picture everywhere else.

Data in, a widget out: `GraphData` holds nodes (label, kind, module chain, the rows its details panel
shows, saved bytes, storage identities) and edges; `show(data)` returns an anywidget whose front-end,
`graph_view.js` (hand-written, no dependencies), draws it and handles clicks, hovers, search, expanding
and collapsing one module at a time, pan and zoom, the keyboard, and a backward stepper, with no kernel
round trip. Which boxes a view draws is `graph_boxes` (Python) and the same code in graph_view.js; where
they go is `graph_layout`, ported line for line to graph_layout.js, so the browser lays out whatever the
learner opens and a test proves both give the same numbers. The state a notebook stores is the graph only
(no layouts), deflated and decoded in the browser with `DecompressionStream`.

The first view opens the modules that keep it legible (`graph_boxes.first_expansion`); a click on a module
box opens that module alone, and the details panel's module path collapses any module around a node. The
widget's mime bundle also carries the current view as SVG, with a legend, so GitHub, nbconvert, strict
nbval and an untrusted notebook show (and compare) the picture. Names from user code are data: the
front-end puts them in with `textContent`, never as HTML.

Example:
    with module_scope.record():
        loss = model(x).sum()
    graph_view.show(graph_view.from_autograd(autograd_graph.trace(loss, module=model)))
"""
from __future__ import annotations

import base64
import functools
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

from nbhelpers import arguments, graph_boxes, graph_folds, graph_layout, node_times
from nbhelpers.autograd_graph import Graph
from nbhelpers.graph_boxes import View, render_svg
from nbhelpers.module_scope import OUTSIDE

__all__ = ["SavedRow", "ViewNode", "GraphData", "from_autograd", "view", "details", "render_svg", "show",
           "show_diff", "show_twin"]                        # view() returns a graph_boxes.View (of Boxes and Routes)

_HERE = Path(__file__).parent
_ESM_FILES = tuple(_HERE / f for f in ("graph_layout.js", "graph_view.js", "memory_timeline.js",  # one module
                                        "graph_view_dom.js"))


@dataclass(frozen=True)
class SavedRow:
    """One tensor a node keeps for backward, as the panel shows it."""

    attr: str                                  # e.g. "_saved_mat1"
    shape: tuple[int, ...]
    dtype: str                                 # "float32"; for a hook's packed object, its type name
    nbytes: int
    storage: int                               # a small id, equal for tensors sharing memory; -1: no tensor held
    version: int


@dataclass(frozen=True)
class ViewNode:
    label: str
    kind: str                                  # "op", "leaf" (writes a .grad), "saves" (keeps tensors), and for
                                               # other graphs "input", "line" (of source), "break", "kernel"
    group: tuple[str, ...] = ()                # the modules running when it was made, outermost first
    saved: tuple[SavedRow, ...] = ()
    op: str = ""                               # for a leaf, the node's op (its title is the parameter)
    mark: str = ""                             # in a diff: "added", "removed" or "changed"
    links: tuple[int, ...] = ()                # the nodes a click on it lights up (what it became, or came from)
    notes: tuple[tuple[str, str], ...] = ()    # more (field, text) rows for its details panel
    tip: str = ""                              # what hovering shows; "" shows the label
    measured: tuple[tuple[str, str], ...] = ()  # panel rows of what was measured (a node's time): not its
                                               # structure, so graph_folds never compares them
    share: float = 0.0                         # its share of the measured time (node_times): the bar under its
                                               # box; 0 when nothing was timed

    @property
    def saved_bytes(self) -> int:
        return sum(s.nbytes for s in self.saved)

    @property
    def storages(self) -> tuple[int, ...]:     # small ids in first-seen order; equal ids share memory
        return tuple(s.storage for s in self.saved if s.storage >= 0)


@dataclass(frozen=True)
class GraphData:
    nodes: tuple[ViewNode, ...]
    edges: tuple[tuple[int, int], ...]         # (from, to): gradients flow from -> to
    order: tuple[int, ...] = ()                # what the stepper walks (backward's order)
    title: str = ""
    targets_label: str = "gradients to"        # what an edge means, in the details panel
    module_types: tuple[tuple[str, str], ...] = ()   # (module path, class name): "layer1 · Sequential"
    edge_labels: tuple[str, ...] = ()          # one per edge, drawn on it (a forward graph's tensor shapes), or none
    clock: str = "backward"                    # the pass a node's `share` is of: "backward", "forward"


def from_autograd(graph: Graph, times=None) -> GraphData:
    """A backward graph as view data: each node's op, saved tensors, where its gradients go; with `times` (a
    node_times.BackwardTimes of this graph) each node's time and profiler events in its details, and what no node
    owns in the title."""
    arguments.require("graph_view.from_autograd", "graph", graph, Graph,
                      "an autograd_graph.Graph (autograd_graph.trace(loss))")
    if times is not None:
        arguments.require("graph_view.from_autograd", "times", times, node_times.BackwardTimes,
                          "a node_times.BackwardTimes of the same graph (node_times.backward(loss)), or None")
    timed = {t.node: t for t in times.nodes} if times is not None else {}
    storage_ids: dict[int, int] = {}
    nodes = []
    for n in graph.nodes:
        saved = tuple(SavedRow(s.attr, s.shape, str(s.dtype).replace("torch.", ""), s.nbytes,
                               storage_ids.setdefault(s.storage_ptr, len(storage_ids)), s.version) if not s.packed
                      else SavedRow(s.attr, (), s.packed, 0, -1, 0) for s in n.saved)   # a hook's object: no storage
        group = n.modules
        kind = "leaf" if n.is_leaf else "saves" if n.saved else "op"
        fills = (("fills", f"{n.label}.grad {list(n.shape)}"),) if n.is_leaf else ()
        timing = timed.get(len(nodes))
        nodes.append(ViewNode(n.label, kind, group, saved, n.name if n.is_leaf else "", notes=fills,
                              measured=time_rows(timing, times), share=times.share(timing) if timing else 0.0))
    return GraphData(tuple(nodes), tuple((e.src, e.dst) for e in graph.edges), graph.order,
                     title=time_title(times) if times is not None else "", module_types=graph.module_types)


def time_rows(timed, times) -> tuple[tuple[str, str], ...]:
    """A node's (or op's) time and share of its pass, and its aten ops by self time (the costliest first); none
    for a node not timed."""
    if timed is None:
        return ()
    ops = sorted(timed.ops, key=lambda op: -op[1])
    return (("time", f"{timed.us:,.0f} us, {times.share(timed):.1%} of the {times.clock}"),
            ("profiler events", ", ".join(f"{name} {us:,.0f} us" for name, us in ops) or "none"))


def time_title(times) -> str:
    """The pass's total, and what the profiler saw outside every node (or op)."""
    outside = ", ".join(f"{name} {us:,.0f} us" for name, us in times.unowned) or "nothing"
    return f"{times.clock} {times.total_us:,.0f} us; outside every {times.unit}: {outside}"


def details(data: GraphData, node: int) -> tuple[tuple[str, str], ...]:
    """What the panel shows for `node`, as (field, text) rows; graph_view.js formats them the same way
    (a test compares the two in a browser)."""
    _check_node("graph_view.details", "node", node, len(data.nodes))
    n = data.nodes[node]
    rows = [("op", n.op)] if n.op else []
    rows.append(("module", n.group[-1] if n.group else OUTSIDE))
    rows += graph_folds.copy_rows(graph_folds.folds(data), n.group)      # which copy, when it is in a fold
    rows += [("saved", f"{s.attr} [{', '.join(map(str, s.shape))}] {s.dtype} {s.nbytes:,} B storage #{s.storage} "
                       f"version {s.version}"
              if s.storage >= 0 else f"{s.attr} packed by a saved-tensor hook as {s.dtype}: no tensor held")
             for s in n.saved]
    labels = [data.nodes[t].label for t in _targets(data)[node]]
    rows.append((data.targets_label, ", ".join(labels) if labels else "none"))
    if n.mark:
        rows.append(("diff", n.mark))
    rows += n.notes
    rows += n.measured
    if n.links:
        rows.append(("lights up", f"{len(n.links)} linked nodes"))
    return tuple(rows)


def _targets(data: GraphData) -> list[list[int]]:
    """Where each node's edges go (its gradients, in a backward graph), in edge order."""
    targets: list[list[int]] = [[] for _ in data.nodes]
    for s, d in data.edges:
        targets[s].append(d)
    return targets


def view(data: GraphData, expanded=None) -> View:
    """The boxes and edges with the modules in `expanded` (paths) open, laid out; None opens what the
    widget's first view opens (`graph_boxes.first_expansion`: legible at a notebook's width)."""
    return _view("graph_view.view", data, expanded)


def _view(function: str, data, expanded) -> View:
    check(data, function, "data")
    if expanded is not None and (isinstance(expanded, str) or not hasattr(expanded, "__iter__")
                                 or not all(isinstance(p, str) for p in expanded)):
        raise TypeError(f"{function}: `expanded` must be module paths (a set or list of str), such as "
                        f"{{'ResNet', 'ResNet.layer1'}}; got {arguments.given(expanded)}")
    info = graph_boxes.module_info(data)               # once: the first view's trial layouts use it too
    found = graph_folds.folds(data)                    # once: both need them
    opened = graph_boxes.first_expansion(data, info, found=found) if expanded is None else frozenset(expanded)
    return graph_boxes.view(data, opened, info, found)


def _state(data: GraphData, expanded: frozenset[str], info: dict | None = None) -> dict:
    """The widget's `graph` trait, before it is deflated: the graph, not its layouts (graph_view.js lays
    out what is opened). `modules` lists each chain of modules that ran once, as [path, index of the entry
    it ran in or -1, class name, "N nodes · B saved"] (a module shared by two parents is listed under
    each); a node is [label, kind, index of its innermost module's entry or -1, saved, targets, op, mark,
    links, notes, tip, the label of each target's edge, measured, share] (a saved tensor's attr without its
    "_saved_" prefix);
    its targets are its edges."""
    chains, entries = _module_entries(data, graph_boxes.module_info(data) if info is None else info)
    labels = _target_labels(data)
    return {"modules": entries,
            "nodes": [[n.label, n.kind, chains[n.group] if n.group else -1,
                       [[s.attr.removeprefix("_saved_"), list(s.shape), s.dtype, s.nbytes, s.storage, s.version]
                        for s in n.saved],
                       targets, n.op, n.mark, list(n.links), [list(r) for r in n.notes], n.tip, edge_labels,
                       [list(r) for r in n.measured], n.share]
                      for n, targets, edge_labels in zip(data.nodes, _targets(data), labels)],
            "order": list(data.order), "title": data.title, "targets_label": data.targets_label, "clock": data.clock,
            "expanded": sorted(expanded)}


def _module_entries(data: GraphData, info: dict) -> tuple[dict[tuple[str, ...], int], list]:
    """Every chain prefix of the nodes' modules once (a shared module has two), and the state's entries."""
    chains: dict[tuple[str, ...], int] = {}
    entries = []
    for n in data.nodes:
        for k in range(len(n.group)):
            if n.group[:k + 1] not in chains:
                chains[n.group[:k + 1]] = len(entries)
                path = n.group[k]
                entries.append([path, chains[n.group[:k]] if k else -1, info[path].kind, info[path].summary])
    return chains, entries


def _target_labels(data: GraphData) -> list[list[str]]:
    """Per node, the label of each of its edges, in the order of its targets ([] when edges have none)."""
    labels: list[list[str]] = [[] for _ in data.nodes]
    for (s, _), label in zip(data.edges, data.edge_labels):
        labels[s].append(label)
    return labels


def _text(state: dict) -> str:
    """Deflated JSON in base64: a quarter of the text, inflated by the browser's DecompressionStream."""
    return _pack(json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode())


def _untext(text: str) -> dict:
    """What graph_view.js decodes from the trait (for tests and for reading a stored view)."""
    return json.loads(_unpack(text))


def _pack(raw: bytes) -> str:
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)      # raw deflate: DecompressionStream("deflate-raw")
    return base64.b64encode(packer.compress(raw) + packer.flush()).decode("ascii")


def _unpack(text: str) -> bytes:
    return zlib.decompress(base64.b64decode(text), -15)


def show(data: GraphData, selected: int | None = None, expanded=None, *, timeline: dict | None = None):
    """The widget (anywidget): click, hover, search, expand and collapse one module, pan and zoom, the
    keyboard, and a backward stepper. `expanded` (module paths) is what it opens with; None: the first
    legible view. `timeline` (a memory_timeline.state, or a node_times.timeline, whose `node`s are `data`'s) is
    drawn above the graph: a click on it selects the node that holds the bytes, or whose range the slice is;
    selecting a node outlines its ops or slices there.

    `selected`, `step` and `expanded` are traits: a later cell reads what the learner clicked and opened.
    """
    traits, sides = _show_traits(data, selected, expanded, timeline)
    widget = _widget_class()(**traits)
    widget._sides = sides
    return _with_picture_above(widget, timeline)


def _with_picture_above(widget, timeline: dict | None):
    """The widget with its timeline's still picture above the graph's, for where widgets don't run."""
    if timeline:
        from nbhelpers import memory_timeline
        widget._above = memory_timeline.render_svg(timeline)
    return widget


def traits(data: GraphData, selected: int | None = None, expanded=None, *, timeline: dict | None = None) -> dict:
    """The traits `show` gives its widget (graph, other, selected, step, expanded, timeline), as a page without a
    kernel keeps them, and no widget made: a widget made in a kernel is stored with the notebook."""
    return {"other": "", "step": -1, **_show_traits(data, selected, expanded, timeline)[0]}


def _show_traits(data, selected, expanded, timeline) -> tuple[dict, tuple]:
    shown = _view("graph_view.show", data, expanded)
    if selected is not None:
        _check_node("graph_view.show", "selected", selected, len(data.nodes))
    return ({"graph": _text(_state(data, shown.expanded)), "expanded": sorted(shown.expanded),
             "selected": -1 if selected is None else selected, "timeline": _text(timeline) if timeline else ""},
            ((data, shown),))


def show_diff(d, titles: tuple[str, str] | None = None):
    """The two graphs of a `graph_diff.GraphDiff` side by side, titled (`titles`, else each graph's own
    title, else "a" and "b"), added, removed and changed nodes outlined; a node selected on one side is
    selected on the other where the diff matched it."""
    if not all(isinstance(getattr(d, side, None), GraphData) for side in ("a", "b")):
        raise TypeError(f"graph_view.show_diff: `d` must be a graph_diff.GraphDiff, such as graph_diff.diff(a, b); "
                        f"got {arguments.given(d)}")
    sides, states = _panes((d.a, d.b))
    for state, name in zip(states, _titles(d, titles)):
        state["title"] = name
    states[1]["matched"] = [list(pair) for pair in d.matched]
    return _paned_widget(sides, states)


def show_twin(fg, expanded=None, *, times=None, timeline: dict | None = None):
    """The forward graph (`forward_graph.trace`) beside the backward graph it built, linked node for node: a
    click on a forward op selects the backward node it made, and lights the forward ops whose tensors that node
    saved; a click on a backward node selects the op that made it. Edges of the forward graph carry the
    tensors' shapes; hovering shows an op's shapes. A forward that raised is drawn alone, up to the failing op
    (in red), its error in the title. `expanded` (module paths) opens the same modules on both sides.
    `times` (node_times.forward's, of `fg`) bars each forward op by its share of the forward and lists its
    profiler events; `timeline` (node_times.timeline(fg, times)) is drawn above: a click on a slice selects its
    op, selecting an op outlines its slice."""
    timeline = _on_forward_view(fg, timeline)
    return _with_picture_above(_paned_widget(*_twin_panes(fg, expanded, times), timeline), timeline)


def twin_traits(fg, expanded=None, *, times=None, timeline: dict | None = None) -> dict:
    """The traits `show_twin` gives its widget, with no widget made (see `traits`)."""
    sides, states = _twin_panes(fg, expanded, times)
    timeline = _on_forward_view(fg, timeline)
    return {"graph": _text(states[0]), "other": _text(states[1]) if len(states) > 1 else "", "selected": -1,
            "step": -1, "expanded": sorted(sides[0][1].expanded), "timeline": _text(timeline) if timeline else ""}


def _on_forward_view(fg, timeline: dict | None) -> dict | None:
    """A forward's time-line (node_times.timeline: each slice's op id) with each slice's node in the forward pane."""
    if not timeline:
        return timeline
    if timeline.get("kind") != "time" or timeline.get("clock") != "forward":
        raise ValueError("graph_view.show_twin: `timeline` must be a forward's time-line, node_times.timeline(fg, "
                         "times) of what node_times.forward returned")
    from nbhelpers import forward_view
    on_view = forward_view.node_numbers(fg)
    if any(n >= 0 and n not in on_view for n in timeline["node"]):
        raise ValueError("graph_view.show_twin: `timeline` names ops this graph does not draw; give the time-line "
                         "of this graph's node_times.forward")
    return {**timeline, "node": [on_view[n] if n >= 0 else -1 for n in timeline["node"]]}


def _twin_panes(fg, expanded, times=None) -> tuple[tuple, list[dict]]:
    from nbhelpers import forward_graph, forward_view

    arguments.require("graph_view.show_twin", "fg", fg, forward_graph.ForwardGraph,
                      "a forward_graph.ForwardGraph, such as forward_graph.trace(model, x)")
    if times is not None:
        arguments.require("graph_view.show_twin", "times", times, node_times.ForwardTimes,
                          "a node_times.ForwardTimes of the same graph (node_times.forward(model, x)), or None")
        node_times.view_nodes("graph_view.show_twin", fg, times)
    forward, backward, pairs, saved_by = forward_view.twin(fg, times)
    sides, states = _panes((forward,) if backward is None else (forward, backward), expanded)
    states[0]["lit"] = [[node, list(lit)] for node, lit in saved_by]
    if len(states) > 1:
        states[1]["matched"] = [list(pair) for pair in pairs]
    return sides, states


def _panes(datas, expanded=None) -> tuple[tuple, list[dict]]:
    """Each graph's view, with `expanded` open or else its first view at its share of the output's width,
    and each one's state."""
    width = graph_boxes.STAGE_W / len(datas)
    sides, states = [], []
    for data in datas:
        info = graph_boxes.module_info(data)
        found = graph_folds.folds(data)
        opened = graph_boxes.first_expansion(data, info, stage_w=width, found=found) if expanded is None \
            else frozenset(expanded)
        shown = graph_boxes.view(data, opened, info, found)
        sides.append((data, shown))
        states.append(_state(data, shown.expanded, info))
    return tuple(sides), states


def _paned_widget(sides: tuple, states: list[dict], timeline: dict | None = None):
    widget = _widget_class()(graph=_text(states[0]), other=_text(states[1]) if len(states) > 1 else "",
                             expanded=sorted(sides[0][1].expanded), timeline=_text(timeline) if timeline else "")
    widget._sides = sides
    return widget


def _titles(d, titles) -> tuple[str, str]:
    if titles is not None:
        if not (isinstance(titles, (tuple, list)) and len(titles) == 2
                and all(isinstance(t, str) and t.strip() for t in titles)):
            raise TypeError(f"graph_view.show_diff: `titles` must be two non-empty strings, such as "
                            f"('eager', 'with checkpointing'); got {arguments.given(titles)}")
        return tuple(titles)
    a, b = d.a.title or "a", d.b.title or "b"
    return (f"{a} (a)", f"{b} (b)") if a == b else (a, b)


def _picture(sides, expanded: list[str], selected: int) -> str:
    """The SVG every mime bundle carries: the view the widget shows now, both panes for a diff or a twin."""
    shown = [graph_boxes.view(data, frozenset(expanded)) if k == 0 else first
             for k, (data, first) in enumerate(sides)]
    if len(shown) == 1:
        return render_svg(shown[0], None if selected < 0 else selected)
    left, right = (render_svg(v) for v in shown)
    (lw, lh), (rw, rh) = (_svg_size(svg) for svg in (left, right))
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{lw + rw + 20:.0f}" height="{max(lh, rh):.0f}">'
            f'{left}<g transform="translate({lw + 20:.0f},0)">{right}</g></svg>')


def _stacked(top: str, bottom: str) -> str:
    """Two SVGs, one above the other, as one."""
    if not top:
        return bottom
    (tw, th), (bw, bh) = _svg_size(top), _svg_size(bottom)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{max(tw, bw):.0f}" height="{th + bh + 10:.0f}">'
            f'{top}<g transform="translate(0,{th + 10:.0f})">{bottom}</g></svg>')


def _svg_size(svg: str) -> tuple[float, float]:
    """render_svg's width and height (its legend included), read from its opening tag."""
    head = svg[:svg.index(">")]
    return float(head.split('width="')[1].split('"')[0]), float(head.split('height="')[1].split('"')[0])


def esm_source() -> str:
    """The front-end as one ES module: the layout, the boxes, the drawing (the static site has nowhere to
    import a second file from)."""
    return "\n".join(path.read_text() for path in _ESM_FILES)


def esm() -> str:
    """What each view's state carries: graph_view_loader.js with esm_source() deflated inside (a notebook
    keeps one copy per view; 02 has five)."""
    packed = _pack(esm_source().encode())
    return (_HERE / "graph_view_loader.js").read_text().replace('"@CODE@"', json.dumps(packed))


def unpacked_esm(stored: str) -> str:
    """The module a stored `_esm` (esm()'s output) carries, to compare with esm_source() whatever zlib packed it."""
    return _unpack(json.loads(stored.split("const CODE = ", 1)[1].split(";\n", 1)[0])).decode()


@functools.cache
def _widget_class():
    """The one widget class, made on first use (importing anywidget is left until a widget is needed)."""
    import anywidget
    import traitlets

    class GraphView(anywidget.AnyWidget):
        _esm = esm()
        graph = traitlets.Unicode().tag(sync=True)      # deflated JSON in base64: one line in the notebook
        other = traitlets.Unicode("").tag(sync=True)    # a second graph, drawn beside it (a diff)
        selected = traitlets.Int(-1).tag(sync=True)
        step = traitlets.Int(-1).tag(sync=True)
        expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)   # the modules open in the first pane
        timeline = traitlets.Unicode("").tag(sync=True)  # memory_timeline.state or node_times.timeline, deflated

        _sides: tuple = ()                               # (data, first view) per pane, set by show()/show_diff()
        _above: str = ""                                 # a still SVG drawn above the graph (its timeline)

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            data, _ = bundle if isinstance(bundle, tuple) else (bundle, {})
            nodes = sum(len(g.nodes) for g, _ in self._sides)
            picture = _stacked(self._above, _picture(self._sides, self.expanded, self.selected))
            return {**data, "image/svg+xml": picture, "text/plain": f"graph view: {nodes} nodes"}

    return GraphView


def check(data: GraphData, function: str = "graph_view.view", name: str = "data") -> None:
    """Raise TypeError or ValueError, naming `function`'s argument `name`, unless `data` is GraphData whose
    edges and links name its own nodes and have no cycle. For the modules that take GraphData from a learner
    (graph_diff), so not in __all__."""
    arguments.require(function, name, data, GraphData,
                      "a graph_view.GraphData, such as graph_view.from_autograd(autograd_graph.trace(loss))")
    where = f"{function}: `{name}`"
    if not data.nodes:
        raise ValueError(f"{where} has no nodes; trace the output of a differentiable op, such as the loss")
    n = len(data.nodes)
    for s, d in data.edges:
        if not (0 <= s < n and 0 <= d < n):
            raise ValueError(f"{where} has an edge ({s}, {d}) to a node that does not exist (nodes are "
                             f"0..{n - 1}); pass edges between the given nodes")
    for i, node in enumerate(data.nodes):
        if not all(0 <= k < n for k in node.links):
            raise ValueError(f"{where}: node {i} links to {node.links}, but nodes are 0..{n - 1}; link to given "
                             "nodes")
    if data.edge_labels and len(data.edge_labels) != len(data.edges):
        raise ValueError(f"{where} has {len(data.edge_labels)} edge labels for {len(data.edges)} edges; give one "
                         "label per edge, or none")
    if graph_layout.cycle_edges(n, list(data.edges)):
        raise ValueError(f"{where} has a cycle; a backward graph never does, so pass a DAG "
                         "(for example from autograd_graph.trace)")


def _check_node(function: str, name: str, node, count: int) -> None:
    arguments.require(function, name, node, int, f"a node id, an int in 0..{count - 1}")
    if not 0 <= node < count:
        raise ValueError(f"{function}: `{name}` is {node}, not a node id; pass an int in 0..{count - 1}")
