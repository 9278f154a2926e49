"""Lay out an autograd_graph.Graph in layers and draw it as SVG, in pure Python (no graphviz binary).

Example:
    layout = graph_drawing.layered_layout(graph)
    svg = graph_drawing.render_svg(graph, layout, current=graph.order[0])
"""
from __future__ import annotations

import html
from dataclasses import dataclass

from nbhelpers.autograd_graph import Graph

__all__ = ["Layout", "layered_layout", "render_svg"]

NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN = 170, 30, 20, 46, 10
_COLORS = {"leaf": "#d9f2d9", "op": "#dbe8f7", "saved": "#fde7c8", "current": "#ffb347", "selected": "#c00"}


@dataclass(frozen=True)
class Layout:
    """Top-left corner of each node's box (indexed by node id) and the drawing's size, in pixels."""

    xy: tuple[tuple[float, float], ...]
    width: float
    height: float


def layered_layout(graph: Graph) -> Layout:
    """Layer = longest path from the root (so every edge points down); within a layer, nodes are
    ordered by the mean position of the nodes feeding them (one barycentre pass). O(nodes + edges)."""
    feeders = {n.id: [] for n in graph.nodes}
    for e in graph.edges:
        feeders[e.dst].append(e.src)
    layer = {graph.root: 0}
    for i in graph.order:                                  # a topological order: feeders come first
        if feeders[i]:
            layer[i] = 1 + max(layer[j] for j in feeders[i])
    rows: dict[int, list[int]] = {}
    for i in graph.order:
        rows.setdefault(layer[i], []).append(i)
    slot: dict[int, float] = {}
    for depth in sorted(rows):
        rows[depth].sort(key=lambda i: sum(slot[j] for j in feeders[i]) / len(feeders[i]) if feeders[i] else 0)
        for k, i in enumerate(rows[depth]):
            slot[i] = k
    widest = max(len(r) for r in rows.values())
    xy = [(0.0, 0.0)] * len(graph.nodes)
    for depth, row in rows.items():
        shift = (widest - len(row)) * (NODE_W + GAP_X) / 2     # centre each row
        for k, i in enumerate(row):
            xy[i] = (MARGIN + shift + k * (NODE_W + GAP_X), MARGIN + depth * (NODE_H + GAP_Y))
    return Layout(tuple(xy), 2 * MARGIN + widest * (NODE_W + GAP_X) - GAP_X,
                  2 * MARGIN + (max(rows) + 1) * (NODE_H + GAP_Y) - GAP_Y)


def render_svg(graph: Graph, layout: Layout | None = None, current: int | None = None,
               selected: int | None = None) -> str:
    """The graph as an SVG string: gradients flow down from the root; leaves are green, nodes that
    save tensors have an orange band, `current` is filled orange and `selected` outlined red."""
    layout = layout or layered_layout(graph)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {layout.width:.0f} {layout.height:.0f}" '
             f'width="{layout.width:.0f}" height="{layout.height:.0f}" font-family="sans-serif" font-size="11">',
             '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" '
             'orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#666"/></marker></defs>']
    for e in graph.edges:
        (x1, y1), (x2, y2) = layout.xy[e.src], layout.xy[e.dst]
        parts.append(f'<line x1="{x1 + NODE_W / 2:.0f}" y1="{y1 + NODE_H:.0f}" x2="{x2 + NODE_W / 2:.0f}" '
                     f'y2="{y2:.0f}" stroke="#999" marker-end="url(#arrow)"/>')
    for n in graph.nodes:
        parts.append(_node_svg(n, layout.xy[n.id], n.id == current, n.id == selected))
    parts.append("</svg>")
    return "".join(parts)


def _node_svg(node, xy, is_current: bool, is_selected: bool) -> str:
    x, y = xy
    fill = _COLORS["current"] if is_current else _COLORS["leaf" if node.is_leaf else "op"]
    stroke = f'stroke="{_COLORS["selected"]}" stroke-width="3"' if is_selected else 'stroke="#555"'
    text = node.label if len(node.label) <= 26 else node.label[:25] + "…"
    tip = f"{node.id}: {node.name}" + "".join(f"\n{s.attr} {s.shape}" for s in node.saved)
    band = (f'<rect x="{x:.0f}" y="{y + NODE_H - 5:.0f}" width="{NODE_W}" height="5" fill="{_COLORS["saved"]}"/>'
            if node.saved else "")
    return (f'<g class="node" data-node="{node.id}"><title>{html.escape(tip)}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="5" fill="{fill}" {stroke}/>'
            f'{band}<text x="{x + NODE_W / 2:.0f}" y="{y + NODE_H / 2 + 3:.0f}" text-anchor="middle">'
            f'{html.escape(text)}</text></g>')
