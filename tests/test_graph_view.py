"""nbhelpers.graph_layout and graph_view: boxes never overlap and no edge runs through a box, the same graph
always gives the same picture, collapsed views follow the module tree, and bad input is refused clearly."""
import functools
import json

import pytest
import torch
from torch import nn

from nbhelpers import autograd_graph, graph_boxes, graph_layout, graph_view, models, module_scope
from tests import REPO


def _graph(model, x):
    with module_scope.record():
        loss = model(x).sum()
    return graph_view.from_autograd(autograd_graph.trace(loss, module=model))


@functools.cache                   # GraphData is frozen: tests share one trace of each model
def _cnn():
    torch.manual_seed(0)
    return _graph(models.cnn(), torch.rand(2, 1, 28, 28))


@functools.cache
def _resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return _graph(torchvision.models.resnet18(), torch.rand(1, 3, 64, 64))     # random weights, no download


def _segment_hits_box(p, q, box, inset=1.0) -> bool:
    """Liang-Barsky clip of segment p-q against the box shrunk by `inset` (touching an edge is fine)."""
    x, y, w, h = box
    lo_x, lo_y, hi_x, hi_y = x + inset, y + inset, x + w - inset, y + h - inset
    t0, t1 = 0.0, 1.0
    dx, dy = q[0] - p[0], q[1] - p[1]
    for d, lo, hi, start in ((dx, lo_x, hi_x, p[0]), (dy, lo_y, hi_y, p[1])):
        if d == 0:
            if not lo < start < hi:
                return False
            continue
        a, b = (lo - start) / d, (hi - start) / d
        t0, t1 = max(t0, min(a, b)), min(t1, max(a, b))
        if t0 >= t1:
            return False
    return True


def _check_drawing(boxes, edges):
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            apart = a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]
            assert apart, f"boxes overlap: {a} {b}"
    for src, dst, points in edges:
        for p, q in zip(points, points[1:]):
            for k, box in enumerate(boxes):
                if k not in (src, dst):
                    assert not _segment_hits_box(p, q, box), f"edge {src}->{dst} crosses box {k}"


def _modules(data) -> list[str]:
    return list(dict.fromkeys(p for n in data.nodes for p in n.group))


def _openings(data) -> list[frozenset[str]]:
    """Nothing open, the first view, one stage of ResNet open alone, everything open."""
    paths = _modules(data)
    return [frozenset(), graph_boxes.first_expansion(data), frozenset(paths[:1] + paths[5:6]), frozenset(paths)]


@pytest.mark.parametrize("make", [_cnn, _resnet18], ids=["cnn", "resnet18"])
def test_no_overlap_and_no_edge_through_a_box_whatever_is_open(make):
    for opened in _openings(make()):
        view = graph_view.view(make(), opened)
        boxes = [(b.x, b.y, b.w, b.h) for b in view.boxes]
        _check_drawing(boxes, [(e.src, e.dst, e.points) for e in view.edges])


def test_the_same_graph_gives_byte_identical_svg():
    first = [graph_view.render_svg(graph_view.view(_cnn.__wrapped__(), o)) for o in _openings(_cnn())]   # fresh
    second = [graph_view.render_svg(graph_view.view(_cnn.__wrapped__(), o)) for o in _openings(_cnn())]  # traces
    assert first == second


def test_collapsed_boxes_follow_the_module_tree():
    data = _resnet18()
    for opened in _openings(data):
        for box in graph_view.view(data, opened).boxes:
            if box.kind == "group":
                module = box.key[2:]
                expected = tuple(i for i, n in enumerate(data.nodes) if module in n.group)
                assert box.members == expected
                assert all(set(n.group[:n.group.index(module)]) <= opened for n in (data.nodes[i] for i in expected))
                assert module not in opened and box.nbytes == sum(data.nodes[i].saved_bytes for i in expected)
    assert len(graph_view.view(data, _modules(data)).boxes) == len(data.nodes)       # all open: every node


