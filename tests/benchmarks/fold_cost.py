"""Benchmark (not a test): what folding repeated blocks costs on a ~20,000-node backward graph whose blocks fold.

    python tests/benchmarks/fold_cost.py              # 1,800 residual blocks, ~20,000 nodes
    python tests/benchmarks/fold_cost.py --blocks 100

Times (median of 3): graph_folds.folds, the first view (graph_boxes.first_expansion, then the view), the view with
every module open, and the same view with folding left out (found=()): the last two lay out the same 20,000 boxes,
so their ratio is what the fold rules add to a layout. Prints the boxes each view draws.
"""
import argparse
import statistics
import time

import torch
from torch import nn

from nbhelpers import autograd_graph, graph_boxes, graph_folds, graph_view, module_scope


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16))

    def forward(self, x):
        return torch.relu(x + self.body(x))             # the residual inside the block: blocks fold


def graph(blocks: int) -> graph_view.GraphData:
    torch.manual_seed(0)
    model = nn.Sequential(*[Block() for _ in range(blocks)])
    with module_scope.record():
        loss = model(torch.randn(4, 16, requires_grad=True)).sum()
    return graph_view.from_autograd(autograd_graph.trace(loss, module=model))


def median_time(fn, repeats: int = 3) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=1800)
    data = graph(parser.parse_args().blocks)
    every = frozenset(p for n in data.nodes for p in n.group)
    took, found = median_time(lambda: graph_folds.folds(data))
    print(f"{len(data.nodes):,} nodes; folds {took:.2f} s: {[f.label for f in found]}")
    took, first = median_time(lambda: graph_view.view(data))
    print(f"first view {took:.2f} s: {len(first.boxes)} boxes")
    folded, shown = median_time(lambda: graph_boxes.view(data, every, None, found))
    plain, _ = median_time(lambda: graph_boxes.view(data, every, None, ()))
    print(f"every module open {folded:.2f} s ({len(shown.boxes):,} boxes), without the fold rules {plain:.2f} s: "
          f"ratio {folded / plain:.2f}")


if __name__ == "__main__":
    main()
