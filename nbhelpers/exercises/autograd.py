"""Judges for the exercises on the autograd graph: its nodes (02.1), gradients without .grad (02.2),
what it saves for backward (02.3, 12.2), and what keeps it alive or lets it go (08.1, 08.2)."""
from __future__ import annotations

import contextlib
import gc

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import autograd_graph, memory
from nbhelpers.exercises.registry import INPUTS, call, draw, exercise, first_disagreement, inputs


# notebook 02 · the nodes backward runs

def _random_graph(g, k):
    """A random chain of ops over 1-3 leaves (some without grad), reusing results (diamonds)."""
    leaves = [torch.randn(3, generator=g, requires_grad=bool(j == 0 or draw(g, 0, 1))) for j in range(draw(g, 1, 3))]
    values, ops = list(leaves), []
    for step in range(draw(g, 1, 6)):       # the first op uses the leaf that needs a gradient
        a, b = values[-1 if step else 0], values[draw(g, 0, len(values) - 1)]
        op = draw(g, 0, 3)
        ops.append(("sin", "mul", "add", "exp")[op])
        values.append((a.sin(), a * b, a + b, (a * 0.1).exp())[op])
    return (f"a random graph of {' '.join(ops)} over {len(leaves)} leaves", sum(v.sum() for v in values[len(leaves):]))


@exercise("02.1", "count the nodes backward will run",
          hint="walk grad_fn.next_functions depth first, skip None, and keep a set of the nodes you "
               "have seen: a tensor used twice is reached twice but is one node")
def _count_nodes(answer):
    w = torch.randn(4, requires_grad=True)
    a = w * 2
    diamond = (a.sin() + a.cos()).sum()
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    mlp = F.cross_entropy(model(torch.randn(5, 3)), torch.tensor([0, 1, 0, 1, 1]))
    named = [("the diamond (a.sin() + a.cos()).sum()", diamond), ("a small MLP's loss", mlp), *inputs(_random_graph)]
    cases = [(name, (loss,), len(autograd_graph.trace(loss).nodes)) for name, loss in named]
    return first_disagreement(answer, cases, "count_nodes gave {said!r} for {label}; its graph has {truth} "
                                              "distinct nodes")


@exercise("02.2", "a gradient without touching .grad",
          hint="torch.autograd.grad(outputs, inputs) returns the gradients as a tuple and leaves "
               ".grad alone; .backward() adds into .grad")
def _grad_without_accumulating(answer):
    losses = [("(v ** 3).sum()", lambda v: (v ** 3).sum()), ("(v.sin() * v).sum()", lambda v: (v.sin() * v).sum()),
              ("(2.5 * v ** 2).sum()", lambda v: (2.5 * v ** 2).sum())]
    for k, w in enumerate(inputs(lambda g, k: torch.randn(tuple(draw(g, 1, 4) for _ in range(k % 3)), generator=g,
                                                          dtype=(torch.float32, torch.float64)[k % 2]))):
        name, loss_fn = losses[k % len(losses)]
        w.requires_grad_()
        w.grad = torch.full_like(w, 7.0) if k % 4 else None
        before, version = w.grad, (w.grad._version if w.grad is not None else None)
        got = call(answer, loss_fn, w)
        untouched = before is None or (before._version == version and torch.equal(before, torch.full_like(w, 7.0)))
        if w.grad is not before or not untouched:
            return "w.grad changed: your function accumulated into .grad (or replaced it)"
        if not isinstance(got, torch.Tensor) or got.shape != w.shape:
            return f"your function returned {type(got).__name__}, expected one tensor shaped like w"
        (expected,) = torch.autograd.grad(loss_fn(w), w)
        if not torch.allclose(got, expected):
            return f"the gradient of {name} for w of shape {tuple(w.shape)} differs from yours"
    return None


# notebook 02 · what each node saves

def _saver_model(g, k: int):
    """A random small network and its loss: linear and conv layers, activations that save their output."""
    if k % 3 == 2:
        model = nn.Sequential(nn.Conv2d(1, draw(g, 2, 6), 3), nn.ReLU(), nn.Flatten(), nn.LazyLinear(3))
        x = torch.randn(draw(g, 1, 4), 1, draw(g, 5, 9), draw(g, 5, 9), generator=g)
    else:
        widths = [draw(g, 2, 40) for _ in range(draw(g, 2, 5))]
        layers = []
        for a, b in zip(widths, widths[1:]):
            layers += [nn.Linear(a, b), (nn.ReLU(), nn.Tanh(), nn.Sigmoid())[draw(g, 0, 2)]]
        model, x = nn.Sequential(*layers), torch.randn(draw(g, 1, 64), widths[0], generator=g)
    return model(x).pow(2).mean()


@exercise("02.3", "find the node that keeps the most memory for backward",
          hint="walk the graph from loss.grad_fn as in 02.1; for each node add up numel() * element_size() of "
               "every tensor in its _saved_* attributes (a tuple attribute holds several); keep the largest")
def _largest_saver(answer):
    for k, loss in enumerate(inputs(_saver_model)):
        nodes = autograd_graph.trace(loss).nodes
        most = max(sum(s.nbytes for s in n.saved) for n in nodes)
        best = {n.name for n in nodes if sum(s.nbytes for s in n.saved) == most}
        said = call(answer, loss)
        if said not in best:
            return (f"for network {k} you named {said!r}; the node that keeps the most ({most:,} bytes) is "
                    f"{' or '.join(sorted(best))}")
    return None


# notebook 08 · what the graph keeps alive

@exercise("08.1", "record a loss without keeping its graph",
          hint="append loss.item() (a Python float) or loss.detach(); the loss tensor itself keeps the "
               "whole graph and its saved activations alive")
def _record_loss(answer):
    history = [0.5, 0.25]                             # a history that already has entries
    for k in range(INPUTS):
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
    for k in range(INPUTS):
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


# notebook 12 · a saved tensor changed in place

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
