"""Judges for the exercises of notebooks 00-04: devices and RNGs, storages, the autograd graph, modules, data."""
from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import autograd_graph
from nbhelpers._judging import call, exercise, first_disagreement


# 00 · environment

@exercise("00.1", "move a nested batch to a device",
          hint="recurse into dicts, lists and tuples (keeping their types), call .to(device) on each "
               "tensor, and return anything else unchanged")
def _nested_to_device(answer):
    batch = {"image": torch.ones(2, 3), "meta": {"ids": torch.arange(2), "name": "digits"},
             "pair": (torch.zeros(1), 7), "items": [torch.ones(1), None]}
    # the meta device exists on every machine, so a move is visible even without a GPU
    return _moved_problem(batch, call(answer, batch, torch.device("meta")), "batch")


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


@exercise("00.2", "a seeded generator that leaves the global RNG alone",
          hint="build a torch.Generator() and seed it with .manual_seed(seed); torch.manual_seed "
               "reseeds the global generator that every other cell draws from")
def _own_generator(answer):
    before = torch.get_rng_state()
    g = call(answer, 123)
    if not isinstance(g, torch.Generator):
        return f"your function returned {type(g).__name__}, expected a torch.Generator"
    if not torch.equal(torch.get_rng_state(), before) or g is torch.default_generator:
        return "the global RNG changed: your function reseeded torch's default generator"
    draws = [torch.randn(3, generator=call(answer, seed)) for seed in (123, 123, 124)]
    if not torch.equal(draws[0], draws[1]):
        return "two generators made with seed 123 drew different numbers"
    if torch.equal(draws[0], draws[2]):
        return "seeds 123 and 124 drew the same numbers"
    return None


# 01 · tensor lifecycle

def _storage_cases():
    x = torch.arange(12.).reshape(3, 4)
    return [("x", x, "x[1:]", x[1:]), ("x", x, "x.t()", x.t()), ("x", x, "x.clone()", x.clone()),
            ("x", x, "x.detach()", x.detach()), ("x", x, "x[:, 1]", x[:, 1]),
            ("x", x, "x.contiguous()", x.contiguous()), ("x.t()", x.t(), "x.t().contiguous()", x.t().contiguous()),
            ("x.t()", x.t(), "x.t().reshape(12)", x.t().reshape(12)),
            ("x", x, "torch.arange(12.).reshape(3, 4)", torch.arange(12.).reshape(3, 4))]


@exercise("01.1", "do two tensors share a storage?",
          hint="compare the storages' addresses, a.untyped_storage().data_ptr(); a.data_ptr() is where "
               "the first element is, which differs for x[1:] although the memory is the same")
