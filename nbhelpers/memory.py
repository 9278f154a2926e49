"""Memory you can read on any device: live tensor bytes after every op, attributed to the module that
ran it (forward or backward); the bytes each module saves for backward; and, on CUDA, the caching
allocator's own numbers and history, turned into the same timeline.

`track` works at the dispatcher (a TorchDispatchMode), so it knows the op, module and phase behind each
storage; an allocation made inside an op, which never becomes a tensor, is invisible to it.
`storage.record_lifetimes` reads the allocator's own events instead and sees those too, without modules.
`memory_agreement` checks `track` against torch's MemTracker, to the byte.

Example:
    with memory.track() as tracker:
        loss_fn(model(x), y).backward()
    print(tracker.peak_bytes)
    memory.plot_timeline(memory.timeline(tracker, {"gradients": [p.grad for p in model.parameters()]}))
"""
from __future__ import annotations

import functools
import gc
import sys
import weakref
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Callable, Iterator, NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from nbhelpers import arguments, autograd_graph, devices, eager_only, module_scope, user_code

__all__ = ["OpEvent", "Allocation", "Tracker", "track", "Timeline", "timeline", "SavedBytes",
           "saved_bytes_by_module", "cuda_history", "plot_timeline"]   # storage_key, dense_parts: for memory_agreement


@dataclass(slots=True)    # not frozen: a frozen dataclass takes 5x longer to build, and `track` builds one per op
class OpEvent:
    """The state right after one op ran inside `track`."""

    index: int
    op: str                    # e.g. "aten.addmm.default"
    module: str                # innermost module running it, e.g. "NeuralNetwork.core.fc1", or "Adam.step"
    phase: str                 # "forward", "backward", "recompute" (checkpointing's forward, run again in backward)
                               # or "optimizer" (inside an optimizer's step())
    live_bytes: int            # bytes of storages allocated inside the block and still alive
    cuda_allocated: int | None = None
    cuda_reserved: int | None = None
    # with track(lines=True): the learner's line that called the op (user_code.caller), and the id() of the
    # backward node running it (torch._C._current_autograd_node(); 0 outside backward)
    frame: user_code.Frame | None = None
    node: int = 0


@dataclass(slots=True)
class Allocation:
    """One storage created inside `track`: when, by which module, and when it was freed (if it was)."""

    key: int
    nbytes: int
    op_index: int
    module: str
    phase: str
    freed_at: int | None = None


class Earlier(NamedTuple):
    """A storage made before the `track` block that an op in it returned: not counted in the live bytes."""

    nbytes: int
    phase: str                 # of the op that first returned it
    at: int                    # that op's index in the events


@dataclass
class Tracker:
    """Filled while the `track` block runs; complete once it exits."""

    events: list[OpEvent] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    live_bytes: int = 0
    peak_bytes: int = 0
    # storages made before the block that an op returned (a view, or an in-place result), not counted
    earlier: dict[int, Earlier] = field(default_factory=dict)      # storage key -> when first returned


class _LiveBytes(TorchDispatchMode):
    def __init__(self, tracker: Tracker, modules, cuda: bool, block=None):
        super().__init__()
        self.tracker, self.modules, self.cuda, self.block = tracker, modules, cuda, block
        self.live: dict[int, Allocation] = {}
        self.watch: dict[int, weakref.ref] = {}         # storage key -> a weak reference that calls _free

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # torch.tensor(data) fills its storage before any op runs, then hands it to lift_fresh: that
        # input is new, not a tensor from before the block
        made = () if func is torch.ops.aten.lift_fresh.default else _dense((args, kwargs))
        inputs = {storage_key(t) for t in made}
        out = func(*args, **(kwargs or {}))
        t = self.tracker
        module, phase = self.modules.current()
        for tensor in _dense(out):
            if tensor.is_meta:
                continue
            key = storage_key(tensor)
            # a storage we count already, or one of the op's inputs (a view or an in-place result of a
            # tensor made before the block); addresses are not remembered beyond the op, because the
            # allocator reuses the address of a freed storage for a new one
            if key and key in inputs and key not in self.live:
                t.earlier.setdefault(key, Earlier(tensor.untyped_storage().nbytes(), phase, len(t.events)))
            if not key or key in self.live or key in inputs:
                continue
            storage = tensor.untyped_storage()
            record = Allocation(key, storage.nbytes(), len(t.events), module, phase)
            self.live[key] = record
            t.allocations.append(record)
            t.live_bytes += record.nbytes
            self.watch[key] = weakref.ref(storage, lambda _, key=key: self._free(key))   # 2x cheaper than finalize
        t.peak_bytes = max(t.peak_bytes, t.live_bytes)
        cuda = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) if self.cuda else (None, None)
        event = OpEvent(len(t.events), _op_name(func), module, phase, t.live_bytes, *cuda)
        if self.block is not None:
            event.frame = user_code.caller(sys._getframe(1), self.block)
            event.node = id(torch._C._current_autograd_node())
        t.events.append(event)
        return out

    def _free(self, key: int) -> None:
        self.watch.pop(key, None)
        record = self.live.pop(key, None)
        if record is not None:
            record.freed_at = len(self.tracker.events)
            self.tracker.live_bytes -= record.nbytes


