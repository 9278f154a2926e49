"""Benchmark (not a test): the three regimes of notebook 09, checked on this machine with wide margins.

    python tests/benchmarks/regimes.py

A batch-1 MLP training step must leave most of its time unexplained by either ceiling (overhead-bound:
under half of the matmul FLOP/s and of the copy bandwidth reached); a 1024 x 1024 matmul must reach over half
of the matmul FLOP/s and more of it than of the bandwidth (compute-bound); a chain of 8 multiply-adds on 4M
floats must reach over half of the copy bandwidth (bandwidth-bound); a sort of 4M floats and an
erfinv-sin-exp chain on 4M floats must take time that grows with their size while reaching neither ceiling
(compute-bound (not matmul)). Prints each regime's shares and exits 1 if a verdict is not the expected one.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from nbhelpers import models, profiling  # noqa: E402


def mlp_step(batch):
    torch.manual_seed(0)
    net = models.mlp()
    sgd = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.rand(batch, 784), torch.randint(0, 10, (batch,))

    def step():
        sgd.zero_grad()
        F.cross_entropy(net(x), y).backward()
        sgd.step()
    return step


def square_matmul(n):
    a, b = torch.rand(n, n), torch.rand(n, n)
    return lambda: a @ b


def chain(n):
    data = torch.rand(n)

    def run():
        x = data
        for _ in range(8):
            x = x * 1.0001 + 0.001
        return x
    return run


def sort(n):
    data = torch.rand(n)
    return lambda: torch.sort(data)


def transcendental(n):
    data = torch.rand(n) * 0.9
    return lambda: torch.exp(torch.sin(torch.erfinv(data)))


def main() -> int:
    torch.set_num_threads(2)
    peaks = profiling.machine_peaks("cpu")
    print(f"ceilings: matmul {peaks.flops_per_s / 1e9:.0f} GFLOP/s, copy {peaks.bytes_per_s / 1e9:.1f} GB/s")
    cases = [("MLP step, batch 1", mlp_step, (1, 16), "overhead-bound"),
             ("matmul 1024", square_matmul, (1024, 1536), "compute-bound"),
             ("multiply-add chain, 4M", chain, (1 << 22, 1 << 23), "bandwidth-bound"),
             ("sort, 4M", sort, (1 << 22, 1 << 23), "compute-bound (not matmul)"),
             ("erfinv-sin-exp, 4M", transcendental, (1 << 22, 1 << 23), "compute-bound (not matmul)")]
    wrong = 0
    for name, make, sizes, expected in cases:
        r = profiling.regime(make, sizes, peaks=peaks)
        wrong += r.verdict != expected
        print(f"{name:<24} {r.verdict:<26} (expected {expected}) compute {r.compute_share:.2f}, "
              f"bandwidth {r.bandwidth_share:.2f}; {r.evidence}")
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
