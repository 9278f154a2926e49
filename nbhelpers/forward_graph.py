"""The forward graph as data: every ATen op a model's forward ran, the module that ran it, the shape, dtype and
strides of what went in and came out, which outputs are views, and the backward node each op made, so that
the forward graph people think in links node for node to the graph autograd runs (`autograd_graph.trace`).

The ops are recorded with a TorchDispatchMode, which sits below autograd: they are ATen's ops after the
composite ones were decomposed (`F.linear` on a 2-D input is `aten.t` + `aten.addmm`), the ops that make
backward nodes. Each op is named with the module that ran it by `module_scope.record()`, the same grouping the
backward view uses.

The link: autograd gives an op's output its `grad_fn` after the op returns below it (VariableType's
set_history, or rebase_history for an in-place op; torch/csrc/autograd/generated/VariableType*.cpp), so the node
an op made is read from its outputs when the next op starts, or when the forward ends. An in-place op on a view
makes two nodes autograd keeps: the base's `CopySlices`, which wraps the op's own node (that is `backward`), and
the view's replayed view node (in `also`). A custom `autograd.Function`'s node is not an ATen op's: it is
credited to the op that made the tensor the Function returned, when that tensor is first read or returned.
Nodes made before the trace (an input computed with grad beforehand) are not claimed.

A forward that raises does not raise here: the graph recorded up to the failure comes back with `error` set to
the exception (the view draws it in red with its first line) and, if an ATen op raised, that op with `failed`.

Example:
    fg = forward_graph.trace(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), torch.rand(2, 4))
    op = fg.ops[1]
    op.op, op.module, op.outputs[0].shape      # 'aten.addmm.default', 'Sequential.0', (2, 8)
    fg.backward.nodes[op.backward].name        # 'AddmmBackward0'
"""
from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

from nbhelpers import arguments, autograd_graph, eager_only, module_scope

__all__ = ["TensorMeta", "Source", "ForwardOp", "ForwardGraph", "trace"]   # inputs_by_module: the diagnosis's

COPY_SLICES = "torch::autograd::CopySlices"
FOR_GRAPHS = ("compile_lens.capture(model, x) and compile_view.from_report(...) for the graphs torch.compile "
              "built, or trace the module it wraps (`compiled._orig_mod`) to see the eager program")


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    dtype: str                 # "float32"
    stride: tuple[int, ...]
    requires_grad: bool
    storage_ptr: int = 0       # its storage's address while the op ran (0: none), as SavedTensor.storage_ptr


@dataclass(frozen=True)
class Source:
    """Where an op's input tensor came from: an earlier op's output, or from outside the forward."""

    op: int | None             # the op that made it (its latest version, after in-place ops), None from outside
    output: int = 0            # which of that op's outputs
    name: str = ""             # from outside: "input 0", a parameter's or buffer's path, or "tensor"


@dataclass(frozen=True)
class ForwardOp:
    id: int
    op: str                            # "aten.addmm.default"
    modules: tuple[str, ...]           # the modules running it, outermost first; () outside every module
    inputs: tuple[TensorMeta, ...]     # the tensor arguments, in the order the schema lists them
    sources: tuple[Source, ...]        # one per input
    outputs: tuple[TensorMeta, ...]
    views: tuple[int | None, ...]      # per output: the input it is a view of (the schema's alias), else None
    mutates: tuple[int, ...]           # the inputs it writes in place (`relu_`, `add_`, `copy_`)
    backward: int | None = None        # the node of ForwardGraph.backward this op made
    also: tuple[int, ...] = ()         # other nodes it made: an in-place op on a view's replayed view node
    failed: bool = False               # the op raised: the forward stopped here

    @property
    def module(self) -> str:
        return self.modules[-1] if self.modules else module_scope.OUTSIDE


