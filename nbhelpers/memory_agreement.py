"""`memory.track` checked against torch's own tracker, MemTracker (torch/distributed/_tools/mem_tracker.py):
one training step under each, the two peaks compared category by category, and every difference
accounted for in bytes. `track` counts only storages made inside its block, by design; MemTracker also
counts what the model and optimizer held before it (parameters, buffers, optimizer state), so those are
the bytes that account for the differences.

Example:
    rows = memory_agreement.against_memtracker(lambda: train_step(x, y), model, optimizer)
    assert all(row.agrees for row in rows)
"""
from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from torch.utils._pytree import tree_flatten

from nbhelpers import arguments, eager_only, memory, modtracker_hooks

__all__ = ["Agreement", "against_memtracker"]


@dataclass(frozen=True)
class Agreement:
    """One MemTracker category at its peak against `track`'s at its peak, and the bytes that account for
    the difference: what existed before the block, which `track` does not count by design."""

    category: str              # MemTracker's (torch/distributed/_tools/mem_tracker.py, _MemRefType)
    memtracker: int
    ours: int
    accounted: int
    accounted_for: str         # what the accounted bytes are

    @property
    def agrees(self) -> bool:
        return self.memtracker == self.ours + self.accounted


def against_memtracker(step: Callable[[], object], model: torch.nn.Module,
                       optimizer: torch.optim.Optimizer) -> tuple[Agreement, ...]:
    """Run `step()` (one training step of `model` with `optimizer`) three times: once so the optimizer's
    state exists, once under torch's MemTracker (`track_external(model, optimizer)`), once under `track`,
    each of the last two after `optimizer.zero_grad()`, so that no gradient from an earlier step is held;
    compare the two peaks category by category. The last two start from the same weights, buffers, optimizer
    state and random state (`_state`, `_restore`), so they run one program: a detector's boxes depend on its
    weights (which the first's optimizer.step() changed) and on random draws (torch.randperm), and so do its
    shapes. MemTracker files a gradient under Temp until it is accumulated into `.grad`, and `track` by what it
    is at the end, so those two are compared together.
    A gradient made in forward (a fused loss kernel's, which AccumulateGrad takes as `.grad` without a copy)
    is an activation until it is accumulated, for both: MemTracker moves a storage to Gradient when the hook it
    puts on the parameter (`register_hook`, run as AccumulateGrad starts) fires, so here each gradient is filed as
    one from the op at which AccumulateGrad first wrote it (a `register_post_accumulate_grad_hook`, removed on
    exit; no op runs between the two hooks when AccumulateGrad takes the tensor without a copy).
    MemTracker's ModTracker makes some storages live longer (nbhelpers/modtracker_hooks.py says how): the
    gradients its hooks hold past their last use are accounted for, op by op, and the rows read where `track`'s
    live bytes plus those peak, where MemTracker peaks; both runs collect garbage as backward begins, so neither
    keeps a branch of forward the loss does not use (a reference cycle through those hooks) at a backward peak.
    """
    arguments.require_callable("memory_agreement.against_memtracker", "step", step,
                               "a function of no arguments that runs one training step")
    arguments.require_module("memory_agreement.against_memtracker", "model", model)
    arguments.require_optimizer("memory_agreement.against_memtracker", "optimizer", optimizer)
    step()
    optimizer.zero_grad(set_to_none=True)
    with eager_only.warn_if_compiled("against_memtracker (MemTracker and memory.track)", eager_only.FOR_MEMORY):
        with _same_start(model, optimizer):   # the same weights and random draws, so the same shapes (a detector's)
            mt = _memtracker_peak(step, model, optimizer)
        optimizer.zero_grad(set_to_none=True)
        before = _held_before(model, optimizer)
        ours, accumulated_at, leaf_inputs, groups = _tracked(step, model, before)
    held = modtracker_hooks.held_by_input_hooks(ours, groups)
    at = _peak_op(ours, held)
    earlier = _earlier_by_phase(ours, before["keys"] | leaf_inputs.keys(), at)    # each storage counted once
    earlier["forward"] += sum(leaf_inputs.values())
    live = ours.events[at].live_bytes if at >= 0 else 0
    return _rows(mt, _categories_at_peak(ours, model, accumulated_at, at), before, earlier, live,
                 held[at] if at >= 0 else {})


