"""Judges for the exercises on nn.Module's state: parameters (03.1), buffers (03.2), initialisation
(03.3), and state_dict keys across torch.compile's wrapper (10.2)."""
from __future__ import annotations

import copy

import torch
from torch import nn

from nbhelpers.exercises.registry import call, draw, exercise, first_disagreement, inputs


# notebook 03 · parameters, buffers, initialisation

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


# notebook 10 · a compiled model's state_dict

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
