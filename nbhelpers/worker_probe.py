"""What happens inside a DataLoader worker: pass `report_worker` as `collate_fn` and each batch comes
back as a WorkerReport saying which process built it, with which seed, and what it had opened.

It lives in an importable module, not in a notebook, so that it also works when workers are spawned
(macOS, Windows, `multiprocessing_context="spawn"`): a spawned worker must import what it runs.

Example:
    loader = DataLoader(dataset, batch_size=100, num_workers=2, collate_fn=worker_probe.report_worker)
    reports = list(loader)               # one WorkerReport per batch
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import get_worker_info

__all__ = ["WorkerReport", "report_worker"]


@dataclass(frozen=True)
class WorkerReport:
    """Where one batch was collated, and one draw from each RNG there."""

    worker_id: int | None      # None: the main process built it (num_workers=0)
    pid: int
    torch_seed: int            # torch.initial_seed() in that process
    opened_in: int | None      # the dataset copy's `opened_in` attribute, if it has one
    batch_size: int
    torch_draw: float
    numpy_draw: float
    random_draw: float


def report_worker(batch: list) -> WorkerReport:
    """A collate_fn that replaces the batch by a report on the process that collated it."""
    info = get_worker_info()
    dataset = info.dataset if info is not None else None
    return WorkerReport(
        worker_id=info.id if info is not None else None,
        pid=os.getpid(),
        torch_seed=torch.initial_seed(),
        opened_in=getattr(dataset, "opened_in", None),
        batch_size=len(batch),
        torch_draw=torch.rand(()).item(),
        numpy_draw=float(np.random.random()),
        random_draw=random.random(),
    )