def test_opening_one_module_leaves_its_siblings_collapsed_and_names_them_from_the_root():
    data = _resnet18()
    view = graph_view.view(data, {"ResNet", "ResNet.layer1"})
    groups = {b.key: b.lines for b in view.boxes if b.kind in ("group", "fold")}
    assert groups["f:ResNet.layer1.0|ResNet.layer1.1"] == ("layer1.0-1 · BasicBlock × 2",
                                                           "each 13 nodes · 691 kB saved")
    one = {b.key: b.lines for b in graph_view.view(data, {"ResNet", "ResNet.layer1", "ResNet.layer1.1"}).boxes}
    assert one["f:ResNet.layer1.0|ResNet.layer1.0"] == ("layer1.0 · BasicBlock", "13 nodes · 691 kB saved")
    assert one["g:ResNet.layer1.1.conv1"][0] == "layer1.1.conv1 · Conv2d"          # the copy opened, by its name
    assert groups["g:ResNet.layer2"][0] == "layer2 · Sequential" and "g:ResNet.layer2.0" not in groups
    assert groups["g:ResNet.layer2"][1] == f"31 nodes · {graph_boxes._size(_saved(data, 'ResNet.layer2'))} saved"


def _saved(data, module: str) -> int:
    return sum(n.saved_bytes for n in data.nodes if module in n.group)


def test_the_first_view_is_legible_at_a_notebooks_width():
    for data in (_cnn(), _resnet18()):
        view = graph_view.view(data)
        assert len(view.boxes) <= graph_boxes.MAX_BOXES
        scale = min(1.0, graph_boxes.STAGE_W / view.width)
        assert graph_boxes.SUB_FONT * scale >= graph_boxes.MIN_TEXT_PX      # the smallest text, fitted
        deeper = _children_open(data, view.expanded)
        assert deeper == view.expanded or not graph_boxes.legible(graph_view.view(data, deeper))   # the deepest


def _children_open(data, opened: frozenset[str]) -> frozenset[str]:
    return opened | {n.group[k + 1] for n in data.nodes for k in range(len(n.group) - 1)
                     if set(n.group[:k + 1]) <= opened}


def test_layout_reduces_crossings_beyond_the_first_order():
    edges = [(0, 5), (0, 6), (1, 4), (1, 5), (2, 5), (3, 6)]     # the depth-first first order crosses 4 times
    best = graph_layout.layout(7, edges, [40] * 7)
    single = graph_layout.layout(7, edges, [40] * 7, sweeps=0)
    # the sweeps keep the best order they meet, the first included, so only a strict drop shows them working
    assert graph_layout.crossings(best) == 0 < graph_layout.crossings(single) == 4


def test_a_cycle_is_laid_out_but_refused_as_view_data():
    drawing = graph_layout.layout(3, [(0, 1), (1, 2), (2, 0)], [50] * 3)
    assert len(drawing.routes) == 3 and graph_layout.cycle_edges(3, [(0, 1), (1, 2), (2, 0)]) == [2]
    nodes = tuple(graph_view.ViewNode(f"n{i}", "op") for i in range(3))
    with pytest.raises(ValueError, match="has a cycle.*pass a DAG"):
        graph_view.view(graph_view.GraphData(nodes, ((0, 1), (1, 2), (2, 0))))


def test_bad_input_is_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="no nodes"):
        graph_view.view(graph_view.GraphData((), ()))
    one = (graph_view.ViewNode("a", "op"),)
    with pytest.raises(ValueError, match=r"has an edge \(0, 5\) to a node that does not exist"):
        graph_view.view(graph_view.GraphData(one, ((0, 5),)))
    with pytest.raises(TypeError, match=r"`expanded` must be module paths"):
        graph_view.view(graph_view.GraphData(one, ()), "NeuralNetwork")
    with pytest.raises(ValueError, match=r"`selected` is 7, not a node id; pass an int in 0\.\.0"):
        graph_view.show(graph_view.GraphData(one, ()), selected=7)
    with pytest.raises(ValueError, match="widths has 1 entries for 2 nodes"):
        graph_layout.layout(2, [], [10])


