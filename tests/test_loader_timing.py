"""nbhelpers.loader_timing: the grid has the right setups, timings have the right shape, no worker is left."""
import multiprocessing

import pytest
import torch
from torch.utils.data import TensorDataset

from nbhelpers import loader_timing



def test_grid_skips_persistence_without_workers():
    setups = loader_timing.grid(workers=(0, 2), batch_sizes=(8, 64))
    assert [(s.num_workers, s.persistent_workers, s.batch_size) for s in setups] == [
        (0, False, 8), (2, False, 8), (2, True, 8), (0, False, 64), (2, False, 64), (2, True, 64)]
    assert setups[2].label == "w2+persist b8"


@pytest.mark.parametrize("workers, persistent", [(0, False), (2, False), (2, True)])
def test_time_loader_counts_every_item_and_leaves_no_worker(workers, persistent):
    dataset = TensorDataset(torch.arange(100.0))
    timing = loader_timing.time_loader(dataset, loader_timing.LoaderSetup(workers, persistent, 16), epochs=2)
    assert timing.items == 100 and len(timing.first_batch_s) == len(timing.epoch_s) == 2
    assert all(0 < f <= e for f, e in zip(timing.first_batch_s, timing.epoch_s))
    assert timing.items_per_s == tuple(100 / e for e in timing.epoch_s)
    assert multiprocessing.active_children() == []


def test_time_loader_rejects_zero_epochs():
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        loader_timing.time_loader(TensorDataset(torch.zeros(4)), loader_timing.LoaderSetup(0, False, 2), 0)


def test_render_and_plot():
    dataset = TensorDataset(torch.arange(10.0))
    timings = tuple(loader_timing.time_loader(dataset, s, epochs=1) for s in loader_timing.grid((0,), (2, 5)))
    table = loader_timing.render_timings(timings)
    assert table.splitlines()[1].startswith("w0 b2") and "ep1 items/s" in table
    ax = loader_timing.plot_timings(timings)
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == sorted(round(t.items_per_s[0], 6) for t in timings)      # one bar per setup and epoch
    assert ax.get_ylabel() == "items / s"
    assert [t.get_text() for t in ax.get_xticklabels()] == [t.setup.label for t in timings]
