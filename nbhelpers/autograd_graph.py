"""A backward graph as plain data: nodes, edges, saved tensors, and the order backward runs them.

Which module's forward created each node is read from the tags `module_scope.record()` leaves on the
nodes: run the forward inside it to get `Node.module`; without it every node is "(outside modules)".

Example:
    with module_scope.record():
        loss = model(x).sum()
    graph = autograd_graph.trace(loss, module=model)
    graph.nodes[graph.root].name                 # 'SumBackward0'
    [graph.nodes[i].name for i in graph.order]   # what loss.backward() will run, in order
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from nbhelpers import arguments, module_scope
from nbhelpers.module_scope import ACCUMULATE_GRAD, OUTSIDE, modules_of

__all__ = ["SavedTensor", "Node", "Edge", "Graph", "trace"]   # saved_by_module: for the diagnosis


@dataclass(frozen=True)
class SavedTensor:
    """A tensor a node keeps for its backward formula (a `_saved_*` attribute)."""

    attr: str                  # e.g. "_saved_mat1"
    shape: tuple[int, ...]
    dtype: torch.dtype
    storage_ptr: int           # equal pointers: the same memory, saved once, shown twice
    nbytes: int = 0            # of the tensor's elements (numel * element size)
    version: int = 0           # the tensor's _version when traced
    packed: str = ""           # set when a saved-tensor hook packed it as a non-tensor: its type name


@dataclass(frozen=True)
class Node:
    id: int
    name: str                  # grad_fn.name(): "AddmmBackward0", "torch::autograd::AccumulateGrad"
    label: str                 # parameter name for AccumulateGrad when a module is given, else the name
    is_leaf: bool              # an AccumulateGrad node: it writes a leaf's .grad
    saved: tuple[SavedTensor, ...]
    sequence_nr: int
    modules: tuple[str, ...] = ()       # the modules running when it was made, outermost first (module_scope)
    shape: tuple[int, ...] = ()         # a leaf's: the shape of the .grad it fills

    @property
    def module(self) -> str:            # the innermost: the module path whose forward created it
        return self.modules[-1] if self.modules else OUTSIDE


@dataclass(frozen=True)
class Edge:
    src: int                   # the node whose backward produces a gradient...
    dst: int                   # ...for this node: src.next_functions[input_nr] == (dst, dst_input)
    input_nr: int              # which of src's gradient outputs (its forward op's input) it is
    dst_input: int = 0         # which of dst's gradient inputs (its forward op's output) receives it


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    root: int
    order: tuple[int, ...]     # backward's execution order (engine priority: highest sequence_nr first)
    module_types: tuple[tuple[str, str], ...] = ()   # (module path, class name) for the modules the nodes name


def trace(t: torch.Tensor, module: torch.nn.Module | None = None) -> Graph:
    """Read the backward graph that ends at `t` into a Graph, without running it."""
    if module is not None:
        arguments.require_module("autograd_graph.trace", "module", module)
    fns = _walk(_root_fn(t))
    ids = {fn: i for i, fn in enumerate(fns)}
    names = {p: n for n, p in module.named_parameters()} if module is not None else {}
    nodes = tuple(_node(i, fn, names) for i, fn in enumerate(fns))
    edges = tuple(Edge(ids[fn], ids[nxt], k, slot) for fn in fns
                  for k, (nxt, slot) in enumerate(fn.next_functions) if nxt is not None)
    named = {path for node in nodes for path in node.modules}
    types = module_scope.module_types(module) if module is not None else {}
    return Graph(nodes, edges, 0, _execution_order(nodes, edges),
                 tuple((path, kind) for path, kind in types.items() if path in named))


def functions(t: torch.Tensor) -> list:
    """The grad_fn objects of `trace(t)`'s nodes, in the same order (node i is functions(t)[i]): for
    forward_graph, which links forward ops to them (not in __all__)."""
    return _walk(_root_fn(t))


def _root_fn(t):
    arguments.require("autograd_graph.trace", "t", t, torch.Tensor, "a tensor made by autograd, such as the loss")
    if t.grad_fn is None:
        raise ValueError("autograd_graph.trace: `t` has no grad_fn: it is a leaf, or was computed under no_grad or "
                         "inference_mode; call trace() on the output of a differentiable op, such as the loss")
    return t.grad_fn


def _walk(root) -> list:
    """Every node reachable through next_functions, root first, each once (depth first)."""
    found, seen, stack = [], set(), [root]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        found.append(fn)
        stack.extend(nxt for nxt, _ in reversed(fn.next_functions) if nxt is not None)
    return found


def _node(i: int, fn, names: dict) -> Node:
    is_leaf = fn.name() == ACCUMULATE_GRAD
    label = (names.get(fn.variable) or f"leaf {tuple(fn.variable.shape)}") if is_leaf else fn.name()
    return Node(i, fn.name(), label, is_leaf, _saved(fn), fn._sequence_nr(), modules_of(fn),
                tuple(fn.variable.shape) if is_leaf else ())


def _saved(fn) -> tuple[SavedTensor, ...]:
    return tuple(_saved_entry(name, packed) for name, packed in packed_saves(fn))


def saved_objects(t: torch.Tensor) -> list[tuple[object, str, object]]:
    """(node, attribute, what was packed) for every tensor saved in the graph that ends at `t`. For
    memory.saved_bytes_by_module, which compares them with what its saved-tensor hooks packed (not in __all__)."""
    return [(fn, name, packed) for fn in _walk(_root_fn(t)) for name, packed in packed_saves(fn)]


def packed_saves(fn, prefix: str = "") -> list[tuple[str, object]]:
    """(attribute, what was packed) for each tensor node `fn` saved, read without unpacking: `_raw_saved_*` is
    the SavedTensor autograd keeps, and its `.data` is what was packed. Unpacking would run saved-tensor hooks
    (activation checkpointing recomputes its forward there) and report memory the graph does not hold. A
    CopySlices node (an in-place op on a view, such as an in-place Dropout on a slice) has no `_saved_*` of its
    own: it keeps the in-place op's node, `_wrapped_node`, whose saves are listed as `_wrapped_node._saved_*`."""
    saved = []
    for raw_attr in _raw_saved_names(type(fn)):
        attr = raw_attr.replace("_raw", "", 1)               # the name the docs use: _saved_self, ...
        value = getattr(fn, raw_attr)
        packed = [r.data for r in value] if isinstance(value, (tuple, list)) else [value.data]
        if packed and all(v is None for v in packed):   # () : nothing saved, so nothing freed
            _raise_if_freed(fn, attr)                        # else it was not needed (an undefined save)
        attr = prefix + attr
        for k, v in enumerate(packed):
            name = attr if not isinstance(value, (tuple, list)) else f"{attr}[{k}]"
            if v is not None:
                saved.append((name, v))
    wrapped = getattr(fn, "_wrapped_node", None)
    return saved + (packed_saves(wrapped, f"{prefix}_wrapped_node.") if wrapped is not None else [])


