"""Judges for the exercises of notebooks 05-08: torch.compile, mixed precision, DDP, memory."""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import compilation, memory, precision
from nbhelpers._judging import call, exercise, first_disagreement, wrong_keys


# 05 · torch.compile

def _double_if_positive(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 1


@exercise("05.1", "remove a data-dependent graph break",
          hint="keep the decision inside the graph: torch.where(condition, a, b) chooses between two "
               "tensors without turning a tensor into a Python bool")
def _no_graph_break(answer):
    for x in (torch.arange(1.0, 5.0), torch.arange(-4.0, 0.0)):
        if not torch.allclose(call(answer, x), _double_if_positive(x)):
            return f"for x = {x.tolist()} your function returns something other than the original"
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
        for n in (8, 16, 32):
            x = torch.randn(n)
            if not torch.allclose(call(compiled, x), _sin_of_double(x)):
                return f"the compiled function is wrong at size {n}"
    if log.graphs != 1:
        return (f"torch.compile(fn, **answer) compiled {log.graphs} graphs for sizes 8, 16, 32, expected 1; "
                f"the first recompile: {log.recompiles[0] if log.recompiles else 'none recorded'}")
    return None


# 06 · mixed precision

# evaluated on precision's inputs: x (8, 16), w (4, 16), target (8,) class indices
_AUTOCAST_EXPRESSIONS = ("x @ w.T", "torch.relu(x)", "torch.relu(x @ w.T)", "(x @ w.T) + x[:, :4]",
                         "F.softmax(x @ w.T, dim=1)", "F.layer_norm(x, (16,))", "F.cross_entropy(x @ w.T, target)")


@exercise("06.1", "predict the dtypes under CPU bfloat16 autocast",
          hint="run each expression inside torch.autocast('cpu', dtype=torch.bfloat16) with x, w float32: "
               "only ops on autocast's lists change dtype, and everything else follows its inputs")
def _autocast_dtypes(answer):
    if problem := wrong_keys(answer, _AUTOCAST_EXPRESSIONS):
        return problem
    ops = {e: lambda t, e=e: eval(e, {"torch": torch, "F": F, **t}) for e in _AUTOCAST_EXPRESSIONS}  # noqa: S307
    truth = {row.op: row.from_fp32 for row in precision.autocast_dtype_table("cpu", torch.bfloat16, ops)}
    wrong = [e for e in _AUTOCAST_EXPRESSIONS if answer[e] != truth[e]]
    return f"{len(wrong)} of {len(truth)} wrong, the first: {wrong[0]}" if wrong else None


@exercise("06.2", "loss scaling by hand",
          hint="backward on loss * scale, divide every .grad by scale, and if any gradient is inf or nan "
               "skip optimizer.step() (and zero the grads) and return False; else step and return True")
def _scaled_step(answer):
    model = nn.Linear(4, 2)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    reference = copy.deepcopy(model)
    F.mse_loss(reference(x), y).backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    stepped = call(answer, model, F.mse_loss, x, y, torch.optim.SGD(model.parameters(), lr=0.1), 1024.0)
    if stepped is not True:
        return f"with scale 1024 your function returned {stepped!r}, expected True (a step was taken)"
    if not all(torch.allclose(p, q, atol=1e-6) for p, q in zip(model.parameters(), reference.parameters())):
        return "with scale 1024 the step differs from an unscaled step: were the gradients unscaled?"
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    # 2**130 overflows float32 (max about 2**128), so the scaled loss and its gradients are inf
    stepped = call(answer, model, F.mse_loss, x, y, torch.optim.SGD(model.parameters(), lr=0.1), 2.0 ** 130)
    if stepped is not False:
        return f"with an overflowing scale your function returned {stepped!r}, expected False (step skipped)"
    if not all(torch.equal(p, b) for p, b in zip(model.parameters(), before)):
        return "with an overflowing scale the parameters changed: the step must be skipped"
    return None


# 07 · DDP

@exercise("07.1", "which samples each rank reads",
          hint="DistributedSampler (shuffle=False) pads the indices by wrapping around to a multiple of "
               "world_size, then gives rank r every world_size-th index starting at r")
def _shard(answer):
    sampler = torch.utils.data.DistributedSampler
    cases = [(f"{n}, rank={rank}, world_size={world}", (n, rank, world),
              list(sampler(range(n), num_replicas=world, rank=rank, shuffle=False)))
             for n, world in ((10, 3), (8, 4), (3, 4)) for rank in range(world)]
    return first_disagreement(lambda *args: list(call(answer, *args)), cases,
                               "shard({label}) gave {said}, expected {truth}")


@exercise("07.2", "gradient accumulation that equals the big batch",
          hint="the loss is a mean over the batch: divide each micro-batch's loss by the number of "
               "micro-batches before backward, so the summed gradients equal the full batch's")
def _accumulate(answer):
    model = nn.Linear(6, 3)
    x, y = torch.randn(12, 6), torch.randint(0, 3, (12,))
    F.cross_entropy(model(x), y).backward()
    truth = [p.grad.clone() for p in model.parameters()]
    for micro_batches in (3, 4):
        model.zero_grad()
        call(answer, model, F.cross_entropy, x, y, micro_batches)
        if not all(p.grad is not None and torch.allclose(p.grad, t, atol=1e-6)
                   for p, t in zip(model.parameters(), truth)):
            return f"with {micro_batches} micro-batches the gradients differ from one batch of 12"
    return None


# 08 · memory

@exercise("08.1", "record a loss without keeping its graph",
          hint="append loss.item() (a Python float) or loss.detach(); the loss tensor itself keeps the "
               "whole graph and its saved activations alive")
def _record_loss(answer):
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    loss = model(torch.randn(64, 32)).pow(2).mean()
    history = []
    call(answer, history, loss)
    if len(history) != 1:
        return f"history has {len(history)} entries after one call, expected 1"
    entry = history[0]
    if isinstance(entry, torch.Tensor) and (entry.requires_grad or entry.grad_fn is not None):
        return "the entry still has a grad_fn: it keeps the graph and every saved activation alive"
    if float(entry) != loss.item():
        return f"the entry is {float(entry)}, the loss is {loss.item()}"
    return None


def _saved_bytes(model, x) -> tuple[int, torch.Tensor]:
    per_module, out = memory.saved_bytes_by_module(model, x)
    return sum(saved.nbytes for saved in per_module.values()), out


@exercise("08.2", "activation checkpointing",
          hint="wrap each block in torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False): "
               "only the block's input is kept, and its inside is recomputed during backward")
def _checkpointed(answer):
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh())
                           for _ in range(4))
    x = torch.randn(32, 64, requires_grad=True)
    plain_bytes, want = _saved_bytes(nn.Sequential(*blocks), x)
    want.sum().backward()
    grads = [p.grad.clone() for p in blocks.parameters()]
    blocks.zero_grad()
    got_bytes, got = _saved_bytes(lambda h: call(answer, blocks, h), x)
    if not torch.allclose(got, want, atol=1e-6):
        return "the output differs from running the blocks one after another"
    call(got.sum().backward)
    if not all(torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(blocks.parameters(), grads)):
        return "the gradients differ from the plain forward's"
    if got_bytes > plain_bytes // 2:
        return f"autograd saved {got_bytes} bytes against {plain_bytes} without checkpointing; expected at most half"
    return None
