"""Judges for the exercises on what the compiler stack traces: graph breaks (05.1, 05.3), recompiles
(05.2), torch.export's dynamic shapes (10.3), and a custom op's fake and backward (11.1, 11.2)."""
from __future__ import annotations

import contextlib
import io
import itertools

import torch
from torch import nn

from nbhelpers import compilation
from nbhelpers.exercises.registry import Unanswered, call, draw, exercise, first_line, inputs, is_stub


# notebook 05 · breaks and recompiles

def _double_if_positive(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 1


@exercise("05.1", "remove a data-dependent graph break",
          hint="keep the decision inside the graph: torch.where(condition, a, b) chooses between two "
               "tensors without turning a tensor into a Python bool")
def _no_graph_break(answer):
    edges = (torch.arange(1.0, 5.0), torch.arange(-4.0, 0.0), torch.zeros(3), torch.tensor([-1.0, 1.0]),
             torch.tensor([-2.0, 3.0]), torch.tensor([2.0, -3.0]))
    shapes = ((1,), (4,), (7,), (3, 4), (2, 2, 2))
    drawn = inputs(lambda g, k: torch.randn(shapes[k % 5], generator=g, dtype=(torch.float32, torch.float64)[k % 2])
                   + (0.5 if k % 3 else -0.5), 19)
    for x in (*edges, *drawn):
        if not torch.equal(call(answer, x), _double_if_positive(x)):
            shown = [round(v, 3) for v in x.flatten().tolist()][:6]
            return f"for x = {shown} your function returns something other than the original"
    for x in edges[:2]:
        found = call(compilation.find_breaks, answer, x)
        if found.breaks:
            where = found.breaks[0]
            return f"Dynamo breaks the graph at `{where.line}`: {where.reason}"
    return None


def _sin_of_double(x):
    return (x * 2).sin().sum()


@exercise("05.2", "one graph for every input size",
          hint="by default the first size is compiled as a constant and the second recompiles with a "
               "symbolic size; dynamic=True makes the first compile symbolic")
def _one_graph(answer):
    if not isinstance(answer, dict) or "backend" in answer:
        return "answer with a dict of torch.compile keyword arguments, without 'backend'"
    with compilation.watch_compiles() as log:
        compiled = call(torch.compile, _sin_of_double, backend="eager", **answer)
        drawn = inputs(lambda g, k: draw(g, 2, 4096), 22)        # sizes 0 and 1 are always specialised
        for n in (8, 16, 32, *drawn):
            x = torch.randn(n)
            if not torch.allclose(call(compiled, x), _sin_of_double(x), atol=1e-4):
                return f"the compiled function is wrong at size {n}"
    if log.graphs != 1:
        return (f"torch.compile(fn, **answer) compiled {log.graphs} graphs for sizes 8, 16, 32 and 22 more, expected 1; "
                f"the first recompile: {log.recompiles[0] if log.recompiles else 'none recorded'}")
    return None


# notebook 05 · one break, named by its code

def _scale_by_mean(x):
    print("scaling")
    return x * x.mean().item()


@exercise("05.3", "remove the graph break GB0124 names, and only that one",
          hint="GB0124 is 'Unsupported Tensor.item() call': keep the mean a tensor (x * x.mean()); the print "
               "(GB0059) is a log line you want, so leave it")
def _remove_gb0124(answer):
    from nbhelpers import compile_lens  # imports torch._dynamo: only when this exercise is graded

    for x in inputs(lambda g, k: torch.randn(1 + k % 9, generator=g, dtype=(torch.float32, torch.float64)[k % 2])):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            got = call(answer, x)
        if not isinstance(got, torch.Tensor) or not torch.allclose(got, x * x.mean()):
            return f"for x of shape {tuple(x.shape)} the result differs from the original's, x * x.mean()"
        if "scaling" not in printed.getvalue():
            return "your function no longer prints 'scaling': remove only the break GB0124 names"
    with contextlib.redirect_stdout(io.StringIO()):
        report = call(compile_lens.capture, answer, torch.randn(8), kernels=False)
    codes = {b.code for b in report.breaks}
    if "GB0124" in codes:
        line = next(b.line for b in report.breaks if b.code == "GB0124")
        return f"compile_lens still finds GB0124 (Tensor.item()) at `{line}`"
    return None


# notebook 10 · export

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


def _sandwich() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


# notebook 11 · custom ops

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
