"""Checked exercises: each notebook ends with two or three, and `check` prints one PASS or FAIL line.

A judge runs the learner's answer on the installed torch, which is the oracle: expected values are
computed by torch on the judge's own inputs, never typed in. Judging runs under a forked RNG and with
grad enabled, so it neither changes the learner's random state nor depends on it, and on the CPU, so a
verdict is the same on every machine. Reference solutions and wrong answers are in
tests/exercise_solutions.py; the tests prove each exercise can be passed and can be failed.

Example:
    exercises.check("01.1", shares_storage)   # prints 'PASS 01.1 · ...' or 'FAIL 01.1 · ...: why. Hint: ...'
    exercises.grade("01.1", shares_storage).passed
"""
from __future__ import annotations

import copy
import itertools
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import autograd_graph, stderr_capture

__all__ = ["Verdict", "grade", "check"]

_NOT_ANSWERED = "not answered yet: replace the `...` or the `raise NotImplementedError` with your answer"
_STUB_MESSAGES = ("", "your code here")     # what the notebooks' stubs raise NotImplementedError with


@dataclass(frozen=True)
class _Exercise:
    id: str
    title: str
    hint: str
    judge: Callable[[Any], str | None]   # returns what is wrong with the answer, or None


@dataclass(frozen=True)
class Verdict:
    exercise: str
    title: str
    passed: bool
    problem: str      # what is wrong; '' when passed
    hint: str         # '' when passed or not answered yet

    def __str__(self) -> str:
        if self.passed:
            return f"PASS {self.exercise} · {self.title}"
        hint = f" Hint: {self.hint}" if self.hint else ""
        return f"FAIL {self.exercise} · {self.title}: {self.problem}.{hint}"


_EXERCISES: dict[str, _Exercise] = {}


def _exercise(id: str, title: str, hint: str):
    def register(judge):
        _EXERCISES[id] = _Exercise(id, title, hint, judge)
        return judge
    return register


class _AnswerRaised(Exception):
    """The learner's code raised; carries the original exception."""


class _Unanswered(Exception):
    """The answer is still the notebook's stub."""


def _is_stub(error: BaseException) -> bool:
    """The stub's own NotImplementedError, not one raised by torch for an unsupported call."""
    return isinstance(error, NotImplementedError) and str(error) in _STUB_MESSAGES


def _call(fn, *args, **kwargs):
    """Call the learner's code, telling its exceptions apart from a fault in the judge."""
    if not callable(fn):
        raise _AnswerRaised(TypeError(f"expected a function, got {type(fn).__name__}"))
    try:
        return fn(*args, **kwargs)
    except (_Unanswered, _AnswerRaised):
        raise
    except Exception as e:  # noqa: BLE001 - any error in the learner's code becomes a FAIL line
        raise (_Unanswered() if _is_stub(e) else _AnswerRaised(e)) from e


def _first_disagreement(answer, cases, message: str) -> str | None:
    """`cases` are (label, args, truth); describe, with `message`, the first where answer(*args) != truth."""
    for label, args, truth in cases:
        said = _call(answer, *args)
        if said != truth:
            return message.format(label=label, said=said, truth=truth)
    return None


def _wrong_keys(answer, keys) -> str | None:
    if isinstance(answer, dict) and set(answer) == set(keys):
        return None
    return f"answer with a dict whose keys are exactly {list(keys)}"


def _first_line(e: BaseException, limit: int = 160) -> str:
    text = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {text[:limit]}" if text else type(e).__name__


def grade(exercise: str, answer) -> Verdict:
    """Judge `answer` for `exercise` (an id such as "03.1") and return the verdict as data."""
    if exercise not in _EXERCISES:
        raise ValueError(f"no exercise {exercise!r}; the exercises are {', '.join(sorted(_EXERCISES))}")
    ex = _EXERCISES[exercise]
    try:
        if answer is Ellipsis or (isinstance(answer, dict) and any(v is Ellipsis for v in answer.values())):
            raise _Unanswered
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            torch.manual_seed(0)
            problem = ex.judge(answer)
    except _Unanswered:
        problem = _NOT_ANSWERED
    except _AnswerRaised as e:
        problem = f"your code raised {_first_line(e.args[0])}"
    # the hint comes after an attempt: printed under a blank exercise it would give the answer away
    hint = ex.hint if problem and problem != _NOT_ANSWERED else ""
    return Verdict(ex.id, ex.title, problem is None, problem or "", hint)


