"""A graph you can click, in JupyterLab, in the offline static site, and as a picture everywhere else.

Data in, a widget out: `GraphData` holds nodes (label, kind, module path, the rows its details panel
shows, saved bytes, storage identities) and edges; `show(data)` returns an anywidget whose front-end,
`graph_view.js` (hand-written, no dependencies), draws it and handles clicks, hovers, search, collapse
and expand, pan and zoom, and a backward stepper, with no kernel round trip. Python computes everything
that must be right, including the layout (`graph_layout`, one algorithm); the browser only shows it.

Collapsing works without a kernel because every collapsed view is laid out in advance: view `d` shows
each node made inside at most `d` nested modules (the chain `module_scope` records), and merges the others
into one box per module at nesting level `d` (a box shows its node count and saved bytes). Clicking a module box opens the
next depth; the panel's module path collapses back to any ancestor. The first view is the deepest one
with at most 300 boxes. The widget's mime bundle also carries that view as SVG, so GitHub, nbconvert,
strict nbval and an untrusted notebook show (and compare) the picture. Names from user code are data:
the front-end puts them in with `textContent`, never as HTML.

Example:
    with module_scope.record():
        loss = model(x).sum()
    graph_view.show(graph_view.from_autograd(autograd_graph.trace(loss, module=model)))
"""
from __future__ import annotations

import dataclasses
import functools
import html
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from nbhelpers import arguments, graph_layout
from nbhelpers.autograd_graph import Graph
from nbhelpers.module_scope import OUTSIDE

__all__ = ["SavedRow", "ViewNode", "GraphData", "from_autograd", "views", "first_depth", "details", "render_svg",
           "show", "show_diff", "MAX_BOXES"]        # View (of Boxes and Routes) is what views() returns

MAX_BOXES = 300          # the first view is the deepest with at most this many boxes
MAX_DRAWN = 8000         # views with more boxes are not laid out
_ESM = Path(__file__).with_name("graph_view.js")


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


@dataclass(frozen=True)
class Box:
    """A node, or a module collapsed into one box, placed."""

    key: str                                   # "n:5" is node 5, "g:A.b" the module A.b collapsed
    label: str
    kind: str                                  # a node's kind, or "group"
    members: tuple[int, ...]                   # the nodes it holds
    nbytes: int                                # what they save for backward
    mark: str
    x: float
    y: float
    w: float
    h: float


@dataclass(frozen=True)
class Route:
    """An edge between two boxes, as drawn: its polyline's points."""

    src: int                                   # box indices
    dst: int
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class View:
    """One depth: boxes (a node, or a collapsed module) with their places, and edges between them."""

    depth: int
    boxes: tuple[Box, ...]
    edges: tuple[Route, ...]
    width: float
    height: float


def from_autograd(graph: Graph) -> GraphData:
    """A backward graph as view data: each node's op, saved tensors, where its gradients go."""
    arguments.require("graph_view.from_autograd", "graph", graph, Graph,
                      "an autograd_graph.Graph (autograd_graph.trace(loss))")
    storage_ids: dict[int, int] = {}
    nodes = []
    for n in graph.nodes:
        saved = tuple(SavedRow(s.attr, s.shape, str(s.dtype).replace("torch.", ""), s.nbytes,
                               storage_ids.setdefault(s.storage_ptr, len(storage_ids)), s.version) if not s.packed
                      else SavedRow(s.attr, (), s.packed, 0, -1, 0) for s in n.saved)   # a hook's object: no storage
        group = n.modules
        kind = "leaf" if n.is_leaf else "saves" if n.saved else "op"
        nodes.append(ViewNode(n.label, kind, group, saved, n.name if n.is_leaf else "",
                              notes=(("fills", f"{n.label}.grad"),) if n.is_leaf else ()))
    return GraphData(tuple(nodes), tuple((e.src, e.dst) for e in graph.edges), graph.order)


