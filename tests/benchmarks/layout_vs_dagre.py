"""Benchmark (not a test): edge crossings and times of graph_layout against @dagrejs/dagre and ELK's layered
algorithm (elkjs) on the same graphs.

    python tests/benchmarks/layout_vs_dagre.py                  # the table
    python tests/benchmarks/layout_vs_dagre.py --write-fixture  # also tests/fixtures/layout_graphs.json, whose
                                                                # crossings tests/test_graph_layout_js.py pins

The graphs are the deepest views (every node a box) of the five faithfulness-test models, a torchvision
ResNet-18, a DenseNet-style block (every layer reads the concatenation of all before it) and a 36-layer
TransformerEncoder (2,734 boxes: the branching graph where issue 29 counted one crossing per layer), and, for
time only, the 20,021-box residual stack of autograd_graph_2000.py at scale 10. dagre and elkjs come from npm,
installed once under build/dagre-bench/ and run with Node; they are not project dependencies.
Both layouts get the same box sizes and gaps, and their edges are counted by the same geometric rule (two
segments cross when they intersect away from a shared end point), so the ratio is fair.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from nbhelpers import autograd_graph, graph_layout, graph_view, models, module_scope  # noqa: E402
from tests.graph_cases import Recurrent, Residual, Shared, SplitHeads  # noqa: E402

BENCH = REPO / "build" / "dagre-bench"
FIXTURE = REPO / "tests" / "fixtures" / "layout_graphs.json"
DAGRE_JS = """
const dagre = require("@dagrejs/dagre");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const g = new dagre.graphlib.Graph({ multigraph: true });
g.setGraph({ rankdir: "TB", nodesep: %(gap)s, ranksep: %(layer_gap)s, marginx: 10, marginy: 10 });
g.setDefaultEdgeLabel(() => ({}));
input.widths.forEach((w, i) => g.setNode(String(i), { width: w, height: %(box_h)s }));
input.edges.forEach(([s, d], k) => g.setEdge(String(s), String(d), {}, "e" + k));
const start = Date.now();
dagre.layout(g);
const ms = Date.now() - start;
const routes = input.edges.map(([s, d], k) =>
  g.edge({ v: String(s), w: String(d), name: "e" + k }).points.map((p) => [p.x, p.y]));
const boxes = input.widths.map((w, i) => {
  const n = g.node(String(i));
  return [n.x - n.width / 2, n.y - n.height / 2, n.width, n.height];
});
process.stdout.write(JSON.stringify({ routes, boxes, ms }));
"""
ELK_JS = """
const ELK = require("elkjs");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const graph = { id: "root", layoutOptions: { "elk.algorithm": "layered", "elk.direction": "DOWN",
    "elk.spacing.nodeNode": "%(gap)s", "elk.layered.spacing.nodeNodeBetweenLayers": "%(layer_gap)s" },
  children: input.widths.map((w, i) => ({ id: "n" + i, width: w, height: %(box_h)s })),
  edges: input.edges.map(([s, d], k) => ({ id: "e" + k, sources: ["n" + s], targets: ["n" + d] })) };
