"""How fast a DataLoader delivers: time to the first batch and per-epoch throughput, per setup.

Epochs are timed with `time.perf_counter` rather than `torch.utils.benchmark`, because what matters
here is one-off: the first epoch starts the workers, and the second shows what `persistent_workers`
saves. Every multi-process loader gets a `timeout`, so a stuck worker fails instead of hanging.

Example:
    setups = loader_timing.grid(workers=(0, 2), batch_sizes=(64,))
    timings = [loader_timing.time_loader(dataset, s, epochs=2) for s in setups]
    print(loader_timing.render_timings(timings))
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, Dataset

__all__ = ["LoaderSetup", "LoaderTiming", "grid", "time_loader", "render_timings",
           "plot_timings"]


@dataclass(frozen=True)
class LoaderSetup:
    """The DataLoader arguments one timing varies; everything else is left at its default."""

    num_workers: int
    persistent_workers: bool
    batch_size: int

    @property
    def label(self) -> str:
        return f"w{self.num_workers}{'+persist' if self.persistent_workers else ''} b{self.batch_size}"


@dataclass(frozen=True)
class LoaderTiming:
    """Seconds to the first batch and for the whole epoch, one entry per epoch."""

    setup: LoaderSetup
    items: int                        # items per epoch
    first_batch_s: tuple[float, ...]
    epoch_s: tuple[float, ...]

    @property
    def items_per_s(self) -> tuple[float, ...]:
        return tuple(self.items / s for s in self.epoch_s)


def grid(workers=(0, 1, 2), batch_sizes=(64, 512)) -> tuple[LoaderSetup, ...]:
    """Every combination, with and without persistent workers where there are workers to keep."""
    return tuple(LoaderSetup(w, persistent, b) for b in batch_sizes for w in workers
                 for persistent in ((False, True) if w > 0 else (False,)))


def time_loader(dataset: Dataset, setup: LoaderSetup, epochs: int = 2, timeout_s: float = 60.0,
                seed: int = 0) -> LoaderTiming:
    """Iterate a shuffled DataLoader built from `setup` for `epochs` epochs, timing each one."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    loader = DataLoader(dataset, batch_size=setup.batch_size, shuffle=True,
                        num_workers=setup.num_workers, persistent_workers=setup.persistent_workers,
                        timeout=timeout_s if setup.num_workers > 0 else 0,
                        generator=torch.Generator().manual_seed(seed))
    first, whole, items = [], [], 0
    for _ in range(epochs):
        start = time.perf_counter()
        items, batches = 0, iter(loader)
        for i, batch in enumerate(batches):
            if i == 0:
                first.append(time.perf_counter() - start)
            items += len(batch[0] if isinstance(batch, (tuple, list)) else batch)  # (x, y) or x
        whole.append(time.perf_counter() - start)
        del batches  # a non-persistent iterator shuts its workers down here
    del loader  # and a persistent one here
    return LoaderTiming(setup, items, tuple(first), tuple(whole))


def render_timings(timings: tuple[LoaderTiming, ...]) -> str:
    """A plain-text table: setup, first-batch latency and items/s for each epoch."""
    epochs = len(timings[0].epoch_s)
    head = f"{'setup':<18}" + "".join(f"  ep{e + 1} 1st batch  ep{e + 1} items/s" for e in range(epochs))
    rows = [head]
    for t in timings:
        cells = "".join(f"  {f * 1000:>10.1f} ms  {r:>11,.0f}" for f, r in zip(t.first_batch_s, t.items_per_s))
        rows.append(f"{t.setup.label:<18}{cells}")
    return "\n".join(rows)


def plot_timings(timings: tuple[LoaderTiming, ...], ax=None):
    """Items per second of each setup, one bar per epoch."""
    import matplotlib.pyplot as plt

    ax = ax if ax is not None else plt.figure(figsize=(8, 3.5)).gca()
    epochs = len(timings[0].epoch_s)
    width = 0.8 / epochs
    for e in range(epochs):
        xs = [i + e * width for i in range(len(timings))]
        ax.bar(xs, [t.items_per_s[e] for t in timings], width, label=f"epoch {e + 1}")
    ax.set_xticks([i + width * (epochs - 1) / 2 for i in range(len(timings))],
                  [t.setup.label for t in timings], rotation=45, ha="right")
    ax.set_ylabel("items / s")
    ax.legend()
    return ax
