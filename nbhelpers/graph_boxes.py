"""Which boxes a graph view draws, and the picture of them: modules collapsed one at a time, labels that
fit their boxes, the first view a learner can read, and the SVG.

A view is the graph with a set of modules *expanded*: every node is drawn inside the outermost module of
its chain that is not expanded (one box per such module, `g:<path>`), or as itself (`n:<index>`) when its
whole chain is expanded. The front-end (`graph_view.js`) builds the same boxes and lays them out with
`graph_layout.js`, the port of `graph_layout`, so that a click expands or collapses one module in the
browser with no kernel; tests/test_graph_layout_js.py checks that both give the same boxes, labels and
routes. Labels are monospace, so a label's width is known without a browser: a box is as wide as its
text up to MAX_W, and longer text is cut with an ellipsis (the full text is in the tooltip and the panel).
The first view opens whole levels of modules, outermost first, while the picture stays at most MAX_BOXES boxes and
narrow enough that its smallest text renders at MIN_TEXT_PX or more in a STAGE_W-pixel notebook output.

Example:
    shown = graph_boxes.view(data, graph_boxes.first_expansion(data))
    svg = graph_boxes.render_svg(shown)
"""
from __future__ import annotations

import dataclasses
import html
import math
import re
from dataclasses import dataclass

from nbhelpers import arguments, edge_labels, graph_folds, graph_layout

__all__ = ["Box", "Route", "View", "view", "first_expansion", "render_svg", "legend_items", "module_info",
           "columns", "fitted", "LEGEND", "MAX_BOXES", "STAGE_W", "MIN_TEXT_PX"]

FONT, SUB_FONT = 12, 11                # px: a box's label, and a module box's second line
COLUMN, SUB_COLUMN = 0.62 * FONT, 0.62 * SUB_FONT   # a monospace column (fonts' advance is 0.55-0.61 em)
PAD, MIN_W, MAX_W, LEGEND_ROW, EDGE_FONT = 8.0, 40.0, 240.0, 20, edge_labels.EDGE_FONT   # SUB_FONT: legible at the fit
STAGE_W, MIN_TEXT_PX, MAX_BOXES = 760, 10, 300     # the notebook output's width; legible text; boxes
_WIDE = re.compile("[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60"
                   "\uffe0-\uffe6\U00020000-\U0003fffd]")   # East Asian wide: two columns (the same set in JS)
KINDS = {"op": "op", "saves": "op that saves tensors for backward", "leaf": "leaf: fills a parameter's .grad",
         "group": "module, collapsed: click to expand", "input": "input", "line": "source line",
         "break": "graph break", "kernel": "generated kernel", "call": "a call of the compiled function",
         "entry": "a compiled entry (guards and graphs)", "guard": "a guard that failed: why it recompiled",
         "error": "the op that raised: the forward stopped here",
         "fold": "repeated blocks, folded: click to open one"}
MARKS = {"added": "only in the right graph", "removed": "only in the left graph", "changed": "saved bytes differ"}
LEGEND = {"fill": KINDS, "outline": MARKS}
FILL = {"op": "#dbe8f7", "leaf": "#d9f2d9", "saves": "#fde7c8", "group": "#ece6f5", "input": "#d9f2d9",
        "line": "#f4f4f4", "break": "#f7c6c6", "kernel": "#fde7c8", "call": "#d9f2d9", "entry": "#dbe8f7",
        "guard": "#f7c6c6", "error": "#e05252", "fold": "#f3dcef"}
MARK_STROKE = {"added": "#1a7f1a", "removed": "#c22", "changed": "#b06000"}
HEAT = "#d9480f"                               # the bar of a box's share of the measured time
TIME_BAR = "bar: share of the {clock}'s time (full: the slowest box)"    # the pass timed: GraphData.clock


@dataclass(frozen=True)
class Box:
    """A node, or a module collapsed into one box, placed."""

    key: str                                   # "n:5" is node 5, "g:A.b" the module A.b collapsed
    lines: tuple[str, ...]                     # as drawn: cut to fit, with an ellipsis
    title: str                                 # the full text: the tooltip
    kind: str                                  # a node's kind, or "group"
    members: tuple[int, ...]                   # the nodes it holds
    nbytes: int                                # what they save for backward
    mark: str
    share: float = 0.0                         # their share of the measured time: the bar under the box
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    h: float = 0.0


@dataclass(frozen=True)
class Route:
    """An edge between two boxes, as drawn: its polyline's points."""

    src: int                                   # box indices
    dst: int
    points: tuple[tuple[float, float], ...]
    label: str = ""                            # what the edges it stands for carry (a tensor's shape), if one thing
    label_at: tuple[float, float] | None = None   # where its label is drawn (edge_labels.place), None: not drawn