def _tracked(step, model, before: dict) -> tuple:
    """`step()` under `track`, with what the comparison needs beside: when each parameter's gradient was
    accumulated, the leaf inputs MemTracker probes, and the module inputs' gradients its hooks hold."""
    with memory.track() as ours, _accumulation_times(model, ours) as accumulated_at, \
            _leaf_module_inputs(before["keys"]) as leaf_inputs, modtracker_hooks.input_gradients(ours) as groups, \
            modtracker_hooks.collect_as_backward_begins():
        step()
    return ours, accumulated_at, leaf_inputs, groups


@contextmanager
def _same_start(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> Iterator[None]:
    """The block runs, then what it changed that the next step reads is put back: the parameters, buffers and
    optimizer state (written into their own storages, so what is held before stays the same) and the random
    generators (`torch.random.fork_rng`, as diagnose does)."""
    tensors = [t for t in [*model.parameters(), *model.buffers(),
                           *(v for state in optimizer.state.values() for v in state.values())]
               if isinstance(t, torch.Tensor)]
    copies = [t.detach().clone() for t in tensors]
    try:
        with torch.random.fork_rng(devices=sorted({t.device.index or 0 for t in tensors if t.is_cuda})):
            yield
    finally:
        with torch.no_grad():
            for t, c in zip(tensors, copies):
                t.copy_(c)


def _earlier_by_phase(tracker: memory.Tracker, held: set[int], at: int) -> dict[str, int]:
    """Bytes of storages made before the block, not held by the model or optimizer, that an op of each phase
    returned a view of by the peak op `at` (so MemTracker counts them at its peak, and `track` does not)."""
    earlier: dict[str, int] = defaultdict(int)
    for key, first in tracker.earlier.items():
        if key not in held and first.at <= at:
            earlier[first.phase] += first.nbytes
    return earlier


@contextmanager
def _leaf_module_inputs(held: set[int]) -> Iterator[dict[int, int]]:
    """storage key -> bytes of each leaf tensor that requires grad and enters a module's forward (an input `x`
    made with requires_grad=True), not held by the model or optimizer. MemTracker counts it as an activation
    because of its own probe: its ModTracker puts a multi-grad hook on every module input that requires grad
    outside backward (torch/distributed/_tools/mod_tracker.py, `register_multi_grad_hook`), which for a leaf takes
    `t.view_as(t)` (torch/autograd/graph.py, `_get_grad_fn_or_grad_acc`) inside MemTracker's dispatch mode."""
    found: dict[int, int] = {}

    def look(module, args) -> None:
        if torch._C._current_graph_task_id() != -1:      # ModTracker probes inputs outside backward only
            return
        for t in tree_flatten(args)[0]:                  # as ModTracker reads a forward's inputs
            if not isinstance(t, torch.Tensor) or t.layout != torch.strided:
                continue
            key = memory.storage_key(t)
            if t.requires_grad and t.grad_fn is None and key not in held:
                found.setdefault(key, t.untyped_storage().nbytes())

    handle = torch.nn.modules.module.register_module_forward_pre_hook(look)
    try:
        yield found
    finally:
        handle.remove()


def _rows(mt: dict[str, int], peak: dict[str, int], before: dict, earlier: dict[str, int],
          live: int, held: dict[str, int]) -> tuple[Agreement, ...]:
    return (
        Agreement("Parameter", mt["Parameter"], 0, before["Parameter"], "the parameters, held from before the block"),
        Agreement("Buffer", mt["Buffer"], 0, before["Buffer"], "the buffers, held from before the block"),
        Agreement("Optstate", mt["Optstate"], peak.get("optimizer step", 0), before["Optstate"] + earlier["optimizer"],
                  "the optimizer's state, held from before (both count the step's temporaries)"),
        Agreement("Activation", mt["Activation"],
                  peak.get("activations & other forward", 0) + peak.get("activations recomputed in backward", 0),
                  earlier["forward"] + earlier["recompute"] + held.get("forward", 0) + held.get("recompute", 0),
                  "tensors from before the block that forward (or its recomputation) returned a view of, and inputs "
                  "that are leaves requiring grad (MemTracker's own view_as probe of them)"),
        Agreement("Gradient + Temp", mt["Gradient"] + mt["Temp"],
                  peak.get("gradients", 0) + peak.get("backward temporaries", 0),
                  earlier["backward"] + held.get("backward", 0),
                  "tensors from before the block that backward returned a view of, and module inputs' gradients "
                  "that MemTracker's ModTracker hook holds past their last use"),
        Agreement("Total", mt["Total"], live,
                  sum(before[k] for k in ("Parameter", "Buffer", "Optstate")) + sum(earlier.values())
                  + sum(held.values()),
                  "the rows above"),
    )


@contextmanager
def _accumulation_times(model: torch.nn.Module, tracker: memory.Tracker) -> Iterator[dict[int, int]]:
    """id(parameter) -> the number of ops the tracker had seen when AccumulateGrad wrote its `.grad`."""
    times: dict[int, int] = {}

    def accumulated(param: torch.Tensor) -> None:
        times.setdefault(id(param), len(tracker.events))   # a second backward adds into the same .grad

    handles = [p.register_post_accumulate_grad_hook(accumulated) for p in model.parameters() if p.requires_grad]
    try:
        yield times
    finally:
        for handle in handles:
            handle.remove()


def _peak_op(tracker: memory.Tracker, held: list[dict[str, int]]) -> int:
    """The index of the op after which `track`'s live bytes, plus the bytes MemTracker's input hooks hold longer
    (`held`), peaked (the first such op: MemTracker moves its peak only on a larger total); -1 if none ran.
    Where nothing is held, `track`'s own peak."""
    live = [e.live_bytes + sum(h.values()) for e, h in zip(tracker.events, held)]
    return live.index(max(live)) if live else -1


def _categories_at_peak(tracker: memory.Tracker, model: torch.nn.Module, accumulated_at: dict[int, int],
                        at: int) -> dict:
    """`track`'s bytes per category after the peak op `at`; a gradient counts as one once AccumulateGrad has
    taken it (before that, by the phase that made it)."""
    if at < 0:
        return {}
    grads = [p.grad for p in model.parameters() if p.grad is not None and accumulated_at.get(id(p), 0) <= at]
    series = memory.timeline(tracker, {"gradients": grads}).bytes_by_category
    return {name: values[at] for name, values in series.items()}


def _memtracker_peak(step: Callable[[], object], model: torch.nn.Module, optimizer) -> dict[str, int]:
    """MemTracker's bytes per category at its peak, over one `step()`."""
    from torch.distributed._tools.mem_tracker import MemTracker

    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if frozen:      # its pre-forward hook calls param.register_hook on each (mem_tracker.py, _track_module_params...)
        raise ValueError(f"memory_agreement.against_memtracker: torch's MemTracker cannot track a parameter that does "
                         f"not require grad (it registers a gradient hook on every parameter, which raises), and "
                         f"{len(frozen)} here do not ({', '.join(frozen[:3])}{', ...' if len(frozen) > 3 else ''}); "
                         "there is nothing to compare with: read memory.track's numbers on their own")
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    try:
        with tracker, modtracker_hooks.collect_as_backward_begins(), modtracker_hooks.multi_grad_hooks_removed():
            step()
    except NotImplementedError as error:          # mem_tracker.py reads every result's storage
        if "Sparse" not in str(error):
            raise
        raise ValueError("memory_agreement.against_memtracker: torch's MemTracker cannot follow sparse tensors "
                         f"({error}), so there is nothing to compare with; memory.track counts a sparse "
                         "tensor's indices and values: read its numbers on their own") from error
    (snapshot,) = tracker.get_tracker_snapshot("peak").values()        # one device
    return {str(getattr(k, "value", k)): v for k, v in snapshot.items()}


def _held_before(model, optimizer) -> dict:
    """Bytes of the storages the model and optimizer hold, by MemTracker's category, counting each storage once."""
    keys: set[int] = set()

    def once(tensors) -> int:
        total = 0
        for t in tensors:
            for part in memory.dense_parts(t) if isinstance(t, torch.Tensor) else ():
                if memory.storage_key(part) not in keys:
                    keys.add(memory.storage_key(part))
                    total += part.untyped_storage().nbytes()
        return total

    params = list(model.parameters())
    held = {"Parameter": once(params), "Buffer": once(model.buffers()),
            "Optstate": once(t for state in optimizer.state.values() for t in state.values())}
    return {**held, "keys": keys}