@functools.cache
def _raw_saved_names(node_type) -> tuple[str, ...]:
    """A node type's `_raw_saved_*` attributes (dir() is the slow part of tracing a big graph)."""
    return tuple(sorted(a for a in dir(node_type) if a.startswith("_raw_saved_")))


def _raise_if_freed(fn, attr: str) -> None:
    """Nothing packed: either not needed, or freed by backward(), which only unpacking tells apart."""
    try:
        getattr(fn, attr)
    except RuntimeError as e:  # "Trying to backward through the graph a second time ..."
        raise ValueError(f"{fn.name()}'s saved tensors were freed by backward(): trace the graph "
                         "before calling backward(), or call backward(retain_graph=True)") from e


def _saved_entry(name: str, v) -> SavedTensor:
    if isinstance(v, torch.Tensor):
        return SavedTensor(name, tuple(v.shape), v.dtype, *_held(v), v._version)
    # a saved-tensor hook packed it as something else (checkpointing's _Holder): no tensor is held
    return SavedTensor(name, (), torch.float32, 0, 0, 0, packed=type(v).__name__)


# the tensors a sparse tensor holds its data in, its values last
_SPARSE_PARTS = {torch.sparse_coo: lambda v: (v._indices(), v._values()),
                 torch.sparse_csr: lambda v: (v.crow_indices(), v.col_indices(), v.values()),
                 torch.sparse_bsr: lambda v: (v.crow_indices(), v.col_indices(), v.values()),
                 torch.sparse_csc: lambda v: (v.ccol_indices(), v.row_indices(), v.values()),
                 torch.sparse_bsc: lambda v: (v.ccol_indices(), v.row_indices(), v.values())}