@dataclass(frozen=True)
class View:
    """The graph with `expanded` modules open: boxes with their places, and the edges between them."""

    expanded: frozenset[str]
    boxes: tuple[Box, ...]
    edges: tuple[Route, ...]
    width: float
    height: float
    clock: str = "backward"                    # the pass whose time the bars share (GraphData.clock)


@dataclass(frozen=True)
class ModuleInfo:
    kind: str                                  # its class name, "" when unknown
    nodes: int
    nbytes: int

    @property
    def summary(self) -> str:                  # a module box's second line
        return f"{self.nodes} node{'s' if self.nodes != 1 else ''} · {_size(self.nbytes)} saved"


def module_info(data) -> dict[str, ModuleInfo]:
    """Every module path the nodes name -> its class, how many nodes ran inside it, what they saved."""
    types = dict(data.module_types)
    members: dict[str, list[int]] = {}
    for i, n in enumerate(data.nodes):
        for path in dict.fromkeys(n.group):
            members.setdefault(path, []).append(i)
    return {path: ModuleInfo(types.get(path, ""), len(nodes), sum(data.nodes[i].saved_bytes for i in nodes))
            for path, nodes in members.items()}


def view(data, expanded=frozenset(), info: dict[str, ModuleInfo] | None = None,
         found: tuple[graph_folds.Fold, ...] | None = None) -> View:
    """The boxes and edges with `expanded` (module paths) open, repeated blocks folded (`found`, else
    graph_folds.folds(data)), laid out by graph_layout."""
    info = module_info(data) if info is None else info
    found = graph_folds.folds(data) if found is None else found
    where, runs = graph_folds.places(found), graph_folds.folded(found, expanded)
    members: dict[str, list[int]] = {}                 # box key -> its nodes, boxes in first-seen order
    for i, n in enumerate(data.nodes):
        members.setdefault(graph_folds.box_key(n.group, i, expanded, runs), []).append(i)
    box_of = {i: b for b, nodes in enumerate(members.values()) for i in nodes}
    carried = _carried(data, box_of)
    pairs = sorted(carried)
    unplaced = [_with_share(data, _fold_box(data, key, nodes, info, found, where) if key.startswith("f:")
                            else _box(data, key, nodes, info)) for key, nodes in members.items()]
    drawing = graph_layout.layout(len(unplaced), pairs, [b.w for b in unplaced])
    boxes = tuple(dataclasses.replace(b, x=x, y=y, w=w, h=h) for b, (x, y, w, h) in zip(unplaced, drawing.boxes))
    labels = [_edge_label(carried[pair]) for pair in pairs]
    places, width = edge_labels.place(drawing.boxes, [(s, route, label) for (s, _), route, label in
                                                      zip(pairs, drawing.routes, labels)], drawing.width, columns=columns)
    edges = tuple(Route(s, d, route, label, at) for (s, d), route, label, at in
                  zip(pairs, drawing.routes, labels, places))
    return View(frozenset(expanded), boxes, edges, width, drawing.height, data.clock)


def _carried(data, box_of: dict[int, int]) -> dict[tuple[int, int], list[str]]:
    """Each pair of boxes an edge joins -> the labels of the edges between them (empty strings if none)."""
    labels = data.edge_labels or ("",) * len(data.edges)
    carried: dict[tuple[int, int], list[str]] = {}
    for (s, d), label in zip(data.edges, labels):
        if box_of[s] != box_of[d]:
            carried.setdefault((box_of[s], box_of[d]), []).append(label)
    return carried


def _edge_label(labels: list[str]) -> str:
    """One label when every edge a route stands for carries the same, else how many tensors it carries."""
    distinct = set(labels)
    return labels[0] if len(distinct) == 1 else f"{len(labels)} tensors"


def _box(data, key: str, nodes: list[int], info: dict[str, ModuleInfo]) -> Box:
    """The box `key` holds `nodes`, sized to its text (not yet placed)."""
    first = data.nodes[nodes[0]]
    mark = _mark(data, nodes)
    nbytes = sum(data.nodes[i].saved_bytes for i in nodes)
    if not key.startswith("g:"):
        w = _width(first.label, "")
        return Box(key, (fitted(first.label, w - 2 * PAD, COLUMN),), first.tip or first.label, first.kind,
                   tuple(nodes), nbytes, mark, w=w)
    path = key[2:]
    name = _relative(path, first.group[0]) if path != first.group[0] else path   # the root frames every box
    head = f"{name} · {info[path].kind}" if info[path].kind not in ("", name) else name
    w = _width(head, info[path].summary)
    lines = (fitted(head, w - 2 * PAD, COLUMN), fitted(info[path].summary, w - 2 * PAD, SUB_COLUMN))
    return Box(key, lines, f"{path} · {info[path].kind}: {info[path].summary}" if info[path].kind
               else f"{path}: {info[path].summary}", "group", tuple(nodes), nbytes, mark, w=w)