const start = Date.now();
new ELK().layout(graph).then((done) => {
  const ms = Date.now() - start;
  const routes = done.edges.map((e) => { const s = e.sections[0];
    return [s.startPoint, ...(s.bendPoints || []), s.endPoint].map((p) => [p.x, p.y]); });
  const boxes = done.children.map((n) => [n.x, n.y, n.width, n.height]);
  process.stdout.write(JSON.stringify({ routes, boxes, ms }));
});
"""


class DenseBlock(nn.Module):
    """Four BN-ReLU-conv layers, each reading the channel-concatenation of the input and every earlier output."""

    def __init__(self, channels: int = 4, growth: int = 4, layers: int = 4):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.BatchNorm2d(channels + k * growth), nn.ReLU(),
                          nn.Conv2d(channels + k * growth, growth, 3, padding=1)) for k in range(layers))

    def forward(self, x):
        features = [x]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


def graphs():
    torch.manual_seed(0)
    cases = {"MLP": (models.mlp(), lambda m: m(torch.rand(4, 28, 28)).sum()),
             "CNN": (models.cnn(), lambda m: m(torch.rand(2, 1, 28, 28)).sum()),
             "residual": (Residual(), lambda m: m(torch.randn(3, 6)).sum()),
             "shared weights": (Shared(), lambda m: m(torch.randn(2, 5)).sum()),
             "split + LSTM": (nn.ModuleList([SplitHeads(), Recurrent()]),
                              lambda m: m[0](torch.randn(2, 4)).sum() + m[1](torch.randn(2, 5, 3)))}
    import torchvision
    cases["ResNet-18"] = (torchvision.models.resnet18(), lambda m: m(torch.rand(1, 3, 64, 64)).sum())
    cases["DenseNet-style block"] = (DenseBlock(), lambda m: m(torch.rand(1, 4, 8, 8)).sum())
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 36,
                                    enable_nested_tensor=False)
    cases["TransformerEncoder x36"] = (encoder, lambda m: m(torch.rand(2, 5, 16)).sum())
    for name, (model, run) in cases.items():
        with module_scope.record():
            loss = run(model)
        data = graph_view.from_autograd(autograd_graph.trace(loss, module=model))
        view = graph_view.view(data, {path for n in data.nodes for path in n.group})   # every module open
        yield name, [b.w for b in view.boxes], [(e.src, e.dst) for e in view.edges]


def _cross(p1, p2, q1, q2) -> bool:
    def orient(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    if {tuple(map(round, p1)), tuple(map(round, p2))} & {tuple(map(round, q1)), tuple(map(round, q2))}:
        return False                                       # segments that share an end point do not cross
    d1, d2, d3, d4 = orient(q1, q2, p1), orient(q1, q2, p2), orient(p1, p2, q1), orient(p1, p2, q2)
    return d1 * d2 < 0 and d3 * d4 < 0


def geometric_crossings(routes) -> int:
    segments = [(k, p, q) for k, r in enumerate(routes) for p, q in zip(r, r[1:])]
    return sum(1 for i, (k, p, q) in enumerate(segments) for (m, a, b) in segments[i + 1:]
               if k != m and _cross(p, q, a, b))


def overlaps(boxes) -> int:
    return sum(1 for i, a in enumerate(boxes) for b in boxes[i + 1:]
               if a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3])


def _node(name: str, script: str, widths, edges) -> dict:
    if not (BENCH / "node_modules" / "elkjs").is_dir() or not (BENCH / "node_modules" / "@dagrejs" / "dagre").is_dir():
        BENCH.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(BENCH), "--no-audit", "--no-fund", "@dagrejs/dagre", "elkjs"],
                       check=True, capture_output=True)
    path = BENCH / f"{name}.js"
    path.write_text(script % {"gap": graph_layout.BOX_GAP, "layer_gap": graph_layout.LAYER_GAP,
                              "box_h": graph_layout.BOX_H})
    done = subprocess.run(["node", str(path)], input=json.dumps({"widths": widths, "edges": edges}),
                          capture_output=True, text=True, check=True, cwd=BENCH, timeout=600)
    return json.loads(done.stdout)


def big_stack():
    """The 20,021-box graph: timed only (dagre and ELK take minutes on it)."""
    sys.path.insert(0, str(REPO / "tests" / "benchmarks"))
    from autograd_graph_2000 import build_loss

    loss, model = build_loss(1820)
    data = graph_view.from_autograd(autograd_graph.trace(loss, module=model))
    view = graph_view.view(data, {path for n in data.nodes for path in n.group})
    return [b.w for b in view.boxes], [(e.src, e.dst) for e in view.edges]


def main() -> None:
    if shutil.which("node") is None:
        sys.exit("needs Node.js and npm (for @dagrejs/dagre and elkjs)")
    fixture = {}
    print(f"{'graph':<24}{'boxes':>6}{'edges':>7}  crossings: ours / dagre / ELK   time (ms): ours / dagre / ELK")
    for name, widths, edges in graphs():
        start = time.perf_counter()
        ours = graph_layout.layout(len(widths), edges, widths)
        ms = (time.perf_counter() - start) * 1000
        assert ours == graph_layout.layout(len(widths), edges, widths), "the layout is not deterministic"
        theirs = {tool: _node(tool, script, widths, edges) for tool, script in (("dagre", DAGRE_JS), ("elk", ELK_JS))}
        counts = [geometric_crossings(ours.routes)] + [geometric_crossings(t["routes"]) for t in theirs.values()]
        assert graph_layout.crossings(ours) == counts[0] and overlaps(ours.boxes) == 0
        print(f"{name:<24}{len(widths):>6}{len(edges):>7}  {' / '.join(map(str, counts)):>22}   "
              f"{ms:.0f} / {theirs['dagre']['ms']} / {theirs['elk']['ms']}")
        fixture[name] = {"widths": widths, "edges": edges, "crossings": counts[0]}
    widths, edges = big_stack()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        graph_layout.layout(len(widths), edges, widths)
        times.append(time.perf_counter() - start)
    print(f"{'residual stack x1820':<24}{len(widths):>6}{len(edges):>7}  ours {sorted(times)[1]:.2f} s (median of 3)")
    if "--write-fixture" in sys.argv:
        kept = {k: v for k, v in fixture.items() if k in ("ResNet-18", "DenseNet-style block", "TransformerEncoder x36")}
        FIXTURE.write_text(json.dumps(kept, separators=(",", ":")) + "\n")
        print(f"wrote {FIXTURE.relative_to(REPO)}")


if __name__ == "__main__":
    main()
