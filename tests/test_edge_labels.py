"""Edge labels (a forward graph's tensor shapes) never cover one another or a box, in the stored SVG as in the
browser (graph_view.js places them with the same rule: tests/test_graph_layout_js.py compares the two)."""
import json
import re

import pytest
import torch
from torch import nn

from nbhelpers import edge_labels, forward_graph, forward_view, graph_boxes, graph_view
from tests import REPO

_RECT = re.compile(r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)" rx="5"')
_LABEL = re.compile(rf'<text x="([-\d.]+)" y="([-\d.]+)" font-size="{graph_boxes.EDGE_FONT}" fill="#333">([^<]*)</text>')


def svg_overlaps(svg: str) -> tuple[int, list[str]]:
    """How many edge labels an SVG from render_svg draws, and each pair of them (or label and box) that
    overlap: a label's glyphs fill its advance width and 11 px above to 3 px below its baseline."""
    boxes = [(x, y, x + w, y + h) for x, y, w, h in (map(float, m) for m in _RECT.findall(svg))]
    labels = [(float(x), float(y) - 11, float(x) + graph_boxes.columns(text) * edge_labels.EDGE_COLUMN,
               float(y) + 3, text) for x, y, text in _LABEL.findall(svg)]
    meet = lambda a, b: a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]    # noqa: E731
    found = [f"{a[4]} on {b[4]}" for i, a in enumerate(labels) for b in labels[i + 1:] if meet(a, b)]
    found += [f"{a[4]} on a box at {b[:2]}" for a in labels for b in boxes if meet(a, b)]
    return len(labels), found


def _forward(model, x) -> graph_view.GraphData:
    torch.manual_seed(0)
    forward, _, _, _ = forward_view.twin(forward_graph.trace(model, x))
    return forward


def test_the_check_finds_labels_that_cover_each_other_or_a_box():
    svg = ('<svg><rect x="0" y="0" width="60" height="36" rx="5"/>'
           '<text x="10" y="49" font-size="11" fill="#333">[32, 1, 28, 28]</text>'
           '<text x="40" y="50" font-size="11" fill="#333">[784, 128]</text>'
           '<text x="20" y="30" font-size="11" fill="#333">[128, 10]</text></svg>')
    assert svg_overlaps(svg) == (3, ["[32, 1, 28, 28] on [784, 128]", "[128, 10] on a box at (0.0, 0.0)"])


def test_02s_first_twin_draws_its_three_shapes_apart():
    """The issue: "[32, 1, 28, 28]", "[784, 128]" and "[128, 10]" leave three neighbouring boxes and were
    printed on top of each other, 4 px right of where each edge leaves."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    data = _forward(model, torch.randn(32, 1, 28, 28))
    shown = graph_boxes.view(data, graph_boxes.first_expansion(data))
    drawn, overlaps = svg_overlaps(graph_boxes.render_svg(shown))
    placed = {e.label for e in shown.edges if e.label_at}
    assert {"[32, 1, 28, 28]", "[784, 128]", "[128, 10]"} <= placed and not overlaps, overlaps
    assert drawn == len({(e.src, e.label) for e in shown.edges if e.label})    # each box's outputs drawn once


def test_no_expansion_of_resnet18s_forward_has_a_label_on_a_label_or_a_box():
    torchvision = pytest.importorskip("torchvision")
    data = _forward(torchvision.models.resnet18(), torch.rand(1, 3, 64, 64))
    paths = list(dict.fromkeys(p for n in data.nodes for p in n.group))
    for expanded in (frozenset(), graph_boxes.first_expansion(data), frozenset(paths)):
        shown = graph_boxes.view(data, expanded)
        drawn, overlaps = svg_overlaps(graph_boxes.render_svg(shown))
        labelled = sum(1 for e in shown.edges if e.label)
        assert not overlaps and drawn >= 0.9 * len({(e.src, e.label) for e in shown.edges if e.label}), \
            (len(expanded), drawn, labelled, overlaps[:3])


def test_a_tensor_used_twice_has_one_label_and_a_splits_outputs_one_each():
    boxes = [(10.0, 10.0, 200.0, 36.0), (10.0, 86.0, 60.0, 36.0), (150.0, 86.0, 60.0, 36.0)]
    one = [(0, ((110.0, 46.0), (40.0, 86.0)), "[4, 8]"), (0, ((110.0, 46.0), (180.0, 86.0)), "[4, 8]")]
    two = [(0, ((110.0, 46.0), (40.0, 86.0)), "[4, 4]"), (0, ((110.0, 46.0), (180.0, 86.0)), "[4, 2]")]
    places_one, _ = edge_labels.place(boxes, one, 300.0, columns=len)
    places_two, _ = edge_labels.place(boxes, two, 300.0, columns=len)
    assert places_one[0] is not None and places_one[1] is None
    assert None not in places_two and places_two[0] != places_two[1]


def test_a_lone_edge_keeps_the_old_place_just_below_and_right_of_where_it_leaves():
    assert edge_labels.place([(10, 10, 60, 36)], [(0, ((40, 46), (40, 86)), "[32, 784]")], 200,
                             columns=len) == ([(44.0, 59.0)], 200)


@pytest.mark.parametrize("name", ["02_autograd_graph", "05_compile_backends", "10_save_and_export", "11_custom_ops",
                                  "12_error_casebook", "13_diagnose_your_model"])
def test_the_pictures_stored_beside_the_views_have_no_label_on_a_label_or_a_box(name):
    """The SVG each view's output carries (GitHub and nbconvert show it): one render_svg per pane."""
    nb = json.loads((REPO / "notebooks" / f"{name}.ipynb").read_text())
    pictures = ["".join(out["data"]["image/svg+xml"]) for cell in nb["cells"] for out in cell.get("outputs", ())
                if "application/vnd.jupyter.widget-view+json" in out.get("data", {})]
    panes = [pane for svg in pictures for pane in svg.split('<svg xmlns="http://www.w3.org/2000/svg" viewBox')[1:]]
    found = [(name, overlap) for pane in panes for overlap in svg_overlaps(pane)[1]]
    assert pictures and not found, found[:5]
