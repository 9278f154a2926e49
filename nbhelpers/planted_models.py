"""Small models, each with one problem planted in it, for notebook 13 and the tests of `diagnose`: the kind of
mistake a learner's own model has, and the finding `diagnose.run` must put in its top three.

Each factory returns (model, example inputs, the finding's kind). The models are small so that a whole
diagnosis runs in seconds on a CPU.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["PLANTED", "ItemInForward", "OuterProduct"]   # the other models: through PLANTED, and the CLI's tests


class ItemInForward(nn.Module):
    """A data-dependent branch: `.item()` brings a number to Python, so torch.compile must stop its graph."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 10)

    def forward(self, x):
        h = self.fc1(x).relu()
        if h.mean().item() > 0.5:          # the planted problem
            h = h * 0.5
        return self.fc2(h)


class OuterProduct(nn.Module):
    """A pairwise feature: the (B, 64, 64) outer product is saved for backward by the op after it."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64 * 64, 10)

    def forward(self, x):
        h = self.fc1(x).tanh()                          # (B, 64)
        pairs = h[:, :, None] * h[:, None, :]           # (B, 64, 64): the planted problem
        return self.fc2(pairs.flatten(1))


class KeptFloat32(nn.Module):
    """A bfloat16 model with a float32 copy of its embedding kept as a plain attribute (made before .bfloat16(),
    which does not convert it), used to rescore the output in float32."""

    def __init__(self):
        super().__init__()
        self.embed, self.fc = nn.Embedding(1000, 64), nn.Linear(64, 64)
        self.reference = self.embed.weight.detach().clone()       # the planted problem: not a buffer

    def forward(self, tokens):
        h = self.fc(self.embed(tokens).mean(1))                   # (B, 64) bfloat16
        return h.float() @ self.reference[:64].T                  # float32 from here on


class LoopOverBatch(nn.Module):
    """A Python loop over the batch: Dynamo unrolls it, so every new batch size is a new graph."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        y = self.fc(x)
        return torch.stack([y[i] * (i + 1) for i in range(x.shape[0])])   # the planted problem


class DropoutLeftOn(nn.Module):
    """An inference model whose dropout was switched back to train mode after model.eval()."""

    def __init__(self):
        super().__init__()
        self.fc1, self.drop, self.fc2 = nn.Linear(32, 64), nn.Dropout(0.5), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(self.drop(self.fc1(x).relu()))


class BufferElsewhere(nn.Module):
    """A mask buffer left on another device (here "meta", which any machine has; on a GPU host the same bug is a
    buffer left on the CPU)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 10)
        self.register_buffer("mask", torch.ones(10, device="meta"))     # the planted problem

    def forward(self, x):
        return self.fc(x) * self.mask


class Fixed(nn.Module):
    """The same two layers with nothing planted: what a clean diagnosis looks like."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(32, 64), nn.Linear(64, 10)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


def _dropout_left_on() -> nn.Module:
    model = DropoutLeftOn().eval()
    model.drop.train()                 # the planted problem: a later line turned it back on
    return model


PLANTED = {
    "item": (lambda: ItemInForward(), lambda: (torch.randn(8, 32),), "graph-break"),
    "outer product": (lambda: OuterProduct(), lambda: (torch.randn(8, 32),), "saved-for-backward"),
    "float32 copy": (lambda: KeptFloat32().bfloat16(), lambda: (torch.randint(0, 1000, (8, 16)),), "precision"),
    "loop over batch": (lambda: LoopOverBatch(), lambda: (torch.randn(8, 32),), "recompile"),
    "dropout left on": (_dropout_left_on, lambda: (torch.randn(8, 32),), "mode"),
    "buffer elsewhere": (lambda: BufferElsewhere(), lambda: (torch.randn(8, 32),), "device"),
}
