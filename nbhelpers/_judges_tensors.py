"""Judges for the exercises of notebooks 00-04: devices and RNGs, storages, the autograd graph, modules, data."""
from __future__ import annotations

import itertools
from unittest import mock

import torch
import torch.nn.functional as F
from torch import nn

from nbhelpers import autograd_graph
from nbhelpers._judging import call, draw, exercise, first_disagreement, inputs, ops_run


# 00 · environment

@exercise("00.1", "move a nested batch to a device",
          hint="recurse into dicts, lists and tuples (keeping their types), call .to(device) on each "
               "tensor, and return anything else unchanged")
def _nested_to_device(answer):
    fixed = {"image": torch.ones(2, 3), "meta": {"ids": torch.arange(2), "name": "digits"},
             "pair": (torch.zeros(1), 7), "items": [torch.ones(1), None]}
    for batch in (fixed, *inputs(lambda g, k: _nested(g, 1 + k % 3))):
        # the meta device exists on every machine, so a move is visible even without a GPU
        if problem := _moved_problem(batch, call(answer, batch, torch.device("meta")), "batch"):
            return problem
        if any(t.device.type != "cpu" for t in _tensors(batch)):
            return "your function changed the batch it was given: build new containers, leave the old ones alone"
    return None


_DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.float16)


def _nested(g, depth: int):
    """A random batch: tensors (any dtype, size-0 and size-1 dims, views) and plain values, nested."""
    kind = draw(g, 0, 5) if depth else draw(g, 0, 2)
    if kind <= 1:
        t = torch.randn(tuple(draw(g, 0, 3) for _ in range(draw(g, 0, 3))), generator=g).to(_DTYPES[draw(g, 0, 4)])
        return t.t() if t.dim() == 2 and kind == 1 else t
    if kind == 2:
        return (None, 7, "digits", 2.5)[draw(g, 0, 3)]
    children = [_nested(g, depth - 1) for _ in range(draw(g, 0, 3))]
    return {3: lambda c: {f"k{i}": v for i, v in enumerate(c)}, 4: list, 5: tuple}[kind](children)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        return [obj]
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return [t for v in values for t in _tensors(v)]


def _moved_problem(original, moved, where: str) -> str | None:
    if type(moved) is not type(original):
        return f"{where} became a {type(moved).__name__}, expected a {type(original).__name__}"
    if isinstance(original, torch.Tensor):
        if moved.device.type != "meta":
            return f"{where} is on {moved.device}, expected the meta device"
        if moved.dtype != original.dtype:
            return f"{where} became {moved.dtype}, expected {original.dtype}: move it, do not convert it"
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
    seeds = [0, 1, 2**63 - 1, 2**64 - 1, *inputs(lambda g, k: int(torch.randint(0, 2**62, (1,), generator=g)), 21)]
    for seed in seeds:
        g = call(answer, seed)
        if g.initial_seed() != seed or not torch.equal(torch.rand(4, generator=g),
                                                       torch.rand(4, generator=torch.Generator().manual_seed(seed))):
            return f"the generator for seed {seed} is seeded with {g.initial_seed()}: seed it with the seed given"
    return None


# 01 · tensor lifecycle

def _storage_cases():
    x = torch.arange(12.).reshape(3, 4)
    return [("x", x, "x[1:]", x[1:]), ("x", x, "x.t()", x.t()), ("x", x, "x.clone()", x.clone()),
            ("x", x, "x.detach()", x.detach()), ("x", x, "x[:, 1]", x[:, 1]),
            ("x", x, "x.contiguous()", x.contiguous()), ("x.t()", x.t(), "x.t().contiguous()", x.t().contiguous()),
            ("x.t()", x.t(), "x.t().reshape(12)", x.t().reshape(12)),
            ("x", x, "torch.arange(12.).reshape(3, 4)", torch.arange(12.).reshape(3, 4))]


def _random_view(g, x):
    """A random view of x (its name, the view), or a copy when the draw says so."""
    choice = draw(g, 0, 6)
    return [("x[1:]", lambda: x[1:]), ("x.t()", lambda: x.t()), ("x[:, ::2]", lambda: x[:, ::2]),
            ("x.clone()", lambda: x.clone()), ("x[-1]", lambda: x[-1]), ("x.t().contiguous()", lambda: x.t().contiguous()),
            ("x.to(torch.float64)", lambda: x.to(torch.float64))][choice]


