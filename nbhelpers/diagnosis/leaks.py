"""What a training step leaves behind for the next one: the bytes still alive after each of several steps (growth
from step to step is a leak), and what holds the tensors that outlived a step, named by the garbage collector's
referrers (`gc.get_referrers`): an attribute of a module (`Leak.history`), a module-level variable of the
learner's code, the optimizer's state. A kept tensor with a `grad_fn` keeps its whole graph (every saved tensor
of its step) alive with it: `total += loss` and `self.history.append(h)` leak that way.

`kept` is the other half: the lists, dicts and deques of the model's modules and of the learner's module-level
variables, and the tensors bound to them, put back after a diagnosis, so a forward that appends to a list leaves
nothing behind.

Example:
    with leaks.kept(model):
        growth = leaks.across_steps(step, {"model": model})
    growth.per_step, [(h.path, h.tensors) for h in growth.holders]     # [2048, 2048], [('Leak.history', 3)]
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import inspect
import sys
import weakref
from dataclasses import dataclass

import torch

from nbhelpers import memory, module_scope, user_code

__all__: list[str] = []     # Growth, Holder, across_steps, kept: diagnose's lenses

_CONTAINERS = (list, dict, collections.deque)
_MODULE_OWN = frozenset(vars(torch.nn.Module()))        # _parameters, _modules, the hook dicts: nn.Module's own


@dataclass(frozen=True)
class Holder:
    path: str                  # "Leak.history", "my_model.SEEN", "optimizer.state"
    tensors: int               # tensors made by the steps after the first that it still holds
    nbytes: int                # their own storages' bytes (what their graphs keep is in Growth.per_step)
    graphs: int                # how many of them have a grad_fn: each keeps its step's saved tensors alive
    spans: int = 0             # how many of the steps its graphs reach back into: >1 is a graph kept across steps
    where: str = ""            # the learner's line that adds to it, "file.py:12: self.history.append(h)"
    # how many of its graphs still hold the tensors they saved: backward ran with retain_graph=True (or not at all)
    retained: int = 0


@dataclass(frozen=True)
class Growth:
    live: tuple[int, ...]      # bytes made in the steps and still alive after each step (gc collected)
    holders: tuple[Holder, ...]
    # the steps ran backward(retain_graph=True): without it the second step's backward raised, as a tensor kept
    # from the step before carried that step's (freed) graph into it
    retained: bool = False

    @property
    def across(self) -> tuple[Holder, ...]:
        """Holders whose graphs reach into several steps (`total += loss` kept): the autograd nodes of every step
        stay alive (backward freed their saved tensors, so the bytes may not grow)."""
        return tuple(h for h in self.holders if h.spans > 1)

    @property
    def per_step(self) -> tuple[int, ...]:
        """What each step after the first added (the first makes gradients and optimizer state once)."""
        return tuple(b - a for a, b in zip(self.live, self.live[1:]))

    @property
    def grows(self) -> bool:
        return bool(self.per_step) and all(d > 0 for d in self.per_step) or bool(self.across)


_SECOND_TIME = "backward through the graph a second time"


def across_steps(step, roots: dict, steps: int = 3) -> Growth:
    """Run `step()` `steps` times under memory.track; the live bytes after each, and who holds the tensors made
    in them that are still alive (`roots`: {"model": module, "optimizer": ..., "loss_fn": ...}).

    When a step's backward raises "Trying to backward through the graph a second time" (a tensor the model keeps
    carries the graph of the step before into this one: a recurrent state not detached), the steps run again as
    the error tells the learner to, `step(retain_graph=True)`, from the model's tensors with no graph (as a
    first step finds them), and `Growth.retained` says so: what that workaround keeps alive is the finding."""
    try:
        return _across(step, roots, steps)
    except RuntimeError as error:
        if _SECOND_TIME not in str(error):
            raise
    with _without_graphs(roots.get("model")):
        return dataclasses.replace(_across(lambda: step(retain_graph=True), roots, steps), retained=True)


@contextlib.contextmanager
def _without_graphs(model):
    """The tensors the model's modules keep as plain attributes, detached for the block and put back after."""
    carried = [(vars(m), name, t) for _, m in module_scope.modules_with_paths(model)
               for name, t in vars(m).items()
               if isinstance(t, torch.Tensor) and t.grad_fn is not None and name not in _MODULE_OWN]
    try:
        for space, name, t in carried:
            space[name] = t.detach()
        yield
    finally:
        for space, name, t in carried:
            space[name] = t


