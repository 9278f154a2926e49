"""Judges for the exercises of notebooks 09-12: profiling, saving and export, custom ops, the error casebook."""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import torch
from torch import nn

from nbhelpers import stderr_capture
from nbhelpers._judging import Unanswered, call, exercise, first_line, is_stub, wrong_keys


# 09 · profiling

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
    for label, inside, what in (("forward", "aten::addmm", "a matrix multiply"),
                                ("backward", "Backward", "a backward node")):
        ranges = [e for e in events if e.name == label]
        if len(ranges) != 1:
            return f"the profile has {len(ranges)} ranges named {label!r}, expected 1"
        if not any(inside in e.name for e in _events_within(events, ranges[0])):
            return f"the {label!r} range contains no {what}"
    return None


@exercise("09.2", "profile a window of a long run",
          hint="torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2), ...) "
               "and call prof.step() after every step; return the profiler")
def _profile_window(answer):
    calls = 0

    def train_step():
        nonlocal calls
        calls += 1
        with torch.profiler.record_function("train_step"):
            torch.randn(16, 16) @ torch.randn(16, 16)
    with stderr_capture.without_kineto_lines():
        prof = call(answer, train_step, 6)
    if calls != 6:
        return f"train_step ran {calls} times, expected 6"
    if not isinstance(prof, torch.profiler.profile):
        return f"your function returned {type(prof).__name__}, expected the torch.profiler.profile"
    recorded = sum(e.name == "train_step" for e in prof.events())
    if recorded != 2:
        return f"the profile recorded {recorded} train_step ranges, expected 2 (steps 3 and 4)"
    return None


# 10 · save and export

@exercise("10.1", "a save that never leaves a half-written file",
          hint="torch.save to a temporary file in the same directory, then os.replace(temp, path); on an "
               "error delete the temporary file and re-raise")
def _save_atomic(answer):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint.pt"
        good = {"w": torch.arange(3.0)}
        call(answer, good, path)
        try:
            answer({"w": torch.ones(3), "not picklable": lambda: 0}, path)
        except Exception:  # noqa: BLE001 - pickle's error, or the caller's own: it must reach the caller
            pass
        else:
            return "saving a lambda did not raise: the error must reach the caller"
        try:
            loaded = torch.load(path, weights_only=True)
        except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
            return f"after the failed save the old checkpoint is unreadable ({first_line(e, 80)})"
        if not torch.equal(loaded["w"], good["w"]):
            return "after the failed save the checkpoint no longer holds the old weights"
        leftovers = sorted(p.name for p in Path(tmp).iterdir() if p != path)
        return f"files were left behind: {leftovers}" if leftovers else None


def _sandwich() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@exercise("10.2", "load a compiled model's checkpoint into a plain model",
          hint="torch.compile wraps the model, so its state_dict keys start with '_orig_mod.'; "
               "strip that prefix, and leave other keys alone")
def _clean_state_dict(answer):
    compiled = torch.compile(_sandwich())    # compiling is lazy: no code is generated here
    for name, state in (("a compiled model's state_dict", compiled.state_dict()),
                        ("a plain model's state_dict", _sandwich().state_dict())):
        fresh = _sandwich()
        keys = call(fresh.load_state_dict, call(answer, state), strict=False)
        if keys.missing_keys or keys.unexpected_keys:
            return (f"for {name}, load_state_dict found unexpected keys {keys.unexpected_keys[:2]} "
                    f"and missing keys {keys.missing_keys[:2]}")
        if not all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), state.values())):
            return f"the loaded values differ from {name}"
    return None


@exercise("10.3", "export with a dynamic batch size",
          hint="dynamic_shapes maps each argument's name to {dimension: torch.export.Dim(name)}, here "
               "dimension 0 of the argument x")
def _dynamic_export(answer):
    model = _ForwardX(_sandwich())
    program = call(torch.export.export, model, (torch.randn(8, 4),), dynamic_shapes=answer)
    for batch in (3, 17):
        x = torch.randn(batch, 4)
        try:
            out = program.module()(x)
        except Exception as e:  # noqa: BLE001 - a shape guard's error type varies across versions
            return f"the exported program refused batch {batch} ({first_line(e, 90)})"
        if not torch.allclose(out, model(x), atol=1e-6):
            return f"the exported program's output for batch {batch} differs from the model's"
    return None


