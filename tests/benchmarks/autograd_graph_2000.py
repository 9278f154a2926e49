"""Benchmark (not a test): trace, group by module, choose the first view and render a ~2,000-node autograd graph
to SVG.

    python tests/benchmarks/autograd_graph_2000.py            # nbhelpers only
    python tests/benchmarks/autograd_graph_2000.py --scale 10 # the same, ~20,000 nodes
    python tests/benchmarks/autograd_graph_2000.py --timed    # also the timed view (node_times: a bar per box)
                                                              # against the same graph's untimed view
    python tests/benchmarks/autograd_graph_2000.py --torchviz # also torchviz make_dot(...).pipe() (needs
                                                              # `pip install torchviz` and graphviz's `dot`)
The graph: a stack of residual MLP blocks, so it branches and merges like a real network.
"""
import argparse
import statistics
import time

import torch
from torch import nn

from nbhelpers import autograd_graph, graph_view, module_scope, node_times


class Stack(nn.Module):
    def __init__(self, blocks: int):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16))
                                    for _ in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(x + block(x))                  # (4, 16)
        return x.sum()


def build_loss(blocks: int = 182):
    torch.manual_seed(0)
    model = Stack(blocks)
    with module_scope.record():
        loss = model(torch.randn(4, 16))
    return loss, model


def trace_to_svg(loss, model) -> str:
    data = graph_view.from_autograd(autograd_graph.trace(loss, module=model))
    return graph_view.render_svg(graph_view.view(data))     # the first view, as a widget's picture


def timed_against_untimed(loss, model, repeats: int) -> tuple[float, float]:
    """Median seconds of view data + first view + SVG for one traced graph, with its backward's times and without."""
    graph, times = node_times.backward(loss, module=model)
    with_times = time_it(lambda: graph_view.render_svg(graph_view.view(graph_view.from_autograd(graph, times=times))),
                         repeats)
    without = time_it(lambda: graph_view.render_svg(graph_view.view(graph_view.from_autograd(graph))), repeats)
    return with_times, without


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
    parser.add_argument("--timed", action="store_true")
    parser.add_argument("--scale", type=int, default=1)
    args = parser.parse_args()
    loss, model = build_loss(182 * args.scale)
    nodes = len(autograd_graph.trace(loss).nodes)
    ours = time_it(lambda: trace_to_svg(loss, model), repeats=5 if args.scale == 1 else 3)
    print(f"{nodes} nodes: nbhelpers trace + grouping + first view + SVG, median: {ours:.3f} s")
    if args.timed:
        timed, untimed = timed_against_untimed(loss, model, repeats=5 if args.scale == 1 else 3)
        print(f"the same graph's view + SVG, median: with its times {timed:.3f} s, without {untimed:.3f} s; "
              f"ratio {timed / untimed:.2f}")
    if args.torchviz:
        from torchviz import make_dot

        theirs = time_it(lambda: make_dot(loss).pipe(format="svg"), repeats=3)
        print(f"torchviz make_dot(...).pipe(format='svg'), median of 3: {theirs:.3f} s; ratio {theirs / ours:.0f}x")


if __name__ == "__main__":
    main()
