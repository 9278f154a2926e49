"""What `torch.compile` built, as data: Dynamo's graphs, the breaks between them with their official
codes, and the kernels inductor generated for the first graph, each linked to the user's source lines.

The hooks are the installed torch's own. A custom backend receives every FX graph Dynamo hands a backend
(the same hook `torch._dynamo.explain` uses): its nodes carry the traced shapes (`meta["example_value"]`)
and the user's line (`meta["stack_trace"]`), and `gm.compile_subgraph_reason` says why the graph ended
(a graph break, with the user's stack). A break's first line is the `Gb_type` of an entry of
`torch/_dynamo/graph_break_registry.json`, which gives its code (GB0124), explanation and hints. For the
kernels, the first graph is compiled again with inductor inside `torch._inductor.utils.run_and_get_code`;
the CPU's C++ kernels carry no provenance comments (inductor writes "Source Nodes" comments for Triton and
other GPU back-ends, not for C++), so a kernel is linked to the FX nodes whose op its name lists (inductor
names a fused kernel after the ATen ops it fuses: `cpp_fused_add_mul_pow_tanh_0`) and, through them, to
lines. That compile is an inference one (under no_grad), and nothing is run: inductor writes its code when
it compiles. Dynamo is reset before and after, so the caller's
compiled functions are not reused (the reset also drops any other compiled code in the process, as
`explain`'s does); no config or logging setting is changed. Like `explain`,
it cannot see a break that follows an empty graph (nothing reaches a backend: `loss.backward()` right
after a `print`); `torch._dynamo.utils.counters["graph_break"]` counts those, without their lines.

Example:
    report = compile_lens.capture(train_step, x, y)
    [(b.code, b.line, b.count) for b in report.breaks]     # [('GB0124', 'if loss.item() > 1:', 1)]
"""
from __future__ import annotations

import contextlib
import functools
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

__all__ = ["capture", "registry", "to_graph_data", "from_exported"]   # capture() returns a CompileReport of FxGraphs, Breaks, Kernels


@dataclass(frozen=True)
class FxNode:
    name: str
    op: str                    # placeholder, call_function, call_method, call_module, get_attr, output
    target: str
    shape: str                 # of the traced value, "" when it is not a tensor
    line: str                  # the user's source line that made it ("" for inputs and outputs)


@dataclass(frozen=True)
class FxGraph:
    nodes: tuple[FxNode, ...]


@dataclass(frozen=True)
class Break:
    code: str                  # GBxxxx from the installed registry ("" if the reason is not in it)
    gb_type: str
    line: str                  # the user's line where the graph broke
    count: int                 # how often this (code, line) broke
    explanation: str
    hints: tuple[str, ...]


@dataclass(frozen=True)
class Kernel:
    name: str                  # e.g. cpp_fused_relu_0
    source: str                # its generated C++ (CPU) or Triton (GPU) source
    fx_nodes: tuple[str, ...]  # the FX nodes it covers
    lines: tuple[str, ...]     # the user's lines they came from


@dataclass(frozen=True)
class CompileReport:
    graphs: tuple[FxGraph, ...]
    breaks: tuple[Break, ...]  # one per distinct (code, line), in the order first met
    kernels: tuple[Kernel, ...]


@functools.cache
def registry() -> dict[str, dict]:
    """The installed graph-break registry, by Gb_type: {"code", "explanation", "hints"}."""
    path = Path(torch._dynamo.__file__).with_name("graph_break_registry.json")
    by_type = {}
    for code, entries in json.loads(path.read_text()).items():
        for entry in entries:
            by_type.setdefault(entry["Gb_type"], {"code": code, "explanation": entry["Explanation"],
                                                  "hints": tuple(entry["Hints"])})
    return by_type


