"""Benchmark (not a test): what memory.track costs on a CNN training step, against no tracking, against
torch's MemTracker (the same job: storages by category) and against torch.profiler with profile_memory=True.

    python tests/benchmarks/memory_tracker_overhead.py [--batch 64] [--rounds 5]

The variants take turns, round after round, and each ratio is the median over rounds of (variant / untracked
in the same round): a machine that slows down for a while slows both sides of a ratio, not one variant.
"""
import argparse
import contextlib
import statistics

import torch
import torch.nn.functional as F
from torch.distributed._tools.mem_tracker import MemTracker
from torch.utils import benchmark

from nbhelpers import memory, models


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    batch = options.batch
    torch.manual_seed(0)
    model = models.cnn()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))

    def step(context):
        with context():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    profiler = lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],  # noqa: E731
                                              profile_memory=True)
    step(profiler)  # the first profiler session pays a one-off start-up; keep it out of the timing
    def mem_tracker():
        tracker = MemTracker()
        tracker.track_external(model, optimizer)
        return tracker

    variants = {"untracked": contextlib.nullcontext, "memory.track": memory.track, "MemTracker": mem_tracker,
                "profiler": profiler}
    rounds = []
    for _ in range(options.rounds):
        rounds.append({name: benchmark.Timer("step(context)", globals={"step": step, "context": context})
                       .blocked_autorange(min_run_time=0.5).median for name, context in variants.items()})
    for name in variants:
        seconds = statistics.median(r[name] for r in rounds)
        ratios = sorted(r[name] / r["untracked"] for r in rounds)
        print(f"{name:<14} {seconds * 1e3:8.2f} ms per CNN step (batch {batch})  {statistics.median(ratios):5.2f}x "
              f"(rounds: {ratios[0]:.2f}-{ratios[-1]:.2f}x)")


if __name__ == "__main__":
    main()
