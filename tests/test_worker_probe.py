"""nbhelpers.worker_probe: reports say which process collated a batch, with that process's seeds."""
import os

import torch
from torch.utils.data import DataLoader

from nbhelpers import worker_probe


def _reports(num_workers, seed=0):
    loader = DataLoader(range(40), batch_size=10, num_workers=num_workers, timeout=60 if num_workers else 0,
                        collate_fn=worker_probe.report_worker, generator=torch.Generator().manual_seed(seed))
    return list(loader)


def test_main_process_reports_no_worker():
    reports = _reports(0)
    assert [r.batch_size for r in reports] == [10] * 4
    assert {(r.worker_id, r.pid, r.opened_in) for r in reports} == {(None, os.getpid(), None)}


def test_workers_report_their_ids_seeds_and_distinct_streams():
    reports = _reports(2)
    assert [r.worker_id for r in reports] == [0, 1, 0, 1]         # batches alternate, in order
    first, second = reports[0], reports[1]
    assert second.torch_seed == first.torch_seed + 1 and os.getpid() not in {first.pid, second.pid}
    assert first.numpy_draw != second.numpy_draw and first.random_draw != second.random_draw
    again = _reports(2)
    assert [(r.torch_draw, r.numpy_draw, r.random_draw) for r in again] == \
        [(r.torch_draw, r.numpy_draw, r.random_draw) for r in reports]