def capture(fn: Callable, *args, kernels: bool = True, **kwargs) -> CompileReport:
    """Compile `fn` (a function or module) with a recording backend, run it once on `args`, and report.

    The call's own output goes nowhere: `fn` runs once compiled (partly eagerly, around the breaks).
    """
    if not callable(fn):
        raise TypeError(f"capture() takes a function or module, got {type(fn).__name__}; pass the callable "
                        "you would give torch.compile")
    graphs, reasons = [], []

    def recording_backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        if gm.compile_subgraph_reason.graph_break:
            reasons.append(gm.compile_subgraph_reason)
        return gm.forward

    torch.compiler.reset()
    try:
        with contextlib.redirect_stderr(io.StringIO()):   # Dynamo's graph-break warnings: reported below
            torch.compile(fn, backend=recording_backend)(*args, **kwargs)
        if not graphs:                                # a break always comes with a graph
            reasons = _why_nothing_was_traced(fn, args, kwargs)
        fx = tuple(_fx_graph(gm) for gm, _ in graphs)
        found = _kernels(*graphs[0], fx[0]) if kernels and graphs else ()
    finally:
        torch.compiler.reset()
    return CompileReport(fx, _deduplicated(reasons), found)


def _why_nothing_was_traced(fn, args, kwargs) -> list:
    """No graph at all: ask for one with fullgraph=True, whose error names the first break."""
    torch.compiler.reset()
    try:
        torch.compile(fn, backend="eager", fullgraph=True)(*args, **kwargs)
    except torch._dynamo.exc.Unsupported as error:
        return [error]
    return []


def _user_line(stack_trace: str | None) -> str:
    """The last frame's source line in a node's stack trace (Dynamo records the user's frames; Python
    3.11+ adds a line of ^ markers under it)."""
    lines = [l.strip() for l in (stack_trace or "").splitlines() if set(l.strip()) - set("^~ ")]
    return lines[-1] if lines and not lines[-1].startswith("File ") else ""


def _fx_graph(gm) -> FxGraph:
    nodes = []
    for n in gm.graph.nodes:
        value = n.meta.get("example_value")
        shape = str(list(value.shape)) if isinstance(value, torch.Tensor) else ""
        target = getattr(n.target, "__name__", str(n.target))
        nodes.append(FxNode(n.name, n.op, target, shape, _user_line(n.meta.get("stack_trace"))))
    return FxGraph(tuple(nodes))


def _break_of(reason) -> tuple[str, str]:
    """(first line of the reason, the user's line) for a GraphCompileReason or an Unsupported error."""
    text = getattr(reason, "reason", None) or str(reason)
    stack = getattr(reason, "user_stack", None) or getattr(reason, "real_stack", None) or []
    line = (stack[-1].line or "").strip() if stack else ""
    return text.strip().splitlines()[0], line


# A break whose reason text is not a Gb_type: torch/_dynamo/symbolic_convert.py's generic_jump raises
# Unsupported("Data-dependent branching", ...) but hands the backend the reason "generic_jump <value>".
_ALIASES = {"generic_jump": "Data-dependent branching"}


def _deduplicated(reasons) -> tuple[Break, ...]:
    counts: dict[tuple[str, str], int] = {}
    for reason in reasons:
        gb_type, line = _break_of(reason)
        key = (_ALIASES.get(gb_type.split()[0], gb_type), line)
        counts[key] = counts.get(key, 0) + 1
    known = registry()
    found = []
    for (gb, line), n in counts.items():
        info = known.get(gb, {})
        found.append(Break(info.get("code", ""), gb, line, n, info.get("explanation", ""), info.get("hints", ())))
    return tuple(found)


_KERNEL = re.compile(r"^(\w+) = async_compile\.\w+\(.*?r?'{3}(.*?)'{3}", re.S | re.M)
_NAME_PARTS = re.compile(r"^(cpp|triton)_(fused|poi|red|per)_|_\d+$")