def _fold_box(data, key: str, nodes: list[int], info: dict[str, ModuleInfo], found, where) -> Box:
    """The box of folded copies `key` ("f:<first>|<last>"): `layer1.0-1 · BasicBlock × 2`, or one copy by name."""
    first, last = key[2:].split("|")
    f, a = where[first]
    fold, b = found[f], where[last][1]
    name, count = f"{fold.span(a, b)} · {fold.kind}", f" × {b - a + 1}" if b > a else ""
    head = name + count
    summary = ("each " if b > a else "") + info[first].summary      # copies save tensors of the same shapes
    w = _width(head, summary)
    mark = _mark(data, nodes)
    cut = fitted(name, w - 2 * PAD - columns(count) * COLUMN, COLUMN) + count     # a long name is cut, not the count
    return Box(key, (cut, fitted(summary, w - 2 * PAD, SUB_COLUMN)),
               f"{head}: {summary}; folded, of {fold.label}: click to open {fold.names[a]}", "fold", tuple(nodes),
               sum(data.nodes[i].saved_bytes for i in nodes), mark, w=w)


def _with_share(data, b: Box) -> Box:
    """A timed graph's box with its nodes' share of the time, also in its tooltip (graph_view.js: withShare)."""
    share = sum(data.nodes[i].share for i in b.members)
    return dataclasses.replace(b, share=share, title=f"{b.title} · {share:.1%} of the {data.clock}") if share else b


def _mark(data, nodes: list[int]) -> str:
    """A box's diff outline: its first marked node's."""
    return next((data.nodes[i].mark for i in nodes if data.nodes[i].mark), "")


def _relative(path: str, parent: str) -> str:
    """A module box's name: its path below the outermost module (`layer4.1`, not `ResNet.layer4.1`): with its
    parents open and not drawn, `1` alone would not say which block."""
    return path[len(parent) + 1:] if parent and path.startswith(parent + ".") else path


def _width(head: str, sub: str) -> float:
    """As wide as its text, between MIN_W (a one-letter op such as `t` still has room for the shape below it)
    and MAX_W."""
    return max(MIN_W, min(MAX_W, 2 * PAD + max(columns(head) * COLUMN, columns(sub) * SUB_COLUMN)))


def columns(text: str) -> int:
    """How many monospace columns `text` takes: two for an East Asian wide character, else one."""
    return len(text) + len(_WIDE.findall(text))


def fitted(text: str, room: float, column: float) -> str:
    """`text` if it fits in `room` pixels, else as much of it as fits followed by an ellipsis."""
    if columns(text) * column <= room + 1e-9:          # a one-column label: 7.44 px in 23.44 - 16 px
        return text
    budget, out = math.floor(room / column) - 1, []     # one column for the ellipsis
    for ch in text:
        budget -= 2 if _WIDE.match(ch) else 1
        if budget < 0:
            break
        out.append(ch)
    return "".join(out) + "…"


