"""Models whose backward graphs exercise different parts of the engine (branches, shared weights, in-place
ops through views, custom Functions, checkpointing, multi-output ops), shared by the graph tests:
`CASES[name]()` gives (model, input) and `loss_of(model, x)` the scalar loss."""
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from nbhelpers import models


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))

    def forward(self, x):
        return torch.relu(x + self.body(x))


class OutsideResidual(nn.Module):
    """`x = x + block(x)` written in the parent: the add sits between every two blocks of one graph."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return x


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(5, 5)

    def forward(self, x):
        return self.layer(torch.tanh(self.layer(x)))         # one weight, two uses


class InPlaceView(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x).clone()
        y[:, :2].mul_(3)                                      # in place through a view
        return y.sigmoid()


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad


class CustomFunction(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return Cube.apply(self.fc(x)).sum(1)


class Checkpointed(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x):
        return checkpoint(self.inner, x, use_reentrant=False).tanh()


class SplitHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 6)

    def forward(self, x):
        a, b, c = self.fc(x).split(2, dim=1)                  # one node, three outputs
        return a * b + c.exp()


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=True)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return out.sum() + h.sum() * c.mean()


CASES = {"mlp": lambda: (models.mlp(), torch.rand(4, 28, 28)),
         "cnn": lambda: (models.cnn(), torch.rand(2, 1, 28, 28)),
         "residual": lambda: (Residual(), torch.randn(3, 6)),
         "shared weights": lambda: (Shared(), torch.randn(2, 5)),
         "in-place on a view": lambda: (InPlaceView(), torch.randn(2, 4)),
         "custom Function": lambda: (CustomFunction(), torch.randn(2, 3)),
         "checkpointing": lambda: (Checkpointed(), torch.randn(2, 4)),
         "retain_graph, two backwards": lambda: (Residual(), torch.randn(2, 6)),
         "tensor hooks": lambda: (Residual(), torch.randn(2, 6)),
         "multi-output op (split, LSTM)": lambda: (nn.ModuleList([SplitHeads(), Recurrent()]), None)}


def loss_of(model, x):
    if isinstance(model, nn.ModuleList):                       # split and LSTM together
        return model[0](torch.randn(2, 4)).sum() + model[1](torch.randn(2, 5, 3))
    return model(x).sum()