def details(data: GraphData, node: int) -> tuple[tuple[str, str], ...]:
    """What the panel shows for `node`, as (field, text) rows; graph_view.js formats them the same way
    (a test compares the two in a browser)."""
    _check_node("graph_view.details", "node", node, len(data.nodes))
    n = data.nodes[node]
    rows = [("op", n.op)] if n.op else []
    rows.append(("module", n.group[-1] if n.group else OUTSIDE))
    rows += [("saved", f"{s.attr} [{', '.join(map(str, s.shape))}] {s.dtype} {s.nbytes:,} B storage #{s.storage} "
                       f"version {s.version}"
              if s.storage >= 0 else f"{s.attr} packed by a saved-tensor hook as {s.dtype}: no tensor held")
             for s in n.saved]
    labels = [data.nodes[t].label for t in _targets(data)[node]]
    rows.append((data.targets_label, ", ".join(labels) if labels else "none"))
    if n.mark:
        rows.append(("diff", n.mark))
    rows += n.notes
    if n.links:
        rows.append(("lights up", f"{len(n.links)} linked nodes"))
    return tuple(rows)


def _targets(data: GraphData) -> list[list[int]]:
    """Where each node's edges go (its gradients, in a backward graph), in edge order."""
    targets: list[list[int]] = [[] for _ in data.nodes]
    for s, d in data.edges:
        targets[s].append(d)
    return targets


def views(data: GraphData) -> tuple[View, ...]:
    """One laid-out view per depth, from everything collapsed to every node shown, as long as a view has
    at most MAX_DRAWN boxes: a deeper one (a graph of tens of thousands of nodes) is not laid out, since
    no browser draws it usefully; search and the shallower views still reach every node."""
    check(data)
    return _laid_out(data)


def _laid_out(data: GraphData) -> tuple[View, ...]:
    deepest = max((len(n.group) for n in data.nodes), default=0)
    # stop at the first depth that is too big: view i must be depth i (the widget indexes views by depth)
    depths = itertools.takewhile(lambda d: d == 0 or _box_count(data, d) <= MAX_DRAWN, range(deepest + 1))
    return tuple(_view(data, d) for d in depths)


def _box_count(data: GraphData, depth: int) -> int:
    return len({n.group[depth] if len(n.group) > depth else i for i, n in enumerate(data.nodes)})


def _view(data: GraphData, depth: int) -> View:
    members: dict[str, list[int]] = {}                 # box key -> its nodes, boxes in first-seen order
    for i, n in enumerate(data.nodes):
        members.setdefault(f"g:{n.group[depth]}" if len(n.group) > depth else f"n:{i}", []).append(i)
    box_of = {i: b for b, nodes in enumerate(members.values()) for i in nodes}
    pairs = sorted({(box_of[s], box_of[d]) for s, d in data.edges if box_of[s] != box_of[d]})
    unplaced = [_box(data, key, nodes, depth) for key, nodes in members.items()]
    drawing = graph_layout.layout(len(unplaced), pairs, [min(260.0, 16 + 6.6 * len(_shown_label(b))) for b in unplaced])
    boxes = tuple(dataclasses.replace(b, x=x, y=y, w=w, h=h) for b, (x, y, w, h) in zip(unplaced, drawing.boxes))
    edges = tuple(Route(s, d, tuple(tuple(p) for p in route)) for (s, d), route in zip(pairs, drawing.routes))
    return View(depth, boxes, edges, drawing.width, drawing.height)


def _box(data: GraphData, key: str, nodes: list[int], depth: int) -> Box:
    """The box `key` holds `nodes`, not yet placed."""
    first = data.nodes[nodes[0]]
    grouped = key.startswith("g:")
    label = _relative(first.group[depth], first.group[depth - 1] if depth else "") if grouped else first.label
    mark = next((data.nodes[i].mark for i in nodes if data.nodes[i].mark), "")
    return Box(key, label, "group" if grouped else first.kind, tuple(nodes),
               sum(data.nodes[i].saved_bytes for i in nodes), mark, 0.0, 0.0, 0.0, 0.0)