def _across(step, roots: dict, steps: int) -> Growth:
    gc.collect()
    before = _Seen(_tensors())
    live, first, starts = [], None, []
    with memory.track() as tracker, memory.older_objects_frozen():
        for k in range(steps):
            starts.append(torch.autograd._get_sequence_nr())   # autograd nodes are numbered as they are made
            step()
            gc.collect()
            live.append(tracker.live_bytes)
            if k == 0:
                first = _Seen(t for t in _tensors() if t not in before)
    # new since the first step, or older and given a graph since (`total += loss` into a tensor kept from before);
    # the gradients the last step set are new too, and held where no referrer search can see (C++): one per
    # parameter is not growth, and leaving them out spares a search of the whole heap per gradient (8 s of 8.4
    # on ResNet-18)
    grads = _Seen(_gradients(roots))
    survivors = [t for t in _tensors() if t not in grads and (
        (t not in before and t not in first) or (t in before and _grown(t, starts)))]
    try:
        return Growth(tuple(live), _holders(survivors, _named(roots), starts))
    finally:
        del survivors


def _gradients(roots: dict) -> list[torch.Tensor]:
    model, loss_fn = roots.get("model"), roots.get("loss_fn")
    modules = [m for m in (model, loss_fn) if isinstance(m, torch.nn.Module)]
    return [p.grad for m in modules for p in m.parameters() if p.grad is not None]


def _grown(t: torch.Tensor, starts: list[int]) -> bool:
    node = t.grad_fn
    return node is not None and len(starts) > 1 and node._sequence_nr() >= starts[1]


def _tensors() -> list[torch.Tensor]:
    # type(), not isinstance(): isinstance reads __class__, which some lazy module attributes warn on
    return [o for o in gc.get_objects() if issubclass(type(o), torch.Tensor)]


class _Seen:
    """Tensors by identity, held weakly (a WeakSet compares with ==, which a tensor answers elementwise)."""

    def __init__(self, tensors):
        self.refs = {id(t): weakref.ref(t) for t in tensors}

    def __contains__(self, t) -> bool:
        ref = self.refs.get(id(t))
        return ref is not None and ref() is t


def _holders(survivors: list, names: dict[int, tuple], starts: list[int]) -> tuple[Holder, ...]:
    """The holders of tensors that later steps added (made after the first step and still alive), largest first;
    what the first step makes once (gradients, optimizer state) is not a leak."""
    found: dict[str, list] = {}
    owners: dict[str, tuple] = {}
    holders = _holders_of(survivors, names, ignore={id(survivors)})
    for t, held in zip(survivors, holders):
        if held is not None:
            found.setdefault(held[0], []).append(t)
            owners[held[0]] = held[1:]
    return tuple(sorted((Holder(path, len(ts), sum(map(_nbytes, ts)), sum(t.grad_fn is not None for t in ts),
                                _spans(ts, starts), _adding_line(*owners[path]), sum(map(_still_saved, ts)))
                         for path, ts in found.items()),
                        key=lambda h: (-h.spans, -h.graphs, -h.nbytes)))


def _still_saved(t: torch.Tensor, limit: int = 256) -> bool:
    """Whether a node of `t`'s graph (the first `limit`) still holds a tensor it saved: reading a `_saved_*`
    attribute raises once backward freed it (torch/csrc/autograd/saved_variable.cpp, ERR_BACKWARD_TWICE)."""
    seen, todo = set(), [t.grad_fn]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for attr in (a for a in dir(node) if a.startswith("_saved_")):
            try:
                if isinstance(getattr(node, attr), torch.Tensor):
                    return True
            except RuntimeError:          # freed by a backward without retain_graph
                break
        todo += [n for n, _ in node.next_functions]
    return False


