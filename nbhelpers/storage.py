"""Tensors as data: storage identity, views and strides, version counters, and storage lifetimes.

`record_lifetimes` and `memory.track` are two recorders on purpose, at two layers. This one reads the
allocator's events through torch.profiler (profile_memory=True): every allocation and free, including those
an op makes inside itself that never become a tensor the dispatcher sees, with no notion of module or phase.
`memory.track` sits at the dispatcher: it sees each op and the storages the op's outputs live in, and so
which module and phase made them, but not an allocation hidden inside an op. On one step, every storage
`memory.track` counts is an allocation this recorder sees, with the same size (tests/test_storage.py).

Example:
    storage.describe(x.t())                       # a TensorInfo: shape, stride, storage_ptr, is_view, ...
    with storage.record_lifetimes() as rec:
        with rec.step("clone"):
            y = x.clone()
    storage.plot_lifetimes(rec.events)
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Iterator

import torch

from nbhelpers import devices
from nbhelpers.stderr_capture import without_kineto_lines

__all__ = ["TensorInfo", "StorageEvent", "LifetimeRecorder", "describe", "shares_storage",
           "record_lifetimes", "plot_lifetimes", "plot_strides"]

_STEP_PREFIX = "step: "


@dataclass(frozen=True)
class TensorInfo:
    """What a tensor is made of: its view of a storage, and its autograd state."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype
    device: torch.device
    storage_ptr: int           # untyped_storage().data_ptr(): equal for tensors sharing memory
    storage_nbytes: int
    is_contiguous: bool
    is_view: bool              # t._base is not None: created from another tensor by a view op
    version: int               # t._version: bumped by every in-place op on the storage
    requires_grad: bool
    is_leaf: bool
    grad_fn: str | None        # grad_fn.name(), e.g. "AddmmBackward0"


def describe(t: torch.Tensor) -> TensorInfo:
    """Read `t`'s layout and autograd state into a TensorInfo (nothing is copied)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"describe() takes a torch.Tensor, got {type(t).__name__}")
    s = t.untyped_storage()
    return TensorInfo(tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device,
                      s.data_ptr(), s.nbytes(), t.is_contiguous(), t._base is not None, t._version,
                      t.requires_grad, t.is_leaf, t.grad_fn.name() if t.grad_fn is not None else None)


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when `a` and `b` use the same storage (a view, `.detach()`, `.data`, ...), so a write through one
    can show through the other; they need not share an element (`x[:2]` and `x[2:]`).

    It compares the storages themselves (`_cdata`, the key torch.storage's own `__deepcopy__` uses), not their
    data pointers: two empty tensors both point at 0 and share nothing."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return a.device == b.device and a.untyped_storage()._cdata == b.untyped_storage()._cdata


@dataclass(frozen=True)
class StorageEvent:
    """One allocation or free seen by the allocator, in order."""

    time_ns: int               # since the recorder started
    kind: str                  # "alloc" or "free"
    ptr: int
    nbytes: int
    total_bytes: int           # bytes this allocator held right after the event
    device: str
    step: str | None           # label of the innermost LifetimeRecorder.step() around it


@dataclass
class LifetimeRecorder:
    """Filled by `record_lifetimes`; `events` is complete once the `with` block has exited."""

    events: list[StorageEvent] = field(default_factory=list)

    @contextmanager
    def step(self, label: str) -> Iterator[None]:
        """Label the allocations and frees that happen inside this block."""
        with torch.profiler.record_function(_STEP_PREFIX + label):
            yield


@contextmanager
def record_lifetimes(device: torch.device | str | None = None) -> Iterator[LifetimeRecorder]:
    """Record every storage allocation and free on the CPU (and on `device` when it is CUDA).

    It reads the allocator events of torch.profiler (profile_memory=True), so it sees real
    allocations: a view allocates nothing, and a tensor saved for backward stays allocated.
    Kineto prints start/stop lines to stderr; exactly those are dropped, anything else passes.
    """
    activities = [torch.profiler.ProfilerActivity.CPU]
    if devices.resolve(device).type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    prof = torch.profiler.profile(activities=activities, profile_memory=True)
    recorder = LifetimeRecorder()
    with without_kineto_lines():
        prof.start()
    try:
        yield recorder
    finally:
        with without_kineto_lines():
            prof.stop()
            recorder.events[:] = _allocation_events(prof)


def _allocation_events(prof) -> list[StorageEvent]:
    from torch._C._profiler import _EventType

    found, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.tag == _EventType.Allocation:
            found.append(node)
    found.sort(key=lambda n: n.start_time_ns)
    start = found[0].start_time_ns if found else 0
    return [_to_event(n, start) for n in found]


def _to_event(node, start_ns: int) -> StorageEvent:
    e = node.extra_fields
    step, parent = None, node.parent
    while parent is not None and step is None:
        step = parent.name[len(_STEP_PREFIX):] if parent.name.startswith(_STEP_PREFIX) else None
        parent = parent.parent
    return StorageEvent(node.start_time_ns - start_ns, "alloc" if e.alloc_size > 0 else "free", e.ptr,
                        abs(e.alloc_size), e.total_allocated, str(e.device), step)


def plot_lifetimes(events: list[StorageEvent], ax=None, only: str = "cpu"):
    """Net bytes allocated since recording began, after each event, counting only the events on devices
    whose name starts with `only` ("cpu", "cuda", "cuda:1"); steps shaded."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(8, 3))[1]
    mine = [e for e in events if e.device.startswith(only)]
    if not mine:
        raise ValueError(f"no {only} allocations among {len(events)} events; record on that device")
    held = list(accumulate((e.nbytes if e.kind == "alloc" else -e.nbytes for e in mine), initial=0))
    ax.step(range(len(held)), held, where="post", color="tab:blue")
    big = max(e.nbytes for e in mine) / 20                     # label only events that show on the plot
    for i, e in enumerate(mine):
        if e.nbytes >= big:
            ax.annotate(f"{'+' if e.kind == 'alloc' else '-'}{e.nbytes:,}", (i + 1, held[i + 1]),
                        textcoords="offset points", xytext=(2, 3), fontsize=7)
    for k, (label, first, last) in enumerate(_step_spans(mine)):
        ax.axvspan(first, last + 1, color="grey", alpha=0.06 if k % 2 else 0.14, lw=0)
        ax.text((first + last + 1) / 2, 1.01, label or "(no step)", transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=8)
    ax.set_xlabel("allocator event")
    ax.set_ylabel("net bytes allocated")
    ax.set_title(f"{only}: every allocation and free", pad=16)
    return ax