def _relative(path: str, parent: str) -> str:
    """A module box's label: its path below the module it runs in (`blocks.3`, not `Stack.blocks.3`)."""
    return path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path


def _shown_label(box: Box) -> str:
    return f"{box.label} ({len(box.members)})" if box.kind == "group" else box.label


def first_depth(all_views: tuple[View, ...]) -> int:
    """The deepest view with at most MAX_BOXES boxes (the most collapsed one if none is that small)."""
    fitting = [v.depth for v in all_views if len(v.boxes) <= MAX_BOXES]
    return max(fitting) if fitting else 0


def render_svg(view: View, selected: int | None = None) -> str:
    """The view as an SVG string; a box holding node `selected` is outlined."""
    if selected is not None:
        arguments.require("graph_view.render_svg", "selected", selected, int, "a node id (an int) or None")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {view.width:.0f} {view.height:.0f}" '
             f'width="{view.width:.0f}" height="{view.height:.0f}" font-family="sans-serif" font-size="11">',
             '<defs><marker id="gv-arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#777"/></marker></defs>']
    for e in view.edges:
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in e.points)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#999" marker-end="url(#gv-arrow)"/>')
    for b in view.boxes:
        chosen = selected is not None and selected in b.members
        stroke = ('stroke="#c00" stroke-width="3"' if chosen else
                  f'stroke="{_MARK[b.mark]}" stroke-width="3"' if b.mark else 'stroke="#555"')
        parts.append(f'<g><rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" '
                     f'rx="5" fill="{_FILL[b.kind]}" {stroke}/><text x="{b.x + b.w / 2:.1f}" '
                     f'y="{b.y + b.h / 2 + 4:.1f}" text-anchor="middle">'
                     f'{html.escape(_shown_label(b))}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


_FILL = {"op": "#dbe8f7", "leaf": "#d9f2d9", "saves": "#fde7c8", "group": "#ece6f5", "input": "#d9f2d9",
         "line": "#f4f4f4", "break": "#f7c6c6", "kernel": "#fde7c8"}
_MARK = {"added": "#2a2", "removed": "#c22", "changed": "#c70"}


def _state(data: GraphData, laid_out: tuple | None = None) -> dict:
    """The widget's `graph` trait: plain JSON, small. `modules` lists each chain of modules that ran once,
    as [path, index of the entry it ran in, or -1] (a module shared by two parents is listed under each);
    a node is [label, kind, index of its innermost module's entry or -1, saved, targets, op, mark, links,
    notes] (a saved tensor's attr without its "_saved_" prefix); a box is [key, x, y, w],
    where "n:5" is node 5 and "g:A.b" the module A.b collapsed; an edge is [from box, to box, x of each
    layer it passes]: its ends are the boxes' centres and the layers are box_h + layer_gap apart."""
    all_views = laid_out if laid_out is not None else views(data)
    chains: dict[tuple[str, ...], int] = {}            # every chain prefix once: a shared module has two
    entries = []
    for n in data.nodes:
        for k in range(len(n.group)):
            if n.group[:k + 1] not in chains:
                chains[n.group[:k + 1]] = len(entries)
                entries.append([n.group[k], chains[n.group[:k]] if k else -1])
    return {"modules": entries,
            "nodes": [[n.label, n.kind, chains[n.group] if n.group else -1,
                       [[s.attr.removeprefix("_saved_"), list(s.shape), s.dtype, s.nbytes, s.storage, s.version]
                        for s in n.saved],
                       targets, n.op, n.mark, list(n.links), [list(r) for r in n.notes]]
                      for n, targets in zip(data.nodes, _targets(data))],
            "order": list(data.order), "first": first_depth(all_views), "title": data.title,
            "targets_label": data.targets_label,
            "box_h": graph_layout.BOX_H, "layer_gap": graph_layout.LAYER_GAP,   # the same for every box
            "views": [{"boxes": [[b.key, _num(b.x), _num(b.y), _num(b.w)] for b in v.boxes],
                       "edges": [[e.src, e.dst, *(_num(x) for x, _ in e.points[1:-1:2])] for e in v.edges],
                       "width": _num(v.width), "height": _num(v.height)} for v in all_views]}


def _num(x: float) -> int:
    return int(round(x))                          # whole pixels: a smaller state, the same picture


def show(data: GraphData, selected: int | None = None):
    """The widget (anywidget): click, hover, search, collapse, pan and zoom, and a backward stepper.

    `selected`, `step` and `depth` are traits: a later cell reads what the learner clicked.
    """
    check(data, "graph_view.show", "data")
    if selected is not None:
        _check_node("graph_view.show", "selected", selected, len(data.nodes))
    laid_out = _laid_out(data)
    widget = _widget_class()(graph=_text(data, laid_out), selected=-1 if selected is None else selected)
    widget._views = (laid_out,)
    return widget


def show_diff(d):
    """The two graphs of a `graph_diff.GraphDiff` side by side, added, removed and changed nodes outlined."""
    if not all(isinstance(getattr(d, side, None), GraphData) for side in ("a", "b")):
        raise TypeError(f"graph_view.show_diff: `d` must be a graph_diff.GraphDiff, such as graph_diff.diff(a, b); "
                        f"got {arguments.given(d)}")
    left, right = views(d.a), views(d.b)
    widget = _widget_class()(graph=_text(d.a, left), other=_text(d.b, right))
    widget._views = (left, right)
    return widget


def _picture(all_views: tuple[tuple[View, ...], ...], depth: int, selected: int) -> str:
    """The SVG every mime bundle carries: the view the widget opens with, both sides for a diff."""
    shown = [v[min(depth, len(v) - 1)] if depth >= 0 else v[first_depth(v)] for v in all_views]
    if len(shown) == 1:
        return render_svg(shown[0], None if selected < 0 else selected)
    left, right = shown
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{left.width + right.width + 20:.0f}" '
            f'height="{max(left.height, right.height):.0f}">{render_svg(left)}'
            f'<g transform="translate({left.width + 20:.0f},0)">{render_svg(right)}</g></svg>')