def test_a_hostile_name_is_escaped_in_the_svg():
    hostile = '<img src=x onerror="alert(1)">&'
    nodes = (graph_view.ViewNode(hostile, "op"), graph_view.ViewNode("b", "leaf"))
    svg = graph_view.render_svg(graph_view.view(graph_view.GraphData(nodes, ((0, 1),))))
    assert "<img" not in svg and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;" in svg


def test_details_are_what_backward_needs_to_know():
    data = _cnn()
    conv = next(i for i, n in enumerate(data.nodes) if n.label == "ConvolutionBackward0")
    rows = dict(graph_view.details(data, conv))
    assert rows["module"].startswith("NeuralNetwork.") and rows["gradients to"]
    assert any(field == "saved" and "storage #" in text and "version 0" in text
               for field, text in graph_view.details(data, conv))
    leaf = next(i for i, n in enumerate(data.nodes) if n.kind == "leaf")
    name, shape = data.nodes[leaf].label, list(dict(models.cnn().named_parameters())[data.nodes[leaf].label].shape)
    assert dict(graph_view.details(data, leaf))["fills"] == f"{name}.grad {shape}"


def test_the_widget_state_is_the_graph_deflated():
    data = _resnet18()
    widget = graph_view.show(data)
    per_node = len(widget.graph) / len(data.nodes)              # base64 of deflated JSON
    assert graph_view._untext(widget.graph) == graph_view._state(data, graph_boxes.first_expansion(data))
    assert per_node * 2000 <= 100_000, f"{per_node:.0f} B per node"   # measured 32 (ResNet-18)
    assert widget.expanded == sorted(graph_boxes.first_expansion(data))
    bundle = widget._repr_mimebundle_()
    assert bundle["image/svg+xml"].startswith("<svg") and "application/vnd.jupyter.widget-view+json" in bundle
    widget.expanded = ["ResNet", "ResNet.layer1"]               # what the learner opened is what the SVG shows
    assert "layer1.0-1 · BasicBlock × 2" in widget._repr_mimebundle_()["image/svg+xml"]   # its two blocks, folded


def test_the_diff_of_checkpointing_accounts_for_every_saved_byte():
    from torch.utils.checkpoint import checkpoint

    from nbhelpers import graph_diff, memory

    torch.manual_seed(0)
    mlp, images = models.mlp(), torch.rand(16, 28, 28)
    forwards = {"plain": lambda x: mlp.core(mlp.input_adapter(x)).sum(),
                "checkpointed": lambda x: checkpoint(mlp.core, mlp.input_adapter(x), use_reentrant=False).sum()}
    sides, counted = {}, {}
    for name, forward in forwards.items():
        with module_scope.record():
            loss = forward(images)
        sides[name] = graph_view.from_autograd(autograd_graph.trace(loss, module=mlp))
        counted[name] = memory.saved_bytes_by_module(forward, images)[0]
    changes = graph_diff.diff(sides["plain"], sides["checkpointed"])
    totals = {k: sum(c.nbytes for c in v.values()) for k, v in counted.items()}
    kept_input = counted["checkpointed"]["(outside modules)"].nbytes
    assert changes.saved_bytes == (totals["plain"], 0)                  # checkpointed nodes hold _Holders
    assert changes.saved_bytes[0] - changes.saved_bytes[1] == totals["plain"] - totals["checkpointed"] + kept_input
    assert {n.mark for n in changes.a.nodes if n.saved} == {"changed"}
    assert len(changes.matched) == len(sides["plain"].nodes)


def test_a_diff_marks_what_only_one_side_has():
    from nbhelpers import graph_diff

    a = graph_view.GraphData((graph_view.ViewNode("x", "op"), graph_view.ViewNode("y", "leaf")), ((0, 1),))
    b = graph_view.GraphData((graph_view.ViewNode("x", "op"), graph_view.ViewNode("z", "leaf")), ((0, 1),))
    changes = graph_diff.diff(a, b)
    assert changes.matched == ((0, 0),)
    assert [n.mark for n in changes.a.nodes] == ["", "removed"] and [n.mark for n in changes.b.nodes] == ["", "added"]
    assert ("diff", "removed") in graph_view.details(changes.a, 1)