def check(exercise: str, answer) -> None:
    """Judge `answer` and print the one-line verdict (PASS, or FAIL with what is wrong and a hint)."""
    print(grade(exercise, answer))


# ---------------------------------------------------------------------------------------------
# 00 · environment

@_exercise("00.1", "move a nested batch to a device",
           hint="recurse into dicts, lists and tuples (keeping their types), call .to(device) on each "
                "tensor, and return anything else unchanged")
def _nested_to_device(answer):
    batch = {"image": torch.ones(2, 3), "meta": {"ids": torch.arange(2), "name": "digits"},
             "pair": (torch.zeros(1), 7), "items": [torch.ones(1), None]}
    # the meta device exists on every machine, so a move is visible even without a GPU
    return _moved_problem(batch, _call(answer, batch, torch.device("meta")), "batch")


def _moved_problem(original, moved, where: str) -> str | None:
    if type(moved) is not type(original):
        return f"{where} became a {type(moved).__name__}, expected a {type(original).__name__}"
    if isinstance(original, torch.Tensor):
        if moved.device.type != "meta":
            return f"{where} is on {moved.device}, expected the meta device"
        return None if moved.shape == original.shape else f"{where} changed shape"
    if isinstance(original, dict):
        if list(moved) != list(original):
            return f"{where} has keys {list(moved)}, expected {list(original)}"
        pairs = [(original[k], moved[k], f"{where}[{k!r}]") for k in original]
    elif isinstance(original, (list, tuple)):
        if len(moved) != len(original):
            return f"{where} has {len(moved)} items, expected {len(original)}"
        pairs = [(o, m, f"{where}[{i}]") for i, (o, m) in enumerate(zip(original, moved))]
    else:
        return None if moved == original else f"{where} changed from {original!r} to {moved!r}"
    return next((p for p in (_moved_problem(*pair) for pair in pairs) if p), None)


@_exercise("00.2", "a seeded generator that leaves the global RNG alone",
           hint="build a torch.Generator() and seed it with .manual_seed(seed); torch.manual_seed "
                "reseeds the global generator that every other cell draws from")
def _own_generator(answer):
    before = torch.get_rng_state()
    g = _call(answer, 123)
    if not isinstance(g, torch.Generator):
        return f"your function returned {type(g).__name__}, expected a torch.Generator"
    if not torch.equal(torch.get_rng_state(), before) or g is torch.default_generator:
        return "the global RNG changed: your function reseeded torch's default generator"
    draws = [torch.randn(3, generator=_call(answer, seed)) for seed in (123, 123, 124)]
    if not torch.equal(draws[0], draws[1]):
        return "two generators made with seed 123 drew different numbers"
    if torch.equal(draws[0], draws[2]):
        return "seeds 123 and 124 drew the same numbers"
    return None


# ---------------------------------------------------------------------------------------------
# 01 · tensor lifecycle

def _storage_cases():
    x = torch.arange(12.).reshape(3, 4)
    return [("x", x, "x[1:]", x[1:]), ("x", x, "x.t()", x.t()), ("x", x, "x.clone()", x.clone()),
            ("x", x, "x.detach()", x.detach()), ("x", x, "x[:, 1]", x[:, 1]),
            ("x", x, "x.contiguous()", x.contiguous()), ("x.t()", x.t(), "x.t().contiguous()", x.t().contiguous()),
            ("x.t()", x.t(), "x.t().reshape(12)", x.t().reshape(12)),
            ("x", x, "torch.arange(12.).reshape(3, 4)", torch.arange(12.).reshape(3, 4))]


@_exercise("01.1", "do two tensors share a storage?",
           hint="compare the storages' addresses, a.untyped_storage().data_ptr(); a.data_ptr() is where "
                "the first element is, which differs for x[1:] although the memory is the same")
