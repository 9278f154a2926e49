"""The browser lays out what the learner opens with graph_layout.js and graph_view.js: they must give what
graph_layout and graph_boxes give, to the last bit, or the SVG a notebook stores and the view a learner
clicks would disagree. Node runs the very module the widget ships (graph_view.esm_source(), which esm() packs);
a missing Node is a skip here and a failure under REQUIRE_SITE=1 (CI), which installs it for the site."""
import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

from nbhelpers import (autograd_graph, forward_graph, forward_view, graph_boxes, graph_folds, graph_layout, graph_view,
                       models, module_scope, node_times)
from tests import REPO
from tests.graph_cases import OutsideResidual, Residual

FIXTURE = REPO / "tests" / "fixtures" / "layout_graphs.json"     # written by tests/benchmarks/layout_vs_dagre.py
DRIVER = """
import * as gv from "./esm.mjs";
import { readFileSync } from "fs";
const job = JSON.parse(readFileSync(0, "utf8"));
const out = { layouts: {}, views: [] };
for (const [name, g] of Object.entries(job.layouts)) {
  const d = gv.layout(g.widths.length, g.edges, g.widths);
  out.layouts[name] = { ...d, crossings: gv.crossings(d) };
}
for (const { state, expanded } of job.views) {
  const graph = gv.unpackState(state), v = gv.viewOf(graph, new Set(expanded));
  out.views.push({ boxes: v.boxes.map((b) => [b.key, b.lines, b.title, b.kind, b.members, b.x, b.y, b.w, b.h, b.share]),
    edges: v.edges.map((e) => [e.from, e.to, e.points, e.label, e.labelAt]), width: v.width, height: v.height,
    folds: graph.folds.map((f) => [f.parent, f.kind, f.copies, f.names, f.nodes, gv.foldLabel(f)]),
    rows: graph.nodes.map((n) => n.rows) });
}
process.stdout.write(JSON.stringify(out));
"""


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("REQUIRE_SITE") == "1":
            pytest.fail("REQUIRE_SITE=1 but Node.js is missing: install it (apt-get install nodejs)")
        pytest.skip("no Node.js: install it to compare the browser's layout with Python's")
    return node


def run_js(tmp_path: Path, job: dict) -> dict:
    (tmp_path / "esm.mjs").write_text(graph_view.esm_source())
    (tmp_path / "driver.mjs").write_text(DRIVER)
    done = subprocess.run([_node(), "driver.mjs"], cwd=tmp_path, input=json.dumps(job), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _python_view(shown: graph_boxes.View) -> dict:
    return {"boxes": [[b.key, list(b.lines), b.title, b.kind, list(b.members), b.x, b.y, b.w, b.h, b.share]
                      for b in shown.boxes],
            "edges": [[e.src, e.dst, [list(p) for p in e.points], e.label, list(e.label_at) if e.label_at else None]
                      for e in shown.edges],
            "width": shown.width, "height": shown.height}


def _graph(model, run) -> graph_view.GraphData:
    with module_scope.record():
        loss = run(model)
    return graph_view.from_autograd(autograd_graph.trace(loss, module=model))


class Named(nn.Module):
    """Names a learner might give: long, East Asian, and hostile (they must stay text)."""

    def __init__(self):
        super().__init__()
        self.add_module("编码器", nn.Linear(3, 3))
        self.add_module("a_very_long_submodule_name_that_cannot_fit_in_any_box_at_all", nn.Linear(3, 3))
        self.add_module("img_src_x_onerror", nn.Tanh())

    def forward(self, x):
        return self.img_src_x_onerror(self.a_very_long_submodule_name_that_cannot_fit_in_any_box_at_all(
            self.编码器(x)))


@functools.cache
def _cases() -> dict[str, graph_view.GraphData]:
    torch.manual_seed(0)
    cases = {"mlp": _graph(models.mlp(), lambda m: m(torch.rand(4, 28, 28)).sum()),
             "residual": _graph(Residual(), lambda m: m(torch.randn(3, 6)).sum()),
             "names": _graph(Named(), lambda m: m(torch.randn(2, 3)).sum())}
    torchvision = pytest.importorskip("torchvision")
    cases["resnet18"] = _graph(torchvision.models.resnet18(), lambda m: m(torch.rand(1, 3, 64, 64)).sum())
    forward, _, _, _ = forward_view.twin(forward_graph.trace(torchvision.models.resnet18(), torch.rand(1, 3, 64, 64)))
    cases["resnet18 forward"] = forward            # tips, and edges labelled with shapes ("3 tensors" when merged)
    deep = nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.Tanh()) for _ in range(12)])
    cases["deep forward"], _, _, _ = forward_view.twin(forward_graph.trace(deep, torch.randn(2, 6)))   # long
    # edges from the parameters at the top, so labels past their first segments and straight vertical runs
    cases["mlp timed"] = _timed(models.mlp(), torch.rand(4, 28, 28))    # measured rows in the panel
    cases["mlp forward timed"] = forward_view.twin(*node_times.forward(models.mlp(), torch.rand(4, 28, 28)))[0]
    cases["outside residual"] = _graph(OutsideResidual(), lambda m: m(torch.randn(2, 4, requires_grad=True)).sum())
    cases["gpt2"] = _graph(_tiny_gpt2(), lambda m: m(input_ids=torch.arange(8).reshape(2, 4)).logits.sum())
    return cases