def _size(nbytes: int) -> str:
    """1.4 MB, 12.0 kB, 512 B: decimal units, three significant digits."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            value = nbytes / scale
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{nbytes} B"


def legible(shown: View, stage_w: float = STAGE_W) -> bool:
    """At most MAX_BOXES boxes, and narrow enough that fitting it to `stage_w` pixels keeps SUB_FONT text at
    MIN_TEXT_PX or more. (The front-end fits a view to its width but never shrinks text below MIN_TEXT_PX:
    a wider view is panned; this choice keeps that for views nothing can fold.)"""
    return len(shown.boxes) <= MAX_BOXES and shown.width * MIN_TEXT_PX / SUB_FONT <= stage_w


def first_expansion(data, info: dict[str, ModuleInfo] | None = None, tries: int = 12,
                    stage_w: float = STAGE_W, found: tuple[graph_folds.Fold, ...] | None = None) -> frozenset[str]:
    """The modules the first view opens: the module tree a whole level at a time, outermost first, while the
    view stays legible in `stage_w` pixels (at most `tries` layouts). Whole levels: siblings look alike,
    none opened alone; but of repeated blocks (graph_folds) only the first copy opens, the rest stay folded."""
    info = module_info(data) if info is None else info
    found = graph_folds.folds(data) if found is None else found
    later = {path for fold in found for path in fold.copies[1:]}       # folded: one copy of each is opened
    expanded: frozenset[str] = frozenset()
    level = list(dict.fromkeys(n.group[0] for n in data.nodes if n.group))
    while level and tries > 0:
        tries -= 1
        if not legible(view(data, expanded | set(level), info, found), stage_w):
            break
        expanded |= set(level)
        level = [path for path in _children(data, level) if path not in later]
    return expanded


def _children(data, parents: list[str]) -> list[str]:
    chosen = set(parents)
    return list(dict.fromkeys(n.group[k + 1] for n in data.nodes for k in range(len(n.group) - 1)
                              if n.group[k] in chosen))


def render_svg(shown: View, selected: int | None = None) -> str:
    """The view as an SVG string, with a legend of the fills and outlines it uses; a box holding node
    `selected` is outlined."""
    arguments.require("graph_view.render_svg", "view", shown, View, "a graph_view.View, such as graph_view.view(data)")
    if selected is not None:
        arguments.require("graph_view.render_svg", "selected", selected, int, "a node id (an int) or None")
    width = max(shown.width, 400)
    legend, legend_h = _svg_legend(legend_items(shown), shown.height + 4, width)
    height = shown.height + legend_h + 4
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
             f'width="{width:.0f}" height="{height:.0f}" font-family="DejaVu Sans Mono, Menlo, '
             f'Consolas, monospace" font-size="{FONT}">',
             '<defs><marker id="gv-arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" '
             'markerHeight="6" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#666"/></marker></defs>',
             '<rect width="100%" height="100%" fill="#fff"/>']
    for e in shown.edges:
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in e.points)
        parts.append(f'<polyline points="{points}" fill="none" stroke="#888" marker-end="url(#gv-arrow)"/>')
        if e.label_at:
            x, y = e.label_at
            parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{EDGE_FONT}" fill="#333">{html.escape(e.label)}</text>')
    longest = max((b.share for b in shown.boxes), default=0.0)
    parts += [_svg_box(b, selected is not None and selected in b.members, longest) for b in shown.boxes]
    parts.append(legend)
    parts.append("</svg>")
    return "".join(parts)


def _svg_box(b: Box, chosen: bool, longest: float = 0.0) -> str:
    stroke = ('stroke="#c00" stroke-width="3"' if chosen else
              f'stroke="{MARK_STROKE[b.mark]}" stroke-width="3"' if b.mark else 'stroke="#555"')
    texts = [(b.lines[0], b.y + b.h / 2 + 4, FONT)] if len(b.lines) == 1 else \
        [(b.lines[0], b.y + 14, FONT), (b.lines[1], b.y + b.h - 6, SUB_FONT)]
    drawn = "".join(f'<text x="{b.x + b.w / 2:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="middle" '
                    f'fill="#111">{html.escape(line)}</text>' for line, y, size in texts)
    return (f'<g><title>{html.escape(b.title)}</title><rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" '
            f'height="{b.h:.1f}" rx="5" fill="{FILL[b.kind]}" {stroke}/>{drawn}{_time_bar(b, longest)}</g>')


def _time_bar(b: Box, longest: float) -> str:
    """A bar along the box's bottom edge, 3 px from its sides and 3 px high, as long (of the box's width) as its
    share is of the longest's (graph_view_dom.js: timeBar)."""
    if not b.share or not longest:
        return ""
    return (f'<rect x="{b.x + 3:.1f}" y="{b.y + b.h - 4:.1f}" width="{(b.w - 6) * b.share / longest:.1f}" '
            f'height="3" fill="{HEAT}"/>')


def legend_items(shown: View) -> list[tuple[str, str, str]]:
    """(text, fill, outline) for every fill and outline the view uses, in the order first seen."""
    kinds = dict.fromkeys(b.kind for b in shown.boxes)
    marks = dict.fromkeys(b.mark for b in shown.boxes if b.mark)
    timed = [(TIME_BAR.format(clock=shown.clock), HEAT, HEAT)] if any(b.share for b in shown.boxes) else []
    return [(KINDS[k], FILL[k], "#555") for k in kinds] + [(MARKS[m], "#fff", MARK_STROKE[m]) for m in marks] + timed


def _svg_legend(items, top: float, width: float) -> tuple[str, float]:
    """The legend's SVG, one swatch and its text per item, wrapped to `width`; and its height."""
    parts, x, y = [], graph_layout.MARGIN, top
    for label, fill, stroke in items:
        room = 18 + columns(label) * SUB_COLUMN + 14
        if x > graph_layout.MARGIN and x + room > width:
            x, y = graph_layout.MARGIN, y + LEGEND_ROW
        parts.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="14" height="14" rx="3" fill="{fill}" stroke="{stroke}" '
                     f'stroke-width="2"/><text x="{x + 18:.0f}" y="{y + 11:.0f}" font-size="{SUB_FONT}" '
                     f'fill="#111">{html.escape(label)}</text>')
        x += room
    return f'<g class="gv-legend">{"".join(parts)}</g>', y + LEGEND_ROW - top
