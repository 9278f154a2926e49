"""Judges for the exercises of notebooks 09-12: profiling, saving and export, custom ops, the error casebook."""
from __future__ import annotations

import copy
import itertools
import tempfile
from pathlib import Path
from unittest import mock

import torch
from torch import nn

import pickle

from nbhelpers import stderr_capture
from nbhelpers._judging import Unanswered, call, exercise, first_line, inputs, is_stub, wrong_keys


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


# 10 · save and export

class _Tripwire:
    """Fails to pickle, after looking at the folder and at the old checkpoint while the save is under way."""

    def __init__(self, path: Path, seen: list):
        self.path, self.seen = path, seen

    def __reduce__(self):
        beside = sorted(p.name for p in self.path.parent.iterdir() if p != self.path)
        try:
            old = torch.load(self.path, weights_only=True)["w"].clone()
        except Exception as e:  # noqa: BLE001 - unreadable mid-save is the finding
            old = e
        self.seen.append((beside, old))
        raise pickle.PicklingError("the judge's tripwire: this object cannot be pickled")


def _holds(path: Path, w: torch.Tensor, when: str, otherwise: str) -> str | None:
    """What is wrong with the checkpoint at `path`, which should hold the weights `w`."""
    try:
        loaded = torch.load(path, weights_only=True)["w"]
    except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
        return f"{when} the checkpoint is unreadable ({first_line(e, 80)})"
    return None if torch.equal(loaded, w) else f"{when}, the checkpoint {otherwise}"


@exercise("10.1", "a save that never leaves a half-written file",
          hint="torch.save to a temporary file in the same directory, then os.replace(temp, path); on an "
               "error delete the temporary file and re-raise")
def _save_atomic(answer):
    with tempfile.TemporaryDirectory() as tmp, mock.patch("nbhelpers._atomic.write_atomic") as ours, \
            mock.patch("nbhelpers.saving.write_atomic") as ours_too:
        path = Path(tmp) / "checkpoint.pt"
        for w in inputs(lambda g, k: torch.randn(1 + k % 7, generator=g)):
            call(answer, {"w": w}, path)
            if ours.called or ours_too.called:
                return "your answer used nbhelpers' own atomic write: the task is to write your own"
            if problem := _holds(path, w, "a completed save left", "did not replace the old checkpoint with the new one"):
                return problem
            seen = []
            try:
                answer({"w": torch.ones(3), "tripwire": _Tripwire(path, seen)}, path)
            except Exception:  # noqa: BLE001 - pickle's error, or the caller's own: it must reach the caller
                pass
            else:
                return "saving an object that cannot be pickled did not raise: the error must reach the caller"
            if seen and isinstance(seen[0][1], Exception):
                return f"while the save was under way the old checkpoint was unreadable ({first_line(seen[0][1], 80)})"
            if seen and not seen[0][0]:
                return ("while the save was under way no temporary file was beside the checkpoint: write it in "
                        "the same directory, so that os.replace is a rename on one file system")
            if problem := _holds(path, w, "after the failed save", "no longer holds the old weights"):
                return problem
            leftovers = sorted(p.name for p in Path(tmp).iterdir() if p != path)
            if leftovers:
                return f"files were left behind: {leftovers}"
    return None


def _sandwich() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


_NAMES = ("mlp", "down", "out", "gate", "orig", "model", "head", "_mod", "d")   # some start with _orig_mod.'s letters


def _architecture(g, k: int) -> nn.Module:
    """A small model whose submodule names are drawn from _NAMES, sometimes with a BatchNorm's buffers."""
    model, width = nn.Module(), 4
    picks = torch.randperm(len(_NAMES), generator=g)[:2 + k % 3].tolist()
    for j, pick in enumerate(picks):
        layer = nn.BatchNorm1d(width) if (k + j) % 4 == 3 else nn.Linear(width, width)
        model.add_module(_NAMES[pick], layer)
    return model


@exercise("10.2", "load a compiled model's checkpoint into a plain model",
          hint="torch.compile wraps the model, so its state_dict keys start with '_orig_mod.'; "
               "strip that prefix (str.removeprefix, not lstrip), and leave other keys and buffers alone")
