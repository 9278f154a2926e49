"""An ipywidgets explorer for an autograd_graph.Graph: pick a node, step through backward, zoom.

Everything renders into widgets.HTML values (no Output capture), so the widget behaves the same in
JupyterLab, under strict nbval and in the static site. Large graphs stay usable by pan and zoom: the
SVG sits in a scrolling box and the zoom slider scales it (the layout itself is O(nodes + edges)).

Example:
    graph_explorer.explore(autograd_graph.trace(loss, module=model))
"""
from __future__ import annotations

import html

from nbhelpers.autograd_graph import Graph
from nbhelpers.graph_drawing import layered_layout, render_svg

__all__ = ["node_details", "step_details", "explore"]


def node_details(graph: Graph, node_id: int) -> str:
    """HTML describing one node: what it is, what it saved for backward, where its gradients go."""
    n = graph.nodes[node_id]
    rows = [f"<b>{html.escape(n.label)}</b> <code>{html.escape(n.name)}</code> (node {n.id}, "
            f"sequence_nr {n.sequence_nr if not n.is_leaf else 'max'})"]
    if n.saved:
        rows.append("saved for backward:<ul>" + "".join(
            f"<li class='saved'><code>{s.attr}</code> {s.shape} {str(s.dtype).replace('torch.', '')} "
            f"storage {s.storage_ptr:#x}</li>" for s in n.saved) + "</ul>")
    else:
        rows.append("saves no tensors")
    outs = [graph.nodes[e.dst].label for e in graph.edges if e.src == node_id]
    rows.append("sends gradients to: " + (", ".join(map(html.escape, outs)) if outs else "nothing (a leaf)"))
    return "<br>".join(rows)


def step_details(graph: Graph, step: int) -> str:
    """HTML for backward step `step`: which node runs, and which .grad it fills if it is a leaf."""
    n = graph.nodes[graph.order[step]]
    fills = f" and fills <code>{html.escape(n.label)}.grad</code>" if n.is_leaf else ""
    return f"step {step + 1} of {len(graph.order)}: runs <code>{html.escape(n.name)}</code>{fills}"


def explore(graph: Graph):
    """A VBox: node picker, backward stepper, zoom, the SVG, and the details of node and step."""
    import ipywidgets as widgets

    layout = layered_layout(graph)
    pick = widgets.Dropdown(options=[(f"{n.id}: {n.label}", n.id) for n in graph.nodes], value=graph.root,
                            description="node")
    step = widgets.IntSlider(value=0, min=0, max=len(graph.order) - 1, description="backward step")
    zoom = widgets.FloatSlider(value=1.0, min=0.1, max=2.0, step=0.1, description="zoom")
    picture, details, now = widgets.HTML(), widgets.HTML(), widgets.HTML()

    def redraw(_=None):
        svg = render_svg(graph, layout, current=graph.order[step.value], selected=pick.value)
        svg = svg.replace("<svg ", '<svg style="width:100%;height:auto" ', 1)   # scale with the zoom box
        picture.value = (f'<div style="overflow:auto;max-height:520px;border:1px solid #ccc">'
                         f'<div style="width:{layout.width * zoom.value:.0f}px">{svg}</div></div>')
        details.value = f'<div class="graph-node-details">{node_details(graph, pick.value)}</div>'
        now.value = f'<div class="graph-step">{step_details(graph, step.value)}</div>'

    for control in (pick, step, zoom):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([pick, zoom]), step, now, picture, details])
