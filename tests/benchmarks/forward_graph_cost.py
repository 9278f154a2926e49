"""Benchmark (not a test): what the forward/backward twin view costs.

    python tests/benchmarks/forward_graph_cost.py                  # nbhelpers only
    python tests/benchmarks/forward_graph_cost.py --torchview DIR  # also torchview's draw_graph, imported from DIR
                                                                   # (pip install --target DIR torchview graphviz)
Measured, each the median of --rounds:
- ResNet-18 at 224x224: the eager forward; forward_graph.trace (the tracing overhead is their ratio); show_twin
  (both first views laid out and the SVG drawn); the browser's layout of both panes (graph_view.js's viewOf,
  run by Node on the stored state); and, with --torchview, draw_graph(..., save_graph=False) on the same model
  (its graph built, not rendered: rendering needs graphviz's `dot`).
- A ~2,000-op forward (autograd_graph_2000's residual MLP stack): the stored view's size (the two deflated
  graphs and the SVG of the first view) and the time to trace and show it.
"""
import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torchvision
from autograd_graph_2000 import Stack          # residual MLP blocks: about 9 forward ops a block

from nbhelpers import forward_graph, graph_view

NODE_DRIVER = """
import * as gv from "./esm.mjs";
import { readFileSync } from "fs";
const states = JSON.parse(readFileSync(0, "utf8"));
const start = performance.now();
for (const state of states) gv.viewOf(gv.unpackState(state), new Set(state.expanded));
process.stdout.write(String(performance.now() - start));
"""


def median(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def browser_layout_ms(widget) -> float | None:
    """Node running the shipped front-end's viewOf on both panes' stored state (the browser's layout work)."""
    node = shutil.which("node")
    if node is None:
        return None
    states = [graph_view._untext(t) for t in (widget.graph, widget.other) if t]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "esm.mjs").write_text(graph_view.esm_source())
        Path(tmp, "driver.mjs").write_text(NODE_DRIVER)
        done = subprocess.run([node, "driver.mjs"], cwd=tmp, input=json.dumps(states), capture_output=True,
                              text=True, timeout=300, check=True)
    return float(done.stdout)


def stored_bytes(widget) -> dict[str, int]:
    svg = widget._repr_mimebundle_()["image/svg+xml"]
    return {"graphs (deflated)": len(widget.graph) + len(widget.other), "svg": len(svg.encode())}


def resnet(rounds: int, torchview_dir: str | None) -> None:
    torch.manual_seed(0)
    model, x = torchvision.models.resnet18().eval(), torch.rand(1, 3, 224, 224)
    cold_start = time.perf_counter()
    cold = graph_view.show_twin(forward_graph.trace(model, x))
    cold_s = time.perf_counter() - cold_start
    eager = median(lambda: model(x), rounds)
    traced = median(lambda: forward_graph.trace(model, x), rounds)
    fg = forward_graph.trace(model, x)
    shown = median(lambda: graph_view.show_twin(fg)._repr_mimebundle_(), rounds)
    layout_ms = browser_layout_ms(cold)
    print(f"ResNet-18 224x224: {len(fg.ops)} ops, {len(fg.backward.nodes)} backward nodes")
    print(f"  first call (cold): trace + show_twin + SVG {cold_s:.3f} s")
    print(f"  eager forward {eager * 1e3:.1f} ms; forward_graph.trace {traced * 1e3:.1f} ms "
          f"({traced / eager:.2f}x the forward)")
    print(f"  show_twin + SVG {shown * 1e3:.1f} ms; the browser's layout of both panes (Node) "
          f"{'n/a (no node)' if layout_ms is None else f'{layout_ms:.1f} ms'}")
    print(f"  trace + both layouts + drawing: {(traced + shown) * 1e3 + (layout_ms or 0):.0f} ms")
    if torchview_dir:
        sys.path.insert(0, torchview_dir)
        from torchview import draw_graph

        viewed = median(lambda: draw_graph(model, input_data=x, save_graph=False, depth=10), rounds)
        print(f"  torchview draw_graph (graph built, not rendered) {viewed * 1e3:.1f} ms "
              f"({viewed / eager:.2f}x the forward; ours {traced / eager:.2f}x)")


def big(blocks: int, rounds: int) -> None:
    torch.manual_seed(0)
    model, x = Stack(blocks), torch.randn(4, 16)
    fg = forward_graph.trace(model, x)
    widget = graph_view.show_twin(fg)
    size = stored_bytes(widget)
    seconds = median(lambda: graph_view.show_twin(forward_graph.trace(model, x))._repr_mimebundle_(), rounds)
    print(f"Stack({blocks}): {len(fg.ops)} ops, {len(fg.backward.nodes)} backward nodes; stored view "
          f"{sum(size.values()) / 1e3:.1f} kB ({', '.join(f'{k} {v / 1e3:.1f} kB' for k, v in size.items())}); "
          f"trace + show + SVG {seconds:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--blocks", type=int, default=220)       # 1,981 forward ops
    parser.add_argument("--torchview", metavar="DIR", help="a folder torchview and graphviz were installed into")
    args = parser.parse_args()
    resnet(args.rounds, args.torchview)
    big(args.blocks, args.rounds)


if __name__ == "__main__":
    main()