def _shares_storage(answer):
    cases = [(f"{name_a}, {name_b}", (a, b), a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
             for name_a, a, name_b, b in _storage_cases()]
    return _first_disagreement(answer, cases, "shares_storage({label}) returned {said!r}, but the answer is {truth}")


@_exercise("01.2", "where an element lives in the storage",
           hint="start at t.storage_offset(), where a view begins in its storage, and move index[d] * "
                "t.stride()[d] elements along each dimension d; strides can be anything, even 0")
def _element_offset(answer):
    base = torch.arange(60.).reshape(3, 4, 5)
    cases = [("base", base, (2, 1, 3)), ("base[1:, ::2]", base[1:, ::2], (1, 1, 4)),
             ("base.permute(2, 0, 1)", base.permute(2, 0, 1), (4, 2, 1)),
             ("base[:, 2].t()", base[:, 2].t(), (3, 1)),
             ("torch.arange(3.).expand(4, 3)", torch.arange(3.).expand(4, 3), (3, 2))]
    cases = [(f"{name}, {index}", (t, index), t[index].storage_offset()) for name, t, index in cases]
    return _first_disagreement(answer, cases, "element_offset({label}) returned {said!r}, expected {truth}")


# ---------------------------------------------------------------------------------------------
# 02 · autograd graph

@_exercise("02.1", "count the nodes backward will run",
           hint="walk grad_fn.next_functions depth first, skip None, and keep a set of the nodes you "
                "have seen: a tensor used twice is reached twice but is one node")
def _count_nodes(answer):
    w = torch.randn(4, requires_grad=True)
    a = w * 2
    diamond = (a.sin() + a.cos()).sum()
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    mlp = F.cross_entropy(model(torch.randn(5, 3)), torch.tensor([0, 1, 0, 1, 1]))
    cases = [(name, (loss,), len(autograd_graph.trace(loss).nodes))
             for name, loss in (("the diamond (a.sin() + a.cos()).sum()", diamond), ("a small MLP's loss", mlp))]
    return _first_disagreement(answer, cases, "count_nodes gave {said!r} for {label}; its graph has {truth} "
                                              "distinct nodes")


@_exercise("02.2", "a gradient without touching .grad",
           hint="torch.autograd.grad(outputs, inputs) returns the gradients as a tuple and leaves "
                ".grad alone; .backward() adds into .grad")
def _grad_without_accumulating(answer):
    w = torch.randn(5, requires_grad=True)
    w.grad = torch.full_like(w, 7.0)
    got = _call(answer, lambda v: (v ** 3).sum(), w)
    if not torch.equal(w.grad, torch.full_like(w, 7.0)):
        return "w.grad changed: your function accumulated into .grad"
    if not isinstance(got, torch.Tensor) or got.shape != w.shape:
        return f"your function returned {type(got).__name__}, expected one tensor shaped like w"
    if not torch.allclose(got, 3 * w.detach() ** 2):
        return "the gradient of (w ** 3).sum() is 3 * w ** 2, and yours differs"
    return None


# ---------------------------------------------------------------------------------------------
# 03 · sandwich model

class _TiedModel(nn.Module):
    """An embedding and an output layer sharing one weight, and a frozen norm."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.norm = nn.LayerNorm(4)
        self.out = nn.Linear(4, 10)
        self.out.weight = self.embed.weight
        self.norm.requires_grad_(False)


@_exercise("03.1", "count the parameters an optimizer will train",
           hint="model.parameters() yields a shared parameter once; keep only those with requires_grad")
def _count_trainable(answer):
    models = (("nn.Linear(784, 128)", nn.Linear(784, 128)),
              ("a model with a tied weight and a frozen LayerNorm", _TiedModel()))
    cases = [(name, (m,), sum(p.numel() for p in m.parameters() if p.requires_grad)) for name, m in models]
    message = "count_trainable gave {said!r} for {label}; an optimizer would train {truth} numbers"
    return _first_disagreement(answer, cases, message)


@_exercise("03.2", "constants that move with the model",
           hint="self.register_buffer('mean', mean) keeps a tensor in state_dict() and moves it with "
                ".to(), without making it a parameter the optimizer trains")
def _normalize_buffers(answer):
    mean, std = torch.tensor([0.5]), torch.tensor([0.25])
    module = _call(answer, mean, std)
    if not isinstance(module, nn.Module):
        return f"Normalize(...) made a {type(module).__name__}, expected an nn.Module"
    x = torch.rand(2, 1, 28, 28)
    if not torch.allclose(_call(module, x), (x - 0.5) / 0.25):
        return "Normalize(mean, std)(x) should be (x - mean) / std"
    if list(module.parameters()):
        return "mean and std are parameters: an optimizer would train them"
    if len(module.state_dict()) < 2:
        return f"state_dict() has {len(module.state_dict())} entries: mean and std would not be saved"
    module.to(torch.float64)
    if _call(module, x.double()).dtype != torch.float64 or any(b.dtype != torch.float64 for b in module.buffers()):
        return "after .to(torch.float64) mean and std are still float32: .to() did not move them"
    return None


@_exercise("03.3", "Kaiming initialisation for a ReLU layer",
           hint="nn.init.kaiming_normal_(layer.weight, nonlinearity='relu') gives std sqrt(2 / fan_in); "
                "then nn.init.zeros_(layer.bias); change the tensors in place")
def _init_kaiming(answer):
    layer = nn.Linear(2048, 512)
    weight = layer.weight
    _call(answer, layer)
    if layer.weight is not weight:
        return "layer.weight is a new object: initialise the existing parameter in place"
    want, got = (2 / 2048) ** 0.5, layer.weight.detach().std().item()
    if abs(got - want) > 0.02 * want:
        return f"the weight's std is {got:.4f}, Kaiming for fan_in 2048 and ReLU gives {want:.4f}"
    if torch.count_nonzero(layer.bias).item():
        return "the bias is not zero"
    return None


# ---------------------------------------------------------------------------------------------
# 04 · data pipeline

class _Sequences(torch.utils.data.Dataset):
    """Variable-length sequences with a label: (tensor of length 1 + i % 5, i % 3)."""

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return torch.arange(1.0, 2.0 + i % 5), i % 3


@_exercise("04.1", "a collate_fn for sequences of different lengths",
           hint="the default collate stacks, which needs equal sizes; pad with "
                "torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True) and return (padded, lengths, labels)")
def _pad_collate(answer):
    loader = torch.utils.data.DataLoader(_Sequences(), batch_size=3, collate_fn=answer)
    for i, batch in enumerate(_call(list, loader)):
        items = [_Sequences()[j] for j in range(3 * i, min(3 * i + 3, 7))]
        seqs = [s for s, _ in items]
        want = (nn.utils.rnn.pad_sequence(seqs, batch_first=True), torch.tensor([len(s) for s in seqs]),
                torch.tensor([label for _, label in items]))
        if not (isinstance(batch, (tuple, list)) and len(batch) == 3):
            return f"batch {i} is a {type(batch).__name__}, expected (padded, lengths, labels)"
        for name, got, truth in zip(("padded", "lengths", "labels"), batch, want):
            same = isinstance(got, torch.Tensor) and got.shape == truth.shape and torch.equal(got, truth.to(got.dtype))
            if not same:
                return f"batch {i}: {name} should be {truth.tolist()}"
    return None


@_exercise("04.2", "how many batches an epoch has",
           hint="ceil(n / batch_size), or floor with drop_last=True")
def _batches_per_epoch(answer):
    grid = itertools.product((0, 2, 9, 10), (3, 5), (False, True))
    cases = [(f"{n}, {size}, drop_last={drop}", (n, size, drop),
              len(torch.utils.data.DataLoader(range(n), batch_size=size, drop_last=drop))) for n, size, drop in grid]
    return _first_disagreement(answer, cases, "batches_per_epoch({label}) returned {said!r}, "
                                              "len(DataLoader) is {truth}")


# ---------------------------------------------------------------------------------------------
# 05 · torch.compile

def _fresh(fn):
    """A copy of `fn` with its own code object, so Dynamo's cache of an earlier run does not apply."""
    return type(fn)(fn.__code__.replace(), fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


def _double_if_positive(x):
    if x.sum().item() > 0:
        return x * 2
    return x - 1


@_exercise("05.1", "remove a data-dependent graph break",
           hint="keep the decision inside the graph: torch.where(condition, a, b) chooses between two "
                "tensors without turning a tensor into a Python bool")
def _no_graph_break(answer):
    import torch._dynamo.exc as dynamo_exc
    if not isinstance(answer, types.FunctionType):
        return f"answer with a Python function, not a {type(answer).__name__}"
    inputs = (torch.arange(1.0, 5.0), torch.arange(-4.0, 0.0))
    for x in inputs:
        if not torch.allclose(_call(answer, x), _double_if_positive(x)):
            return f"for x = {x.tolist()} your function returns something other than the original"
    compiled = torch.compile(_fresh(answer), fullgraph=True, backend="eager")
    try:
        outs = [compiled(x) for x in inputs]
    except dynamo_exc.TorchDynamoException as e:
        return f"torch.compile(fullgraph=True) could not capture one graph ({_first_line(e, 100)})"
    if not all(torch.allclose(o, _double_if_positive(x)) for o, x in zip(outs, inputs)):
        return "the compiled function gives a different result from eager"
    return None


def _sin_of_double(x):
    return (x * 2).sin().sum()


@_exercise("05.2", "one graph for every input size",
           hint="by default the first size is compiled as a constant and the second recompiles with a "
                "symbolic size; dynamic=True makes the first compile symbolic")
def _one_graph(answer):
    from torch._dynamo.testing import CompileCounter
    if not isinstance(answer, dict) or "backend" in answer:
        return "answer with a dict of torch.compile keyword arguments, without 'backend'"
    counter = CompileCounter()
    compiled = _call(torch.compile, _fresh(_sin_of_double), backend=counter, **answer)
    for n in (8, 16, 32):
        x = torch.randn(n)
        if not torch.allclose(_call(compiled, x), _sin_of_double(x)):
            return f"the compiled function is wrong at size {n}"
    if counter.frame_count != 1:
        return f"torch.compile(fn, **answer) compiled {counter.frame_count} graphs for sizes 8, 16, 32, expected 1"
    return None


# ---------------------------------------------------------------------------------------------
# 06 · mixed precision

_AUTOCAST_EXPRESSIONS = ("x @ w", "torch.relu(x)", "torch.relu(x @ w)", "(x @ w) + x[:, :4]",
                         "F.softmax(x @ w, dim=1)", "F.layer_norm(x, (16,))", "F.cross_entropy(x @ w, target)")


@_exercise("06.1", "predict the dtypes under CPU bfloat16 autocast",
           hint="run each expression inside torch.autocast('cpu', dtype=torch.bfloat16) with x, w float32: "
                "only ops on autocast's lists change dtype, and everything else follows its inputs")
def _autocast_dtypes(answer):
    if _wrong_keys(answer, _AUTOCAST_EXPRESSIONS):
        return _wrong_keys(answer, _AUTOCAST_EXPRESSIONS)
    env = {"x": torch.randn(8, 16), "w": torch.randn(16, 4), "target": torch.randint(0, 4, (8,)),
           "torch": torch, "F": F}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        truth = {e: eval(e, env).dtype for e in _AUTOCAST_EXPRESSIONS}  # noqa: S307 - fixed expressions
    wrong = [e for e in _AUTOCAST_EXPRESSIONS if answer[e] != truth[e]]
    return f"{len(wrong)} of {len(truth)} wrong, the first: {wrong[0]}" if wrong else None


@_exercise("06.2", "loss scaling by hand",
           hint="backward on loss * scale, divide every .grad by scale, and if any gradient is inf or nan "
                "skip optimizer.step() (and zero the grads) and return False; else step and return True")
def _scaled_step(answer):
    model = nn.Linear(4, 2)
    x, y = torch.randn(8, 4), torch.randn(8, 2)
    reference = copy.deepcopy(model)
    torch.optim.SGD(reference.parameters(), lr=0.1).zero_grad()
    F.mse_loss(reference(x), y).backward()
    torch.optim.SGD(reference.parameters(), lr=0.1).step()
    stepped = _call(answer, model, F.mse_loss, x, y, torch.optim.SGD(model.parameters(), lr=0.1), 1024.0)
    if stepped is not True:
        return f"with scale 1024 your function returned {stepped!r}, expected True (a step was taken)"
    if not all(torch.allclose(p, q, atol=1e-6) for p, q in zip(model.parameters(), reference.parameters())):
        return "with scale 1024 the step differs from an unscaled step: were the gradients unscaled?"
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    # 2**130 overflows float32 (max about 2**128), so the scaled loss and its gradients are inf
    stepped = _call(answer, model, F.mse_loss, x, y, torch.optim.SGD(model.parameters(), lr=0.1), 2.0 ** 130)
    if stepped is not False:
        return f"with an overflowing scale your function returned {stepped!r}, expected False (step skipped)"
    if not all(torch.equal(p, b) for p, b in zip(model.parameters(), before)):
        return "with an overflowing scale the parameters changed: the step must be skipped"
    return None


# ---------------------------------------------------------------------------------------------
# 07 · DDP

@_exercise("07.1", "which samples each rank reads",
           hint="DistributedSampler (shuffle=False) pads the indices by wrapping around to a multiple of "
                "world_size, then gives rank r every world_size-th index starting at r")
def _shard(answer):
    sampler = torch.utils.data.DistributedSampler
    cases = [(f"{n}, rank={rank}, world_size={world}", (n, rank, world),
              list(sampler(range(n), num_replicas=world, rank=rank, shuffle=False)))
             for n, world in ((10, 3), (8, 4), (3, 4)) for rank in range(world)]
    return _first_disagreement(lambda *args: list(_call(answer, *args)), cases,
                               "shard({label}) gave {said}, expected {truth}")


@_exercise("07.2", "gradient accumulation that equals the big batch",
           hint="the loss is a mean over the batch: divide each micro-batch's loss by the number of "
                "micro-batches before backward, so the summed gradients equal the full batch's")
def _accumulate(answer):
    model = nn.Linear(6, 3)
    x, y = torch.randn(12, 6), torch.randint(0, 3, (12,))
    F.cross_entropy(model(x), y).backward()
    truth = [p.grad.clone() for p in model.parameters()]
    for micro_batches in (3, 4):
        model.zero_grad()
        _call(answer, model, F.cross_entropy, x, y, micro_batches)
        if not all(p.grad is not None and torch.allclose(p.grad, t, atol=1e-6)
                   for p, t in zip(model.parameters(), truth)):
            return f"with {micro_batches} micro-batches the gradients differ from one batch of 12"
    return None


# ---------------------------------------------------------------------------------------------
# 08 · memory

@_exercise("08.1", "record a loss without keeping its graph",
           hint="append loss.item() (a Python float) or loss.detach(); the loss tensor itself keeps the "
                "whole graph and its saved activations alive")
def _record_loss(answer):
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    loss = model(torch.randn(64, 32)).pow(2).mean()
    history = []
    _call(answer, history, loss)
    if len(history) != 1:
        return f"history has {len(history)} entries after one call, expected 1"
    entry = history[0]
    if isinstance(entry, torch.Tensor) and (entry.requires_grad or entry.grad_fn is not None):
        return "the entry still has a grad_fn: it keeps the graph and every saved activation alive"
    if float(entry) != loss.item():
        return f"the entry is {float(entry)}, the loss is {loss.item()}"
    return None


def _saved_bytes(fn) -> tuple[int, torch.Tensor]:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return total, out


@_exercise("08.2", "activation checkpointing",
           hint="wrap each block in torch.utils.checkpoint.checkpoint(block, h, use_reentrant=False): "
                "only the block's input is kept, and its inside is recomputed during backward")
def _checkpointed(answer):
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh())
                           for _ in range(4))
    x = torch.randn(32, 64, requires_grad=True)

    def plain():
        h = x
        for block in blocks:
            h = block(h)
        return h
    plain_bytes, want = _saved_bytes(plain)
    want.sum().backward()
    grads = [p.grad.clone() for p in blocks.parameters()]
    blocks.zero_grad()
    got_bytes, got = _saved_bytes(lambda: _call(answer, blocks, x))
    if not torch.allclose(got, want, atol=1e-6):
        return "the output differs from running the blocks one after another"
    _call(got.sum().backward)
    if not all(torch.allclose(p.grad, g, atol=1e-6) for p, g in zip(blocks.parameters(), grads)):
        return "the gradients differ from the plain forward's"
    if got_bytes > plain_bytes // 2:
        return f"autograd saved {got_bytes} bytes against {plain_bytes} without checkpointing; expected at most half"
    return None


