"""The torch.compile pipeline drawn with one run's own counts: the Python function, what TorchDynamo made of it
(graphs, graph breaks), each FX graph's nodes, AOTAutograd's forward and backward graphs, and inductor's kernels.

Data first, picture second: `pipeline_counts` reads a `compile_lens` report (a `compile_report.CompileReport`)
and returns the numbers as a frozen dataclass; `draw_pipeline` draws them on a `picture_canvas` (an SVG, light
or dark, labels at 10 px or more inside their boxes). Every number on the picture is one of the report's.

Example:
    counts = compile_picture.pipeline_counts(compile_lens.capture(train_step, x, y), "train_step")
    assert counts.graphs == len(report.graphs)
    compile_picture.draw_pipeline(counts)
"""
from __future__ import annotations

from dataclasses import dataclass

from nbhelpers.compile_report import CompileReport
from nbhelpers.picture_canvas import Canvas, Picture

__all__ = ["PipelineCounts", "pipeline_counts", "draw_pipeline"]

_STAGE_W, _GAP, _TOP, _STAGE_H = 150, 34, 34, 112


@dataclass(frozen=True)
class PipelineCounts:
    """What each stage of one torch.compile run built, as counted in its compile_lens report."""

    function: str                     # the compiled function's name, as the notebook calls it
    fx_nodes: tuple[int, ...]         # nodes of each Dynamo FX graph, placeholders and output included
    breaks: tuple[tuple[str, int, str], ...]   # (GB code, times Dynamo met it, the user's line), per place
    aot_forward: int                  # nodes of AOTAutograd's forward graph of the first FX graph
    aot_backward: int                 # and of its backward graph (0: no input needs a gradient)
    kernels: tuple[str, ...]          # inductor's kernels for the first FX graph (an inference compile)

    @property
    def graphs(self) -> int:
        return len(self.fx_nodes)

    @property
    def break_count(self) -> int:
        """Every break Dynamo met, as counters["graph_break"] counts them (a place met twice counts twice)."""
        return sum(count for _, count, _ in self.breaks)


def pipeline_counts(report: CompileReport, function: str) -> PipelineCounts:
    """The counts of `report` (compile_lens.capture's); `function` names what was compiled, for the picture."""
    if not isinstance(report, CompileReport):
        raise TypeError(f"compile_picture.pipeline_counts: report must be a CompileReport, such as "
                        f"compile_lens.capture(fn, *args); got {type(report).__name__}")
    if not report.graphs:
        raise ValueError("compile_picture.pipeline_counts: the report has no FX graph: Dynamo captured nothing, "
                         "so there is no pipeline to draw; capture a function that calls torch operations")
    first = report.graphs[0]
    return PipelineCounts(function, tuple(len(g.nodes) for g in report.graphs),
                          tuple((b.code or b.gb_type, b.count, b.line) for b in report.breaks),
                          len(first.forward), len(first.backward), tuple(k.name for k in report.kernels))


def draw_pipeline(counts: PipelineCounts) -> Picture:
    """Five stages left to right, each with what it built in this run; under Dynamo the breaks (the lines Python
    runs between graphs), under inductor its kernels."""
    if not isinstance(counts, PipelineCounts):
        raise TypeError("compile_picture.draw_pipeline: counts must be a PipelineCounts, such as "
                        "compile_picture.pipeline_counts(report, 'train_step')")
    width = 8 + 5 * _STAGE_W + 4 * _GAP + 8
    lower = _TOP + _STAGE_H + 24
    height = lower + 24 + 26 * max(len(counts.breaks), len(counts.kernels), 1) + 8
    canvas = Canvas(width, height)
    canvas.text(f"torch.compile({counts.function}): what each stage built in this run", canvas.area(
        8, 4, width - 16, 20), size=12, x=8, anchor="start")
    for k, (title, fill, lines) in enumerate(_stages(counts)):
        x = 8 + k * (_STAGE_W + _GAP)
        box = canvas.box(x, _TOP, _STAGE_W, _STAGE_H, fill)
        canvas.text(title, box, size=12, y=_TOP + 20)
        for n, line in enumerate(lines):
            canvas.text(line, box, size=10, y=_TOP + 42 + 16 * n)
        if k:
            canvas.arrow((x - _GAP + 2, _TOP + _STAGE_H / 2), (x - 2, _TOP + _STAGE_H / 2))
    bottom = _TOP + _STAGE_H
    canvas.arrow((8 + _GAP + 1.75 * _STAGE_W, bottom), (8 + _GAP + 1.75 * _STAGE_W, lower + 22))   # Dynamo's
    canvas.arrow((8 + 4 * _GAP + 4.5 * _STAGE_W, bottom), (8 + 4 * _GAP + 4.5 * _STAGE_W, lower + 22))
    _lower_lists(canvas, counts, lower, width)
    return canvas.picture()


def _stages(counts: PipelineCounts) -> list[tuple[str, str, list[str]]]:
    graphs = [f"graph {i}: {n} nodes" for i, n in enumerate(counts.fx_nodes[:4])]
    if counts.graphs > 4:
        graphs.append(f"... {counts.graphs - 4} more")
    return [("Python", "line", [counts.function, "runs; Dynamo reads", "its bytecode"]),
            ("TorchDynamo", "group", [_plural(counts.graphs, "graph"), _plural(counts.break_count, "break"),
                                      f"at {_plural(len(counts.breaks), 'place')}"]),
            ("FX graphs", "op", graphs),
            ("AOTAutograd", "leaf", ["graph 0, ATen ops:", f"forward {counts.aot_forward} nodes",
                                     f"backward {counts.aot_backward} nodes"]),
            ("Inductor", "kernel", ["graph 0, no_grad:", _plural(len(counts.kernels), "kernel"),
                                    "C++ on a CPU" if all(k.startswith("cpp_") for k in counts.kernels)
                                    else "generated code"])]


def _lower_lists(canvas: Canvas, counts: PipelineCounts, top: float, width: float) -> None:
    """The breaks under Dynamo's column and the next one; the kernels under the last two columns."""
    left_w = 2 * _STAGE_W + _GAP + _STAGE_W // 2
    kernels_x = 8 + 3 * (_STAGE_W + _GAP)
    canvas.text("graph breaks: Python runs these lines", canvas.area(8, top, left_w, 20), size=11, x=8,
                anchor="start")
    canvas.text("kernels (inductor's names)", canvas.area(kernels_x, top, width - kernels_x - 8, 20), size=11,
                x=kernels_x, anchor="start")
    for n, (code, count, line) in enumerate(counts.breaks):
        box = canvas.box(8, top + 24 + 26 * n, left_w, 22, "break")
        canvas.text(f"{code} x{count} {line}", box, size=10, x=14, anchor="start")
    if not counts.breaks:
        canvas.text("none: one graph", canvas.area(8, top + 24, left_w, 22), size=10, x=14, y=top + 39,
                    anchor="start")
    for n, name in enumerate(counts.kernels):
        box = canvas.box(kernels_x, top + 24 + 26 * n, width - kernels_x - 8, 22, "kernel")
        canvas.text(name, box, size=10, x=kernels_x + 6, anchor="start")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")