def _random_pair(g, k):
    x = torch.randn(draw(g, 2, 6), draw(g, 2, 6), generator=g)
    name_a, make_a = _random_view(g, x) if k % 2 else ("x", lambda: x)
    name_b, make_b = _random_view(g, x)
    return (name_a, make_a(), name_b, make_b())


@exercise("01.1", "do two tensors share a storage?",
          hint="compare the storages' addresses, a.untyped_storage().data_ptr(); a.data_ptr() is where "
               "the first element is, which differs for x[1:] although the memory is the same")
def _shares_storage(answer):
    pairs = [*_storage_cases(), *[(nb, b, na, a) for na, a, nb, b in _storage_cases()],     # both orders
             *inputs(_random_pair)]
    cases = [(f"{name_a}, {name_b}", (a, b), a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
             for name_a, a, name_b, b in pairs]
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
    cases += inputs(_random_indexed)
    cases = [(f"{name}, {index}", (t, index), t[index].storage_offset()) for name, t, index in cases]
    if problem := first_disagreement(answer, cases, "element_offset({label}) returned {said!r}, expected {truth}"):
        return problem
    base = torch.arange(60.).reshape(3, 4, 5)[1:, ::2]
    ran = ops_run(answer, base, (1, 1, 4))
    if ran:
        return (f"your answer runs tensor ops ({ran[0]} ...): compute the offset from t.storage_offset() and "
                "t.stride(), without indexing the tensor")
    return None


def _random_indexed(g, k):
    dims = draw(g, 1, 4)
    base = torch.arange(float(6 ** dims)).reshape(*[6] * dims).to((torch.float32, torch.int8, torch.float64)[k % 3])
    view, name = base, "base"
    if dims > 1 and k % 2:
        order = torch.randperm(dims, generator=g).tolist()
        view, name = view.permute(*order), f"base.permute{tuple(order)}"
    start, step = draw(g, 0, 2), draw(g, 1, 3)
    view, name = view[start::step], f"{name}[{start}::{step}]"
    index = tuple(draw(g, 0, size - 1) for size in view.shape)
    return (name, view, index)


# 02 · autograd graph

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


def _random_model(g, k):
    """Layers with random sizes and biases, some frozen, one sometimes registered twice or tied."""
    layers = [nn.Linear(draw(g, 1, 9), draw(g, 1, 9), bias=bool(draw(g, 0, 1))) for _ in range(draw(g, 1, 4))]
    layers += [nn.LayerNorm(3, elementwise_affine=bool(k % 2)), nn.BatchNorm1d(2)]
    for layer in layers:
        if draw(g, 0, 3) == 0:
            layer.requires_grad_(False)
    if k % 3 == 0:
        layers.append(layers[0])                                    # one module, registered twice
    return (f"random model {k}", nn.Sequential(*layers))


@exercise("03.1", "count the parameters an optimizer will train",
          hint="model.parameters() yields a shared parameter once; keep only those with requires_grad")
def _count_trainable(answer):
    models = (("nn.Linear(784, 128)", nn.Linear(784, 128)),
              ("a model with a tied weight and a frozen LayerNorm", _TiedModel()), *inputs(_random_model))
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
    for k, (m, sd) in enumerate(inputs(lambda g, k: (torch.rand(1, generator=g), 0.1 + torch.rand(1, generator=g)))):
        source, target = call(answer, m, sd), call(answer, torch.tensor([0.0]), torch.tensor([1.0]))
        call(target.load_state_dict, source.state_dict())
        x = torch.rand(1 + k % 4, 1, 5, 5, generator=torch.Generator().manual_seed(k))
        if not torch.allclose(call(target, x), (x - m) / sd):
            return ("loading a Normalize's state_dict into another did not change its output: the forward must "
                    "use the saved buffers, self.mean and self.std")
    meta = call(answer, torch.tensor([0.5]), torch.tensor([0.25])).to("meta")
    try:
        meta(torch.rand(2, 1, 3, 3, device="meta"))
    except Exception:  # noqa: BLE001 - a tensor that did not move is the finding
        return "after .to('meta') the forward still uses a tensor on the CPU: use the buffers themselves"
    return None


@exercise("03.3", "Kaiming initialisation for a ReLU layer",
          hint="nn.init.kaiming_normal_(layer.weight, nonlinearity='relu') gives std sqrt(2 / fan_in); "
               "then nn.init.zeros_(layer.bias); change the tensors in place")
def _init_kaiming(answer):
    sizes = [(2048, 512), *inputs(lambda g, k: ((256, 512, 1024)[k % 3], draw(g, 64, 128)), 24)]
    for fan_in, fan_out in sizes:
        layer = nn.Linear(fan_in, fan_out)
        held = [(p, p.untyped_storage().data_ptr()) for p in (layer.weight, layer.bias)]
        call(answer, layer)
        if layer.weight is not held[0][0] or layer.bias is not held[1][0]:
            return "layer.weight or layer.bias is a new object: initialise the existing parameters in place"
        if any(p.untyped_storage().data_ptr() != ptr for p, ptr in held):
            return "a parameter's storage was replaced (.data = ...): initialise it in place, with nn.init"
        want, got = (2 / fan_in) ** 0.5, layer.weight.detach().std().item()
        if abs(got - want) > 0.02 * want:
            return f"the weight's std is {got:.4f}, Kaiming for fan_in {fan_in} and ReLU gives {want:.4f}"
        if torch.count_nonzero(layer.bias).item():
            return "the bias is not zero"
    return None


# 04 · data pipeline

class _Sequences(torch.utils.data.Dataset):
    """Variable-length sequences with a label: (values, label), lengths 0 to 8, some values exactly 0."""

    def __init__(self, seed: int, dtype=torch.float32):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(draw(g, 1, 9)):
            values = torch.randn(draw(g, 0, 8), generator=g, dtype=dtype)
            values[::3] = 0.0                                              # a padding value inside the data
            self.items.append((values, draw(g, 0, 9)))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


@exercise("04.1", "a collate_fn for sequences of different lengths",
          hint="the default collate stacks, which needs equal sizes; pad with "
               "torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True) and return (padded, lengths, labels)")
def _pad_collate(answer):
    for k, data in enumerate(inputs(lambda g, k: _Sequences(k, (torch.float32, torch.float64)[k % 2]))):
        size = 1 + (k + 2) % 4                                              # 3 first
        loader = torch.utils.data.DataLoader(data, batch_size=size, collate_fn=answer)
        for i, batch in enumerate(call(list, loader)):
            items = data.items[size * i:size * i + size]
            seqs = [s for s, _ in items]
            want = (nn.utils.rnn.pad_sequence(seqs, batch_first=True), torch.tensor([len(s) for s in seqs]),
                    torch.tensor([label for _, label in items]))
            if not (isinstance(batch, (tuple, list)) and len(batch) == 3):
                return f"batch {i} is a {type(batch).__name__}, expected (padded, lengths, labels)"
            for name, got, truth in zip(("padded", "lengths", "labels"), batch, want):
                if not (isinstance(got, torch.Tensor) and got.shape == truth.shape and got.dtype == truth.dtype
                        and torch.equal(got, truth)):
                    return (f"batch {i} of dataset {k}: {name} should be {truth.dtype} {tuple(truth.shape)} "
                            f"{[round(v, 3) for v in truth.flatten().tolist()][:8]}")
    return None


@exercise("04.2", "how many batches an epoch has",
          hint="ceil(n / batch_size), or floor with drop_last=True")
def _batches_per_epoch(answer):
    grid = [*itertools.product((0, 2, 9, 10), (3, 5), (False, True)),
            *itertools.product((1, 6, 7, 8, 14), (7,), (False, True)),
            *inputs(lambda g, k: (draw(g, 0, 10**6), draw(g, 1, 1000), bool(k % 2)), 8), (10**12, 7, False)]
    cases = [(f"{n}, {size}, drop_last={drop}", (n, size, drop),
              len(torch.utils.data.DataLoader(range(n), batch_size=size, drop_last=drop))) for n, size, drop in grid]
    built = []
    real_init = torch.utils.data.DataLoader.__init__

    def spy(self, *args, **kwargs):
        built.append(1)
        real_init(self, *args, **kwargs)
    with mock.patch.object(torch.utils.data.DataLoader, "__init__", spy):
        problem = first_disagreement(answer, cases, "batches_per_epoch({label}) returned {said!r}, "
                                                     "len(DataLoader) is {truth}")
    if problem:
        return problem
    return (f"your answer built {len(built)} DataLoaders: compute the count from n and batch_size alone"
            if built else None)


# 02 · the graph view: which node keeps the most memory for backward

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
