"""FLOPs and bytes per module over a whole step (forward, backward, recompute), counted at the dispatcher with
torch's own FLOP formulas (torch.utils.flop_counter.flop_registry) and named by `module_scope`, the grouping the
graph views use. torch's FlopCounterMode counts with the same formulas but names modules with its own
ModuleTracker, so comparing the two (`flop_counter`) checks the attribution, module by module. They agree on
every module of a forward; in a backward, FlopCounterMode files a block's other ops under its downsample branch
(ResNet-18's layer2.0.downsample.0: 119,537,664 FLOPs where its own convolution and its backward are 6,291,456),
because ModuleTracker marks a module as running in backward from a hook on its output's gradient until the hook
on its input's gradient, and the engine runs other nodes in between.

Example:
    counts = module_work.by_module(lambda: model(x).sum().backward())
    counts["ResNet.layer1"].flops, counts["ResNet.layer1"].bytes_moved
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from nbhelpers import arguments, eager_only, flop_formulas, module_scope, profiling

__all__ = ["Work", "by_module", "flop_counter"]

TOTAL = "Global"             # FlopCounterMode's name for the whole call


@dataclass
class Work:
    flops: int = 0
    bytes_moved: int = 0       # profiling.work's estimate: each distinct tensor an op reads or writes, once
    forward_flops: int = 0     # of `flops`, those of the forward (what activation checkpointing runs again)
    added_flops: int = 0       # of `flops`, counted analytically where FlopCounterMode has no formula (flop_formulas)


class _Counter(TorchDispatchMode):
    def __init__(self, scope):
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        # flop_registry's formulas take the op's tensors (register_flop_formula wrapped them), as flop_formulas' do
        self.scope, self.formulas = scope, {**flop_registry, **flop_formulas.added()}
        self.counts: dict[str, Work] = defaultdict(Work)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        formula = self.formulas.get(func._overloadpacket)
        flops = formula(*args, **(kwargs or {}), out_val=out) if formula else 0
        moved = 0 if func.is_view else profiling.bytes_moved((args, kwargs, out))
        node = torch._C._current_autograd_node()
        forward = node is None and not self.scope.steps
        for name in (TOTAL, *(module_scope.modules_of(node) if node is not None and not self.scope.stack
                              else self.scope.chain())):
            work = self.counts[name]
            work.flops += flops
            work.bytes_moved += moved
            work.forward_flops += flops if forward else 0
            work.added_flops += flops if func._overloadpacket in flop_formulas.added() else 0
        return out


def by_module(fn: Callable[[], object]) -> dict[str, Work]:
    """Run `fn()` once; the FLOPs and bytes of each module (its own ops and its submodules'), keyed by
    module_scope's path, and the whole call under "Global"."""
    arguments.require_callable("module_work.by_module", "fn", fn, "a function of no arguments, such as "
                               "lambda: model(x).sum().backward()")
    scope = module_scope.record()
    counter = _Counter(scope)
    with eager_only.warn_if_compiled("module_work.by_module", eager_only.FOR_WORK), scope, counter:
        fn()
    return dict(counter.counts)


def flop_counter(fn: Callable[[], object], added: bool = True) -> dict[str, int]:
    """Run `fn()` under torch's FlopCounterMode (with flop_formulas' additions, as profiling.work counts them; with
    `added=False` its own formulas only, which count 0 where it has none): its FLOPs per module, named by its
    ModuleTracker, and "Global"."""
    from torch.utils.flop_counter import FlopCounterMode

    arguments.require_callable("module_work.flop_counter", "fn", fn, "a function of no arguments")
    counter = FlopCounterMode(display=False, custom_mapping=flop_formulas.added() if added else None)
    with eager_only.warn_if_compiled("module_work.flop_counter", eager_only.FOR_WORK), counter:
        fn()
    return {name: sum(ops.values()) for name, ops in counter.get_flop_counts().items()}