def _text(data: GraphData, laid_out: tuple) -> str:
    return json.dumps(_state(data, laid_out), sort_keys=True, separators=(",", ":"))


@functools.cache
def _widget_class():
    """The one widget class, made on first use (importing anywidget is left until a widget is needed)."""
    import anywidget
    import traitlets

    class GraphView(anywidget.AnyWidget):
        _esm = _ESM
        graph = traitlets.Unicode().tag(sync=True)      # compact JSON text: stored in the notebook as one line
        other = traitlets.Unicode("").tag(sync=True)    # a second graph, drawn beside it (a diff)
        selected = traitlets.Int(-1).tag(sync=True)
        step = traitlets.Int(-1).tag(sync=True)
        depth = traitlets.Int(-1).tag(sync=True)

        _views: tuple = ()                               # the laid-out views, set by show() and show_diff()

        def _repr_mimebundle_(self, **kwargs):
            bundle = super()._repr_mimebundle_(**kwargs)
            data, _ = bundle if isinstance(bundle, tuple) else (bundle, {})
            nodes = sum(len(v[-1].boxes) for v in self._views)
            return {**data, "image/svg+xml": _picture(self._views, self.depth, self.selected),
                    "text/plain": f"graph view: {nodes} nodes"}

    return GraphView


def check(data: GraphData, function: str = "graph_view.views", name: str = "data") -> None:
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
    if graph_layout.cycle_edges(n, list(data.edges)):
        raise ValueError(f"{where} has a cycle; a backward graph never does, so pass a DAG "
                         "(for example from autograd_graph.trace)")


def _check_node(function: str, name: str, node, count: int) -> None:
    arguments.require(function, name, node, int, f"a node id, an int in 0..{count - 1}")
    if not 0 <= node < count:
        raise ValueError(f"{function}: `{name}` is {node}, not a node id; pass an int in 0..{count - 1}")