@dataclass(frozen=True)
class ForwardGraph:
    ops: tuple[ForwardOp, ...]
    output: object                     # what the model returned (None if it raised)
    backward: autograd_graph.Graph | None   # traced from the output's tensors; None if none has a grad_fn
    error: BaseException | None = None
    module_types: tuple[tuple[str, str], ...] = ()   # (module path, class name), as the backward view names them
    settings: tuple[tuple[str, str], ...] = ()       # (module path, its extra_repr()): `in_features=4, ...`


def trace(model: torch.nn.Module, *inputs, **kwargs) -> ForwardGraph:
    """Run `model(*inputs, **kwargs)` once, recording its forward op by op; link each op to the backward node it
    made in `autograd_graph.trace` of the output. A forward that raises returns the partial graph with `error`
    set (and the failing op's `failed`), instead of raising: check `error`."""
    _check(model, inputs, kwargs)
    paths = module_scope.module_paths(model)
    names = _outside_names(model, paths, inputs, kwargs)
    recorder = _Recorder(names)
    output, error = None, None
    with eager_only.warn_if_compiled("forward_graph.trace", FOR_GRAPHS), \
            module_scope.record() as scope, recorder:
        recorder.scope = scope
        try:
            output = model(*inputs, **kwargs)
        except Exception as raised:  # noqa: BLE001 - kept and returned: the graph up to the failure is the point
            error = raised
    recorder.resolve()
    returned = module_scope.tensors_in(output) if error is None else []
    recorder.claim_read(returned)
    if error is None and not returned:
        raise ValueError(f"forward_graph.trace: the model returned {arguments.given(output)}, with no tensor in it; "
                         "trace a forward that returns a tensor (or tensors in a tuple, dict or dataclass)")
    graph, functions = _backward_of([t for t in returned if t.grad_fn is not None], model)
    modules = {id(m): m for m in model.modules()}
    types = tuple((path, type(modules[i]).__name__) for i, path in paths.items())
    settings = tuple((path, modules[i].extra_repr()) for i, path in paths.items() if modules[i].extra_repr())
    return ForwardGraph(_linked(recorder, functions), output, graph, error, types, settings)


def _check(model, inputs, kwargs) -> None:
    if not isinstance(model, torch.nn.Module):
        kind = "a function" if callable(model) else arguments.given(model)
        raise TypeError(f"forward_graph.trace: `model` must be a torch.nn.Module, got {kind}; the graph is grouped "
                        "by module, so wrap a function in a Module whose forward calls it")
    devices = {p.device for p in model.parameters()} | {b.device for b in model.buffers()}
    given = {t.device for t in tree_flatten((inputs, kwargs))[0] if isinstance(t, torch.Tensor)}
    if devices and given and not given <= devices:
        raise ValueError(f"forward_graph.trace: `inputs` are on {sorted(map(str, given))} but the model's parameters "
                         f"are on {sorted(map(str, devices))}; move them to one device, e.g. x.to(<the model's>)")


def _outside_names(model, paths: dict[int, str], inputs, kwargs) -> dict[int, str]:
    """id(tensor) -> its name, for the tensors a forward may read without an op making them: the arguments
    (`input 0`, `input x`, `input 1[0]` inside a container; a tensor passed twice keeps its first name), then
    the parameters and buffers, named from their module's path (module_scope's names: `ResNet.fc.weight`)."""
    names: dict[int, str] = {}
    for k, value in [*enumerate(inputs), *kwargs.items()]:
        leaves = tree_flatten(value)[0]
        for i, t in enumerate(leaves):
            if isinstance(t, torch.Tensor):
                names.setdefault(id(t), f"input {k}" if isinstance(value, torch.Tensor) else f"input {k}[{i}]")
    for m in model.modules():
        for name, t in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
            names.setdefault(id(t), f"{paths[id(m)]}.{name}")
    return names