def _held(v: torch.Tensor) -> tuple[int, int]:
    """(storage address, bytes) of a saved tensor; a sparse one has no storage of its own: it holds its indices
    and values (the address is its values')."""
    if v.layout == torch.strided:
        return v.untyped_storage().data_ptr(), v.numel() * v.element_size()
    parts = _SPARSE_PARTS[v.layout](v)
    return parts[-1].untyped_storage().data_ptr(), sum(t.numel() * t.element_size() for t in parts)


def _execution_order(nodes: tuple[Node, ...], edges: tuple[Edge, ...]) -> tuple[int, ...]:
    """Simulate the engine: a node becomes ready once every node feeding it has run, and is pushed on a
    ready queue then; the queue pops the highest sequence_nr first (AccumulateGrad has the largest
    possible one). Ties go the way the engine's std::priority_queue sends them (libstdc++'s binary heap,
    replayed by _Heap), so the order equals what node pre-hooks record."""
    waiting = {n.id: 0 for n in nodes}
    children = {n.id: [] for n in nodes}
    for e in edges:                                       # edges are in next_functions order per node
        waiting[e.dst] += 1
        children[e.src].append(e.dst)
    ready, order = _Heap(lambda i: nodes[i].sequence_nr), []
    ready.push(0)
    while ready:
        i = ready.pop()
        order.append(i)
        for j in children[i]:                             # one decrement per edge, duplicates included
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.push(j)
    return tuple(order)


class _Heap:
    """std::priority_queue with a less-than on `key`: push_heap and pop_heap as libstdc++ writes them."""

    def __init__(self, key):
        self.items, self.key = [], key

    def __bool__(self):
        return bool(self.items)

    def _less(self, a, b) -> bool:
        return self.key(a) < self.key(b)

    def push(self, value) -> None:
        self.items.append(value)
        self._sift_up(len(self.items) - 1, 0, value)

    def _sift_up(self, hole: int, top: int, value) -> None:
        parent = (hole - 1) // 2
        while hole > top and self._less(self.items[parent], value):
            self.items[hole] = self.items[parent]
            hole, parent = parent, (parent - 1) // 2
        self.items[hole] = value

    def pop(self):
        first, items = self.items[0], self.items
        value = items.pop()
        if items:
            items[0] = first                                # __pop_heap moves the top to the end
            self._adjust(0, len(items), value)
        return first

    def _adjust(self, hole: int, length: int, value) -> None:
        items, top, child = self.items, hole, hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if self._less(items[child], items[child - 1]):
                child -= 1
            items[hole], hole = items[child], child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            items[hole], hole = items[child - 1], child - 1
        self._sift_up(hole, top, value)


def saved_by_module(graph: Graph, held: set[int] | frozenset[int] = frozenset()) -> dict[str, int]:
    """Bytes of activations the backward nodes made in each module (its submodules included) save, each storage
    once; storages in `held` (parameters, buffers, inputs: they exist anyway) are not counted."""
    storages: dict[str, dict[int, int]] = {}
    for node in graph.nodes:
        for path in node.modules:
            kept = storages.setdefault(path, {})
            for s in node.saved:
                if s.storage_ptr and s.storage_ptr not in held:
                    kept[s.storage_ptr] = max(kept.get(s.storage_ptr, 0), s.nbytes)
    return {path: sum(kept.values()) for path, kept in storages.items()}
