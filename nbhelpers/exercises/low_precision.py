"""Judges for the exercises on low precision: the dtypes autocast picks (06.1) and loss scaling by
hand (06.2)."""
from __future__ import annotations

import copy
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import mixed_precision
from nbhelpers.exercises.registry import INPUTS, AnswerRaised, call, draw, exercise, wrong_keys


# notebook 06 · autocast and loss scaling

# evaluated on mixed_precision's inputs: x (8, 16), w (4, 16), target (8,) class indices
_AUTOCAST_EXPRESSIONS = ("x @ w.T", "torch.relu(x)", "torch.relu(x @ w.T)", "(x @ w.T) + x[:, :4]",
                         "F.softmax(x @ w.T, dim=1)", "F.layer_norm(x, (16,))", "F.cross_entropy(x @ w.T, target)")


@exercise("06.1", "predict the dtypes under CPU bfloat16 autocast",
          hint="run each expression inside torch.autocast('cpu', dtype=torch.bfloat16) with x, w float32: "
               "only ops on autocast's lists change dtype, and everything else follows its inputs")
def _autocast_dtypes(answer):
    if problem := wrong_keys(answer, _AUTOCAST_EXPRESSIONS):
        return problem
    ops = {e: lambda t, e=e: eval(e, {"torch": torch, "F": F, **t}) for e in _AUTOCAST_EXPRESSIONS}  # noqa: S307
    truth = {row.op: row.from_fp32 for row in mixed_precision.autocast_dtype_table("cpu", torch.bfloat16, ops)}
    wrong = [e for e in _AUTOCAST_EXPRESSIONS if answer[e] != truth[e]]
    return f"{len(wrong)} of {len(truth)} wrong, the first: {wrong[0]}" if wrong else None


@exercise("06.2", "loss scaling by hand",
          hint="backward on loss * scale, divide every .grad by scale, and if any gradient is inf or nan "
               "skip optimizer.step() (and zero the grads) and return False; else step and return True")
def _scaled_step(answer):
    made, real_init = [], torch.amp.GradScaler.__init__

    def spy(self, *args, **kwargs):
        made.append(1)
        real_init(self, *args, **kwargs)
    try:
        with mock.patch.object(torch.amp.GradScaler, "__init__", spy):
            problem = _scaled_step_problem(answer)
    except AnswerRaised:
        if not made:
            raise
    if made:
        return "your answer made a GradScaler: the task is to scale, unscale and check by hand"
    return problem


def _scaled_step_problem(answer):
    for k in range(INPUTS):
        g = torch.Generator().manual_seed(k)
        model = nn.Linear(draw(g, 2, 8), draw(g, 2, 8))
        x, y = torch.randn(draw(g, 2, 8), model.in_features, generator=g), None
        y = torch.randn(len(x), model.out_features, generator=g)
        make = [lambda ps: torch.optim.SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                lambda ps: torch.optim.SGD(ps, lr=0.1, weight_decay=0.01)][k % 3]
        if k % 5 == 4:                                  # 2**128 and up overflow float32: the step is skipped
            before = [p.detach().clone() for p in model.parameters()]
            stepped = call(answer, model, F.mse_loss, x, y, make(model.parameters()), 2.0 ** (128 + k % 7))
            if stepped is not False:
                return f"with an overflowing scale your function returned {stepped!r}, expected False (step skipped)"
            if not all(torch.equal(p, b) for p, b in zip(model.parameters(), before)):
                return "with an overflowing scale the parameters changed: the step must be skipped"
            if any(p.grad is not None and p.grad.any() for p in model.parameters()):
                return "with an overflowing scale the gradients were left in .grad: clear them"
            continue
        reference = copy.deepcopy(model)
        F.mse_loss(reference(x), y).backward()
        make(reference.parameters()).step()
        scale = 2.0 ** (k % 20)
        stepped = call(answer, model, F.mse_loss, x, y, make(model.parameters()), scale)
        if stepped is not True:
            return f"with scale {scale:g} your function returned {stepped!r}, expected True (a step was taken)"
        if not all(torch.allclose(p, q, atol=1e-5) for p, q in zip(model.parameters(), reference.parameters())):
            return f"with scale {scale:g} the step differs from an unscaled step: were the gradients unscaled?"
    return None
