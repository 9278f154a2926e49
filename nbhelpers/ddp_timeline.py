"""What DDP's backward looks like on every rank: the backward ops, and each gradient bucket's all-reduce.

`profile_backward` is a worker for `distributed.launch`: it trains a few steps of a 4-layer MLP under DDP and
records the last backward two ways, the autograd ops with `torch.profiler` (each
`autograd::engine::evaluate_function` event but AccumulateGrad's, inside which DDP copies a gradient into its
bucket and launches the bucket's all-reduce) and each bucket's all-reduce with a DDP comm hook (its launch,
when the bucket's gradients are all ready, and the completion of its future). Times are milliseconds from the
start of that backward, which every rank begins after a barrier, so the ranks' rows line up. `overlap` says
how much of the communication ran while backward was still computing; `plot` draws the ranks one above another.

Example:
    ranks = distributed.launch(ddp_timeline.profile_backward, 2, 25)      # bucket_cap_mb=25, first bucket too
    ddp_timeline.overlap(ranks[0])                                         # 0.0: one bucket, sent at the end
    ddp_timeline.plot({"25 MB buckets": ranks})
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from nbhelpers import stderr_capture

__all__ = ["profile_backward", "overlap", "plot"]          # profile_backward returns a RankTimeline


@dataclass(frozen=True)
class RankTimeline:
    rank: int
    compute: tuple[tuple[str, float, float], ...]          # (backward op, start ms, end ms)
    allreduce: tuple[tuple[int, int, float, float], ...]   # (bucket index, bytes, start ms, end ms)
    backward_ms: float                                      # loss.backward() returned after this long
    parameter_bytes: int


def profile_backward(rank: int, world_size: int, bucket_cap_mb: float | None, steps: int = 3) -> RankTimeline:
    """Train `steps` steps of a 784-1024-1024-1024-10 MLP under DDP with `bucket_cap_mb`; time the last
    backward. The first steps let DDP rebuild its buckets in the order the gradients became ready.

    bucket_cap_mb=None is DDP's default: 25 MiB buckets, but the first one capped at 1 MiB
    (dist._DEFAULT_FIRST_BUCKET_BYTES); a cap passed explicitly applies to the first bucket too."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"ddp_timeline.profile_backward: `steps` must be an int of at least 1 (the last step is "
                         f"the one recorded); got {steps!r}")
    torch.manual_seed(0)
    torch.set_num_threads(1)                               # two ranks share the machine's cores
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    ddp = DDP(model, bucket_cap_mb=bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = torch.rand(64, 784), torch.randint(0, 10, (64,))
    sent: list[tuple[int, int, float, float]] = []         # (bucket, bytes, launched, completed) per all-reduce
    ddp.register_comm_hook(None, _timed_allreduce(sent))
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(ddp(x), y)
        sent.clear()
        dist.barrier()                                     # every rank starts its backward together
        if step < steps - 1:
            loss.backward()
        else:
            prof, began, ended = _profiled_backward(loss)
        optimizer.step()
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    return RankTimeline(rank, _backward_ops(prof), _allreduces(sent, began), (ended - began) * 1e3, parameter_bytes)


def _timed_allreduce(sent: list):
    """A comm hook that all-reduces as DDP's default does, and appends each bucket's launch and completion."""
    def hook(state, bucket):
        start = time.perf_counter()

        def finished(future):
            sent.append((bucket.index(), bucket.buffer().numel() * bucket.buffer().element_size(), start,
                         time.perf_counter()))
            return future.value()

        return default_hooks.allreduce_hook(state, bucket).then(finished)
    return hook


def _profiled_backward(loss: torch.Tensor):
    """loss.backward() under the profiler, inside a "backward" range; (profile, start, end) in perf_counter s."""
    with stderr_capture.without_kineto_lines(), \
            torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("backward"):
            began = time.perf_counter()
            loss.backward()
            ended = time.perf_counter()
    return prof, began, ended


def _backward_ops(prof) -> tuple[tuple[str, float, float], ...]:
    """Each backward node the engine ran, but AccumulateGrad, as (name, start, end) in ms from the range's start."""
    events = prof.events()
    (marker,) = [e for e in events if e.name == "backward"]
    zero = marker.time_range.start
    ops = [(e.name.split(": ", 1)[1], e.time_range) for e in events
           if e.name.startswith("autograd::engine::evaluate_function: ")]
    return tuple(sorted((name, (span.start - zero) / 1e3, (span.end - zero) / 1e3) for name, span in ops
                        if name != "torch::autograd::AccumulateGrad"))


def _allreduces(sent: list, began: float) -> tuple[tuple[int, int, float, float], ...]:
    return tuple(sorted((index, nbytes, (start - began) * 1e3, (end - began) * 1e3)
                        for index, nbytes, start, end in sent))


def overlap(timeline: RankTimeline) -> float:
    """The share of all-reduce time (launch to completion) that ran before the last backward op finished."""
    computed_until = max(end for _, _, end in timeline.compute)
    total = sum(end - start for _, _, start, end in timeline.allreduce)
    during = sum(max(0.0, min(end, computed_until) - start) for _, _, start, end in timeline.allreduce)
    return during / total if total else 0.0


def plot(runs: dict[str, list[RankTimeline]], ax=None):
    """One row pair per rank and run: backward ops (blue) above the buckets' all-reduces (orange)."""
    import matplotlib.pyplot as plt

    rows = [(f"{name}, rank {t.rank}", t) for name, ranks in runs.items() for t in ranks]
    ax = ax if ax is not None else plt.figure(figsize=(9, 0.9 * len(rows) + 1)).gca()
    for k, (_, t) in enumerate(rows):
        y = 2 * (len(rows) - 1 - k)
        ax.broken_barh([(start, end - start) for _, start, end in t.compute], (y + 1, 0.8), color="tab:blue")
        ax.broken_barh([(start, end - start) for _, _, start, end in t.allreduce], (y, 0.8), color="tab:orange",
                       edgecolor="black")
        for index, nbytes, start, _ in t.allreduce:
            ax.text(start, y + 0.4, f" b{index} {nbytes / 2**20:.1f} MiB", va="center", fontsize=7)
    ax.set_yticks([2 * (len(rows) - 1 - k) + 0.9 for k in range(len(rows))], [label for label, _ in rows])
    ax.set_xlabel("ms since backward began (blue: backward ops; orange: a bucket's all-reduce, launch to done)")
    return ax
