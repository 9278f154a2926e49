"""What torch's MemTracker changes about when storages die, through the hooks its ModTracker puts on every module's
inputs (torch/distributed/_tools/mod_tracker.py, `_fw_pre_hook`: `register_multi_grad_hook(mode="all")` on the
inputs that require grad, outside backward), so that `memory_agreement` can compare `memory.track` with it to the
byte and say why each byte differs:
- the hook keeps each input's gradient (torch/autograd/graph.py, `buffer[id][idx] = grad`) until the module call's
  last input gradient arrives: a module with several inputs (DLA's trees, SelecSLS's blocks) holds the first ones
  past their last use. `input_gradients` records when each arrived (with hooks that keep nothing) and
  `held_by_input_hooks` gives, op by op, the bytes so held;
- the hook's closure holds the inputs' autograd nodes and is held by them: a reference cycle, so a branch of
  forward the loss does not use (GoogLeNet's auxiliary heads) lives until Python's cyclic collector runs, not until
  its output is dropped. `collect_as_backward_begins` runs the collector as backward begins, in both runs. Where
  the cycle passes through a node the collector cannot look into, it is never collected, and keeps the graph
  behind it, the model's parameters included (a timm ViT: 76 of its 80 parameters outlive the model);
  `multi_grad_hooks_removed` removes ModTracker's hooks once the step is over, which ModTracker never does.
"""
from __future__ import annotations

import gc
from collections import defaultdict
from contextlib import contextmanager
from itertools import accumulate
from typing import Iterator

import torch
from torch.utils._pytree import tree_flatten
from torch.utils._python_dispatch import TorchDispatchMode

from nbhelpers import memory

__all__: list[str] = []     # input_gradients, held_by_input_hooks, collect_as_backward_begins,
#                             multi_grad_hooks_removed: memory_agreement's


@contextmanager
def multi_grad_hooks_removed() -> Iterator[None]:
    """The hooks ModTracker registers in the block (torch/distributed/_tools/mod_tracker.py calls
    `register_multi_grad_hook` and drops the handle it returns) removed on exit, so the cycle each makes through
    the autograd nodes it hooks ends with the step; the module's own name for the function is put back."""
    from torch.distributed._tools import mod_tracker

    handles, register = [], mod_tracker.register_multi_grad_hook

    def keeping_the_handle(*args, **kwargs):
        handles.append(register(*args, **kwargs))
        return handles[-1]

    mod_tracker.register_multi_grad_hook = keeping_the_handle
    try:
        yield
    finally:
        mod_tracker.register_multi_grad_hook = register
        for handle in handles:
            handle.remove()


@contextmanager
def input_gradients(tracker: memory.Tracker) -> Iterator[list[list[tuple[int, int]]]]:
    """Per module call outside backward, the gradients of its inputs that require grad, as (storage key, number of
    ops the tracker had seen) when each arrived: what ModTracker's multi-grad hook on them is given and keeps
    (torch/distributed/_tools/mod_tracker.py `_fw_pre_hook`; torch/autograd/graph.py `register_multi_grad_hook`,
    mode "all", `buffer[id][idx] = grad`, dropped once the last expected gradient arrives). These hooks keep no
    gradient and no autograd node, so `track`'s run keeps its own lifetimes; they are removed on exit."""
    groups: list[list[tuple[int, int]]] = []
    handles = []

    def look(module, args) -> None:
        if torch._C._current_graph_task_id() != -1:      # ModTracker hooks inputs outside backward only
            return
        tensors = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
        if not tensors:
            return
        arrivals: list[tuple[int, int]] = []
        groups.append(arrivals)
        for t in tensors:
            handles.append(t.register_hook(
                lambda grad, arrivals=arrivals: arrivals.append((memory.storage_key(grad), len(tracker.events)))
                if grad.layout == torch.strided else None))

    handle = torch.nn.modules.module.register_module_forward_pre_hook(look)
    try:
        yield groups
    finally:
        handle.remove()
        for h in handles:
            h.remove()


def held_by_input_hooks(tracker: memory.Tracker, groups) -> list[dict[str, int]]:
    """Per op, bytes (by the phase that made them) of storages `track` saw freed that ModTracker's hook still holds
    then: a gradient that arrived at op `a` is held until its module call's last input gradient arrives (op `r`), so
    a storage freed at `f` (as `track` counts, `f` <= op < r) is alive for MemTracker too. Each storage once."""
    n = len(tracker.events)
    release: dict[int, int] = {}           # index in tracker.allocations -> op before which MemTracker lets go
    by_key: dict[int, list[int]] = defaultdict(list)
    for i, a in enumerate(tracker.allocations):
        by_key[a.key].append(i)
    for arrivals in groups:
        if not arrivals:
            continue
        last = max(when for _, when in arrivals)
        for key, when in arrivals:
            for i in by_key.get(key, ()):           # the allocation alive at that key when the gradient arrived
                a = tracker.allocations[i]
                if a.op_index < when and (a.freed_at is None or a.freed_at >= when):
                    release[i] = max(release.get(i, 0), last)
    changes: dict[str, list[int]] = defaultdict(lambda: [0] * (n + 1))
    for i, last in release.items():
        a = tracker.allocations[i]
        if a.freed_at is not None and a.freed_at < last:
            changes[a.phase][a.freed_at] += a.nbytes
            changes[a.phase][last] -= a.nbytes
    held = [dict() for _ in range(n)]
    for phase, delta in changes.items():
        for op, value in enumerate(accumulate(delta[:n])):
            if value:
                held[op][phase] = value
    return held


class _CollectOnce(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.done = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.done and torch._C._current_graph_task_id() != -1:
            self.done = True
            while gc.collect():
                pass
        return func(*args, **(kwargs or {}))


@contextmanager
def collect_as_backward_begins() -> Iterator[None]:
    """Run Python's cyclic garbage collector (until it finds nothing) before the first op of backward: what only a
    reference cycle holds (in MemTracker's run, an unused branch of forward held by ModTracker's hooks) is then
    freed in both runs, when a plain run frees it (by its reference count), whenever the collector would have run.
    Objects from before the block are frozen (`gc.freeze`) meanwhile, so each pass looks at the step's objects only:
    a chain of cycles takes one pass per link."""
    with memory.older_objects_frozen(), _CollectOnce():
        yield
