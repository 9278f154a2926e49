"""Which module is running, in forward and in backward: one mechanism for every instrument.

Global forward hooks keep a stack of the modules whose forward is running, each named by its path from the
outermost module (`NeuralNetwork.core.fc1`, from `named_modules()`). When a module's forward returns, every
autograd node created during it and not claimed by an inner module is tagged, in `node.metadata`, with the
stack of modules running then (outermost first: `("NeuralNetwork", "NeuralNetwork.core",
"NeuralNetwork.core.fc1")`), so a container that never runs (an `nn.ModuleList`) is never a level. In
backward, `torch._C._current_autograd_node()` is the node being run, so its tag says whose forward made it.
"Created during it" is decided by sequence numbers: each node's `_sequence_nr()` is taken from a per-thread
counter of node creation (`at::sequence_number::get_and_increment()`, torch/csrc/autograd/node.h), which
`torch.autograd._get_sequence_nr()` reads without moving it (`at::sequence_number::peek`, ATen/SequenceNumber.h;
torch.fx's proxy.py reads it the same way) at module entry and exit;
AccumulateGrad nodes (which have the largest possible number) are tagged with the module that owns their parameter. Unlike
`torch.utils.module_tracker.ModuleTracker`, which registers `register_multi_grad_hook` on each module's
inputs and outputs, it registers no hooks on tensors: the graph it tags is the one the model built.
The leave hook is registered with `always_call=True`, so a forward that raises still pops the stack.
Global optimizer step hooks (`torch.optim.optimizer.register_optimizer_step_pre_hook` and its post hook)
mark `optimizer.step()` as a phase of its own, named after the optimizer (`Adam.step`).
A compiled module's program is one autograd node per compiled graph (`CompiledFunctionBackward`; a graph break
makes two), tagged with the compiled module;
which module made each op inside it is in `compile_lens`'s graphs (`FxNode.module`, from Dynamo's nn_module_stack).

Example:
    with module_scope.record():
        loss = model(x).sum()                  # the sum runs outside the model
    module_scope.module_of(loss.grad_fn.next_functions[0][0])   # e.g. 'Sequential.2'
    module_scope.module_of(loss.grad_fn)                        # '(outside modules)'
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from torch.utils._pytree import tree_flatten

__all__ = ["record", "module_of", "modules_of", "OUTSIDE", "ACCUMULATE_GRAD"]   # module_types: for the views;
# modules_with_paths, named_tensors: for the diagnosis

OUTSIDE = "(outside modules)"
_TAG = "nbhelpers.module_scope.module"
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"   # the name() of the node that writes a leaf's .grad
_LAST = 2**64 - 1      # AccumulateGrad's sequence number: "explicitly ... UINT64_MAX" (torch/csrc/autograd/node.h)


def modules_of(node) -> tuple[str, ...]:
    """The modules whose forwards were running when this node was made, outermost first; () outside."""
    return node.metadata.get(_TAG, ()) if node is not None else ()


def module_of(node) -> str:
    """The module path whose forward created this autograd node, or OUTSIDE."""
    chain = modules_of(node)
    return chain[-1] if chain else OUTSIDE


class _Scope:
    """The running module's path in forward (a stack) and in backward (the running node's tag)."""

    def __init__(self):
        self.stack: list[tuple[str, int]] = []           # (path, first sequence nr) per running module
        self.spans: list[_Span] = []                 # finished calls under the outermost running module
        self.names: dict[int, str] = {}              # id(module) -> path, from the outermost module
        self.root: torch.nn.Module | None = None     # that module, so a name is never read for a recycled id
        self.handles = []
        self.steps: list[str] = []                   # the optimizers whose step() is running

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.handles = [torch.nn.modules.module.register_module_forward_pre_hook(self._enter_module),
                        torch.nn.modules.module.register_module_forward_hook(self._leave_module,
                                                                             always_call=True),
                        register_optimizer_step_pre_hook(lambda opt, args, kwargs: self._enter_step(opt)),
                        register_optimizer_step_post_hook(lambda opt, args, kwargs: self.steps.pop())]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles, self.stack, self.steps, self.spans, self.root = [], [], [], [], None

    def chain(self) -> tuple[str, ...]:
        """The modules whose forwards are running now, outermost first (the tag a node made now gets)."""
        return tuple(entry[0] for entry in self.stack)

    def current(self) -> tuple[str, str]:
        """(module path, "forward", "backward", "recompute" or "optimizer") for the op running now; in an
        optimizer's step() the path is the optimizer's `<class>.step`. "recompute" is a module's forward run
        again during backward, as activation checkpointing does to rebuild what it did not save."""
        node = torch._C._current_autograd_node()
        if node is not None:
            return (self.stack[-1][0], "recompute") if self.stack else (module_of(node), "backward")
        if self.steps:
            return self.steps[-1], "optimizer"
        return (self.stack[-1][0] if self.stack else OUTSIDE), "forward"

    def _enter_step(self, optimizer) -> None:
        self.steps.append(f"{type(optimizer).__name__}.step")

    def _enter_module(self, module, args):
        # Dynamo traces these hooks when it compiles a module's forward: doing nothing there keeps the hooks
        # out of the compiled graph (no graph break, no guard on them), and the compiled program's nodes are
        # tagged by the module that called the compiled code, which runs its hooks eagerly
        if torch.compiler.is_compiling():
            return
        if not self.stack and not self._named(module):   # a new outermost module: name everything under it
            self.root, self.names = module, module_paths(module)
        name = self.names.get(id(module), type(module).__name__)
        first = torch.autograd._get_sequence_nr()
        self.stack.append((name, first))

    def _named(self, module) -> bool:
        """Whether `module` is the named root or one of its modules: checkpointing reruns a block alone in
        backward, and its ops keep the names the model's forward gave them (`C.block.0`, not `Sequential.0`)."""
        return self.root is not None and (module is self.root or (id(module) in self.names and any(
            m is module for m in self.root.modules())))

    def _leave_module(self, module, args, output):
        if torch.compiler.is_compiling():
            return
        chain = tuple(entry[0] for entry in self.stack) or (type(module).__name__,)
        _, first = self.stack.pop() if self.stack else (None, 0)
        end = torch.autograd._get_sequence_nr()
        self.spans.append(_Span(first, end, chain))
        # what the forward returned, in any container, and a tensor it kept on the module (`self.attn = ...`,
        # a plain attribute: it lands in the instance's __dict__, beside _parameters and _modules)
        kept = [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
        roots = [t.grad_fn for t in tensors_in(output) + kept if t.grad_fn is not None]
        _tag_new_nodes(roots, self.spans, first, module)
        if not self.stack:
            self.spans = []


def record(*given) -> _Scope:
    """A context manager that tags the autograd nodes each module's forward creates; inside it,
    `.current()` says which module is running, in forward and in backward. It takes no model: every module
    whose forward runs inside the block is seen."""
    if given:
        raise TypeError(f"`module_scope.record` takes no argument (given: {type(given[0]).__name__}): it sees every "
                        "module whose forward runs inside the block; write `with module_scope.record():` and call "
                        "the model inside it")
    return _Scope()


@dataclass(frozen=True)
class _Span:
    """One finished module call: the sequence numbers its nodes got, [first, end), and its module chain."""

    first: int
    end: int
    chain: tuple[str, ...]


def _innermost(spans: list[_Span], sequence_nr: int) -> tuple[str, ...] | None:
    """The chain of the innermost finished call whose span holds `sequence_nr`: calls nest or follow one
    another, so of the spans that hold it, the innermost started last."""
    holding = [s for s in spans if s.first <= sequence_nr < s.end]
    return max(holding, key=lambda s: s.first).chain if holding else None


def _tag_new_nodes(roots: list, spans: list[_Span], first: int, module: torch.nn.Module) -> None:
    """Tag each node made since `first` with the innermost module call that made it, however it was reached
    (a node an inner module returned inside a dataclass is found from here, and still credited to that
    module); the AccumulateGrad of this module's own parameters gets this module's chain (spans[-1]), unless an
    inner module tagged it already."""
    stack, seen, owned = list(roots), set(), None
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        sequence_nr = n._sequence_nr()
        if sequence_nr < first:                      # made before this module's forward began
            continue
        if sequence_nr == _LAST and n.name() == ACCUMULATE_GRAD:
            if _TAG not in n.metadata:
                owned = owned if owned is not None else {id(p) for p in module.parameters()}   # once, if needed
                if id(n.variable) in owned:
                    n.metadata[_TAG] = spans[-1].chain
            continue
        if _TAG not in n.metadata:
            n.metadata[_TAG] = _innermost(spans, sequence_nr) or spans[-1].chain
        stack.extend(f for f, _ in n.next_functions)


def tensors_in(value, depth: int = 0) -> list[torch.Tensor]:
    """The tensors in a forward's result (forward_graph reads a model's with it too): pytree containers
    (tuples, lists, dicts, namedtuples) and dataclasses, nested; other objects are not opened."""
    if isinstance(value, torch.Tensor):            # the common case, without a pytree walk
        return [value]
    if depth > 8:
        return []
    found = []
    for leaf in tree_flatten(value)[0]:
        if isinstance(leaf, torch.Tensor):
            found.append(leaf)
        elif dataclasses.is_dataclass(leaf) and not isinstance(leaf, type):
            found += tensors_in([getattr(leaf, f.name) for f in dataclasses.fields(leaf)], depth + 1)
    return found


def module_types(root: torch.nn.Module) -> dict[str, str]:
    """Each module path `record()` can tag, named as it names them, -> its class name (`ResNet.layer1` ->
    `Sequential`), for the views' module boxes."""
    by_id = {id(m): m for m in root.modules()}
    return {path: type(by_id[i]).__name__ for i, path in module_paths(root).items()}


def module_paths(root: torch.nn.Module) -> dict[int, str]:
    """id(module) -> its path from `root`, as `record()` names it: after the root's class; a compiled module
    (`torch.compile(m)`, an OptimizedModule, which holds `m` as its submodule `_orig_mod`) is named as the
    module it wraps."""
    top = type(root._modules.get("_orig_mod", root)).__name__
    names = {}
    for path, m in root.named_modules():
        if "_orig_mod" in path:
            path = path.replace("._orig_mod", "").replace("_orig_mod.", "").replace("_orig_mod", "")
        names.setdefault(id(m), f"{top}.{path}" if path else top)   # a wrapped module keeps its wrapper's name
    return names


def canonical_paths(root: torch.nn.Module) -> dict[str, str]:
    """Every path by which a module is reachable from `root` (a module held in two places has two), after the
    root's class, -> the one `module_paths` names it by (the first, as `named_modules()` finds it). torch's
    ModuleTracker (FlopCounterMode's) names a shared module by the last path its walk of the children meets
    (torch/utils/module_tracker.py, `_get_mod_name`), so its names are read through this to compare."""
    paths, top = module_paths(root), type(root).__name__
    return {(f"{top}.{path}" if path else top): paths[id(m)]
            for path, m in root.named_modules(remove_duplicate=False) if id(m) in paths}


def modules_with_paths(root: torch.nn.Module | None) -> list[tuple[str, torch.nn.Module]]:
    """(path, module) for `root` and every module below it, named as `module_paths` names them ([] for None)."""
    if root is None:
        return []
    paths = module_paths(root)
    return [(paths.get(id(m), type(m).__name__), m) for m in root.modules()]


def named_tensors(root: torch.nn.Module):
    """(path, tensor, how it is held) for every parameter, buffer and tensor kept as a plain attribute of `root`
    and its modules: "parameter", "buffer" or "plain attribute" (what model.to() and state_dict() skip)."""
    for m_path, m in modules_with_paths(root):
        for name, p in m.named_parameters(recurse=False):
            yield f"{m_path}.{name}", p, "parameter"
        for name, b in m.named_buffers(recurse=False):
            yield f"{m_path}.{name}", b, "buffer"
        for name, v in vars(m).items():
            if isinstance(v, torch.Tensor) and not name.startswith("_"):
                yield f"{m_path}.{name}", v, "plain attribute"