def test_a_shared_submodule_keeps_each_nodes_own_chain_in_the_state():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc, self.dec = nn.Sequential(nn.Linear(3, 3)), nn.Sequential(nn.Tanh())
            self.dec.append(self.enc[0])                       # one Linear, run under both parents

        def forward(self, x):
            return self.dec(self.enc(x))

    data = _graph(Pair(), torch.randn(2, 3))
    state = graph_view._state(data, frozenset())

    def chain(index):                                         # what graph_view.js's chainOf() rebuilds
        out = []
        while index >= 0:
            out.insert(0, state["modules"][index][0])
            index = state["modules"][index][1]
        return tuple(out)

    assert [chain(node[2]) for node in state["nodes"]] == [n.group for n in data.nodes]
    assert {n.group[1] for n in data.nodes if len(n.group) > 1} == {"Pair.enc", "Pair.dec"}


def test_checkpointed_saves_hold_no_storage():
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with module_scope.record():
        loss = checkpoint(block, torch.randn(2, 4, requires_grad=True), use_reentrant=False).sum()
    data = graph_view.from_autograd(autograd_graph.trace(loss, module=block))
    packed = [i for i, n in enumerate(data.nodes) if n.saved]
    assert packed and all(data.nodes[i].storages == () for i in packed)     # nothing to share on hover
    assert all("packed by a saved-tensor hook as _Holder: no tensor held" in text
               for i in packed for field, text in graph_view.details(data, i) if field == "saved")


def test_an_empty_layout_is_empty():
    drawing = graph_layout.layout(0, [], [])
    assert drawing.boxes == () and drawing.routes == ()


NOTEBOOKS = sorted((REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_stored_graph_views_carry_the_current_front_end(path):
    """The site and an unrun notebook draw with the JS stored in the widget state, not the package's."""
    state = json.loads(path.read_text()).get("metadata", {}).get("widgets", {})
    models_ = state.get("application/vnd.jupyter.widget-state+json", {}).get("state", {}).values()
    stored = [m["state"]["_esm"] for m in models_ if "graph" in m["state"] and "_esm" in m["state"]]
    stale = sum(graph_view.unpacked_esm(esm) != graph_view.esm_source() for esm in stored)
    assert not stale, f"{stale} of {len(stored)} stored views run an old graph_view.js: make execute NB={path}"


def test_a_diff_names_its_sides_and_carries_the_matched_pairs():
    from nbhelpers import graph_diff

    a = graph_view.GraphData((graph_view.ViewNode("x", "op"), graph_view.ViewNode("y", "leaf")), ((0, 1),),
                             title="torch.compile, as built")
    b = graph_view.GraphData((graph_view.ViewNode("x", "op"), graph_view.ViewNode("z", "leaf")), ((0, 1),),
                             title="torch.compile, as built")
    changes = graph_diff.diff(a, b)
    left, right = (graph_view._untext(t) for t in (lambda w: (w.graph, w.other))(graph_view.show_diff(changes)))
    assert (left["title"], right["title"]) == ("torch.compile, as built (a)", "torch.compile, as built (b)")
    assert right["matched"] == [[0, 0]]
    named = graph_view.show_diff(changes, titles=("eager", "with checkpointing"))
    assert graph_view._untext(named.other)["title"] == "with checkpointing"
    with pytest.raises(TypeError, match="`titles` must be two non-empty strings"):
        graph_view.show_diff(changes, titles=("eager", ""))


def test_a_two_thousand_node_view_stores_at_most_120_kb():
    """Issue 29's budget: the state and the SVG fallback of a 2,000-node graph; the front-end counted too."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench", REPO / "tests" / "benchmarks" / "autograd_graph_2000.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    loss, model = bench.build_loss()
    data = graph_view.from_autograd(autograd_graph.trace(loss, module=model))
    widget = graph_view.show(data)
    svg = widget._repr_mimebundle_()["image/svg+xml"]
    assert len(data.nodes) == 2003
    assert len(widget.graph) + len(svg) + len(widget._esm) <= 120_000, (len(widget.graph), len(svg), len(widget._esm))
