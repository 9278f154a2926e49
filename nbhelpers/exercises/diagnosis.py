"""Judges for the exercises on diagnosing a model (13.1, 13.2): fix a planted problem, and `diagnose.run`
confirms it is gone. Each answer is checked twice: its values against the planted model's, on the judge's own
inputs, and the model built with it through a whole diagnosis, which must no longer find the problem."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers.diagnosis import diagnose
from nbhelpers.exercises.registry import call, draw, exercise, inputs


def _rows_by_loop(y: torch.Tensor) -> torch.Tensor:
    return torch.stack([y[i] * (i + 1) for i in range(y.shape[0])])    # the planted loop, for the expected values


class _ScaledRows(nn.Module):
    def __init__(self, answer):
        super().__init__()
        self.fc, self.answer = nn.Linear(32, 10), answer

    def forward(self, x):
        return self.answer(self.fc(x))


def _still_found(model, x, kinds: tuple[str, ...]) -> str | None:
    """What diagnose still finds of `kinds` (or what made it fail), else None."""
    torch.manual_seed(0)
    d = diagnose.run(model, x)
    if d.error:
        return f"diagnose could not run the model: {d.error}"
    found = [f for f in d.findings if f.kind in kinds]
    return f"diagnose still finds [{found[0].kind}] {found[0].title}" + (
        f" at {found[0].where}" if found[0].where else "") if found else None


@exercise("13.1", "scale row i by i + 1 without a Python loop, so new batch sizes stop recompiling",
          hint="make the factors a tensor: torch.arange(1, y.shape[0] + 1, dtype=y.dtype, device=y.device), then "
               "broadcast it over the rows with [:, None]; a list or a loop over range(y.shape[0]) is unrolled")
def _scale_rows(answer):
    for y in inputs(lambda g, k: torch.randn(draw(g, 1, 12), draw(g, 1, 6), generator=g)):
        got = call(answer, y)
        if not isinstance(got, torch.Tensor) or got.shape != y.shape:
            return f"for y of shape {tuple(y.shape)} it returned {type(got).__name__} " \
                   f"{tuple(got.shape) if isinstance(got, torch.Tensor) else ''}, not a tensor of that shape"
        if not torch.allclose(got, _rows_by_loop(y)):
            return f"for y of shape {tuple(y.shape)} row i is not y[i] * (i + 1)"
    return _still_found(_ScaledRows(answer), torch.randn(8, 32), ("recompile", "graph-break"))


class _Pairs(nn.Module):
    def __init__(self, answer):
        super().__init__()
        self.fc1, self.fc2, self.answer = nn.Linear(32, 64), nn.Linear(64 * 64, 10), answer

    def forward(self, x):
        return self.answer(self.fc1(x).tanh(), self.fc2.weight, self.fc2.bias)


def _by_outer_product(h, weight, bias):
    return F.linear((h[:, :, None] * h[:, None, :]).flatten(1), weight, bias)


@exercise("13.2", "the pairwise layer without materialising the outer product",
          hint="logit k is sum over i, j of W[k, i, j] h[i] h[j]: first u = F.linear(h, weight.view(k * d, d)) "
               "(a view of the weight: no copy), then (u.view(-1, k, d) * h[:, None, :]).sum(-1) + bias")
def _pair_logits(answer):
    def case(g, k):
        d, out = draw(g, 2, 9), draw(g, 1, 5)
        return (torch.randn(draw(g, 1, 6), d, generator=g), torch.randn(out, d * d, generator=g),
                torch.randn(out, generator=g))

    for h, weight, bias in inputs(case):
        got = call(answer, h, weight, bias)
        expected = _by_outer_product(h, weight, bias)
        if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
            return f"for h {tuple(h.shape)} and weight {tuple(weight.shape)} it did not return a tensor of shape " \
                   f"{tuple(expected.shape)}"
        if not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
            return f"for h {tuple(h.shape)} and weight {tuple(weight.shape)} the logits differ from the outer " \
                   "product's"
    return _still_found(_Pairs(answer), torch.randn(8, 32), ("saved-for-backward",))
