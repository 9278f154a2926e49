"""A backward graph as plain data: nodes, edges, saved tensors, and the order backward runs them.

Example:
    graph = autograd_graph.trace(loss, module=model)
    graph.nodes[graph.root].name                 # 'SumBackward0'
    [graph.nodes[i].name for i in graph.order]   # what loss.backward() will run, in order
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import torch

__all__ = ["SavedTensor", "Node", "Edge", "Graph", "trace"]

_ACCUMULATE = "torch::autograd::AccumulateGrad"


@dataclass(frozen=True)
class SavedTensor:
    """A tensor a node keeps for its backward formula (a `_saved_*` attribute)."""

    attr: str                  # e.g. "_saved_mat1"
    shape: tuple[int, ...]
    dtype: torch.dtype
    storage_ptr: int           # equal pointers: the same memory, saved once, shown twice


@dataclass(frozen=True)
class Node:
    id: int
    name: str                  # grad_fn.name(): "AddmmBackward0", "torch::autograd::AccumulateGrad"
    label: str                 # parameter name for AccumulateGrad when a module is given, else the name
    is_leaf: bool              # an AccumulateGrad node: it writes a leaf's .grad
    saved: tuple[SavedTensor, ...]
    sequence_nr: int


@dataclass(frozen=True)
class Edge:
    src: int                   # the node whose backward produces a gradient...
    dst: int                   # ...for this node (src.next_functions[input_nr])
    input_nr: int


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    root: int
    order: tuple[int, ...]     # backward's execution order (engine priority: highest sequence_nr first)


def trace(t: torch.Tensor, module: torch.nn.Module | None = None) -> Graph:
    """Read the backward graph that ends at `t` into a Graph, without running it."""
    fns = _walk(_root_fn(t))
    ids = {fn: i for i, fn in enumerate(fns)}
    names = {p: n for n, p in module.named_parameters()} if module is not None else {}
    nodes = tuple(_node(i, fn, names) for i, fn in enumerate(fns))
    edges = tuple(Edge(ids[fn], ids[nxt], k) for fn in fns
                  for k, (nxt, _) in enumerate(fn.next_functions) if nxt is not None)
    return Graph(nodes, edges, 0, _execution_order(nodes, edges))


def _root_fn(t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"trace() takes a torch.Tensor, got {type(t).__name__}")
    if t.grad_fn is None:
        raise ValueError("this tensor has no grad_fn: it is a leaf, or was computed under no_grad or "
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
    is_leaf = fn.name() == _ACCUMULATE
    label = (names.get(fn.variable) or f"leaf {tuple(fn.variable.shape)}") if is_leaf else fn.name()
    return Node(i, fn.name(), label, is_leaf, _saved(fn), fn._sequence_nr())


def _saved(fn) -> tuple[SavedTensor, ...]:
    saved = []
    for attr in sorted(a for a in dir(fn) if a.startswith("_saved_")):
        try:
            value = getattr(fn, attr)
        except RuntimeError as e:  # "Trying to backward through the graph a second time ..."
            raise ValueError(f"{fn.name()}'s saved tensors were freed by backward(): trace the graph "
                             "before calling backward(), or call backward(retain_graph=True)") from e
        for k, v in enumerate(value if isinstance(value, (tuple, list)) else (value,)):
            if isinstance(v, torch.Tensor):
                name = attr if not isinstance(value, (tuple, list)) else f"{attr}[{k}]"
                saved.append(SavedTensor(name, tuple(v.shape), v.dtype, v.untyped_storage().data_ptr()))
    return tuple(saved)


def _execution_order(nodes: tuple[Node, ...], edges: tuple[Edge, ...]) -> tuple[int, ...]:
    """Simulate the engine: a node runs once every node feeding it has run; among ready nodes the
    one with the highest sequence_nr runs first (AccumulateGrad has the largest possible one)."""
    waiting = {n.id: 0 for n in nodes}
    children = {n.id: [] for n in nodes}
    for e in edges:
        waiting[e.dst] += 1
        children[e.src].append(e.dst)
    ready, order = [(-nodes[0].sequence_nr, 0)], []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(i)
        for j in children[i]:                             # one decrement per edge, duplicates included
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (-nodes[j].sequence_nr, j))
    return tuple(order)