def _step_spans(events: list[StorageEvent]) -> list[tuple[str | None, int, int]]:
    """(step, first event index, last event index) for each run of events with one step label."""
    spans = []
    for i, e in enumerate(events):
        if spans and spans[-1][0] == e.step:
            spans[-1] = (e.step, spans[-1][1], i)
        else:
            spans.append((e.step, i, i))
    return spans


def plot_strides(t: torch.Tensor, ax=None):
    """Draw `t`'s storage as a row of cells, each labelled with the tensor index that reads it."""
    import matplotlib.pyplot as plt

    if t.dim() > 2 or t.numel() > 64:
        raise ValueError(f"plot_strides draws tensors of at most 2 dims and 64 elements, got shape "
                         f"{tuple(t.shape)}; slice it first, e.g. t[:4, :4]")
    ax = ax or plt.subplots(figsize=(8, 1.6))[1]
    n_cells = t.untyped_storage().nbytes() // t.element_size()
    index_of = {}
    for idx in torch.cartesian_prod(*[torch.arange(s) for s in t.shape]).view(-1, t.dim()).tolist():
        cell = t.storage_offset() + sum(i * s for i, s in zip(idx, t.stride()))
        index_of[cell] = ",".join(map(str, idx))
    for cell in range(n_cells):
        used = cell in index_of
        ax.add_patch(plt.Rectangle((cell, 0), 1, 1, facecolor="tab:orange" if used else "white",
                                   edgecolor="black", alpha=0.8 if used else 1))
        ax.text(cell + 0.5, 0.5, index_of.get(cell, ""), ha="center", va="center", fontsize=7)
    ax.set_xlim(0, n_cells)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_xlabel("storage element")
    ax.set_title(f"shape {tuple(t.shape)}, stride {t.stride()}, offset {t.storage_offset()}")
    return ax
