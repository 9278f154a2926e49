"""Judges for the exercises of notebooks 05-08: torch.compile, mixed precision, DDP, memory."""
from __future__ import annotations

import contextlib
import copy
import gc
import io
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import compilation, memory, mixed_precision
from nbhelpers._judging import AnswerRaised, call, draw, exercise, first_disagreement, inputs, wrong_keys


# 05 · torch.compile

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
            return f"Dynamo breaks the graph at `{where.code}`: {where.reason}"
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


# 06 · mixed precision

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
    for k in range(25):
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


# 07 · DDP

@exercise("07.1", "which samples each rank reads",
          hint="DistributedSampler (shuffle=False) pads the indices by wrapping around to a multiple of "
               "world_size, then gives rank r every world_size-th index starting at r")
def _shard(answer):
    sampler = torch.utils.data.DistributedSampler
    cases = [(f"{n}, rank={rank}, world_size={world}", (n, rank, world),
              list(sampler(range(n), num_replicas=world, rank=rank, shuffle=False)))
             for n, world in ((10, 3), (8, 4), (3, 4), (1, 4), (2, 8), (0, 2),
                              *inputs(lambda g, k: (lambda w: (draw(g, 0, 3 * w), w))(draw(g, 1, 8)), 6))
             for rank in range(world)]
    return first_disagreement(lambda *args: list(call(answer, *args)), cases,
                               "shard({label}) gave {said}, expected {truth}")


@exercise("07.2", "gradient accumulation that equals the big batch",
          hint="the loss is a mean over the batch: divide each micro-batch's loss by the number of "
               "micro-batches before backward, so the summed gradients equal the full batch's")
def _accumulate(answer):
    for k in range(25):
        g = torch.Generator().manual_seed(k)
        micro_batches = (1, 2, 3, 4, 6, 8)[k % 6]
        model = nn.Linear(draw(g, 2, 16), draw(g, 2, 10))
        x = torch.randn(micro_batches * draw(g, 1, 5), model.in_features, generator=g)
        if k % 2:
            loss_fn, y = F.mse_loss, torch.randn(len(x), model.out_features, generator=g)
        else:
            loss_fn, y = F.cross_entropy, torch.randint(0, model.out_features, (len(x),), generator=g)
        loss_fn(model(x), y).backward()
        truth = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        backwards = []
        model.weight.register_hook(lambda grad, seen=backwards: seen.append(1))
        call(answer, model, loss_fn, x, y, micro_batches)
        if not all(p.grad is not None and torch.allclose(p.grad, t, atol=1e-5)
                   for p, t in zip(model.parameters(), truth)):
            return (f"with {micro_batches} micro-batches the gradients differ from one batch of {len(x)} "
                    f"({loss_fn.__name__})")
        if len(backwards) != micro_batches:
            return (f"with {micro_batches} micro-batches backward reached the weight {len(backwards)} times: "
                    "call backward once per micro-batch")
    return None


# 08 · memory

@exercise("08.1", "record a loss without keeping its graph",
          hint="append loss.item() (a Python float) or loss.detach(); the loss tensor itself keeps the "
               "whole graph and its saved activations alive")
def _record_loss(answer):
    history = [0.5, 0.25]                             # a history that already has entries
    for k in range(25):
        g = torch.Generator().manual_seed(k)
        width = draw(g, 4, 32)
        model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 1))
        watch = memory.track() if k < 3 else contextlib.nullcontext()   # gc.collect is slow: three suffice
        with watch as kept:
            loss = model(torch.randn(draw(g, 1, 64), width, generator=g)).pow(2).mean()
            value = loss.item()
            call(answer, history, loss)
            del loss
            if kept is not None:
                gc.collect()
        if len(history) != 3 + k:
            return f"history has {len(history)} entries after {k + 1} calls on a history of 2, expected {3 + k}"
        entry = history[-1]
        if isinstance(entry, torch.Tensor) and (entry.requires_grad or entry.grad_fn is not None):
            return "the entry still has a grad_fn: it keeps the graph and every saved activation alive"
        try:
            number = float(entry)
        except (TypeError, ValueError):
            return f"the entry is a {type(entry).__name__}, which is not a number"
        if number != value:
            return f"the last entry is {number}, the loss was {value}: append the value, at the end"
        if kept is not None and kept.live_bytes > 64:
            return (f"after the loss was deleted {kept.live_bytes:,} bytes of its graph were still alive: "
                    "your entry holds on to the graph")
    return None


def _kept_bytes(forward, x) -> tuple[int, torch.Tensor]:
    """Bytes the forward leaves alive besides its output: what the graph keeps for backward, counted by
    memory.track from the storages themselves, so a saved-tensor hook cannot hide them."""
    with memory.track() as kept:
        out = forward(x)
    mine = out.untyped_storage().nbytes() if isinstance(out, torch.Tensor) else 0
    return kept.live_bytes - mine, out


@exercise("08.2", "activation checkpointing",
          hint="wrap each block in torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False): "
               "only the block's input is kept, and its inside is recomputed during backward")
def _checkpointed(answer):
    for k in range(25):
        g = torch.Generator().manual_seed(k)
        width, dtype = (8, 16, 32, 64, 128)[k % 5], (torch.float64 if k % 4 == 3 else torch.float32)
        blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.Tanh())
                               for _ in range(1 + k % 6)).to(dtype)
        x = torch.randn(draw(g, 1, 64), width, generator=g, dtype=dtype, requires_grad=True)
        plain_bytes, want = _kept_bytes(nn.Sequential(*blocks), x)
        want.sum().backward()
        grads, x_grad = [p.grad.clone() for p in blocks.parameters()], x.grad.clone()
        blocks.zero_grad()
        x.grad = None
        got_bytes, got = _kept_bytes(lambda h, blocks=blocks: call(answer, blocks, h), x)
        if not isinstance(got, torch.Tensor) or not torch.allclose(got, want, atol=1e-6):
            return "the output differs from running the blocks one after another"
        call(got.sum().backward)
        pairs = zip(blocks.parameters(), grads)
        if not all(p.grad is not None and torch.allclose(p.grad, want_grad, atol=1e-6) for p, want_grad in pairs):
            return "the gradients differ from the plain forward's"
        if x.grad is None or not torch.allclose(x.grad, x_grad, atol=1e-6):
            return "the gradient reaching x differs from the plain forward's: do not detach the input"
        if got_bytes > plain_bytes // 2:
            return (f"the forward kept {got_bytes} bytes for backward against {plain_bytes} without "
                    "checkpointing; expected at most half")
    return None


# 05 · compile_lens: one break, named by its code

def _scale_by_mean(x):
    print("scaling")
    return x * x.mean().item()


@exercise("05.3", "remove the graph break GB0124 names, and only that one",
          hint="GB0124 is 'Unsupported Tensor.item() call': keep the mean a tensor (x * x.mean()); the print "
               "(GB0059) is a log line you want, so leave it")
def _remove_gb0124(answer):
    from nbhelpers import compile_lens      # imports torch._dynamo: only when this exercise is graded

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