# ---------------------------------------------------------------------------------------------
# 09 · profiling

def _events_within(events, outer):
    start, end = outer.time_range.start, outer.time_range.end
    return [e for e in events if e is not outer and start <= e.time_range.start and e.time_range.end <= end]


@_exercise("09.1", "label the forward and the backward",
           hint="wrap the forward in `with torch.profiler.record_function('forward'):` and loss.backward() "
                "in one named 'backward'")
def _labelled_step(answer):
    from torch.profiler import ProfilerActivity, profile
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    with stderr_capture.without_kineto_lines(), profile(activities=[ProfilerActivity.CPU]) as prof:
        _call(answer, model, torch.randn(8, 16))
    events = list(prof.events())
    for label, inside, what in (("forward", "aten::addmm", "a matrix multiply"),
                                ("backward", "Backward", "a backward node")):
        ranges = [e for e in events if e.name == label]
        if len(ranges) != 1:
            return f"the profile has {len(ranges)} ranges named {label!r}, expected 1"
        if not any(inside in e.name for e in _events_within(events, ranges[0])):
            return f"the {label!r} range contains no {what}"
    return None


@_exercise("09.2", "profile a window of a long run",
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
        prof = _call(answer, train_step, 6)
    if calls != 6:
        return f"train_step ran {calls} times, expected 6"
    if not isinstance(prof, torch.profiler.profile):
        return f"your function returned {type(prof).__name__}, expected the torch.profiler.profile"
    recorded = sum(e.name == "train_step" for e in prof.events())
    if recorded != 2:
        return f"the profile recorded {recorded} train_step ranges, expected 2 (steps 3 and 4)"
    return None


# ---------------------------------------------------------------------------------------------
# 10 · save and export

@_exercise("10.1", "a save that never leaves a half-written file",
           hint="torch.save to a temporary file in the same directory, then os.replace(temp, path); on an "
                "error delete the temporary file and re-raise")
def _save_atomic(answer):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "checkpoint.pt"
        good = {"w": torch.arange(3.0)}
        _call(answer, good, path)
        try:
            answer({"w": torch.ones(3), "not picklable": lambda: 0}, path)
        except Exception:  # noqa: BLE001 - pickle's error, or the caller's own: it must reach the caller
            pass
        else:
            return "saving a lambda did not raise: the error must reach the caller"
        try:
            loaded = torch.load(path, weights_only=True)
        except Exception as e:  # noqa: BLE001 - any failure to read back is the finding
            return f"after the failed save the old checkpoint is unreadable ({_first_line(e, 80)})"
        if not torch.equal(loaded["w"], good["w"]):
            return "after the failed save the checkpoint no longer holds the old weights"
        leftovers = sorted(p.name for p in Path(tmp).iterdir() if p != path)
        return f"files were left behind: {leftovers}" if leftovers else None


def _sandwich() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


@_exercise("10.2", "load a compiled model's checkpoint into a plain model",
           hint="torch.compile wraps the model, so its state_dict keys start with '_orig_mod.'; "
                "strip that prefix, and leave other keys alone")
def _clean_state_dict(answer):
    compiled = torch.compile(_sandwich())    # compiling is lazy: no code is generated here
    for name, state in (("a compiled model's state_dict", compiled.state_dict()),
                        ("a plain model's state_dict", _sandwich().state_dict())):
        fresh = _sandwich()
        keys = _call(fresh.load_state_dict, _call(answer, state), strict=False)
        if keys.missing_keys or keys.unexpected_keys:
            return (f"for {name}, load_state_dict found unexpected keys {keys.unexpected_keys[:2]} "
                    f"and missing keys {keys.missing_keys[:2]}")
        if not all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), state.values())):
            return f"the loaded values differ from {name}"
    return None