def storage_key(t: torch.Tensor) -> int:
    """The key `track` records a dense tensor's storage under (its address, while it lives)."""
    return t.untyped_storage().data_ptr()


def dense_parts(t: torch.Tensor) -> list[torch.Tensor]:
    """The dense tensors whose storages hold `t`'s data: `t` itself, or a sparse tensor's indices and values
    (an EmbeddingBag(sparse=True) gradient is one)."""
    if t.layout == torch.sparse_coo:
        return [t._indices(), t._values()]
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return [t.crow_indices(), t.col_indices(), t.values()]
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return [t.ccol_indices(), t.row_indices(), t.values()]
    return [t]


def _dense(value, found: list | None = None) -> list[torch.Tensor]:
    """The dense tensors in an op's arguments or result: ATen schemas hold tensors, lists and tuples of
    (optional) tensors and a kwargs dict, nothing deeper, so a plain walk does what tree_flatten would,
    several times faster (this runs twice per op inside `track`); a strided tensor, the common case, is
    taken without asking dense_parts."""
    found = [] if found is None else found
    if isinstance(value, torch.Tensor):
        if value.layout == torch.strided:
            found.append(value)
        else:
            found += dense_parts(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, torch.Tensor) and v.layout == torch.strided:
                found.append(v)
            elif isinstance(v, (torch.Tensor, list, tuple, dict)):
                _dense(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _dense(v, found)
    return found


@functools.cache
def _op_name(func) -> str:
    return str(func)                   # once per op: str() of an OpOverload builds the name each time


@contextmanager
def track(device: torch.device | str | None = None, *, lines: bool = False) -> Iterator[Tracker]:
    """Record live bytes after every op in the block, attributed to modules, forward and backward.

    Only storages created inside the block count (parameters and inputs made before it do not). A
    storage is counted once, when the op that created it returns, and uncounted when it is freed inside
    the block; one still alive at the end keeps `freed_at=None`, whenever it is freed later.
    With a CUDA `device`, every event also carries memory_allocated and memory_reserved. With `lines`, every
    event also carries the learner's line that called the op and the backward node running it (about 1.1x
    the time in the mode).
    A dispatch mode sees the eager program: a compiled function called in the block runs eagerly, and a
    CompiledRanEagerly warning says so (see `eager_only`).
    """
    tracker = Tracker()
    cuda = devices.resolve(device).type == "cuda"
    modules = module_scope.record()
    seen = eager_only.warn_if_compiled("memory.track", eager_only.FOR_MEMORY, stacklevel=5)
    arguments.require("memory.track", "lines", lines, bool, "True or False")
    live = _LiveBytes(tracker, modules, cuda, sys._getframe(2) if lines else None)   # the `with` statement's frame
    try:
        with seen, modules, live:
            yield tracker
    finally:
        live.watch.clear()   # the record ends with the block: a storage freed later changes nothing in it


@dataclass(frozen=True)
class Timeline:
    """Live bytes per category after each op, for `plot_timeline`."""

    labels: tuple[str, ...]                   # op index -> "phase: module"
    bytes_by_category: dict[str, list[int]]
    peak_bytes: int


_PHASE_CATEGORY = {"forward": "activations & other forward", "backward": "backward temporaries",
                   "recompute": "activations recomputed in backward",
                   "optimizer": "optimizer step", "cuda": "allocator blocks"}


def timeline(tracker: Tracker, categories: dict[str, list] | None = None) -> Timeline:
    """Split the tracker's live bytes into categories: each named group of tensors alive at the end
    (e.g. {"gradients": [...], "optimizer state": [...]}) and, for everything else, its phase."""
    arguments.require("memory.timeline", "tracker", tracker, Tracker, "the Tracker of a `with memory.track()` block")
    _check_categories(categories)
    owner = {}
    for name, tensors in (categories or {}).items():
        for t in tensors:
            for part in dense_parts(t) if isinstance(t, torch.Tensor) else ():
                owner[storage_key(part)] = name
    n = len(tracker.events)
    changes: dict[str, list[int]] = defaultdict(lambda: [0] * (n + 1))   # bytes in/out at each op
    for a in tracker.allocations:
        name = owner.get(a.key) if a.freed_at is None else None
        name = name or _PHASE_CATEGORY[a.phase]
        changes[name][a.op_index] += a.nbytes
        changes[name][a.freed_at if a.freed_at is not None else n] -= a.nbytes
    series = {name: list(accumulate(delta[:n])) for name, delta in changes.items()}
    labels = tuple(f"{e.phase}: {e.module}" for e in tracker.events)
    return Timeline(labels, series, tracker.peak_bytes)


def _check_categories(categories) -> None:
    expected = 'a dict of named lists of tensors, such as {"gradients": [p.grad for p in model.parameters()]}'
    if categories is None:
        return
    arguments.require("memory.timeline", "categories", categories, dict, expected)
    for name, tensors in categories.items():
        if not isinstance(tensors, (list, tuple)) or not all(t is None or isinstance(t, torch.Tensor) for t in tensors):
            raise TypeError(f"memory.timeline: `categories` must be {expected}; its entry {name!r} is "
                            f"{arguments.given(tensors)}")


@dataclass(frozen=True)
class SavedBytes:
    """What one module's ops saved for backward: `tensors` and `nbytes` as saved-tensor hooks see them, and the
    two ways those differ from the graph's own saved tensors (`autograd_graph.trace`), each counted:
    trace's bytes == nbytes + wrapped_numbers - checkpoint_inputs, summed over modules."""

    tensors: int
    nbytes: int
    # Python numbers autograd saves as 0-dim tensors (8 B for `x * 2`): in the graph, but never handed to the
    # hooks (torch/csrc/autograd/saved_variable.cpp: "Avoid wrapped numbers from being leaked to the user")
    wrapped_numbers: int = 0
    # of nbytes, the inputs non-reentrant checkpointing keeps in its own frame (checkpoint.py save_inputs):
    # packed by the hooks, held by no graph node
    checkpoint_inputs: int = 0


def saved_bytes_by_module(model: Callable[..., torch.Tensor],
                          *inputs) -> tuple[dict[str, SavedBytes], torch.Tensor]:
    """Run `model(*inputs)` and count every tensor autograd saves for backward, per innermost module.
    `model` is a module, or any function that runs modules (saves outside one count as "(outside modules)").

    Returns the counts and the output (keep it to keep the graph). Bytes are numel x element size of
    each saved tensor; a tensor saved twice counts twice, as in the graph's `_saved_*` attributes.
    """
    arguments.require_callable("memory.saved_bytes_by_module", "model", model, "a module or a function that runs one")
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])   # tensors, bytes, wrapped, checkpoint
    packed: set[int] = set()
    modules = module_scope.record()

    def pack(t: torch.Tensor) -> torch.Tensor:
        entry = totals[modules.current()[0]]
        nbytes = t.numel() * t.element_size()
        entry[0] += 1
        entry[1] += nbytes
        entry[3] += nbytes if _packed_by_checkpoint() else 0
        kept = t.detach()       # not `t`: a graph that saves its own output would hold itself (a cycle the
        packed.add(id(kept))    # collector cannot see through C++; torch/autograd/graph.py, saved_tensors_hooks)
        return kept

    with modules, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(*inputs)
        _count_wrapped_numbers([t for t in _dense(tree_flatten(out)[0]) if t.grad_fn is not None], packed, totals)
    return {name: SavedBytes(*entry) for name, entry in totals.items()}, out