def _spans(tensors: list, starts: list[int]) -> int:
    """The most steps one of these tensors' graphs reaches into (a node's _sequence_nr says which step made it;
    AccumulateGrad nodes, numbered apart, are left out)."""
    return max((_steps_of(t.grad_fn, starts) for t in tensors if t.grad_fn is not None), default=0)


def _steps_of(root, starts: list[int]) -> int:
    steps, seen, todo = set(), set(), [root]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if not isinstance(node, torch._C._functions.AccumulateGrad):
            steps.add(sum(node._sequence_nr() >= s for s in starts))
        todo += [n for n, _ in node.next_functions]
    return len(steps - {0})


def _nbytes(t: torch.Tensor) -> int:
    return sum(part.untyped_storage().nbytes() for part in memory.dense_parts(t))


def _holders_of(tensors: list, names: dict[int, tuple], ignore: set[int], depth: int = 3) -> list[tuple | None]:
    """For each tensor, (name, owner, attribute) of the named container or attribute that holds it, following
    referrers up to `depth` levels (a dict in a list in a module's attribute), or None. One heap scan per level
    for all the tensors together (`gc.get_referrers(*objects)`), not one per tensor and level: a scan is 0.04 s
    with transformers imported, and a leak leaves dozens of tensors."""
    found: list[tuple | None] = [None] * len(tensors)
    seen = [set(ignore) for _ in tensors]
    level = {k: [t] for k, t in enumerate(tensors)}          # tensor index -> the objects reached at this level
    for _ in range(depth):
        reached = {id(o): o for objs in level.values() for o in objs}
        mine = {id(level), id(reached), *(id(objs) for objs in level.values())}     # this search's own
        upper: dict[int, list] = {}
        for r in gc.get_referrers(*reached.values()):
            if inspect.isframe(r) or id(r) in mine:
                continue
            inside = {id(x) for x in gc.get_referents(r)} & reached.keys()
            for k, objs in level.items():
                obj = next((o for o in objs if id(o) in inside), None)
                if obj is None or found[k] is not None or id(r) in seen[k]:
                    continue
                seen[k].add(id(r))
                if id(r) in names:
                    found[k] = _named_holder(names[id(r)], r, obj)
                else:
                    upper.setdefault(k, []).append(r)
        level = {k: objs for k, objs in upper.items() if found[k] is None}
        if not level:
            break
    return found


def _named_holder(named: tuple, holder, obj) -> tuple:
    name, owner, attr = named
    if attr is None:                      # a namespace: the key that holds the object
        attr = next((k for k, v in holder.items() if v is obj), "?")
        name = f"{name}.{attr}"
    return name, owner, attr


def _named(roots: dict) -> dict[int, tuple]:
    """id(container) -> (its name, the class or Python module whose source adds to it, its attribute name); a
    namespace (a module's __dict__, a Python module's globals) has attribute None: the key that holds the
    object completes it."""
    names: dict[int, tuple] = {}
    for path, m in module_scope.modules_with_paths(roots.get("model")):
        names[id(vars(m))] = (path, type(m), None)
        for attr, v in vars(m).items():
            if isinstance(v, _CONTAINERS) and attr not in _MODULE_OWN:
                names[id(v)] = (f"{path}.{attr}", type(m), attr)
    for module in _learner_modules(roots):
        names[id(vars(module))] = (module.__name__, module, None)
        for attr, v in vars(module).items():
            if isinstance(v, _CONTAINERS) and not attr.startswith("__"):
                names[id(v)] = (f"{module.__name__}.{attr}", module, attr)
    optimizer = roots.get("optimizer")
    if optimizer is not None:
        names[id(optimizer.state)] = ("optimizer.state", None, "state")
        names.update({id(entry): ("optimizer.state", None, "state") for entry in optimizer.state.values()})
    return names