@_exercise("10.3", "export with a dynamic batch size",
           hint="dynamic_shapes maps each argument's name to {dimension: torch.export.Dim(name)}, here "
                "dimension 0 of the argument x")
def _dynamic_export(answer):
    model = _ForwardX(_sandwich())
    program = _call(torch.export.export, model, (torch.randn(8, 4),), dynamic_shapes=answer)
    for batch in (3, 17):
        x = torch.randn(batch, 4)
        try:
            out = program.module()(x)
        except Exception as e:  # noqa: BLE001 - a shape guard's error type varies across versions
            return f"the exported program refused batch {batch} ({_first_line(e, 90)})"
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


# ---------------------------------------------------------------------------------------------
# 11 · custom ops

_op_serial = itertools.count()


def _new_op(name: str, kernel):
    """A fresh custom op per judgement, so registering the learner's code never collides."""
    return torch.library.custom_op(f"nbhelpers_exercises::{name}_{next(_op_serial)}", mutates_args=())(kernel)


def _row_diff(x: torch.Tensor) -> torch.Tensor:
    return x[1:] - x[:-1]


def _caused_by_stub(error) -> bool:
    while isinstance(error, BaseException):
        if _is_stub(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _cube(x: torch.Tensor) -> torch.Tensor:
    return x * x * x


def _save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


@_exercise("11.1", "a fake (shape) function for a custom op",
           hint="the fake gets tensors without data: return an empty tensor (x.new_empty(...)) with the "
                "shape the kernel returns, one row fewer than x")
def _fake_row_diff(answer):
    op = _new_op("row_diff", _row_diff)
    op.register_fake(answer)
    report = torch.library.opcheck(op, (torch.randn(5, 3),), raise_exception=False)
    if any(_caused_by_stub(result) for result in report.values()):
        raise _Unanswered
    failed = [(test, result) for test, result in report.items() if result != "SUCCESS"]
    if not failed:
        return None
    test, error = failed[0]
    # a metadata mismatch names the tensors at length first; the shapes or dtypes come after "metadata: "
    detail = (str(error).strip().splitlines() or [""])[0].split("tensor metadata: ")[-1][:160]
    return f"opcheck's {test} failed: {detail}"


@_exercise("11.2", "a backward for a custom op",
           hint="d(x**3)/dx = 3 * x**2; take x from ctx.saved_tensors and multiply the incoming grad by "
                "that derivative")
def _backward_cube(answer):
    op = _new_op("cube", _cube)
    op.register_autograd(answer, setup_context=_save_input)
    x = torch.randn(6, dtype=torch.float64, requires_grad=True)
    ok = _call(torch.autograd.gradcheck, op, (x,), raise_exception=False)    # runs the learner's backward
    return None if ok else "gradcheck: your gradient differs from finite differences of x ** 3"


# ---------------------------------------------------------------------------------------------
# 12 · error casebook

def _backward_twice():
    y = (torch.ones(2, requires_grad=True) * 2).sum()
    y.backward()
    y.backward()


def _load_unsafe():
    with tempfile.TemporaryDirectory() as tmp:
        torch.save({"w": torch.ones(1), "config": _TiedModel}, Path(tmp) / "f.pt")
        torch.load(Path(tmp) / "f.pt", weights_only=True)


_SNIPPETS = {
    "backward twice": _backward_twice,
    "view of a transpose": lambda: torch.ones(2, 3).t().view(6),
    "index 5 of a 3-element tensor": lambda: torch.ones(3)[5],
    "float64 input to a float32 layer": lambda: nn.Linear(3, 2)(torch.ones(1, 3, dtype=torch.float64)),
    "prefetch_factor without workers": lambda: torch.utils.data.DataLoader(range(4), prefetch_factor=2),
    "weights_only load of a class": _load_unsafe,
}


@_exercise("12.1", "name the exception",
           hint="run each snippet inside try/except Exception as e and look at type(e): the casebook's "
                "errors are not all RuntimeError")
def _name_exceptions(answer):
    truth = {name: _raised_type(snippet) for name, snippet in _SNIPPETS.items()}
    if _wrong_keys(answer, truth):
        return _wrong_keys(answer, truth)
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


def _sigmoid_then_double(x):
    y = torch.sigmoid(x)
    y.mul_(2)
    return y.sum()


@_exercise("12.2", "fix an in-place modification of a saved tensor",
           hint="sigmoid saves its output for backward, so changing that output in place breaks backward: "
                "make the doubled value a new tensor")
def _fixed_in_place(answer):
    x = torch.randn(5, requires_grad=True)
    s = torch.sigmoid(x.detach())
    out = _call(answer, x)
    if not isinstance(out, torch.Tensor) or not torch.allclose(out, (2 * s).sum()):
        return "the result differs from (2 * torch.sigmoid(x)).sum()"
    _call(out.backward)
    if not torch.allclose(x.grad, 2 * s * (1 - s)):
        return "the gradient differs from 2 * sigmoid(x) * (1 - sigmoid(x))"
    return None