def _count_wrapped_numbers(outputs: list[torch.Tensor], packed: set[int], totals) -> None:
    """Saved tensors in the graph that the hooks never packed: Python numbers autograd wrapped (a tensor the
    hooks packed is the very object the graph holds). Each (node, attribute) once, however many of the outputs
    reach it."""
    seen = set()
    for t in outputs:
        for node, attr, saved in autograd_graph.saved_objects(t):
            if isinstance(saved, torch.Tensor) and id(saved) not in packed and (node, attr) not in seen:
                seen.add((node, attr))
                totals[module_scope.module_of(node)][2] += saved.numel() * saved.element_size()


def _packed_by_checkpoint() -> bool:
    """Whether torch.utils.checkpoint's frame is saving its inputs (`save_inputs`) a few calls up."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return False
        if frame.f_code.co_name == "save_inputs" and frame.f_code.co_filename.endswith("checkpoint.py"):
            return True
        frame = frame.f_back
    return False


@contextmanager
def cuda_history(device: torch.device | str = "cuda", max_entries: int = 100_000) -> Iterator[Tracker]:
    """CUDA only: record the caching allocator's history (`torch.cuda.memory._record_memory_history`)
    and, on exit, turn the snapshot's alloc/free trace into a Tracker, so `timeline` and
    `plot_timeline` draw it like `track`'s. Recording is switched off on exit, errors included."""
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"memory.cuda_history: `device` must be a CUDA device; got {str(device)!r}; use "
                         "memory.track() on a CPU")
    if not torch.cuda.is_available():
        raise RuntimeError("cuda_history needs CUDA, and this machine has none (torch.cuda.is_available() is False); "
                           "use memory.track() on a CPU")
    tracker = Tracker()
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        yield tracker
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    _replay(snapshot["device_traces"][device.index or 0], tracker)


