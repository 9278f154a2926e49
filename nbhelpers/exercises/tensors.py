"""Judges for the exercises on tensors themselves: where they live (00.1), the generators that fill
them (00.2), and their storages and strides (01.1, 01.2)."""
from __future__ import annotations

import torch

from nbhelpers.exercises.registry import call, draw, exercise, first_disagreement, inputs, ops_run


# notebook 00 · devices and generators

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


# notebook 01 · storages and strides

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
