"""Benchmark (not a test): trace, lay out and render a ~2,000-node autograd graph to SVG.

    python tests/benchmarks/autograd_graph_2000.py            # nbhelpers only
    python tests/benchmarks/autograd_graph_2000.py --torchviz # also torchviz make_dot(...).pipe() (needs
                                                              # `pip install torchviz` and graphviz's `dot`)
The graph: a stack of residual MLP blocks, so it branches and merges like a real network.
"""
import argparse
import statistics
import time

import torch
from torch import nn

from nbhelpers import autograd_graph, graph_drawing


def build_loss(blocks: int = 182) -> torch.Tensor:
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16)) for _ in range(blocks))
    x = torch.randn(4, 16)
    for layer in layers:
        x = torch.relu(x + layer(x))                      # (4, 16)
    return x.sum()


def time_it(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--torchviz", action="store_true")
    args = parser.parse_args()
    loss = build_loss()
    nodes = len(autograd_graph.trace(loss).nodes)
    ours = time_it(lambda: graph_drawing.render_svg(autograd_graph.trace(loss)))
    print(f"{nodes} nodes: nbhelpers trace + layout + SVG, median of 5: {ours:.3f} s")
    if args.torchviz:
        from torchviz import make_dot

        theirs = time_it(lambda: make_dot(loss).pipe(format="svg"), repeats=3)
        print(f"torchviz make_dot(...).pipe(format='svg'), median of 3: {theirs:.3f} s; ratio {theirs / ours:.0f}x")


if __name__ == "__main__":
    main()