def _learner_modules(roots: dict) -> list:
    """The Python modules of the learner's code the step runs: those defining the model's classes and the loss
    function (not torch's, not the standard library's, not this package's machinery)."""
    kinds = [type(m) for _, m in module_scope.modules_with_paths(roots.get("model"))] + [roots.get("loss_fn")]
    found = {}
    for kind in kinds:
        name = getattr(kind, "__module__", None) if kind is not None else None
        module = sys.modules.get(name) if name else None
        source = getattr(module, "__file__", None)
        if source and user_code.learners(source):
            found[name] = module
    return list(found.values())


_ADDING = (".append(", ".extend(", ".insert(", ".add(", ".update(", "+=", "[", "=")


def _adding_line(owner, attr: str) -> str:
    """The learner's line that adds to `attr`: in a class's methods (not __init__) `self.attr`, in a Python
    module's functions the name, followed by an append, extend, +=, an item or an assignment; "" when no line
    reads so, or the source cannot be read (the holder's name is then the place)."""
    if owner is None:
        return ""
    functions = [f for name, f in vars(owner).items() if inspect.isfunction(f) and name != "__init__"] \
        if isinstance(owner, type) else [f for f in vars(owner).values()
                                         if inspect.isfunction(f) and f.__module__ == owner.__name__]
    name = f"self.{attr}" if isinstance(owner, type) else attr
    for function in functions:
        try:
            lines, first = inspect.getsourcelines(function)
        except (TypeError, OSError):
            continue
        for k, line in enumerate(lines):
            if _adds(line.split("#", 1)[0], name):
                return f"{user_code.place(inspect.getsourcefile(function))}:{first + k}: {line.strip()}"
    return ""


def _adds(code: str, name: str) -> bool:
    at = code.find(name)
    while at >= 0:
        before, rest = code[at - 1:at] if at else "", code[at + len(name):]
        if not (before.isidentifier() or before.isdigit() or before == ".") and not rest[:1].isidentifier() \
                and not rest[:1].isdigit():
            rest = rest.lstrip()
            if rest.startswith(_ADDING) and not rest.startswith("=="):
                return True
        at = code.find(name, at + 1)
    return False


@contextlib.contextmanager
def kept(model: torch.nn.Module, loss_fn=None):
    """Put back, on the way out, the contents of every list, dict and deque held by the model's modules and by the
    learner's module-level variables (a shallow copy: the same objects in the same order), and the tensors bound to
    their attributes and variables (a forward that rebinds `self.total = self.total + loss`)."""
    roots = {"model": model, "loss_fn": loss_fn}
    spaces = [vars(m) for _, m in module_scope.modules_with_paths(model)] + \
        [vars(module) for module in _learner_modules(roots)]
    saved = [(space, {k: v for k, v in space.items() if _restorable(k, v)},
              [(v, list(v.items()) if isinstance(v, dict) else list(v)) for k, v in space.items()
               if isinstance(v, _CONTAINERS) and _restorable(k, v)]) for space in spaces]
    plain = {id(t): (t, t.detach().clone()) for _, bound, _ in saved for t in bound.values()
             if isinstance(t, torch.Tensor) and t.grad_fn is None and not t.requires_grad and not t.is_meta}
    try:
        yield
    finally:
        for space, bound, containers in saved:
            for k in [k for k, v in space.items() if _restorable(k, v) and k not in bound]:
                del space[k]
            space.update(bound)            # torch.compile may have bound a new list to the name: the old one back
            for container, contents in containers:
                container.clear()
                (container.update if isinstance(container, dict) else container.extend)(contents)
        for t, value in plain.values():    # `total += loss` in place gave a plain tensor a graph: drop it
            if t.grad_fn is not None or t.requires_grad:
                t.detach_()
            with torch.no_grad():
                t.copy_(value)


def _restorable(name: str, value) -> bool:
    return isinstance(value, (torch.Tensor, *_CONTAINERS)) and name not in _MODULE_OWN and not name.startswith("__")