def _backward_of(tensors, model) -> tuple[autograd_graph.Graph | None, list]:
    """The backward graph of the output's tensors and its grad_fns: of the one tensor, or of the sum of several
    (the reduction made here is not a forward op, and is linked from none)."""
    if not tensors:
        return None, []
    root = tensors[0] if len(tensors) == 1 else torch.stack([t.float().sum() for t in tensors]).sum()
    return autograd_graph.trace(root, module=model), autograd_graph.functions(root)


class _Recorder(TorchDispatchMode):
    """Each op's metadata on the way through; its outputs' grad_fn once autograd has set it."""

    def __init__(self, names: dict[int, str]):
        super().__init__()
        self.names, self.scope, self.ops, self.pending = names, None, [], None
        self.made = WeakTensorKeyDictionary()          # tensor -> (op, output): its latest version's maker
        self.nodes: list[list] = []                    # per op: the grad_fns read from its outputs
        self.seen: set = set()                         # every grad_fn in those lists
        self.first_sequence_nr = torch.autograd._get_sequence_nr()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.resolve()
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        self.claim_read(tensors)
        k = len(self.ops)
        record = {"id": k, "op": str(func), "modules": self.scope.chain() if self.scope else (),
                  "inputs": tuple(_meta(t) for t in tensors), "sources": tuple(self._source(t) for t in tensors)}
        try:
            out = func(*args, **kwargs)
        except Exception:
            self.ops.append({**record, "outputs": (), "views": (), "mutates": (), "failed": True})
            self.nodes.append([])
            raise
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        views, mutates = _aliases(func, args, kwargs, tensors, outputs)
        self.ops.append({**record, "outputs": tuple(_meta(t) for t in outputs), "views": views, "mutates": mutates})
        for i, t in enumerate(outputs):
            self.made[t] = (k, i)
        self.nodes.append([])
        self.pending = (k, [weakref.ref(t) for t in outputs])
        return out

    def _source(self, t: torch.Tensor) -> Source:
        made = self.made.get(t)
        if made is not None:
            return Source(made[0], made[1])
        return Source(None, 0, self.names.get(id(t), "tensor"))

    def claim_read(self, tensors) -> None:
        """A tensor read now whose grad_fn no op's outputs showed (a custom Function's node, set after the op
        inside it returned and read after a later op): that node goes to the op that made the tensor."""
        for t in tensors:
            made = self.made.get(t)
            if made is not None and t.grad_fn is not None and t.grad_fn not in self.seen:
                self.seen.add(t.grad_fn)
                self.nodes[made[0]].append(t.grad_fn)

    def resolve(self) -> None:
        """Read the grad_fn autograd gave the last op's outputs (and a view's base's: CopySlices)."""
        if self.pending is None:
            return
        k, refs = self.pending
        self.pending = None
        for ref in refs:
            t = ref()
            if t is None or t.grad_fn is None:
                continue
            if t._is_view() and t._base.grad_fn is not None and t._base.grad_fn.name() == COPY_SLICES:
                self.nodes[k].append(t._base.grad_fn)
            self.nodes[k].append(t.grad_fn)
            self.seen.update(self.nodes[k])


def _meta(t: torch.Tensor) -> TensorMeta:
    stride = tuple(t.stride()) if t.layout == torch.strided else ()
    return TensorMeta(tuple(t.shape), str(t.dtype).removeprefix("torch."), stride, t.requires_grad, _storage(t))