def _shares_storage(answer):
    cases = [(f"{name_a}, {name_b}", (a, b), a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
             for name_a, a, name_b, b in _storage_cases()]
    return first_disagreement(answer, cases, "shares_storage({label}) returned {said!r}, but the answer is {truth}")


@exercise("01.2", "where an element lives in the storage",
          hint="start at t.storage_offset(), where a view begins in its storage, and move index[d] * "
               "t.stride()[d] elements along each dimension d; strides can be anything, even 0")
def _element_offset(answer):
    base = torch.arange(60.).reshape(3, 4, 5)
    cases = [("base", base, (2, 1, 3)), ("base[1:, ::2]", base[1:, ::2], (1, 1, 4)),
             ("base.permute(2, 0, 1)", base.permute(2, 0, 1), (4, 2, 1)),
             ("base[:, 2].t()", base[:, 2].t(), (3, 1)),
             ("torch.arange(3.).expand(4, 3)", torch.arange(3.).expand(4, 3), (3, 2))]
    cases = [(f"{name}, {index}", (t, index), t[index].storage_offset()) for name, t, index in cases]
    return first_disagreement(answer, cases, "element_offset({label}) returned {said!r}, expected {truth}")


# 02 · autograd graph

@exercise("02.1", "count the nodes backward will run",
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
    return first_disagreement(answer, cases, "count_nodes gave {said!r} for {label}; its graph has {truth} "
                                              "distinct nodes")


@exercise("02.2", "a gradient without touching .grad",
          hint="torch.autograd.grad(outputs, inputs) returns the gradients as a tuple and leaves "
               ".grad alone; .backward() adds into .grad")
def _grad_without_accumulating(answer):
    w = torch.randn(5, requires_grad=True)
    w.grad = torch.full_like(w, 7.0)
    got = call(answer, lambda v: (v ** 3).sum(), w)
    if not torch.equal(w.grad, torch.full_like(w, 7.0)):
        return "w.grad changed: your function accumulated into .grad"
    if not isinstance(got, torch.Tensor) or got.shape != w.shape:
        return f"your function returned {type(got).__name__}, expected one tensor shaped like w"
    if not torch.allclose(got, 3 * w.detach() ** 2):
        return "the gradient of (w ** 3).sum() is 3 * w ** 2, and yours differs"
    return None


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


@exercise("03.1", "count the parameters an optimizer will train",
          hint="model.parameters() yields a shared parameter once; keep only those with requires_grad")
def _count_trainable(answer):
    models = (("nn.Linear(784, 128)", nn.Linear(784, 128)),
              ("a model with a tied weight and a frozen LayerNorm", _TiedModel()))
    cases = [(name, (m,), sum(p.numel() for p in m.parameters() if p.requires_grad)) for name, m in models]
    message = "count_trainable gave {said!r} for {label}; an optimizer would train {truth} numbers"
    return first_disagreement(answer, cases, message)


@exercise("03.2", "constants that move with the model",
          hint="self.register_buffer('mean', mean) keeps a tensor in state_dict() and moves it with "
               ".to(), without making it a parameter the optimizer trains")
def _normalize_buffers(answer):
    mean, std = torch.tensor([0.5]), torch.tensor([0.25])
    module = call(answer, mean, std)
    if not isinstance(module, nn.Module):
        return f"Normalize(...) made a {type(module).__name__}, expected an nn.Module"
    x = torch.rand(2, 1, 28, 28)
    if not torch.allclose(call(module, x), (x - 0.5) / 0.25):
        return "Normalize(mean, std)(x) should be (x - mean) / std"
    if list(module.parameters()):
        return "mean and std are parameters: an optimizer would train them"
    if len(module.state_dict()) < 2:
        return f"state_dict() has {len(module.state_dict())} entries: mean and std would not be saved"
    module.to(torch.float64)
    if call(module, x.double()).dtype != torch.float64 or any(b.dtype != torch.float64 for b in module.buffers()):
        return "after .to(torch.float64) mean and std are still float32: .to() did not move them"
    return None


@exercise("03.3", "Kaiming initialisation for a ReLU layer",
          hint="nn.init.kaiming_normal_(layer.weight, nonlinearity='relu') gives std sqrt(2 / fan_in); "
               "then nn.init.zeros_(layer.bias); change the tensors in place")
def _init_kaiming(answer):
    layer = nn.Linear(2048, 512)
    weight = layer.weight
    call(answer, layer)
    if layer.weight is not weight:
        return "layer.weight is a new object: initialise the existing parameter in place"
    want, got = (2 / 2048) ** 0.5, layer.weight.detach().std().item()
    if abs(got - want) > 0.02 * want:
        return f"the weight's std is {got:.4f}, Kaiming for fan_in 2048 and ReLU gives {want:.4f}"
    if torch.count_nonzero(layer.bias).item():
        return "the bias is not zero"
    return None


# 04 · data pipeline

class _Sequences(torch.utils.data.Dataset):
    """Variable-length sequences with a label: (tensor of length 1 + i % 5, i % 3)."""

    def __len__(self):
        return 7

    def __getitem__(self, i):
        return torch.arange(1.0, 2.0 + i % 5), i % 3


@exercise("04.1", "a collate_fn for sequences of different lengths",
          hint="the default collate stacks, which needs equal sizes; pad with "
               "torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True) and return (padded, lengths, labels)")
def _pad_collate(answer):
    loader = torch.utils.data.DataLoader(_Sequences(), batch_size=3, collate_fn=answer)
    for i, batch in enumerate(call(list, loader)):
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


@exercise("04.2", "how many batches an epoch has",
          hint="ceil(n / batch_size), or floor with drop_last=True")
def _batches_per_epoch(answer):
    grid = itertools.product((0, 2, 9, 10), (3, 5), (False, True))
    cases = [(f"{n}, {size}, drop_last={drop}", (n, size, drop),
              len(torch.utils.data.DataLoader(range(n), batch_size=size, drop_last=drop))) for n, size, drop in grid]
    return first_disagreement(answer, cases, "batches_per_epoch({label}) returned {said!r}, "
                                              "len(DataLoader) is {truth}")