def _replay(trace: list[dict], tracker: Tracker) -> None:
    live: dict[int, Allocation] = {}
    for entry in trace:
        action, addr, size = entry["action"], entry["addr"], entry["size"]
        if action == "alloc":
            live[addr] = Allocation(addr, size, len(tracker.events), "(cuda)", "cuda")
            tracker.allocations.append(live[addr])
            tracker.live_bytes += size
        elif action == "free_completed" and addr in live:
            live.pop(addr).freed_at = len(tracker.events)
            tracker.live_bytes -= size
        else:
            continue
        tracker.peak_bytes = max(tracker.peak_bytes, tracker.live_bytes)
        tracker.events.append(OpEvent(len(tracker.events), action, "(cuda)", "cuda", tracker.live_bytes))


def plot_timeline(data: Timeline, ax=None):
    """Live bytes after each op, stacked by category; forward and backward ops shaded differently."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.figure(figsize=(9, 3.5)).gca()
    names = list(data.bytes_by_category)
    ax.stackplot(range(len(data.labels)), *[data.bytes_by_category[n] for n in names], labels=names,
                 step="post", alpha=0.8)
    backward = [i for i, label in enumerate(data.labels) if label.startswith("backward")]
    if backward:
        ax.axvspan(backward[0], backward[-1] + 1, color="grey", alpha=0.1, lw=0, label="backward ops")
    ax.set(xlabel="op", ylabel="live bytes", title=f"peak {data.peak_bytes:,} B")
    ax.legend(loc="upper left", fontsize=8)
    return ax


@contextmanager
def older_objects_frozen():
    """The objects that exist now moved out of the garbage collector's reach for the block (`gc.freeze`), so a
    `gc.collect()` in it scans what the block made, not the whole heap (0.3 s a collection with transformers
    imported), and `gc.get_objects()` lists only those. Not when the program froze objects itself: unfreezing
    would undo that."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
