"""Judges for the exercises on torch.profiler: labelled ranges (09.1) and a scheduled window (09.2)."""
from __future__ import annotations

import torch
from torch import nn

from nbhelpers import stderr_capture
from nbhelpers.exercises.registry import call, exercise, inputs


# notebook 09 · ranges and schedules

def _events_within(events, outer):
    start, end = outer.time_range.start, outer.time_range.end
    return [e for e in events if e is not outer and start <= e.time_range.start and e.time_range.end <= end]


@exercise("09.1", "label the forward and the backward",
          hint="wrap the forward in `with torch.profiler.record_function('forward'):` and loss.backward() "
               "in one named 'backward'")
def _labelled_step(answer):
    from torch.profiler import ProfilerActivity, profile
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    with stderr_capture.without_kineto_lines(), profile(activities=[ProfilerActivity.CPU]) as prof:
        call(answer, model, torch.randn(8, 16))
    events = list(prof.events())
    ranges = {}
    for label, inside, what in (("forward", "aten::addmm", "matrix multiply"),
                                ("backward", "Backward", "backward node")):
        found = [e for e in events if e.name == label]
        if len(found) != 1:
            return f"the profile has {len(found)} ranges named {label!r}, expected 1"
        ranges[label] = _events_within(events, found[0])
        if not any(inside in e.name for e in ranges[label]):
            return f"the {label!r} range contains no {what}"
    if any("Backward" in e.name for e in ranges["forward"]):
        return "the 'forward' range also holds backward nodes: close it before loss.backward()"
    return _gradients_problem(answer, model)


def _gradients_problem(answer, model) -> str | None:
    """On the judge's inputs, the gradients the answer leaves are those of model(x).pow(2).mean()."""
    for x in inputs(lambda g, k: torch.randn(1 + k % 9, 16, generator=g)):
        expected = torch.autograd.grad(model(x).pow(2).mean(), list(model.parameters()))
        model.zero_grad(set_to_none=True)
        call(answer, model, x)
        if any(p.grad is None or not torch.allclose(p.grad, e, atol=1e-6) for p, e in zip(model.parameters(), expected)):
            return (f"for a batch of {len(x)} the gradients differ from those of model(x).pow(2).mean(): "
                    "compute that loss and call loss.backward() once")
    return None


@exercise("09.2", "profile a window of a long run",
          hint="torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1), "
               "...) and call prof.step() after every step; return the profiler")
def _profile_window(answer):
    for steps in inputs(lambda g, k: 4 + int(torch.randint(0, 9, (1,), generator=g))):
        calls = 0

        def train_step():
            nonlocal calls
            calls += 1
            with torch.profiler.record_function(f"train_step {calls}"):
                torch.ones(4, 4) @ torch.ones(4, 4)
        with stderr_capture.without_kineto_lines():
            prof = call(answer, train_step, steps)
        if calls != steps:
            return f"train_step ran {calls} times for steps={steps}, expected {steps}"
        if not isinstance(prof, torch.profiler.profile):
            return f"your function returned {type(prof).__name__}, expected the torch.profiler.profile"
        recorded = sorted(int(e.name.split()[-1]) for e in prof.events() if e.name.startswith("train_step "))
        if recorded != [3, 4]:
            return (f"with steps={steps} the profile recorded calls {recorded}, expected [3, 4]: skip one, "
                    "warm up one, record two, once, and call prof.step() after each call")
    return None