def _timed(model, x) -> graph_view.GraphData:
    with module_scope.record():
        loss = model(x).sum()
    return graph_view.from_autograd(*node_times.backward(loss, module=model))


def _tiny_gpt2():
    """Four GPT2Blocks (a fold) with three Conv1D siblings of different shapes inside each (no fold)."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=4, n_embd=16, n_head=2, vocab_size=32, n_positions=8)
    return transformers.GPT2LMHeadModel(config)


def _expansions(data: graph_view.GraphData) -> list[frozenset[str]]:
    paths = list(dict.fromkeys(p for n in data.nodes for p in n.group))
    first = graph_boxes.first_expansion(data)
    opened = [first | {paths[0], f.parent, f.copies[1]} for f in graph_folds.folds(data)]   # a middle or last copy
    return [frozenset(), first, frozenset(paths), first | {paths[-1]}, frozenset(paths[:1] + paths[2:3]), *opened]


def test_the_browser_draws_the_boxes_python_draws_for_every_expansion(tmp_path):
    jobs, expected = [], []
    for data in _cases().values():
        folds = [[f.parent, f.kind, list(f.copies), list(f.names), f.nodes, f.label] for f in graph_folds.folds(data)]
        rows = [[list(r) for r in graph_view.details(data, i)] for i in range(len(data.nodes))]
        for expanded in _expansions(data):
            jobs.append({"state": graph_view._state(data, expanded), "expanded": sorted(expanded)})
            expected.append({**_python_view(graph_boxes.view(data, expanded)), "folds": folds, "rows": rows})
    got = run_js(tmp_path, {"layouts": {}, "views": jobs})["views"]
    assert len(got) == len(expected) >= 35
    for mine, theirs in zip(expected, got):
        assert mine == theirs                       # keys, cut labels, tooltips, places, routes, folds, panel rows
    kinds = {b[0].split(":")[0] for view in expected for b in view["boxes"]}
    assert kinds == {"n", "g", "f"}                 # every kind of box was compared, folds and a copy opened
    timed = {b[0].split(":")[0] for view in expected for b in view["boxes"] if b[9]}
    assert timed == {"n", "g"}                      # a node's share of the time and a module's, summed alike


def test_a_cut_label_ends_in_an_ellipsis_inside_its_box_and_the_tooltip_keeps_it_whole():
    long_name = "a_very_long_submodule_name_that_cannot_fit_in_any_box_at_all"
    shown = graph_boxes.view(_cases()["names"], frozenset({"Named"}))
    (box,) = [b for b in shown.boxes if b.key == f"g:Named.{long_name}"]
    assert box.w == graph_boxes.MAX_W and box.lines[0].endswith("…") and long_name in box.title
    assert graph_boxes.columns(box.lines[0]) * graph_boxes.COLUMN <= box.w - 2 * graph_boxes.PAD
    assert graph_boxes.columns("编码器") == 6 and graph_boxes.fitted("编码器编码器", 5 * 7.0, 7.0) == "编码…"


@pytest.mark.skipif(not FIXTURE.exists(), reason="run tests/benchmarks/layout_vs_dagre.py --write-fixture")
def test_benchmark_graphs_lay_out_the_same_in_both_and_cross_as_pinned(tmp_path):
    graphs = json.loads(FIXTURE.read_text())
    got = run_js(tmp_path, {"layouts": {k: {"widths": g["widths"], "edges": g["edges"]} for k, g in graphs.items()},
                            "views": []})["layouts"]
    for name, g in graphs.items():
        drawing = graph_layout.layout(len(g["widths"]), [tuple(e) for e in g["edges"]], g["widths"])
        assert [list(b) for b in drawing.boxes] == got[name]["boxes"], name
        assert [[list(p) for p in r] for r in drawing.routes] == got[name]["routes"], name
        assert graph_layout.crossings(drawing) == got[name]["crossings"] == g["crossings"], name