class _ForwardX(nn.Module):
    """Gives the model's input the name `x`, which dynamic_shapes refers to."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)


# 11 · custom ops

_op_serial = itertools.count()


def _new_op(name: str, kernel):
    """A fresh custom op per judgement, so registering the learner's code never collides."""
    return torch.library.custom_op(f"nbhelpers_exercises::{name}_{next(_op_serial)}", mutates_args=())(kernel)


def _row_diff(x: torch.Tensor) -> torch.Tensor:
    return x[1:] - x[:-1]


def _cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


@exercise("11.1", "a fake (shape) function for a custom op",
          hint="the fake gets tensors without data: return an empty tensor (x.new_empty(...)) with the "
               "shape the kernel returns, one row fewer than x")
def _fake_row_diff(answer):
    op = _new_op("row_diff", _row_diff)
    op.register_fake(answer)
    report = torch.library.opcheck(op, (torch.randn(5, 3),), raise_exception=False)
    if any(is_stub(result) for result in report.values()):
        raise Unanswered
    failed = [(test, result) for test, result in report.items() if result != "SUCCESS"]
    if not failed:
        return None
    test, error = failed[0]
    # a metadata mismatch names the tensors at length first; the shapes or dtypes come after "metadata: "
    detail = (str(error).strip().splitlines() or [""])[0].split("tensor metadata: ")[-1][:160]
    return f"opcheck's {test} failed: {detail}"


@exercise("11.2", "a backward for a custom op",
          hint="d(x**3)/dx = 3 * x**2; take x from ctx.saved_tensors and multiply the incoming grad by "
               "that derivative")
def _backward_cube(answer):
    op = _new_op("cube", _cube)
    op.register_autograd(answer, setup_context=_save_input)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    ok = call(torch.autograd.gradcheck, op, (x,), raise_exception=False)    # runs the learner's backward
    return None if ok else "gradcheck: your gradient differs from finite differences of x ** 3"


# 12 · error casebook

def _backward_twice():
    y = (torch.ones(2, requires_grad=True) * 2).sum()
    y.backward()
    y.backward()


def _load_unsafe():
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"w": torch.ones(1), "config": nn.Linear}, Path(tmp) / "f.pt")
        torch.load(Path(tmp) / "f.pt", weights_only=True)


_SNIPPETS = {
    "backward twice": _backward_twice,
    "view of a transpose": lambda: torch.ones(2, 3).t().view(6),
    "index 5 of a 3-element tensor": lambda: torch.ones(3)[5],
    "float64 input to a float32 layer": lambda: nn.Linear(3, 2)(torch.ones(1, 3, dtype=torch.float64)),
    "prefetch_factor without workers": lambda: torch.utils.data.DataLoader(range(4), prefetch_factor=2),
    "weights_only load of a class": _load_unsafe,
}


@exercise("12.1", "name the exception",
          hint="run each snippet inside try/except Exception as e and look at type(e): the casebook's "
               "errors are not all RuntimeError")
def _name_exceptions(answer):
    truth = {name: _raised_type(snippet) for name, snippet in _SNIPPETS.items()}
    if problem := wrong_keys(answer, truth):
        return problem
    wrong = [name for name in truth if answer[name] is not truth[name]]
    if not wrong:
        return None
    said = getattr(answer[wrong[0]], "__name__", repr(answer[wrong[0]]))
    return f"{wrong[0]!r}: you said {said}, it raises {truth[wrong[0]].__name__}"


def _raised_type(snippet) -> type:
    try:
        snippet()
    except Exception as e:  # noqa: BLE001 - the raised type is the answer
        return type(e)
    raise AssertionError(f"{snippet} no longer raises on this torch: the exercise needs a new snippet")


@exercise("12.2", "fix an in-place modification of a saved tensor",
          hint="sigmoid saves its output for backward, so changing that output in place breaks backward: "
               "make the doubled value a new tensor")
def _fixed_in_place(answer):
    x = torch.randn(5, requires_grad=True)
    s = torch.sigmoid(x.detach())
    out = call(answer, x)
    if not isinstance(out, torch.Tensor) or not torch.allclose(out, (2 * s).sum()):
        return "the result differs from (2 * torch.sigmoid(x)).sum()"
    call(out.backward)
    if not torch.allclose(x.grad, 2 * s * (1 - s)):
        return "the gradient differs from 2 * sigmoid(x) * (1 - sigmoid(x))"
    return None
