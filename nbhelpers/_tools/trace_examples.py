"""Notebook 05's compile examples, run once so that `make trace` can hand their TORCH_TRACE log to tlparse.

Not part of the learners' API (hence the underscore): `make trace` runs it with TORCH_TRACE set, then
tlparse writes the report (build/trace/report/index.html), PyTorch's own view of the same compiles:
graphs, breaks, guards, generated code, linked.
"""
from __future__ import annotations

import contextlib
import io

import torch
import torch.nn.functional as F

from nbhelpers import models


def noisy(x):
    y = torch.relu(x)
    print("mean activation computed")
    scale = y.mean().item()
    if scale > 0.5:
        return y * 2
    return y / scale


def main() -> int:
    torch.manual_seed(0)
    net = models.mlp()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)

    def train_step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        optimizer.step()
        return loss

    with contextlib.redirect_stdout(io.StringIO()):
        torch.compile(noisy)(torch.randn(256))
        torch.compile(train_step)(torch.rand(64, 28, 28), torch.randint(0, 10, (64,)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
