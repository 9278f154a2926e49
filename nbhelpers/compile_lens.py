"""What `torch.compile` built, as data: Dynamo's graphs, every graph break with its official code, the
guards of each compiled entry and the guard that failed on each recompile, AOTAutograd's forward and
backward graphs, and the kernels inductor generated, each linked to the user's source lines.

Three hooks of the installed torch, each for what only it sees:
- **a custom backend** receives every FX graph Dynamo hands a backend (the hook `torch._dynamo.explain`
  uses): nodes with traced shapes (`meta["example_value"]`) and the user's line (`meta["stack_trace"]`),
  and `gm.compile_subgraph_reason`, why the graph ended. The backend hands each graph to AOTAutograd
  (`aot_autograd` with recording compilers, the `aot_eager` pipeline), which returns the forward and
  backward graphs of ATen ops; `torch._functorch.config.force_non_lazy_backward_lowering` is patched on
  for the call, so the backward graph is made even when nothing calls `backward()`. The backend is wrapped in
  explain's own accumulator, `ExplainWithBackend`, whose graph and break counts for the first call the report
  keeps (`explained`) to check what the trace below says against.
- **the structured trace** (`torch._logging.trace_structured`, what `TORCH_TRACE` and tlparse read): a
  handler on its logger, `torch.__trace`, for the call only. It sees what no backend does: every graph
  break (`dynamo_graph_break_reason`, from `symbolic_convert.log_graph_break`), including one that ends
  an *empty* graph, which `explain` cannot list (`optimizer.zero_grad()` at the top of a training step);
  each entry's guards (`dynamo_cpp_guards_str`) and each recompile's failed guards (`recompile_reasons`).
- **inductor**, for the first graph: compiled again inside `torch._inductor.utils.run_and_get_code`, an
  inference compile (under no_grad) that is never run, with inductor's provenance tracking on: its map
  says which Dynamo FX nodes each kernel came from, and through them which lines (a kernel's name is not
  evidence: inductor names a kernel after every node whose lowering realised its buffer, so a kernel in
  front of a custom op carries the op's name without computing it).

A break's reason holds a `Gb_type` of `torch/_dynamo/graph_break_registry.json`, which gives its code
(GB0124); its explanation and hints are the ones Dynamo filled in for it (the registry holds templates).
Dynamo is reset before and after, so the caller's compiled functions are not reused (the reset also drops
any other compiled code in the process, as `explain`'s does); the one config patch is undone and the trace
handler removed on the way out.

Which to use: this lens for codes, guards, recompiles (`capture_calls`: each entry's `failed` guards) and the
graph views; `compilation.find_breaks` for explain's own figures (graph count, ops per graph) and
`compilation.watch_compiles` to count compiles around any code. A `Break` and find_breaks' `GraphBreak` name the
source line `line`; only a `Break` has a `code`, the GB code.

Example:
    report = compile_lens.capture(train_step, x, y)
    [(b.code, b.line, b.count) for b in report.breaks]   # [('GB0008', 'optimizer.zero_grad()', 1), ...]
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import io
import json
import logging
import re
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

import torch
from torch._dynamo.backends.debugging import ExplainWithBackend

from nbhelpers import arguments, compilation, user_code
from nbhelpers.compile_report import Break, CompileReport, Entry, FxGraph, FxNode, Guard, Kernel

__all__ = ["capture", "capture_calls", "registry"]   # they return a compile_report.CompileReport; compile_view draws it


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
    """Compile `fn` (a function or module), run it once on `args`, and report what was built.

    The call's own output goes nowhere: `fn` runs once compiled (partly eagerly, around the breaks).
    """
    _require_compilable("compile_lens.capture", fn)
    return _capture(fn, [(args, kwargs)], None, kernels)


def capture_calls(fn: Callable, calls: Sequence, *, dynamic: bool | None = None,
                  kernels: bool = False, keywords: Sequence[dict] | None = None,
                  split_calls: int | None = None) -> CompileReport:
    """Compile `fn` once and call it on each of `calls` in turn (a tuple of arguments, or one argument; with
    `keywords`, each call's keyword arguments, in the same order), as a program would: the report's entries say
    which call compiled what, and why each recompile did. `split_calls` (None: every call) is how many of the
    first calls have their graphs split by AOTAutograd into forward and backward; the graphs later calls compile
    are Dynamo's only (no forward or backward), which is enough to see what recompiles and costs a fraction:
    tracing a recompile's joint graph at symbolic shapes is most of its time."""
    _require_compilable("compile_lens.capture_calls", fn)
    if not isinstance(calls, (list, tuple)) or not calls:
        raise (TypeError if not isinstance(calls, (list, tuple)) else ValueError)(
            "compile_lens.capture_calls: `calls` must be a non-empty list of calls, each a tuple of arguments "
            f"or one argument, such as [torch.rand(4), torch.rand(8)]; got {arguments.given(calls)}")
    keywords = [{}] * len(calls) if keywords is None else keywords
    if not isinstance(keywords, (list, tuple)) or len(keywords) != len(calls) or \
            not all(isinstance(k, dict) for k in keywords):
        raise TypeError(f"compile_lens.capture_calls: `keywords` must be a list of {len(calls)} dicts, one per call "
                        f"(its keyword arguments), or None; got {arguments.given(keywords)}")
    if split_calls is not None:
        arguments.require_positive("compile_lens.capture_calls", "split_calls", split_calls, zero=True)
    return _capture(fn, [(c if isinstance(c, tuple) else (c,), k) for c, k in zip(calls, keywords)], dynamic,
                    kernels, split_calls)


def _require_compilable(function: str, fn) -> None:
    arguments.require_callable(function, "fn", fn, "a function or module, the callable you would give torch.compile")


def _capture(fn, calls, dynamic, kernels, split_calls=None) -> CompileReport:
    graphs, now = [], {"call": 0}
    root = _root_names(fn)

    def recording_backend(gm, example_inputs):
        from torch._dynamo.backends.common import aot_autograd

        graph = {"gm": gm, "inputs": list(example_inputs), "forward": None, "backward": None,
                 "entry": _entry_id(torch._guards.CompileContext.current_compile_id())}
        graphs.append(graph)
        if split_calls is not None and now["call"] >= split_calls:
            return gm.forward                     # Dynamo's graph, run as it is (the "eager" backend)

        return aot_autograd(fw_compiler=_keeping(graph, "forward", root), bw_compiler=_keeping(graph, "backward", root),
                            keep_inference_input_mutations=True)(gm, example_inputs)   # as aot_eager does

    explaining, explained = ExplainWithBackend(recording_backend), (0, 0)
    torch.compiler.reset()
    try:
        with _structured_trace() as records, contextlib.redirect_stderr(io.StringIO()), \
                torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
            compiled = torch.compile(fn, backend=explaining, dynamic=dynamic)
            for k, (args, kwargs) in enumerate(calls):
                records.append(({"call": k}, None))
                now["call"] = k
                compiled(*args, **kwargs)
                if k == 0:
                    explained = (len(explaining.graphs), len(explaining.break_reasons))
        fx = tuple(FxGraph(_nodes(g["gm"], root), g["entry"], g["forward"] or (), g["backward"] or ()) for g in graphs)
        found = _kernels(graphs[0]["gm"], graphs[0]["inputs"], fx[0]) if kernels and graphs else ()
    finally:
        torch.compiler.reset()
    return CompileReport(fx, _breaks(records, explaining.break_reasons, {g["entry"] for g in graphs}), found,
                         _entries(records), explained)


def _keeping(graph: dict, part: str, root):
    """An AOTAutograd compiler that keeps the graph it is given as `graph[part]` and runs it as it is."""
    from torch._dynamo.backends.debugging import boxed_nop

    def compiler(aot_gm, aot_inputs):
        graph[part] = _nodes(aot_gm, root, saved=part == "backward")
        return boxed_nop(aot_gm, aot_inputs)
    return compiler


@contextlib.contextmanager
def _structured_trace():
    """The structured-trace records emitted in the block, as (metadata, payload). `trace_structured`
    emits when its logger has a handler (torch/_logging/_internal.py: "check that there are handlers")."""
    records = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append((record.metadata, record.payload))
    trace_log = logging.getLogger("torch.__trace")
    propagate, trace_log.propagate = trace_log.propagate, False     # its records are ours, not the root's
    trace_log.addHandler(handler)
    try:
        yield records
    finally:
        trace_log.removeHandler(handler)
        trace_log.propagate = propagate


def _event(metadata: dict) -> str:
    """A record's event: trace_structured puts it first ("artifact" records carry their own name)."""
    name = next(iter(metadata))
    return metadata[name]["name"] if name == "artifact" else name


def _entry_id(compile_id) -> str:
    return f"{compile_id.frame_id}/{compile_id.frame_compile_id}" if compile_id else ""


def _record_entry(metadata: dict) -> str:
    return f"{metadata['frame_id']}/{metadata['frame_compile_id']}" if "frame_id" in metadata else ""


_GUARD = re.compile(r"^[| ]*\+- ([A-Z][A-Z0-9_]+): (.*)$", re.M)


def _guards(tree: str) -> tuple[Guard, ...]:
    """The leaf guards of Dynamo's printed guard tree. A comment is "user line  # file:line in fn" for a
    guard the user's code caused, and a bare "file:line in fn" for an ambient one (grad mode, ...)."""
    found = []
    for kind, rest in _GUARD.findall(tree):
        check, *comment = rest.split("  # ")
        found.append(Guard(kind, check.strip(), comment[0].strip() if len(comment) >= 2 else ""))
    return tuple(found)


def _entries(records) -> tuple[Entry, ...]:
    entries, guards, failed, seconds, graphs, call = {}, {}, {}, {}, Counter(), 0
    for metadata, payload in records:
        if "call" in metadata:
            call = metadata["call"]
            continue
        event, key = _event(metadata), _record_entry(metadata)
        if event == "dynamo_start":
            entries[key] = (metadata["dynamo_start"]["stack"][-1]["name"], call)
        elif event == "dynamo_cpp_guards_str":
            guards[key] = _guards(payload)
        elif event == "recompile_reasons":        # one reason is logged as text, several as a JSON list
            reasons = json.loads(payload) if payload.startswith("[") else [payload]
            failed[key] = tuple(r.split("  #")[0].strip() for r in reasons)
        elif event == "compilation_metrics":
            seconds[key] = metadata["compilation_metrics"].get("entire_frame_compile_time_s") or 0.0
        elif event == "dynamo_output_graph":
            graphs[key] += 1
    return tuple(Entry(key, function, call, guards.get(key, ()), failed.get(key, ()), seconds.get(key, 0.0),
                       graphs[key]) for key, (function, call) in entries.items())


def _user_line(stack_trace: str | None) -> str:
    """The last frame's source line in a node's stack trace (Dynamo records the user's frames; Python
    3.11+ adds a line of ^ markers under it)."""
    lines = [text.strip() for text in (stack_trace or "").splitlines() if set(text.strip()) - set("^~ ")]
    return lines[-1] if lines and not lines[-1].startswith("File ") else ""


def _root_names(fn) -> tuple[str, tuple[str, ...]]:
    """For a module: its class name, and the names Dynamo's sources give it: what its forward calls `self`, or
    `fn` when Dynamo traces a torch.nn module through its `wrap_inline` wrapper (torch/_dynamo/external_utils.py),
    as it does for a compiled nn.Sequential."""
    if not isinstance(fn, torch.nn.Module):
        return "", ()
    module = getattr(fn, "_orig_mod", fn)
    parameters = list(inspect.signature(type(module).forward).parameters)
    return type(module).__name__, (parameters[0] if parameters else "self", "fn")


def _nodes(gm, root: tuple[str, tuple[str, ...]], saved: bool = False) -> tuple[FxNode, ...]:
    """`saved`: a backward graph, whose placeholders are the tensors forward saved, each with the module that
    made it; elsewhere a placeholder is an input, made by no module (Dynamo tags it with its first user's)."""
    nodes = []
    for n in gm.graph.nodes:
        value = n.meta.get("example_value", n.meta.get("val"))      # Dynamo's, AOTAutograd's
        shape = str(list(value.shape)) if isinstance(value, torch.Tensor) else ""
        target = getattr(n.target, "__name__", str(n.target))
        made_from = n.meta.get("from_node") or ()                      # provenance, innermost pass first
        stack = n.meta.get("nn_module_stack") or n.meta.get("fwd_nn_module_stack") or {}
        module = _module_of(n, stack, root, saved)
        nodes.append(FxNode(n.name, n.op, target, shape, _user_line(n.meta.get("stack_trace")),
                            made_from[0].name if made_from else "", module, tuple(a.name for a in n.all_input_nodes)))
    return tuple(nodes)


def _module_of(n, stack: dict, root: tuple[str, tuple[str, ...]], saved: bool) -> str:
    if n.op == "output" or (n.op == "placeholder" and not saved):
        return ""
    if stack:
        return _module_path(list(stack.values())[-1][0], root)
    # no stack: a saved graph input (made by no module), or the compiled module's own forward, which Dynamo's
    # stack leaves out ("" for a function)
    return "" if n.op == "placeholder" else root[0]


_SOURCE_ROOT = re.compile(r"^[LG]\[['\"]([^'\"]+)['\"]\]")
_SOURCE_PART = re.compile(r"\._modules\[['\"]([^'\"]+)['\"]\]|\[['\"]?([^'\"\]]+)['\"]?\]")


def _module_path(source: str, root: tuple[str, tuple[str, ...]]) -> str:
    """Dynamo's name for a module (its source, e.g. `L['self'].layers[0]._modules['fc']`) as a module path:
    `Net.layers.0.fc` when a module `Net` was compiled (`root` is ("Net", ("self", "fn"))), `model.layers.0.fc` for a
    function that reached a module through its variable `model`."""
    head = _SOURCE_ROOT.match(source)
    variable = head.group(1) if head else ""
    rest = _SOURCE_PART.sub(lambda m: "." + (m.group(1) or m.group(2)), source[head.end():] if head else source)
    parts = [p for p in rest.split(".") if p and p != "_orig_mod"]
    base = root[0] if root[0] and variable in root[1] else variable
    return ".".join([base] + parts) if base else ".".join(parts)


# A reason the backend gets that is not a Gb_type: torch/_dynamo/symbolic_convert.py's generic_jump raises
# Unsupported("Data-dependent branching", ...) but hands the backend the reason "generic_jump <value>".
_ALIASES = {"generic_jump": "Data-dependent branching"}
# A break inside a function Dynamo inlined ends the graph at the caller's line, with this reason and that frame
# (torch/_dynamo/symbolic_convert.py, step_graph_break): explain lists it there, the log at the inner line.
_STEP = "step_unsupported"
_BREAK_AT = re.compile(r"Graph break in user code at (.+):(\d+)\n")
_FRAME = re.compile(r'^  File "(.+)", line (\d+), in .+\n    (.+)$', re.M)


def _breaks(records, reasons, compiled: set[str]) -> tuple[Break, ...]:
    """Every break log_graph_break traced, once per (gb_type, user line), in the order first met. The
    user's line is the innermost frame of the learner's code (user_code.learners: not torch, not this package's
    machinery that called the model), so a break inside `optimizer.step()` is that line's."""
    known = registry()
    explained, stepped = set(), set()
    for reason in reasons:                        # the breaks a backend saw: explain's
        frame = reason.user_stack[-1]
        gb_type = reason.reason.strip().splitlines()[0]
        explained.add((_ALIASES.get(gb_type.split()[0], gb_type), frame.filename, frame.lineno))
        if gb_type == _STEP:
            stepped.add((frame.filename, frame.lineno))
    found: dict[tuple, dict] = {}
    for metadata, payload in records:
        if _event(metadata) != "dynamo_graph_break_reason" or not (at := _BREAK_AT.match(payload or "")):
            continue                              # other wordings repeat a break already logged this way
        head, _, stack = payload.partition("\nUser code traceback:\n")
        lines = (text.strip().removeprefix("Graph Break Reason: ") for text in head.splitlines())
        gb_type = next((text for text in lines if text in known), "")
        frames = _FRAME.findall(stack.split("\nTraceback (most recent call last):")[0])
        user = [f for f in frames if user_code.learners(f[0])]   # not torch's, not this package's machinery
        file, lineno = at.group(1), int(at.group(2))
        key = (gb_type, *user[-1][:2]) if user else (gb_type, file, str(lineno))
        at_entry = _record_entry(metadata)
        entry = found.setdefault(key, {"line": user[-1][2].strip() if user else "", "count": 0, "explain": False,
                                       "place": f"{user_code.place(user[-1][0])}:{user[-1][1]}" if user else "",
                                       "entry": at_entry, **_explained_as(head, known.get(gb_type)),
                                       "where": compilation.place_in_torch(file, lineno), "ended": {}})
        entry["count"] += 1
        if at_entry in compiled:
            entry["ended"][at_entry] = None       # an ordered set: in the order compiled
        entry["explain"] |= (gb_type, file, lineno) in explained or any((f, int(n)) in stepped for f, n, _ in frames)
    return tuple(Break(known.get(gb, {}).get("code", ""), gb, e["line"], e["count"], e["explanation"], e["hints"],
                       e["where"], e["explain"], e["entry"], e["place"], tuple(e["ended"]))
                 for (gb, *_), e in found.items())


_EXPLANATION = re.compile(r"^  Explanation: (.*?)(?=^  Hint: |^\s*$|\Z)", re.M | re.S)
_HINT = re.compile(r"^  Hint: (.*)$", re.M)


def _explained_as(head: str, entry: dict | None) -> dict:
    """The explanation and hints as Dynamo filled them in for this break (the registry holds templates,
    such as "builtin operator `{fn.__name__}`"), else the registry's."""
    entry = entry or {"explanation": "", "hints": ()}
    found = _EXPLANATION.search(head)
    return {"explanation": " ".join(found.group(1).split()) if found else entry["explanation"],
            "hints": tuple(_HINT.findall(head)) or entry["hints"]}


_KERNEL = re.compile(r"^(\w+) = async_compile\.\w+\(.*?r?'{3}(.*?)'{3}", re.S | re.M)
_PROVENANCE = "inductor_provenance_tracking_node_mappings"


def _kernels(gm, example_inputs, graph: FxGraph) -> tuple[Kernel, ...]:
    """Compile one Dynamo graph (`graph` is its FxGraph) with inductor; each kernel, the Dynamo FX nodes whose
    computation it contains, and their lines.

    The links are inductor's own provenance (`trace.provenance_tracking_level=1`: the structured trace's
    `inductor_provenance_tracking_node_mappings`, kernel -> post-grad nodes -> Dynamo's nodes), with one
    correction: inductor also lists for a fused kernel the node it was lowering when it realised the kernel's
    buffer, which for a buffer an extern call then reads (a custom op, a BLAS matmul) is that call's node. A
    node computed by an extern call is the call's, not any fused kernel's."""
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.utils import run_and_get_code

    with _structured_trace() as records, torch.no_grad(), \
            torch._inductor.config.patch({"trace.provenance_tracking_level": 1}):
        _, codes = run_and_get_code(lambda: compile_fx(gm, example_inputs))     # compiled, never run
    (mapping,) = [json.loads(payload) for metadata, payload in records
                  if metadata.get("artifact", {}).get("name") == _PROVENANCE]
    to_dynamo = mapping["postToPre"]
    owners = {key.rsplit(":", 1)[0]: post for key, post in mapping["cppCodeToPost"].items()}
    by_extern = {node for name, post in owners.items() if not name.startswith(("cpp_", "triton_")) for node in post}
    line_of = {n.name: n.line for n in graph.nodes}
    order = {n.name: k for k, n in enumerate(graph.nodes)}
    found = []
    for code in codes:
        for name, source in _KERNEL.findall(code):
            post = [node for node in owners.get(name, ()) if node not in by_extern]
            covered = tuple(sorted({pre for node in post for pre in to_dynamo.get(node, ()) if pre in line_of},
                                   key=order.get))
            lines = tuple(dict.fromkeys(line_of[fx] for fx in covered if line_of[fx]))
            found.append(Kernel(name, source, covered, lines))
    return tuple(found)
