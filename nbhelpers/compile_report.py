"""What `compile_lens` reports about one torch.compile run, as plain data: Dynamo's FX graphs (with
AOTAutograd's forward and backward graphs), each graph break, each compiled entry with its guards, and
inductor's kernels. `compile_lens` fills these in; `compile_view` turns them into pictures. They are
frozen dataclasses, so a report can be compared, stored and handed around without touching torch.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FxNode", "FxGraph", "Guard", "Entry", "Break", "Kernel", "CompileReport"]


@dataclass(frozen=True)
class FxNode:
    name: str
    op: str                    # placeholder, call_function, call_method, call_module, get_attr, output
    target: str
    shape: str                 # of the traced value, "" when it is not a tensor
    line: str                  # the user's source line that made it ("" for inputs and outputs)
    source: str = ""           # in an AOTAutograd graph: the Dynamo FX node it was made from (meta["from_node"])
    # the innermost module whose forward made it, from Dynamo's meta["nn_module_stack"] (a backward node: the
    # forward module it differentiates, meta["fwd_nn_module_stack"]), as a path named after the compiled module's
    # class ("Net.layers.0.fc", as module_scope names it); "" outside every module
    module: str = ""
    inputs: tuple[str, ...] = ()   # the nodes of its own graph whose values it takes (n.all_input_nodes)


@dataclass(frozen=True)
class FxGraph:
    nodes: tuple[FxNode, ...]
    entry: str = ""                      # the compiled entry it belongs to (see Entry.id)
    forward: tuple[FxNode, ...] = ()     # AOTAutograd's forward graph, in ATen ops
    backward: tuple[FxNode, ...] = ()    # and its backward graph; () when no input needs a gradient


@dataclass(frozen=True)
class Guard:
    kind: str                  # TENSOR_MATCH, ID_MATCH, SHAPE_ENV, GLOBAL_STATE, ...
    check: str                 # the check, as Dynamo prints it
    line: str                  # the user's line that made Dynamo add it ("" for the ambient ones)


@dataclass(frozen=True)
class Entry:
    """One compiled version of one code object: what Dynamo's cache holds and checks before reuse."""

    id: str                    # Dynamo's compile id: "0/1" is frame 0's second compile (a recompile)
    function: str              # the code compiled: the user's function, or a resume function after a break
    call: int                  # the call (an index into capture_calls' `calls`) that compiled it
    guards: tuple[Guard, ...]
    failed: tuple[str, ...]    # on a recompile: the guard each earlier entry failed, as Dynamo words it (what
    #                            compilation.watch_compiles().recompiles lists for a whole block)
    seconds: float = 0.0       # the time Dynamo took to compile it, with the backend it was given
    #                            (compilation_metrics' entire_frame_compile_time_s)
    graphs: int = 0            # the graphs Dynamo logged for it (structured trace: dynamo_output_graph)


@dataclass(frozen=True)
class Break:
    code: str                  # GBxxxx from the installed registry ("" if the reason is not in it)
    gb_type: str
    line: str                  # the user's line where the graph broke
    count: int                 # how often it broke there
    explanation: str
    hints: tuple[str, ...]
    where: str = ""            # the break's own place when it lies inside torch, e.g. torch/optim/optimizer.py:78
    in_explain: bool = True    # a graph ended here, so explain lists it; False after an empty graph
    entry: str = ""            # the compiled entry it first happened in
    place: str = ""            # the user's line's file and number, "model.py:12" ("cell:3" in a notebook)
    # the compiled entries it ended with a graph ("0/0"; with Entry.call, which call's graphs it split): a break
    # inside an inlined call is logged again in each nested frame Dynamo then tries (empty graphs there), so
    # `count` can exceed the graphs it split
    ended_in: tuple[str, ...] = ()

    @property
    def ended(self) -> int:
        return len(self.ended_in)


@dataclass(frozen=True)
class Kernel:
    name: str                  # e.g. cpp_fused_relu_0
    source: str                # its generated C++ (CPU) or Triton (GPU) source
    fx_nodes: tuple[str, ...]  # the FX nodes it covers
    lines: tuple[str, ...]     # the user's lines they came from


@dataclass(frozen=True)
class CompileReport:
    graphs: tuple[FxGraph, ...]
    breaks: tuple[Break, ...]  # one per distinct (code, user line), in the order first met
    kernels: tuple[Kernel, ...]
    entries: tuple[Entry, ...] = ()
    # the first call's graphs and graph breaks as torch._dynamo.explain counts them: its ExplainWithBackend
    # (torch/_dynamo/backends/debugging.py) wraps the backend of the same compile and sees each graph Dynamo hands
    # it, where `entries` are read from Dynamo's log
    explained: tuple[int, int] = (0, 0)