def _kernels(gm, example_inputs, graph: FxGraph) -> tuple[Kernel, ...]:
    """Compile one Dynamo graph (`graph` is its FxGraph) with inductor; each kernel and the FX nodes
    whose ops it fuses."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    with torch.no_grad():
        _, codes = run_and_get_code(lambda: compile_fx(gm, example_inputs))     # compiled, never run
    fx = [(n.name, n.target.strip("_"), n.line) for n in graph.nodes if n.op.startswith("call_")]
    found = []
    for code in codes:
        for name, source in _KERNEL.findall(code):
            ops = f"_{_NAME_PARTS.sub('', name)}_"              # "_add_clamp_min_mul_" holds "_clamp_min_"
            covered = tuple(n for n, target, _ in fx if f"_{target}_" in ops)
            lines = tuple(dict.fromkeys(line for n, _, line in fx if n in covered and line))
            found.append(Kernel(name, source, covered, lines))
    return tuple(found)


def to_graph_data(report: CompileReport):
    """The report as a graph_view.GraphData: source lines, FX graphs (one module box each, the breaks
    between them), and kernels; an edge runs from a line to the FX nodes it made and from an FX node to
    the kernel that computes it, so hovering lights up what a line became."""
    from nbhelpers.graph_view import GraphData, ViewNode

    nodes, edges, index = [], [], {}

    def add(key, node):
        index[key] = len(nodes)
        nodes.append(node)

    all_lines = dict.fromkeys(n.line for g in report.graphs for n in g.nodes if n.line)
    for line in all_lines:
        add(("line", line), ViewNode(line, "leaf", ("source",)))
    for k, graph in enumerate(report.graphs):
        for n in graph.nodes:
            add((k, n.name), ViewNode(f"{n.name}: {n.target}" if n.op == "call_function" else n.name,
                                      "op", (f"graph {k}",), op=f"{n.op} {n.shape}".strip()))
            if n.line:
                edges.append((index[("line", n.line)], index[(k, n.name)]))
    for b in report.breaks:
        add(("break", b.code, b.line), ViewNode(f"break {b.code}: {b.line}", "saves", ("breaks",),
                                               op=f"{b.gb_type} (x{b.count})"))
    for kernel in report.kernels:
        add(("kernel", kernel.name), ViewNode(kernel.name, "saves", ("kernels",), op="inductor kernel"))
        edges += [(index[(0, n)], index[("kernel", kernel.name)]) for n in kernel.fx_nodes if (0, n) in index]
    return GraphData(tuple(nodes), tuple(dict.fromkeys(edges)), title="torch.compile, as built",
                     targets_label="leads to")


def from_exported(program) -> "GraphData":
    """An ExportedProgram's graph as graph_view data: its inputs (parameters and buffers, which export
    lifts to graph inputs, and the user's inputs with their symbolic sizes' ranges) and its ATen ops; an
    edge runs from a value to each node that uses it."""
    from nbhelpers.graph_view import GraphData, ViewNode

    signature = program.graph_signature
    lifted = {**signature.inputs_to_parameters, **signature.inputs_to_buffers}
    ranges = {str(symbol): f"{r.lower}..{r.upper}" for symbol, r in program.range_constraints.items()}
    nodes, index = [], {}
    for n in program.graph.nodes:
        value = n.meta.get("val")
        shape = [str(d) for d in value.shape] if isinstance(value, torch.Tensor) else []
        where = ", ".join(f"{d} in {ranges[d]}" for d in shape if d in ranges)
        if n.op == "placeholder":
            label = f"{'parameter' if n.name in signature.inputs_to_parameters else 'buffer'} {lifted[n.name]}" \
                if n.name in lifted else f"input {n.name} [{', '.join(shape)}]" + (f" ({where})" if where else "")
            node = ViewNode(label, "leaf" if n.name in lifted else "saves", ("inputs",))
        else:
            target = getattr(n.target, "__name__", str(n.target))
            node = ViewNode(f"{n.name}: {target} [{', '.join(shape)}]" if shape else f"{n.name}: {target}",
                            "op", ("graph",))
        index[n] = len(nodes)
        nodes.append(node)
    edges = tuple((index[a], index[n]) for n in program.graph.nodes for a in n.all_input_nodes)
    return GraphData(tuple(nodes), edges, title="torch.export", targets_label="used by")
