"""Benchmark (not a test): edge crossings of graph_layout against @dagrejs/dagre on the same graphs.

    python tests/benchmarks/layout_vs_dagre.py

The graphs are the deepest views (every node a box) of the five faithfulness-test models, a torchvision
ResNet-18, a DenseNet-style block (every layer reads the concatenation of all before it) and a 36-layer
TransformerEncoder (2,734 boxes: the branching graph where issue 29 counted one crossing per layer). dagre
comes from npm, installed once under build/dagre-bench/ and run with Node; it is not a project dependency.
Both layouts get the same box sizes and gaps, and their edges are counted by the same geometric rule (two
segments cross when they intersect away from a shared end point), so the ratio is fair.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from nbhelpers import autograd_graph, graph_layout, graph_view, models, module_scope  # noqa: E402
from tests.graph_cases import Recurrent, Residual, Shared, SplitHeads  # noqa: E402

BENCH = REPO / "build" / "dagre-bench"
DAGRE_JS = """
const dagre = require("@dagrejs/dagre");
const input = JSON.parse(require("fs").readFileSync(0, "utf8"));
const g = new dagre.graphlib.Graph({ multigraph: true });
g.setGraph({ rankdir: "TB", nodesep: %(gap)s, ranksep: %(layer_gap)s, marginx: 10, marginy: 10 });
g.setDefaultEdgeLabel(() => ({}));
input.widths.forEach((w, i) => g.setNode(String(i), { width: w, height: %(box_h)s }));
input.edges.forEach(([s, d], k) => g.setEdge(String(s), String(d), {}, "e" + k));
dagre.layout(g);
const routes = input.edges.map(([s, d], k) =>
  g.edge({ v: String(s), w: String(d), name: "e" + k }).points.map((p) => [p.x, p.y]));
const boxes = input.widths.map((w, i) => {
  const n = g.node(String(i));
  return [n.x - n.width / 2, n.y - n.height / 2, n.width, n.height];
});
process.stdout.write(JSON.stringify({ routes, boxes }));
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
        view = graph_view.views(graph_view.from_autograd(autograd_graph.trace(loss, module=model)))[-1]
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


def dagre(widths, edges):
    if not (BENCH / "node_modules" / "@dagrejs" / "dagre").is_dir():
        BENCH.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(BENCH), "--no-audit", "--no-fund", "@dagrejs/dagre"],
                       check=True, capture_output=True)
    script = BENCH / "layout.js"
    script.write_text(DAGRE_JS % {"gap": graph_layout.BOX_GAP, "layer_gap": graph_layout.LAYER_GAP,
                                  "box_h": graph_layout.BOX_H})
    done = subprocess.run(["node", str(script)], input=json.dumps({"widths": widths, "edges": edges}),
                          capture_output=True, text=True, check=True, cwd=BENCH, timeout=300)
    return json.loads(done.stdout)


def main() -> None:
    if shutil.which("node") is None:
        sys.exit("needs Node.js and npm (for @dagrejs/dagre)")
    print(f"{'graph':<24}{'boxes':>6}{'edges':>7}{'ours':>7}{'dagre':>7}{'ratio':>7}{'overlaps':>10}")
    for name, widths, edges in graphs():
        ours = graph_layout.layout(len(widths), edges, widths)
        again = graph_layout.layout(len(widths), edges, widths)
        assert ours == again, "the layout is not deterministic"
        theirs = dagre(widths, edges)
        a, b = geometric_crossings(ours.routes), geometric_crossings(theirs["routes"])
        ratio = f"{a / b:.2f}" if b else ("1.00" if a == 0 else "inf")
        print(f"{name:<24}{len(widths):>6}{len(edges):>7}{a:>7}{b:>7}{ratio:>7}{overlaps(ours.boxes):>6} / "
              f"{overlaps(theirs['boxes'])}")


if __name__ == "__main__":
    main()