def _clean_state_dict(answer):
    for model in inputs(_architecture):
        compiled = torch.compile(model)          # compiling is lazy: no code is generated here
        for name, state in (("a compiled model's state_dict", compiled.state_dict()),
                            ("a plain model's state_dict", model.state_dict())):
            fresh = copy.deepcopy(model)
            cleaned = call(answer, state)
            keys = call(fresh.load_state_dict, cleaned, strict=False)
            if keys.missing_keys or keys.unexpected_keys:
                return (f"for {name} with keys {list(model.state_dict())[:3]}, load_state_dict found unexpected "
                        f"keys {keys.unexpected_keys[:2]} and missing keys {keys.missing_keys[:2]}")
            if not all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), state.values())):
                return f"the loaded values differ from {name}"
    return None


@exercise("10.3", "export with a dynamic batch size",
          hint="dynamic_shapes maps each argument's name to {dimension: torch.export.Dim(name)}, here "
               "dimension 0 of the argument x")
def _dynamic_export(answer):
    model = _ForwardX(_sandwich())
    program = call(torch.export.export, model, (torch.randn(8, 4),), dynamic_shapes=answer)
    drawn = inputs(lambda g, k: 2 + int(torch.randint(0, 63, (1,), generator=g)))
    for batch in (3, 17, *drawn):
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
               "shape the kernel returns, one row fewer than x, and x's dtype")
def _fake_row_diff(answer):
    op = _new_op("row_diff", _row_diff)
    op.register_fake(answer)
    for example in (torch.randn(5, 3), torch.randn(7, 2, dtype=torch.float64)):     # opcheck is slow: two
        report = torch.library.opcheck(op, (example,), raise_exception=False)
        if any(is_stub(result) for result in report.values()):
            raise Unanswered
        failed = [(test, result) for test, result in report.items() if result != "SUCCESS"]
        if failed:
            test, error = failed[0]
            # a metadata mismatch names the tensors at length first; the shapes or dtypes come after "metadata: "
            detail = (str(error).strip().splitlines() or [""])[0].split("tensor metadata: ")[-1][:160]
            return f"opcheck's {test} failed: {detail}"
    from torch._subclasses.fake_tensor import FakeTensorMode

    dtypes = (torch.float32, torch.float64, torch.bfloat16)
    for x in inputs(lambda g, k: torch.randn(*(2 + torch.randint(0, 7, (2,), generator=g)).tolist(),
                                             generator=g).to(dtypes[k % 3])):
        with FakeTensorMode() as mode:
            out = call(answer, mode.from_tensor(x))
        want = _row_diff(x)
        if (tuple(out.shape), out.dtype) != (tuple(want.shape), want.dtype):
            return (f"for x of shape {tuple(x.shape)} and {x.dtype} your fake gave {tuple(out.shape)} "
                    f"{out.dtype}, the kernel gives {tuple(want.shape)} {want.dtype}")
    return None


@exercise("11.2", "a backward for a custom op",
          hint="d(x**3)/dx = 3 * x**2; take x from ctx.saved_tensors and multiply the incoming grad by "
               "that derivative")
def _backward_cube(answer):
    op = _new_op("cube", _cube)
    op.register_autograd(answer, setup_context=_save_input)
    for x in inputs(lambda g, k: torch.randn(1 + k % 6, dtype=torch.float64, generator=g)):
        ok = call(torch.autograd.gradcheck, op, (x.requires_grad_(),), raise_exception=False)   # runs your backward
        if not ok:
            return f"gradcheck: for x of shape {tuple(x.shape)} your gradient differs from finite differences of x ** 3"
    return None


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
    said = answer[wrong[0]]
    if isinstance(said, str):
        return f"{wrong[0]!r}: you gave the string {said!r}: give the exception class itself, such as RuntimeError"
    return f"{wrong[0]!r}: you said {getattr(said, '__name__', repr(said))}, it raises {truth[wrong[0]].__name__}"


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
    for x in inputs(lambda g, k: torch.randn(1 + k % 16, generator=g)):
        x.requires_grad_()
        s = torch.sigmoid(x.detach())
        out = call(answer, x)
        if not isinstance(out, torch.Tensor) or not torch.allclose(out, (2 * s).sum()):
            return f"for x of {len(x)} values the result differs from (2 * torch.sigmoid(x)).sum()"
        call(out.backward)
        if not torch.allclose(x.grad, 2 * s * (1 - s)):
            return "the gradient differs from 2 * sigmoid(x) * (1 - sigmoid(x))"
    return None