def _aliases(func, args, kwargs, inputs: list, outputs: list) -> tuple[tuple[int | None, ...], tuple[int, ...]]:
    """Which input each output is a view of, and which inputs the op writes, as positions among the op's tensor
    inputs. The schema says which (`Tensor(a)` returns a view of the argument marked `(a)`, `Tensor(a!)` is
    written); an argument that is a list of tensors (`aten.cat`'s) holds several positions; an output of a view
    op is a view of the input whose storage it shares (`split` returns several)."""
    schema, position, written, spans = func._schema, 0, [], {}
    for k, arg in enumerate(schema.arguments):
        value = args[k] if k < len(args) else kwargs.get(arg.name)
        count = sum(isinstance(t, torch.Tensor) for t in tree_flatten(value)[0])
        if arg.alias_info is not None:
            spans.update(dict.fromkeys(arg.alias_info.before_set, position))
            if arg.alias_info.is_write:
                written += range(position, position + count)
        position += count
    returns = [r.alias_info for r in schema.returns]
    if not any(a is not None and not a.is_write for a in returns):
        return (None,) * len(outputs), tuple(written)
    shared = [_storage(t) for t in inputs]
    views = []
    for k, out in enumerate(outputs):
        alias = returns[min(k, len(returns) - 1)]
        same = [i for i, key in enumerate(shared) if key and key == _storage(out)]
        by_schema = next((spans[s] for s in (alias.before_set if alias else ()) if s in spans), None)
        views.append((same[0] if same else by_schema) if alias is not None and not alias.is_write else None)
    return tuple(views), tuple(written)


def _storage(t: torch.Tensor) -> int:
    """Its storage's address (0 for none: meta, sparse, empty)."""
    if t.layout != torch.strided or t.is_meta:
        return 0
    return t.untyped_storage().data_ptr()


def _linked(recorder: _Recorder, functions: list) -> tuple[ForwardOp, ...]:
    """Each op with the backward nodes it made: a node is claimed by the first op whose outputs carry it,
    and only if it was made during the trace."""
    index = {fn: i for i, fn in enumerate(functions)}
    claimed, ops = set(), []
    for record, fns in zip(recorder.ops, recorder.nodes):
        made = []
        for fn in fns:
            if fn in claimed or fn not in index or fn._sequence_nr() < recorder.first_sequence_nr:
                continue
            claimed.add(fn)
            made.append(index[fn])
        ops.append(ForwardOp(**record, backward=made[0] if made else None, also=tuple(made[1:])))
    return tuple(ops)


def inputs_by_module(fg: ForwardGraph) -> dict[str, int]:
    """Bytes of the activations each module reads from ops outside it (what checkpoint() keeps), each storage once
    at its largest view; the model's inputs, parameters and buffers are not counted (they exist anyway)."""
    kept: dict[str, dict[int, int]] = {}
    made_in = {op.id: set(op.modules) for op in fg.ops}
    for op in fg.ops:
        for meta, source in zip(op.inputs, op.sources):
            if source.op is None:
                continue
            for path in op.modules:
                if path not in made_in.get(source.op, ()):
                    held = kept.setdefault(path, {})
                    key = meta.storage_ptr or id(meta)
                    held[key] = max(held.get(key, 0), _meta_bytes(meta))
    return {path: sum(v.values()) for path, v in kept.items()}


def _meta_bytes(meta: TensorMeta) -> int:
    return math.prod(meta.shape) * getattr(torch, meta.dtype).itemsize


# Not in __all__: what forward_view and node_times agree on (the notebooks use neither).
def autograd_detaches(fg: ForwardGraph) -> set[int]:
    """The ops that are autograd saving an output, not the model: an aten.detach of the op just before it, which
    no op reads and which made no backward node. Autograd keeps a shallow copy of a saved output
    (`tensor_data()`, SavedVariable in torch/csrc/autograd/saved_variable.cpp), which reaches a watching
    dispatch mode as `aten.detach`, and reaches nothing without one: forward_view leaves them out of the
    drawing, node_times out of the profile's ops."""
    read = {s.op for op in fg.ops for s in op.sources}
    return {op.id for op in fg.ops if op.op == "aten.detach.default" and op.backward is None and op.id not in read
            and op.sources and op.sources[0].op == op.id - 1}


def short_name(op: str) -> str:
    """aten.addmm.default -> addmm; aten.add.Tensor -> add.Tensor (the overload, when it says something)."""
    name = op.removeprefix("aten.")
    return name.removesuffix(".default")
